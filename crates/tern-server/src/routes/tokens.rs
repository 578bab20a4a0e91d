//! `/v1/tokens`: mint, list and revoke bearer tokens.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use tern_core::api::{Deleted, NewTokenResponse, Role, TokenBody, TokenView};
use tern_store::Store;

use super::body;
use crate::auth::{self, Authenticator, TokenRecord};
use crate::error::{ApiError, ApiResult};
use crate::state::Resources;
use crate::{keys, resources};

pub(crate) fn view(r: TokenRecord) -> TokenView {
    let principal = r.principal();
    TokenView {
        id: r.id,
        role: r.role,
        created: r.created,
        expires: r.expires,
        uses_left: r.uses_left,
        principal,
        minted_by: r.minted_by.first().cloned(),
        updater_id: r.updater_id,
        description: r.description,
        controller: r.controller,
    }
}

/// Seconds a join token is valid unless told otherwise: a day.
const JOIN_DEFAULT_TTL_SECS: i64 = 24 * 3600;

/// Stores a minted token (its record may carry limits or a binding).
pub(crate) async fn store_token(
    store: &dyn tern_store::Store,
    t: auth::NewToken,
) -> ApiResult<auth::NewToken> {
    let bytes = serde_json::to_vec(&t.record)
        .map_err(|e| ApiError::internal(format!("encoding a token record: {e}")))?;
    store
        .create(&keys::token(&t.record.id), bytes, None)
        .await?;
    Ok(t)
}

/// `POST /v1/tokens` `{"role", "description", "principal"}`: the new token is for
/// `principal` (default: the minter's own), remembers who minted it, and speaks for
/// whom its minter speaks for (`auth::speaks_for`), so that no token down a chain is a
/// second approver of what a token up the chain approved.
pub(crate) async fn create(
    State(res): State<Resources>,
    axum::Extension(actor): axum::Extension<Arc<auth::Actor>>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<NewTokenResponse>)> {
    let b: TokenBody = body::json(&body)?;
    let principal = match b.principal {
        Some(p) => {
            auth::check_principal(&p)?;
            p
        }
        None => actor.principal.clone(),
    };
    let role: Role = b
        .role
        .parse()
        .map_err(|e| ApiError::bad_request(format!("role: {e}")))?;
    let now = res.clock.now();
    let ttl = match b.ttl.as_deref() {
        Some(s) => {
            let d = tern_core::duration::GoDuration::parse_positive(s)
                .map_err(|e| ApiError::bad_request(format!("ttl: {e}")))?;
            Some(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        }
        None if role == Role::Join => Some(JOIN_DEFAULT_TTL_SECS),
        None => None,
    };
    let uses = match (role, b.uses) {
        (Role::Join, None) => Some(1),
        (Role::Join, Some(0)) => {
            return Err(ApiError::bad_request("uses: a join token needs at least 1"));
        }
        (Role::Join, Some(n)) => Some(n),
        (_, None) => None,
        (_, Some(_)) => {
            return Err(ApiError::bad_request(
                "uses: only join tokens are limited in uses",
            ));
        }
    };
    if b.controller && role != Role::Agent {
        return Err(ApiError::bad_request(
            "controller: only agent tokens are minted for a controller",
        ));
    }
    let mut t = auth::mint(role, &b.description, now)?;
    t.record.controller = b.controller;
    t.record.speaks_for = auth::speaks_for(&actor, &principal);
    t.record.principal = principal;
    t.record.minted_by = std::iter::once(actor.token_id.clone())
        .chain(actor.minted_by.iter().cloned())
        .take(auth::MAX_LINEAGE)
        .collect();
    t.record.uses_left = uses;
    t.record.expires =
        ttl.and_then(|secs| now.checked_add(jiff::SignedDuration::from_secs(secs)).ok());
    let t = store_token(res.store(), t).await?;
    tracing::info!(id = %t.record.id, role = %role, "token created");
    Ok((
        StatusCode::CREATED,
        Json(NewTokenResponse {
            token: t.token,
            view: view(t.record),
        }),
    ))
}

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    /// Also the host credentials (one per joined host).
    #[serde(default)]
    hosts: bool,
}

/// `GET /v1/tokens[?hosts=true]`: ids, roles, expiry and uses, never the tokens.
pub(crate) async fn list(
    State(store): State<Arc<dyn Store>>,
    axum::extract::Query(q): axum::extract::Query<ListQuery>,
) -> ApiResult<Json<Vec<TokenView>>> {
    let listing = store.list(keys::TOKENS_PREFIX).await?;
    let tokens = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<TokenRecord>(&kv.value).ok())
        .filter(|r| q.hosts || r.updater_id.is_none())
        .map(view)
        .collect();
    Ok(Json(tokens))
}

/// `DELETE /v1/tokens/{id}`
pub(crate) async fn delete(
    State(store): State<Arc<dyn Store>>,
    State(auth): State<Arc<Authenticator>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    resources::delete_or_404(store.as_ref(), &keys::token(&id), || {
        format!("no token with id {id:?}")
    })
    .await?;
    auth.forget(&id);
    Ok(Json(Deleted { deleted: id }))
}

/// `GET /v1/whoami`: the asking token's id and role, and what the role may do (the
/// dashboard shows or hides its write buttons by it; ternd refuses regardless).
pub(crate) async fn whoami(
    axum::Extension(actor): axum::Extension<Arc<auth::Actor>>,
) -> Json<tern_core::api::WhoAmI> {
    use auth::Access;
    Json(tern_core::api::WhoAmI {
        read: Access::Read.allows(actor.role),
        write: Access::Write.allows(actor.role),
        operator: Access::Operator.allows(actor.role),
        token_id: actor.token_id.clone(),
        role: actor.role,
        principal: actor.principal.clone(),
    })
}
