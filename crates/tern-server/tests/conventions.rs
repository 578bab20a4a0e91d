//! The command-line conventions of docs/cli.md on the real ternd: completion scripts,
//! man pages, `--log-format`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Ternd, ternd_bin};
use serde_json::Value;
use tern_testing::json_log::json_lines;

#[test]
fn completion_scripts_offer_the_subcommands() {
    // No data dir, no store: completion reads nothing.
    tern_cli::testing::check_completions(&ternd_bin(), &[], &["start", "completion"]);
}

#[test]
fn man_pages_cover_every_subcommand() {
    tern_cli::testing::check_man_pages(
        &ternd_bin(),
        &[
            (
                "ternd-start.1",
                "Serve the API, take heartbeats and reconcile",
            ),
            ("ternd.1", "control plane"),
            ("ternd-start.1", "TERN_LOG_FORMAT"),
            ("ternd-completion.1", "Print the shell completion script"),
        ],
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_the_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::start(&dir, &["--log-format", "json"]);
    t.stop();
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let lines = json_lines(&log);
    let listening = lines
        .iter()
        .find(|v| v["fields"]["message"] == "ternd listening")
        .unwrap_or_else(|| panic!("no `ternd listening` in\n{log}"));
    assert_eq!(listening["level"], "INFO");
    // The event's own fields sit beside the message.
    assert!(
        listening["fields"]["addr"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    assert!(
        lines
            .iter()
            .any(|v| v["fields"]["message"] == "shutting down")
    );
}

#[test]
fn json_logs_from_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(ternd_bin())
        .args(["start", "--insecure-http", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .env("TERN_LOG", "info")
        .env("TERN_LOG_FORMAT", "json")
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
    let mut seen = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let done = line.contains("ternd listening");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let lines = json_lines(&seen.join("\n"));
    assert!(
        lines
            .iter()
            .any(|v| v["fields"]["message"] == "ternd listening"),
        "{seen:#?}"
    );
}

#[test]
fn text_logs_stay_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::start(&dir, &[]);
    t.stop();
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("ternd listening"))
        .unwrap_or_else(|| panic!("no `ternd listening` in\n{log}"));
    // tracing's text: time, level, target, message, fields; no colour in a file.
    assert!(
        line.contains(" INFO tern_server::server: ternd listening addr=127.0.0.1:"),
        "{line}"
    );
    assert!(!line.contains('\x1b'), "{line:?}");
    assert!(serde_json::from_str::<Value>(line).is_err());
}
