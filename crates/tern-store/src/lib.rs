//! Tern's store: a small revisioned key-value store behind one async, object-safe trait.
//!
//! `ternd` holds an `Arc<dyn Store>`; backends are [`SqliteStore`] (embedded default, one
//! file, usable by several processes on one machine), [`MemoryStore`] (tests) and
//! `EtcdStore` (cargo feature `etcd`: several replicas on one etcd cluster). Every backend must pass the suite in `conformance`
//! (cargo feature `conformance`), so the semantics below are the contract, not a
//! description of one implementation. They deliberately follow etcd's.
//!
//! # Revisions
//!
//! * The store has one global revision, a `u64` that starts at 0 (empty store) and grows
//!   with every change: each put, successful create or CAS, delete, transaction, and each
//!   TTL expiry. In SQLite and memory it grows by exactly one per change (one per expired
//!   key, one per key a transaction writes or deletes) and
//!   failed operations and leases do not change it; etcd's revision is cluster-wide (an
//!   empty etcd is at 1) and may also grow for writes outside Tern's keys, so callers rely
//!   only on its order. In etcd, keys whose long TTLs share a lease (see TTL) expire
//!   together, in one revision.
//! * Every key carries `create_revision` (the revision that created it; a key deleted and
//!   re-created gets a new one) and `mod_revision` (the revision of its last write).
//! * Every resource write is a compare-and-swap on `mod_revision`
//!   ([`Store::compare_and_swap`]); creation is [`Store::create`] (fails if the key exists).
//!   A CAS either applies or fails with [`Error::Conflict`] naming the actual revision.
//!
//! # Transactions
//!
//! [`Store::txn`] checks a list of [`Compare`]s (a key's `mod_revision`, a key exists or
//! not, a [`Lease`] is still held) and, only if all hold, applies a list of [`Op`]s (put
//! with optional TTL, delete, delete a prefix) atomically: readers see all of them or none,
//! and a failed transaction changes nothing and names its first failing compare
//! ([`TxnOutcome`]). In SQLite and memory each change of a transaction takes a revision of
//! its own, consecutive and in op order (so watches keep strictly increasing revisions);
//! in etcd all of them share the transaction's one revision, and a watch delivers them in
//! op order with that same revision.
//!
//! # TTL
//!
//! A write may carry a TTL. Once it has elapsed the key is invisible to `get`/`list` and
//! is absent for `create`/CAS/delete, immediately; it is purged shortly after (a background
//! sweeper, and before any write) which emits a delete event with a revision of its own.
//! A write without a TTL to a key that had one makes it permanent. TTLs use the wall
//! clock in the SQLite backend (shared by processes) and a monotonic clock in memory.
//! etcd is coarser: its leases count whole seconds (a TTL is rounded up, and raised to
//! etcd's minimum, 2 s by default) and its leader deletes expired keys within about half
//! a second (later across a leader change), so there a key may outlive its TTL by that
//! much; callers must not need TTLs finer than seconds.
//!
//! A backend may round a **long** TTL up, so that many keys can share one expiry: a key
//! written with a TTL of at least the backend's bucket threshold expires **never before its
//! TTL** and at most one bucket width after it (plus the slack above). Such keys may expire
//! in one revision; a write or delete of one of them never shortens another's life. SQLite
//! and memory round nothing (their TTLs cost nothing); etcd shares one etcd lease per time
//! bucket among the TTLs of at least `EtcdOptions::lease_bucket_min_ttl` (default 1 hour,
//! width `EtcdOptions::lease_bucket`: zero by default, i.e. off, until every handle on the
//! cluster knows shared leases; ternd's `--etcd-lease-bucket 1h`), so that writing a
//! TTL'd record for every host of a fleet costs one lease grant per bucket, not one per
//! host.
//!
//! # Listing and prefixes
//!
//! A prefix is a raw byte prefix, as in etcd: `a/b` matches `a/b`, `a/b/x` *and* `a/bc`.
//! To list the children of a "directory" pass the trailing separator: `a/b/`.
//! [`Store::list`] returns the store revision its snapshot was taken at.
//!
//! # Watches
//!
//! [`Store::watch`] streams every put and delete under a prefix with revision
//! `>= start_revision`, in strictly increasing revision order (except that the changes of
//! one etcd transaction share a revision), with no gaps: a watcher
//! sees every change to matching keys, including TTL expiries. To mirror a prefix, `list`
//! it (revision `R`) and then watch from `R + 1`: nothing is missed or repeated.
//! `start_revision == 0` means "from now". History is kept for a bounded number of
//! revisions; a watch from before it fails with [`Error::Compacted`] (the watcher must
//! list again). A watch that falls too far behind ends with that error as its last item.
//! Note: a key that expired before a `list` is already invisible there, while its delete
//! event may carry a revision after the list's; deleting an unknown key is a no-op for a
//! mirror.
//!
//! # Leases (leader election)
//!
//! A named lease is held by at most one holder at a time. [`Store::lease_acquire`]
//! succeeds only if the lease is free or expired (including when the same holder name
//! still holds it: holder names are labels, not identities), and returns a [`Lease`] with a
//! fencing `token` that grows with every acquisition. It expires `ttl` after the last
//! acquire/renew unless renewed; [`Store::lease_renew`] fails with [`Error::LeaseLost`]
//! once it has expired or been taken. The holder must also stop acting as leader when its
//! local deadline [`Lease::valid_until`] passes without a successful renewal (e.g. it was
//! paused or cut off from the store): that deadline is measured from *before* the request
//! was sent, so it never outlives the lease in the store. [`LeaseKeeper`] does both.
//!
//! # Errors
//!
//! [`Error::Unavailable`] means the store cannot be reached or is busy (HTTP 503; retry
//! later); [`Error::Backend`] is anything else unexpected. Messages name the key.

mod backend;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_auth;
mod kv;
mod lease;
mod memory;
mod sqlite;
mod watch;

#[cfg(feature = "conformance")]
pub mod conformance;

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

pub use backend::{Backend, OpenError, create_private_dir};
pub use error::{Error, Result};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdOptions, EtcdStore};
#[cfg(feature = "etcd")]
pub use etcd_auth::{EtcdGrant, EtcdRange};
pub use kv::{KeyValue, Listing, Revision, WatchEvent};
pub use lease::LeaseKeeper;
pub use memory::MemoryStore;
pub use sqlite::{SqliteOptions, SqliteStore};
pub use watch::Watch;

/// A held lease, as returned by [`Store::lease_acquire`] and [`Store::lease_renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    /// Fencing token: strictly greater for every new acquisition of this store's leases.
    pub token: u64,
    /// Backend handle (the etcd lease ID); equal to `token` in the SQLite and memory backends.
    pub id: i64,
    pub ttl: Duration,
    /// Local monotonic deadline: after it, without a successful renewal, the holder must
    /// assume it has lost the lease.
    pub valid_until: Instant,
}

impl Lease {
    /// True while the local deadline has not passed (the holder may still act as leader).
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
}

/// A condition of [`Store::txn`], checked atomically with the transaction's ops.
///
/// A key compare sees the key as `get` would: an expired key is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key exists and its `mod_revision` is `revision` (as a CAS expects).
    ModRevision { key: String, revision: Revision },
    /// The key exists.
    Exists { key: String },
    /// The key does not exist (never written, deleted, or expired).
    Absent { key: String },
    /// `lease` is still held in the store: the lease of its name has the same holder and
    /// fencing token and has not expired there (what [`Store::lease_renew`] checks). A
    /// [`Lease`] from an acquisition that was released, expired or taken over fails. The
    /// local deadline [`Lease::valid_until`] is not consulted: the store's state is.
    LeaseHeld { lease: Lease },
}

impl Compare {
    /// `key` exists with `mod_revision == revision`.
    pub fn mod_revision(key: impl Into<String>, revision: Revision) -> Self {
        Compare::ModRevision {
            key: key.into(),
            revision,
        }
    }

    /// `key` exists.
    pub fn exists(key: impl Into<String>) -> Self {
        Compare::Exists { key: key.into() }
    }

    /// `key` does not exist.
    pub fn absent(key: impl Into<String>) -> Self {
        Compare::Absent { key: key.into() }
    }

    /// `lease` is still held by its holder, with its fencing token.
    pub fn lease_held(lease: &Lease) -> Self {
        Compare::LeaseHeld {
            lease: lease.clone(),
        }
    }
}

/// A write of [`Store::txn`], applied only if every compare holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create or replace `key` (as [`Store::put`]), with an optional TTL.
    Put {
        key: String,
        value: Vec<u8>,
        ttl: Option<Duration>,
    },
    /// Delete `key`; a no-op if it is absent.
    Delete { key: String },
    /// Delete every key starting with `prefix` (bytewise, as [`Store::list`]); the prefix
    /// must not be empty.
    DeletePrefix { prefix: String },
}

impl Op {
    /// Create or replace `key`.
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>, ttl: Option<Duration>) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            ttl,
        }
    }

    /// Delete `key` if present.
    pub fn delete(key: impl Into<String>) -> Self {
        Op::Delete { key: key.into() }
    }

    /// Delete every key under `prefix`.
    pub fn delete_prefix(prefix: impl Into<String>) -> Self {
        Op::DeletePrefix {
            prefix: prefix.into(),
        }
    }
}

/// The result of [`Store::txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Every compare held and every op was applied. `revision` is the store revision right
    /// after the transaction: the revision of its last change (the current revision if it
    /// changed nothing).
    Committed { revision: Revision },
    /// The compare at `index` (the first one that does not hold) failed, so nothing was
    /// applied; `reason` says why in a few words, naming the key or lease.
    Failed { index: usize, reason: String },
}

impl TxnOutcome {
    /// True if the transaction was applied.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxnOutcome::Committed { .. })
    }
}

/// Who holds a lease, for status pages (not for deciding leadership: use a [`Lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    pub name: String,
    pub holder: String,
    pub token: u64,
}

/// The store. Object safe; hold it as `Arc<dyn Store>`. See the crate docs for the contract.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The live value of `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Every live key starting with `prefix` (bytewise), sorted, with the snapshot's revision.
    async fn list(&self, prefix: &str) -> Result<Listing>;

    /// The current store revision.
    async fn revision(&self) -> Result<Revision>;

    /// Creates `key` if it is absent; [`Error::AlreadyExists`] otherwise.
    async fn create(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue>;

    /// Replaces `key` if its `mod_revision` is `expected`: [`Error::Conflict`] with the
    /// actual revision otherwise, [`Error::NotFound`] if absent.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue>;

    /// Unconditional create-or-replace (for keys with a single writer, e.g. a replica's
    /// own report with a TTL).
    async fn put(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue>;

    /// Deletes `key`, if `expected` is given only when its `mod_revision` matches.
    /// Returns the revision of the delete. [`Error::NotFound`] if absent.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Revision>;

    /// Streams changes under `prefix` from `start_revision` (0: from now). Dropping the
    /// [`Watch`] stops it.
    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch>;

    /// Takes lease `name` for `holder` if it is free or expired; `Ok(None)` if someone
    /// (anyone, even the same holder name) holds it.
    async fn lease_acquire(&self, name: &str, holder: &str, ttl: Duration)
    -> Result<Option<Lease>>;

    /// Extends a held lease by its TTL; [`Error::LeaseLost`] if it expired or was taken.
    async fn lease_renew(&self, lease: &Lease) -> Result<Lease>;

    /// Gives a lease up so another can take it at once. A no-op if it is no longer held.
    async fn lease_release(&self, lease: &Lease) -> Result<()>;

    /// The current holder of lease `name`, if it is held and unexpired.
    async fn lease_info(&self, name: &str) -> Result<Option<LeaseInfo>>;

    /// If every compare holds, applies every op in order, atomically (readers see all of
    /// them or none), and returns [`TxnOutcome::Committed`]; otherwise applies nothing and
    /// returns [`TxnOutcome::Failed`] naming the first compare that does not hold. Empty
    /// `compares` always hold; empty `ops` are allowed (a check of the compares).
    ///
    /// Ops must not overlap (etcd refuses it): no two puts of one key, no put of a key that
    /// a `Delete` or `DeletePrefix` of the same transaction removes
    /// ([`Error::InvalidArgument`]). Keys, prefixes and TTLs are checked as for single writes.
    async fn txn(&self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome>;
}

/// Shared argument checks, so every backend rejects the same inputs the same way.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("key must not be empty".into()));
    }
    Ok(())
}

pub(crate) fn check_ttl(key: &str, ttl: Option<Duration>) -> Result<()> {
    if ttl.is_some_and(|t| t.is_zero()) {
        return Err(Error::InvalidArgument(format!(
            "TTL for key {key:?} must be positive"
        )));
    }
    Ok(())
}

/// Checks a transaction's arguments: keys, TTLs, lease names, and that no op writes a key
/// another op of the same transaction also writes or deletes.
pub(crate) fn check_txn(compares: &[Compare], ops: &[Op]) -> Result<()> {
    for c in compares {
        match c {
            Compare::ModRevision { key, .. }
            | Compare::Exists { key }
            | Compare::Absent { key } => {
                check_key(key)?;
            }
            Compare::LeaseHeld { lease } => {
                if lease.name.is_empty() {
                    return Err(Error::InvalidArgument(
                        "lease name must not be empty".into(),
                    ));
                }
            }
        }
    }
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Put { key, ttl, .. } => {
                check_key(key)?;
                check_ttl(key, *ttl)?;
                let clash = ops.iter().enumerate().any(|(j, other)| {
                    j != i
                        && match other {
                            Op::Put { key: k, .. } | Op::Delete { key: k } => k == key,
                            Op::DeletePrefix { prefix } => key.starts_with(prefix.as_str()),
                        }
                });
                if clash {
                    return Err(Error::InvalidArgument(format!(
                        "key {key:?} is written by more than one op of the transaction"
                    )));
                }
            }
            Op::Delete { key } => check_key(key)?,
            Op::DeletePrefix { prefix } => {
                if prefix.is_empty() {
                    return Err(Error::InvalidArgument(
                        "the prefix of a delete-prefix op must not be empty".into(),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What a backend read for one compare of a transaction, to evaluate it.
pub(crate) enum Found {
    /// A key compare: the key's `mod_revision` if it exists (and has not expired).
    Key(Option<Revision>),
    /// A lease compare: the lease's holder and token if it is held and unexpired.
    Lease(Option<LeaseInfo>),
}

/// Why `compare` does not hold given what was `found` for it, or `None` if it holds.
pub(crate) fn compare_failure(compare: &Compare, found: &Found) -> Option<String> {
    match (compare, found) {
        (Compare::ModRevision { key, revision }, Found::Key(actual)) => match actual {
            Some(actual) if actual == revision => None,
            Some(actual) => Some(format!(
                "key {key:?} is at revision {actual}, not {revision}"
            )),
            None => Some(format!("key {key:?} does not exist")),
        },
        (Compare::Exists { key }, Found::Key(actual)) => match actual {
            Some(_) => None,
            None => Some(format!("key {key:?} does not exist")),
        },
        (Compare::Absent { key }, Found::Key(actual)) => {
            actual.map(|actual| format!("key {key:?} exists (revision {actual})"))
        }
        (Compare::LeaseHeld { lease }, Found::Lease(info)) => match info {
            Some(info) if info.holder == lease.holder && info.token == lease.token => None,
            Some(info) => Some(format!(
                "lease {:?} is held by {:?} (token {}), not by {:?} (token {})",
                lease.name, info.holder, info.token, lease.holder, lease.token
            )),
            None => Some(format!(
                "lease {:?} is no longer held by {:?}",
                lease.name, lease.holder
            )),
        },
        (c, _) => Some(format!("{c:?}: the backend read the wrong kind of state")),
    }
}

/// The outcome for a transaction whose compares saw `found` (one per compare, in order):
/// `Some(Failed)` for the first that does not hold, `None` if all hold.
pub(crate) fn first_failure(compares: &[Compare], found: &[Found]) -> Option<TxnOutcome> {
    compares
        .iter()
        .zip(found)
        .enumerate()
        .find_map(|(index, (c, f))| {
            compare_failure(c, f).map(|reason| TxnOutcome::Failed { index, reason })
        })
}

pub(crate) fn check_lease_args(name: &str, holder: &str, ttl: Duration) -> Result<()> {
    if name.is_empty() || holder.is_empty() {
        return Err(Error::InvalidArgument(
            "lease name and holder must not be empty".into(),
        ));
    }
    if ttl.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "TTL of lease {name:?} must be positive"
        )));
    }
    Ok(())
}

/// The end of the key range matching `prefix` bytewise (exclusive), or `None` if every key
/// from `prefix` on matches (empty prefix, or all 0xff bytes).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
