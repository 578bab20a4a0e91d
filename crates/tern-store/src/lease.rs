use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::{Error, Lease, Result, Store};

/// Keeps a [`Lease`] alive in the background and tells its holder when it is lost.
///
/// It renews every third of the TTL. The lease counts as lost when a renewal reports
/// [`Error::LeaseLost`], or when the local deadline passes without a successful renewal
/// (store unreachable, process paused): from then on [`is_held`](Self::is_held) is false,
/// [`lost`](Self::lost) resolves, and no further renewal is attempted, so a holder that
/// resumes after a pause never acts as leader on a stale lease.
///
/// Dropping the keeper stops renewing (the lease then expires after its TTL);
/// [`release`](Self::release) hands it over at once.
pub struct LeaseKeeper {
    store: Arc<dyn Store>,
    state: watch::Receiver<Option<Lease>>,
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts renewing `lease` (just acquired from `store`).
    pub fn spawn(store: Arc<dyn Store>, lease: Lease) -> Self {
        let (tx, state) = watch::channel(Some(lease.clone()));
        let task = tokio::spawn(keep_alive(Arc::clone(&store), lease, tx));
        LeaseKeeper { store, state, task }
    }

    /// The lease as last renewed, while it is still held.
    pub fn lease(&self) -> Option<Lease> {
        self.state.borrow().clone().filter(Lease::is_valid)
    }

    /// True while the lease is held and its local deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.lease().is_some()
    }

    /// Resolves once the lease is lost (at once if it already is).
    pub async fn lost(&mut self) {
        loop {
            let deadline = match &*self.state.borrow_and_update() {
                Some(lease) if lease.is_valid() => lease.valid_until,
                _ => return,
            };
            tokio::select! {
                _ = sleep_until(deadline) => {}
                changed = self.state.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Stops renewing and releases the lease so another holder can take it at once.
    pub async fn release(self) -> Result<()> {
        self.task.abort();
        let lease = self.state.borrow().clone();
        match lease {
            Some(lease) => self.store.lease_release(&lease).await,
            None => Ok(()),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_alive(store: Arc<dyn Store>, mut lease: Lease, tx: watch::Sender<Option<Lease>>) {
    let period = lease.ttl / 3;
    loop {
        sleep(period).await;
        // A renewal may only start, and must finish, while the lease is still ours by the
        // local deadline: one that succeeded after it would resurrect a lease the holder
        // has already been told it lost (e.g. the store came back right after a pause).
        let now = Instant::now();
        if now >= lease.valid_until {
            tracing::warn!(lease = %lease.name, holder = %lease.holder, "lease expired without renewal");
            tx.send_replace(None);
            return;
        }
        let budget = period.min(lease.valid_until - now);
        match timeout(budget, store.lease_renew(&lease)).await {
            Ok(Ok(renewed)) => {
                lease = renewed;
                tx.send_replace(Some(lease.clone()));
            }
            Ok(Err(Error::LeaseLost { .. })) => {
                tracing::warn!(lease = %lease.name, holder = %lease.holder, "lease lost");
                tx.send_replace(None);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(lease = %lease.name, error = %e, "renewing lease failed");
            }
            Err(_) => {
                tracing::warn!(lease = %lease.name, "renewing lease timed out");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::{
        Compare, KeyValue, LeaseInfo, Listing, MemoryStore, Op, Revision, TxnOutcome, Watch,
    };

    /// A real in-memory store whose lease renewals fail as `Unavailable` while `down` is
    /// set, after a while (as a client's connection attempts would): an outage of the
    /// store, which the memory backend itself cannot have. Its leases live `SLACK` times
    /// longer in the store than their holders are told, as etcd's do when it restarts (it
    /// extends every lease by its TTL): a renewal after the outage can still succeed.
    const SLACK: u32 = 10;
    struct Flaky {
        inner: MemoryStore,
        down: AtomicBool,
    }

    #[async_trait]
    impl Store for Flaky {
        async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
            self.inner.get(key).await
        }
        async fn list(&self, prefix: &str) -> Result<Listing> {
            self.inner.list(prefix).await
        }
        async fn revision(&self) -> Result<Revision> {
            self.inner.revision().await
        }
        async fn create(
            &self,
            key: &str,
            value: Vec<u8>,
            ttl: Option<Duration>,
        ) -> Result<KeyValue> {
            self.inner.create(key, value, ttl).await
        }
        async fn compare_and_swap(
            &self,
            key: &str,
            expected: Revision,
            value: Vec<u8>,
            ttl: Option<Duration>,
        ) -> Result<KeyValue> {
            self.inner.compare_and_swap(key, expected, value, ttl).await
        }
        async fn put(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
            self.inner.put(key, value, ttl).await
        }
        async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Revision> {
            self.inner.delete(key, expected).await
        }
        async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
            self.inner.watch(prefix, start_revision).await
        }
        async fn lease_acquire(
            &self,
            name: &str,
            holder: &str,
            ttl: Duration,
        ) -> Result<Option<Lease>> {
            let lease = self.inner.lease_acquire(name, holder, ttl * SLACK).await?;
            Ok(lease.map(|l| Lease {
                ttl,
                valid_until: l.valid_until - ttl * (SLACK - 1),
                ..l
            }))
        }
        async fn lease_renew(&self, lease: &Lease) -> Result<Lease> {
            if self.down.load(Ordering::SeqCst) {
                sleep(Duration::from_millis(300)).await;
                return Err(Error::Unavailable("store down (test)".into()));
            }
            let stretched = Lease {
                ttl: lease.ttl * SLACK,
                ..lease.clone()
            };
            let l = self.inner.lease_renew(&stretched).await?;
            Ok(Lease {
                ttl: lease.ttl,
                valid_until: l.valid_until - lease.ttl * (SLACK - 1),
                ..l
            })
        }
        async fn lease_release(&self, lease: &Lease) -> Result<()> {
            self.inner.lease_release(lease).await
        }
        async fn lease_info(&self, name: &str) -> Result<Option<LeaseInfo>> {
            self.inner.lease_info(name).await
        }
        async fn txn(&self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome> {
            self.inner.txn(compares, ops).await
        }
    }

    /// Once the local deadline has passed, the keeper has told its holder the lease is lost;
    /// a store that answers again right after must not bring it back (the holder may already
    /// have stopped acting as leader, and another replica may be about to take over).
    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_stays_lost_when_the_store_returns() {
        let store = Arc::new(Flaky {
            inner: MemoryStore::new(),
            down: AtomicBool::new(false),
        });
        let ttl = Duration::from_secs(3);
        let lease = store
            .lease_acquire("leader", "a", ttl)
            .await
            .unwrap()
            .unwrap();
        let mut keeper = LeaseKeeper::spawn(store.clone(), lease);
        sleep(ttl * 2).await;
        assert!(keeper.is_held(), "renewals while the store answers keep it");

        store.down.store(true, Ordering::SeqCst);
        keeper.lost().await;
        // The store is back at once, before the keeper's next renewal would be due.
        store.down.store(false, Ordering::SeqCst);
        sleep(ttl * 3).await;
        assert!(!keeper.is_held(), "a lost lease came back");
        assert!(keeper.state.borrow().is_none());
    }
}
