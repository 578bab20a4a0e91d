//! The server's clock: the system clock in production, a settable one for tests and
//! demos (`ternd start --dev-clock RFC3339`).
//!
//! The dev clock is shared through the store ([`keys::DEV_CLOCK`]) so that every replica
//! agrees on the time: setting or advancing it on any replica writes the key, and every
//! replica's store watch moves its local copy ([`DevClock`]), which is what `now()`
//! reads (no store read per call).

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use tern_store::{Error as StoreError, Store};

use crate::keys;

/// The value of [`keys::DEV_CLOCK`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SharedClock {
    pub(crate) now: Timestamp,
}

impl SharedClock {
    pub(crate) fn decode(bytes: &[u8]) -> Option<Timestamp> {
        serde_json::from_slice::<SharedClock>(bytes)
            .ok()
            .map(|c| c.now)
    }

    fn encode(now: Timestamp) -> Vec<u8> {
        // A struct of one timestamp always serializes.
        serde_json::to_vec(&SharedClock { now }).unwrap_or_default()
    }
}

/// At start with `--dev-clock start`: creates the shared clock at `start` if the store
/// has none, else returns the shared time (another replica, or an earlier run, set it).
pub(crate) async fn share_dev_clock(
    store: &dyn Store,
    start: Timestamp,
) -> anyhow::Result<Timestamp> {
    match store
        .create(keys::DEV_CLOCK, SharedClock::encode(start), None)
        .await
    {
        Ok(_) => Ok(start),
        Err(StoreError::AlreadyExists { .. }) => Ok(store
            .get(keys::DEV_CLOCK)
            .await?
            .and_then(|kv| SharedClock::decode(&kv.value))
            .unwrap_or(start)),
        Err(e) => Err(e.into()),
    }
}

/// How the shared dev clock moves.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClockMove {
    Set(Timestamp),
    Advance(SignedDuration),
}

/// Moves the shared dev clock (compare-and-swap, retried on conflicts with other
/// replicas moving it at the same time) and returns the new time.
/// `base` moved forward by `by`: a dev clock never goes back.
fn advanced(base: Timestamp, by: SignedDuration) -> Result<Timestamp, DevClockError> {
    if by.is_negative() {
        return Err(DevClockError::Negative(by));
    }
    base.checked_add(by)
        .map_err(|_| DevClockError::Overflow(by))
}

pub(crate) async fn move_shared_clock(
    store: &dyn Store,
    how: ClockMove,
    fallback: Timestamp,
) -> Result<(Timestamp, tern_store::Revision), MoveError> {
    for _ in 0..20 {
        let current = store.get(keys::DEV_CLOCK).await?;
        let base = current
            .as_ref()
            .and_then(|kv| SharedClock::decode(&kv.value))
            .unwrap_or(fallback);
        let next = match how {
            ClockMove::Set(t) => t,
            ClockMove::Advance(by) => advanced(base, by)?,
        };
        let bytes = SharedClock::encode(next);
        let written = match &current {
            None => store.create(keys::DEV_CLOCK, bytes, None).await,
            Some(kv) => {
                store
                    .compare_and_swap(keys::DEV_CLOCK, kv.mod_revision, bytes, None)
                    .await
            }
        };
        match written {
            Ok(kv) => return Ok((next, kv.mod_revision)),
            Err(
                StoreError::Conflict { .. }
                | StoreError::AlreadyExists { .. }
                | StoreError::NotFound { .. },
            ) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(MoveError::Store(StoreError::Unavailable(
        "the shared dev clock kept changing while moving it".into(),
    )))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MoveError {
    #[error(transparent)]
    Clock(#[from] DevClockError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where "now" comes from. Every timestamp the server writes (reports, first/last seen,
/// reconcile instants, manual transitions) is read from it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;

    /// The instant a host's silence is measured against (inventory expiry): real
    /// monotonic time on the system clock, so a wall-clock step forgets nobody; dev
    /// time on the dev clock, so advancing it forgets hosts that stayed silent.
    fn monotonic(&self) -> std::time::Instant {
        std::time::Instant::now()
    }

    /// The dev clock, when this is one (enables the `/v1/dev/*` routes).
    fn as_dev(&self) -> Option<&DevClock> {
        None
    }
}

/// The wall clock.
#[derive(Debug, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told.
#[derive(Debug)]
pub struct DevClock {
    /// The time, and the store revision of the shared clock's write it came from (0:
    /// none yet). Moves are delivered out of order (a watch can hand over a write
    /// after a newer one was read or made here), and a dev clock may be set back, so
    /// only the revision can tell which move is the latest.
    now: Mutex<(Timestamp, tern_store::Revision)>,
    /// A real instant and the dev time it stands for: `monotonic` counts from here.
    anchor: (std::time::Instant, Timestamp),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DevClockError {
    #[error("the clock cannot move backwards by advancing ({0}); set it instead")]
    Negative(SignedDuration),
    #[error("advancing by {0} leaves the supported time range")]
    Overflow(SignedDuration),
}

impl DevClock {
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new((start, 0)),
            anchor: (std::time::Instant::now(), start),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Timestamp, tern_store::Revision)> {
        // A poisoned lock only means a panic elsewhere while holding a Copy value.
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now_value(&self) -> Timestamp {
        self.lock().0
    }

    /// Moves this clock alone, outside the shared one (benchmarks and tests that own
    /// the clock; ternd itself moves it only through [`DevClock::adopt`]).
    pub fn set(&self, to: Timestamp) {
        self.lock().0 = to;
    }

    /// Takes the shared clock's time as written at store `revision`, unless a later
    /// write was taken already. Returns whether the time changed.
    pub(crate) fn adopt(&self, to: Timestamp, revision: tern_store::Revision) -> bool {
        let mut now = self.lock();
        if revision < now.1 {
            return false;
        }
        let changed = now.0 != to;
        *now = (to, revision);
        changed
    }
}

impl Clock for DevClock {
    fn now(&self) -> Timestamp {
        self.lock().0
    }

    fn monotonic(&self) -> std::time::Instant {
        // Dev time before the anchor (the clock was set back) counts as the anchor:
        // silence never goes negative.
        let since = self.now_value().duration_since(self.anchor.1);
        let since = std::time::Duration::try_from(since).unwrap_or_default();
        self.anchor.0.checked_add(since).unwrap_or(self.anchor.0)
    }

    fn as_dev(&self) -> Option<&DevClock> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_clock_moves_only_when_told() {
        let t0: Timestamp = "2026-11-23T11:00:00Z".parse().unwrap();
        let c = DevClock::new(t0);
        assert_eq!(c.now(), t0);
        let t1 = advanced(t0, SignedDuration::from_mins(90)).unwrap();
        assert_eq!(t1, "2026-11-23T12:30:00Z".parse::<Timestamp>().unwrap());
        assert!(advanced(t1, SignedDuration::from_secs(-1)).is_err());
        assert_eq!(c.now(), t0, "computing a move does not move the clock");
        assert!(c.adopt(t1, 5));
        assert_eq!(c.now(), t1);
        assert!(c.adopt(t0, 6), "a later write may set the clock back");
        assert_eq!(c.now(), t0);
    }

    #[test]
    fn a_move_delivered_late_does_not_undo_a_later_one() {
        let t0: Timestamp = "2026-11-23T11:00:00Z".parse().unwrap();
        let (t1, t2) = (
            advanced(t0, SignedDuration::from_mins(10)).unwrap(),
            advanced(t0, SignedDuration::from_mins(20)).unwrap(),
        );
        let c = DevClock::new(t0);
        assert!(
            c.adopt(t2, 8),
            "this replica's own move, written at revision 8"
        );
        assert!(
            !c.adopt(t1, 7),
            "the watch hands over the move of revision 7 only now"
        );
        assert_eq!(c.now(), t2);
        assert!(!c.adopt(t2, 8), "the same write read again changes nothing");
    }
}
