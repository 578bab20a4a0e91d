//! Giving the heap freed after a burst back to the operating system.
//!
//! glibc keeps freed memory in its arenas, so without a trim the steady state pays for
//! the last burst's peak. Two bursts free a lot at once:
//!
//! - the first deploy of host history on a large fleet queues every host at once; the
//!   queue and the writer's batches are freed when it drains (at 1M agents, after the
//!   drain: 229 B of RSS per agent without the trim, 204 B with it and the cached store
//!   statements; docs/benchmarks.md);
//! - a group's start answers every host long-polling find, and the hosts close those
//!   connections to update: each held connection's buffers and tasks (17–20 KB) are
//!   freed together (at 100k hosts, 48 MB per replica after prod's 2,000 per replica).
//!
//! `malloc_trim` returns the free pages of every arena. Other allocators and
//! platforms: nothing to do.

use std::time::{Duration, Instant};

/// Hosts written by one flush of the history writer from which the flush counts as part
/// of a burst, not the steady trickle of changed hosts.
pub(crate) const BURST_HOSTS: usize = 4096;

/// Connections closed since the most open seen, from which their closing counts as a
/// burst: about 20 MB of freed connection buffers. Connections opening and closing at
/// a steady level reuse what they free, and are no burst.
pub(crate) const BURST_CONNECTIONS: usize = 1024;

/// Least time between two trims: a trim walks every arena under its lock and returns
/// pages the next burst faults back in, so a fleet changing in waves (a rollout at 1M
/// agents) must not trim at every pause.
pub(crate) const MIN_TRIM_INTERVAL: Duration = Duration::from_secs(60);

/// When to trim: once a burst is over, at most once per [`MIN_TRIM_INTERVAL`]; a burst
/// that ends sooner is trimmed when the interval has passed. A burst is a flush of at
/// least [`BURST_HOSTS`] hosts (over at the next smaller flush), or
/// [`BURST_CONNECTIONS`] connections closed since the most that were open (over at
/// once: they are freed).
#[derive(Debug, Default)]
pub(crate) struct AfterBursts {
    burst: bool,
    last: Option<Instant>,
    /// The most connections open since the last closing burst was seen.
    connections_peak: usize,
}

impl AfterBursts {
    /// Records, at `now`, a flush of `hosts` and the `connections` open; true when the
    /// heap is to be trimmed now.
    pub(crate) fn due(&mut self, hosts: usize, connections: usize, now: Instant) -> bool {
        if connections.saturating_add(BURST_CONNECTIONS) <= self.connections_peak {
            self.burst = true;
            self.connections_peak = connections;
        } else {
            self.connections_peak = self.connections_peak.max(connections);
        }
        if hosts >= BURST_HOSTS {
            self.burst = true;
            return false;
        }
        let spaced = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= MIN_TRIM_INTERVAL);
        if self.burst && spaced {
            self.burst = false;
            self.last = Some(now);
            return true;
        }
        false
    }
}

/// Returns the heap's free pages to the operating system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // an FFI call into glibc; see below
pub(crate) fn trim() {
    // SAFETY: malloc_trim takes no pointer and only walks glibc's own arenas under
    // their locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns the heap's free pages to the operating system (nothing to do here).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_a_burst_is_over_and_not_more_than_once_a_minute() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = AfterBursts::default();
        assert!(!t.due(10, 0, at(0)), "no burst yet");
        assert!(!t.due(BURST_HOSTS, 0, at(2)), "not during the burst");
        assert!(!t.due(100_000, 0, at(4)), "not during the burst");
        assert!(t.due(0, 0, at(6)), "the burst is over");
        assert!(!t.due(0, 0, at(8)), "once per burst");
        // A second burst ending 10 s later waits for the interval.
        assert!(!t.due(BURST_HOSTS, 0, at(10)));
        assert!(!t.due(3, 0, at(12)));
        assert!(!t.due(0, 0, at(60)));
        assert!(t.due(0, 0, at(66)), "60 s after the last trim");
        assert!(!t.due(0, 0, at(200)), "nothing left to trim");
    }

    #[test]
    fn trims_once_a_crowd_of_connections_has_closed() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = AfterBursts::default();
        // Long polls gather: connections held, nothing freed yet.
        assert!(!t.due(0, 100, at(0)));
        assert!(!t.due(0, 2_100, at(2)));
        // A steady churn below the bound is no burst.
        assert!(!t.due(0, 2_100 - BURST_CONNECTIONS + 1, at(4)));
        assert!(!t.due(0, 2_100, at(6)));
        // The group starts: the held connections are answered and closed.
        assert!(t.due(0, 100, at(8)), "a crowd of connections closed");
        assert!(!t.due(0, 100, at(10)), "once per burst");
        // The next group's long polls close 20 s later: trimmed once the interval
        // has passed, and closing slowly counts as well as at once.
        assert!(!t.due(0, 1_500, at(20)));
        assert!(!t.due(0, 900, at(26)));
        assert!(!t.due(0, 400, at(28)), "a burst, but within the interval");
        assert!(!t.due(0, 400, at(60)));
        assert!(t.due(0, 400, at(68)), "60 s after the last trim");
        // During a history burst the trim waits for it to end.
        assert!(!t.due(0, 2_000, at(130)));
        assert!(
            !t.due(BURST_HOSTS, 100, at(132)),
            "not during a history burst"
        );
        assert!(t.due(0, 100, at(134)));
    }
}
