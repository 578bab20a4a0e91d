//! The global freeze (`ternctl agents freeze`), kept at `/tern/freeze`. Every replica
//! reads it into its snapshot (the store watch), so it takes effect on find, channels
//! and heartbeat answers at once; the leader's reconcile holds the rollout from it and
//! the directive loop triggers nothing. Writing and lifting it are admin writes, so the
//! audit trail records both with the token that asked.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use tern_core::api::{Freeze, FreezeBody, FreezeResponse};
use tern_store::Store;

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::routes::body;
use crate::state::AppState;

/// The freeze in the store, if one holds. An unreadable record counts as a freeze: a
/// kill switch must fail closed.
pub(crate) async fn load(store: &dyn Store) -> ApiResult<Option<Freeze>> {
    let Some(kv) = store.get(keys::FREEZE).await? else {
        return Ok(None);
    };
    Ok(Some(serde_json::from_slice(&kv.value).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the stored freeze is unreadable; treating updates as frozen until it is lifted");
        Freeze {
            reason: format!("the stored freeze record is unreadable ({e})"),
            since: jiff::Timestamp::UNIX_EPOCH,
            by: String::new(),
        }
    })))
}

/// `GET /v1/freeze`
pub(crate) async fn get(State(state): State<Arc<AppState>>) -> ApiResult<Json<FreezeResponse>> {
    Ok(Json(FreezeResponse {
        freeze: load(state.store()).await?,
        changed: false,
    }))
}

/// `PUT /v1/freeze` `{"reason"}`: freezes, or gives a freeze in force a new reason (it
/// keeps its start and who started it).
pub(crate) async fn put(
    State(state): State<Arc<AppState>>,
    Extension(actor): Extension<Actor>,
    bytes: Bytes,
) -> ApiResult<Json<FreezeResponse>> {
    let b: FreezeBody = body::json(&bytes)?;
    let reason = Freeze::check_reason(&b.reason).map_err(ApiError::bad_request)?;
    let store = state.store();
    let before = load(store).await?;
    let freeze = match &before {
        Some(f) if f.since != jiff::Timestamp::UNIX_EPOCH => Freeze {
            reason: reason.to_string(),
            ..f.clone()
        },
        _ => Freeze {
            reason: reason.to_string(),
            since: state.clock.now(),
            by: actor.token_id.clone(),
        },
    };
    let changed = before.as_ref() != Some(&freeze);
    if changed {
        let bytes = serde_json::to_vec(&freeze)
            .map_err(|e| ApiError::internal(format!("encoding the freeze: {e}")))?;
        store.put(keys::FREEZE, bytes, None).await?;
        tracing::warn!(reason = %freeze.reason, by = %freeze.by, "agent updates frozen");
        state.after_write().await;
    }
    Ok(Json(FreezeResponse {
        freeze: Some(freeze),
        changed,
    }))
}

/// `DELETE /v1/freeze`: lifts the freeze (no error when none holds: `changed` says).
pub(crate) async fn delete(State(state): State<Arc<AppState>>) -> ApiResult<Json<FreezeResponse>> {
    let changed = match state.store().delete(keys::FREEZE, None).await {
        Ok(_) => true,
        Err(tern_store::Error::NotFound { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    if changed {
        tracing::warn!("agent update freeze lifted");
        state.after_write().await;
    }
    Ok(Json(FreezeResponse {
        freeze: None,
        changed,
    }))
}
