//! The records of the modular upgrade system in the store (installers, the control
//! config, drafts, the active and pending directive, the pause, reports), read and
//! written with their revisions. Below the state: `state::refresh_snapshot` reads the
//! active directive for find; the loop (`directives`), the controllers and the routes
//! read and write the rest.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tern_core::directive::report::{Paused, Pending};
use tern_core::directive::resource::{Installer, VersionControlConfig, VersionDirective};
use tern_store::{KeyValue, Store};

use crate::error::{ApiError, ApiResult};
use crate::keys;

/// A value and the revision it was read at.
pub(crate) struct Read<T> {
    pub(crate) value: T,
    pub(crate) revision: tern_store::Revision,
}

fn decode<T: DeserializeOwned>(kv: &KeyValue) -> ApiResult<Read<T>> {
    let value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!(
            "the stored {} cannot be read ({e}); rewrite it",
            kv.key
        ))
    })?;
    Ok(Read {
        value,
        revision: kv.mod_revision,
    })
}

pub(crate) fn encode<T: Serialize>(value: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| ApiError::internal(format!("encoding: {e}")))
}

pub(crate) async fn get<T: DeserializeOwned>(
    store: &dyn Store,
    key: &str,
) -> ApiResult<Option<Read<T>>> {
    match store.get(key).await? {
        None => Ok(None),
        Some(kv) => decode(&kv).map(Some),
    }
}

/// Every value under `prefix`, by the key's last segment; unreadable ones are skipped
/// with a warning (one bad record must not stop the loop).
pub(crate) async fn list<T: DeserializeOwned>(
    store: &dyn Store,
    prefix: &str,
) -> ApiResult<Vec<(String, Read<T>)>> {
    let listing = store.list(prefix).await?;
    let mut out = Vec::new();
    for kv in listing.kvs {
        let name = kv.key.strip_prefix(prefix).unwrap_or(&kv.key).to_string();
        match decode(&kv) {
            Ok(v) => out.push((name, v)),
            Err(e) => {
                tracing::warn!(key = %kv.key, error = %e.message, "skipping an unreadable record")
            }
        }
    }
    Ok(out)
}

/// Everything a pass reads from the store.
pub(crate) struct Resources {
    pub(crate) config: Option<Read<VersionControlConfig>>,
    pub(crate) installers: BTreeMap<String, Installer>,
    pub(crate) active: Option<Read<VersionDirective>>,
    pub(crate) pending: Option<(Read<Pending>, VersionDirective)>,
    pub(crate) paused: Option<Read<Paused>>,
}

pub(crate) async fn read_resources(store: &dyn Store) -> ApiResult<Resources> {
    let config = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG).await?;
    let installers = list::<Installer>(store, keys::INSTALLERS_PREFIX)
        .await?
        .into_iter()
        .map(|(name, r)| (name, r.value))
        .collect();
    let active = get::<VersionDirective>(store, keys::ACTIVE_DIRECTIVE).await?;
    let pending = match get::<Pending>(store, keys::PENDING_DIRECTIVE).await? {
        None => None,
        Some(p) => get::<VersionDirective>(store, &keys::draft(&p.value.draft))
            .await?
            .map(|d| (p, d.value)),
    };
    let paused = get::<Paused>(store, keys::DIRECTIVES_PAUSED).await?;
    Ok(Resources {
        config,
        installers,
        active,
        pending,
        paused,
    })
}

/// The active directive and every installer, for find's snapshot; `None` without one.
pub(crate) async fn active_directive(
    store: &dyn Store,
) -> ApiResult<Option<crate::snapshot::ActiveDirective>> {
    let Some(active) = get::<VersionDirective>(store, keys::ACTIVE_DIRECTIVE).await? else {
        return Ok(None);
    };
    let installers = list::<Installer>(store, keys::INSTALLERS_PREFIX)
        .await?
        .into_iter()
        .map(|(name, r)| (name, r.value))
        .collect();
    Ok(Some(crate::snapshot::ActiveDirective {
        spec: active.value.spec,
        installers,
    }))
}

/// Drops `metadata.revision` before storing (it is the key's revision, never stored).
pub(crate) fn stored_form<T: serde::Serialize + DeserializeOwned>(value: &T) -> ApiResult<Vec<u8>> {
    let mut v =
        serde_json::to_value(value).map_err(|e| ApiError::internal(format!("encoding: {e}")))?;
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("revision");
    }
    encode(&v)
}
