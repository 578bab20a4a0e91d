#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The etcd backend when etcd fails: a member of a 3-member cluster dies (the store keeps
//! working, watches and leases survive), members restart one after another (a watch sees
//! every write exactly once), and all of etcd stops (operations fail with `Unavailable`,
//! the lease holder learns it lost the lease, and everything resumes on restart).
//!
//! Needs the `etcd` binary (Debian: `etcd-server`); run with `--features etcd`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use support::etcd_store;
use tern_store::{Error, EtcdStore, KeyValue, LeaseKeeper, Revision, Store, Watch, WatchEvent};
use tern_testing::etcd::EtcdCluster;
use tokio::time::{Instant, sleep, timeout};

/// Generous bound for anything that should happen "soon" (a hang guard, not a measurement).
const PATIENCE: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match timeout(PATIENCE, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {PATIENCE:?} waiting for {what}"),
    }
}

/// The index of the member that is the raft leader.
async fn leader(cluster: &EtcdCluster) -> usize {
    for i in 0..cluster.len() {
        let mut c = etcd_client::Client::connect([cluster.endpoint(i)], None)
            .await
            .unwrap();
        let status = c.status().await.unwrap();
        if status.header().unwrap().member_id() == status.leader() {
            return i;
        }
    }
    panic!("no member is the leader");
}

/// The outcome of a put retried until it succeeds: the written value, and whether an
/// earlier attempt failed (it may still have been applied: its outcome is unknown).
struct Written {
    kv: KeyValue,
    retried: bool,
}

async fn put_retrying(store: &EtcdStore, key: &str, value: &str) -> Written {
    let mut retried = false;
    within(&format!("a successful put of {key}"), async {
        loop {
            match store.put(key, value.as_bytes().to_vec(), None).await {
                Ok(kv) => return Written { kv, retried },
                Err(Error::Unavailable(_)) => {
                    retried = true;
                    sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("put {key}: unexpected error {e}"),
            }
        }
    })
    .await
}

/// Checks that `w` delivers every successful write exactly once, in strictly increasing
/// revision order; extra events are allowed only for keys whose write was retried.
async fn assert_watch_saw(w: &mut Watch, writes: &[Written]) {
    let expected: BTreeMap<Revision, &KeyValue> =
        writes.iter().map(|w| (w.kv.mod_revision, &w.kv)).collect();
    let retried: BTreeSet<&str> = writes
        .iter()
        .filter(|w| w.retried)
        .map(|w| w.kv.key.as_str())
        .collect();
    let last = *expected.keys().last().unwrap();
    let mut seen = BTreeSet::new();
    let mut prev = 0;
    while prev < last {
        let e = match within("watch events", w.next()).await {
            Some(Ok(e)) => e,
            Some(Err(e)) => panic!("watch failed: {e}"),
            None => panic!("watch ended"),
        };
        assert!(
            e.revision() > prev,
            "out of order: {} after {prev}",
            e.revision()
        );
        prev = e.revision();
        match expected.get(&e.revision()) {
            Some(kv) => assert_eq!(e, WatchEvent::Put((*kv).clone())),
            None => assert!(
                retried.contains(e.key()),
                "unexpected event {e:?} (its write was not retried)"
            ),
        }
        seen.insert(e.revision());
    }
    let missed: Vec<_> = expected.keys().filter(|r| !seen.contains(r)).collect();
    assert!(missed.is_empty(), "the watch missed revisions {missed:?}");
}

/// A 3-member cluster loses its raft leader, then a follower: the store keeps working
/// (after at most an election's worth of `Unavailable`), a watch sees every write, and a
/// leader lease kept by a `LeaseKeeper` survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_survive_losing_one() {
    let mut cluster = EtcdCluster::start(3).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let other = etcd_store(&cluster, "/tern/").await;
    let mut w = other.watch("w/", 0).await.unwrap();
    let lease = store
        .lease_acquire("leader", "a", Duration::from_secs(8))
        .await
        .unwrap()
        .unwrap();
    let keeper = LeaseKeeper::spawn(Arc::new(store.clone()), lease.clone());

    let mut writes = Vec::new();
    for i in 0..10 {
        writes.push(put_retrying(&store, &format!("w/{i}"), "before").await);
    }
    let dead = leader(&cluster).await;
    cluster.kill(dead);
    for i in 10..30 {
        writes.push(put_retrying(&store, &format!("w/{i}"), "leader killed").await);
    }
    // Bring it back, then lose a follower (never the current leader).
    cluster.restart(dead).await;
    let lead = leader(&cluster).await;
    let follower = (0..3).find(|&i| i != lead).unwrap();
    cluster.kill(follower);
    for i in 30..50 {
        writes.push(put_retrying(&store, &format!("w/{i}"), "follower killed").await);
    }
    // Reads and conditional writes work on the surviving majority.
    let kv = store.get("w/0").await.unwrap().unwrap();
    store
        .compare_and_swap("w/0", kv.mod_revision, b"cas".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(other.list("w/").await.unwrap().kvs.len(), 50);
    assert_watch_saw(&mut w, &writes).await;

    assert!(
        keeper.is_held(),
        "the lease was lost while etcd kept a quorum"
    );
    assert_eq!(
        other.lease_info("leader").await.unwrap().unwrap().token,
        lease.token
    );
    assert_eq!(
        other
            .lease_acquire("leader", "b", Duration::from_secs(8))
            .await
            .unwrap(),
        None
    );
    keeper.release().await.unwrap();
}

/// Every member is restarted in turn while a writer writes: a watch opened before sees
/// every write exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_rolling_member_restarts() {
    let mut cluster = EtcdCluster::start(3).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let watcher = etcd_store(&cluster, "/tern/").await;
    let mut w = watcher.watch("r/", 0).await.unwrap();
    let mut writes = Vec::new();
    for member in 0..3 {
        cluster.kill(member);
        for i in 0..10 {
            writes.push(put_retrying(&store, &format!("r/{member}/{i}"), "down").await);
        }
        cluster.restart(member).await;
        for i in 10..15 {
            writes.push(put_retrying(&store, &format!("r/{member}/{i}"), "up").await);
        }
    }
    assert_watch_saw(&mut w, &writes).await;
}

/// All of etcd stops: every operation fails with `Unavailable` (it does not hang), the
/// lease holder learns it lost the lease; on restart (same data dir) the data is there,
/// operations work again, a watch opened before resumes, and the lease can be taken again
/// with a greater fencing token once it has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_is_unavailable_and_recovers() {
    let mut cluster = EtcdCluster::start(1).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let kv = store.put("res/a", b"1".to_vec(), None).await.unwrap();
    let ttl = Duration::from_secs(2);
    let lease = store
        .lease_acquire("leader", "a", ttl)
        .await
        .unwrap()
        .unwrap();
    let mut keeper = LeaseKeeper::spawn(Arc::new(store.clone()), lease.clone());
    let mut w = store.watch("res/", 0).await.unwrap();

    cluster.kill(0);
    let unavailable = |what: &str, r: Result<(), Error>| match r {
        Err(Error::Unavailable(m)) => assert!(!m.is_empty()),
        other => panic!("{what} with etcd down: expected Unavailable, got {other:?}"),
    };
    let s = &store;
    unavailable("get", within("get", s.get("res/a")).await.map(drop));
    unavailable("list", within("list", s.list("res/")).await.map(drop));
    unavailable("revision", within("revision", s.revision()).await.map(drop));
    unavailable(
        "put",
        within("put", s.put("res/b", vec![], None)).await.map(drop),
    );
    unavailable(
        "put with TTL",
        within("put", s.put("res/b", vec![], Some(ttl)))
            .await
            .map(drop),
    );
    unavailable(
        "create",
        within("create", s.create("res/c", vec![], None))
            .await
            .map(drop),
    );
    unavailable(
        "compare_and_swap",
        within(
            "cas",
            s.compare_and_swap("res/a", kv.mod_revision, vec![], None),
        )
        .await
        .map(drop),
    );
    unavailable(
        "delete",
        within("delete", s.delete("res/a", None)).await.map(drop),
    );
    unavailable("watch", within("watch", s.watch("res/", 0)).await.map(drop));
    unavailable(
        "lease_acquire",
        within("acquire", s.lease_acquire("other", "a", ttl))
            .await
            .map(drop),
    );
    unavailable(
        "lease_renew",
        within("renew", s.lease_renew(&lease)).await.map(drop),
    );
    unavailable(
        "lease_info",
        within("info", s.lease_info("leader")).await.map(drop),
    );
    let err = within(
        "connect",
        EtcdStore::connect(&cluster.endpoints(), "/tern/", Default::default()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    // The holder must stop acting as leader: its keeper reports the loss.
    within("the keeper to report the loss", keeper.lost()).await;
    assert!(!keeper.is_held());

    cluster.restart(0).await;
    let started = Instant::now();
    let got = within("reads to work again", async {
        loop {
            match store.get("res/a").await {
                Ok(v) => return v,
                Err(Error::Unavailable(_)) => sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(got, Some(kv), "data lost across the restart");
    let after = put_retrying(&store, "res/after", "x").await;
    // The watch opened before the outage resumes where it stopped.
    assert_watch_saw(&mut w, &[after]).await;

    // The keeper gave up at its deadline: etcd answering again must not revive it (it
    // would keep the lease alive for ever).
    assert!(
        !keeper.is_held(),
        "the lost lease was renewed after etcd returned"
    );

    // The old lease expires in etcd (restart extends it by up to its TTL), then another
    // holder takes it with a greater token, and the old holder cannot renew.
    let lb = within("the lease to be free again", async {
        loop {
            if let Some(l) = store.lease_acquire("leader", "b", ttl).await.unwrap() {
                return l;
            }
            sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(lb.token > lease.token);
    assert_eq!(
        store.lease_renew(&lease).await.unwrap_err(),
        Error::LeaseLost {
            name: "leader".into(),
            holder: "a".into()
        }
    );
    eprintln!("etcd back after {:?}", started.elapsed());
}

/// A member that stops answering without closing its connections (SIGSTOP: a pause or a
/// partition) is worked around: writes keep succeeding (some may time out first) and a
/// watch sees every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_member_is_worked_around() {
    let cluster = EtcdCluster::start(3).await;
    let store = etcd_store(&cluster, "/tern/").await;
    let watcher = etcd_store(&cluster, "/tern/").await;
    let mut w = watcher.watch("p/", 0).await.unwrap();
    let lead = leader(&cluster).await;
    let paused = (0..3).find(|&i| i != lead).unwrap();
    cluster.signal(paused, "STOP");
    let started = Instant::now();
    let mut writes = Vec::new();
    let mut retried = 0;
    for i in 0..20 {
        let wr = put_retrying(&store, &format!("p/{i}"), "x").await;
        retried += usize::from(wr.retried);
        writes.push(wr);
    }
    eprintln!(
        "20 writes with a paused member: {:?}, {retried} retried",
        started.elapsed()
    );
    assert_watch_saw(&mut w, &writes).await;
    cluster.signal(paused, "CONT");
}
