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

const OPENER_ENV: &str = "TERN_STORE_OPENER_DB";

/// One of the processes of the test below: opens the store and writes one key.
#[tokio::test]
async fn opener() {
    let Ok(db) = std::env::var(OPENER_ENV) else {
        return; // not running as an opener
    };
    // Start together: every opener says it is ready, then waits for the parent's
    // signal file.
    std::fs::write(format!("{db}.ready-{}", std::process::id()), "").unwrap();
    let go = std::path::PathBuf::from(format!("{db}.go"));
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Open, write and close again and again: a closing last connection checkpoints and
    // removes the WAL while the others open.
    for i in 0..15 {
        let store = SqliteStore::open(&db)
            .await
            .unwrap_or_else(|e| panic!("open {i}: {e}"));
        let key = format!("opened/{}/{i}", std::process::id());
        store.put(&key, b"1".to_vec(), None).await.unwrap();
    }
}

/// Several processes opening (and closing) one new store file at the same instant all
/// succeed. Switching a fresh file to WAL needs an exclusive lock, and two openers holding
/// shared locks were answered "database is locked" at once, without SQLite's busy wait
/// (seen in CI when tern-lockstep's workers and an operator command started together;
/// this test reproduced it before the fix).
#[test]
fn processes_opening_a_fresh_file_together_all_succeed() {
    if std::env::var(OPENER_ENV).is_ok() || std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let db = dir.path().join(format!("fresh-{round}.db"));
        let children: Vec<_> = (0..6)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "opener", "--test-threads=1"])
                    .env(OPENER_ENV, &db)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Every opener is up and waiting for the signal.
        let ready = format!("fresh-{round}.db.ready-");
        tern_testing::eventually("the six openers to be ready", || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&ready))
                })
                .count()
                == 6
        });
        std::fs::write(db.with_extension("db.go"), "").unwrap();
        for (i, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}, opener {i}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
