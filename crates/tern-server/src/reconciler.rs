//! Every report period: write this replica's report, then, holding the leader lease,
//! reconcile the rollout and write it back (guarded by the lease, retrying conflicts).
//!
//! Several replicas share one store. Each writes its own report (with a TTL): counts per
//! group and version, a random sample of canary candidates for the groups that may
//! pick canaries soon, and the rollout's canaries it is connected to. Exactly one
//! replica, the holder of the leader lease, reconciles; it takes its agents from every
//! live report ([`tern_core::aggregate::connected_agents`]), never from its own
//! inventory alone. Every replica campaigns for the lease in the background
//! ([`campaign`]), so another leads within about the lease TTL after a leader dies.
//!
//! Fencing: the rollout (its spec, status and alerts: the only thing the leader writes)
//! is only ever written by one store transaction that requires both that the leader
//! lease is still held in the store by this acquisition (holder and fencing token) and
//! that the rollout is still at the revision this reconcile read (or still absent)
//! ([`resources::read_modify_write_under_lease`]). The store checks both atomically with
//! the write, so a replica that was paused or cut off writes nothing once another has
//! taken the lease, however long the pause and whatever its local deadline still says
//! ([`fenced`]: it stops leading); a stale revision alone is a conflict, retried from a
//! fresh read. The [`LeaseKeeper`] keeps renewing the lease in the background so that it
//! stays held; its local deadline only spares a write it already knows is doomed.
//! No transition is lost or applied twice.

use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::api::{EventView, ReconcileResult};
use tern_core::reconcile::{self, Outcome};
use tern_core::resource::{
    Alert, AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateVersion,
};
use tern_store::{Lease, LeaseKeeper, Store};

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::resources::{self, Decision, Stored, UnderLease};
use crate::state::{Health, Hosts, Leadership, Resources, Settings, parts_group};
use crate::{keys, notify};

parts_group! {
    /// What writing this replica's reports touches: the resources (the snapshot's
    /// rollouts, the store the reports go to), the hosts counted, the health they say.
    pub struct Reporter {
        res: Resources,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        hosts: Arc<Hosts>,
        health: Arc<Health>,
    }
}

parts_group! {
    /// What reconciling under the leader lease touches: the resources, the lease, the
    /// notices the leader sends.
    pub struct Reconciler {
        res: Resources,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        leadership: Arc<Leadership>,
        notifiers: Arc<crate::notify::Notifiers>,
    }
}

impl Reconciler {
    /// What [`ensure_leader`] takes of it.
    fn candidate(&self) -> Candidate<'_> {
        Candidate {
            store: &self.res.store,
            settings: &self.settings,
            metrics: &self.metrics,
            leadership: &self.leadership,
        }
    }
}

/// What taking the leader lease touches.
#[derive(Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub(crate) store: &'a Arc<dyn Store>,
    pub(crate) settings: &'a Settings,
    pub(crate) metrics: &'a Metrics,
    pub(crate) leadership: &'a Leadership,
}

/// The largest report a replica writes.
pub(crate) const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// Room for the report's metadata around its spec.
const REPORT_ENVELOPE: usize = 4 * 1024;

/// Writes this replica's reports (TTL 1h), one per product it serves, each with its
/// canary candidates and the canaries it sees for the rollout find serves (the watched
/// snapshot). A product's report that fails is logged and does not keep the others
/// from being written; the agent's error (else the first) is returned.
pub async fn write_report(state: &Reporter) -> ApiResult<()> {
    let snapshot = state.res.snapshot();
    let agent = write_product_report(state, &snapshot, tern_core::product::AGENT).await;
    let mut first = None;
    for product in snapshot.products.keys() {
        if let Err(e) = write_product_report(state, &snapshot, product).await {
            tracing::warn!(product = %product, error = %e, "writing the product's report failed");
            first.get_or_insert(e);
        }
    }
    state.hosts.keep_inventories(|p| snapshot.serves(p));
    agent.and_then(|()| first.map_or(Ok(()), Err))
}

/// Writes this replica's report of `product` (an empty one when no host of it
/// heartbeated here: the leader holds a rollout without a live report from every
/// replica that counted hosts).
async fn write_product_report(
    state: &Reporter,
    snapshot: &crate::snapshot::Snapshot,
    product: &str,
) -> ApiResult<()> {
    let now = state.res.clock.now();
    let rollout = snapshot.rollout_of(product);
    let mut rng = ChaCha8Rng::from_os_rng();
    let needs = rollout.map(reconcile::needs);
    let mut report = |inv: &mut crate::inventory::Inventory| {
        inv.expire(state.res.clock.monotonic(), state.settings.max_silence());
        inv.bounded_report(
            now,
            state.settings.report_period,
            |id| snapshot.pins.holds(id, product, now),
            needs.as_ref(),
            state.settings.canary_tenure,
            |g| rollout.is_some_and(|r| r.group(g).is_some()),
            &mut rng,
        )
    };
    let made = state.hosts.with_inventory(product, &mut report);
    let (spec, folded) = match made {
        Some(made) => made,
        None => report(&mut crate::inventory::Inventory::default()),
    };
    if folded > 0 {
        state
            .metrics
            .report_entries_folded
            .fetch_add(folded as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let mut spec = spec;
    spec.warming_up = state
        .res
        .clock
        .monotonic()
        .saturating_duration_since(state.health.started)
        < state.settings.warm_up();
    // The bound: a store (etcd: 1.5 MiB per request) must never be handed more. A
    // report over it is shrunk by the documented rule (details the leader can do
    // without, never a count) rather than dropped: a replica whose report is not
    // written would hide its hosts from the leader.
    let encoded_len =
        |s: &tern_core::resource::ReportSpec| serde_json::to_vec(s).map_or(usize::MAX, |b| b.len());
    if encoded_len(&spec) > MAX_REPORT_BYTES - REPORT_ENVELOPE {
        crate::metrics::Metrics::inc(&state.metrics.reports_shrunk);
        let known = |g: &str| rollout.is_some_and(|r| r.group(g).is_some());
        if !tern_core::inventory::shrink_report(&mut spec, known, |s| {
            encoded_len(s) <= MAX_REPORT_BYTES - REPORT_ENVELOPE
        }) {
            crate::metrics::Metrics::inc(&state.metrics.reports_too_large);
        }
        tracing::warn!(cut = ?spec.shrunk, "this replica's report was over its bound: shrunk");
    }
    let report = AutoUpdateAgentReport::new(&state.settings.replica_id, spec);
    let bytes = serde_json::to_vec(&report)
        .map_err(|e| ApiError::internal(format!("encoding the report: {e}")))?;
    if bytes.len() > MAX_REPORT_BYTES {
        crate::metrics::Metrics::inc(&state.metrics.reports_too_large);
        return Err(ApiError::internal(format!(
            "this replica's report is {} bytes even shrunk, over the {MAX_REPORT_BYTES}-byte bound: not written",
            bytes.len()
        )));
    }
    let key = if product == tern_core::product::AGENT {
        keys::report(&state.settings.replica_id)
    } else {
        format!(
            "{}{}",
            keys::product_reports(product),
            state.settings.replica_id
        )
    };
    state
        .res
        .store()
        .put(&key, bytes, Some(state.settings.report_ttl()))
        .await?;
    state.health.touch_store();
    Ok(())
}

/// True while this replica holds the leader lease (taking it when it is free).
pub(crate) async fn ensure_leader(state: Candidate<'_>) -> ApiResult<bool> {
    // One acquisition at a time; `leader` itself is only held for a moment, so that
    // readers (metrics, fencing) never wait for a store round trip.
    let _acquiring = state.leadership.acquire.lock().await;
    {
        let mut leader = state.leadership.leader.lock().await;
        if leader.as_ref().is_some_and(LeaseKeeper::is_held) {
            return Ok(true);
        }
        *leader = None;
    }
    match state
        .store
        .lease_acquire(
            keys::LEADER_LEASE,
            &state.settings.replica_id,
            state.settings.leader_ttl,
        )
        .await?
    {
        Some(lease) => {
            tracing::info!(replica = %state.settings.replica_id, token = lease.token, "became the reconcile leader");
            crate::metrics::Metrics::inc(&state.metrics.leader_acquired);
            *state.leadership.leader.lock().await =
                Some(LeaseKeeper::spawn(Arc::clone(state.store), lease));
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Every replica, all the time: take the leader lease whenever it is free, so that a
/// leader that died is replaced within about the lease TTL (and, with the system clock,
/// the new leader reconciles at once). Polls at a tenth of the TTL.
pub(crate) async fn campaign(state: Reconciler) {
    let ttl = state.settings.leader_ttl;
    let poll = (ttl / 10).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(1),
    );
    let mut was_leader = false;
    loop {
        let leader = match ensure_leader(state.candidate()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "campaigning for the leader lease failed");
                false
            }
        };
        if leader && !was_leader && state.res.clock.as_dev().is_none() {
            // Take over at once rather than at the next period.
            state.leadership.kick.notify_one();
        }
        if !leader && was_leader {
            tracing::warn!(replica = %state.settings.replica_id, "no longer the reconcile leader");
        }
        was_leader = leader;
        tokio::time::sleep(poll).await;
    }
}

/// The lease this replica leads with, while its keeper still counts it held (no
/// renewal was refused and its local deadline has not passed). Only a cheap early
/// answer: the store may already have given the lease to another replica, which is why
/// the leader's writes are transactions guarded by the lease itself
/// ([`resources::read_modify_write_under_lease`]).
async fn held_lease(leadership: &Leadership) -> Option<Lease> {
    leadership
        .leader
        .lock()
        .await
        .as_ref()
        .and_then(LeaseKeeper::lease)
}

/// A write of this replica's was refused because it no longer holds `lease`: count it,
/// say why, and stop leading (the campaign takes the lease again if it is free).
async fn fenced(state: &Reconciler, lease: &Lease, reason: &str) {
    crate::metrics::Metrics::inc(&state.metrics.fenced_writes);
    tracing::warn!(replica = %state.settings.replica_id, token = lease.token, reason, "lost the leader lease before writing the rollout; writing nothing");
    let mut leader = state.leadership.leader.lock().await;
    // Drop the keeper of the lost acquisition only: never one the campaign has since
    // made with a newer token.
    if leader
        .as_ref()
        .and_then(LeaseKeeper::lease)
        .is_none_or(|held| held.token == lease.token)
    {
        *leader = None;
    }
}

/// The holder of the leader lease, for messages.
async fn leader_name(store: &dyn Store) -> Option<String> {
    match store.lease_info(keys::LEADER_LEASE).await {
        Ok(info) => info.map(|i| i.holder),
        Err(_) => None,
    }
}

async fn not_leader(store: &dyn Store, replica_id: &str, why: &str) -> ApiResult<ReconcileResult> {
    let holder = leader_name(store).await;
    let message = match &holder {
        Some(h) => format!(
            "{why}: replica {h:?} holds the leader lease and reconciles; this replica ({replica_id}) wrote its report only",
        ),
        None => format!(
            "{why}: no replica holds the leader lease right now; this replica ({replica_id}) wrote its report only, try again",
        ),
    };
    Ok(ReconcileResult {
        leader: false,
        rollout: resources::load::<AutoUpdateAgentRollout>(store)
            .await?
            .map(|s| s.value),
        events: Vec::new(),
        no_rollout_reason: None,
        leader_replica: holder,
        message: Some(message),
    })
}

/// Gives the lease up (on shutdown) so another replica or a restart can lead at once.
pub(crate) async fn release_leader(leadership: &Leadership) {
    let keeper = leadership.leader.lock().await.take();
    if let Some(keeper) = keeper
        && let Err(e) = keeper.release().await
    {
        tracing::warn!(error = %e, "releasing the leader lease failed");
    }
}

/// One reconcile, if this replica leads. Measures and counts it.
pub async fn reconcile_once(state: &Reconciler) -> ApiResult<ReconcileResult> {
    let _guard = state.leadership.reconcile_lock.lock().await;
    if !ensure_leader(state.candidate()).await? {
        return not_leader(
            state.res.store(),
            &state.settings.replica_id,
            "not the leader",
        )
        .await;
    }
    let started = Instant::now();
    let result = reconcile_inner(state).await;
    let ok = result.is_ok();
    // A reconcile fenced off before writing (lease lost) is not one this replica ran.
    if result.as_ref().map_or(true, |r| r.leader) {
        state
            .metrics
            .reconcile_done(started.elapsed().as_secs_f64(), ok);
    }
    match &result {
        Ok(r) => {
            for e in &r.events {
                state.metrics.event(&e.kind);
                tracing::info!(event = e.kind, "{}", e.message);
            }
        }
        Err(e) => tracing::warn!(error = %e, "reconcile failed"),
    }
    if let Err(e) = state.res.refresh_snapshot().await {
        tracing::warn!(error = %e, "refreshing the find snapshot failed");
    }
    result
}

/// What the leader's decision was, for its guarded write.
enum Written {
    /// The reconcile's outcome is stored (or already was).
    Done {
        events: Vec<EventView>,
        no_rollout_reason: Option<String>,
        /// A rollout existed and was deleted (its reason is `no_rollout_reason`).
        deleted: bool,
        /// The alerts before and after, for the notifiers.
        alerts: AlertChange,
    },
    /// The lease was already lost by the local deadline: nothing was written. Why.
    Fenced(String),
}

/// The rollout's active alerts before and after one reconcile.
struct AlertChange {
    before: Vec<Alert>,
    after: Vec<Alert>,
    versions: Option<notify::RolloutVersions>,
    at: jiff::Timestamp,
}

/// The agent's reconcile, then every other product's, each written under the lease;
/// then the lifted pins are removed. Answers the agent's (or the refusal that stopped
/// them); another product's failure is logged and does not stop the others.
async fn reconcile_inner(state: &Reconciler) -> ApiResult<ReconcileResult> {
    let Some(lease) = held_lease(&state.leadership).await else {
        // Lost since `ensure_leader` said otherwise: nothing read, nothing to write.
        return not_leader(
            state.res.store(),
            &state.settings.replica_id,
            "lost the leader lease",
        )
        .await;
    };
    let agent = reconcile_product(state, &lease, tern_core::product::AGENT).await?;
    if !agent.leader {
        return Ok(agent);
    }
    for product in crate::products::served(state.res.store()).await? {
        if product == tern_core::product::AGENT {
            continue;
        }
        match reconcile_product(state, &lease, &product).await {
            Ok(r) if !r.leader => return Ok(r),
            Ok(r) => {
                for e in &r.events {
                    state.metrics.event(&e.kind);
                    tracing::info!(event = e.kind, product = %product, "{}", e.message);
                }
            }
            Err(e) => tracing::warn!(product = %product, error = %e, "reconcile failed"),
        }
    }
    match crate::pins::clean_up(state.res.store(), state.res.clock.now()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(pins = n, "removed host pins that have lifted"),
        Err(e) => tracing::warn!(error = %e, "removing lifted host pins failed"),
    }
    Ok(agent)
}

/// One product's reconcile, from its config in force, version and reports, written
/// under `lease`.
async fn reconcile_product(
    state: &Reconciler,
    lease: &Lease,
    product: &str,
) -> ApiResult<ReconcileResult> {
    let store = state.res.store();
    let written = resources::read_modify_write_under_lease(
        store,
        product,
        &state.metrics.reconcile_conflicts,
        lease,
        |current: Option<Stored<AutoUpdateAgentRollout>>| async move {
            let now = state.res.clock.now();
            let (config, _) = crate::products::config_in_force(store, product).await?;
            let version = resources::load_for::<AutoUpdateVersion>(store, product).await?;
            let reports = resources::reports_for(store, product).await?;
            let frozen = crate::freeze::load(store)
                .await?
                .is_some_and(|f| f.holds(product));
            let resources = reconcile::Resources {
                config: config.as_ref(),
                version: version.as_ref().map(|s| &s.value),
                rollout: current.as_ref().map(|s| &s.value),
                frozen,
            };
            // The canary analyses due: fetched now, judged by the reconcile.
            let due = current
                .as_ref()
                .map(|s| tern_core::reconcile::analysis_requests(&s.value, now))
                .unwrap_or_default();
            let measured = crate::analysis::measure(state.settings.prometheus.clone(), due).await;
            let mut rng = ChaCha8Rng::from_os_rng();
            let outcome = reconcile::reconcile_reports_measured(
                now,
                resources,
                &reports,
                state.settings.report_period,
                &measured,
                &mut rng,
            );
            let (next, events, no_rollout_reason) = match outcome {
                Outcome::NoRollout { why } => (None, Vec::new(), Some(why)),
                Outcome::Rollout { rollout, events } => (
                    Some(*rollout),
                    events.iter().map(EventView::from).collect(),
                    None,
                ),
            };
            let unchanged = match (&next, &current) {
                (None, None) => true,
                (Some(next), Some(c)) => resources::same(&c.value, next),
                _ => false,
            };
            let alerts_of = |r: Option<&AutoUpdateAgentRollout>| r.map(|r| r.status.alerts.clone());
            let alerts = AlertChange {
                before: alerts_of(current.as_ref().map(|s| &s.value)).unwrap_or_default(),
                after: alerts_of(next.as_ref()).unwrap_or_default(),
                versions: next.as_ref().map(|r| notify::RolloutVersions {
                    start_version: r.spec.start_version.to_string(),
                    target_version: r.spec.target_version.to_string(),
                    product: (product != tern_core::product::AGENT).then(|| product.to_string()),
                }),
                at: now,
            };
            let done = Written::Done {
                events,
                no_rollout_reason,
                deleted: !unchanged && next.is_none(),
                alerts,
            };
            if unchanged {
                return Ok(Decision::Keep(done));
            }
            // Spares the store a transaction bound to fail when the keeper already knows
            // the lease is lost (a pause past its deadline). Not the fence: that is the
            // lease compare of the write itself.
            if held_lease(&state.leadership)
                .await
                .is_none_or(|held| held.token != lease.token)
            {
                return Ok(Decision::Keep(Written::Fenced(
                    "the lease's local deadline passed or its renewal was refused".into(),
                )));
            }
            Ok(match next {
                Some(next) => Decision::Put(next, done),
                None => Decision::Delete(done),
            })
        },
    )
    .await?;
    let (stored, events, no_rollout_reason, deleted, alerts) = match written {
        UnderLease::Done(
            stored,
            Written::Done {
                events,
                no_rollout_reason,
                deleted,
                alerts,
            },
        ) => (stored, events, no_rollout_reason, deleted, alerts),
        UnderLease::Done(_, Written::Fenced(reason)) | UnderLease::LeaseLost(reason) => {
            fenced(state, lease, &reason).await;
            return not_leader(
                state.res.store(),
                &state.settings.replica_id,
                "lost the leader lease",
            )
            .await;
        }
    };
    // Only the leader gets here (after its fenced write): one notice per change.
    state.notifiers.notify_changes(
        &alerts.before,
        &alerts.after,
        alerts.versions.as_ref(),
        alerts.at,
    );
    if deleted {
        tracing::info!(
            product,
            why = no_rollout_reason.as_deref().unwrap_or_default(),
            "rollout deleted"
        );
    }
    Ok(ReconcileResult {
        leader: true,
        rollout: stored.map(|s| s.value),
        events,
        no_rollout_reason,
        leader_replica: None,
        message: None,
    })
}

/// Report, then reconcile; errors are logged and counted, never fatal.
pub(crate) async fn tick(
    reporter: &Reporter,
    reconciler: &Reconciler,
) -> ApiResult<ReconcileResult> {
    if let Err(e) = write_report(reporter).await {
        crate::metrics::Metrics::inc(&reporter.metrics.report_errors);
        tracing::warn!(error = %e, "writing the report failed");
    }
    reconcile_once(reconciler).await
}

/// The background loop (system clock only): a tick every report period (every active
/// report period while the rollout is moving, and soon after a change among this
/// replica's hosts then), or a reconcile sooner when kicked by an admin write. When is
/// tern-core's call ([`tern_core::rollout::next_report`]), as in the simulator.
pub(crate) async fn run(state: Reporter, reconciler: Reconciler) {
    let floor = std::time::Duration::from_millis(100);
    let periods = tern_core::rollout::ReportPeriods {
        quiet: state.settings.report_period.unsigned_abs().max(floor),
        active: state.settings.active_report_period.map(|a| a.max(floor)),
        after_change: state.settings.report_after_change.map(|a| a.max(floor)),
    };
    // Every new snapshot: a rollout another replica's leader set moving shortens the
    // wait here too.
    let mut snapshots = state.res.answers.long_poll.subscribe();
    loop {
        let _ = tick(&state, &reconciler).await;
        let last = tokio::time::Instant::now();
        let mut changed = None;
        loop {
            // The soonest any product's rollout asks for (every replica writes every
            // product's report at once).
            let snapshot = state.res.snapshot();
            let due = std::iter::once(snapshot.rollout.as_ref())
                .chain(snapshot.products.values().map(|p| p.rollout.as_ref()))
                .map(|r| tern_core::rollout::next_report(r, &periods, last, changed))
                .min()
                .unwrap_or(last);
            tokio::select! {
                () = tokio::time::sleep_until(due) => break,
                Ok(()) = snapshots.changed() => {}
                () = state.hosts.changed.notified() => {
                    changed.get_or_insert_with(tokio::time::Instant::now);
                }
                () = reconciler.leadership.kick.notified() => {
                    // Coalesce a burst of writes.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = reconcile_once(&reconciler).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use tern_core::fixtures;
    use tern_core::resource::{AutoUpdateConfig, GroupState};
    use tern_store::{
        Compare, KeyValue, LeaseInfo, Listing, MemoryStore, Op, Revision, Store, TxnOutcome, Watch,
    };

    use super::*;
    use crate::clock::DevClock;
    use crate::state::{AppState, Settings};

    /// Long enough that no keeper renews, and no local deadline passes, during a test:
    /// whatever the leader learns of a takeover it learns from the store's transaction.
    const TTL: Duration = Duration::from_secs(3600);
    const USURPER: &str = "usurper";

    /// A memory store that, once armed with the leader's lease, hands that lease to
    /// [`USURPER`] at the very moment the leader writes the rollout, just before the
    /// write reaches the store: a leader paused between every check it makes and its
    /// write (the window a renewal before the write leaves open).
    struct TakeoverOnWrite {
        inner: MemoryStore,
        armed: Mutex<Option<Lease>>,
    }

    impl TakeoverOnWrite {
        async fn take_over_if_armed(&self, key: &str) {
            if key != keys::ROLLOUT {
                return;
            }
            let lease = self.armed.lock().unwrap().take();
            if let Some(lease) = lease {
                take_over(&self.inner, &lease).await;
            }
        }
    }

    #[async_trait]
    impl Store for TakeoverOnWrite {
        async fn get(&self, key: &str) -> tern_store::Result<Option<KeyValue>> {
            self.inner.get(key).await
        }
        async fn list(&self, prefix: &str) -> tern_store::Result<Listing> {
            self.inner.list(prefix).await
        }
        async fn revision(&self) -> tern_store::Result<Revision> {
            self.inner.revision().await
        }
        async fn create(
            &self,
            key: &str,
            value: Vec<u8>,
            ttl: Option<Duration>,
        ) -> tern_store::Result<KeyValue> {
            self.take_over_if_armed(key).await;
            self.inner.create(key, value, ttl).await
        }
        async fn compare_and_swap(
            &self,
            key: &str,
            expected: Revision,
            value: Vec<u8>,
            ttl: Option<Duration>,
        ) -> tern_store::Result<KeyValue> {
            self.take_over_if_armed(key).await;
            self.inner.compare_and_swap(key, expected, value, ttl).await
        }
        async fn put(
            &self,
            key: &str,
            value: Vec<u8>,
            ttl: Option<Duration>,
        ) -> tern_store::Result<KeyValue> {
            self.take_over_if_armed(key).await;
            self.inner.put(key, value, ttl).await
        }
        async fn delete(
            &self,
            key: &str,
            expected: Option<Revision>,
        ) -> tern_store::Result<Revision> {
            self.take_over_if_armed(key).await;
            self.inner.delete(key, expected).await
        }
        async fn watch(&self, prefix: &str, start_revision: Revision) -> tern_store::Result<Watch> {
            self.inner.watch(prefix, start_revision).await
        }
        async fn lease_acquire(
            &self,
            name: &str,
            holder: &str,
            ttl: Duration,
        ) -> tern_store::Result<Option<Lease>> {
            self.inner.lease_acquire(name, holder, ttl).await
        }
        async fn lease_renew(&self, lease: &Lease) -> tern_store::Result<Lease> {
            self.inner.lease_renew(lease).await
        }
        async fn lease_release(&self, lease: &Lease) -> tern_store::Result<()> {
            self.inner.lease_release(lease).await
        }
        async fn lease_info(&self, name: &str) -> tern_store::Result<Option<LeaseInfo>> {
            self.inner.lease_info(name).await
        }
        async fn txn(&self, compares: &[Compare], ops: &[Op]) -> tern_store::Result<TxnOutcome> {
            for op in ops {
                let (Op::Put { key, .. } | Op::Delete { key }) = op else {
                    continue;
                };
                self.take_over_if_armed(key).await;
            }
            self.inner.txn(compares, ops).await
        }
    }

    /// In the store only: `lease` released and acquired by [`USURPER`]. The deposed
    /// holder's keeper is not told.
    async fn take_over(store: &dyn Store, lease: &Lease) -> Lease {
        store.lease_release(lease).await.unwrap();
        store
            .lease_acquire(keys::LEADER_LEASE, USURPER, TTL)
            .await
            .unwrap()
            .expect("the released lease is free")
    }

    /// One replica, "a", on `store` with the dev clock at Monday 09:00 and the three
    /// groups' config and a version in place (dev's window opens at 10:00).
    async fn replica(store: Arc<dyn Store>) -> Arc<AppState> {
        replica_with(store, |_| {}).await
    }

    async fn replica_with(
        store: Arc<dyn Store>,
        change: impl FnOnce(&mut Settings),
    ) -> Arc<AppState> {
        let dir = std::env::temp_dir();
        let mut settings = Settings {
            data_dir: dir,
            replica_id: "a".into(),
            report_period: jiff::SignedDuration::from_secs(60),
            active_report_period: None,
            report_after_change: None,
            heartbeat_interval: Duration::from_secs(60),
            find_rate: 0.0,
            find_burst: 1,
            heartbeat_rate: 0.0,
            heartbeat_burst: 1,
            leader_ttl: TTL,
            edition: "community".into(),
            public_max_age: 5,
            max_agents: 1_000,
            max_shared_token_hosts: 10_000,
            store_contact_bound: Duration::from_secs(30),
            canary_tenure: jiff::SignedDuration::from_mins(10),
            directive_period: std::time::Duration::from_secs(10),
            release_trust: None,
            long_poll: Default::default(),
            prometheus: None,
            security: Default::default(),
            artifact_check: None,
        };
        change(&mut settings);
        let clock = Arc::new(DevClock::new("2026-11-23T09:00:00Z".parse().unwrap()));
        let config = AutoUpdateConfig::from_text(&fixtures::dev_staging_prod(0)).unwrap();
        let version =
            AutoUpdateVersion::from_text(&fixtures::version("1.0.0", "1.1.0", "regular")).unwrap();
        resources::write(store.as_ref(), &config, None)
            .await
            .unwrap();
        resources::write(store.as_ref(), &version, None)
            .await
            .unwrap();
        AppState::new(store, clock, settings)
    }

    fn dev_state(rollout: Option<&AutoUpdateAgentRollout>) -> Option<GroupState> {
        rollout.and_then(|r| r.group("dev")).map(|g| g.state)
    }

    fn set_clock(state: &AppState, at: &str) {
        state.clock.as_dev().unwrap().set(at.parse().unwrap());
    }

    /// A replica that has not reached its store for longer than its bound counts itself
    /// cut off (find then holds every host); reaching it again ends that. Real time,
    /// whatever the dev clock.
    #[tokio::test]
    async fn a_replica_that_lost_its_store_past_its_bound_is_cut_off() {
        let store = Arc::new(MemoryStore::new());
        let state = replica_with(store, |s| {
            s.store_contact_bound = Duration::from_millis(100);
        })
        .await;
        let never = replica_with(Arc::new(MemoryStore::new()), |s| {
            s.store_contact_bound = Duration::ZERO;
        })
        .await;
        state.health.touch_store();
        never.health.touch_store();
        assert!(!state.health.cut_off());
        tokio::time::timeout(Duration::from_secs(10), async {
            while !state.health.cut_off() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("no contact for longer than the bound cuts a replica off");
        // As long without contact, past the other's bound: a bound of zero never holds.
        assert!(!never.health.cut_off(), "a bound of zero never holds");
        write_report(&Reporter::of(&state)).await.unwrap();
        assert!(!state.health.cut_off(), "a report written is contact");
    }

    /// The lease taken over in the store while the leader's keeper still counts it held
    /// (its local deadline is an hour away): the reconcile that would start dev writes
    /// nothing, says it does not lead and who does, and stops leading. Once the lease is
    /// free again the same reconcile does write: the refused write was a real one.
    #[tokio::test]
    async fn a_leader_whose_lease_was_taken_over_writes_nothing_before_its_deadline() {
        let store = Arc::new(MemoryStore::new());
        let state = replica(store.clone()).await;
        let first = reconcile_once(&Reconciler::of(&state)).await.unwrap();
        assert!(first.leader, "{first:?}");
        assert_eq!(
            dev_state(first.rollout.as_ref()),
            Some(GroupState::Unstarted)
        );
        let before = store.get(keys::ROLLOUT).await.unwrap().unwrap();

        let lease = held_lease(&state.leadership).await.unwrap();
        let usurper = take_over(store.as_ref(), &lease).await;
        assert!(lease.is_valid());
        assert!(
            held_lease(&state.leadership).await.is_some(),
            "the keeper does not know yet"
        );

        set_clock(&state, "2026-11-23T10:05:00Z");
        let refused = reconcile_once(&Reconciler::of(&state)).await.unwrap();
        assert!(!refused.leader, "{refused:?}");
        assert_eq!(refused.leader_replica.as_deref(), Some(USURPER));
        assert_eq!(
            store.get(keys::ROLLOUT).await.unwrap().unwrap(),
            before,
            "the rollout is untouched"
        );
        assert_eq!(
            state
                .metrics
                .fenced_writes
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert!(
            held_lease(&state.leadership).await.is_none(),
            "it stopped leading"
        );

        store.lease_release(&usurper).await.unwrap();
        // Its report (no host) is the evidence dev may start on: reconciles hold
        // without a live report.
        write_report(&Reporter::of(&state)).await.unwrap();
        let written = reconcile_once(&Reconciler::of(&state)).await.unwrap();
        assert!(written.leader, "{written:?}");
        assert_eq!(
            dev_state(written.rollout.as_ref()),
            Some(GroupState::Active)
        );
        let after = store.get(keys::ROLLOUT).await.unwrap().unwrap();
        assert!(after.mod_revision > before.mod_revision);
    }

    /// The lease passes to another replica at the moment the leader writes, after every
    /// check the leader makes (its keeper's deadline, anything it could renew): the
    /// store refuses the write. Here the write would have created the rollout.
    #[tokio::test]
    async fn a_lease_taken_over_between_the_decision_and_the_write_fences_it() {
        let store = Arc::new(TakeoverOnWrite {
            inner: MemoryStore::new(),
            armed: Mutex::new(None),
        });
        let state = replica(store.clone()).await;
        assert!(
            ensure_leader(Reconciler::of(&state).candidate())
                .await
                .unwrap()
        );
        let lease = held_lease(&state.leadership).await.unwrap();
        *store.armed.lock().unwrap() = Some(lease.clone());

        let refused = reconcile_once(&Reconciler::of(&state)).await.unwrap();
        assert!(
            store.armed.lock().unwrap().is_none(),
            "the leader tried to write"
        );
        assert!(!refused.leader, "{refused:?}");
        assert_eq!(refused.leader_replica.as_deref(), Some(USURPER));
        assert!(refused.rollout.is_none(), "{refused:?}");
        assert!(
            store.get(keys::ROLLOUT).await.unwrap().is_none(),
            "no rollout was created"
        );
        assert_eq!(
            state
                .metrics
                .fenced_writes
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert!(
            held_lease(&state.leadership).await.is_none(),
            "it stopped leading"
        );
    }
}
