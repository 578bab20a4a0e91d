//! The host history observations a replica holds until `history`'s writer stores them:
//! a bounded queue, by updater_id. A leaf: `AppState` owns the queue, and `history`
//! (above the state) fills and drains it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use jiff::Timestamp;
use tern_core::history::HostState;

/// Hosts with observations waiting at most.
pub(crate) const MAX_PENDING_HOSTS: usize = 100_000;
/// Observations waiting per host at most (the oldest go first).
pub(crate) const MAX_PENDING_PER_HOST: usize = 8;
/// The observations waiting to be written, by updater_id.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    hosts: Mutex<HashMap<String, Vec<(Timestamp, HostState)>>>,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<(Timestamp, HostState)>>> {
        // A panic while holding it leaves whole entries only: the map is still sound.
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one observation; false when it was dropped (the queue is full).
    pub(crate) fn push(&self, updater_id: &str, at: Timestamp, state: HostState) -> bool {
        let mut hosts = self.lock();
        if let Some(queued) = hosts.get_mut(updater_id) {
            if queued.len() >= MAX_PENDING_PER_HOST {
                queued.remove(0);
                queued.push((at, state));
                return false;
            }
            queued.push((at, state));
            return true;
        }
        if hosts.len() >= MAX_PENDING_HOSTS {
            return false;
        }
        hosts.insert(updater_id.to_string(), vec![(at, state)]);
        true
    }

    pub(crate) fn take_all(&self) -> HashMap<String, Vec<(Timestamp, HostState)>> {
        std::mem::take(&mut *self.lock())
    }

    pub(crate) fn take(&self, updater_id: &str) -> Option<Vec<(Timestamp, HostState)>> {
        self.lock().remove(updater_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(version: &str) -> HostState {
        HostState {
            group: "dev".into(),
            version: version.into(),
            updater_version: None,
            updater_status: Default::default(),
            rollback: false,
            failed_version: None,
            healthy: true,
        }
    }

    #[test]
    fn the_queue_is_bounded_per_host_and_in_hosts() {
        let p = Pending::default();
        let t = Timestamp::UNIX_EPOCH;
        for i in 0..MAX_PENDING_PER_HOST {
            assert!(p.push("a", t, s(&format!("1.0.{i}"))));
        }
        assert!(!p.push("a", t, s("9.9.9")), "over the per-host bound");
        let a = p.take("a").unwrap();
        assert_eq!(a.len(), MAX_PENDING_PER_HOST);
        assert_eq!(a.last().unwrap().1.version, "9.9.9", "the newest is kept");
        assert_eq!(a[0].1.version, "1.0.1", "the oldest went");
        for i in 0..MAX_PENDING_HOSTS {
            assert!(p.push(&i.to_string(), t, s("1.0.0")));
        }
        assert!(!p.push("one-more", t, s("1.0.0")));
        assert_eq!(p.take_all().len(), MAX_PENDING_HOSTS);
        assert!(p.push("one-more", t, s("1.0.0")), "room again once written");
    }
}
