//! `cargo xtask bench [find|heartbeat|reconcile|apply|converge|all] [--quick]`: builds
//! the release binaries, then runs `tern-bench` (crates/tern-bench) for each benchmark.
//! Each prints progress on stderr and its figures as one JSON object on the last line
//! of stdout. Results and their commands are recorded in `docs/benchmarks.md`.
//! Needs nothing installed beyond Rust, plus `bash`, `curl` and `tar` for `apply`'s
//! baseline pipeline.

use std::path::PathBuf;
use std::process::Command;

const BENCHES: &[&str] = &["find", "heartbeat", "reconcile", "apply", "converge"];

pub fn run(args: &[String]) -> Result<(), String> {
    let mut which: Vec<&str> = Vec::new();
    let mut extra: Vec<String> = Vec::new();
    for a in args {
        match a.as_str() {
            "all" => which.extend(BENCHES),
            "--quick" => extra.push(a.clone()),
            b if BENCHES.contains(&b) => which.push(b),
            other => {
                return Err(format!(
                    "unknown benchmark or flag {other:?}: use {} or all, and --quick",
                    BENCHES.join("|")
                ));
            }
        }
    }
    if which.is_empty() {
        which.extend(BENCHES);
    }
    let mut build = crate::cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "tern-bench",
        "-p",
        "tern-server",
        "-p",
        "tern-update",
    ]);
    crate::run(build)?;
    let bin = target_dir().join("release");
    for b in which {
        let mut cmd = Command::new(bin.join("tern-bench"));
        cmd.arg(b)
            .args(&extra)
            .arg("--ternd")
            .arg(bin.join("ternd"))
            .arg("--tern-update")
            .arg(bin.join("tern-update"))
            .current_dir(crate::root());
        crate::run(cmd)?;
    }
    Ok(())
}

/// Cargo's target directory (`CARGO_TARGET_DIR` or the workspace's `target/`).
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                crate::root().join(d)
            }
        }
        None => crate::root().join("target"),
    }
}
