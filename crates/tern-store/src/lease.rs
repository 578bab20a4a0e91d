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
        match timeout(period, store.lease_renew(&lease)).await {
            Ok(Ok(renewed)) => {
                lease = renewed;
                tx.send_replace(Some(lease.clone()));
                continue;
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
        if Instant::now() >= lease.valid_until {
            tracing::warn!(lease = %lease.name, holder = %lease.holder, "lease expired without renewal");
            tx.send_replace(None);
            return;
        }
    }
}
