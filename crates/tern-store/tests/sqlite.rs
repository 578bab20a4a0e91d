#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The conformance suite against SQLite, each handle a separate `SqliteStore` on the same
//! file (as separate processes would be), plus SQLite-only behaviour.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tempfile::TempDir;
use tern_store::conformance::Harness;
use tern_store::{Error, SqliteOptions, SqliteStore, Store, WatchEvent};

#[derive(Default)]
struct Sqlite {
    dirs: Mutex<Vec<TempDir>>,
}

#[async_trait]
impl Harness for Sqlite {
    async fn open(&self, n: usize) -> Vec<Arc<dyn Store>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.db");
        self.dirs.lock().unwrap().push(dir);
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..n {
            stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
        }
        stores
    }
}

tern_store::conformance_tests!(Sqlite::default());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let (kv, rev) = {
        let s = SqliteStore::open(&path).await.unwrap();
        let kv = s
            .create("res/config", b"spec".to_vec(), None)
            .await
            .unwrap();
        s.put("res/other", b"x".to_vec(), None).await.unwrap();
        (kv, s.revision().await.unwrap())
    };
    let s = SqliteStore::open(&path).await.unwrap();
    assert_eq!(s.revision().await.unwrap(), rev);
    assert_eq!(s.get("res/config").await.unwrap(), Some(kv.clone()));
    let next = s
        .compare_and_swap("res/config", kv.mod_revision, b"v2".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(next.mod_revision, rev + 1);
    // History survives too.
    let mut w = s.watch("res/", 1).await.unwrap();
    assert_eq!(w.next().await.unwrap().unwrap(), WatchEvent::Put(kv));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_log_is_pruned_and_old_watches_fail() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SqliteOptions {
        history: 5,
        sweep_interval: Duration::from_millis(20),
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open_with(dir.path().join("tern.db"), opts)
        .await
        .unwrap();
    for i in 0..20 {
        s.put(&format!("k/{i}"), vec![], None).await.unwrap();
    }
    // The sweeper prunes within a few of its intervals.
    let err = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.watch("k/", 1).await {
                Err(e) => return e,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("the event log was never pruned");
    assert!(
        matches!(
            err,
            Error::Compacted {
                requested: 1,
                compacted: 15,
                ..
            }
        ),
        "{err:?}"
    );
    let mut w = s.watch("k/", 16).await.unwrap();
    assert_eq!(w.next().await.unwrap().unwrap().key(), "k/15");
}

#[tokio::test]
async fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = SqliteStore::open(&path)
        .await
        .err()
        .expect("opened a newer schema");
    assert!(
        matches!(err, Error::Backend(ref m) if m.contains("schema version 99")),
        "{err}"
    );
}

#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    // SQLite calls run off the runtime's thread; a watch still makes progress.
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path().join("tern.db")).await.unwrap();
    let mut w = s.watch("", 0).await.unwrap();
    let kv = s.put("k", b"v".to_vec(), None).await.unwrap();
    assert_eq!(w.next().await.unwrap().unwrap(), WatchEvent::Put(kv));
}

#[tokio::test]
async fn open_fails_clearly_for_a_bad_path() {
    let err = SqliteStore::open("/nonexistent-dir/for/sure/tern.db")
        .await
        .err()
        .expect("opened a file in a missing directory");
    assert!(
        err.to_string()
            .contains("/nonexistent-dir/for/sure/tern.db"),
        "{err}"
    );
}

/// Options under which nothing but the watch poll can notice another instance's writes:
/// the sweeper (whose writes also wake local watches) practically never runs.
fn no_sweep() -> SqliteOptions {
    SqliteOptions {
        sweep_interval: Duration::from_secs(3600),
        ..SqliteOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_another_instances_writes_by_polling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let a = SqliteStore::open_with(&path, no_sweep()).await.unwrap();
    let b = SqliteStore::open_with(&path, no_sweep()).await.unwrap();
    let mut w = a.watch("k/", 0).await.unwrap();
    for i in 0..3 {
        let kv = b.put(&format!("k/{i}"), vec![i], None).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(15), w.next())
            .await
            .expect("a watch never saw the other instance's write")
            .unwrap()
            .unwrap();
        assert_eq!(got, WatchEvent::Put(kv));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_invisible_before_any_sweep_and_purged_by_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let s = SqliteStore::open_with(&path, no_sweep()).await.unwrap();
    s.put("k/live", b"v".to_vec(), None).await.unwrap();
    let mut w = s.watch("k/", 0).await.unwrap();
    // A row that expired a second ago, as another process's sweeper might not have purged
    // yet: written behind the store's back so that no sweep has seen it.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        let past = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
            - 1000;
        conn.execute(
            "INSERT INTO kv (key, value, create_revision, mod_revision, expires_at_ms)
             VALUES (CAST('k/dead' AS BLOB), x'00', 1, 1, ?1)",
            [past],
        )
        .unwrap();
    }
    assert_eq!(s.get("k/dead").await.unwrap(), None);
    let keys = tern_store::conformance::keys_under(&s, "k/").await;
    assert_eq!(keys, ["k/live"]);
    assert!(matches!(
        s.delete("k/dead", None).await,
        Err(Error::NotFound { .. })
    ));
    // That delete attempt rolled back; the next successful write purges it first.
    let before = s.revision().await.unwrap();
    let kv = s.create("k/dead", b"new".to_vec(), None).await.unwrap();
    let purge = tokio::time::timeout(Duration::from_secs(15), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        purge,
        WatchEvent::Delete {
            key: "k/dead".into(),
            revision: before + 1
        }
    );
    assert_eq!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Put(kv.clone())
    );
    assert_eq!(kv.create_revision, before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_across_many_small_batches_without_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SqliteOptions {
        watch_batch: 7,
        ..SqliteOptions::default()
    };
    let s = SqliteStore::open_with(dir.path().join("tern.db"), opts)
        .await
        .unwrap();
    let mut expected = Vec::new();
    for i in 0..60 {
        let kv = s.put(&format!("in/{i:02}"), vec![], None).await.unwrap();
        expected.push(kv.mod_revision);
        // Non-matching keys between matching ones, and runs longer than a batch.
        let others = if i % 10 == 0 { 9 } else { 1 };
        for j in 0..others {
            s.put(&format!("out/{i}/{j}"), vec![], None).await.unwrap();
        }
    }
    let mut w = s.watch("in/", 1).await.unwrap();
    for want in expected {
        let got = tokio::time::timeout(Duration::from_secs(15), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(got.revision(), want);
    }
}
