//! `GET /v1/agents/history[?limit=N]`: the rollouts' history (`rollout_history`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use tern_core::rollout_history::{HistoryResponse, MAX_ROLLOUTS};
use tern_store::Store;

use crate::error::ApiResult;

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct HistoryQuery {
    limit: Option<usize>,
}

/// The newest N rollouts (default 5, at most what is kept), newest first, each with
/// its events and its groups' progress, oldest first.
pub(crate) async fn rollouts(
    State(store): State<Arc<dyn Store>>,
    Query(q): Query<HistoryQuery>,
) -> ApiResult<Json<HistoryResponse>> {
    let limit = q.limit.unwrap_or(5).min(MAX_ROLLOUTS);
    Ok(Json(
        crate::rollout_history::list(store.as_ref(), limit).await?,
    ))
}
