//! Typed access to the resources in the store. Values are JSON; `metadata.revision` is
//! the key's `mod_revision`, filled in on read and never stored.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Metadata,
};
use tern_store::{Compare, KeyValue, Lease, Op, Revision, Store, TxnOutcome};

use crate::error::{ApiError, ApiResult};
use crate::keys;

pub trait Resource: Serialize + DeserializeOwned + Clone + Send + Sync {
    /// The agent's key (Teleport's resource, as ternd always kept it).
    const KEY: &'static str;
    /// The key's last part for another product (`keys::product`).
    const PART: &'static str;
    const KIND: &'static str;
    fn metadata(&self) -> &Metadata;
    fn metadata_mut(&mut self) -> &mut Metadata;

    /// Where `product`'s resource of this kind is kept.
    fn key_of(product: &str) -> Cow<'static, str> {
        if product == tern_core::product::AGENT {
            Cow::Borrowed(Self::KEY)
        } else {
            Cow::Owned(keys::product(product, Self::PART))
        }
    }
}

macro_rules! resource {
    ($t:ty, $key:expr, $part:expr, $kind:expr) => {
        impl Resource for $t {
            const KEY: &'static str = $key;
            const PART: &'static str = $part;
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
    "config",
    tern_core::resource::KIND_CONFIG
);
resource!(
    AutoUpdateVersion,
    keys::VERSION,
    "version",
    tern_core::resource::KIND_VERSION
);
resource!(
    AutoUpdateAgentRollout,
    keys::ROLLOUT,
    "rollout",
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

/// The agent's resource.
pub async fn load<T: Resource>(store: &dyn Store) -> ApiResult<Option<Stored<T>>> {
    load_for(store, tern_core::product::AGENT).await
}

/// `product`'s own resource (for a config: its own, not the shared one).
pub async fn load_for<T: Resource>(
    store: &dyn Store,
    product: &str,
) -> ApiResult<Option<Stored<T>>> {
    match store.get(&T::key_of(product)).await? {
        None => Ok(None),
        Some(kv) => decode(&kv).map(Some),
    }
}

/// Creates (`expected` = None) or compare-and-swaps the agent's resource (for the
/// tests and tern-bench; ternd itself writes through [`write_for`]).
#[cfg(any(test, feature = "bench"))]
pub async fn write<T: Resource>(
    store: &dyn Store,
    value: &T,
    expected: Option<Revision>,
) -> Result<Stored<T>, tern_store::Error> {
    write_for(store, tern_core::product::AGENT, value, expected).await
}

/// [`write`] of `product`'s resource.
pub async fn write_for<T: Resource>(
    store: &dyn Store,
    product: &str,
    value: &T,
    expected: Option<Revision>,
) -> Result<Stored<T>, tern_store::Error> {
    let key = T::key_of(product);
    let bytes = encode(value).map_err(|e| tern_store::Error::Backend(e.message))?;
    let kv = match expected {
        None => store.create(&key, bytes, None).await?,
        Some(rev) => store.compare_and_swap(&key, rev, bytes, None).await?,
    };
    Ok(stored_at(value, kv.mod_revision))
}

/// `value` as stored at `revision`.
fn stored_at<T: Resource>(value: &T, revision: Revision) -> Stored<T> {
    let mut value = value.clone();
    value.metadata_mut().revision = Some(revision.to_string());
    Stored { value, revision }
}

/// Equal apart from the revision.
pub(crate) fn same<T: Resource + PartialEq>(a: &T, b: &T) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    a.metadata_mut().revision = None;
    b.metadata_mut().revision = None;
    a == b
}

/// Every live report of the agent (one per replica).
#[cfg(any(test, feature = "bench"))]
pub async fn reports(store: &dyn Store) -> ApiResult<Vec<AutoUpdateAgentReport>> {
    reports_for(store, tern_core::product::AGENT).await
}

/// Every live report of `product` (one per replica).
pub async fn reports_for(
    store: &dyn Store,
    product: &str,
) -> ApiResult<Vec<AutoUpdateAgentReport>> {
    let prefix = if product == tern_core::product::AGENT {
        Cow::Borrowed(keys::REPORTS_PREFIX)
    } else {
        Cow::Owned(keys::product_reports(product))
    };
    let listing = store.list(&prefix).await?;
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
        if tern_core::ids::is_uuid(s.trim()) {
            return ApiError::invalid_resource(format!(
                "metadata.revision: {s:?} is a Teleport revision (a UUID, as `tctl get` writes it), not one this ternd gave (a number): create the resource without it (POST; `ternctl create -f FILE` ignores it), overwrite it whatever its revision (force=true; `ternctl create --force`), or `ternctl apply -f FILE`"
            ));
        }
        ApiError::invalid_resource(format!(
            "metadata.revision: {s:?} is not a revision (a number as returned by ternd)"
        ))
    })
}

/// The groups of `config` (the config in force: `None` is the default one) that send a
/// new version to all their hosts at once, each counted from `product`'s live reports
/// when there are any (`tern_core::exposure`).
pub(crate) async fn all_at_once(
    store: &dyn Store,
    product: &str,
    config: Option<&AutoUpdateConfig>,
    now: jiff::Timestamp,
    report_period: jiff::SignedDuration,
) -> ApiResult<Vec<tern_core::exposure::ConfigWarning>> {
    let reports = reports_for(store, product).await?;
    let hosts = tern_core::exposure::hosts_from_reports(config, &reports, now, report_period);
    Ok(tern_core::exposure::all_at_once(config, hosts.as_ref()))
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

/// What a read-modify-write under a lease did ([`read_modify_write_under_lease`]).
pub(crate) enum UnderLease<T, A> {
    /// As [`read_modify_write`]: the value stored afterwards and `decide`'s answer.
    Done(Option<Stored<T>>, A),
    /// The store no longer held the lease when the write was tried, so nothing was
    /// written; the store's reason.
    LeaseLost(String),
}

/// One write a decision asks for, against the revision read.
enum Change<T> {
    /// Create (`None`: the resource was absent) or replace it.
    Put(T, Option<Revision>),
    /// Delete it.
    Delete(Revision),
}

/// What one write attempt did.
enum Attempt<T> {
    /// Written: the value stored now (`None` once deleted).
    Written(Option<Stored<T>>),
    /// Another writer got there first: the read is stale. The error to return if this
    /// was the last attempt.
    Conflict(ApiError),
    /// The lease of a write under a lease was no longer held: nothing was written.
    LeaseLost(String),
}

/// The one read → decide → compare-and-swap loop every write of a resource uses (admin
/// writes and the reconciler), on `product`'s resource: `decide` sees the current
/// value and says what to do; a write that lost a race is counted in `conflicts` and
/// retried from a fresh read, up to [`CONFLICT_ATTEMPTS`] times. Returns the value
/// stored afterwards (`None` when absent) and `decide`'s answer.
pub(crate) async fn read_modify_write<T, A, F, Fut>(
    store: &dyn Store,
    product: &str,
    conflicts: &AtomicU64,
    decide: F,
) -> ApiResult<(Option<Stored<T>>, A)>
where
    T: Resource,
    F: FnMut(Option<Stored<T>>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<Decision<T, A>>>,
{
    match read_modify_write_guarded(store, product, conflicts, None, decide).await? {
        UnderLease::Done(stored, answer) => Ok((stored, answer)),
        // Only a lease compare refuses a write this way, and this write had none.
        UnderLease::LeaseLost(reason) => Err(ApiError::internal(format!(
            "a write of the {} without a lease was refused for a lease: {reason}",
            T::KIND
        ))),
    }
}

/// [`read_modify_write`] for a writer that may only write while it holds `lease` (the
/// reconcile leader): each write is one store transaction that also requires the lease
/// to be held in the store, so a writer whose lease expired or was taken over writes
/// nothing ([`UnderLease::LeaseLost`], not retried), however long it was paused between its
/// read and its write and whatever its local deadline says. A stale revision is a
/// conflict, retried as in [`read_modify_write`].
pub(crate) async fn read_modify_write_under_lease<T, A, F, Fut>(
    store: &dyn Store,
    product: &str,
    conflicts: &AtomicU64,
    lease: &Lease,
    decide: F,
) -> ApiResult<UnderLease<T, A>>
where
    T: Resource,
    F: FnMut(Option<Stored<T>>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<Decision<T, A>>>,
{
    read_modify_write_guarded(store, product, conflicts, Some(lease), decide).await
}

/// The loop itself: writes are plain compare-and-swaps without `lease`, transactions
/// guarded by it with one.
async fn read_modify_write_guarded<T, A, F, Fut>(
    store: &dyn Store,
    product: &str,
    conflicts: &AtomicU64,
    lease: Option<&Lease>,
    mut decide: F,
) -> ApiResult<UnderLease<T, A>>
where
    T: Resource,
    F: FnMut(Option<Stored<T>>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<Decision<T, A>>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = load_for::<T>(store, product).await?;
        let revision = current.as_ref().map(|c| c.revision);
        let (change, answer) = match decide(current.clone()).await? {
            Decision::Keep(answer) => return Ok(UnderLease::Done(current, answer)),
            Decision::Put(value, answer) => (Change::Put(value, revision), answer),
            Decision::Delete(answer) => match revision {
                // Deleting what is not there writes nothing (and so needs no lease).
                None => return Ok(UnderLease::Done(None, answer)),
                Some(rev) => (Change::Delete(rev), answer),
            },
        };
        let attempted = match lease {
            None => compare_and_swap(store, product, change).await?,
            Some(lease) => transaction_under(store, product, lease, change).await?,
        };
        match attempted {
            Attempt::Written(stored) => return Ok(UnderLease::Done(stored, answer)),
            Attempt::LeaseLost(reason) => return Ok(UnderLease::LeaseLost(reason)),
            Attempt::Conflict(e) => {
                crate::metrics::Metrics::inc(conflicts);
                tracing::info!(attempt, kind = T::KIND, error = %e.message, "changed while writing; retrying");
                if attempt >= CONFLICT_ATTEMPTS {
                    return Err(e);
                }
            }
        }
    }
}

/// A plain create, compare-and-swap or conditional delete.
async fn compare_and_swap<T: Resource>(
    store: &dyn Store,
    product: &str,
    change: Change<T>,
) -> ApiResult<Attempt<T>> {
    let written = match change {
        Change::Put(value, expected) => write_for(store, product, &value, expected).await.map(Some),
        Change::Delete(rev) => store
            .delete(&T::key_of(product), Some(rev))
            .await
            .map(|_| None),
    };
    match written {
        Ok(stored) => Ok(Attempt::Written(stored)),
        Err(e) if is_conflict(&e) => Ok(Attempt::Conflict(e.into())),
        Err(e) => Err(e.into()),
    }
}

/// The same write as one transaction that also requires `lease` to be held in the
/// store: the check and the write are atomic, so no pause between them lets a deposed
/// leader write.
async fn transaction_under<T: Resource>(
    store: &dyn Store,
    product: &str,
    lease: &Lease,
    change: Change<T>,
) -> ApiResult<Attempt<T>> {
    let key = T::key_of(product);
    let key: &str = &key;
    let (on_revision, op) = match &change {
        Change::Put(value, expected) => (
            match expected {
                None => Compare::absent(key),
                Some(rev) => Compare::mod_revision(key, *rev),
            },
            Op::put(key, encode(value)?, None),
        ),
        Change::Delete(rev) => (Compare::mod_revision(key, *rev), Op::delete(key)),
    };
    // The lease first: the store names the first compare that fails, and a replica that
    // lost the lease must hear that (and stop), not retry a conflict with the new
    // leader's write.
    let compares = [Compare::lease_held(lease), on_revision];
    match store.txn(&compares, &[op]).await? {
        // One op: the transaction's revision is the key's new `mod_revision`.
        TxnOutcome::Committed { revision } => Ok(Attempt::Written(match change {
            Change::Put(value, _) => Some(stored_at(&value, revision)),
            Change::Delete(_) => None,
        })),
        TxnOutcome::Failed { index: 0, reason } => Ok(Attempt::LeaseLost(reason)),
        TxnOutcome::Failed { reason, .. } => Ok(Attempt::Conflict(ApiError::conflict(format!(
            "the {} changed since it was read (stale revision): {reason}; read it again and retry",
            T::KIND
        )))),
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
            tern_core::product::AGENT,
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
            tern_core::product::AGENT,
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

    /// A lease held for `holder` with a TTL no test outlives.
    async fn lease(store: &MemoryStore, holder: &str) -> Lease {
        store
            .lease_acquire("leader", holder, std::time::Duration::from_secs(3600))
            .await
            .unwrap()
            .unwrap()
    }

    /// While the lease is held, a write under it is a compare-and-swap like any other:
    /// a racing writer makes it conflict, it is counted and decided again.
    #[tokio::test]
    async fn a_write_under_a_held_lease_that_loses_a_race_is_decided_again() {
        let store = MemoryStore::new();
        write(&store, &with_mode(Mode::Enabled), None)
            .await
            .unwrap();
        let held = lease(&store, "a").await;
        let conflicts = AtomicU64::new(0);
        let mut seen = Vec::new();
        let written = read_modify_write_under_lease(
            &store,
            tern_core::product::AGENT,
            &conflicts,
            &held,
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
        let UnderLease::Done(stored, ()) = written else {
            panic!("refused under a lease that is held");
        };
        assert_eq!(seen, [Some(Mode::Enabled), Some(Mode::Disabled)]);
        assert_eq!(conflicts.load(Ordering::Relaxed), 1);
        let stored = stored.unwrap();
        let kept = load::<AutoUpdateConfig>(&store).await.unwrap().unwrap();
        assert_eq!(kept.value.mode(), Some(Mode::Suspended));
        assert_eq!(
            stored.revision, kept.revision,
            "the revision written is the stored one"
        );
    }

    /// A lease released and taken by another holder: the write (here a create, and a
    /// delete) is refused and not retried, nothing is stored, even while the lease's
    /// local deadline says it is still good. A racing writer that also made the revision
    /// stale does not turn the refusal into a conflict to retry.
    #[tokio::test]
    async fn a_write_under_a_lease_taken_over_writes_nothing() {
        let store = MemoryStore::new();
        let held = lease(&store, "a").await;
        store.lease_release(&held).await.unwrap();
        let usurper = lease(&store, "b").await;
        assert!(held.is_valid(), "the local deadline has not passed");

        let conflicts = AtomicU64::new(0);
        let mut calls = 0;
        let created = read_modify_write_under_lease(
            &store,
            tern_core::product::AGENT,
            &conflicts,
            &held,
            |_: Option<Stored<AutoUpdateConfig>>| {
                calls += 1;
                async { Ok(Decision::Put(with_mode(Mode::Enabled), ())) }
            },
        )
        .await
        .unwrap();
        assert!(matches!(created, UnderLease::LeaseLost(_)));
        assert_eq!(calls, 1, "a refusal is not retried");
        assert!(load::<AutoUpdateConfig>(&store).await.unwrap().is_none());

        // The usurper's own write under its lease goes through …
        let UnderLease::Done(..) = read_modify_write_under_lease(
            &store,
            tern_core::product::AGENT,
            &conflicts,
            &usurper,
            |_: Option<Stored<AutoUpdateConfig>>| async {
                Ok(Decision::Put(with_mode(Mode::Enabled), ()))
            },
        )
        .await
        .unwrap() else {
            panic!("the holder's write was refused");
        };
        let before = store.get(AutoUpdateConfig::KEY).await.unwrap().unwrap();

        // … and the deposed one's delete, read before a racing write, does not.
        let deleted = read_modify_write_under_lease(
            &store,
            tern_core::product::AGENT,
            &conflicts,
            &held,
            |current: Option<Stored<AutoUpdateConfig>>| {
                let store = &store;
                async move {
                    let current = current.unwrap();
                    write(store, &with_mode(Mode::Disabled), Some(current.revision))
                        .await
                        .unwrap();
                    Ok(Decision::Delete(()))
                }
            },
        )
        .await
        .unwrap();
        let UnderLease::LeaseLost(reason) = deleted else {
            panic!("a deposed holder deleted the resource");
        };
        assert!(reason.contains("\"b\""), "{reason}");
        assert_eq!(conflicts.load(Ordering::Relaxed), 0);
        let after = store.get(AutoUpdateConfig::KEY).await.unwrap().unwrap();
        assert_eq!(
            after.mod_revision,
            before.mod_revision + 1,
            "only the racing write"
        );
        let kept = load::<AutoUpdateConfig>(&store).await.unwrap().unwrap();
        assert_eq!(kept.value.mode(), Some(Mode::Disabled));
    }
}
