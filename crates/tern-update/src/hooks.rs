//! Test-only kill points. With the `test-hooks` feature, `TERN_UPDATE_KILL_AT=<point>`
//! makes the process SIGKILL itself when it reaches `<point>` (the Nth time with
//! `<point>#N`), so the tests can prove that a kill at any step boundary is recoverable.
//! Without the feature this compiles to nothing: production builds cannot trigger it.

#[cfg(feature = "test-hooks")]
pub(crate) fn kill_point(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEEN: AtomicU32 = AtomicU32::new(0);
    let Ok(want) = std::env::var("TERN_UPDATE_KILL_AT") else {
        return;
    };
    let (point, nth) = match want.split_once('#') {
        Some((p, n)) => (p.to_string(), n.parse::<u32>().unwrap_or(1)),
        None => (want.clone(), 1),
    };
    if point != name {
        return;
    }
    let seen = SEEN.fetch_add(1, Ordering::SeqCst) + 1;
    if seen == nth {
        eprintln!("tern-update: test hook: SIGKILL at {name}");
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn kill_point(_name: &str) {}

/// Test-only: `TERN_UPDATE_TEST_JITTER_WAIT=<seconds>` replaces the random part of the
/// jitter (still capped), so a test can wait a known, short time.
#[cfg(feature = "test-hooks")]
pub(crate) fn jitter_wait() -> Option<u64> {
    std::env::var("TERN_UPDATE_TEST_JITTER_WAIT")
        .ok()?
        .parse()
        .ok()
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn jitter_wait() -> Option<u64> {
    None
}
