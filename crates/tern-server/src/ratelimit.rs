//! A token bucket per client address (or per token). ternd keeps one for the public
//! endpoints (find, channels), a separate one for heartbeats, so a heartbeat flood
//! cannot starve find, one per bearer token for the admin API, one per address for the
//! admin API's refused authentications, and one for the log lines that say them.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug)]
pub(crate) struct RateLimiter<K = IpAddr> {
    /// Tokens per second.
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<K, Bucket>>,
}

/// A replica's limiters, one per kind of caller.
#[derive(Debug)]
pub(crate) struct RateLimits {
    /// The public endpoints (find, channels), per address (`--find-rate`).
    pub(crate) find: RateLimiter,
    /// Heartbeats and joins, per address (`--heartbeat-rate`), apart so that a
    /// heartbeat flood cannot starve find.
    pub(crate) heartbeat: RateLimiter,
    /// Admin requests per bearer token (`--admin-rate`).
    pub(crate) admin: RateLimiter<String>,
    /// Refused authentications on admin routes, per address (`--auth-failure-rate`):
    /// taken before a token is looked up in the store, given back when it is accepted.
    pub(crate) auth_failures: RateLimiter,
    /// Log lines of refused authentications.
    pub(crate) refusal_log: LogLimit,
}

/// Lets log lines through at a bounded rate, counting those held back so that the
/// next line let through can say how many there were.
#[derive(Debug)]
pub(crate) struct LogLimit {
    bucket: RateLimiter<()>,
    held: std::sync::atomic::AtomicU64,
}

impl LogLimit {
    /// `per_second` lines, bursts of `burst`.
    pub(crate) fn new(per_second: f64, burst: u32) -> Self {
        Self {
            bucket: RateLimiter::new(per_second, burst),
            held: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one let through)` when this line may be
    /// written; `None` when it is held back (and counted).
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        use std::sync::atomic::Ordering;
        if self.bucket.check((), now).is_ok() {
            Some(self.held.swap(0, Ordering::Relaxed))
        } else {
            self.held.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Past this many tracked addresses, idle (full) buckets are dropped.
const MAX_TRACKED: usize = 100_000;

impl<K: Hash + Eq> RateLimiter<K> {
    /// `rate` requests per second per address, bursts of `burst`. A rate of 0 disables
    /// limiting.
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `ip`; `Err(seconds to wait)` when the bucket is empty.
    pub(crate) fn check(&self, ip: K, now: Instant) -> Result<(), u64> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_TRACKED {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst
            });
        }
        let b = buckets.entry(ip).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * self.rate;
        b.tokens = (b.tokens + refill).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - b.tokens) / self.rate;
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

impl<K: Hash + Eq> RateLimiter<K> {
    /// Gives back the token [`RateLimiter::check`] took for `key` (what it paid for
    /// turned out not to count).
    pub(crate) fn give_back(&self, key: &K) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = buckets.get_mut(key) {
            b.tokens = (b.tokens + 1.0).min(self.burst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bucket_refills_per_address() {
        let l = RateLimiter::new(1.0, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t = Instant::now();
        assert!(l.check(a, t).is_ok());
        assert!(l.check(a, t).is_ok());
        assert!(l.check(a, t).is_err());
        assert!(l.check(b, t).is_ok(), "another address has its own bucket");
        assert!(l.check(a, t + Duration::from_secs(1)).is_ok());
        assert!(RateLimiter::new(0.0, 1).check(a, t).is_ok());
    }

    #[test]
    fn a_token_given_back_is_taken_again_and_never_past_the_burst() {
        let l = RateLimiter::new(0.001, 1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let t = Instant::now();
        assert!(l.check(a, t).is_ok());
        assert!(l.check(a, t).is_err());
        l.give_back(&a);
        assert!(l.check(a, t).is_ok());
        l.give_back(&a);
        l.give_back(&a);
        assert!(l.check(a, t).is_ok());
        assert!(
            l.check(a, t).is_err(),
            "the burst bounds what is given back"
        );
    }

    #[test]
    fn held_back_log_lines_are_counted_for_the_next_one() {
        let log = LogLimit::new(1.0, 2);
        let t = Instant::now();
        assert_eq!(log.admit(t), Some(0));
        assert_eq!(log.admit(t), Some(0));
        assert_eq!(log.admit(t), None);
        assert_eq!(log.admit(t), None);
        assert_eq!(log.admit(t + Duration::from_secs(1)), Some(2));
    }
}
