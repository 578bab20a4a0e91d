//! The host history observations a replica holds until `history`'s writer stores them:
//! a bounded queue, by updater_id. A leaf: `AppState` owns the queue, and `history`
//! (above the state) fills and drains it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use jiff::Timestamp;
use tern_core::history::HostState;

use crate::inventory::id::Id;

/// Hosts with observations waiting at most.
pub(crate) const MAX_PENDING_HOSTS: usize = 100_000;
/// Observations waiting per host at most (the oldest go first).
pub(crate) const MAX_PENDING_PER_HOST: usize = 8;

/// The observations waiting to be written, by updater_id.
///
/// Up to [`MAX_PENDING_HOSTS`] hosts wait here at once, and the memory they took stays
/// with the process after they are written (the allocator keeps it): each is kept
/// compact, keyed by the updater_id's 16-byte form ([`Id`]) with its state's strings in
/// one allocation, about half what the plain `(String, Vec<(Timestamp, HostState)>)`
/// took.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    hosts: Mutex<HashMap<Id, Vec<Queued>>>,
}

/// One observation as queued: a [`HostState`] with its strings end to end.
#[derive(Debug)]
pub(crate) struct Queued {
    at: Timestamp,
    /// group, version, updater_version, failed_version, end to end.
    text: Box<str>,
    /// Where group, version and updater_version end in `text`.
    ends: [u32; 3],
    updater_status: tern_core::wire::UpdaterStatus,
    rollback: bool,
    healthy: bool,
    has_updater_version: bool,
    has_failed_version: bool,
}

impl Queued {
    fn of(at: Timestamp, s: HostState) -> Self {
        let uv = s.updater_version.as_deref().unwrap_or("");
        let fv = s.failed_version.as_deref().unwrap_or("");
        let mut text = String::with_capacity(s.group.len() + s.version.len() + uv.len() + fv.len());
        let mut ends = [0u32; 3];
        for (end, part) in ends.iter_mut().zip([&*s.group, &*s.version, uv]) {
            text.push_str(part);
            // Heartbeat bodies are at most 16 KiB: the offsets fit.
            *end = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        text.push_str(fv);
        Self {
            at,
            text: text.into_boxed_str(),
            ends,
            updater_status: s.updater_status,
            rollback: s.rollback,
            healthy: s.healthy,
            has_updater_version: s.updater_version.is_some(),
            has_failed_version: s.failed_version.is_some(),
        }
    }

    fn state(&self) -> (Timestamp, HostState) {
        let [g, v, u] = self.ends.map(|e| e as usize);
        let part = |from: usize, to: usize| self.text.get(from..to).unwrap_or("").to_string();
        (
            self.at,
            HostState {
                group: part(0, g),
                version: part(g, v),
                updater_version: self.has_updater_version.then(|| part(v, u)),
                updater_status: self.updater_status,
                rollback: self.rollback,
                failed_version: self.has_failed_version.then(|| part(u, self.text.len())),
                healthy: self.healthy,
            },
        )
    }
}

pub(crate) type Observed = Vec<(Timestamp, HostState)>;

pub(crate) fn unpack(queued: Vec<Queued>) -> Observed {
    queued.iter().map(Queued::state).collect()
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, HashMap<Id, Vec<Queued>>> {
        // A panic while holding it leaves whole entries only: the map is still sound.
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one observation; false when it was dropped (the queue is full).
    pub(crate) fn push(&self, updater_id: &str, at: Timestamp, state: HostState) -> bool {
        let id = Id::parse(updater_id);
        let mut hosts = self.lock();
        if let Some(queued) = hosts.get_mut(&id) {
            if queued.len() >= MAX_PENDING_PER_HOST {
                queued.remove(0);
                queued.push(Queued::of(at, state));
                return false;
            }
            queued.push(Queued::of(at, state));
            return true;
        }
        if hosts.len() >= MAX_PENDING_HOSTS {
            return false;
        }
        hosts.insert(id, vec![Queued::of(at, state)]);
        true
    }

    /// Everything queued, still compact: the writer unpacks one batch at a time, so
    /// that the plain form of a full queue never exists at once.
    pub(crate) fn take_all(&self) -> Vec<(Id, Vec<Queued>)> {
        std::mem::take(&mut *self.lock()).into_iter().collect()
    }

    pub(crate) fn take(&self, updater_id: &str) -> Option<Observed> {
        self.lock().remove(&Id::parse(updater_id)).map(unpack)
    }

    /// Hosts with observations waiting (`tern_host_history_pending_hosts`).
    pub(crate) fn hosts(&self) -> usize {
        self.lock().len()
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
        assert_eq!(a[1].1, s("1.0.2"), "kept whole");
        assert_eq!(a.last().unwrap().1.version, "9.9.9", "the newest is kept");
        assert_eq!(a[0].1.version, "1.0.1", "the oldest went");
        for i in 0..MAX_PENDING_HOSTS {
            assert!(p.push(&i.to_string(), t, s("1.0.0")));
        }
        assert!(!p.push("one-more", t, s("1.0.0")));
        assert_eq!(p.take_all().len(), MAX_PENDING_HOSTS);
        assert!(p.push("one-more", t, s("1.0.0")), "room again once written");
    }

    #[test]
    fn a_queued_state_comes_back_exactly() {
        let p = Pending::default();
        let t = Timestamp::UNIX_EPOCH;
        let id = "3f1d9c2e-8a4b-4c6d-9e0f-1a2b3c4d5e6f";
        let full = HostState {
            group: "dév".into(),
            version: "".into(),
            updater_version: Some("0.2.0".into()),
            updater_status: tern_core::wire::UpdaterStatus::Disabled,
            rollback: true,
            failed_version: Some("1.1.0".into()),
            healthy: false,
        };
        let empty_options = HostState {
            updater_version: Some(String::new()),
            failed_version: None,
            ..full.clone()
        };
        for state in [s("1.0.0"), full, empty_options] {
            assert!(p.push(id, t, state.clone()));
            let back: Vec<_> = p
                .take_all()
                .into_iter()
                .map(|(id, q)| (id.to_string(), unpack(q)))
                .collect();
            assert_eq!(back, vec![(id.to_string(), vec![(t, state)])]);
        }
        assert!(p.push("Not-A-UUID", t, s("1.0.0")));
        assert_eq!(p.take("Not-A-UUID").unwrap()[0].1, s("1.0.0"));
    }
}
