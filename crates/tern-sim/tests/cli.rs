#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The binary: flags, files, and the JSON contract (last line is one object).

use std::path::PathBuf;
use std::process::Command;

fn write(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn json_output_is_one_object_on_the_last_line() {
    let config = write(
        "cli-config.yaml",
        "kind: autoupdate_config\nmetadata: {name: autoupdate-config}\nspec:\n  agents:\n    mode: enabled\n    schedules:\n      regular:\n      - {name: dev, days: ['*'], start_hour: 1}\n      - {name: prod, days: ['*'], start_hour: 3}\n",
    );
    let version = write(
        "cli-version.yaml",
        "kind: autoupdate_version\nmetadata: {name: autoupdate-version}\nspec:\n  agents: {start_version: 1.0.0, target_version: 1.1.0}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tern-sim"))
        .args(["--config", config.to_str().unwrap()])
        .args(["--version", version.to_str().unwrap()])
        .args(["--agents", "300", "--duration", "6h", "--seed", "2"])
        .args(["--group", "dev=20%", "--group", "prod=80%", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["overall"]["rollout_state"], "done");
    assert_eq!(v["groups"][0]["name"], "dev");
    assert_eq!(v["groups"][0]["hosts"]["1.1.0"], 60);
    assert!(v["events"].as_array().unwrap().len() > 4);
}

#[test]
fn bad_flags_and_files_are_refused_clearly() {
    let version = write(
        "cli-bad-version.yaml",
        "kind: autoupdate_version\nspec: {agents: {start_version: one}}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tern-sim"))
        .args(["--version", version.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid autoupdate_version"));
    let out = Command::new(env!("CARGO_BIN_EXE_tern-sim"))
        .args(["--version", version.to_str().unwrap(), "--churn", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("churn rate"));
    // A parameter the simulation refuses is named once.
    let version = write(
        "cli-enabled-version.yaml",
        "kind: autoupdate_version\nspec: {agents: {start_version: 1.0.0, target_version: 1.1.0, schedule: regular, mode: enabled}}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tern-sim"))
        .args([
            "--version",
            version.to_str().unwrap(),
            "--report-after-change",
            "0",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr
            .matches("report after change: must be at least 1s")
            .count(),
        1,
        "{stderr}"
    );
}
