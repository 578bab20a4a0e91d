//! Runs one command of a release's plan: an argument vector (no shell) in the release's
//! directory, with the update's facts in its environment, a timeout, and the tail of its
//! output kept for the error message.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// How much of a failed command's output goes into the status message.
const TAIL: usize = 1024;

/// The facts a command is given (`TERN_LOCKSTEP_*`).
pub(crate) struct Env<'a> {
    pub(crate) version: &'a str,
    pub(crate) server: u32,
    pub(crate) step: u32,
    pub(crate) component: &'a str,
    pub(crate) release_dir: &'a Path,
}

/// `argv[0]` with a slash is a path inside the release; without one it is looked up on
/// `PATH`. Paths may not leave the release.
fn program(release_dir: &Path, argv0: &str) -> Result<PathBuf, String> {
    if !argv0.contains('/') {
        return Ok(PathBuf::from(argv0));
    }
    let p = Path::new(argv0);
    if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!(
            "{argv0:?} leaves the release: give a path inside it (bin/x) or a program on PATH"
        ));
    }
    Ok(release_dir.join(p))
}

/// Runs `argv`; `Err` says what failed (exit status or timeout, and the output's tail).
pub(crate) async fn run(
    what: &str,
    argv: &[String],
    env: &Env<'_>,
    timeout: Duration,
) -> Result<(), String> {
    let Some((argv0, args)) = argv.split_first() else {
        return Err(format!("{what}: empty command"));
    };
    let prog = program(env.release_dir, argv0).map_err(|e| format!("{what}: {e}"))?;
    let mut child = Command::new(&prog)
        .args(args)
        .current_dir(env.release_dir)
        .env("TERN_LOCKSTEP_VERSION", env.version)
        .env("TERN_LOCKSTEP_SERVER", env.server.to_string())
        .env("TERN_LOCKSTEP_STEP", env.step.to_string())
        .env("TERN_LOCKSTEP_COMPONENT", env.component)
        .env("TERN_LOCKSTEP_RELEASE_DIR", env.release_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{what}: cannot start {}: {e}", prog.display()))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let collect = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut out).await;
        }
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut err).await;
        }
        out.extend_from_slice(&err);
        out
    };
    let waited = tokio::time::timeout(timeout, async {
        let (output, status) = tokio::join!(collect, child.wait());
        (output, status)
    })
    .await;
    match waited {
        Err(_) => {
            let _ = child.kill().await;
            Err(format!(
                "{what}: {} did not finish within {}s; killed",
                argv.join(" "),
                timeout.as_secs()
            ))
        }
        Ok((_, Err(e))) => Err(format!("{what}: waiting for {}: {e}", prog.display())),
        Ok((output, Ok(status))) if status.success() => {
            tracing::info!(what, command = %argv.join(" "), "command succeeded");
            tracing::debug!(what, output = %String::from_utf8_lossy(&output), "its output");
            Ok(())
        }
        Ok((output, Ok(status))) => {
            let text = String::from_utf8_lossy(&output);
            let text = text.trim();
            let start = text
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| text.len() - i <= TAIL)
                .unwrap_or(text.len());
            Err(format!(
                "{what}: {} failed ({status}): {}",
                argv.join(" "),
                &text[start..]
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_stay_inside_the_release() {
        let dir = Path::new("/r");
        assert_eq!(program(dir, "bin/a").unwrap(), PathBuf::from("/r/bin/a"));
        assert_eq!(program(dir, "sh").unwrap(), PathBuf::from("sh"));
        assert!(program(dir, "/bin/sh").is_err());
        assert!(program(dir, "bin/../../etc/x").is_err());
    }
}
