//! `cargo xtask bench [find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale|dashboard|faults|all|profile]
//! [--quick]`: builds the release binaries, then runs `tern-bench` (crates/tern-bench) for
//! each benchmark. `profile` (not part of `all`: it needs valgrind and takes minutes) counts
//! instructions under callgrind, with binaries built with symbols in `<target>/profile`.
//! Each prints progress on stderr and its figures as one JSON object on the last line
//! of stdout. Results and their commands are recorded in `docs/benchmarks.md`.
//! Needs nothing installed beyond Rust, plus `bash`, `curl` and `tar` for `apply`'s
//! baseline pipeline, and for `lockstep` an `etcd` server binary (Debian: `etcd-server`;
//! `--quick` falls back to SQLite without one) and `protoc` to build tern-lockstep's etcd
//! backend. `scale` needs `etcd` too (three members) and runs a ternd built with the etcd
//! feature (`ternd-etcd`, built apart). `dashboard` (crates/tern-dashboard-tests) drives Debian's `chromium` through
//! `chromedriver`, installed with apt-get when missing.

use std::path::PathBuf;
use std::process::Command;

const BENCHES: &[&str] = &[
    "find",
    "attack",
    "heartbeat",
    "reconcile",
    "apply",
    "converge",
    "lockstep",
    "directives",
    "coverage",
    "topology",
    "scale",
    "dashboard",
    "faults",
];
/// Its own binary (the only one linking a WebDriver client), not tern-bench.
const DASHBOARD: &str = "dashboard";
/// The simulator under seeded faults (tern-sim), not tern-bench.
const FAULTS: &str = "faults";
const PROFILE: &str = "profile";
/// Runs ternd with the etcd backend: `ternd-etcd`, built apart.
const SCALE: &str = "scale";

pub fn run(args: &[String]) -> Result<(), String> {
    let mut which: Vec<&str> = Vec::new();
    let mut extra: Vec<String> = Vec::new();
    for a in args {
        match a.as_str() {
            "all" => which.extend(BENCHES),
            "--quick" => extra.push(a.clone()),
            b if BENCHES.contains(&b) || b == PROFILE => which.push(b),
            other => {
                return Err(format!(
                    "unknown benchmark or flag {other:?}: use {}, all or profile, and --quick",
                    BENCHES.join("|")
                ));
            }
        }
    }
    if which.is_empty() {
        which.extend(BENCHES);
    }
    let profile = which.contains(&PROFILE);
    which.retain(|b| *b != PROFILE);
    if which.contains(&FAULTS) {
        faults(&extra)?;
        which.retain(|b| *b != FAULTS);
    }
    if !which.is_empty() {
        if which.contains(&SCALE) {
            build_ternd_etcd()?;
        }
        let bin = build(None, which.contains(&DASHBOARD))?;
        if which.contains(&"lockstep") {
            build_lockstep()?;
        }
        for b in which {
            if b == DASHBOARD {
                dashboard(&bin.release, &extra)?;
            } else {
                bench(&bin, b, &extra)?;
            }
        }
    }
    if profile {
        // Symbols for callgrind_annotate, in a target dir of their own so that the
        // stripped binaries measured by the other benchmarks stay as they are.
        let bin = build(Some(crate::target_dir().join("profile")), false)?;
        bench(&bin, PROFILE, &extra)?;
    }
    Ok(())
}

/// `faults`: many seeds of the control plane under faults (`tern-sim --faults`), each
/// checked against the fleet-safety invariant; reports the simulated fleet-hours per
/// second of wall time. Fails if a seed breaks the invariant.
fn faults(extra: &[String]) -> Result<(), String> {
    let seeds = if extra.iter().any(|a| a == "--quick") {
        "100"
    } else {
        "2000"
    };
    let mut cmd = crate::cargo();
    cmd.args(["run", "--quiet", "--release", "-p", "tern-sim", "--"])
        .args(["--faults", "--seeds", seeds, "--hours", "72"]);
    crate::run(cmd)
}

/// Where the benchmarked binaries are.
struct Binaries {
    release: PathBuf,
    /// tern-update as it ships: the small `updater` profile (see the workspace's
    /// Cargo.toml).
    updater: PathBuf,
}

/// Builds the release binaries (into `target`, with symbols, when given); returns
/// where they are.
fn build(target: Option<PathBuf>, dashboard: bool) -> Result<Binaries, String> {
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
        "-p",
        "tern-release",
    ]);
    let mut updater = crate::cargo();
    updater.args([
        "build",
        "--profile",
        "updater",
        "-p",
        "tern-update",
        "--bin",
        "tern-update",
    ]);
    let dir = match target {
        Some(t) => {
            build
                .env("CARGO_TARGET_DIR", &t)
                .env("CARGO_PROFILE_RELEASE_STRIP", "none")
                .env("CARGO_PROFILE_RELEASE_DEBUG", "line-tables-only");
            updater
                .env("CARGO_TARGET_DIR", &t)
                .env("CARGO_PROFILE_UPDATER_STRIP", "none")
                .env("CARGO_PROFILE_UPDATER_DEBUG", "line-tables-only");
            t
        }
        None => crate::target_dir(),
    };
    crate::run(build)?;
    crate::run(updater)?;
    if dashboard {
        // Only when asked, in a run of its own (`--bin` would narrow the one above):
        // the other benchmarks need no WebDriver client built.
        let mut build = crate::cargo();
        build.args([
            "build",
            "--release",
            "-p",
            "tern-dashboard-tests",
            "--bin",
            "tern-dashboard-bench",
        ]);
        crate::run(build)?;
    }
    Ok(Binaries {
        release: dir.join("release"),
        updater: dir.join("updater").join("tern-update"),
    })
}

/// tern-lockstep with its etcd backend, in a cargo run of its own: built together with
/// the others, the feature would be unified into the tern-store and tern-server that
/// ternd links, changing what the other benchmarks measure.
fn build_lockstep() -> Result<(), String> {
    let mut build = crate::cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "tern-lockstep",
        "--features",
        "tern-lockstep/etcd",
    ]);
    crate::run(build)
}

/// ternd with its etcd backend for `scale`, as `ternd-etcd` beside the others: built
/// before them (with the feature, cargo writes `ternd` too; the plain build after it puts
/// the plain one back), so that the other benchmarks measure ternd as it ships by default.
fn build_ternd_etcd() -> Result<(), String> {
    let mut build = crate::cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "tern-server",
        "--bin",
        "ternd",
        "--features",
        "tern-server/etcd",
    ]);
    crate::run(build)?;
    let dir = crate::target_dir().join("release");
    std::fs::copy(dir.join("ternd"), dir.join("ternd-etcd"))
        .map_err(|e| format!("copying ternd to ternd-etcd: {e}"))?;
    Ok(())
}

fn bench(bins: &Binaries, name: &str, extra: &[String]) -> Result<(), String> {
    let bin = &bins.release;
    let ternd = if name == SCALE { "ternd-etcd" } else { "ternd" };
    let mut cmd = Command::new(bin.join("tern-bench"));
    cmd.arg(name)
        .args(extra)
        .arg("--ternd")
        .arg(bin.join(ternd))
        .arg("--tern-update")
        .arg(&bins.updater)
        .arg("--tern-lockstep")
        .arg(bin.join("tern-lockstep"))
        .current_dir(crate::root());
    crate::run(cmd)
}

/// `dashboard`: first render of the dashboard's pages in headless Chromium with 100k
/// agents, against the status JSON alone (`tern-dashboard-bench`).
fn dashboard(bin: &std::path::Path, extra: &[String]) -> Result<(), String> {
    crate::ci::ensure_packages(crate::ci::BROWSER_PACKAGES)?;
    let mut cmd = Command::new(bin.join("tern-dashboard-bench"));
    cmd.args(extra)
        .arg("--ternd")
        .arg(bin.join("ternd"))
        .current_dir(crate::root());
    crate::run(cmd)
}
