#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The conformance suite against the in-memory backend, plus its history bound.

use std::sync::Arc;

use async_trait::async_trait;
use tern_store::conformance::Harness;
use tern_store::{Error, MemoryStore, Store};

struct Memory;

#[async_trait]
impl Harness for Memory {
    async fn open(&self, n: usize) -> Vec<Arc<dyn Store>> {
        let store = MemoryStore::new();
        (0..n)
            .map(|_| Arc::new(store.clone()) as Arc<dyn Store>)
            .collect()
    }
}

tern_store::conformance_tests!(Memory);

#[tokio::test]
async fn watch_before_kept_history_is_compacted() {
    let store = MemoryStore::with_history(5);
    for i in 0..10 {
        store.put(&format!("k/{i}"), vec![], None).await.unwrap();
    }
    let err = store.watch("k/", 1).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Compacted {
                requested: 1,
                compacted: 5,
                ..
            }
        ),
        "{err:?}"
    );
    // The kept history is still replayable.
    let mut w = store.watch("k/", 6).await.unwrap();
    assert_eq!(w.next().await.unwrap().unwrap().revision(), 6);
}
