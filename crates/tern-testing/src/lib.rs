//! What the workspace's tests share (a dev-dependency only).
//!
//! - [`eventually`], [`eventually_within`]: poll a condition until it holds, or fail
//!   naming what was awaited.
//! - [`runs_here`]: a test that cannot run on this machine (it needs root, a tool, a
//!   binary the workspace builds) fails and says why, instead of returning early and
//!   counting as passed. A developer whose machine lacks it may allow the skip with
//!   `TERN_TESTS_MAY_SKIP=1`; the test then prints `SKIPPED` and its reason.
//! - [`http`]: a loopback HTTP/1.1 server whose answers a handler closure gives (the
//!   tests' stand-ins for ternd, a release server, GitHub's API, a webhook), or a
//!   directory's files.
//! - `json_log` (feature `json`): the programs' JSON log lines, checked for tracing's
//!   fields.
//! - `etcd` (feature `etcd`): a real etcd cluster of child processes on loopback ports.
//!
//! Std only without features, and no async runtime with them: the crates that use it
//! keep their own.

pub mod http;

#[cfg(feature = "etcd")]
pub mod etcd;

#[cfg(feature = "json")]
pub mod json_log;

use std::time::{Duration, Instant};

/// How long [`eventually`] waits.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `f` every 50 ms until it holds; panics naming `what` after [`PATIENCE`].
pub fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(what, PATIENCE, f);
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after `patience`. `f` is
/// asked at least once, and once more at the deadline.
pub fn eventually_within(what: &str, patience: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    loop {
        if f() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {patience:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The variable that lets a test that cannot run here skip instead of failing.
pub const MAY_SKIP: &str = "TERN_TESTS_MAY_SKIP";

/// Whether `test` can run here, given `can` (and `why` it could not). When it cannot:
/// panics with the reason, unless [`MAY_SKIP`] is set, in which case it prints
/// `SKIPPED test: why` and returns false (the caller returns).
pub fn runs_here(test: &str, can: bool, why: &str) -> bool {
    if can {
        return true;
    }
    if std::env::var_os(MAY_SKIP).is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("SKIPPED {test}: {why}");
        return false;
    }
    panic!(
        "{test} cannot run here: {why}. CI runs it; on a machine that lacks this, set {MAY_SKIP}=1 to skip it"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventually_returns_once_the_condition_holds() {
        let mut n = 0;
        eventually("the third call", || {
            n += 1;
            n >= 3
        });
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "timed out after 100ms waiting for never")]
    fn eventually_names_what_it_waited_for() {
        eventually_within("never", Duration::from_millis(100), || false);
    }

    #[test]
    #[should_panic(expected = "t cannot run here: needs X")]
    fn a_test_that_cannot_run_fails_unless_skips_are_allowed() {
        if std::env::var_os(MAY_SKIP).is_some() {
            // This environment allows skips: the path under test is the other one.
            panic!("t cannot run here: needs X (and skips are allowed here)");
        }
        runs_here("t", false, "needs X");
    }

    #[test]
    fn a_test_that_can_run_runs() {
        assert!(runs_here("t", true, "unused"));
    }
}
