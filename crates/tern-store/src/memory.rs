//! The in-memory backend: the same semantics as SQLite, in one process, for tests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::watch::{Batch, spawn_watch};
use crate::{
    Compare, Error, Found, KeyValue, Lease, LeaseInfo, Listing, Op, Result, Revision, Store,
    TxnOutcome, Watch, WatchEvent, check_key, check_lease_args, check_ttl, check_txn,
    first_failure,
};

/// Events kept for watches from a past revision (as in the SQLite backend's default).
const DEFAULT_HISTORY: usize = 10_000;
/// The sweeper wakes at least this often, and at the next known expiry.
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// An in-memory [`Store`]. Cloning gives another handle onto the same data.
///
/// Create it inside a Tokio runtime: a background task purges expired keys (emitting
/// their delete events) and stops when the last handle is dropped.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// The latest revision, to wake watches and the sweeper.
    wake: watch::Sender<Revision>,
}

#[derive(Default)]
struct State {
    revision: Revision,
    /// Every event up to and including this revision has been dropped from `events`.
    compacted: Revision,
    kvs: BTreeMap<String, Entry>,
    events: VecDeque<WatchEvent>,
    history: usize,
    leases: HashMap<String, LeaseRow>,
    lease_seq: u64,
}

struct Entry {
    kv: KeyValue,
    expires: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| e > now)
    }
}

struct LeaseRow {
    holder: String,
    token: u64,
    expires: Instant,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// A store that keeps only the last `history` events for watches (at least 1).
    pub fn with_history(history: usize) -> Self {
        let (wake, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                history: history.max(1),
                ..State::default()
            }),
            wake,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweeper(Arc::downgrade(&inner), inner.wake.subscribe()));
        } else {
            tracing::warn!(
                "MemoryStore created outside a Tokio runtime: expired keys are purged only on writes"
            );
        }
        MemoryStore { inner }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated: every
        // mutation below is infallible once started. So a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a write under the lock after purging expired keys, then wakes watchers.
    fn write<T>(&self, f: impl FnOnce(&mut State, Instant) -> Result<T>) -> Result<T> {
        let now = Instant::now();
        let (result, revision) = {
            let mut state = self.lock();
            state.purge_expired(now);
            let result = f(&mut state, now);
            (result, state.revision)
        };
        self.wake.send_if_modified(|r| {
            let changed = *r != revision;
            *r = revision;
            changed
        });
        result
    }
}

impl State {
    fn next_revision(&mut self) -> Revision {
        self.revision += 1;
        self.revision
    }

    fn record(&mut self, event: WatchEvent) {
        self.events.push_back(event);
        while self.events.len() > self.history {
            if let Some(old) = self.events.pop_front() {
                self.compacted = old.revision();
            }
        }
    }

    fn purge_expired(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .kvs
            .iter()
            .filter(|(_, e)| !e.live(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.kvs.remove(&key);
            let revision = self.next_revision();
            self.record(WatchEvent::Delete { key, revision });
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.kvs.values().filter_map(|e| e.expires).min()
    }

    /// Writes `value` at a new revision, keeping `create_revision` if the key exists.
    fn put(&mut self, key: &str, value: Vec<u8>, ttl: Option<Duration>, now: Instant) -> KeyValue {
        let revision = self.next_revision();
        let create_revision = self.kvs.get(key).map_or(revision, |e| e.kv.create_revision);
        let kv = KeyValue {
            key: key.to_owned(),
            value,
            create_revision,
            mod_revision: revision,
        };
        self.kvs.insert(
            key.to_owned(),
            Entry {
                kv: kv.clone(),
                expires: ttl.map(|t| now + t),
            },
        );
        self.record(WatchEvent::Put(kv.clone()));
        kv
    }

    /// Deletes `key` if present, at a new revision with its event.
    fn remove(&mut self, key: &str) -> Option<Revision> {
        self.kvs.remove(key)?;
        let revision = self.next_revision();
        self.record(WatchEvent::Delete {
            key: key.to_owned(),
            revision,
        });
        Some(revision)
    }

    /// The live holder of lease `name` (expired leases count as free).
    fn lease_info(&self, name: &str, now: Instant) -> Option<LeaseInfo> {
        self.leases
            .get(name)
            .filter(|row| row.expires > now)
            .map(|row| LeaseInfo {
                name: name.to_owned(),
                holder: row.holder.clone(),
                token: row.token,
            })
    }

    fn fetch(&self, prefix: &str, after: Revision) -> Result<Batch> {
        if after < self.compacted {
            return Err(Error::Compacted {
                prefix: prefix.to_owned(),
                requested: after + 1,
                compacted: self.compacted,
            });
        }
        let start = self.events.partition_point(|e| e.revision() <= after);
        let events = self
            .events
            .range(start..)
            .filter(|e| e.key().starts_with(prefix))
            .cloned()
            .collect();
        Ok(Batch {
            events,
            scanned_to: self.revision,
        })
    }
}

async fn sweeper(inner: Weak<Inner>, mut wake: watch::Receiver<Revision>) {
    loop {
        let next = {
            let Some(inner) = inner.upgrade() else { return };
            let next = inner.lock().next_expiry();
            if next.is_some_and(|n| n <= Instant::now()) {
                // Purging is a write with nothing else in it.
                let _ = inner.write(|_, _| Ok(()));
                continue;
            }
            next
        };
        let deadline = Instant::now() + SWEEP_INTERVAL;
        let deadline = next.map_or(deadline, |n| n.min(deadline));
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            changed = wake.changed() => if changed.is_err() { return },
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let now = Instant::now();
        let state = self.inner.lock();
        Ok(state
            .kvs
            .get(key)
            .filter(|e| e.live(now))
            .map(|e| e.kv.clone()))
    }

    async fn list(&self, prefix: &str) -> Result<Listing> {
        let now = Instant::now();
        let state = self.inner.lock();
        let kvs = state
            .kvs
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, e)| e.live(now))
            .map(|(_, e)| e.kv.clone())
            .collect();
        Ok(Listing {
            kvs,
            revision: state.revision,
        })
    }

    async fn revision(&self) -> Result<Revision> {
        Ok(self.inner.lock().revision)
    }

    async fn create(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        self.inner.write(|state, now| {
            if state.kvs.contains_key(key) {
                return Err(Error::AlreadyExists {
                    key: key.to_owned(),
                });
            }
            Ok(state.put(key, value, ttl, now))
        })
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
        self.inner.write(|state, now| {
            let Some(entry) = state.kvs.get(key) else {
                return Err(Error::NotFound {
                    key: key.to_owned(),
                });
            };
            if entry.kv.mod_revision != expected {
                return Err(Error::Conflict {
                    key: key.to_owned(),
                    expected,
                    actual: entry.kv.mod_revision,
                });
            }
            Ok(state.put(key, value, ttl, now))
        })
    }

    async fn put(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        self.inner
            .write(|state, now| Ok(state.put(key, value, ttl, now)))
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Revision> {
        check_key(key)?;
        self.inner.write(|state, _| {
            let Some(entry) = state.kvs.get(key) else {
                return Err(Error::NotFound {
                    key: key.to_owned(),
                });
            };
            if let Some(expected) = expected
                && entry.kv.mod_revision != expected
            {
                return Err(Error::Conflict {
                    key: key.to_owned(),
                    expected,
                    actual: entry.kv.mod_revision,
                });
            }
            Ok(state.remove(key).unwrap_or(state.revision))
        })
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        let after = {
            let state = self.inner.lock();
            let after = match start_revision {
                0 => state.revision,
                n => n - 1,
            };
            // Fail at once rather than as the stream's first item.
            state.fetch(prefix, after)?;
            after
        };
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.to_owned();
        let wake = self.inner.wake.subscribe();
        Ok(spawn_watch(
            move |after| {
                let result = inner.lock().fetch(&prefix, after);
                async move { result }
            },
            after,
            wake,
            None,
        ))
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        check_lease_args(name, holder, ttl)?;
        let now = Instant::now();
        let mut state = self.inner.lock();
        if state.leases.get(name).is_some_and(|l| l.expires > now) {
            return Ok(None);
        }
        state.lease_seq += 1;
        let token = state.lease_seq;
        state.leases.insert(
            name.to_owned(),
            LeaseRow {
                holder: holder.to_owned(),
                token,
                expires: now + ttl,
            },
        );
        Ok(Some(Lease {
            name: name.to_owned(),
            holder: holder.to_owned(),
            token,
            id: token as i64,
            ttl,
            valid_until: now + ttl,
        }))
    }

    async fn lease_renew(&self, lease: &Lease) -> Result<Lease> {
        let now = Instant::now();
        let mut state = self.inner.lock();
        match state.leases.get_mut(&lease.name) {
            Some(row) if row.token == lease.token && row.expires > now => {
                row.expires = now + lease.ttl;
                Ok(Lease {
                    valid_until: now + lease.ttl,
                    ..lease.clone()
                })
            }
            _ => Err(Error::LeaseLost {
                name: lease.name.clone(),
                holder: lease.holder.clone(),
            }),
        }
    }

    async fn lease_release(&self, lease: &Lease) -> Result<()> {
        let mut state = self.inner.lock();
        if state
            .leases
            .get(&lease.name)
            .is_some_and(|row| row.token == lease.token)
        {
            state.leases.remove(&lease.name);
        }
        Ok(())
    }

    async fn lease_info(&self, name: &str) -> Result<Option<LeaseInfo>> {
        Ok(self.inner.lock().lease_info(name, Instant::now()))
    }

    async fn txn(&self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome> {
        check_txn(compares, ops)?;
        self.inner.write(|state, now| {
            // `write` purged expired keys: every key left is live.
            let found: Vec<Found> = compares
                .iter()
                .map(|c| match c {
                    Compare::ModRevision { key, .. }
                    | Compare::Exists { key }
                    | Compare::Absent { key } => {
                        Found::Key(state.kvs.get(key).map(|e| e.kv.mod_revision))
                    }
                    Compare::LeaseHeld { lease } => {
                        Found::Lease(state.lease_info(&lease.name, now))
                    }
                })
                .collect();
            if let Some(failed) = first_failure(compares, &found) {
                return Ok(failed);
            }
            for op in ops {
                match op {
                    Op::Put { key, value, ttl } => {
                        state.put(key, value.clone(), *ttl, now);
                    }
                    Op::Delete { key } => {
                        state.remove(key);
                    }
                    Op::DeletePrefix { prefix } => {
                        let keys: Vec<String> = state
                            .kvs
                            .range::<str, _>((
                                std::ops::Bound::Included(prefix.as_str()),
                                std::ops::Bound::Unbounded,
                            ))
                            .take_while(|(k, _)| k.starts_with(prefix.as_str()))
                            .map(|(k, _)| k.clone())
                            .collect();
                        for key in keys {
                            state.remove(&key);
                        }
                    }
                }
            }
            Ok(TxnOutcome::Committed {
                revision: state.revision,
            })
        })
    }
}
