//! Server-side pins of single hosts (`ternctl inventory pin`), kept at
//! `/tern/pins/<updater_id>`. Every replica holds them in its snapshot (the store
//! watch), so find tells a pinned host not to update, for every product the pin holds
//! (all unless it names some), until its pin lifts (`tern_core::gate`'s
//! `Hold::Pinned`); after that the host rejoins its group's rollout with no further
//! write. The leader's reconcile deletes pins that have lifted. This module holds the
//! records and how they are read; `routes::pins` writes them.

use jiff::Timestamp;
use tern_core::api::HostPin;
use tern_store::Store;

use crate::error::ApiResult;
use crate::keys;
use crate::snapshot::ServerPins;

pub(crate) fn key(updater_id: &str) -> String {
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

/// What find needs: each pinned updater_id, when its pin lifts and what it holds.
pub(crate) fn by_updater(pins: Vec<HostPin>) -> ServerPins {
    ServerPins::new(
        pins.into_iter()
            .map(|p| (p.updater_id, (p.until, p.products)))
            .collect(),
    )
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
