//! `/v1/tokens`: mint, list and revoke bearer tokens.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use jiff::Timestamp;
use tern_core::api::{Deleted, NewTokenResponse, Role, TokenBody, TokenView};

use super::body;
use crate::auth::{self, TokenRecord};
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::resources;
use crate::state::AppState;

fn view(r: TokenRecord) -> TokenView {
    TokenView {
        id: r.id,
        role: r.role,
        created: r.created,
        description: r.description,
    }
}

/// Stores a new token of `role`; returns it in clear (the only time).
pub(crate) async fn store_new_token(
    store: &dyn tern_store::Store,
    role: Role,
    description: &str,
    now: Timestamp,
) -> ApiResult<auth::NewToken> {
    let t = auth::mint(role, description, now)?;
    let bytes = serde_json::to_vec(&t.record)
        .map_err(|e| ApiError::internal(format!("encoding a token record: {e}")))?;
    store
        .create(&keys::token(&t.record.id), bytes, None)
        .await?;
    Ok(t)
}

/// `POST /v1/tokens` `{"role", "description"}`
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<NewTokenResponse>)> {
    let b: TokenBody = body::json(&body)?;
    let role: Role = b
        .role
        .parse()
        .map_err(|e| ApiError::bad_request(format!("role: {e}")))?;
    let t = store_new_token(state.store(), role, &b.description, state.clock.now()).await?;
    tracing::info!(id = %t.record.id, role = %role, "token created");
    Ok((
        StatusCode::CREATED,
        Json(NewTokenResponse {
            token: t.token,
            view: view(t.record),
        }),
    ))
}

/// `GET /v1/tokens`: ids and roles, never the tokens.
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Vec<TokenView>>> {
    let listing = state.store().list(keys::TOKENS_PREFIX).await?;
    let tokens = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<TokenRecord>(&kv.value).ok())
        .map(view)
        .collect();
    Ok(Json(tokens))
}

/// `DELETE /v1/tokens/{id}`
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    resources::delete_or_404(state.store(), &keys::token(&id), || {
        format!("no token with id {id:?}")
    })
    .await?;
    state.auth.forget(&id);
    Ok(Json(Deleted { deleted: id }))
}
