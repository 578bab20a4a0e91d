//! Wakes a loop when anything under `lockstep/` changes: one store watch, re-opened when
//! it ends, signalling a `Notify` (a change while nobody waits leaves a permit, so none
//! is missed between a read and the next wait).

use std::sync::Arc;
use std::time::Duration;

use tern_store::Store;
use tokio::sync::Notify;

use crate::keys;

pub(crate) struct Changes {
    notify: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Changes {
    pub(crate) fn watch(store: Arc<dyn Store>) -> Self {
        let notify = Arc::new(Notify::new());
        let n = Arc::clone(&notify);
        let task = tokio::spawn(async move {
            loop {
                match store.watch(keys::ROOT, 0).await {
                    Ok(mut w) => {
                        // Anything may have changed while no watch was open.
                        n.notify_one();
                        while let Some(event) = w.next().await {
                            if let Err(e) = event {
                                tracing::debug!(error = %e, "the watch of lockstep/ ended; re-opening it");
                                break;
                            }
                            n.notify_one();
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot watch lockstep/ yet"),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Changes { notify, task }
    }

    /// Returns at the next change, or after `at_most`.
    pub(crate) async fn wait(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.notify.notified()).await;
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        self.task.abort();
    }
}
