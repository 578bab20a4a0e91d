//! Server-side pins of single hosts (`ternctl inventory pin`), kept at
//! `/tern/pins/<updater_id>`. Every replica holds them in its snapshot (the store
//! watch), so find tells a pinned host not to update until its pin lifts
//! (`tern_core::find::AgentDecision::pinned`); after that the host rejoins its
//! group's rollout with no further write. The leader's reconcile deletes pins that have
//! lifted.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use jiff::Timestamp;
use tern_core::api::{Deleted, HostPin, PinBody, PinsResponse};
use tern_store::Store;

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::routes::body;
use crate::state::AppState;

/// Longest updater_id a pin may name (as a heartbeat's fields).
const MAX_ID: usize = 256;
/// Longest reason kept.
const MAX_REASON: usize = 512;

fn key(updater_id: &str) -> String {
    format!("{}{updater_id}", keys::PINS_PREFIX)
}

/// Every stored pin; unreadable records are skipped (and logged).
pub(crate) async fn load_all(store: &dyn Store) -> ApiResult<Vec<HostPin>> {
    let listing = store.list(keys::PINS_PREFIX).await?;
    Ok(listing
        .kvs
        .iter()
        .filter_map(|kv| match serde_json::from_slice(&kv.value) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(key = %kv.key, error = %e, "skipping an unreadable pin");
                None
            }
        })
        .collect())
}

/// What find needs: each pinned updater_id and when its pin lifts.
pub(crate) fn by_updater(pins: Vec<HostPin>) -> HashMap<String, Timestamp> {
    pins.into_iter().map(|p| (p.updater_id, p.until)).collect()
}

/// `GET /v1/pins`
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<PinsResponse>> {
    Ok(Json(PinsResponse {
        now: state.clock.now(),
        pins: load_all(state.store()).await?,
    }))
}

fn check_id(updater_id: &str) -> ApiResult<()> {
    if updater_id.is_empty() || updater_id.len() > MAX_ID || updater_id.contains('/') {
        return Err(ApiError::bad_request(format!(
            "updater_id: {:?} is not an updater id (1 to {MAX_ID} bytes, no '/')",
            updater_id.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

/// `PUT /v1/inventory/{updater_id}/pin` `{"until", "reason"}`: pins (or moves a pin's
/// end). The host need not be connected: a pin may wait for a host still to come.
pub(crate) async fn put(
    State(state): State<Arc<AppState>>,
    Extension(actor): Extension<Actor>,
    Path(updater_id): Path<String>,
    bytes: Bytes,
) -> ApiResult<Json<HostPin>> {
    check_id(&updater_id)?;
    let b: PinBody = body::json(&bytes)?;
    let now = state.clock.now();
    let until = tern_core::api::parse_until(&b.until, now).map_err(ApiError::bad_request)?;
    let reason = tern_core::text::one_line("reason", &b.reason, MAX_REASON, None)
        .map_err(ApiError::bad_request)?;
    let pin = HostPin {
        updater_id: updater_id.clone(),
        until,
        reason: reason.to_string(),
        by: actor.token_id.clone(),
        since: now,
    };
    let bytes =
        serde_json::to_vec(&pin).map_err(|e| ApiError::internal(format!("encoding a pin: {e}")))?;
    state.store().put(&key(&updater_id), bytes, None).await?;
    state.after_write().await;
    Ok(Json(pin))
}

/// `DELETE /v1/inventory/{updater_id}/pin`: unpins now.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    Path(updater_id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    check_id(&updater_id)?;
    crate::resources::delete_or_404(state.store(), &key(&updater_id), || {
        format!("updater {updater_id:?} has no pin")
    })
    .await?;
    state.after_write().await;
    Ok(Json(Deleted {
        deleted: updater_id,
    }))
}

/// Deletes the pins that have lifted (the leader, after its reconcile); how many. A pin
/// written again meanwhile is kept (the delete is guarded by the revision read).
pub(crate) async fn clean_up(store: &dyn Store, now: Timestamp) -> ApiResult<usize> {
    let listing = store.list(keys::PINS_PREFIX).await?;
    let mut removed = 0;
    for kv in listing.kvs {
        let lifted = serde_json::from_slice::<HostPin>(&kv.value).is_ok_and(|p| p.until <= now);
        if lifted && store.delete(&kv.key, Some(kv.mod_revision)).await.is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}
