//! Each host's history in the store (`/tern/history/<updater_id>`, a
//! `tern_core::history::HostHistory`): a heartbeat that reports another state than the
//! replica last held for the host queues an observation here; a background task writes
//! them (every [`FLUSH_EVERY`], or on a host page's read of that host), reading the
//! stored record first so that the history continues across restarts and replicas.
//!
//! Heartbeats never wait for the store: the queue is bounded ([`MAX_PENDING_HOSTS`] hosts,
//! [`MAX_PENDING_PER_HOST`] observations each); past it observations are dropped and
//! counted (`tern_host_history_dropped_total`), and the host is marked so that its
//! next heartbeat queues it again (so does a failed write), worked out against the
//! stored state: a drop loses an intermediate step, never the current one. The single
//! writer also paces the store: after a restart every host is new to the replica and
//! is read once, at the writer's pace, and written only if it changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use tern_core::history::{HostHistory, HostState};
use tern_store::{Compare, Op, Store, TxnOutcome};

use crate::inventory::id::Id;
use crate::keys;
use crate::metrics::Metrics;
use crate::state::AppState;

/// How often queued observations are written.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// Hosts with observations waiting at most.
pub(crate) const MAX_PENDING_HOSTS: usize = 100_000;
/// Observations waiting per host at most (the oldest go first).
pub(crate) const MAX_PENDING_PER_HOST: usize = 8;
/// A host silent this long has its history removed by the store (the TTL is renewed by
/// every write).
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(90 * 24 * 3600);
/// Records written per store transaction.
const BATCH: usize = 64;

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
struct Queued {
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

type Observed = Vec<(Timestamp, HostState)>;

fn unpack(queued: Vec<Queued>) -> Observed {
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
    fn take_all(&self) -> Vec<(Id, Vec<Queued>)> {
        std::mem::take(&mut *self.lock()).into_iter().collect()
    }

    fn take(&self, updater_id: &str) -> Option<Observed> {
        self.lock().remove(&Id::parse(updater_id)).map(unpack)
    }

    /// Hosts with observations waiting (`tern_host_history_pending_hosts`).
    pub(crate) fn hosts(&self) -> usize {
        self.lock().len()
    }
}

pub(crate) fn key(updater_id: &str) -> String {
    format!("{}{updater_id}", keys::HISTORY_PREFIX)
}

/// Queues what a heartbeat reported (it changed, see `Inventory::heartbeat`). Hosts
/// without an updater_id have no host page and no history. Dropped (the queue is
/// full), the host is marked so that its next heartbeat tries again.
pub(crate) fn observe(state: &AppState, hb: &tern_core::wire::Heartbeat, now: Timestamp) {
    if hb.updater_id.is_empty() {
        return;
    }
    if !state.history.push(&hb.updater_id, now, HostState::of(hb)) {
        Metrics::inc(&state.metrics.host_history_dropped);
        state.inventory().mark_history_unrecorded(&hb.updater_id);
    }
}

/// A batch that could not be written: its hosts' next heartbeats queue them again.
fn unrecorded(state: &AppState, hosts: &[(String, Vec<(Timestamp, HostState)>)]) {
    Metrics::inc(&state.metrics.host_history_errors);
    let mut inv = state.inventory();
    for (updater_id, _) in hosts {
        inv.mark_history_unrecorded(updater_id);
    }
}

/// The background writer: every [`FLUSH_EVERY`], writes what is queued.
pub(crate) async fn run(state: Arc<AppState>) {
    loop {
        tokio::time::sleep(FLUSH_EVERY).await;
        flush_all(&state).await;
    }
}

/// Writes every queued observation.
pub(crate) async fn flush_all(state: &AppState) {
    let mut queued = state.history.take_all().into_iter();
    loop {
        let chunk: Vec<(String, Observed)> = queued
            .by_ref()
            .take(BATCH)
            .map(|(id, q)| (id.to_string(), unpack(q)))
            .collect();
        if chunk.is_empty() {
            break;
        }
        let chunk = &chunk[..];
        if let Err(e) = write_batch(state, chunk).await {
            unrecorded(state, chunk);
            tracing::warn!(error = %e, hosts = chunk.len(), "writing host histories failed; those changes are not in their hosts' history");
        }
    }
}

/// Writes what is queued for one host, then reads its history (newest first).
pub(crate) async fn read(
    state: &AppState,
    updater_id: &str,
) -> Result<Vec<tern_core::history::HostEvent>, tern_store::Error> {
    if let Some(queued) = state.history.take(updater_id) {
        let hosts = [(updater_id.to_string(), queued)];
        if let Err(e) = write_batch(state, &hosts).await {
            unrecorded(state, &hosts);
            tracing::warn!(error = %e, updater_id, "writing a host's history failed");
        }
    }
    Ok(load(state.store.as_ref(), updater_id)
        .await?
        .map(|(h, _)| h.newest_first())
        .unwrap_or_default())
}

/// The stored history and its revision; an unreadable record (written by a newer ternd,
/// or damaged) starts again rather than blocking the host's history for good.
async fn load(
    store: &dyn Store,
    updater_id: &str,
) -> Result<Option<(HostHistory, tern_store::Revision)>, tern_store::Error> {
    let Some(kv) = store.get(&key(updater_id)).await? else {
        return Ok(None);
    };
    let history = serde_json::from_slice(&kv.value).unwrap_or_else(|e| {
        tracing::warn!(error = %e, updater_id, "a stored host history is unreadable; starting it again");
        HostHistory::default()
    });
    Ok(Some((history, kv.mod_revision)))
}

/// One transaction for a batch of hosts, each record guarded by the revision it was
/// read at; when another replica wrote one of them meanwhile (a host that moved), each
/// host is written on its own, read again up to a few times.
async fn write_batch(
    state: &AppState,
    hosts: &[(String, Vec<(Timestamp, HostState)>)],
) -> Result<(), tern_store::Error> {
    let store = state.store.as_ref();
    let replica = &state.settings.replica_id;
    let mut compares = Vec::with_capacity(hosts.len());
    let mut ops = Vec::with_capacity(hosts.len());
    for (updater_id, observed) in hosts {
        if let Some((compare, op)) = next_record(store, replica, updater_id, observed).await? {
            compares.push(compare);
            ops.push(op);
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    if store.txn(&compares, &ops).await?.is_committed() {
        Metrics::add(&state.metrics.host_history_writes, ops.len() as u64);
        return Ok(());
    }
    for (updater_id, observed) in hosts {
        for attempt in 0.. {
            let Some((compare, op)) = next_record(store, replica, updater_id, observed).await?
            else {
                break;
            };
            match store.txn(&[compare], &[op]).await? {
                TxnOutcome::Committed { .. } => {
                    Metrics::inc(&state.metrics.host_history_writes);
                    break;
                }
                TxnOutcome::Failed { .. } if attempt < 3 => continue,
                TxnOutcome::Failed { reason, .. } => {
                    return Err(tern_store::Error::Backend(format!(
                        "the history of {updater_id} kept changing under this replica: {reason}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The write that adds `observed` to the stored history of a host, guarded by the
/// revision it was read at; None when nothing changed.
async fn next_record(
    store: &dyn Store,
    replica: &str,
    updater_id: &str,
    observed: &[(Timestamp, HostState)],
) -> Result<Option<(Compare, Op)>, tern_store::Error> {
    let k = key(updater_id);
    let (mut history, compare) = match load(store, updater_id).await? {
        Some((h, rev)) => (h, Compare::mod_revision(k.clone(), rev)),
        None => (HostHistory::default(), Compare::absent(k.clone())),
    };
    let mut changed = false;
    for (at, s) in observed {
        changed |= history.observe(s.clone(), *at, replica);
    }
    if !changed {
        return Ok(None);
    }
    let bytes = serde_json::to_vec(&history)
        .map_err(|e| tern_store::Error::Backend(format!("encoding a host history: {e}")))?;
    Ok(Some((compare, Op::put(k, bytes, Some(KEEP_FOR)))))
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
