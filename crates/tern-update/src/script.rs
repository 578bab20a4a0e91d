//! The `local-script` installer's runner: the operator's script, sent by ternd in an
//! install instruction, run by its shell from a private file, never through `sh -c`
//! with text put together here. The target reaches it only through environment
//! variables whose values `render_env` checked; the rest of the environment is a fixed
//! base. It runs through tern-process's runner in a process group of its own, killed
//! whole at its timeout (and when it ends: what it left behind in its group dies with
//! it, as systemd would kill it with the updater's cgroup). What it writes is logged
//! line by line, bounded.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_process::{End, Options, Stream};

use crate::error::{Error, IoContext};
use crate::fsutil;
use crate::log;

/// The environment every script gets, besides the rendered variables.
pub(crate) const BASE_ENV: [(&str, &str); 2] =
    [("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), ("LANG", "C")];

/// At most this much of a script's output is logged; the rest is read and dropped.
pub(crate) const MAX_LOGGED: usize = 64 * 1024;
/// Lines of stderr kept for the error of a failed script.
const TAIL_LINES: usize = 5;
/// Characters of each kept line.
const TAIL_LINE_CHARS: usize = 300;

/// Why a script did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ScriptFailure {
    #[error("script exited with {code}{}", colon(tail))]
    Exited { code: i32, tail: String },
    #[error("script killed by signal {signal}{}", colon(tail))]
    Signaled { signal: i32, tail: String },
    #[error(
        "script timed out after {}s: killed with its process group{}",
        timeout.as_secs_f64(),
        colon(tail)
    )]
    TimedOut { timeout: Duration, tail: String },
    #[error(
        "script syntax check failed ({shell} -n exited with {code}){}",
        colon(tail)
    )]
    Syntax {
        shell: String,
        code: String,
        tail: String,
    },
    #[error("cannot run the shell {shell}: {source}")]
    Spawn {
        shell: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the script: {0}")]
    Write(#[source] Error),
    #[error("waiting for the script: {0}")]
    Wait(#[source] std::io::Error),
}

fn colon(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

/// One script to run.
pub(crate) struct Script<'a> {
    pub(crate) shell: &'a str,
    pub(crate) text: &'a str,
    /// The rendered variables (checked by `render_env`).
    pub(crate) env: &'a [(String, String)],
    pub(crate) timeout: Duration,
    /// `shell -n`: the syntax only, nothing executed.
    pub(crate) dry_run: bool,
    /// Where the private script file is written (tern-update's state dir).
    pub(crate) dir: &'a Path,
    /// Names the script in log lines.
    pub(crate) label: &'a str,
}

/// The script's file, removed when dropped.
struct ScriptFile(PathBuf);

impl Drop for ScriptFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The name the script files are made beside (as temp files of it).
const SCRIPT_NAME: &str = "install-script";

/// Removes script files a killed run left in `dir`. The caller holds the lock: no
/// script of another run is running.
pub(crate) fn remove_leftovers(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{SCRIPT_NAME}.");
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && fsutil::is_temp_name(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn write_script(dir: &Path, text: &str) -> Result<ScriptFile, Error> {
    use std::io::Write;
    fsutil::create_own_dir(dir)?;
    let path = fsutil::temp_beside(&dir.join(SCRIPT_NAME));
    // create_new with mode 0700: only root reads it, and no one else's file is reused.
    let mut f = fsutil::create_file(&path, 0o700)?;
    let file = ScriptFile(path);
    f.write_all(text.as_bytes()).ctx("write", &file.0)?;
    f.sync_all().ctx("fsync", &file.0)?;
    Ok(file)
}

/// What the script's lines (each cut at `tern_process::MAX_LINE`) are gathered into.
#[derive(Default)]
struct Capture {
    logged: usize,
    truncated: bool,
    tail: VecDeque<String>,
}

impl Capture {
    fn line(&mut self, label: &str, stream: &str, raw: &[u8], cut: bool) {
        let text: String = String::from_utf8_lossy(raw)
            .chars()
            .filter(|c| !c.is_control() || *c == '\t')
            .collect();
        let text = if cut { format!("{text}…") } else { text };
        if stream == "stderr" && !text.trim().is_empty() {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail
                .push_back(text.trim().chars().take(TAIL_LINE_CHARS).collect());
        }
        if self.logged >= MAX_LOGGED {
            if !self.truncated {
                self.truncated = true;
                log::warn(format!(
                    "{label}: output truncated after {} KiB; the rest is not logged",
                    MAX_LOGGED / 1024
                ));
            }
            return;
        }
        self.logged = self.logged.saturating_add(raw.len() + 1);
        log::info(format!("{label} {stream}: {text}"));
    }

    fn tail(&self) -> String {
        self.tail.iter().cloned().collect::<Vec<_>>().join(" / ")
    }
}

/// Runs the script; `Ok` when it (or, for a dry run, its syntax check) exits 0.
pub(crate) fn run(s: &Script<'_>) -> Result<(), ScriptFailure> {
    let file = write_script(s.dir, s.text).map_err(ScriptFailure::Write)?;
    let mut cmd = Command::new(s.shell);
    if s.dry_run {
        cmd.arg("-n");
    }
    cmd.arg(&file.0)
        .env_clear()
        .envs(BASE_ENV)
        .envs(s.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir("/");
    let capture = Arc::new(Mutex::new(Capture::default()));
    let sink = {
        let capture = Arc::clone(&capture);
        let label = s.label.to_string();
        Arc::new(move |stream: Stream, line: &[u8], cut: bool| {
            if let Ok(mut c) = capture.lock() {
                c.line(&label, stream.name(), line, cut);
            }
        })
    };
    // What it left behind in its group dies with it, as with the updater's cgroup.
    let options = Options::new(s.timeout)
        .kill_group_after_exit()
        .on_line(sink);
    let running = tern_process::spawn(&mut cmd, options).map_err(failure)?;
    log::info(format!(
        "{}: {} {}{} (pid {}, timeout {}s)",
        s.label,
        if s.dry_run {
            "checking the syntax with"
        } else {
            "running"
        },
        s.shell,
        if s.dry_run { " -n" } else { "" },
        running.id(),
        s.timeout.as_secs_f64()
    ));
    let finished = running.wait().map_err(failure)?;
    if finished.output_left_open {
        log::warn(format!(
            "{}: its output is still open (a process left its group); not read further",
            s.label
        ));
    }
    let tail = capture.lock().map(|c| c.tail()).unwrap_or_default();
    drop(file);
    match finished.end {
        End::Exited(0) => Ok(()),
        End::Exited(code) if s.dry_run => Err(ScriptFailure::Syntax {
            shell: s.shell.to_string(),
            code: code.to_string(),
            tail,
        }),
        End::Exited(code) => Err(ScriptFailure::Exited { code, tail }),
        End::Signalled(signal) => Err(ScriptFailure::Signaled { signal, tail }),
        // No cancel is given: only the deadline stops it.
        End::TimedOut(_) | End::Cancelled => Err(ScriptFailure::TimedOut {
            timeout: s.timeout,
            tail,
        }),
    }
}

fn failure(e: tern_process::Error) -> ScriptFailure {
    match e {
        tern_process::Error::Spawn { program, source } => ScriptFailure::Spawn {
            shell: program,
            source,
        },
        tern_process::Error::Wait { source, .. } => ScriptFailure::Wait(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_stderr_lines_without_control_characters() {
        let mut c = Capture::default();
        for i in 0..8 {
            c.line("t", "stderr", format!("line {i}\x1b[31m").as_bytes(), false);
        }
        c.line("t", "stdout", b"not in the tail", false);
        assert_eq!(
            c.tail(),
            "line 3[31m / line 4[31m / line 5[31m / line 6[31m / line 7[31m"
        );
    }

    #[test]
    fn logging_stops_at_the_cap_and_says_so_once() {
        let mut c = Capture::default();
        let long = vec![b'x'; 1000];
        for _ in 0..200 {
            c.line("t", "stdout", &long, false);
        }
        assert!(c.truncated);
        assert!(c.logged <= MAX_LOGGED + 1001);
    }

    #[test]
    fn messages() {
        let e = ScriptFailure::Exited {
            code: 1,
            tail: "boom".into(),
        };
        assert_eq!(e.to_string(), "script exited with 1: boom");
        let e = ScriptFailure::Exited {
            code: 3,
            tail: String::new(),
        };
        assert_eq!(e.to_string(), "script exited with 3");
    }
}
