//! Giving the heap freed after a burst back to the operating system.
//!
//! The first deploy of host history on a large fleet queues every host at once; the
//! queue and the writer's batches are freed when it drains, but glibc keeps freed
//! memory in its arenas, so the steady state would pay for the burst's peak (at 1M
//! agents, after the drain: 229 B of RSS per agent without the trim, 204 B with it and
//! the cached store statements; docs/benchmarks.md). `malloc_trim` returns the free
//! pages of every arena. Other allocators and platforms: nothing to do.

use std::time::{Duration, Instant};

/// Hosts written by one flush of the history writer from which the flush counts as part
/// of a burst, not the steady trickle of changed hosts.
pub(crate) const BURST_HOSTS: usize = 4096;

/// Least time between two trims: a trim walks every arena under its lock and returns
/// pages the next burst faults back in, so a fleet changing in waves (a rollout at 1M
/// agents) must not trim at every pause.
pub(crate) const MIN_TRIM_INTERVAL: Duration = Duration::from_secs(60);

/// When to trim: once a burst is over (a flush of at least [`BURST_HOSTS`] hosts
/// followed by a smaller one), at most once per [`MIN_TRIM_INTERVAL`]; a burst that ends
/// sooner is trimmed when the interval has passed.
#[derive(Debug, Default)]
pub(crate) struct AfterBursts {
    burst: bool,
    last: Option<Instant>,
}

impl AfterBursts {
    /// Records a flush of `hosts` at `now`; true when the heap is to be trimmed now.
    pub(crate) fn due(&mut self, hosts: usize, now: Instant) -> bool {
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
        assert!(!t.due(10, at(0)), "no burst yet");
        assert!(!t.due(BURST_HOSTS, at(2)), "not during the burst");
        assert!(!t.due(100_000, at(4)), "not during the burst");
        assert!(t.due(0, at(6)), "the burst is over");
        assert!(!t.due(0, at(8)), "once per burst");
        // A second burst ending 10 s later waits for the interval.
        assert!(!t.due(BURST_HOSTS, at(10)));
        assert!(!t.due(3, at(12)));
        assert!(!t.due(0, at(60)));
        assert!(t.due(0, at(66)), "60 s after the last trim");
        assert!(!t.due(0, at(200)), "nothing left to trim");
    }
}
