#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The conformance suite against a real etcd (one fresh single-member etcd per test, each
//! handle a separate client), plus etcd-only behaviour: compaction, prefixes, TTL leases.
//!
//! Needs the `etcd` binary (Debian: `etcd-server`); run with `--features etcd`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use support::etcd_store;
use tern_store::conformance::Harness;
use tern_store::{Error, EtcdOptions, EtcdStore, Op, Store, WatchEvent};
use tern_testing::etcd::EtcdCluster;

#[derive(Default)]
struct Etcd {
    clusters: Mutex<Vec<EtcdCluster>>,
}

#[async_trait]
impl Harness for Etcd {
    async fn open(&self, n: usize) -> Vec<Arc<dyn Store>> {
        let cluster = EtcdCluster::start(1).await;
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..n {
            stores.push(Arc::new(
                EtcdStore::connect(&cluster.endpoints(), "/tern/", bucketed())
                    .await
                    .unwrap(),
            ));
        }
        self.clusters.lock().unwrap().push(cluster);
        stores
    }

    /// etcd lease TTLs are whole seconds, at least 2 with default election settings, and
    /// the leader revokes expired leases every 500 ms.
    fn ttl(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// TTLs of 7 s and more share 2-second buckets: above the TTLs whose expiry the suite
    /// times (up to 6 s), below its longest (20 and 40 s), which then run on shared leases.
    fn long_ttl(&self) -> (Duration, Duration) {
        (BUCKET_MIN_TTL, BUCKET)
    }
}

const BUCKET: Duration = Duration::from_secs(2);
const BUCKET_MIN_TTL: Duration = Duration::from_secs(7);

fn bucketed() -> EtcdOptions {
    EtcdOptions {
        lease_bucket: BUCKET,
        lease_bucket_min_ttl: BUCKET_MIN_TTL,
        ..EtcdOptions::default()
    }
}

tern_store::conformance_tests!(Etcd::default());

async fn raw_client(cluster: &EtcdCluster) -> etcd_client::Client {
    etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .unwrap()
}

/// A watch from a compacted revision fails with `Compacted` from `watch` itself; the kept
/// history is still replayable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_before_compaction_is_compacted() {
    let cluster = EtcdCluster::start(1).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let mut kvs = Vec::new();
    for i in 0..10 {
        kvs.push(store.put(&format!("k/{i}"), vec![], None).await.unwrap());
    }
    let compact_at = kvs[5].mod_revision;
    let mut raw = raw_client(&cluster).await;
    raw.compact(i64::try_from(compact_at).unwrap(), None)
        .await
        .unwrap();

    let err = store.watch("k/", kvs[0].mod_revision).await.unwrap_err();
    match err {
        Error::Compacted {
            requested,
            compacted,
            ref prefix,
        } => {
            assert_eq!(requested, kvs[0].mod_revision);
            assert_eq!(compacted, compact_at);
            assert_eq!(prefix, "k/");
        }
        e => panic!("expected Compacted, got {e:?}"),
    }
    let mut w = store.watch("k/", compact_at).await.unwrap();
    assert_eq!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Put(kvs[5].clone())
    );
}

/// Two installations with different prefixes on one etcd do not see each other's keys,
/// watches or leases, and keys are stored under the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_isolate_installations() {
    let cluster = EtcdCluster::start(1).await;
    let a = etcd_store(&cluster, "/tern-a/").await;
    let b = etcd_store(&cluster, "/tern-b/").await;
    let mut wa = a.watch("", 0).await.unwrap();

    b.put("res/x", b"b".to_vec(), None).await.unwrap();
    let kb = b.lease_acquire("leader", "b", Duration::from_secs(5)).await;
    assert!(kb.unwrap().is_some());
    let ka = a.put("res/x", b"a".to_vec(), None).await.unwrap();
    assert!(
        a.lease_acquire("leader", "a", Duration::from_secs(5))
            .await
            .unwrap()
            .is_some()
    );

    assert_eq!(a.get("res/x").await.unwrap().unwrap().value, b"a");
    assert_eq!(b.get("res/x").await.unwrap().unwrap().value, b"b");
    let all = tern_store::conformance::keys_under(&a, "").await;
    assert_eq!(
        all,
        ["res/x"],
        "leases or the other prefix leaked into list"
    );
    // The watch on everything of `a` sees only a's key write (not b's, not the leases).
    assert_eq!(wa.next().await.unwrap().unwrap(), WatchEvent::Put(ka));
    let marker = a.put("m", vec![], None).await.unwrap();
    assert_eq!(wa.next().await.unwrap().unwrap(), WatchEvent::Put(marker));

    // The raw layout.
    let mut raw = raw_client(&cluster).await;
    let got = raw.get("/tern-a/kv/res/x", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"a");
    let got = raw.get("/tern-b/lease/leader", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"b");
}

/// Each TTL'd key has an etcd lease of its own (the TTL rounded up to whole seconds); a
/// lease replaced by a later write is revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_ttl_key_has_its_own_lease() {
    let cluster = EtcdCluster::start(1).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let ttl = Some(Duration::from_millis(2500));
    store.put("a", vec![], ttl).await.unwrap();
    store.put("b", vec![], ttl).await.unwrap();
    let mut raw = raw_client(&cluster).await;
    let lease_of = |r: etcd_client::GetResponse| r.kvs()[0].lease();
    let la = lease_of(raw.get("/tern/kv/a", None).await.unwrap());
    let lb = lease_of(raw.get("/tern/kv/b", None).await.unwrap());
    assert!(la != 0 && lb != 0 && la != lb);
    let info = raw.lease_time_to_live(la, None).await.unwrap();
    assert_eq!(info.granted_ttl(), 3, "2.5 s rounds up to 3 s");

    // Overwriting without TTL makes the key permanent and revokes its old lease.
    store.put("a", vec![], None).await.unwrap();
    assert_eq!(lease_of(raw.get("/tern/kv/a", None).await.unwrap()), 0);
    tokio::time::timeout(Duration::from_secs(5), async {
        while raw.lease_time_to_live(la, None).await.unwrap().ttl() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the replaced lease was not revoked");
    // b, written with a's TTL, expires: a would have by now, had its lease stayed.
    tokio::time::timeout(Duration::from_secs(30), async {
        while store.get("b").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("b never expired");
    assert!(store.get("a").await.unwrap().is_some());
}

/// `connect` fails with `Unavailable` (not a hang) when nothing listens at the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_nothing_is_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let opts = EtcdOptions {
        request_timeout: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    let err = EtcdStore::connect(&[format!("http://127.0.0.1:{port}")], "/tern/", opts)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

/// The history's case: thousands of keys written with one long TTL, in transactions and
/// by single puts, cost one lease grant per time bucket (at most two buckets are touched
/// by writes within one bucket width), not one per key; short TTLs still get one each.
/// A bucket lease revoked from outside costs one failed attempt and one fresh grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_ttls_share_one_lease_per_bucket() {
    let cluster = EtcdCluster::start(1).await;
    let keep = Duration::from_secs(90 * 24 * 3600);
    // Sharing is off by default (an older replica would revoke shared leases): a long
    // TTL then costs a lease per write, as before.
    let plain = etcd_store(&cluster, "/plain/").await;
    for i in 0..3 {
        plain
            .put(&format!("p/{i}"), b"x".to_vec(), Some(keep))
            .await
            .unwrap();
    }
    assert_eq!(plain.lease_grants(), 3, "the default shares no lease");
    // ternd's `--etcd-lease-bucket 1h`.
    let store = EtcdStore::connect(
        &cluster.endpoints(),
        "/tern/",
        EtcdOptions {
            lease_bucket: Duration::from_secs(3600),
            ..EtcdOptions::default()
        },
    )
    .await
    .unwrap();
    let before = store.lease_grants();
    for batch in 0..40 {
        let ops: Vec<Op> = (0..64)
            .map(|i| Op::put(format!("h/{batch}/{i}"), b"x".to_vec(), Some(keep)))
            .collect();
        store.txn(&[], &ops).await.unwrap();
    }
    for i in 0..50 {
        store
            .put(&format!("p/{i}"), b"x".to_vec(), Some(keep))
            .await
            .unwrap();
    }
    let long = store.lease_grants() - before;
    assert!(
        (1..=2).contains(&long),
        "{long} grants for 2,610 long TTL writes"
    );
    assert_eq!(store.list("h/").await.unwrap().kvs.len(), 40 * 64);

    let mut raw = raw_client(&cluster).await;
    // The bucket leases, and the default store's three.
    let leases = raw.leases().await.unwrap();
    assert!(
        leases.leases().len() <= 2 + 3,
        "{} etcd leases",
        leases.leases().len()
    );

    for i in 0..5 {
        store
            .put(
                &format!("s/{i}"),
                b"x".to_vec(),
                Some(Duration::from_secs(30)),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        store.lease_grants() - before - long,
        5,
        "short TTLs: one each"
    );

    // Revoked behind the store's back: its keys are gone (etcd's doing); the next long
    // TTL write grants a fresh bucket lease and succeeds.
    for l in raw.leases().await.unwrap().leases() {
        raw.lease_revoke(l.id()).await.unwrap();
    }
    let granted = store.lease_grants();
    store
        .put("p/again", b"y".to_vec(), Some(keep))
        .await
        .unwrap();
    store
        .txn(&[], &[Op::put("h/again", b"y".to_vec(), Some(keep))])
        .await
        .unwrap();
    assert_eq!(store.lease_grants() - granted, 1);
    assert!(store.get("p/again").await.unwrap().is_some());
    assert!(store.get("h/again").await.unwrap().is_some());
}
