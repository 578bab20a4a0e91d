//! The etcd backend (cargo feature `etcd`): several `ternd` replicas share one etcd cluster.
//!
//! # Layout
//!
//! Everything lives under the installation's prefix `P` (e.g. `/tern/`), so several Tern
//! installations can share one etcd:
//!
//! * `P kv/ KEY` — the store's keys. The value is stored as is.
//! * `P lease/ NAME` — a held leader lease; its value is the holder's name.
//!
//! # Mapping
//!
//! * Revisions are etcd's: the global revision is the cluster's header revision,
//!   `create_revision`/`mod_revision` are the etcd key's. Failed compares and lease grants
//!   do not change etcd's revision; writes by other clients of the same etcd (other
//!   prefixes) do, which the trait allows. An empty etcd is at revision 1, not 0.
//! * `create` is a transaction `create_revision(k) == 0 → put`; CAS is
//!   `create_revision(k) > 0 ∧ mod_revision(k) == expected → put` (the first compare
//!   because etcd compares an absent key as revision 0); the failure branch reads the key
//!   to tell `NotFound` from `Conflict`.
//! * TTL: a TTL shorter than [`EtcdOptions::lease_bucket_min_ttl`] (default 1 hour) gets **one
//!   etcd lease per write**, granted just before it with the TTL rounded up to whole seconds
//!   (etcd's granularity; etcd may also raise it to its minimum, 2 s with default election
//!   settings); the lease a write replaces (or a failed write's fresh lease) is revoked in
//!   the background; it holds no key any more, so that changes nothing.
//!   A longer TTL (host history: 90 days) is rounded **up** to the end of a time bucket
//!   [`EtcdOptions::lease_bucket`] wide (zero by default: sharing off, because a store
//!   handle from before shared leases revokes the lease of each key it rewrites, and with
//!   it every key sharing it; ternd's `--etcd-lease-bucket` turns it on once no such
//!   replica is left), and all writes whose deadlines fall into one bucket
//!   share **one etcd lease**, granted once (with the TTL left to the bucket's end) and
//!   reused: such a key expires no earlier than its TTL and at most one bucket width (plus
//!   the whole second leases are rounded up to) later — as etcd counts; an etcd leader
//!   change without lease checkpointing restarts every lease's countdown, any lease's.
//!   Bound: per store handle (one per ternd replica), at most one lease grant per bucket
//!   that a long-TTL deadline falls into — for one TTL (the history's) one grant per
//!   `lease_bucket` of wall time, however many hosts are written — and shared leases are
//!   never revoked by a rewrite or delete (other keys hang on them); they expire at their
//!   bucket's end. [`EtcdStore::lease_grants`] counts grants. Bucket leases carry IDs the
//!   store picks (a tag, a per-handle nonce and the bucket number) so that any replica
//!   can tell them from per-write leases and leave them alone. Keys sharing a lease expire
//!   in one revision (the trait allows it for long TTLs). If a bucket lease is gone
//!   (revoked from outside), the write fails with etcd's "lease not found" once, the
//!   handle forgets its buckets and the write is retried with a fresh grant.
//!   Expiry is etcd's: a key is deleted by the etcd leader within about half a second after
//!   its lease's TTL (and later if the leader changes: etcd then extends leases by an
//!   election timeout). Until then it is still visible.
//! * Watches are etcd watches on the key range from the start revision, resumed from the
//!   last delivered revision + 1 on another connection when the stream breaks (member
//!   restart, network); a compacted start revision ends the watch with
//!   [`Error::Compacted`]. History is what the etcd cluster keeps (its
//!   `--auto-compaction-*` settings).
//! * Leader lease `NAME`: an etcd lease with the TTL (rounded up) and a transaction
//!   creating `P lease/NAME` with it only if absent. The fencing token is that key's
//!   `create_revision`: a global etcd revision, so it grows with every acquisition of any
//!   lease. Renewal is one etcd keep-alive, then a read checking the key still carries our
//!   token and lease; the local deadline [`Lease::valid_until`] is measured from before the
//!   request with the *requested* TTL, which never exceeds etcd's. Release deletes the key
//!   if it still carries our token and revokes the etcd lease.
//! * `txn` is one etcd transaction: each compare maps to etcd compares (`ModRevision` to
//!   `create_revision > 0 ∧ mod_revision == r`, `Exists` to `version > 0`, `Absent` to
//!   `create_revision == 0`, `LeaseHeld` to the lease key existing with the lease's token
//!   as its `create_revision` and its holder as its value); the ops are puts (leases as
//!   above: per put for short TTLs, per bucket for long ones), deletes and range deletes. All its changes share
//!   one revision. The failure branch reads each compare's key so the first failing compare
//!   is named from etcd's own snapshot. etcd limits a transaction's ops (`--max-txn-ops`,
//!   128 by default).
//! * Every request has a deadline ([`EtcdOptions::request_timeout`]); no answer, a refused
//!   connection and etcd's "no leader"/"timed out"/"too many requests" map to
//!   [`Error::Unavailable`]. A write that timed out may still have been applied: a CAS
//!   retried after it fails with `Conflict` (the caller rereads, as after any conflict).
//! * With credentials, the client logs in again when etcd says its token expired, or that
//!   users or roles changed while a request was in flight ("revision of auth store is
//!   old", refused before anything is applied); the request is then sent again.
//! * Requests stick to one endpoint (one etcd client per endpoint) and move to the next when
//!   it fails as unavailable or does not answer in time. A request that failed while
//!   connecting never reached etcd and is retried at once on the next endpoint, so a dead
//!   member is invisible to callers; a paused or partitioned one costs at most one timed
//!   out request per handle. Reads and keep-alives are also retried after other
//!   "unavailable" answers and timeouts; writes are not (they may have been applied).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    LeaseGrantOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
    WatchStream,
};
use tern_core::backoff::Backoff;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout, timeout_at};
use tonic::Code;

use crate::{
    Error, Found, KeyValue, Lease, LeaseInfo, Listing, Op, Result, Revision, Store, TxnOutcome,
    Watch, WatchEvent, check_key, check_lease_args, check_ttl, check_txn, first_failure,
    prefix_end,
};

/// How many events may wait in a watch's channel before the watch stops reading etcd.
const WATCH_CHANNEL_CAPACITY: usize = 256;
/// Backoff bounds when a watch reconnects.
const WATCH_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
/// Pause before retrying a request that did not reach etcd.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// The high bits (62..48) of every bucket lease's ID, so that any handle can tell a shared
/// lease from a per-write one (etcd's own IDs start with bits of the member ID; a clash
/// only makes a per-write lease wait for its TTL instead of being revoked).
const BUCKET_TAG: i64 = 0x3E57;

/// Tuning of an [`EtcdStore`]; the defaults suit ternd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Deadline of every request (and of opening a watch); past it the operation fails with
    /// [`Error::Unavailable`].
    pub request_timeout: Duration,
    /// Deadline of establishing a TCP/HTTP2 connection to one endpoint.
    pub connect_timeout: Duration,
    /// HTTP/2 keep-alive ping interval and timeout, so a silently dead member (partition,
    /// paused process) is noticed on idle connections such as a watch's.
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
    /// etcd user name and password, if etcd's authentication is on.
    pub credentials: Option<(String, String)>,
    /// Width of the time buckets that long TTLs share leases in (see the module docs): a
    /// TTL of at least [`lease_bucket_min_ttl`](Self::lease_bucket_min_ttl) is rounded up to
    /// its bucket's end (whole seconds), so such a key may expire up to this much late,
    /// never early. Zero (the default) turns sharing off.
    pub lease_bucket: Duration,
    /// The shortest TTL that shares a bucket lease; shorter ones get a lease per write.
    /// Never below `lease_bucket` (a key may be late by at most the width, so sharing only
    /// pays where that is small against the TTL).
    pub lease_bucket_min_ttl: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            request_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            keep_alive_interval: Duration::from_secs(3),
            keep_alive_timeout: Duration::from_secs(2),
            credentials: None,
            // Off by default: a replica of a ternd from before shared leases revokes the
            // lease of every key it rewrites, and with it every key sharing that lease.
            // ternd turns it on with `--etcd-lease-bucket` once no such replica is left.
            lease_bucket: Duration::ZERO,
            lease_bucket_min_ttl: Duration::from_secs(3600),
        }
    }
}

/// A [`Store`] in an etcd v3 cluster, under a key prefix. Cloning gives another handle onto
/// the same clients (connections).
#[derive(Clone)]
pub struct EtcdStore {
    pub(crate) clients: Arc<Clients>,
    /// `PREFIX kv/`: prepended to every store key.
    kv_prefix: String,
    /// `PREFIX lease/`: prepended to lease names.
    lease_prefix: String,
    pub(crate) opts: EtcdOptions,
    pub(crate) leases: Arc<LeaseBuckets>,
}

/// The shared leases of long TTLs, and the grant count.
pub(crate) struct LeaseBuckets {
    /// Bucket number (its end in seconds since `epoch`, divided by the width) → lease ID.
    /// Held across a grant, so concurrent writers into a new bucket grant it once.
    buckets: tokio::sync::Mutex<BTreeMap<u64, i64>>,
    /// Bucket ends are measured from here: monotonic, so a wall-clock step cannot make
    /// a bucket end before a deadline it was chosen for.
    epoch: Instant,
    /// Part of bucket lease IDs, so two handles (replicas) never pick the same ID; bumped
    /// when etcd says an ID is taken.
    nonce: AtomicU32,
    grants: AtomicU64,
}

impl LeaseBuckets {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // Random enough to keep replicas apart, without a dependency on `rand`.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        LeaseBuckets {
            buckets: tokio::sync::Mutex::new(BTreeMap::new()),
            epoch: Instant::now(),
            nonce: AtomicU32::new((h.finish() & 0xFFFF) as u32),
            grants: AtomicU64::new(0),
        }
    }
}

/// The bucket a TTL'd write falls into: `(bucket number, lease TTL)` for a write at `now`
/// (since the epoch) with `ttl`, for buckets `width_secs` wide. The bucket's end is the
/// deadline `now + ttl` rounded up to a multiple of the width; the lease TTL is the time
/// from `now` to that end, rounded up to whole seconds, so a lease granted now expires at
/// or after every deadline the bucket takes (all of them are at most its end).
fn bucket_of(now: Duration, ttl: Duration, width_secs: u64) -> (u64, i64) {
    let width = width_secs.max(1);
    let deadline = now.saturating_add(ttl);
    let deadline_secs = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
    let index = deadline_secs.div_ceil(width);
    let end = Duration::from_secs(index.saturating_mul(width));
    (index, ttl_secs(end.saturating_sub(now)))
}

/// True for the IDs of shared bucket leases (see [`BUCKET_TAG`]).
fn is_bucket_lease(id: i64) -> bool {
    id >> 48 == BUCKET_TAG
}

fn bucket_lease_id(nonce: u32, index: u64) -> i64 {
    (BUCKET_TAG << 48) | (i64::from(nonce & 0xFFFF) << 32) | (index & 0xFFFF_FFFF) as i64
}

/// One client per endpoint, and the one in use: requests stick to one member and move to
/// the next when it fails or stops answering (as etcd's own Go client pins an endpoint).
pub(crate) struct Clients {
    clients: Vec<Client>,
    current: AtomicUsize,
}

impl Clients {
    pub(crate) fn pick(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Relaxed) % self.clients.len();
        (i, self.clients[i].clone())
    }

    /// Moves away from endpoint `i` (unless another request already did).
    fn failed(&self, i: usize) {
        let next = (i + 1) % self.clients.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("kv_prefix", &self.kv_prefix)
            .field("lease_prefix", &self.lease_prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port` or `host:port`), keeping
    /// every key under `prefix` (e.g. `/tern/`), and checks that it answers: fails with
    /// [`Error::Unavailable`] if no endpoint does within the request timeout. Call it inside
    /// a Tokio runtime.
    pub async fn connect(endpoints: &[String], prefix: &str, opts: EtcdOptions) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument(
                "at least one etcd endpoint is needed".into(),
            ));
        }
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(opts.connect_timeout)
            .with_keep_alive(opts.keep_alive_interval, opts.keep_alive_timeout)
            .with_keep_alive_while_idle(true)
            // A member cut off from the others fails requests and watches at once instead
            // of serving stale data or hanging.
            .with_require_leader(true);
        if let Some((user, password)) = &opts.credentials {
            // etcd's tokens expire (5 minutes by default): fetch a new one when told so
            // rather than fail every request after that.
            connect = connect
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let what = format!("connecting to etcd at {}", endpoints.join(","));
        let mut clients = Vec::new();
        for endpoint in endpoints {
            // Builds the channel; connections are made by the first requests.
            let client = match timeout(
                opts.request_timeout,
                Client::connect([endpoint], Some(connect.clone())),
            )
            .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(map_err(&what, e)),
                Err(_) => {
                    return Err(Error::Unavailable(format!(
                        "{what}: no answer within {:?}",
                        opts.request_timeout
                    )));
                }
            };
            clients.push(client);
        }
        let store = EtcdStore {
            clients: Arc::new(Clients {
                clients,
                current: AtomicUsize::new(0),
            }),
            kv_prefix: format!("{prefix}kv/"),
            lease_prefix: format!("{prefix}lease/"),
            opts,
            leases: Arc::new(LeaseBuckets::new()),
        };
        store.revision().await.map_err(|e| match e {
            Error::Unavailable(m) => Error::Unavailable(format!("{what}: {m}")),
            e => e,
        })?;
        Ok(store)
    }

    pub(crate) fn kv_key(&self, key: &str) -> String {
        format!("{}{key}", self.kv_prefix)
    }

    pub(crate) fn lease_key(&self, name: &str) -> String {
        format!("{}{name}", self.lease_prefix)
    }

    /// Runs one etcd request under the request deadline, mapping its errors.
    ///
    /// Requests go to the current endpoint; one that fails as unavailable or does not
    /// answer in time makes the next request use the next endpoint. A request that failed
    /// while connecting never reached etcd, so it is retried at once on the next endpoint,
    /// whatever it is. An `idempotent` request (a read, a keep-alive) is also retried after
    /// other "unavailable" errors and after half the deadline without an answer; a write
    /// is not, since it may have been applied.
    async fn call<T, F, Fut>(
        &self,
        what: impl Fn() -> String,
        idempotent: bool,
        mut f: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let n = self.clients.clients.len();
        let attempts = 2 * n + 1;
        let deadline = Instant::now() + self.opts.request_timeout;
        let mut attempt = 1;
        loop {
            let (i, client) = self.clients.pick();
            let attempt_deadline = if idempotent && n > 1 {
                deadline.min(Instant::now() + self.opts.request_timeout / 2)
            } else {
                deadline
            };
            let e = match timeout_at(attempt_deadline, f(client)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if is_old_auth_revision(&e) && attempt < attempts => {
                    // Users or roles changed since this client's token was issued; etcd
                    // refuses such a request before applying it, so even a write may be
                    // sent again once the client has logged in again.
                    let client = self.clients.clients[i].clone();
                    if let Err(re) = client.refresh_token().await {
                        return Err(map_err(
                            &format!("{}: logging in to etcd again", what()),
                            re,
                        ));
                    }
                    e.to_string()
                }
                Ok(Err(e)) => {
                    if is_unavailable(&e) {
                        self.clients.failed(i);
                    }
                    let again =
                        attempt < attempts && (not_sent(&e) || (idempotent && is_unavailable(&e)));
                    if !again {
                        return Err(map_err(&what(), e));
                    }
                    e.to_string()
                }
                Err(_) => {
                    self.clients.failed(i);
                    if !(idempotent && attempt < attempts && Instant::now() < deadline) {
                        return Err(Error::Unavailable(format!(
                            "{}: etcd did not answer within {:?}",
                            what(),
                            self.opts.request_timeout
                        )));
                    }
                    "no answer".to_owned()
                }
            };
            tracing::debug!(error = %e, attempt, endpoint = i, "etcd store: {}: retrying", what());
            attempt += 1;
            sleep(RETRY_PAUSE).await;
            if Instant::now() >= deadline {
                return Err(Error::Unavailable(format!(
                    "{}: etcd did not answer within {:?} ({e})",
                    what(),
                    self.opts.request_timeout
                )));
            }
        }
    }

    /// A range read (retried: reads are idempotent).
    async fn range(
        &self,
        what: impl Fn() -> String,
        key: String,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse> {
        self.call(what, true, |mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, options).await }
        })
        .await
    }

    /// A transaction (not retried once sent: it may have been applied).
    async fn txn(&self, what: impl Fn() -> String, txn: Txn) -> Result<TxnResponse> {
        self.call(what, false, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
    }

    /// Converts an etcd key-value under the kv prefix.
    fn to_kv(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        let key = kv
            .key()
            .strip_prefix(self.kv_prefix.as_bytes())
            .ok_or_else(|| {
                Error::Backend(format!(
                    "etcd returned key {:?} outside the prefix {:?}",
                    String::from_utf8_lossy(kv.key()),
                    self.kv_prefix
                ))
            })?;
        let key = String::from_utf8(key.to_vec()).map_err(|_| {
            Error::Backend(format!(
                "etcd key {:?} is not UTF-8",
                String::from_utf8_lossy(kv.key())
            ))
        })?;
        Ok(KeyValue {
            key,
            value: kv.value().to_vec(),
            create_revision: rev(kv.create_revision()),
            mod_revision: rev(kv.mod_revision()),
        })
    }

    /// How many etcd leases this handle (and its clones) granted: per-write leases, bucket
    /// leases and leader leases.
    pub fn lease_grants(&self) -> u64 {
        self.leases.grants.load(Ordering::Relaxed)
    }

    /// Grants a fresh etcd lease for a key written with `ttl`.
    async fn grant(&self, what: &str, ttl: Duration) -> Result<i64> {
        let secs = ttl_secs(ttl);
        self.leases.grants.fetch_add(1, Ordering::Relaxed);
        // Retried: a grant that did apply leaves an unused lease, which expires.
        let resp = self
            .call(
                || format!("granting a {secs}s lease for {what}"),
                true,
                |mut c| async move { c.lease_grant(secs, None).await },
            )
            .await?;
        Ok(resp.id())
    }

    /// The lease for a write of `ttl`: a fresh one for a short TTL, the shared lease of its
    /// time bucket for a long one (granted by the first write into the bucket).
    async fn lease_for(&self, what: &str, ttl: Duration) -> Result<i64> {
        let width = self.opts.lease_bucket;
        if width.is_zero() || ttl < width.max(self.opts.lease_bucket_min_ttl) {
            return self.grant(what, ttl).await;
        }
        let width_secs = ttl_secs(width).unsigned_abs();
        let mut buckets = self.leases.buckets.lock().await;
        let now = self.leases.epoch.elapsed();
        // Buckets that have ended hold only expired keys; no new deadline falls into them.
        let current = now.as_secs() / width_secs;
        buckets.retain(|&index, _| index > current);
        let (index, secs) = bucket_of(now, ttl, width_secs);
        if let Some(&id) = buckets.get(&index) {
            return Ok(id);
        }
        for _ in 0..4 {
            let id = bucket_lease_id(self.leases.nonce.load(Ordering::Relaxed), index);
            self.leases.grants.fetch_add(1, Ordering::Relaxed);
            let granted = self
                .call(
                    || format!("granting the {secs}s lease of time bucket {index} for {what}"),
                    true,
                    |mut c| async move {
                        c.lease_grant(secs, Some(LeaseGrantOptions::new().with_id(id)))
                            .await
                    },
                )
                .await;
            match granted {
                Ok(_) => {
                    buckets.insert(index, id);
                    return Ok(id);
                }
                // The ID is taken: by another handle with the same nonce, or by our own
                // grant that applied although its answer was lost (then the lease exists
                // but its TTL is unknown to us). Use another nonce rather than guess.
                Err(Error::Backend(m)) if m.contains("lease already exists") => {
                    self.leases.nonce.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Backend(format!(
            "granting the lease of time bucket {index} for {what}: every ID tried is taken"
        )))
    }

    /// Forgets the bucket leases after etcd said one of them is gone.
    async fn forget_buckets(&self) {
        self.leases.buckets.lock().await.clear();
    }

    /// Revokes etcd leases no key uses any more, in the background (a failure only leaves
    /// them to expire on their own).
    fn revoke_unused(&self, ids: impl IntoIterator<Item = i64>) {
        // Shared bucket leases hold other keys: they only ever expire.
        let ids: Vec<i64> = ids
            .into_iter()
            .filter(|&id| id != 0 && !is_bucket_lease(id))
            .collect();
        if ids.is_empty() {
            return;
        }
        let (_, mut c) = self.clients.pick();
        let deadline = self.opts.request_timeout;
        tokio::spawn(async move {
            for id in ids {
                if let Ok(Err(e)) = timeout(deadline, c.lease_revoke(id)).await
                    && !is_lease_not_found(&e)
                {
                    tracing::debug!(lease = id, error = %e, "etcd store: revoking an unused lease failed");
                }
            }
        });
    }

    /// A write of `key`: `compares` → put (with a lease if `ttl`) and read it back;
    /// otherwise read it (for the caller's error). Returns the response and the lease.
    async fn write(
        &self,
        what: &str,
        key: &str,
        compares: Vec<Compare>,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<(TxnResponse, i64)> {
        match self
            .write_once(what, key, compares.clone(), value.clone(), ttl)
            .await
        {
            // A bucket lease was revoked behind our back: nothing was applied.
            Err(Error::Backend(m)) if ttl.is_some() && m.contains("lease not found") => {
                self.forget_buckets().await;
                self.write_once(what, key, compares, value, ttl).await
            }
            r => r,
        }
    }

    async fn write_once(
        &self,
        what: &str,
        key: &str,
        compares: Vec<Compare>,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<(TxnResponse, i64)> {
        let lease = match ttl {
            Some(ttl) => self.lease_for(what, ttl).await?,
            None => 0,
        };
        let k = self.kv_key(key);
        let mut put = PutOptions::new().with_prev_key();
        if lease != 0 {
            put = put.with_lease(lease);
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![
                TxnOp::put(k.clone(), value, Some(put)),
                TxnOp::get(k.clone(), None),
            ])
            .or_else(vec![TxnOp::get(k, None)]);
        let result = self.txn(|| what.to_owned(), txn).await;
        match &result {
            Ok(resp) if resp.succeeded() => {
                // The lease the key had before, if any, holds nothing now.
                let old = resp.op_responses().into_iter().find_map(|r| match r {
                    TxnOpResponse::Put(p) => p.prev_key().map(|kv| kv.lease()),
                    _ => None,
                });
                self.revoke_unused(old);
            }
            // Not applied (or unknown: a timed-out request may still apply, and then its
            // key dies with the lease, i.e. at its TTL, as it should).
            Ok(_) => self.revoke_unused([lease]),
            Err(_) => {}
        }
        result.map(|r| (r, lease))
    }

    /// The key-value read back by the last `get` of a write transaction's branch.
    fn read_back(&self, resp: &TxnResponse) -> Result<Option<KeyValue>> {
        let got = resp.op_responses().into_iter().rev().find_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        match got.as_ref().and_then(|g| g.kvs().first()) {
            Some(kv) => self.to_kv(kv).map(Some),
            None => Ok(None),
        }
    }

    /// The result of a successful write: the key as read back in the same transaction.
    fn written(&self, key: &str, resp: &TxnResponse) -> Result<KeyValue> {
        self.read_back(resp)?.ok_or_else(|| {
            Error::Backend(format!(
                "etcd applied the write of key {key:?} but did not return it"
            ))
        })
    }

    /// Opens an etcd watch on `[start, end)` from `start_revision` (0: now) and waits until
    /// etcd confirms it. Returns the stream and the revision after which events will come.
    async fn open_watch(
        &self,
        prefix: &str,
        start_revision: Revision,
    ) -> Result<(WatchStream, Revision)> {
        let start = self.kv_key(prefix);
        let end = prefix_end(start.as_bytes()).unwrap_or_else(|| vec![0]);
        let mut options = WatchOptions::new().with_range(end).with_progress_notify();
        if start_revision > 0 {
            options = options.with_start_revision(to_i64(start_revision));
        }
        let what = || format!("watching prefix {prefix:?}");
        let (mut stream, created) = self
            .call(what, true, |mut c| {
                let (start, options) = (start.clone(), options.clone());
                async move {
                    let mut stream = c.watch(start, Some(options)).await?;
                    let created = stream.message().await?;
                    Ok((stream, created))
                }
            })
            .await?;
        let Some(created) = created else {
            return Err(Error::Unavailable(format!(
                "{}: etcd closed the watch stream",
                what()
            )));
        };
        if created.canceled() || created.compact_revision() > 0 {
            return Err(watch_canceled(prefix, start_revision, &created));
        }
        let header = created.header().map_or(0, |h| rev(h.revision()));
        if start_revision == 0 {
            return Ok((stream, header));
        }
        // etcd reports a compacted start revision only in a later message; look for it now
        // so the caller gets the error from `watch` itself, as with the other backends.
        if start_revision <= header {
            let probe = GetOptions::new()
                .with_range(prefix_end(start.as_bytes()).unwrap_or_else(|| vec![0]))
                .with_count_only()
                .with_revision(to_i64(start_revision));
            match self.range(what, start.clone(), Some(probe)).await {
                Ok(_) => {}
                Err(Error::Backend(m)) if m.contains("compacted") => {
                    let cancel = timeout(self.opts.request_timeout, stream.message()).await;
                    let compacted = match cancel {
                        Ok(Ok(Some(r))) if r.compact_revision() > 0 => rev(r.compact_revision()),
                        _ => start_revision,
                    };
                    return Err(Error::Compacted {
                        prefix: prefix.to_owned(),
                        requested: start_revision,
                        compacted,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok((stream, start_revision - 1))
    }

    /// Converts one etcd watch event.
    fn to_event(&self, e: &etcd_client::Event) -> Result<Option<WatchEvent>> {
        let Some(kv) = e.kv() else { return Ok(None) };
        let kv = self.to_kv(kv)?;
        Ok(Some(match e.event_type() {
            EventType::Put => WatchEvent::Put(kv),
            EventType::Delete => WatchEvent::Delete {
                key: kv.key,
                revision: kv.mod_revision,
            },
        }))
    }
}

/// The error for a watch etcd canceled.
fn watch_canceled(prefix: &str, requested: Revision, r: &etcd_client::WatchResponse) -> Error {
    if r.compact_revision() > 0 {
        Error::Compacted {
            prefix: prefix.to_owned(),
            requested,
            compacted: rev(r.compact_revision()),
        }
    } else {
        Error::Unavailable(format!(
            "watching prefix {prefix:?}: etcd canceled the watch: {}",
            r.cancel_reason()
        ))
    }
}

/// Streams a watch into `tx`, reconnecting from the last delivered revision when the
/// etcd stream breaks, until the receiver is dropped or the history is compacted.
async fn run_watch(
    store: EtcdStore,
    prefix: String,
    mut stream: WatchStream,
    mut after: Revision,
    tx: mpsc::Sender<Result<WatchEvent>>,
) {
    loop {
        // Forward messages until the stream breaks.
        let broken = loop {
            let msg = tokio::select! {
                _ = tx.closed() => return,
                msg = stream.message() => msg,
            };
            match msg {
                Ok(Some(resp)) => {
                    if resp.canceled() || resp.compact_revision() > 0 {
                        let err = watch_canceled(&prefix, after + 1, &resp);
                        if matches!(err, Error::Compacted { .. }) {
                            let _ = tx.send(Err(err)).await;
                            return;
                        }
                        break err.to_string();
                    }
                    if resp.events().is_empty() {
                        // A progress notification: everything up to its revision was sent.
                        if !resp.created()
                            && let Some(h) = resp.header()
                        {
                            after = after.max(rev(h.revision()));
                        }
                        continue;
                    }
                    for e in resp.events() {
                        match store.to_event(e) {
                            Ok(Some(event)) => {
                                after = after.max(event.revision());
                                if tx.send(Ok(event)).await.is_err() {
                                    return;
                                }
                            }
                            Ok(None) => {}
                            Err(err) => {
                                let _ = tx.send(Err(err)).await;
                                return;
                            }
                        }
                    }
                }
                Ok(None) => break "etcd closed the watch stream".to_owned(),
                Err(e) => break map_err(&format!("watching prefix {prefix:?}"), e).to_string(),
            }
        };
        tracing::warn!(prefix = %prefix, after, error = %broken, "etcd store: watch broken, resuming");
        // Resume from the next revision, with backoff, until it works or the history is gone.
        let mut attempt = 1;
        stream = loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = sleep(WATCH_RETRY.after(attempt)) => {}
            }
            match store.open_watch(&prefix, after + 1).await {
                Ok((s, _)) => break s,
                Err(e @ Error::Compacted { .. }) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(prefix = %prefix, error = %e, "etcd store: resuming a watch failed, retrying");
                    attempt += 1;
                }
            }
        };
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let resp = self
            .range(|| format!("reading key {key:?}"), self.kv_key(key), None)
            .await?;
        match resp.kvs().first() {
            Some(kv) => self.to_kv(kv).map(Some),
            None => Ok(None),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Listing> {
        let start = self.kv_key(prefix);
        // The kv prefix ends with '/', so the range always has an end.
        let end = prefix_end(start.as_bytes()).unwrap_or_else(|| vec![0]);
        let resp = self
            .range(
                || format!("listing prefix {prefix:?}"),
                start,
                Some(GetOptions::new().with_range(end)),
            )
            .await?;
        let kvs = resp
            .kvs()
            .iter()
            .map(|kv| self.to_kv(kv))
            .collect::<Result<Vec<_>>>()?;
        Ok(Listing {
            kvs,
            revision: resp.header().map_or(0, |h| rev(h.revision())),
        })
    }

    async fn revision(&self) -> Result<Revision> {
        let resp = self
            .range(
                || "reading the revision".to_owned(),
                self.kv_prefix.clone(),
                Some(GetOptions::new().with_count_only()),
            )
            .await?;
        Ok(resp.header().map_or(0, |h| rev(h.revision())))
    }

    async fn create(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let compares = vec![Compare::create_revision(
            self.kv_key(key),
            CompareOp::Equal,
            0,
        )];
        let (resp, _) = self
            .write(&format!("creating key {key:?}"), key, compares, value, ttl)
            .await?;
        if !resp.succeeded() {
            return Err(Error::AlreadyExists {
                key: key.to_owned(),
            });
        }
        self.written(key, &resp)
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let k = self.kv_key(key);
        let compares = vec![
            // etcd compares an absent key as revision 0: require it to exist.
            Compare::create_revision(k.clone(), CompareOp::Greater, 0),
            Compare::mod_revision(k, CompareOp::Equal, to_i64(expected)),
        ];
        let (resp, _) = self
            .write(&format!("updating key {key:?}"), key, compares, value, ttl)
            .await?;
        if resp.succeeded() {
            return self.written(key, &resp);
        }
        match self.read_back(&resp)? {
            None => Err(Error::NotFound {
                key: key.to_owned(),
            }),
            Some(kv) => Err(Error::Conflict {
                key: key.to_owned(),
                expected,
                actual: kv.mod_revision,
            }),
        }
    }

    async fn put(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let (resp, _) = self
            .write(&format!("writing key {key:?}"), key, vec![], value, ttl)
            .await?;
        self.written(key, &resp)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Revision> {
        check_key(key)?;
        let k = self.kv_key(key);
        let mut compares = vec![Compare::create_revision(k.clone(), CompareOp::Greater, 0)];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(
                k.clone(),
                CompareOp::Equal,
                to_i64(expected),
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(
                k.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else(vec![TxnOp::get(k, None)]);
        let resp = self.txn(|| format!("deleting key {key:?}"), txn).await?;
        if resp.succeeded() {
            let leases = resp.op_responses().into_iter().flat_map(|r| match r {
                TxnOpResponse::Delete(d) => d.prev_kvs().iter().map(|kv| kv.lease()).collect(),
                _ => Vec::new(),
            });
            self.revoke_unused(leases);
            return Ok(resp.header().map_or(0, |h| rev(h.revision())));
        }
        match (self.read_back(&resp)?, expected) {
            (None, _) => Err(Error::NotFound {
                key: key.to_owned(),
            }),
            (Some(kv), expected) => Err(Error::Conflict {
                key: key.to_owned(),
                expected: expected.unwrap_or_default(),
                actual: kv.mod_revision,
            }),
        }
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        let (stream, after) = self.open_watch(prefix, start_revision).await?;
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
        tokio::spawn(run_watch(
            self.clone(),
            prefix.to_owned(),
            stream,
            after,
            tx,
        ));
        Ok(Watch::from_receiver(rx))
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        check_lease_args(name, holder, ttl)?;
        let start = Instant::now();
        let what = format!("acquiring lease {name:?}");
        let key = self.lease_key(name);
        // Replicas that do not lead ask again every few seconds and find it held: answer
        // that from a read rather than grant an etcd lease only to revoke it (the
        // transaction below still decides when the key looks free).
        if !self
            .range(|| what.clone(), key.clone(), None)
            .await?
            .kvs()
            .is_empty()
        {
            return Ok(None);
        }
        let id = self.grant(&what, ttl).await?;
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                key,
                holder,
                Some(PutOptions::new().with_lease(id)),
            )]);
        let resp = self.txn(|| what.clone(), txn).await;
        let resp = match resp {
            Ok(r) if r.succeeded() => r,
            Ok(_) => {
                self.revoke_unused([id]);
                return Ok(None);
            }
            Err(e) => {
                // Unknown outcome: if it applied, the lease expires at its TTL unrenewed.
                self.revoke_unused([id]);
                return Err(e);
            }
        };
        let token = resp.header().map_or(0, |h| rev(h.revision()));
        Ok(Some(Lease {
            name: name.to_owned(),
            holder: holder.to_owned(),
            token,
            id,
            ttl,
            valid_until: start + ttl,
        }))
    }

    async fn lease_renew(&self, lease: &Lease) -> Result<Lease> {
        let start = Instant::now();
        let lost = || Error::LeaseLost {
            name: lease.name.clone(),
            holder: lease.holder.clone(),
        };
        let what = || format!("renewing lease {:?}", lease.name);
        // `lease_keep_alive` sends one keep-alive and waits for its answer.
        let id = lease.id;
        let renewed = self
            .call(
                what,
                true,
                |mut c| async move { c.lease_keep_alive(id).await },
            )
            .await;
        match renewed {
            Ok(_) => {}
            Err(Error::Backend(m)) if m.contains("lease not found") => return Err(lost()),
            Err(e) => return Err(e),
        }
        // The etcd lease lives; check the key is still ours (it may have been released
        // behind our back and taken by someone else with another lease).
        let resp = self.range(what, self.lease_key(&lease.name), None).await?;
        match resp.kvs().first() {
            Some(kv) if rev(kv.create_revision()) == lease.token && kv.lease() == lease.id => {
                Ok(Lease {
                    valid_until: start + lease.ttl,
                    ..lease.clone()
                })
            }
            _ => Err(lost()),
        }
    }

    async fn lease_release(&self, lease: &Lease) -> Result<()> {
        let key = self.lease_key(&lease.name);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                to_i64(lease.token),
            )])
            .and_then(vec![TxnOp::delete(key, None)]);
        // Retried even once sent: deleting only our own token's key is idempotent.
        self.call(
            || format!("releasing lease {:?}", lease.name),
            true,
            |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            },
        )
        .await?;
        // Our etcd lease holds nothing now (or only the key just deleted).
        let id = lease.id;
        match self
            .call(
                || format!("revoking the etcd lease of {:?}", lease.name),
                true,
                |mut c| async move { c.lease_revoke(id).await },
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::Backend(m)) if m.contains("lease not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn txn(&self, compares: &[crate::Compare], ops: &[Op]) -> Result<TxnOutcome> {
        check_txn(compares, ops)?;
        self.apply_txn(compares, ops).await
    }

    async fn lease_info(&self, name: &str) -> Result<Option<LeaseInfo>> {
        let resp = self
            .range(
                || format!("reading lease {name:?}"),
                self.lease_key(name),
                None,
            )
            .await?;
        Ok(resp.kvs().first().map(|kv| LeaseInfo {
            name: name.to_owned(),
            holder: String::from_utf8_lossy(kv.value()).into_owned(),
            token: rev(kv.create_revision()),
        }))
    }
}

impl EtcdStore {
    /// [`Store::txn`]: one etcd transaction. Its success branch is the ops (each reporting
    /// the key-values it replaced or deleted, whose etcd leases then hold nothing and are
    /// revoked); its failure branch reads the key of every compare, from which the first
    /// failing compare is told, as of the transaction's own snapshot.
    async fn apply_txn(&self, compares: &[crate::Compare], ops: &[Op]) -> Result<TxnOutcome> {
        match self.apply_txn_once(compares, ops).await {
            // A bucket lease was revoked behind our back: nothing was applied.
            Err(Error::Backend(m)) if m.contains("lease not found") => {
                self.forget_buckets().await;
                self.apply_txn_once(compares, ops).await
            }
            r => r,
        }
    }

    async fn apply_txn_once(&self, compares: &[crate::Compare], ops: &[Op]) -> Result<TxnOutcome> {
        let what = format!("applying a transaction of {} ops", ops.len());
        // Leases as `put` takes them: per put for short TTLs, per bucket for long ones.
        let mut granted = Vec::new();
        let mut then = Vec::with_capacity(ops.len());
        for op in ops {
            then.push(match op {
                Op::Put { key, value, ttl } => {
                    let mut options = PutOptions::new().with_prev_key();
                    if let Some(ttl) = ttl {
                        match self.lease_for(&format!("key {key:?}"), *ttl).await {
                            Ok(id) => {
                                granted.push(id);
                                options = options.with_lease(id);
                            }
                            Err(e) => {
                                self.revoke_unused(granted);
                                return Err(e);
                            }
                        }
                    }
                    TxnOp::put(self.kv_key(key), value.clone(), Some(options))
                }
                Op::Delete { key } => {
                    TxnOp::delete(self.kv_key(key), Some(DeleteOptions::new().with_prev_key()))
                }
                Op::DeletePrefix { prefix } => {
                    let start = self.kv_key(prefix);
                    // The kv prefix ends with '/', so the range always has an end.
                    let end = prefix_end(start.as_bytes()).unwrap_or_else(|| vec![0]);
                    TxnOp::delete(
                        start,
                        Some(DeleteOptions::new().with_range(end).with_prev_key()),
                    )
                }
            });
        }
        let mut when = Vec::new();
        let mut or_else = Vec::with_capacity(compares.len());
        for c in compares {
            let key = match c {
                crate::Compare::ModRevision { key, revision } => {
                    let k = self.kv_key(key);
                    // etcd compares an absent key as revision 0: require it to exist.
                    when.push(Compare::create_revision(k.clone(), CompareOp::Greater, 0));
                    when.push(Compare::mod_revision(
                        k.clone(),
                        CompareOp::Equal,
                        to_i64(*revision),
                    ));
                    k
                }
                crate::Compare::Exists { key } => {
                    let k = self.kv_key(key);
                    when.push(Compare::version(k.clone(), CompareOp::Greater, 0));
                    k
                }
                crate::Compare::Absent { key } => {
                    let k = self.kv_key(key);
                    when.push(Compare::create_revision(k.clone(), CompareOp::Equal, 0));
                    k
                }
                crate::Compare::LeaseHeld { lease } => {
                    // The leader lease is a key bound to an etcd lease: it exists exactly
                    // while the lease is held, and its create revision is the fencing token
                    // of that acquisition (its value the holder).
                    let k = self.lease_key(&lease.name);
                    when.push(Compare::version(k.clone(), CompareOp::Greater, 0));
                    when.push(Compare::create_revision(
                        k.clone(),
                        CompareOp::Equal,
                        to_i64(lease.token),
                    ));
                    when.push(Compare::value(
                        k.clone(),
                        CompareOp::Equal,
                        lease.holder.as_bytes(),
                    ));
                    k
                }
            };
            or_else.push(TxnOp::get(key, None));
        }
        let txn = Txn::new().when(when).and_then(then).or_else(or_else);
        let resp = self.txn(|| what.clone(), txn).await;
        let resp = match resp {
            Ok(resp) => resp,
            // Unknown outcome: if it applied, its TTL'd keys die with their leases at their
            // TTLs, as they should; if not, the leases expire unused.
            Err(e) => return Err(e),
        };
        if resp.succeeded() {
            let replaced = resp
                .op_responses()
                .into_iter()
                .flat_map(|r| match r {
                    TxnOpResponse::Put(p) => {
                        p.prev_key().map(|kv| kv.lease()).into_iter().collect()
                    }
                    TxnOpResponse::Delete(d) => d.prev_kvs().iter().map(|kv| kv.lease()).collect(),
                    _ => Vec::new(),
                })
                .collect::<Vec<_>>();
            self.revoke_unused(replaced);
            return Ok(TxnOutcome::Committed {
                revision: resp.header().map_or(0, |h| rev(h.revision())),
            });
        }
        self.revoke_unused(granted);
        let gets = resp.op_responses();
        let found: Vec<Found> = compares
            .iter()
            .zip(&gets)
            .map(|(c, r)| {
                let kv = match r {
                    TxnOpResponse::Get(g) => g.kvs().first(),
                    _ => None,
                };
                match c {
                    crate::Compare::LeaseHeld { lease } => Found::Lease(kv.map(|kv| LeaseInfo {
                        name: lease.name.clone(),
                        holder: String::from_utf8_lossy(kv.value()).into_owned(),
                        token: rev(kv.create_revision()),
                    })),
                    _ => Found::Key(kv.map(|kv| rev(kv.mod_revision()))),
                }
            })
            .collect();
        if gets.len() != compares.len() {
            return Err(Error::Backend(format!(
                "{what}: etcd answered {} reads for {} compares",
                gets.len(),
                compares.len()
            )));
        }
        first_failure(compares, &found).ok_or_else(|| {
            Error::Backend(format!(
                "{what}: etcd refused the transaction but every compare holds in its snapshot"
            ))
        })
    }
}

/// Maps an etcd client error; `what` names the operation and key.
pub(crate) fn map_err(what: &str, e: etcd_client::Error) -> Error {
    if is_unavailable(&e) {
        Error::Unavailable(format!("{what}: {e}"))
    } else {
        Error::Backend(format!("{what}: {e}"))
    }
}

/// Errors meaning "etcd cannot answer now": unreachable, no leader, leader changed, request
/// timed out, too many requests, connection reset mid-request.
fn is_unavailable(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => {
            matches!(
                s.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Cancelled
                    | Code::Aborted
            ) || (s.code() == Code::Unknown
                // A connection broken mid-request (member killed): tonic reports it as an
                // unknown status caused by a transport error.
                && (s.message().contains("transport error")
                    || format!("{s:?}").contains("transport::Error")))
        }
        E::TransportError(_) | E::IoError(_) => true,
        _ => false,
    }
}

/// etcd's "revision of auth store is old": the client's token predates a change of users
/// or roles (another client ran `user add`, `role grant-permission`…).
fn is_old_auth_revision(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.code() == Code::InvalidArgument && s.message().contains("revision of auth store is old"))
}

/// True if the request failed while connecting, so it never reached etcd.
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == Code::Unavailable
                && (s.message().contains("connect error")
                    || format!("{s:?}").contains("ConnectError"))
        }
        _ => false,
    }
}

fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// etcd lease TTLs are whole seconds: round up, at least 1.
fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

fn rev(r: i64) -> Revision {
    // etcd revisions are never negative.
    u64::try_from(r).unwrap_or(0)
}

fn to_i64(r: Revision) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket's lease, granted by any write into it, outlives every deadline the bucket
    /// takes, and ends at most one width after it; one TTL written over a width of time
    /// lands in at most two buckets.
    #[test]
    fn buckets_never_end_before_a_deadline_and_at_most_a_width_after() {
        let width = 3600;
        let ttl = Duration::from_secs(90 * 24 * 3600);
        let mut grants: BTreeMap<u64, Duration> = BTreeMap::new();
        for ms in (0..2 * 3_600_000u64).step_by(7_919) {
            let now = Duration::from_millis(ms);
            let (index, secs) = bucket_of(now, ttl, width);
            // The first write into a bucket grants its lease: it expires at `granted_at + secs`.
            let end = *grants
                .entry(index)
                .or_insert(now + Duration::from_secs(secs.unsigned_abs()));
            assert!(
                end >= now + ttl,
                "lease ends before the deadline at {now:?}"
            );
            assert!(
                end <= now + ttl + Duration::from_secs(width + 1),
                "lease ends more than a width late at {now:?}"
            );
        }
        assert!(grants.len() <= 3, "{} buckets in two widths", grants.len());
        // Short TTLs are not bucketed by `lease_for`; the arithmetic still holds at the edge.
        assert_eq!(
            bucket_of(Duration::ZERO, Duration::from_secs(width), width),
            (1, 3600)
        );
    }

    #[test]
    fn bucket_lease_ids_are_told_apart() {
        let id = bucket_lease_id(0xFFFF_FFFF, u64::MAX);
        assert!(id > 0 && is_bucket_lease(id));
        assert!(is_bucket_lease(bucket_lease_id(0, 0)));
        assert!(!is_bucket_lease(7_587_886_361_623_040_001));
        assert!(!is_bucket_lease(0));
    }

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::from_secs(2)), 2);
        assert_eq!(ttl_secs(Duration::from_millis(2001)), 3);
        assert_eq!(ttl_secs(Duration::from_secs(3600)), 3600);
    }
}
