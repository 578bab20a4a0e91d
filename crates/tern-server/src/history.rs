//! Each host's history in the store (`/tern/history/<updater_id>`, a
//! `tern_core::history::HostHistory`): a heartbeat that reports another state than the
//! replica last held for the host queues an observation here; a background task writes
//! them (every [`FLUSH_EVERY`], or on a host page's read of that host), reading the
//! stored record first so that the history continues across restarts and replicas.
//!
//! Heartbeats never wait for the store: the queue ([`history_queue`]) is bounded
//! ([`MAX_PENDING_HOSTS`] hosts, [`MAX_PENDING_PER_HOST`] observations each); past it
//! observations are dropped and counted (`tern_host_history_dropped_total`), and the
//! host is marked so that its next heartbeat queues it again (so does a failed write),
//! worked out against the stored state: a drop loses an intermediate step, never the
//! current one. The single writer also paces the store: after a restart every host is
//! new to the replica and is read once, at the writer's pace, and written only if it
//! changed.
//!
//! [`history_queue`]: crate::history_queue
//! [`MAX_PENDING_HOSTS`]: crate::history_queue::MAX_PENDING_HOSTS
//! [`MAX_PENDING_PER_HOST`]: crate::history_queue::MAX_PENDING_PER_HOST

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tern_core::history::{HostHistory, HostState};
use tern_store::{Compare, Op, Store, TxnOutcome};

use crate::history_queue::{Observed, unpack};
use crate::keys;
use crate::metrics::Metrics;
use crate::state::{Hosts, Settings, parts_group};

/// How often queued observations are written.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// A host silent this long has its history removed by the store (the TTL is renewed by
/// every write). On etcd with `ternd start --etcd-lease-bucket 1h`, a TTL this long
/// shares one lease per hour-wide time bucket (`EtcdOptions::lease_bucket`): the
/// history's first deploy on an N-host fleet costs each replica one lease grant per hour
/// it takes, not N, and a record may outlive its 90 days by the bucket (and, as any etcd
/// lease, by more when an etcd leader change restarts lease countdowns).
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(90 * 24 * 3600);
/// Records written per store transaction.
const BATCH: usize = 64;

parts_group! {
    /// What writing the hosts' histories touches: the queue (with the inventories it marks
    /// when a write fails), the store, and the counters.
    pub(crate) struct HistoryWriter {
        store: Arc<dyn Store>,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        hosts: Arc<Hosts>,
    }
}

pub(crate) fn key(updater_id: &str) -> String {
    format!("{}{updater_id}", keys::HISTORY_PREFIX)
}

/// Queues what a heartbeat reported (it changed, see `Inventory::heartbeat`). Hosts
/// without an updater_id have no host page and no history. Dropped (the queue is
/// full), the host is marked so that its next heartbeat tries again.
pub(crate) fn observe(
    hosts: &Hosts,
    metrics: &Metrics,
    hb: &tern_core::wire::Heartbeat,
    now: Timestamp,
) {
    if hb.updater_id.is_empty() {
        return;
    }
    if !hosts.history.push(&hb.updater_id, now, HostState::of(hb)) {
        Metrics::inc(&metrics.host_history_dropped);
        hosts.inventory().mark_history_unrecorded(&hb.updater_id);
    }
}

/// A batch that could not be written: its hosts' next heartbeats queue them again.
fn unrecorded(state: &HistoryWriter, hosts: &[(String, Vec<(Timestamp, HostState)>)]) {
    Metrics::inc(&state.metrics.host_history_errors);
    let mut inv = state.hosts.inventory();
    for (updater_id, _) in hosts {
        inv.mark_history_unrecorded(updater_id);
    }
}

/// The background writer: every [`FLUSH_EVERY`], writes what is queued. Once a burst
/// is over (of writes, or of connections closing), it gives the heap the burst freed
/// back to the system: this loop is the heap's clock, as it knows each flush's size.
pub(crate) async fn run(state: HistoryWriter) {
    let mut trim = crate::heap::AfterBursts::default();
    loop {
        tokio::time::sleep(FLUSH_EVERY).await;
        let hosts = flush_all(&state).await;
        let connections = state.metrics.connections.get().map_or(0, |c| c.open());
        if trim.due(hosts, connections, tokio::time::Instant::now().into_std()) {
            // Off the async workers: a trim walks every arena under its lock.
            match tokio::task::spawn_blocking(crate::heap::trim).await {
                Ok(()) => Metrics::inc(&state.metrics.heap_trims),
                Err(e) => tracing::warn!(error = %e, "trimming the heap failed"),
            }
        }
        Metrics::inc(&state.metrics.host_history_rounds);
    }
}

/// Writes every queued observation; returns how many hosts were queued.
pub(crate) async fn flush_all(state: &HistoryWriter) -> usize {
    let mut queued = state.hosts.history.take_all().into_iter();
    let hosts = queued.len();
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
    hosts
}

/// Writes what is queued for one host, then reads its history (newest first).
pub(crate) async fn read(
    state: &HistoryWriter,
    updater_id: &str,
) -> Result<Vec<tern_core::history::HostEvent>, tern_store::Error> {
    if let Some(queued) = state.hosts.history.take(updater_id) {
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
    state: &HistoryWriter,
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
