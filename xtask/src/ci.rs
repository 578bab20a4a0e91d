//! `cargo xtask ci`: formatting, module cycles and layers, one build of everything with
//! clippy's lints (warnings denied), every test, and the package checks (`cargo xtask
//! dist --debug --check`); at the end, the slowest tests and the time of each phase
//! against the budget (`timing`).

use std::process::Command;

use crate::run as run_cmd;
use crate::timing::Phases;

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Features the checks and tests enable: test-only hooks (never in release builds) and
/// the etcd backend and ternd on etcd, whose tests start real etcd members.
const TEST_FEATURES: &str =
    "tern-update/test-hooks,tern-store/etcd,tern-server/etcd,tern-lockstep/etcd";

/// What the tests need (a program on PATH, or an absolute file path), and the Debian
/// package that provides it. etcd-client's build runs protoc over protos that import
/// Google's well-known types, which come with libprotobuf-dev (only recommended by
/// protobuf-compiler, and recommendations are not installed here).
const SYSTEM_PACKAGES: &[(&str, &str)] = &[
    ("etcd", "etcd-server"),
    ("protoc", "protobuf-compiler"),
    // The exported OnCalendar= values are checked with systemd's own parser.
    ("systemd-analyze", "systemd"),
    // Package-mode tests build and install real .debs under a temporary root.
    ("dpkg-deb", "dpkg"),
    ("pgrep", "procps"),
    // The package checks (`cargo xtask dist --check`) and the installer's script.
    ("lintian", "lintian"),
    ("shellcheck", "shellcheck"),
    ("strip", "binutils"),
    // The partition test (crates/tern-e2e/tests/partitions.rs) makes hosts with their
    // own network namespaces.
    ("ip", "iproute2"),
    // The canary-analysis test (crates/tern-e2e/tests/analysis.rs) and the demo's
    // analysis chapter run a real Prometheus scraping the demo agents.
    ("prometheus", "prometheus"),
    // The one-line installer's test pipes ternd's script from curl into sh.
    ("curl", "curl"),
    // The dashboard's browser tests (crates/tern-dashboard-tests).
    ("/usr/bin/chromium", "chromium"),
    ("/usr/bin/chromedriver", "chromium-driver"),
    (
        "/usr/include/google/protobuf/descriptor.proto",
        "libprotobuf-dev",
    ),
];

fn have(program: &str) -> bool {
    if program.starts_with('/') {
        return std::path::Path::new(program).exists();
    }
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What the dashboard's tests and benchmark drive (the paths its harness uses).
pub(crate) const BROWSER_PACKAGES: &[(&str, &str)] = &[
    ("/usr/bin/chromium", "chromium"),
    ("/usr/bin/chromedriver", "chromium-driver"),
];

fn ensure_system_packages() -> Result<(), String> {
    ensure_packages(SYSTEM_PACKAGES)
}

/// Installs the missing packages of `wanted` with apt-get (as root, or through sudo).
pub(crate) fn ensure_packages(wanted: &[(&str, &str)]) -> Result<(), String> {
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(program, _)| !have(program))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        return Err(format!(
            "the tests need {}; install them (no apt-get here)",
            missing.join(", ")
        ));
    }
    let sudo: &[&str] = if have("id") && !is_root() {
        &["sudo"]
    } else {
        &[]
    };
    let apt = |args: &[&str]| {
        let mut all: Vec<&str> = sudo.to_vec();
        all.push("apt-get");
        all.extend_from_slice(args);
        let mut cmd = Command::new(all[0]);
        cmd.args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive");
        run_cmd(cmd)
    };
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend_from_slice(&missing);
    apt(&install).map_err(|e| format!("cannot install {}: {e}", missing.join(", ")))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// cargo for a one-shot build, compiling the workspace's own crates with clippy's lints
/// (warnings denied) while it builds them: clippy-driver is rustc with the lints, set as
/// the workspace's rustc wrapper, which is what `cargo clippy` does in check mode. So
/// every dependency is compiled once, for the build, instead of once more (metadata
/// only) for a separate clippy run; every invocation here passes the same wrapper, so
/// each finds the others' artifacts fresh. Incremental caches only help a rebuild, and
/// on a fresh clone they would add a quarter to the target dir's size.
fn cargo() -> Command {
    let mut cargo = crate::cargo();
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        cargo.env("CARGO_INCREMENTAL", "0");
    }
    cargo
        .env("RUSTC_WORKSPACE_WRAPPER", clippy_driver())
        // cargo clippy's way of handing clippy-driver its arguments (`-- -D warnings`).
        .env(
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
        );
    cargo
}

/// clippy-driver beside the cargo running this (rustup's toolchain directory), else
/// the one on PATH.
fn clippy_driver() -> std::path::PathBuf {
    std::env::var_os("CARGO")
        .map(std::path::PathBuf::from)
        .and_then(|c| Some(c.parent()?.join("clippy-driver")))
        .filter(|d| d.is_file())
        .unwrap_or_else(|| "clippy-driver".into())
}

/// Where nextest's `ci` profile writes its JUnit report (`.config/nextest.toml`).
fn junit_report() -> std::path::PathBuf {
    crate::target_dir()
        .join("nextest")
        .join("ci")
        .join("junit.xml")
}

/// Every check, each a timed phase; then the slowest tests and the time of each phase
/// against the budget, also when a phase failed.
pub fn run() -> Result<(), String> {
    let mut phases = Phases::start();
    let junit = junit_report();
    // A report left by an earlier run is not this run's.
    let _ = std::fs::remove_file(&junit);
    let result = checks(&mut phases);
    if has_nextest() {
        eprint!("{}", crate::timing::slowest(&junit, 20));
    }
    eprint!("{}", phases.summary());
    result
}

fn checks(phases: &mut Phases) -> Result<(), String> {
    phases.run("system packages", ensure_system_packages)?;
    phases.run("fmt", || {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--check"]);
        run_cmd(fmt)
    })?;

    // Module import cycles and layers: a text scan, seconds, before anything compiles.
    phases.run("cycles", || crate::cycles::run(&[]))?;

    // Everything the tests and the packages need, linted as it compiles (see `cargo()`):
    // every target of every crate, as `cargo clippy --all-targets` lints them, with the
    // features the tests enable.
    phases.run("build and clippy", || {
        let mut build = cargo();
        build.args([
            "build",
            "--workspace",
            "--all-targets",
            "--features",
            TEST_FEATURES,
        ]);
        run_cmd(build)
    })?;

    // Doc tests first, so the run closes on the main test runner's summary.
    phases.run("doc tests", || {
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc", "--features", TEST_FEATURES]);
        run_cmd(doc)
    })?;

    phases.run("tests", || {
        let mut test = cargo();
        if has_nextest() {
            test.args([
                "nextest",
                "run",
                "--workspace",
                "--no-fail-fast",
                "--profile",
                "ci",
            ]);
        } else {
            test.args(["test", "--workspace", "--no-fail-fast"]);
        }
        test.args(["--features", TEST_FEATURES]);
        run_cmd(test)
    })?;

    // The packages, from the binaries built above (debug, stripped): dpkg-deb, lintian,
    // shellcheck and an install under a temporary root. Release binaries are not built
    // here (they would add most of CI's time); `cargo xtask dist` makes them.
    phases.run("packages", || {
        // Signed too, as a release is: with throwaway keys in a repository made here by
        // the real tern-release, so the check verifies real signatures over the real
        // files.
        let keys = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let (repo, sign_keys) = throwaway_repository(keys.path())?;
        // In process: this binary may have been rebuilt on disk meanwhile.
        let out = crate::target_dir().join("dist-ci");
        let mut args = vec![
            "--debug".to_string(),
            "--check".to_string(),
            "--out".to_string(),
            out.display().to_string(),
            "--sign".to_string(),
            repo.display().to_string(),
        ];
        for k in sign_keys {
            args.extend(["--key".to_string(), k.display().to_string()]);
        }
        crate::dist::run(&args)
    })
}

/// A tern-release repository under `dir` with fresh keys (one per role); returns it and
/// the keys that sign targets.
fn throwaway_repository(
    dir: &std::path::Path,
) -> Result<(std::path::PathBuf, Vec<std::path::PathBuf>), String> {
    let bin = crate::target_dir().join("debug").join("tern-release");
    let key = |role: &str| dir.join(format!("{role}.pk8"));
    let run = |args: &mut Command| {
        let out = args
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let roles = ["root", "targets", "snapshot", "timestamp"];
    run(Command::new(&bin)
        .arg("keygen")
        .args(roles.iter().map(|r| key(r))))?;
    let repo = dir.join("repo");
    let mut init = Command::new(&bin);
    init.arg("init").arg("--repo").arg(&repo);
    for r in roles {
        init.arg(format!("--{r}-key")).arg(key(r));
    }
    run(&mut init)?;
    Ok((repo, roles[1..].iter().map(|r| key(r)).collect()))
}
