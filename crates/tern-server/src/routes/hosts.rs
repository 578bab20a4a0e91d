//! Host credentials: `POST /v1/agents/join` exchanges a join token (or, while hosts
//! move off it, the shared agent token of earlier releases) for an agent token bound to
//! the joining updater_id; `DELETE /v1/inventory/{updater_id}` revokes it. The store
//! keeps `/tern/hosts/<updater_id>` → the credential's token id, so that one updater
//! has one credential and revoking finds it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tern_core::api::{Deleted, JoinBody, JoinResponse, Role};
use tern_store::{Compare, Error as StoreError, Op, Revision, Store, TxnOutcome};

use super::body;
use crate::auth::{self, Actor, Authenticator, TokenRecord};
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::state::{Hosts, Resources};

/// `/tern/hosts/<updater_id>`
#[derive(Debug, Serialize, Deserialize)]
struct HostRecord {
    token_id: String,
}

/// Longest updater_id taken (tern-update makes UUIDs).
const MAX_UPDATER_ID: usize = 128;

/// `POST /v1/agents/join` `{"updater_id", "host_id", "hostname"}` with a join token.
pub(crate) async fn join(
    State(res): State<Resources>,
    Extension(actor): Extension<Arc<Actor>>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<JoinResponse>)> {
    let b: JoinBody = body::json(&body)?;
    let valid = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    };
    if b.updater_id.is_empty() || b.updater_id.len() > MAX_UPDATER_ID || !valid(&b.updater_id) {
        return Err(ApiError::bad_request(format!(
            "updater_id: give the updater's id (letters, digits, '-', '_', '.'; at most {MAX_UPDATER_ID})"
        )));
    }
    if actor.bound_to.is_some() {
        return Err(ApiError::forbidden(
            "a host credential cannot join another host: use a join token",
        ));
    }
    let store = res.store();
    let host_key = keys::host(&b.updater_id);
    let now = res.clock.now();
    let hostname: String = b
        .hostname
        .chars()
        .filter(|c| !c.is_control())
        .take(253)
        .collect();
    let mut t = auth::mint(Role::Agent, &format!("host {hostname}"), now)?;
    t.record.updater_id = Some(b.updater_id.clone());
    let index = serde_json::to_vec(&HostRecord {
        token_id: t.record.id.clone(),
    })
    .map_err(|e| ApiError::internal(format!("encoding a host record: {e}")))?;
    let credential = serde_json::to_vec(&t.record)
        .map_err(|e| ApiError::internal(format!("encoding a token record: {e}")))?;
    // The host's record, its credential and the join token's spent use are one
    // transaction: of many joins of one updater_id at once, one wins and spends one use;
    // the others spend nothing (they once each spent a use before losing the create).
    let mut committed = false;
    for _ in 0..16 {
        if store.get(&host_key).await?.is_some() {
            return Err(already_joined(&b.updater_id));
        }
        let mut compares = vec![
            Compare::absent(host_key.clone()),
            Compare::absent(keys::token(&t.record.id)),
        ];
        let mut ops = vec![
            Op::put(host_key.clone(), index.clone(), None),
            Op::put(keys::token(&t.record.id), credential.clone(), None),
        ];
        if actor.role == Role::Join {
            let (revision, spent) = one_use_spent(store, &actor.token_id).await?;
            compares.push(Compare::mod_revision(
                keys::token(&actor.token_id),
                revision,
            ));
            ops.push(Op::put(keys::token(&actor.token_id), spent, None));
        }
        match store.txn(&compares, &ops).await? {
            TxnOutcome::Committed { .. } => {
                committed = true;
                break;
            }
            // The host joined meanwhile: answered at the top of the next round.
            TxnOutcome::Failed { index: 0, .. } => continue,
            TxnOutcome::Failed { index: 1, .. } => {
                return Err(ApiError::internal(
                    "a freshly minted token id is taken: retry",
                ));
            }
            // Another host spent a use of the join token meanwhile.
            TxnOutcome::Failed { .. } => continue,
        }
    }
    if !committed {
        return Err(ApiError::unavailable(
            "the join token is being spent by many hosts at once: retry",
        ));
    }
    tracing::info!(updater_id = %b.updater_id, token = %t.record.id, via = %actor.token_id, "host joined");
    Ok((
        StatusCode::CREATED,
        Json(JoinResponse {
            token: t.token,
            id: t.record.id,
            updater_id: b.updater_id,
        }),
    ))
}

fn already_joined(updater_id: &str) -> ApiError {
    ApiError::conflict(format!(
        "updater {updater_id} already has a host credential: it keeps using it; to join it again, revoke it first (ternctl inventory revoke {updater_id})"
    ))
}

/// The join token's record with one use fewer, and the revision it was read at (the
/// caller's transaction compares it, so two joins cannot both spend the last use).
async fn one_use_spent(store: &dyn Store, token_id: &str) -> ApiResult<(Revision, Vec<u8>)> {
    let key = keys::token(token_id);
    let Some(kv) = store.get(&key).await? else {
        return Err(ApiError::unauthenticated("invalid or revoked token"));
    };
    let mut record: TokenRecord = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("token record {token_id}: {e}")))?;
    let left = record.uses_left.unwrap_or(0);
    if left == 0 {
        return Err(ApiError::unauthenticated(format!(
            "join token {token_id} is used up: create another (ternctl tokens create --role join --uses N)"
        )));
    }
    record.uses_left = Some(left - 1);
    let bytes = serde_json::to_vec(&record)
        .map_err(|e| ApiError::internal(format!("encoding a token record: {e}")))?;
    Ok((kv.mod_revision, bytes))
}

/// `DELETE /v1/inventory/{updater_id}` (operator): revokes the host's credential and
/// forgets it here; its heartbeats are refused from then on (on other replicas within
/// the token cache's 30 s).
pub(crate) async fn revoke(
    State(store): State<Arc<dyn Store>>,
    State(auth): State<Arc<Authenticator>>,
    State(hosts): State<Arc<Hosts>>,
    Path(updater_id): Path<String>,
) -> ApiResult<Json<Deleted>> {
    let store = store.as_ref();
    let host_key = keys::host(&updater_id);
    let Some(kv) = store.get(&host_key).await? else {
        return Err(ApiError::not_found(format!(
            "updater {updater_id:?} has no host credential (hosts on the shared agent token are revoked by revoking that token)"
        )));
    };
    let host: HostRecord = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("host record {updater_id}: {e}")))?;
    match store.delete(&keys::token(&host.token_id), None).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    auth.forget(&host.token_id);
    match store.delete(&host_key, None).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    hosts.inventory().forget_updater(&updater_id);
    // The host's other products heartbeat with the same credential.
    hosts.each_product_inventory(|_, inv| {
        inv.forget_updater(&updater_id);
    });
    tracing::info!(%updater_id, token = %host.token_id, "host credential revoked");
    Ok(Json(Deleted {
        deleted: updater_id,
    }))
}
