//! `cargo xtask <task>`: orchestration only (build, run, check). No product logic.
//!
//! - `demo`: the main job. A real local fleet (ternd, tern-update, agent processes)
//!   through a rollout, a broken release halted at its canary, and a rollback.
//! - `examples`: replays every bundled example rollout through the offline planner.
//! - `ci`: everything CI checks: formatting, module cycles, clippy with warnings
//!   denied, all tests.
//! - `cycles`: fails on any import cycle between the top-level modules of a workspace
//!   crate.
//! - `bench`: benchmarks against baselines measured in the same run.
//! - `sim`: the fleet simulator (`tern-sim`), built in release mode.
//! - `fuzz`: AFL++ on one of the harnesses of `fuzz/` (cargo-afl).
//! - `man`: the man pages of every binary and subcommand (`docs/cli.md`).
//! - `dist`: release binaries, the `.deb` packages, a tarball and checksums
//!   (`docs/install.md`); `--check` runs the package checks CI runs.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod bench;
mod ci;
mod cycles;
mod deb;
mod demo;
mod dist;
mod dist_check;
mod examples;
mod fuzz;
mod man;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo::run(&args[1..]),
        Some("examples") => examples::run(&args[1..]),
        Some("ci") => ci::run(),
        Some("cycles") => cycles::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("sim") => sim(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("man") => man::run(&args[1..]),
        Some("dist") => dist::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <demo|examples|ci|cycles|bench|fuzz|sim|man|dist>\n  demo      a real local fleet through a rollout, a halt and a rollback (--hosts N, --keep-running)\n  examples  replay the bundled example rollouts through the offline planner\n  ci        fmt --check, module cycles, clippy -D warnings, every test\n  cycles    [--edges]: fail on any import cycle between the top-level modules of a workspace crate\n  bench     [find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale|dashboard|faults|all|profile] [--quick]: benchmarks against same-run baselines (docs/benchmarks.md)\n  fuzz      <resources|find-query|heartbeat|tar> [--minutes N]: AFL++ on one target (needs cargo-afl; docs/security.md)\n  sim       ARGS…: the fleet simulator, e.g. `cargo xtask sim --version examples/01-halt-on-error/version.yaml --config examples/01-halt-on-error/config.yaml --agents 10000`, or `cargo xtask sim --faults --seeds 500` (docs/simulator.md)\n  man       [DIR]: man pages of every binary and subcommand into DIR (default target/man; docs/cli.md)\n  dist      [--debug] [--out DIR] [--check]: release binaries (ternd and tern-lockstep with etcd), .debs of ternd, ternctl, tern-update, tern-lockstep, a tarball, SHA256SUMS (docs/install.md)"
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

/// `cargo xtask sim ARGS…`: runs `tern-sim` (release) with the arguments as given.
fn sim(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "--release", "-p", "tern-sim", "--"])
        .args(args);
    run(cmd)
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory (`CARGO_TARGET_DIR` or the workspace's `target/`).
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { root().join(d) }
        }
        None => root().join("target"),
    }
}

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

pub(crate) fn run(mut cmd: Command) -> Result<(), String> {
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
