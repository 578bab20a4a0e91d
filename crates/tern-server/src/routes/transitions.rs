//! The writes that move a rollout: the manual transitions (start-update, mark-done,
//! rollback), suspend and resume (the config's mode), and new-rollout (the version).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use tern_core::api::{
    ChangedGroup, EventView, ModeResponse, NewRolloutBody, NewRolloutResponse, TransitionBody,
    TransitionResponse,
};
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Mode};
use tern_core::rollout::Event;
use tern_core::transition::{self, Transition, TransitionError, TransitionKind};
use tern_core::views;

use super::body;
use crate::error::{ApiError, ApiResult};
use crate::resources::{self, Decision, Stored};
use crate::state::AppState;

async fn set_mode(state: &AppState, mode: Mode) -> ApiResult<Json<ModeResponse>> {
    let (_, changed) = resources::read_modify_write(
        state.store(),
        &state.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateConfig>>| async move {
            let existed = current.is_some();
            let mut cfg = current.map_or_else(AutoUpdateConfig::default, |s| s.value);
            if existed && cfg.mode() == Some(mode) {
                return Ok(Decision::Keep(false));
            }
            cfg.spec.agents.get_or_insert_with(Default::default).mode = Some(mode);
            Ok(Decision::Put(cfg, true))
        },
    )
    .await?;
    if changed {
        tracing::info!(mode = mode.as_str(), "config mode set");
        state.after_write().await;
    }
    let modes = resources::modes(state.store()).await?;
    Ok(Json(ModeResponse { modes, changed }))
}

/// `POST /v1/agents/suspend`
pub(crate) async fn suspend(State(state): State<Arc<AppState>>) -> ApiResult<Json<ModeResponse>> {
    set_mode(&state, Mode::Suspended).await
}

/// `POST /v1/agents/resume`
pub(crate) async fn resume(State(state): State<Arc<AppState>>) -> ApiResult<Json<ModeResponse>> {
    set_mode(&state, Mode::Enabled).await
}

fn transition_error(e: TransitionError) -> ApiError {
    match e {
        TransitionError::UnknownGroup { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_group", e.to_string())
        }
        _ => ApiError::new(StatusCode::BAD_REQUEST, "invalid_transition", e.to_string()),
    }
}

fn no_rollout() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_rollout",
        "no rollout exists: create one with `ternctl agents new-rollout VERSION` and wait for a reconcile",
    )
}

async fn run_transition(
    state: &AppState,
    kind: TransitionKind,
    body: &[u8],
) -> ApiResult<Json<TransitionResponse>> {
    let b: TransitionBody = body::json(body)?;
    let t = Transition::new(kind, b.groups, b.force);
    let now = state.clock.now();
    let (stored, events) = resources::read_modify_write(
        state.store(),
        &state.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateAgentRollout>>| {
            let applied = current
                .ok_or_else(no_rollout)
                .and_then(|c| transition::apply(&c.value, &t, now).map_err(transition_error));
            async move {
                let (next, events) = applied?;
                Ok(Decision::Put(next, events))
            }
        },
    )
    .await?;
    let rollout = stored.ok_or_else(no_rollout)?.value;
    let groups = events
        .iter()
        .filter_map(|e| match e {
            Event::GroupChanged {
                group, from, to, ..
            } => Some(ChangedGroup {
                name: group.clone(),
                from: *from,
                to: *to,
            }),
            _ => None,
        })
        .collect();
    for e in &events {
        state.metrics.event(e.kind());
        tracing::info!(event = e.kind(), action = kind.as_str(), "{e}");
    }
    state.after_write().await;
    let modes = resources::modes(state.store()).await?;
    Ok(Json(TransitionResponse {
        groups,
        events: events.iter().map(EventView::from).collect(),
        modes,
        rollout,
    }))
}

/// `POST /v1/agents/{action}` for an action that is not a transition: a 400 naming the
/// transitions (never taken as some default one).
pub(crate) async fn unknown_action(
    axum::extract::Path(action): axum::extract::Path<String>,
) -> ApiError {
    let why = match action.parse::<TransitionKind>() {
        Ok(kind) => format!("{kind} is served at its own route"),
        Err(e) => e.to_string(),
    };
    ApiError::bad_request(format!("action: {why}"))
}

/// `POST /v1/agents/start-update` `{"groups": [...], "force": bool}`
pub(crate) async fn start_update(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&state, TransitionKind::StartUpdate, &body).await
}

/// `POST /v1/agents/mark-done` `{"groups": [...]}`
pub(crate) async fn mark_done(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&state, TransitionKind::MarkDone, &body).await
}

/// `POST /v1/agents/rollback` `{"groups": [...]}`
pub(crate) async fn rollback(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&state, TransitionKind::Rollback, &body).await
}

/// `POST /v1/agents/reset` `{"groups": [...]}`
pub(crate) async fn reset(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&state, TransitionKind::Reset, &body).await
}

/// `POST /v1/agents/new-rollout` `{"version": V, "current_version": V?}`
pub(crate) async fn new_rollout(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<Json<NewRolloutResponse>> {
    let b: NewRolloutBody = body::json(&body)?;
    if b.version.trim().is_empty() {
        return Err(ApiError::bad_request(
            "version: missing (the version to roll out)",
        ));
    }
    let target = body::version("version", &b.version)?;
    let given_start = b
        .current_version
        .as_deref()
        .map(|s| body::version("current_version", s))
        .transpose()?;
    if let Some(trust) = &state.settings.release_trust {
        trust.require("version", &target.to_string()).await?;
    }
    let rollout = resources::load::<AutoUpdateAgentRollout>(state.store()).await?;
    let (stored, (changed, note)) = resources::read_modify_write(
        state.store(),
        &state.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateVersion>>| {
            let views::NewRollout {
                version: next,
                note,
            } = views::new_rollout_version(
                current.as_ref().map(|s| &s.value),
                rollout.as_ref().map(|s| &s.value),
                target.clone(),
                given_start.clone(),
            );
            let decision = match next.validate() {
                Err(e) => Err(ApiError::invalid_resource(format!(
                    "invalid autoupdate_version: {e}"
                ))),
                Ok(()) if current.is_some_and(|c| resources::same(&c.value, &next)) => {
                    Ok(Decision::Keep((false, note)))
                }
                Ok(()) => Ok(Decision::Put(next, (true, note))),
            };
            async move { decision }
        },
    )
    .await?;
    let version = stored
        .ok_or_else(|| ApiError::internal("new-rollout stored no autoupdate_version"))?
        .value;
    let agents = version
        .spec
        .agents
        .clone()
        .ok_or_else(|| ApiError::internal("new-rollout stored no spec.agents"))?;
    if changed {
        tracing::info!(start = %agents.start_version, target = %agents.target_version, note = note.as_deref().unwrap_or(""), "new rollout requested");
        state.after_write().await;
    }
    Ok(Json(NewRolloutResponse {
        start_version: agents.start_version.to_string(),
        target_version: agents.target_version.to_string(),
        changed,
        note,
        version,
    }))
}
