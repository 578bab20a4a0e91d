//! `/v1/channels`: the cloud-stable style channels (seed 001) hosts may follow.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use tern_core::api::{Channel, ChannelBody, Deleted};
use tern_store::Store;

use super::body;
use crate::error::{ApiError, ApiResult};
use crate::state::{Resources, Settings};
use crate::{keys, resources};

/// `GET /v1/channels`
pub(crate) async fn list(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<Vec<Channel>>> {
    let listing = store.list(keys::CHANNELS_PREFIX).await?;
    let channels = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    Ok(Json(channels))
}

/// `PUT /v1/channels/{name}` `{"version", "critical"}`
pub(crate) async fn set(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
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
    let check = crate::release_check::Check::of(&settings, &res);
    crate::release_check::require_signed(check, "version", &version.to_string()).await?;
    let channel = Channel {
        name: name.clone(),
        version: version.to_string(),
        critical: b.critical,
        updated: Some(res.clock.now()),
    };
    let bytes = serde_json::to_vec(&channel)
        .map_err(|e| ApiError::internal(format!("encoding a channel: {e}")))?;
    res.store().put(&keys::channel(&name), bytes, None).await?;
    res.after_write().await;
    Ok(Json(channel))
}

/// `DELETE /v1/channels/{name}`
pub(crate) async fn delete(
    State(res): State<Resources>,
    Path(name): Path<String>,
) -> ApiResult<Json<Deleted>> {
    resources::delete_or_404(res.store(), &keys::channel(&name), || {
        format!("no channel named {name:?}")
    })
    .await?;
    res.after_write().await;
    Ok(Json(Deleted { deleted: name }))
}
