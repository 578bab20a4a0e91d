//! Exponential backoff: the one rule every retry loop in Tern waits by (store
//! reconnects, watch resumes, webhook deliveries, the host's failed updates).

use std::time::Duration;

/// Waits that start at `first` and double with each failure in a row, up to `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
}

impl Backoff {
    /// A backoff from `first` to `cap` (a `cap` below `first` caps every wait at `cap`).
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Self { first, cap }
    }

    /// The wait after the `failures`th failure in a row: `first · 2^(failures-1)`, at
    /// most the cap. Zero failures wait as one does, so a counter read before its first
    /// increment still waits.
    pub fn after(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_first_wait_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let waits: Vec<u128> = (0..=8).map(|n| b.after(n).as_millis()).collect();
        assert_eq!(waits, [200, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn never_overflows() {
        let b = Backoff::new(Duration::from_secs(120), Duration::from_secs(3600));
        for n in [31, 32, 33, 1000, u32::MAX] {
            assert_eq!(b.after(n), Duration::from_secs(3600), "{n}");
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.after(u32::MAX), Duration::MAX);
    }

    #[test]
    fn a_cap_below_the_first_wait_caps_every_wait() {
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(1));
        assert_eq!(b.after(1), Duration::from_secs(1));
    }
}
