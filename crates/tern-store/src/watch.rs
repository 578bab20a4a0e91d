use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::error::{Error, Result};
use crate::kv::{Revision, WatchEvent};

/// How many events may wait in a watch's channel before the producer pauses.
const WATCH_CHANNEL_CAPACITY: usize = 256;

/// A stream of [`WatchEvent`]s in revision order. Ends (`None`) when the store is gone;
/// an `Err` item (e.g. [`Error::Compacted`]) is always the last one. Dropping it cancels
/// the watch.
#[derive(Debug)]
pub struct Watch {
    rx: mpsc::Receiver<Result<WatchEvent>>,
}

impl Watch {
    /// Wraps a channel fed by a backend (for backends outside this crate).
    pub fn from_receiver(rx: mpsc::Receiver<Result<WatchEvent>>) -> Self {
        Watch { rx }
    }

    /// The next event, `None` when the watch has ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        self.rx.recv().await
    }

    /// The underlying channel (e.g. for `tokio_stream::wrappers::ReceiverStream`).
    pub fn into_receiver(self) -> mpsc::Receiver<Result<WatchEvent>> {
        self.rx
    }
}

/// What a backend returns to the shared watch loop: matching events after a revision, in
/// order, and how far it looked (so non-matching revisions are not scanned again).
pub(crate) struct Batch {
    pub events: Vec<WatchEvent>,
    pub scanned_to: Revision,
}

/// Runs a watch: fetch events after the cursor, send them, then sleep until a local write
/// (`wake`) or, for stores shared with other processes, `poll` elapses.
pub(crate) fn spawn_watch<F, Fut>(
    mut fetch: F,
    start_after: Revision,
    mut wake: watch::Receiver<Revision>,
    poll: Option<Duration>,
) -> Watch
where
    F: FnMut(Revision) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Batch>> + Send,
{
    let (tx, rx) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
    tokio::spawn(async move {
        let mut after = start_after;
        loop {
            // Mark the current revision as seen *before* reading, so a write that lands
            // after the read still wakes us below.
            wake.borrow_and_update();
            let mut progressed = false;
            match fetch(after).await {
                Ok(batch) => {
                    for event in batch.events {
                        if tx.send(Ok(event)).await.is_err() {
                            return; // the watcher went away
                        }
                    }
                    if batch.scanned_to > after {
                        after = batch.scanned_to;
                        progressed = true;
                    }
                }
                Err(Error::Unavailable(msg)) => {
                    tracing::warn!(error = %msg, "watch: store unavailable, retrying");
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
            if progressed {
                continue; // there may be more than one batch
            }
            let sleep = async {
                match poll {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tx.closed() => return,
                changed = wake.changed() => {
                    if changed.is_err() {
                        match poll {
                            Some(d) => tokio::time::sleep(d).await,
                            None => return, // the store is gone and nothing else can write
                        }
                    }
                }
                _ = sleep => {}
            }
        }
    });
    Watch { rx }
}
