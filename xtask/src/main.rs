//! `cargo xtask <task>`: orchestration only (build, run, check). No product logic.
//!
//! - `demo`: the main job. A real local fleet (ternd, tern-update, agent processes)
//!   through a rollout, a broken release halted at its canary, and a rollback.
//! - `examples`: replays every bundled example rollout through the offline planner.
//! - `ci`: everything CI checks: formatting, module cycles, clippy with warnings
//!   denied, all tests, the packages; then each phase's time against the budget and the
//!   slowest tests.
//! - `cycles`: fails on any import cycle between the modules of a workspace crate, at
//!   any depth, and on a use against the layers ARCHITECTURE.md states.
//! - `bench`: benchmarks against baselines measured in the same run.
//! - `sim`: the fleet simulator (`tern-sim`), built in release mode.
//! - `fuzz`: AFL++ on one of the harnesses of `fuzz/` (cargo-afl).
//! - `man`: the man pages of every binary and subcommand (`docs/cli.md`).
//! - `dist`: release binaries, the `.deb` packages, a tarball and checksums
//!   (`docs/install.md`); `--check` runs the package checks CI runs.

use std::process::ExitCode;

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
mod timing;
mod workspace;

pub(crate) use workspace::{cargo, root, run, target_dir};

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
                "usage: cargo xtask <demo|examples|ci|cycles|bench|fuzz|sim|man|dist>\n  demo      a real local fleet through a rollout, a halt and a rollback (--hosts N, --keep-running)\n  examples  replay the bundled example rollouts through the offline planner\n  ci        fmt --check, module cycles, clippy -D warnings, every test\n  cycles    [--edges]: fail on any module import cycle (any depth) or a use against ARCHITECTURE.md's layers\n  bench     [find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale|dashboard|faults|all|profile] [--quick]: benchmarks against same-run baselines (docs/benchmarks.md)\n  fuzz      <resources|find-query|heartbeat|tar> [--minutes N]: AFL++ on one target (needs cargo-afl; docs/security.md)\n  sim       ARGS…: the fleet simulator, e.g. `cargo xtask sim --version examples/01-halt-on-error/version.yaml --config examples/01-halt-on-error/config.yaml --agents 10000`, or `cargo xtask sim --faults --seeds 500` (docs/simulator.md)\n  man       [DIR]: man pages of every binary and subcommand into DIR (default target/man; docs/cli.md)\n  dist      [--debug] [--out DIR] [--check]: release binaries (ternd and tern-lockstep with etcd), .debs of ternd, ternctl, tern-update, tern-lockstep, a tarball, SHA256SUMS (docs/install.md)"
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
