//! `/v1/freeze`: reading, writing and lifting the global freeze (the record is
//! [`crate::freeze`]'s).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use tern_core::api::{Freeze, FreezeBody, FreezeResponse};

use super::body;
use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::freeze::{Stored, load, read};
use crate::keys;
use crate::state::AppState;

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
    Extension(actor): Extension<Arc<Actor>>,
    bytes: Bytes,
) -> ApiResult<Json<FreezeResponse>> {
    let b: FreezeBody = body::json(&bytes)?;
    let reason = Freeze::check_reason(&b.reason).map_err(ApiError::bad_request)?;
    let store = state.store();
    // Two freezes at once: the one that loses the compare-and-swap reads again, so the
    // record keeps the first freeze's start and author.
    for _ in 0..CAS_ATTEMPTS {
        let before = read(store).await?;
        let (freeze, expected) = match &before {
            Stored::Readable(f, rev) => (
                Freeze {
                    reason: reason.to_string(),
                    ..f.clone()
                },
                Some(*rev),
            ),
            Stored::Unreadable(_, rev) => (fresh(reason, &state, &actor), Some(*rev)),
            Stored::None => (fresh(reason, &state, &actor), None),
        };
        if matches!(&before, Stored::Readable(f, _) if *f == freeze) {
            return Ok(Json(FreezeResponse {
                freeze: Some(freeze),
                changed: false,
            }));
        }
        let bytes = serde_json::to_vec(&freeze)
            .map_err(|e| ApiError::internal(format!("encoding the freeze: {e}")))?;
        let written = match expected {
            Some(rev) => store.compare_and_swap(keys::FREEZE, rev, bytes, None).await,
            None => store.create(keys::FREEZE, bytes, None).await,
        };
        match written {
            Ok(_) => {
                tracing::warn!(reason = %freeze.reason, by = %freeze.by, "agent updates frozen");
                state.after_write().await;
                return Ok(Json(FreezeResponse {
                    freeze: Some(freeze),
                    changed: true,
                }));
            }
            Err(
                tern_store::Error::Conflict { .. }
                | tern_store::Error::AlreadyExists { .. }
                | tern_store::Error::NotFound { .. },
            ) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::conflict(
        "the freeze record kept changing while it was written; try again",
    ))
}

/// Compare-and-swap rounds before a freeze write gives up: other writers would have to
/// change the record this many times in a row.
const CAS_ATTEMPTS: usize = 5;

fn fresh(reason: &str, state: &AppState, actor: &Actor) -> Freeze {
    Freeze {
        reason: reason.to_string(),
        since: state.clock.now(),
        by: actor.token_id.clone(),
        products: Vec::new(),
    }
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
