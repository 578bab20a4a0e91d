//! Every report period: write this replica's report, then, holding the leader lease,
//! reconcile the rollout and write it back (compare-and-swap, retrying conflicts).
//!
//! Several replicas share one store. Each writes its own report (with a TTL): counts per
//! group and version, a random sample of canary candidates for the groups that may
//! pick canaries soon, and the rollout's canaries it is connected to. Exactly one
//! replica, the holder of the leader lease, reconciles; it takes its agents from every
//! live report ([`tern_core::aggregate::connected_agents`]), never from its own
//! inventory alone. Every replica campaigns for the lease in the background
//! ([`campaign`]), so another leads within about the lease TTL after a leader dies.
//!
//! Fencing: the rollout is only ever written by compare-and-swap on the revision this
//! reconcile read, and just before the write the leader renews its lease in the store
//! ([`fence`]): a replica that was paused or cut off (its [`LeaseKeeper`]'s local
//! deadline passed, or the store says the lease is gone or someone else's) writes
//! nothing and stops leading. A write that still races a takeover (a pause between the
//! renewal and the CAS) fails its CAS if the new leader wrote in between, and otherwise
//! only records what its inputs said just before: no transition is lost or applied twice.

use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::api::{EventView, ReconcileResult};
use tern_core::reconcile::{self, Outcome, Resources};
use tern_core::resource::{
    Alert, AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
};
use tern_store::{Error as StoreError, LeaseKeeper};

use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::notify;
use crate::resources::{self, Decision, Stored};
use crate::state::AppState;

/// The largest report a replica writes.
pub(crate) const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// Writes this replica's report (TTL 1h), with its canary candidates and the canaries it
/// sees for the rollout find serves (the watched snapshot).
pub async fn write_report(state: &AppState) -> ApiResult<()> {
    let now = state.clock.now();
    let snapshot = state.snapshot();
    let rollout = snapshot.rollout.as_ref();
    let mut rng = ChaCha8Rng::from_os_rng();
    let needs = rollout.map(reconcile::needs);
    let (spec, folded) = {
        let mut inv = state.inventory();
        inv.expire(state.clock.monotonic(), state.settings.max_silence());
        inv.bounded_report(
            now,
            state.settings.report_period,
            needs.as_ref(),
            state.settings.canary_tenure,
            |g| rollout.is_some_and(|r| r.group(g).is_some()),
            &mut rng,
        )
    };
    if folded > 0 {
        state
            .metrics
            .report_entries_folded
            .fetch_add(folded as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let report = AutoUpdateAgentReport::new(&state.settings.replica_id, spec);
    let bytes = serde_json::to_vec(&report)
        .map_err(|e| ApiError::internal(format!("encoding the report: {e}")))?;
    // The backstop: folding keeps reports far smaller; a store (etcd: 1.5 MiB per
    // request) must never be handed more.
    if bytes.len() > MAX_REPORT_BYTES {
        crate::metrics::Metrics::inc(&state.metrics.reports_too_large);
        return Err(ApiError::internal(format!(
            "this replica's report is {} bytes, over the {MAX_REPORT_BYTES}-byte bound: not written",
            bytes.len()
        )));
    }
    state
        .store()
        .put(
            &keys::report(&state.settings.replica_id),
            bytes,
            Some(state.settings.report_ttl()),
        )
        .await?;
    Ok(())
}

/// True while this replica holds the leader lease (taking it when it is free).
pub(crate) async fn ensure_leader(state: &AppState) -> ApiResult<bool> {
    // One acquisition at a time; `leader` itself is only held for a moment, so that
    // readers (metrics, fencing) never wait for a store round trip.
    let _acquiring = state.leader_acquire.lock().await;
    {
        let mut leader = state.leader.lock().await;
        if leader.as_ref().is_some_and(LeaseKeeper::is_held) {
            return Ok(true);
        }
        *leader = None;
    }
    match state
        .store()
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
            *state.leader.lock().await = Some(LeaseKeeper::spawn(Arc::clone(&state.store), lease));
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Every replica, all the time: take the leader lease whenever it is free, so that a
/// leader that died is replaced within about the lease TTL (and, with the system clock,
/// the new leader reconciles at once). Polls at a tenth of the TTL.
pub(crate) async fn campaign(state: Arc<AppState>) {
    let ttl = state.settings.leader_ttl;
    let poll = (ttl / 10).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(1),
    );
    let mut was_leader = false;
    loop {
        let leader = match ensure_leader(&state).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "campaigning for the leader lease failed");
                false
            }
        };
        if leader && !was_leader && state.clock.as_dev().is_none() {
            // Take over at once rather than at the next period.
            state.kick.notify_one();
        }
        if !leader && was_leader {
            tracing::warn!(replica = %state.settings.replica_id, "no longer the reconcile leader");
        }
        was_leader = leader;
        tokio::time::sleep(poll).await;
    }
}

/// Fencing, just before a leader writes the rollout: renews the lease in the store and
/// checks it is still ours and within its local deadline. False (and the keeper is
/// dropped) when it is lost: the caller must not write.
async fn fence(state: &AppState) -> ApiResult<bool> {
    let lease = {
        let leader = state.leader.lock().await;
        leader.as_ref().and_then(LeaseKeeper::lease)
    };
    let Some(lease) = lease else {
        return Ok(false);
    };
    match state.store().lease_renew(&lease).await {
        Ok(renewed) if renewed.is_valid() => Ok(true),
        Ok(_) | Err(StoreError::LeaseLost { .. }) => {
            crate::metrics::Metrics::inc(&state.metrics.fenced_writes);
            tracing::warn!(replica = %state.settings.replica_id, "lost the leader lease before writing the rollout; writing nothing");
            *state.leader.lock().await = None;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// The holder of the leader lease, for messages.
async fn leader_name(state: &AppState) -> Option<String> {
    match state.store().lease_info(keys::LEADER_LEASE).await {
        Ok(info) => info.map(|i| i.holder),
        Err(_) => None,
    }
}

async fn not_leader(state: &AppState, why: &str) -> ApiResult<ReconcileResult> {
    let holder = leader_name(state).await;
    let message = match &holder {
        Some(h) => format!(
            "{why}: replica {h:?} holds the leader lease and reconciles; this replica ({}) wrote its report only",
            state.settings.replica_id
        ),
        None => format!(
            "{why}: no replica holds the leader lease right now; this replica ({}) wrote its report only, try again",
            state.settings.replica_id
        ),
    };
    Ok(ReconcileResult {
        leader: false,
        rollout: resources::load::<AutoUpdateAgentRollout>(state.store())
            .await?
            .map(|s| s.value),
        events: Vec::new(),
        no_rollout_reason: None,
        leader_replica: holder,
        message: Some(message),
    })
}

/// Gives the lease up (on shutdown) so another replica or a restart can lead at once.
pub(crate) async fn release_leader(state: &AppState) {
    let keeper = state.leader.lock().await.take();
    if let Some(keeper) = keeper
        && let Err(e) = keeper.release().await
    {
        tracing::warn!(error = %e, "releasing the leader lease failed");
    }
}

/// One reconcile, if this replica leads. Measures and counts it.
pub async fn reconcile_once(state: &AppState) -> ApiResult<ReconcileResult> {
    let _guard = state.reconcile_lock.lock().await;
    if !ensure_leader(state).await? {
        return not_leader(state, "not the leader").await;
    }
    let started = Instant::now();
    let result = reconcile_inner(state).await;
    let ok = result.is_ok();
    // A reconcile fenced off before writing (lease lost) is not one this replica ran.
    if result.as_ref().map_or(true, |r| r.leader) {
        state
            .metrics
            .reconcile_done(&state.reconcile_hist, started.elapsed().as_secs_f64(), ok);
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
    if let Err(e) = state.refresh_snapshot().await {
        tracing::warn!(error = %e, "refreshing the find snapshot failed");
    }
    result
}

/// What the leader's compare-and-swap did.
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
    /// The lease was lost just before writing: nothing was written.
    Fenced,
}

/// The rollout's active alerts before and after one reconcile.
struct AlertChange {
    before: Vec<Alert>,
    after: Vec<Alert>,
    versions: Option<notify::RolloutVersions>,
    at: jiff::Timestamp,
}

async fn reconcile_inner(state: &AppState) -> ApiResult<ReconcileResult> {
    let store = state.store();
    let (stored, written) = resources::read_modify_write(
        store,
        &state.metrics.reconcile_conflicts,
        |current: Option<Stored<AutoUpdateAgentRollout>>| async move {
            let now = state.clock.now();
            let config = resources::load::<AutoUpdateConfig>(store).await?;
            let version = resources::load::<AutoUpdateVersion>(store).await?;
            let reports = resources::reports(store).await?;
            let resources = Resources {
                config: config.as_ref().map(|s| &s.value),
                version: version.as_ref().map(|s| &s.value),
                rollout: current.as_ref().map(|s| &s.value),
            };
            let mut rng = ChaCha8Rng::from_os_rng();
            let outcome = reconcile::reconcile_reports(
                now,
                resources,
                &reports,
                state.settings.report_period,
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
            // Fencing: renew the lease right before the compare-and-swap.
            if !fence(state).await? {
                return Ok(Decision::Keep(Written::Fenced));
            }
            Ok(match next {
                Some(next) => Decision::Put(next, done),
                None => Decision::Delete(done),
            })
        },
    )
    .await?;
    match written {
        Written::Fenced => not_leader(state, "lost the leader lease").await,
        Written::Done {
            events,
            no_rollout_reason,
            deleted,
            alerts,
        } => {
            // Only the leader gets here (after its fenced write): one notice per change.
            state.notifiers.notify_changes(
                &alerts.before,
                &alerts.after,
                alerts.versions.as_ref(),
                alerts.at,
            );
            if deleted {
                tracing::info!(
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
    }
}

/// Report, then reconcile; errors are logged and counted, never fatal.
pub(crate) async fn tick(state: &AppState) -> ApiResult<ReconcileResult> {
    if let Err(e) = write_report(state).await {
        crate::metrics::Metrics::inc(&state.metrics.report_errors);
        tracing::warn!(error = %e, "writing the report failed");
    }
    reconcile_once(state).await
}

/// The background loop (system clock only): a tick every report period, or sooner when
/// kicked by an admin write.
pub(crate) async fn run(state: Arc<AppState>) {
    let period = state
        .settings
        .report_period
        .unsigned_abs()
        .max(std::time::Duration::from_millis(100));
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let _ = tick(&state).await;
            }
            () = state.kick.notified() => {
                // Coalesce a burst of writes.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let _ = reconcile_once(&state).await;
            }
        }
    }
}
