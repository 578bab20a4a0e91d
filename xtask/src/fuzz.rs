//! `cargo xtask fuzz <resources|find-query|heartbeat|tar> [--minutes N]`: coverage-guided
//! fuzzing of one target of `fuzz/` under AFL++ (needs `cargo install cargo-afl`, which
//! builds AFL++ on install). Findings go to `fuzz/out/<target>/default/crashes`; a crash,
//! once fixed, is copied into `fuzz/corpus/<target>/` so that every test run replays it
//! (`fuzz/tests/corpus.rs`, one of the workspace's tests). Results: `docs/security.md`.

use std::process::Command;

const TARGETS: &[&str] = &["resources", "find-query", "heartbeat", "tar"];

pub fn run(args: &[String]) -> Result<(), String> {
    let mut target = None;
    let mut minutes: u64 = 30;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minutes" => {
                minutes = it
                    .next()
                    .and_then(|m| m.parse().ok())
                    .ok_or("--minutes needs a whole number")?;
            }
            t if TARGETS.contains(&t) => target = Some(t),
            other => {
                return Err(format!(
                    "unknown fuzz target or flag {other:?}: use one of {} and --minutes N",
                    TARGETS.join(", ")
                ));
            }
        }
    }
    let target = target.ok_or_else(|| format!("name a target: {}", TARGETS.join(", ")))?;
    let fuzz = crate::root().join("fuzz");
    // Instrumented builds in a target dir of their own (fuzz/target), not over the
    // workspace's release binaries.
    let target_dir = fuzz.join("target");
    let mut build = Command::new("cargo");
    build
        .current_dir(&fuzz)
        .env("CARGO_TARGET_DIR", &target_dir)
        .args(["afl", "build", "--release", "--features", "afl", "--bin"])
        .arg(format!("fuzz-{target}"));
    crate::run(build)
        .map_err(|e| format!("{e} (is cargo-afl installed? `cargo install cargo-afl`)"))?;
    // AFL creates its output dir but not the parent.
    std::fs::create_dir_all(fuzz.join("out"))
        .map_err(|e| format!("cannot create fuzz/out: {e}"))?;
    let mut afl = Command::new("cargo");
    afl.current_dir(&fuzz)
        .env("AFL_SKIP_CPUFREQ", "1")
        .env("AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES", "1")
        .args(["afl", "fuzz", "-V"])
        .arg((minutes * 60).to_string())
        .args(["-i"])
        .arg(format!("corpus/{target}"))
        .args(["-o"])
        .arg(format!("out/{target}"))
        .arg(format!("target/release/fuzz-{target}"));
    crate::run(afl)
}
