//! The server's clock: the system clock in production, a settable one for tests and
//! demos (`ternd start --dev-clock RFC3339`).

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

/// Where "now" comes from. Every timestamp the server writes (reports, first/last seen,
/// reconcile instants, manual transitions) is read from it.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;

    /// The dev clock, when this is one (enables the `/v1/dev/*` routes).
    fn as_dev(&self) -> Option<&DevClock> {
        None
    }
}

/// The wall clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told.
#[derive(Debug)]
pub struct DevClock {
    now: Mutex<Timestamp>,
}

#[derive(Debug, thiserror::Error)]
pub enum DevClockError {
    #[error("the clock cannot move backwards by advancing ({0}); set it instead")]
    Negative(SignedDuration),
    #[error("advancing by {0} leaves the supported time range")]
    Overflow(SignedDuration),
}

impl DevClock {
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timestamp> {
        // A poisoned lock only means a panic elsewhere while holding a Copy value.
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now_value(&self) -> Timestamp {
        *self.lock()
    }

    pub fn set(&self, to: Timestamp) -> Timestamp {
        *self.lock() = to;
        to
    }

    pub fn advance(&self, by: SignedDuration) -> Result<Timestamp, DevClockError> {
        if by.is_negative() {
            return Err(DevClockError::Negative(by));
        }
        let mut now = self.lock();
        *now = now
            .checked_add(by)
            .map_err(|_| DevClockError::Overflow(by))?;
        Ok(*now)
    }
}

impl Clock for DevClock {
    fn now(&self) -> Timestamp {
        *self.lock()
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
        let t1 = c.advance(SignedDuration::from_mins(90)).unwrap();
        assert_eq!(t1, "2026-11-23T12:30:00Z".parse::<Timestamp>().unwrap());
        assert!(c.advance(SignedDuration::from_secs(-1)).is_err());
        assert_eq!(c.now(), t1);
        c.set(t0);
        assert_eq!(c.now(), t0);
    }
}
