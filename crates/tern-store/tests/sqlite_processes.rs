#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Two real processes on one SQLite file: this test binary runs itself again as the
//! second process (`child` below does nothing unless `TERN_STORE_CHILD_DB` is set).

use std::time::Duration;

use tern_store::{Error, SqliteStore, Store, WatchEvent};

const EACH: u64 = 30;
const CHILD_ENV: &str = "TERN_STORE_CHILD_DB";

async fn increment(store: &SqliteStore, times: u64) {
    for _ in 0..times {
        loop {
            let kv = store.get("counter").await.unwrap().unwrap();
            let n: u64 = String::from_utf8(kv.value).unwrap().parse().unwrap();
            match store
                .compare_and_swap(
                    "counter",
                    kv.mod_revision,
                    (n + 1).to_string().into_bytes(),
                    None,
                )
                .await
            {
                Ok(_) => break,
                Err(Error::Conflict { .. }) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// The second process: increments the counter and tries to take the parent's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return; // not running as the child
    };
    let store = SqliteStore::open(&db).await.unwrap();
    increment(&store, EACH).await;
    let got = store
        .lease_acquire("leader", "child", Duration::from_secs(10))
        .await
        .unwrap();
    let result = if got.is_some() { "got" } else { "none" };
    store.put("child/lease", result.into(), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_writes_watches_and_leases() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tern.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let created = store.create("counter", b"0".to_vec(), None).await.unwrap();
    let lease = store
        .lease_acquire("leader", "parent", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let mut watch = store
        .watch("counter", created.mod_revision + 1)
        .await
        .unwrap();

    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &db)
        .spawn()
        .unwrap();
    increment(&store, EACH).await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("child process hung")
        .unwrap();
    assert!(status.success(), "child process failed: {status}");

    let counter = store.get("counter").await.unwrap().unwrap();
    assert_eq!(
        counter.value,
        (2 * EACH).to_string().into_bytes(),
        "lost increments"
    );
    assert_eq!(
        store.get("child/lease").await.unwrap().unwrap().value,
        b"none",
        "the child took a lease the parent holds"
    );
    // The parent's watch saw every increment from both processes, in order.
    let mut last = created.mod_revision;
    for i in 1..=2 * EACH {
        let e = tokio::time::timeout(Duration::from_secs(15), watch.next())
            .await
            .expect("watch stalled")
            .unwrap()
            .unwrap();
        match e {
            WatchEvent::Put(kv) if kv.key == "counter" => {
                assert!(kv.mod_revision > last);
                last = kv.mod_revision;
                assert_eq!(kv.value, i.to_string().into_bytes());
            }
            e => panic!("unexpected event {e:?}"),
        }
    }
    store.lease_release(&lease).await.unwrap();
}
