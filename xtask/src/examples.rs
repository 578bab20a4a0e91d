//! `cargo xtask examples`: replays every bundled example rollout (`examples/*/scenario.yaml`)
//! through the offline planner (`ternctl plan replay`), checking what each one expects.

use std::path::PathBuf;
use std::process::Command;

use crate::{cargo, root, run as run_cmd};

pub fn run(_args: &[String]) -> Result<(), String> {
    let mut build = cargo();
    build.args(["build", "--quiet", "-p", "tern-ctl"]);
    run_cmd(build)?;
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
        if run_cmd(cmd).is_err() {
            failed.push(s.display().to_string());
        }
        println!();
    }
    if failed.is_empty() {
        println!(
            "examples: {} example rollouts replayed through the planner, every expectation held",
            scenarios.len()
        );
        Ok(())
    } else {
        Err(format!("expectations failed in: {}", failed.join(", ")))
    }
}
