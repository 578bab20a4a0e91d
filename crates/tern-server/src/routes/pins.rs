//! `/v1/pins` and `/v1/inventory/{updater_id}/pin`: listing, writing and lifting
//! server-side pins (the records are [`crate::pins`]'s).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use tern_core::api::{Deleted, HostPin, PinBody, PinsResponse};

use super::body;
use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::pins::{key, load_all};
use crate::state::Resources;

/// Longest updater_id a pin may name (as a heartbeat's fields).
const MAX_ID: usize = 256;
/// Longest reason kept.
const MAX_REASON: usize = 512;

/// `GET /v1/pins`
pub(crate) async fn list(State(res): State<Resources>) -> ApiResult<Json<PinsResponse>> {
    Ok(Json(PinsResponse {
        now: res.clock.now(),
        pins: load_all(res.store()).await?,
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

/// `PUT /v1/inventory/{updater_id}/pin` `{"until", "reason", "products"?}`: pins (or
/// moves a pin's end, or changes what it holds) the host's every product, or those
/// named. The host need not be connected: a pin may wait for a host still to come.
pub(crate) async fn put(
    State(res): State<Resources>,
    Extension(actor): Extension<Arc<Actor>>,
    Path(updater_id): Path<String>,
    bytes: Bytes,
) -> ApiResult<Json<HostPin>> {
    check_id(&updater_id)?;
    let b: PinBody = body::json(&bytes)?;
    let now = res.clock.now();
    let until = tern_core::api::parse_until(&b.until, now).map_err(ApiError::bad_request)?;
    let reason = tern_core::text::one_line("reason", &b.reason, MAX_REASON, None)
        .map_err(ApiError::bad_request)?;
    let products = crate::products::check_named(res.store(), &b.products).await?;
    let pin = HostPin {
        updater_id: updater_id.clone(),
        until,
        reason: reason.to_string(),
        by: actor.token_id.clone(),
        since: now,
        products,
    };
    let bytes =
        serde_json::to_vec(&pin).map_err(|e| ApiError::internal(format!("encoding a pin: {e}")))?;
    res.store().put(&key(&updater_id), bytes, None).await?;
    res.after_write().await;
    Ok(Json(pin))
}

/// `DELETE /v1/inventory/{updater_id}/pin`: unpins now.
pub(crate) async fn delete(
    State(res): State<Resources>,
    Path(updater_id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    check_id(&updater_id)?;
    crate::resources::delete_or_404(res.store(), &key(&updater_id), || {
        format!("updater {updater_id:?} has no pin")
    })
    .await?;
    res.after_write().await;
    Ok(Json(Deleted {
        deleted: updater_id,
    }))
}
