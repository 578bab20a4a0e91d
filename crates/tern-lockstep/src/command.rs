//! Runs one command of a release's plan: an argument vector (no shell) in the release's
//! directory, with the update's facts in its environment, a timeout, and the tail of its
//! output kept for the error message.

use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_process::{Cancel, End, Options};

/// How much of a failed command's output goes into the status message.
const TAIL: usize = 1024;
/// How much of the start of a command's output is kept (logged at debug level).
const LOGGED: usize = 64 * 1024;

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
/// The command runs on a blocking thread (tern-process's runner); dropping this future
/// (the worker stopped) kills the command's process group.
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
    let mut cmd = Command::new(&prog);
    cmd.args(args)
        .current_dir(env.release_dir)
        .env("TERN_LOCKSTEP_VERSION", env.version)
        .env("TERN_LOCKSTEP_SERVER", env.server.to_string())
        .env("TERN_LOCKSTEP_STEP", env.step.to_string())
        .env("TERN_LOCKSTEP_COMPONENT", env.component)
        .env("TERN_LOCKSTEP_RELEASE_DIR", env.release_dir);
    let cancel = Cancel::new();
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    // A command that ended is not followed by a kill of its group: a step may start a
    // service that runs on. The end kept is wider than TAIL: the message trims trailing
    // blank lines first.
    let options = Options::new(timeout).keep(LOGGED, 4 * TAIL).cancel(cancel);
    let finished = tokio::task::spawn_blocking(move || tern_process::run(&mut cmd, options))
        .await
        .map_err(|e| format!("{what}: running {}: {e}", prog.display()))?
        .map_err(|e| match e {
            tern_process::Error::Spawn { source, .. } => {
                format!("{what}: cannot start {}: {source}", prog.display())
            }
            tern_process::Error::Wait { source, .. } => {
                format!("{what}: waiting for {}: {source}", prog.display())
            }
        })?;
    match finished.end {
        End::TimedOut(_) | End::Cancelled => Err(format!(
            "{what}: {} did not finish within {}s; killed",
            argv.join(" "),
            timeout.as_secs()
        )),
        End::Exited(0) => {
            tracing::info!(what, command = %argv.join(" "), "command succeeded");
            let output = format!("{}{}", finished.stdout.text(), finished.stderr.text());
            tracing::debug!(what, output = %output, "its output");
            Ok(())
        }
        end => {
            // The last bytes of stdout then stderr: exact, as each stream's end is kept.
            let mut output = finished.stdout.bytes();
            output.extend_from_slice(&finished.stderr.bytes());
            let text = String::from_utf8_lossy(&output);
            let text = text.trim();
            let start = text
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| text.len() - i <= TAIL)
                .unwrap_or(text.len());
            Err(format!(
                "{what}: {} failed ({end}): {}",
                argv.join(" "),
                &text[start..]
            ))
        }
    }
}

/// Cancels the command when the future running it is dropped.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
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

    fn env(dir: &Path) -> Env<'_> {
        Env {
            version: "1.0.0",
            server: 1,
            step: 1,
            component: "a",
            release_dir: dir,
        }
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// The pid a command wrote to `file`, waited for with a deadline.
    async fn pid_in(file: &Path) -> u32 {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(pid) = std::fs::read_to_string(file)
                .unwrap_or_default()
                .trim()
                .parse()
            {
                return pid;
            }
            assert!(
                std::time::Instant::now() < until,
                "no pid in {}",
                file.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether `pid` still runs (not a zombie), waited on with a deadline until it
    /// does not.
    async fn still_runs(pid: u32) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let runs = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']));
            if !runs || std::time::Instant::now() >= until {
                return runs;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_failure_names_the_command_its_end_and_its_output_tail() {
        let dir = tempfile::tempdir().unwrap();
        let e = run(
            "check",
            &sh("echo out; echo boom >&2; exit 3"),
            &env(dir.path()),
            Duration::from_secs(60),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            "check: sh -c echo out; echo boom >&2; exit 3 failed (exited with 3): out\nboom"
        );
    }

    #[tokio::test]
    async fn at_the_timeout_the_command_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 100 & echo $! > '{}'; sleep 100", pidfile.display());
        let e = run(
            "start",
            &sh(&script),
            &env(dir.path()),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(e.ends_with("did not finish within 1s; killed"), "{e}");
        let child = pid_in(&pidfile).await;
        assert!(!still_runs(child).await, "{child} outlived the timeout");
    }

    #[tokio::test]
    async fn a_dropped_run_kills_its_command() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("cmd.pid");
        let script = format!("echo $$ > '{}'; exec sleep 100", pidfile.display());
        let argv = sh(&script);
        let e = env(dir.path());
        let mut running = Box::pin(run("start", &argv, &e, Duration::from_secs(600)));
        let pid = tokio::select! {
            _ = &mut running => panic!("the command ended by itself"),
            pid = pid_in(&pidfile) => pid,
        };
        drop(running);
        assert!(!still_runs(pid).await, "{pid} outlived its dropped run");
    }
}
