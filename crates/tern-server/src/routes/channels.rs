//! `/v1/channels`: the cloud-stable style channels (seed 001) hosts may follow.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use tern_core::api::{Channel, ChannelBody, Deleted};

use super::body;
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::resources;
use crate::state::AppState;

/// `GET /v1/channels`
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<Channel>>> {
    let listing = state.store().list(keys::CHANNELS_PREFIX).await?;
    let channels = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    Ok(Json(channels))
}

/// `PUT /v1/channels/{name}` `{"version", "critical"}`
pub(crate) async fn set(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Channel>> {
    if !tern_core::validate::is_valid_group_name(&name) {
        return Err(ApiError::bad_request(format!(
            "name: {name:?} is not a valid channel name (letters, digits, '-', '_', '.'; at most 64)"
        )));
    }
    let b: ChannelBody = body::json(&body)?;
    let version = body::version("version", &b.version)?;
    crate::release_check::require_signed(&state, "version", &version.to_string()).await?;
    let channel = Channel {
        name: name.clone(),
        version: version.to_string(),
        critical: b.critical,
        updated: Some(state.clock.now()),
    };
    let bytes = serde_json::to_vec(&channel)
        .map_err(|e| ApiError::internal(format!("encoding a channel: {e}")))?;
    state
        .store()
        .put(&keys::channel(&name), bytes, None)
        .await?;
    state.after_write().await;
    Ok(Json(channel))
}

/// `DELETE /v1/channels/{name}`
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Deleted>> {
    resources::delete_or_404(state.store(), &keys::channel(&name), || {
        format!("no channel named {name:?}")
    })
    .await?;
    state.after_write().await;
    Ok(Json(Deleted { deleted: name }))
}
