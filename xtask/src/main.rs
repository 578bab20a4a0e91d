//! `cargo xtask <task>`: orchestration only (build, run, check). No product logic.
//!
//! - `demo`: the main job. Builds ternctl and replays every bundled example rollout
//!   through the offline planner, printing each timeline.
//! - `ci`: everything CI checks: formatting, clippy with warnings denied, all tests.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo(&args[1..]),
        Some("ci") => ci(),
        _ => {
            eprintln!(
                "usage: cargo xtask <demo|ci>\n  demo  replay the bundled example rollouts\n  ci    fmt --check, clippy -D warnings, every test"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    eprintln!("==> {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Features the test run enables: test-only hooks, never in release builds.
const TEST_FEATURES: &str = "tern-update/test-hooks";

fn ci() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    let mut test = cargo();
    if has_nextest() {
        test.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
    } else {
        test.args(["test", "--workspace", "--no-fail-fast"]);
    }
    // The kill-point tests of tern-update need its test-only hooks compiled in.
    test.args(["--features", TEST_FEATURES]);
    run(test)?;
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    run(doc)
}

fn demo(_args: &[String]) -> Result<(), String> {
    let mut build = cargo();
    build.args(["build", "--quiet", "-p", "tern-ctl"]);
    run(build)?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target"));
    let ternctl = target.join("debug").join("ternctl");
    let examples = root().join("examples");
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(&examples)
        .map_err(|e| format!("cannot list {}: {e}", examples.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path().join("scenario.yaml"))
        .filter(|p| p.is_file())
        .collect();
    scenarios.sort();
    let mut failed = Vec::new();
    for s in &scenarios {
        let mut cmd = Command::new(&ternctl);
        cmd.args(["plan", "replay"]).arg(s);
        if run(cmd).is_err() {
            failed.push(s.display().to_string());
        }
        println!();
    }
    if failed.is_empty() {
        println!(
            "demo: {} example rollouts replayed through the planner, every expectation held",
            scenarios.len()
        );
        Ok(())
    } else {
        Err(format!("expectations failed in: {}", failed.join(", ")))
    }
}
