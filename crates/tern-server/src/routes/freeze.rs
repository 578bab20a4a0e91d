//! `/v1/freeze`: reading, writing and lifting the global freeze (the record is
//! [`crate::freeze`]'s).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use tern_core::api::{Freeze, FreezeBody, FreezeResponse};
use tern_store::Store;

use super::body;
use crate::auth::Actor;
use crate::clock::Clock;
use crate::error::{ApiError, ApiResult};
use crate::freeze::{Stored, load, read};
use crate::keys;
use crate::state::Resources;

/// `GET /v1/freeze`
pub(crate) async fn get(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<FreezeResponse>> {
    Ok(Json(FreezeResponse {
        freeze: load(store.as_ref()).await?,
        changed: false,
    }))
}

/// `PUT /v1/freeze` `{"reason", "products"?}`: freezes every product, or those named
/// (each one this ternd serves), or gives a freeze in force a new reason (it keeps its
/// start and who started it). A freeze in force is only ever widened: products named
/// are added to those it holds, and a freeze of every product stays one; only
/// `DELETE` (an operator) narrows or lifts it.
pub(crate) async fn put(
    State(res): State<Resources>,
    Extension(actor): Extension<Arc<Actor>>,
    bytes: Bytes,
) -> ApiResult<Json<FreezeResponse>> {
    let b: FreezeBody = body::json(&bytes)?;
    let reason = Freeze::check_reason(&b.reason).map_err(ApiError::bad_request)?;
    let store = res.store();
    let named = crate::products::check_named(store, &b.products).await?;
    // Two freezes at once: the one that loses the compare-and-swap reads again, so the
    // record keeps the first freeze's start and author.
    for _ in 0..CAS_ATTEMPTS {
        let before = read(store).await?;
        let (freeze, expected) = match &before {
            Stored::Readable(f, rev) => (
                Freeze {
                    reason: reason.to_string(),
                    products: widened(&f.products, &named),
                    ..f.clone()
                },
                Some(*rev),
            ),
            // An unreadable record held every product: so does what replaces it.
            Stored::Unreadable(_, rev) => (
                fresh(reason, res.clock.as_ref(), &actor, Vec::new()),
                Some(*rev),
            ),
            Stored::None => (
                fresh(reason, res.clock.as_ref(), &actor, named.clone()),
                None,
            ),
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
                tracing::warn!(reason = %freeze.reason, by = %freeze.by, products = ?freeze.products, "updates frozen (no products named: every product)");
                res.after_write().await;
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

fn fresh(reason: &str, clock: &dyn Clock, actor: &Actor, products: Vec<String>) -> Freeze {
    Freeze {
        reason: reason.to_string(),
        since: clock.now(),
        by: actor.token_id.clone(),
        products,
    }
}

/// The products a freeze in force holding `held` holds once `named` are frozen too
/// (each empty: every product): never fewer.
fn widened(held: &[String], named: &[String]) -> Vec<String> {
    if held.is_empty() || named.is_empty() {
        return Vec::new();
    }
    let all: std::collections::BTreeSet<&String> = held.iter().chain(named).collect();
    all.into_iter().cloned().collect()
}

/// `DELETE /v1/freeze`: lifts the freeze (no error when none holds: `changed` says).
pub(crate) async fn delete(State(res): State<Resources>) -> ApiResult<Json<FreezeResponse>> {
    let changed = match res.store().delete(keys::FREEZE, None).await {
        Ok(_) => true,
        Err(tern_store::Error::NotFound { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    if changed {
        tracing::warn!("update freeze lifted");
        res.after_write().await;
    }
    Ok(Json(FreezeResponse {
        freeze: None,
        changed,
    }))
}

#[cfg(test)]
mod tests {
    use super::widened;

    #[test]
    fn a_freeze_is_only_ever_widened() {
        let v = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(
            widened(&[], &v(&["updater"])),
            v(&[]),
            "every product stays"
        );
        assert_eq!(widened(&v(&["updater"]), &[]), v(&[]), "every product now");
        assert_eq!(
            widened(&v(&["updater"]), &v(&["sidecar", "updater"])),
            v(&["sidecar", "updater"])
        );
    }
}
