//! Typed access to the resources in the store. Values are JSON; `metadata.revision` is
//! the key's `mod_revision`, filled in on read and never stored.

use std::sync::atomic::AtomicU64;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Metadata,
};
use tern_store::{KeyValue, Revision, Store};

use crate::error::{ApiError, ApiResult};
use crate::keys;

pub trait Resource: Serialize + DeserializeOwned + Clone + Send + Sync {
    const KEY: &'static str;
    const KIND: &'static str;
    fn metadata(&self) -> &Metadata;
    fn metadata_mut(&mut self) -> &mut Metadata;
}

macro_rules! resource {
    ($t:ty, $key:expr, $kind:expr) => {
        impl Resource for $t {
            const KEY: &'static str = $key;
            const KIND: &'static str = $kind;
            fn metadata(&self) -> &Metadata {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Metadata {
                &mut self.metadata
            }
        }
    };
}

resource!(
    AutoUpdateConfig,
    keys::CONFIG,
    tern_core::resource::KIND_CONFIG
);
resource!(
    AutoUpdateVersion,
    keys::VERSION,
    tern_core::resource::KIND_VERSION
);
resource!(
    AutoUpdateAgentRollout,
    keys::ROLLOUT,
    tern_core::resource::KIND_ROLLOUT
);

/// A resource with the revision it was read at.
#[derive(Clone, Debug)]
pub struct Stored<T> {
    pub value: T,
    pub revision: Revision,
}

pub(crate) fn decode<T: Resource>(kv: &KeyValue) -> ApiResult<Stored<T>> {
    let mut value: T = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!(
            "the stored {} cannot be read ({e}); rewrite it",
            T::KIND
        ))
    })?;
    value.metadata_mut().revision = Some(kv.mod_revision.to_string());
    Ok(Stored {
        value,
        revision: kv.mod_revision,
    })
}

pub(crate) fn encode<T: Resource>(value: &T) -> ApiResult<Vec<u8>> {
    let mut v = value.clone();
    v.metadata_mut().revision = None;
    serde_json::to_vec(&v).map_err(|e| ApiError::internal(format!("encoding {}: {e}", T::KIND)))
}

pub async fn load<T: Resource>(store: &dyn Store) -> ApiResult<Option<Stored<T>>> {
    match store.get(T::KEY).await? {
        None => Ok(None),
        Some(kv) => decode(&kv).map(Some),
    }
}

/// Creates (`expected` = None) or compare-and-swaps the resource.
pub async fn write<T: Resource>(
    store: &dyn Store,
    value: &T,
    expected: Option<Revision>,
) -> Result<Stored<T>, tern_store::Error> {
    let bytes = encode(value).map_err(|e| tern_store::Error::Backend(e.message))?;
    let kv = match expected {
        None => store.create(T::KEY, bytes, None).await?,
        Some(rev) => store.compare_and_swap(T::KEY, rev, bytes, None).await?,
    };
    let mut value = value.clone();
    value.metadata_mut().revision = Some(kv.mod_revision.to_string());
    Ok(Stored {
        value,
        revision: kv.mod_revision,
    })
}

/// Equal apart from the revision.
pub(crate) fn same<T: Resource + PartialEq>(a: &T, b: &T) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    a.metadata_mut().revision = None;
    b.metadata_mut().revision = None;
    a == b
}

/// Every live report (one per replica).
pub async fn reports(store: &dyn Store) -> ApiResult<Vec<AutoUpdateAgentReport>> {
    let listing = store.list(keys::REPORTS_PREFIX).await?;
    let mut out = Vec::new();
    for kv in listing.kvs {
        match serde_json::from_slice::<AutoUpdateAgentReport>(&kv.value) {
            Ok(mut r) => {
                r.metadata.revision = Some(kv.mod_revision.to_string());
                out.push(r);
            }
            Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping unreadable report"),
        }
    }
    Ok(out)
}

/// A revision given by a client, as a store revision.
pub(crate) fn parse_revision(s: &str) -> ApiResult<Revision> {
    s.trim().parse().map_err(|_| {
        ApiError::invalid_resource(format!(
            "metadata.revision: {s:?} is not a revision (a number as returned by ternd)"
        ))
    })
}

/// The mode in force now and where it comes from, from the stored config and version.
pub(crate) async fn modes(store: &dyn Store) -> ApiResult<tern_core::api::Modes> {
    let config = load::<AutoUpdateConfig>(store).await?;
    let version = load::<AutoUpdateVersion>(store).await?;
    Ok(tern_core::views::modes(
        config.as_ref().map(|s| &s.value),
        version.as_ref().map(|s| &s.value),
    ))
}

/// Deletes `key` whatever its revision; a missing key is a 404 saying `missing()`.
pub(crate) async fn delete_or_404(
    store: &dyn Store,
    key: &str,
    missing: impl FnOnce() -> String,
) -> ApiResult<()> {
    match store.delete(key, None).await {
        Ok(_) => Ok(()),
        Err(tern_store::Error::NotFound { .. }) => Err(ApiError::not_found(missing())),
        Err(e) => Err(e.into()),
    }
}

/// How many times a read-modify-write is tried before a conflict is returned.
pub(crate) const CONFLICT_ATTEMPTS: usize = 5;

/// What a read-modify-write does with the value it read.
pub(crate) enum Decision<T, A> {
    /// Write this value at the revision read (create it when there was none).
    Put(T, A),
    /// Delete the resource at the revision read.
    Delete(A),
    /// Write nothing.
    Keep(A),
}

/// Whether a store error means another writer got there first (the read is stale).
pub(crate) fn is_conflict(e: &tern_store::Error) -> bool {
    matches!(
        e,
        tern_store::Error::Conflict { .. }
            | tern_store::Error::AlreadyExists { .. }
            | tern_store::Error::NotFound { .. }
    )
}

/// The one read → decide → compare-and-swap loop every write of a resource uses (admin
/// writes and the reconciler): `decide` sees the current value and says what to do;
/// a write that lost a race is counted in `conflicts` and retried from a fresh read,
/// up to [`CONFLICT_ATTEMPTS`] times. Returns the value stored afterwards (`None`
/// when absent) and `decide`'s answer.
pub(crate) async fn read_modify_write<T, A, F, Fut>(
    store: &dyn Store,
    conflicts: &AtomicU64,
    mut decide: F,
) -> ApiResult<(Option<Stored<T>>, A)>
where
    T: Resource,
    F: FnMut(Option<Stored<T>>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<Decision<T, A>>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = load::<T>(store).await?;
        let revision = current.as_ref().map(|c| c.revision);
        let written = match decide(current.clone()).await? {
            Decision::Keep(answer) => return Ok((current, answer)),
            Decision::Put(value, answer) => write(store, &value, revision)
                .await
                .map(|stored| (Some(stored), answer)),
            Decision::Delete(answer) => match revision {
                None => return Ok((None, answer)),
                Some(rev) => store
                    .delete(T::KEY, Some(rev))
                    .await
                    .map(|_| (None, answer)),
            },
        };
        match written {
            Ok(done) => return Ok(done),
            Err(e) if is_conflict(&e) => {
                crate::metrics::Metrics::inc(conflicts);
                tracing::info!(attempt, kind = T::KIND, error = %e, "changed while writing; retrying");
                if attempt >= CONFLICT_ATTEMPTS {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use tern_core::resource::Mode;
    use tern_store::MemoryStore;

    use super::*;

    fn with_mode(mode: Mode) -> AutoUpdateConfig {
        let mut c = AutoUpdateConfig::default();
        c.spec.agents.get_or_insert_with(Default::default).mode = Some(mode);
        c
    }

    /// A writer that lands between the read and the compare-and-swap makes the write
    /// conflict: it is counted, and the decision is made again on what that writer left.
    #[tokio::test]
    async fn a_write_that_loses_a_race_is_decided_again_on_the_fresh_value() {
        let store = MemoryStore::new();
        write(&store, &with_mode(Mode::Enabled), None)
            .await
            .unwrap();
        let conflicts = AtomicU64::new(0);
        let mut seen = Vec::new();
        let (stored, ()) = read_modify_write(
            &store,
            &conflicts,
            |current: Option<Stored<AutoUpdateConfig>>| {
                let current = current.unwrap();
                seen.push(current.value.mode());
                let racing = seen.len() == 1;
                let store = &store;
                async move {
                    if racing {
                        write(store, &with_mode(Mode::Disabled), Some(current.revision))
                            .await
                            .unwrap();
                    }
                    Ok(Decision::Put(with_mode(Mode::Suspended), ()))
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(seen, [Some(Mode::Enabled), Some(Mode::Disabled)]);
        assert_eq!(conflicts.load(Ordering::Relaxed), 1);
        assert_eq!(stored.unwrap().value.mode(), Some(Mode::Suspended));
        let kept = load::<AutoUpdateConfig>(&store).await.unwrap().unwrap();
        assert_eq!(kept.value.mode(), Some(Mode::Suspended));
    }

    /// A writer that always wins: the conflict is returned after the last attempt, and
    /// nothing of this writer's is stored.
    #[tokio::test]
    async fn endless_conflicts_give_up_after_the_last_attempt() {
        let store = MemoryStore::new();
        write(&store, &with_mode(Mode::Enabled), None)
            .await
            .unwrap();
        let conflicts = AtomicU64::new(0);
        let result = read_modify_write(
            &store,
            &conflicts,
            |current: Option<Stored<AutoUpdateConfig>>| {
                let store = &store;
                async move {
                    let current = current.unwrap();
                    write(store, &with_mode(Mode::Disabled), Some(current.revision))
                        .await
                        .unwrap();
                    Ok(Decision::Put(with_mode(Mode::Suspended), ()))
                }
            },
        )
        .await;
        assert!(result.is_err());
        assert_eq!(conflicts.load(Ordering::Relaxed), CONFLICT_ATTEMPTS as u64);
        let kept = load::<AutoUpdateConfig>(&store).await.unwrap().unwrap();
        assert_eq!(kept.value.mode(), Some(Mode::Disabled));
    }
}
