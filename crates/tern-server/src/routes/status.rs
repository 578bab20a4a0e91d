//! The read-only views: `agents status`, `agents report`, `inventory ls`. What they
//! show is computed by `tern_core::views`; this module reads the store and memory.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use tern_core::api::{InventoryEntry, InventoryResponse, ReportResponse, StatusResponse};
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateVersion};
use tern_core::rollout::Groups;
use tern_core::views;

use crate::error::ApiResult;
use crate::resources;
use crate::state::AppState;

/// `GET /v1/agents/status`
pub(crate) async fn status(State(state): State<Arc<AppState>>) -> ApiResult<Json<StatusResponse>> {
    let store = state.store();
    let now = state.clock.now();
    let modes = resources::modes(store).await?;
    let rollout = resources::load::<AutoUpdateAgentRollout>(store)
        .await?
        .map(|s| s.value);
    let reports = resources::reports(store).await?;
    let version_exists =
        rollout.is_some() || resources::load::<AutoUpdateVersion>(store).await?.is_some();
    Ok(Json(views::status(
        now,
        modes,
        rollout,
        version_exists,
        &reports,
        state.settings.report_period,
    )))
}

/// `GET /v1/agents/report`: the sum of the live reports.
pub(crate) async fn report(State(state): State<Arc<AppState>>) -> ApiResult<Json<ReportResponse>> {
    let reports = resources::reports(state.store()).await?;
    let groups = rollout_groups(&state);
    Ok(Json(views::report(
        state.clock.now(),
        &reports,
        state.settings.report_period,
        &groups,
    )))
}

/// `GET /v1/inventory`: the agents connected to this replica.
pub(crate) async fn inventory(
    State(state): State<Arc<AppState>>,
) -> ApiResult<Json<InventoryResponse>> {
    let now = state.clock.now();
    let period = state.settings.report_period;
    let mut agents: Vec<InventoryEntry> = {
        let mut inv = state.inventory();
        inv.expire(state.clock.monotonic(), state.settings.max_silence());
        inv.agents()
            .map(|a| InventoryEntry {
                install_state: a.install_state(),
                ..views::inventory_entry(a.to_inventory_agent(), now, period)
            })
            .collect()
    };
    agents.sort_by(|a, b| {
        (&a.group, &a.hostname, &a.updater_id).cmp(&(&b.group, &b.hostname, &b.updater_id))
    });
    let groups = rollout_groups(&state);
    let unknown_groups = groups.unknown_among(agents.iter().map(|a| a.group.as_str()));
    Ok(Json(InventoryResponse {
        replica: state.settings.replica_id.clone(),
        now,
        agents,
        unknown_groups,
    }))
}

/// The groups of the rollout find serves (none without a rollout).
fn rollout_groups(state: &AppState) -> Groups {
    state
        .snapshot()
        .rollout
        .as_ref()
        .map(Groups::of)
        .unwrap_or_default()
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct SignedQuery {
    version: String,
}

/// `GET /v1/releases/signed?version=V` (for `ternctl agents new-rollout`'s warning).
pub(crate) async fn release_signed(
    State(state): State<Arc<AppState>>,
    axum::extract::Query(q): axum::extract::Query<SignedQuery>,
) -> ApiResult<Json<tern_core::api::ReleaseSignedResponse>> {
    use tern_core::api::ReleaseSignedResponse as R;
    let Some(trust) = &state.settings.release_trust else {
        return Ok(Json(R {
            verified: false,
            signed: None,
            detail: "ternd has no signed release repository (ternd start --trust-root)".into(),
        }));
    };
    let version = crate::routes::body::version("version", &q.version)?.to_string();
    Ok(Json(match trust.signed(&version).await {
        Ok(crate::trust::Signed::Yes { targets_version }) => R {
            verified: true,
            signed: Some(true),
            detail: format!("signed (targets version {targets_version})"),
        },
        Ok(crate::trust::Signed::No { targets_version }) => R {
            verified: true,
            signed: Some(false),
            detail: format!("not signed (targets version {targets_version})"),
        },
        Err(e) => R {
            verified: false,
            signed: None,
            detail: e.message.clone(),
        },
    }))
}
