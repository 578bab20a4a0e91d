//! The global freeze (`ternctl agents freeze`), kept at `/tern/freeze`: the record and
//! how it is read. Every replica reads it into its snapshot (the store watch), so it
//! takes effect on find, channels and heartbeat answers at once; the leader's reconcile
//! holds the rollout from it and the directive loop triggers nothing. Writing and
//! lifting it are admin writes (`routes::freeze`), so the audit trail records both with
//! the token that asked.

use tern_core::api::Freeze;
use tern_store::{Revision, Store};

use crate::error::ApiResult;
use crate::keys;

/// The freeze record as stored: what `put` builds on. A record that does not decode
/// still holds (a kill switch fails closed), but its start and author are unknown, so
/// the next freeze starts afresh.
pub(crate) enum Stored {
    None,
    Readable(Freeze, Revision),
    Unreadable(Freeze, Revision),
}

impl Stored {
    fn freeze(self) -> Option<Freeze> {
        match self {
            Self::None => None,
            Self::Readable(f, _) | Self::Unreadable(f, _) => Some(f),
        }
    }
}

pub(crate) async fn read(store: &dyn Store) -> ApiResult<Stored> {
    let Some(kv) = store.get(keys::FREEZE).await? else {
        return Ok(Stored::None);
    };
    Ok(match serde_json::from_slice(&kv.value) {
        Ok(f) => Stored::Readable(f, kv.mod_revision),
        Err(e) => {
            tracing::error!(error = %e, "the stored freeze is unreadable; treating updates as frozen until it is lifted");
            Stored::Unreadable(
                Freeze {
                    reason: format!("the stored freeze record is unreadable ({e})"),
                    since: jiff::Timestamp::UNIX_EPOCH,
                    by: String::new(),
                    products: Vec::new(),
                },
                kv.mod_revision,
            )
        }
    })
}

/// The freeze in the store, if one holds. An unreadable record counts as a freeze: a
/// kill switch must fail closed.
pub(crate) async fn load(store: &dyn Store) -> ApiResult<Option<Freeze>> {
    Ok(read(store).await?.freeze())
}
