//! `cargo xtask ci`: formatting, clippy with warnings denied, every test.

use crate::{cargo, run as run_cmd};

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Features the checks and tests enable: test-only hooks, never in release builds.
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
        "--features",
        TEST_FEATURES,
    ]);
    clippy.args(["--", "-D", "warnings"]);
    run_cmd(clippy)?;

    // Doc tests first, so the run closes on the main test runner's summary.
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc", "--features", TEST_FEATURES]);
    run_cmd(doc)?;

    let mut test = cargo();
    if has_nextest() {
        test.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
    } else {
        test.args(["test", "--workspace", "--no-fail-fast"]);
    }
    test.args(["--features", TEST_FEATURES]);
    run_cmd(test)
}
