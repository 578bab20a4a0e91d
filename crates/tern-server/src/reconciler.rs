//! Every report period: write this replica's report, then, holding the leader lease,
//! reconcile the rollout and write it back (compare-and-swap, retrying conflicts).

use std::sync::Arc;
use std::time::Instant;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::Serialize;
use tern_core::reconcile::{self, Event, Outcome, ReconcileInput};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
};
use tern_store::{Error as StoreError, LeaseKeeper};

use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::resources::{self, Stored};
use crate::state::AppState;

/// How many times a rollout write is retried after a revision conflict.
const CONFLICT_RETRIES: usize = 5;

/// An event, for the API and logs.
#[derive(Clone, Debug, Serialize)]
pub struct EventView {
    pub kind: &'static str,
    pub message: String,
}

pub fn describe(e: &Event) -> EventView {
    let (kind, message) = match e {
        Event::RolloutCreated {
            start_version,
            target_version,
            why,
        } => (
            "rollout_created",
            format!("new rollout from {start_version} to {target_version} ({why})"),
        ),
        Event::ModeChanged { from, to } => (
            "mode_changed",
            format!("mode changed from {} to {}", from.as_str(), to.as_str()),
        ),
        Event::GroupChanged {
            group,
            from,
            to,
            reason,
        } => (
            "group_changed",
            format!(
                "group {group}: {} -> {} ({reason})",
                from.as_str(),
                to.as_str()
            ),
        ),
        Event::CanariesPicked { group, updater_ids } => (
            "canaries_picked",
            format!("group {group}: canaries {}", updater_ids.join(", ")),
        ),
        Event::GroupOverdue {
            group,
            state,
            since,
        } => (
            "group_overdue",
            format!(
                "group {group} has been {} since {since}: check its agents",
                state.as_str()
            ),
        ),
        Event::ProgressHalted { group } => (
            "progress_halted",
            format!("group {group}: too many agents missing, progress halted"),
        ),
    };
    EventView { kind, message }
}

/// What one reconcile did.
#[derive(Clone, Debug, Serialize)]
pub struct ReconcileResult {
    /// False when another replica holds the leader lease (nothing was reconciled here).
    pub leader: bool,
    pub rollout: Option<AutoUpdateAgentRollout>,
    pub events: Vec<EventView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rollout_reason: Option<String>,
}

/// Writes this replica's report (TTL 1h).
pub async fn write_report(state: &AppState) -> ApiResult<()> {
    let now = state.clock.now();
    let spec = {
        let mut inv = state.inventory();
        inv.expire(Instant::now(), state.settings.max_silence());
        inv.report(now, state.settings.report_period)
    };
    let report = AutoUpdateAgentReport::new(&state.settings.replica_id, spec);
    let bytes = serde_json::to_vec(&report)
        .map_err(|e| ApiError::internal(format!("encoding the report: {e}")))?;
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
pub async fn ensure_leader(state: &AppState) -> ApiResult<bool> {
    let mut leader = state.leader.lock().await;
    if leader.as_ref().is_some_and(LeaseKeeper::is_held) {
        return Ok(true);
    }
    *leader = None;
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
            *leader = Some(LeaseKeeper::spawn(Arc::clone(&state.store), lease));
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Gives the lease up (on shutdown) so another replica or a restart can lead at once.
pub async fn release_leader(state: &AppState) {
    if let Some(keeper) = state.leader.lock().await.take()
        && let Err(e) = keeper.release().await
    {
        tracing::warn!(error = %e, "releasing the leader lease failed");
    }
}

/// One reconcile, if this replica leads. Measures and counts it.
pub async fn reconcile_once(state: &AppState) -> ApiResult<ReconcileResult> {
    let _guard = state.reconcile_lock.lock().await;
    if !ensure_leader(state).await? {
        return Ok(ReconcileResult {
            leader: false,
            rollout: resources::load::<AutoUpdateAgentRollout>(state.store())
                .await?
                .map(|s| s.value),
            events: Vec::new(),
            no_rollout_reason: None,
        });
    }
    let started = Instant::now();
    let result = reconcile_inner(state).await;
    let ok = result.is_ok();
    state
        .metrics
        .reconcile_done(&state.reconcile_hist, started.elapsed().as_secs_f64(), ok);
    match &result {
        Ok(r) => {
            for e in &r.events {
                state.metrics.event(e.kind);
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

async fn reconcile_inner(state: &AppState) -> ApiResult<ReconcileResult> {
    let store = state.store();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let now = state.clock.now();
        let config = resources::load::<AutoUpdateConfig>(store).await?;
        let version = resources::load::<AutoUpdateVersion>(store).await?;
        let current = resources::load::<AutoUpdateAgentRollout>(store).await?;
        let reports = resources::reports(store).await?;
        let agents = state
            .inventory()
            .connected(now, state.settings.report_period);
        let input = ReconcileInput {
            config: config.as_ref().map(|s| &s.value),
            version: version.as_ref().map(|s| &s.value),
            rollout: current.as_ref().map(|s| &s.value),
            reports: &reports,
            agents: &agents,
            report_period: state.settings.report_period,
        };
        let mut rng = ChaCha8Rng::from_os_rng();
        let outcome = reconcile::reconcile(now, &input, &mut rng);
        let written = match outcome {
            Outcome::NoRollout { why } => {
                if let Some(cur) = &current {
                    match store.delete(keys::ROLLOUT, Some(cur.revision)).await {
                        Ok(_) | Err(StoreError::NotFound { .. }) => {
                            tracing::info!(%why, "rollout deleted");
                        }
                        Err(e) => {
                            if retry(state, &e, attempt) {
                                continue;
                            }
                            return Err(e.into());
                        }
                    }
                }
                return Ok(ReconcileResult {
                    leader: true,
                    rollout: None,
                    events: Vec::new(),
                    no_rollout_reason: Some(why),
                });
            }
            Outcome::Rollout { rollout, events } => {
                let events: Vec<EventView> = events.iter().map(describe).collect();
                let unchanged = current
                    .as_ref()
                    .is_some_and(|c: &Stored<_>| resources::same(&c.value, rollout.as_ref()));
                if unchanged {
                    return Ok(ReconcileResult {
                        leader: true,
                        rollout: current.map(|c| c.value),
                        events,
                        no_rollout_reason: None,
                    });
                }
                match resources::write(store, rollout.as_ref(), current.map(|c| c.revision)).await {
                    Ok(stored) => (stored, events),
                    Err(e) => {
                        if retry(state, &e, attempt) {
                            continue;
                        }
                        return Err(e.into());
                    }
                }
            }
        };
        let (stored, events) = written;
        return Ok(ReconcileResult {
            leader: true,
            rollout: Some(stored.value),
            events,
            no_rollout_reason: None,
        });
    }
}

fn retry(state: &AppState, e: &StoreError, attempt: usize) -> bool {
    let conflict = matches!(
        e,
        StoreError::Conflict { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::NotFound { .. }
    );
    if conflict {
        crate::metrics::Metrics::inc(&state.metrics.reconcile_conflicts);
        tracing::info!(attempt, error = %e, "rollout changed while reconciling; retrying");
    }
    conflict && attempt < CONFLICT_RETRIES
}

/// Report, then reconcile; errors are logged and counted, never fatal.
pub async fn tick(state: &AppState) -> ApiResult<ReconcileResult> {
    if let Err(e) = write_report(state).await {
        crate::metrics::Metrics::inc(&state.metrics.report_errors);
        tracing::warn!(error = %e, "writing the report failed");
    }
    reconcile_once(state).await
}

/// The background loop (system clock only): a tick every report period, or sooner when
/// kicked by an admin write.
pub async fn run(state: Arc<AppState>) {
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
