//! Long-poll find: a host that sends the ETag of the answer it holds (`seen`) and how
//! long it will wait (`wait`) is answered as soon as its answer differs from that one,
//! or when the hold ends. The answer is always find's own (`routes::public`), worked
//! out again from each new snapshot: nothing here decides a rollout.
//!
//! What a held request costs the replica is bounded: a hold never exceeds
//! `max_hold`, at most `max_held` requests are held at once (past it a request is
//! answered at once, like a plain find), and shutdown releases every one.
//!
//! Only a new snapshot (and a pin's lift) wakes held requests. The parts of an answer
//! read from the inventory (a host's placement by labels, a directive governing it)
//! change with heartbeats, which wake nobody: such a change reaches a held host when
//! its hold ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand_core::{RngCore, SeedableRng};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The operator's bounds (`ternd start --long-poll-…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongPollSettings {
    /// The longest a request is held, whatever the host asks (`--long-poll-max-hold`).
    pub max_hold: Duration,
    /// Requests held at once at most (`--long-poll-max-held`); 0 turns holding off.
    pub max_held: usize,
    /// A request released by a change waits a random part of this first
    /// (`--long-poll-jitter`), so that the hosts one change releases do not all
    /// download at the same instant.
    pub release_jitter: Duration,
}

impl Default for LongPollSettings {
    fn default() -> Self {
        Self {
            max_hold: Duration::from_secs(50),
            max_held: 10_000,
            release_jitter: Duration::from_secs(3),
        }
    }
}

/// Why a held request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// The host's answer changed (after the release jitter).
    Changed,
    /// The hold ended, or the replica is shutting down: the same answer.
    Expired,
}

/// The replica's held requests: their permits, the snapshot change signal they wait
/// on, the shutdown signal, and their counters.
pub(crate) struct LongPoll {
    pub(crate) settings: LongPollSettings,
    permits: Arc<Semaphore>,
    changes: watch::Sender<u64>,
    stopping: watch::Sender<bool>,
    rng: std::sync::Mutex<rand_chacha::ChaCha8Rng>,
    pub(crate) released_changed: AtomicU64,
    pub(crate) released_expired: AtomicU64,
    pub(crate) refused: AtomicU64,
}

impl LongPoll {
    pub(crate) fn new(mut settings: LongPollSettings) -> Self {
        // Tokio's semaphore has a ceiling (and panics past it); no replica holds more.
        settings.max_held = settings.max_held.min(Semaphore::MAX_PERMITS);
        let mut seed = [0u8; 32];
        // The jitter spreads load; it protects no secret. Without the OS's randomness
        // (it does not fail on Linux) a fixed seed still spreads hosts apart.
        let _ = rand_core::TryRngCore::try_fill_bytes(&mut rand_core::OsRng, &mut seed);
        Self {
            settings,
            permits: Arc::new(Semaphore::new(settings.max_held)),
            changes: watch::Sender::new(0),
            stopping: watch::Sender::new(false),
            rng: std::sync::Mutex::new(rand_chacha::ChaCha8Rng::from_seed(seed)),
            released_changed: AtomicU64::new(0),
            released_expired: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Requests held now.
    pub(crate) fn held(&self) -> usize {
        self.settings
            .max_held
            .saturating_sub(self.permits.available_permits())
    }

    /// Room for one more held request, or `None` at the cap (counted).
    pub(crate) fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok();
        if permit.is_none() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        permit
    }

    /// Wakes every held request to look at the new snapshot.
    pub(crate) fn snapshot_changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Subscribe before reading the snapshot an answer is worked out from, so that a
    /// change between the two is not missed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Answers every held request now and holds no new one.
    pub(crate) fn shut_down(&self) {
        self.stopping.send_replace(true);
    }

    /// Resolves once the replica is shutting down.
    pub(crate) async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        // An error means the sender is gone, i.e. the state is: stop too.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The release jitter for one request: uniform in [0, bound].
    pub(crate) fn jitter(&self, bound: Duration) -> Duration {
        let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
        if millis == 0 {
            return Duration::ZERO;
        }
        let draw = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_u64();
        Duration::from_millis(draw % (millis + 1))
    }

    /// The `tern_find_long_poll_*` series.
    pub(crate) fn render(&self, out: &mut String) {
        use crate::metrics_text::{counter, gauge};
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        gauge(
            out,
            "tern_find_long_poll_held",
            "find requests held now, waiting for the host's answer to change",
            self.held(),
        );
        counter(
            out,
            "tern_find_long_poll_changed_total",
            "held find requests answered because the host's answer changed",
            get(&self.released_changed),
        );
        counter(
            out,
            "tern_find_long_poll_expired_total",
            "held find requests answered unchanged: the hold ended or the replica stopped",
            get(&self.released_expired),
        );
        counter(
            out,
            "tern_find_long_poll_refused_total",
            "long-poll finds answered at once: --long-poll-max-held requests were held",
            get(&self.refused),
        );
    }

    pub(crate) fn count(&self, release: Release) {
        let counter = match release {
            Release::Changed => &self.released_changed,
            Release::Expired => &self.released_expired,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The `wait` parameter: whole seconds, capped at `max_hold`. `Err` names the value.
pub(crate) fn parse_wait(raw: &str, max_hold: Duration) -> Result<Duration, String> {
    let secs: u64 = raw.parse().map_err(|_| {
        format!(
            "wait: {raw:?} is not a whole number of seconds (0 answers at once; holds are capped at {}s)",
            max_hold.as_secs()
        )
    })?;
    Ok(Duration::from_secs(secs).min(max_hold))
}

/// The ETag of a find body: the same bytes give the same tag on every replica of a
/// version (FNV-1a, not a per-process hash), so a host sent to another replica by a
/// load balancer is not released by a change that is not one.
pub(crate) fn etag_of(body: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

/// Whether `seen` (as the host sends it back: quoted or not, or marked weak with `W/`
/// by a proxy that compressed the body) names `etag`.
pub(crate) fn is_seen(seen: &str, etag: &str) -> bool {
    seen.trim_start_matches("W/").trim_matches('"') == etag.trim_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_whole_seconds_capped() {
        let cap = Duration::from_secs(50);
        assert_eq!(parse_wait("0", cap), Ok(Duration::ZERO));
        assert_eq!(parse_wait("30", cap), Ok(Duration::from_secs(30)));
        assert_eq!(parse_wait("3600", cap), Ok(cap));
        assert_eq!(parse_wait(&u64::MAX.to_string(), cap), Ok(cap));
        for bad in ["", "-1", "1.5", "30s", "abc"] {
            let e = parse_wait(bad, cap).unwrap_err();
            assert!(e.starts_with("wait: "), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn etags_follow_the_bytes() {
        let a = etag_of(br#"{"agent_version":"1.0.0"}"#);
        assert_eq!(a, etag_of(br#"{"agent_version":"1.0.0"}"#));
        assert_ne!(a, etag_of(br#"{"agent_version":"1.1.0"}"#));
        assert!(is_seen(&a, &a));
        assert!(is_seen(a.trim_matches('"'), &a));
        assert!(
            is_seen(&format!("W/{a}"), &a),
            "a proxy's weak tag still names it"
        );
        assert!(!is_seen("", &a));
        assert!(!is_seen("W/", &a));
    }

    #[test]
    fn a_huge_cap_is_held_to_what_a_semaphore_can_count() {
        let lp = LongPoll::new(LongPollSettings {
            max_held: usize::MAX,
            ..LongPollSettings::default()
        });
        assert_eq!(lp.settings.max_held, Semaphore::MAX_PERMITS);
        assert_eq!(lp.held(), 0);
        assert!(lp.admit().is_some());
        assert_eq!(lp.held(), 0, "the permit was dropped at once");
    }

    #[test]
    fn jitter_stays_in_its_bound_and_spreads() {
        let lp = LongPoll::new(LongPollSettings::default());
        let bound = Duration::from_millis(500);
        let draws: Vec<Duration> = (0..200).map(|_| lp.jitter(bound)).collect();
        assert!(draws.iter().all(|d| *d <= bound));
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 50, "{distinct:?}");
        assert_eq!(lp.jitter(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_cap_refuses_and_counts() {
        let lp = LongPoll::new(LongPollSettings {
            max_held: 2,
            ..LongPollSettings::default()
        });
        let a = lp.admit().unwrap();
        let _b = lp.admit().unwrap();
        assert_eq!(lp.held(), 2);
        assert!(lp.admit().is_none());
        assert_eq!(lp.refused.load(Ordering::Relaxed), 1);
        drop(a);
        assert_eq!(lp.held(), 1);
        assert!(lp.admit().is_some());
    }
}
