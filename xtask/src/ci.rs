//! `cargo xtask ci`: formatting, clippy with warnings denied, every test.

use crate::{cargo, run as run_cmd};

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Features the test run enables: test-only hooks, never in release builds.
const TEST_FEATURES: &str = "tern-update/test-hooks";

pub fn run() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run_cmd(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run_cmd(clippy)?;
    let mut test = cargo();
    if has_nextest() {
        test.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
    } else {
        test.args(["test", "--workspace", "--no-fail-fast"]);
    }
    // The kill-point tests of tern-update need its test-only hooks compiled in.
    test.args(["--features", TEST_FEATURES]);
    run_cmd(test)?;
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    run_cmd(doc)
}
