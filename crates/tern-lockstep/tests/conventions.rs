//! The command-line conventions of docs/cli.md on the real tern-lockstep: completion
//! scripts, man pages, `--log-format json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tern-lockstep"))
}

#[test]
fn completion_scripts_offer_the_subcommands() {
    // No --store: every other command refuses to start without one.
    tern_cli::testing::check_completions(
        bin(),
        &[],
        &["updater", "worker", "servers", "recover", "completion"],
    );
}

#[test]
fn man_pages_cover_every_subcommand() {
    tern_cli::testing::check_man_pages(
        bin(),
        &[
            ("tern-lockstep-worker.1", "Run the worker of this server"),
            ("tern-lockstep.1", "Lock-step updates of a server cluster"),
            ("tern-lockstep-servers-add.1", "Register a server"),
            ("tern-lockstep-stop.1", "Stop the current update"),
            ("tern-lockstep-status.1", "TERN_LOCKSTEP_LOG_FORMAT"),
        ],
    );
}

/// A worker started with `--log-format json` logs its registration as one JSON object
/// per line, with tracing's fields.
#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .args(["--log-format", "json", "worker", "--id", "1", "--root"])
        .arg(dir.path().join("root"))
        .env(
            "TERN_LOCKSTEP_STORE",
            format!("sqlite:{}", dir.path().join("store.db").display()),
        )
        .env("TERN_LOCKSTEP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) else {
            continue;
        };
        let v = tern_testing::json_log::json_line(&line);
        let registered = v["fields"]["message"] == "registered this server";
        lines.push(v);
        if registered {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let registered = lines
        .iter()
        .find(|v| v["fields"]["message"] == "registered this server")
        .unwrap_or_else(|| panic!("no registration logged: {lines:#?}"));
    assert_eq!(registered["level"], "INFO");
    assert_eq!(registered["fields"]["server"], 1);
    assert!(registered["timestamp"].is_string());
}
