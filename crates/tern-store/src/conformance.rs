//! The conformance suite every [`Store`] backend must pass (cargo feature `conformance`).
//!
//! A backend's tests implement [`Harness`] and expand [`conformance_tests!`](crate::conformance_tests),
//! which makes one `#[tokio::test]` per case on a multi-threaded runtime:
//!
//! ```ignore
//! tern_store::conformance_tests!(MyHarness::new());
//! ```
//!
//! Cases use several handles onto one store wherever two parties are involved, so a
//! backend whose handles are separate clients (two `SqliteStore`s on one file, two etcd
//! clients) is tested across them. Timings derive from [`Harness::ttl`]; nothing asserts
//! on speed, only generous timeouts guard against hangs.

// This module is test code shipped for other backends' tests: panicking is how it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Barrier;

use crate::{
    Compare, Error, KeyValue, LeaseKeeper, Op, Revision, Store, TxnOutcome, Watch, WatchEvent,
};

/// How a backend's tests give the suite fresh stores.
#[async_trait]
pub trait Harness: Send + Sync {
    /// `n` handles onto one fresh, empty store. Where the backend allows it, each handle
    /// should be an independent client (its own connections, as another process would have).
    async fn open(&self, n: usize) -> Vec<Arc<dyn Store>>;

    /// A TTL short enough to keep the suite fast and long enough for the backend to honour
    /// (etcd rounds lease TTLs up to whole seconds).
    fn ttl(&self) -> Duration {
        Duration::from_millis(300)
    }

    /// A TTL the backend may round up to share an expiry (etcd: at least its
    /// `lease_bucket_min_ttl`), and how late such a key may expire (the bucket width;
    /// zero where nothing is rounded).
    fn long_ttl(&self) -> (Duration, Duration) {
        (self.ttl(), Duration::ZERO)
    }
}

/// Generous bound for anything that should happen "soon": a failure, not a measurement.
const PATIENCE: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {PATIENCE:?} waiting for {what}"),
    }
}

async fn next_event(w: &mut Watch, what: &str) -> WatchEvent {
    match within(what, w.next()).await {
        Some(Ok(e)) => e,
        Some(Err(e)) => panic!("watch failed while waiting for {what}: {e}"),
        None => panic!("watch ended while waiting for {what}"),
    }
}

/// The keys listed under `prefix`, in the store's order.
pub async fn keys_under(store: &dyn Store, prefix: &str) -> Vec<String> {
    let listing = store.list(prefix).await.unwrap();
    listing.kvs.into_iter().map(|kv| kv.key).collect()
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Runs every case in turn (for harnesses that prefer one test).
pub async fn run_all(h: &dyn Harness) {
    crud_and_errors(h).await;
    concurrent_cas_one_winner_per_round(h).await;
    concurrent_increments_lose_nothing(h).await;
    create_race_one_winner(h).await;
    ttl_expiry(h).await;
    prefix_listing(h).await;
    watch_sees_every_change_in_order(h).await;
    watch_concurrent_writers_no_gaps(h).await;
    watch_from_past_revision(h).await;
    lease_exclusive_renewable_expires(h).await;
    lease_keeper_renews_and_reports_loss(h).await;
    txn_all_or_nothing(h).await;
    txn_revision_compare_loses_to_concurrent_write(h).await;
    txn_delete_prefix_only_that_prefix(h).await;
    txn_ttl_put_expires(h).await;
    txn_lease_compare_fences_former_holders(h).await;
    txn_watch_sees_its_events(h).await;
    long_ttls_expire_late_never_early(h).await;
}

/// get/create/CAS/put/delete results, revisions, errors naming the key, and that a
/// second handle sees the first one's writes.
pub async fn crud_and_errors(h: &dyn Harness) {
    let s = h.open(2).await;
    let (a, other) = (&s[0], &s[1]);
    let r0 = a.revision().await.unwrap();
    assert_eq!(a.get("k").await.unwrap(), None);

    let kv = a.create("k", b("v1"), None).await.unwrap();
    assert!(kv.mod_revision > r0);
    assert_eq!(kv.create_revision, kv.mod_revision);
    assert_eq!(kv.value, b("v1"));
    assert_eq!(a.get("k").await.unwrap(), Some(kv.clone()));
    assert_eq!(
        other.get("k").await.unwrap(),
        Some(kv.clone()),
        "other handle"
    );
    assert_eq!(a.revision().await.unwrap(), kv.mod_revision);

    let err = other.create("k", b("again"), None).await.unwrap_err();
    assert_eq!(err, Error::AlreadyExists { key: "k".into() });
    assert!(err.to_string().contains("\"k\""), "{err}");

    let kv2 = other
        .compare_and_swap("k", kv.mod_revision, b("v2"), None)
        .await
        .unwrap();
    assert!(kv2.mod_revision > kv.mod_revision);
    assert_eq!(kv2.create_revision, kv.create_revision);
    assert_eq!(a.get("k").await.unwrap().unwrap().value, b("v2"));

    let err = a
        .compare_and_swap("k", kv.mod_revision, b("stale"), None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::Conflict {
            key: "k".into(),
            expected: kv.mod_revision,
            actual: kv2.mod_revision
        }
    );
    assert!(err.to_string().contains("\"k\""), "{err}");
    assert_eq!(
        a.get("k").await.unwrap().unwrap().value,
        b("v2"),
        "stale CAS wrote"
    );

    let err = a
        .compare_and_swap("missing", 1, b("x"), None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::NotFound {
            key: "missing".into()
        }
    );
    assert!(
        a.get("missing").await.unwrap().is_none(),
        "CAS created a key"
    );

    // Unconditional put: creates, then overwrites keeping create_revision.
    let p1 = a.put("p", b("1"), None).await.unwrap();
    let p2 = other.put("p", b("2"), None).await.unwrap();
    assert!(p2.mod_revision > p1.mod_revision);
    assert_eq!(p2.create_revision, p1.create_revision);

    // Conditional and unconditional deletes.
    let err = a.delete("k", Some(kv.mod_revision)).await.unwrap_err();
    assert!(
        matches!(err, Error::Conflict { ref key, actual, .. } if key == "k" && actual == kv2.mod_revision)
    );
    assert!(
        a.get("k").await.unwrap().is_some(),
        "conflicting delete deleted"
    );
    let del = other.delete("k", Some(kv2.mod_revision)).await.unwrap();
    assert!(del > p2.mod_revision);
    assert_eq!(a.get("k").await.unwrap(), None);
    assert_eq!(
        a.delete("k", None).await.unwrap_err(),
        Error::NotFound { key: "k".into() }
    );
    a.delete("p", None).await.unwrap();
    assert_eq!(other.get("p").await.unwrap(), None);

    // Re-creating a deleted key starts a new life.
    let again = a.create("k", b("v3"), None).await.unwrap();
    assert!(again.create_revision > kv.create_revision);
    assert_eq!(again.create_revision, again.mod_revision);

    // Revisions only moved forward, and failed operations did not move them.
    let r = a.revision().await.unwrap();
    assert_eq!(r, again.mod_revision);
    let _ = a.create("k", b("no"), None).await.unwrap_err();
    let _ = a.compare_and_swap("k", 1, b("no"), None).await.unwrap_err();
    assert_eq!(
        a.revision().await.unwrap(),
        r,
        "a failed write changed the revision"
    );

    // Bad arguments.
    assert!(matches!(
        a.put("", b("x"), None).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.put("z", b("x"), Some(Duration::ZERO)).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Many tasks on several handles CAS the same key with the same expected revision, round
/// after round: exactly one wins, every loser gets `Conflict` naming the winner's revision.
pub async fn concurrent_cas_one_winner_per_round(h: &dyn Harness) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 15;
    let s = h.open(4).await;
    let mut current = s[0].create("cas", b("start"), None).await.unwrap();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(TASKS));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = Arc::clone(&s[t % s.len()]);
            let barrier = Arc::clone(&barrier);
            let expected = current.mod_revision;
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store
                    .compare_and_swap("cas", expected, b(&format!("{round}-{t}")), None)
                    .await
            }));
        }
        let mut winners = Vec::new();
        let mut losers = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(kv) => winners.push(kv),
                Err(e) => losers.push(e),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let winner = winners.remove(0);
        assert!(winner.mod_revision > current.mod_revision);
        for e in losers {
            assert_eq!(
                e,
                Error::Conflict {
                    key: "cas".into(),
                    expected: current.mod_revision,
                    actual: winner.mod_revision
                },
                "round {round}"
            );
        }
        let stored = s[1].get("cas").await.unwrap().unwrap();
        assert_eq!(
            stored, winner,
            "round {round}: stored value is not the winner's"
        );
        current = winner;
    }
}

/// Read-modify-write loops retrying on conflict from many tasks: no increment is lost.
pub async fn concurrent_increments_lose_nothing(h: &dyn Harness) {
    const TASKS: usize = 8;
    const EACH: usize = 10;
    let s = h.open(2).await;
    s[0].create("counter", b("0"), None).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = Arc::clone(&s[t % s.len()]);
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            for _ in 0..EACH {
                loop {
                    let kv = store.get("counter").await.unwrap().unwrap();
                    let n: u64 = String::from_utf8(kv.value).unwrap().parse().unwrap();
                    match store
                        .compare_and_swap("counter", kv.mod_revision, b(&(n + 1).to_string()), None)
                        .await
                    {
                        Ok(_) => break,
                        Err(Error::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let kv = s[1].get("counter").await.unwrap().unwrap();
    assert_eq!(kv.value, b(&(TASKS * EACH).to_string()));
}

/// Many tasks create the same key at once: exactly one succeeds, the rest `AlreadyExists`.
pub async fn create_race_one_winner(h: &dyn Harness) {
    const TASKS: usize = 16;
    let s = h.open(4).await;
    for round in 0..10 {
        let key = format!("race/{round}");
        let barrier = Arc::new(Barrier::new(TASKS));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = Arc::clone(&s[t % s.len()]);
            let (barrier, key) = (Arc::clone(&barrier), key.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store.create(&key, b(&t.to_string()), None).await
            }));
        }
        let mut winner = None;
        for task in tasks {
            match task.await.unwrap() {
                Ok(kv) => {
                    assert!(winner.is_none(), "round {round}: two creates succeeded");
                    winner = Some(kv);
                }
                Err(e) => assert_eq!(e, Error::AlreadyExists { key: key.clone() }),
            }
        }
        let winner = winner.expect("no create succeeded");
        assert_eq!(s[0].get(&key).await.unwrap(), Some(winner));
    }
}

/// A key with a TTL is visible, then absent for reads and writes once it has elapsed; a
/// write without TTL makes a key permanent; a fresh TTL write extends it.
pub async fn ttl_expiry(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(2).await;
    let (a, other) = (&s[0], &s[1]);
    let t = a.put("ttl/gone", b("x"), Some(ttl)).await.unwrap();
    let keep = a.create("ttl/kept", b("x"), Some(ttl)).await.unwrap();
    a.compare_and_swap("ttl/kept", keep.mod_revision, b("permanent"), None)
        .await
        .unwrap();
    a.put("ttl/extended", b("x"), Some(ttl)).await.unwrap();
    a.put("ttl/other", b("no ttl"), None).await.unwrap();
    assert!(other.get("ttl/gone").await.unwrap().is_some());
    assert_eq!(a.list("ttl/").await.unwrap().kvs.len(), 4);

    tokio::time::sleep(ttl / 2).await;
    a.put("ttl/extended", b("y"), Some(ttl * 3)).await.unwrap();
    tokio::time::sleep(ttl / 2 + ttl / 3).await;

    // Past the first TTL: gone for get and list on every handle, at once.
    for (i, s) in s.iter().enumerate() {
        assert_eq!(s.get("ttl/gone").await.unwrap(), None, "handle {i}");
        let keys = keys_under(s.as_ref(), "ttl/").await;
        assert_eq!(
            keys,
            ["ttl/extended", "ttl/kept", "ttl/other"],
            "handle {i}"
        );
    }
    // Absent for writes too: CAS and delete say NotFound, create succeeds.
    assert_eq!(
        a.compare_and_swap("ttl/gone", t.mod_revision, b("y"), None)
            .await
            .unwrap_err(),
        Error::NotFound {
            key: "ttl/gone".into()
        }
    );
    assert_eq!(
        other.delete("ttl/gone", None).await.unwrap_err(),
        Error::NotFound {
            key: "ttl/gone".into()
        }
    );
    let re = other.create("ttl/gone", b("new"), None).await.unwrap();
    assert!(re.create_revision > t.create_revision);

    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        a.get("ttl/extended").await.unwrap(),
        None,
        "extended TTL never ended"
    );
    assert_eq!(
        a.get("ttl/kept").await.unwrap().unwrap().value,
        b("permanent")
    );
    assert_eq!(a.get("ttl/gone").await.unwrap().unwrap().value, b("new"));
}

/// Listing is by bytewise prefix, sorted, with the snapshot's revision; `a/b/` does not
/// match the sibling `a/bc`, and non-ASCII prefixes work.
pub async fn prefix_listing(h: &dyn Harness) {
    let s = h.open(2).await;
    let keys = [
        "a", "a/a", "a/b", "a/b/1", "a/b/2", "a/b/2/x", "a/bc", "a/bc/1", "a/c", "b", "é/1", "é/2",
        "ê",
    ];
    // Insert out of order to check sorting.
    for k in keys.iter().rev() {
        s[0].put(k, b(k), None).await.unwrap();
    }
    let list = |p: &'static str| {
        let store = Arc::clone(&s[1]);
        async move {
            let l = store.list(p).await.unwrap();
            for kv in &l.kvs {
                assert_eq!(kv.value, b(&kv.key), "value of {}", kv.key);
            }
            l.kvs.into_iter().map(|kv| kv.key).collect::<Vec<_>>()
        }
    };
    assert_eq!(list("a/b/").await, ["a/b/1", "a/b/2", "a/b/2/x"]);
    assert_eq!(list("a/bc/").await, ["a/bc/1"]);
    assert_eq!(
        list("a/b").await,
        ["a/b", "a/b/1", "a/b/2", "a/b/2/x", "a/bc", "a/bc/1"],
        "a prefix is a raw byte prefix"
    );
    assert_eq!(list("a/").await.len(), 8);
    assert_eq!(list("").await, keys);
    assert_eq!(list("é/").await, ["é/1", "é/2"]);
    assert_eq!(list("é").await, ["é/1", "é/2"], "é must not match ê");
    assert!(list("a/z").await.is_empty());
    assert!(list("zzz").await.is_empty());

    let l = s[0].list("a/").await.unwrap();
    assert_eq!(l.revision, s[0].revision().await.unwrap());
    s[0].put("a/new", b("a/new"), None).await.unwrap();
    assert!(s[0].list("a/").await.unwrap().revision > l.revision);
}

/// A watch (on another handle) sees every put, CAS, delete and TTL expiry under its
/// prefix, exactly once, in revision order, and nothing outside it.
pub async fn watch_sees_every_change_in_order(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(2).await;
    let (writer, reader) = (&s[0], &s[1]);
    let mut w_other = reader.watch("w/", 0).await.unwrap();
    let mut w_same = writer.watch("w/", 0).await.unwrap();

    let mut expected: Vec<WatchEvent> = Vec::new();
    let mut kvs: Vec<KeyValue> = Vec::new();
    for i in 0..20 {
        let kv = writer
            .create(&format!("w/{i:02}"), b("0"), None)
            .await
            .unwrap();
        expected.push(WatchEvent::Put(kv.clone()));
        kvs.push(kv);
        writer
            .put(&format!("w2/{i}"), b("sibling"), None)
            .await
            .unwrap();
        writer
            .put(&format!("x/{i}"), b("outside"), None)
            .await
            .unwrap();
    }
    for round in 1..=5 {
        for kv in kvs.iter_mut() {
            *kv = writer
                .compare_and_swap(&kv.key, kv.mod_revision, b(&round.to_string()), None)
                .await
                .unwrap();
            expected.push(WatchEvent::Put(kv.clone()));
        }
    }
    for kv in kvs.iter().step_by(2) {
        let revision = writer.delete(&kv.key, Some(kv.mod_revision)).await.unwrap();
        expected.push(WatchEvent::Delete {
            key: kv.key.clone(),
            revision,
        });
    }
    let t = writer.put("w/ttl", b("short"), Some(ttl)).await.unwrap();
    expected.push(WatchEvent::Put(t.clone()));

    for (name, w) in [("other handle", &mut w_other), ("same handle", &mut w_same)] {
        let mut last = 0;
        for (i, want) in expected.iter().enumerate() {
            let got = next_event(w, &format!("event {i} on {name}")).await;
            assert_eq!(&got, want, "event {i} on {name}");
            assert!(got.revision() > last);
            last = got.revision();
        }
        // The TTL expiry arrives as a delete, after everything else.
        match next_event(w, &format!("TTL expiry on {name}")).await {
            WatchEvent::Delete { key, revision } => {
                assert_eq!(key, "w/ttl");
                assert!(revision > t.mod_revision);
            }
            e => panic!("expected the TTL delete on {name}, got {e:?}"),
        }
    }
    // And nothing else: a marker written now is the very next event.
    let marker = writer.put("w/marker", b("m"), None).await.unwrap();
    assert_eq!(
        next_event(&mut w_other, "marker").await,
        WatchEvent::Put(marker)
    );
}

/// Several writers on several handles at once: a watcher sees each write exactly once, in
/// strictly increasing revision order.
pub async fn watch_concurrent_writers_no_gaps(h: &dyn Harness) {
    const WRITERS: usize = 6;
    const EACH: usize = 40;
    let s = h.open(3).await;
    let start = s[0].revision().await.unwrap() + 1;
    let mut w = s[2].watch("c/", start).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let store = Arc::clone(&s[t % 2]);
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for i in 0..EACH {
                let key = format!("c/{t}");
                let rev = if i % 7 == 6 {
                    store.delete(&key, None).await.unwrap()
                } else {
                    store
                        .put(&key, b(&i.to_string()), None)
                        .await
                        .unwrap()
                        .mod_revision
                };
                written.push((rev, key));
            }
            written
        }));
    }
    let mut expected = BTreeSet::new();
    for t in tasks {
        expected.extend(t.await.unwrap());
    }
    let mut last: Revision = 0;
    let mut seen = BTreeSet::new();
    for i in 0..expected.len() {
        let e = next_event(&mut w, &format!("concurrent event {i}")).await;
        assert!(
            e.revision() > last,
            "out of order: {} after {last}",
            e.revision()
        );
        last = e.revision();
        seen.insert((e.revision(), e.key().to_owned()));
    }
    assert_eq!(seen, expected);
}

/// Watching from a past revision replays history from exactly that revision, then goes
/// live; list-then-watch from `revision + 1` misses nothing and repeats nothing.
pub async fn watch_from_past_revision(h: &dyn Harness) {
    let s = h.open(2).await;
    let mut writes = Vec::new();
    for i in 0..10 {
        writes.push(
            s[0].put(&format!("h/{i}"), b(&i.to_string()), None)
                .await
                .unwrap(),
        );
    }
    let listing = s[1].list("h/").await.unwrap();
    assert_eq!(listing.kvs.len(), 10);

    // Replay from the 5th write.
    let mut w = s[1].watch("h/", writes[4].mod_revision).await.unwrap();
    for kv in &writes[4..] {
        assert_eq!(
            next_event(&mut w, "replayed event").await,
            WatchEvent::Put(kv.clone())
        );
    }
    // List-then-watch.
    let mut lw = s[1].watch("h/", listing.revision + 1).await.unwrap();
    let live = s[0].put("h/live", b("live"), None).await.unwrap();
    let del = s[0].delete("h/0", None).await.unwrap();
    for w in [&mut w, &mut lw] {
        assert_eq!(
            next_event(w, "live put").await,
            WatchEvent::Put(live.clone())
        );
        assert_eq!(
            next_event(w, "live delete").await,
            WatchEvent::Delete {
                key: "h/0".into(),
                revision: del
            }
        );
    }
    // From revision 1: everything the prefix ever saw, first event first.
    let mut all = s[0].watch("h/", 1).await.unwrap();
    assert_eq!(
        next_event(&mut all, "first event").await,
        WatchEvent::Put(writes[0].clone())
    );
}

/// A lease is exclusive across handles (even for the same holder name), renewals keep it
/// past its TTL, it expires when not renewed so another can take it with a greater token,
/// the old holder learns it lost it, and release is fenced by token.
pub async fn lease_exclusive_renewable_expires(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(3).await;
    let (a, bb, c) = (&s[0], &s[1], &s[2]);
    let la = a.lease_acquire("leader", "a", ttl).await.unwrap().unwrap();
    assert!(la.is_valid());
    assert_eq!(bb.lease_acquire("leader", "b", ttl).await.unwrap(), None);
    assert_eq!(
        c.lease_acquire("leader", "a", ttl).await.unwrap(),
        None,
        "same holder name"
    );
    let info = bb.lease_info("leader").await.unwrap().unwrap();
    assert_eq!((info.holder.as_str(), info.token), ("a", la.token));
    // Another lease name is independent.
    let other = bb.lease_acquire("other", "b", ttl).await.unwrap().unwrap();

    // Renew for three TTLs; b never gets it.
    let mut la = la;
    for _ in 0..9 {
        tokio::time::sleep(ttl / 3).await;
        la = a.lease_renew(&la).await.unwrap();
        assert!(la.is_valid());
        assert_eq!(bb.lease_acquire("leader", "b", ttl).await.unwrap(), None);
    }

    // Stop renewing: it expires, locally and in the store, and b takes it.
    tokio::time::sleep(ttl + ttl / 3).await;
    assert!(!la.is_valid(), "local deadline outlived the TTL");
    assert_eq!(bb.lease_info("leader").await.unwrap(), None);
    let lb = bb.lease_acquire("leader", "b", ttl).await.unwrap().unwrap();
    assert!(lb.token > la.token, "fencing token did not grow");
    let err = a.lease_renew(&la).await.unwrap_err();
    assert_eq!(
        err,
        Error::LeaseLost {
            name: "leader".into(),
            holder: "a".into()
        }
    );
    assert!(err.to_string().contains("leader"));

    // The old holder's release does not free the new holder's lease.
    a.lease_release(&la).await.unwrap();
    assert_eq!(c.lease_acquire("leader", "c", ttl).await.unwrap(), None);
    assert_eq!(a.lease_info("leader").await.unwrap().unwrap().holder, "b");
    // A real release hands over at once.
    bb.lease_release(&lb).await.unwrap();
    let lc = c.lease_acquire("leader", "c", ttl).await.unwrap().unwrap();
    assert!(lc.token > lb.token);
    assert!(bb.lease_renew(&lb).await.is_err());
    bb.lease_release(&other).await.unwrap();
}

/// `LeaseKeeper` holds a lease for many TTLs, reports its loss when it is taken away, and
/// its release hands the lease over.
pub async fn lease_keeper_renews_and_reports_loss(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(2).await;
    let lease = s[0]
        .lease_acquire("keeper", "a", ttl)
        .await
        .unwrap()
        .unwrap();
    let mut keeper = LeaseKeeper::spawn(Arc::clone(&s[0]), lease.clone());
    tokio::time::sleep(ttl * 4).await;
    assert!(keeper.is_held());
    assert_eq!(s[1].lease_acquire("keeper", "b", ttl).await.unwrap(), None);

    // Someone frees it behind the keeper's back and takes it: the keeper must notice.
    s[1].lease_release(&lease).await.unwrap();
    let lb = s[1]
        .lease_acquire("keeper", "b", ttl)
        .await
        .unwrap()
        .unwrap();
    within("the keeper to report the loss", keeper.lost()).await;
    assert!(!keeper.is_held());
    keeper.release().await.unwrap();
    assert_eq!(
        s[0].lease_info("keeper").await.unwrap().unwrap().holder,
        "b",
        "a lost keeper released the new holder's lease"
    );

    // A keeper's release hands over at once.
    let keeper_b = LeaseKeeper::spawn(Arc::clone(&s[1]), lb);
    assert!(keeper_b.is_held());
    keeper_b.release().await.unwrap();
    assert!(
        s[0].lease_acquire("keeper", "a", ttl)
            .await
            .unwrap()
            .is_some()
    );
}

/// The failed compare's index and reason, or a panic naming the outcome.
fn failed(outcome: TxnOutcome, what: &str) -> (usize, String) {
    match outcome {
        TxnOutcome::Failed { index, reason } => (index, reason),
        o => panic!("{what}: expected the transaction to fail, got {o:?}"),
    }
}

/// The committed revision, or a panic naming the outcome.
fn committed(outcome: TxnOutcome, what: &str) -> Revision {
    match outcome {
        TxnOutcome::Committed { revision } => revision,
        o => panic!("{what}: expected the transaction to commit, got {o:?}"),
    }
}

/// When every compare holds, every op is applied (seen by another handle) and the outcome's
/// revision is the store's; when one fails, nothing is applied, the revision does not move,
/// and the outcome names the first failing compare. Exists/absent compares, empty lists,
/// and bad arguments.
pub async fn txn_all_or_nothing(h: &dyn Harness) {
    let s = h.open(2).await;
    let (a, other) = (&s[0], &s[1]);
    let ka = a.put("t/a", b("a1"), None).await.unwrap();
    a.create("t/b", b("b1"), None).await.unwrap();
    let before = a.revision().await.unwrap();

    // Every compare holds: every op applies.
    let revision = committed(
        a.txn(
            &[
                Compare::mod_revision("t/a", ka.mod_revision),
                Compare::exists("t/b"),
                Compare::absent("t/c"),
            ],
            &[
                Op::put("t/a", b("a2"), None),
                Op::put("t/c", b("c1"), None),
                Op::delete("t/b"),
            ],
        )
        .await
        .unwrap(),
        "all compares hold",
    );
    assert!(revision > before);
    assert_eq!(other.revision().await.unwrap(), revision);
    let a2 = other.get("t/a").await.unwrap().unwrap();
    assert_eq!(a2.value, b("a2"));
    assert_eq!(a2.create_revision, ka.create_revision);
    assert!(a2.mod_revision > before && a2.mod_revision <= revision);
    let c1 = other.get("t/c").await.unwrap().unwrap();
    assert_eq!(c1.value, b("c1"));
    assert_eq!(c1.create_revision, c1.mod_revision);
    assert_eq!(other.get("t/b").await.unwrap(), None);

    // The second compare fails (a stale revision): nothing applies.
    let (index, reason) = failed(
        other
            .txn(
                &[
                    Compare::exists("t/a"),
                    Compare::mod_revision("t/a", ka.mod_revision),
                    Compare::absent("t/a"),
                ],
                &[
                    Op::put("t/x", b("x"), None),
                    Op::delete("t/c"),
                    Op::delete_prefix("t/a"),
                ],
            )
            .await
            .unwrap(),
        "stale revision",
    );
    assert_eq!(index, 1, "{reason}");
    assert!(reason.contains("\"t/a\""), "{reason}");
    assert_eq!(a.get("t/x").await.unwrap(), None, "a failed txn wrote");
    assert_eq!(
        a.get("t/c").await.unwrap(),
        Some(c1.clone()),
        "a failed txn deleted"
    );
    assert_eq!(a.get("t/a").await.unwrap(), Some(a2.clone()));
    assert_eq!(
        a.revision().await.unwrap(),
        revision,
        "a failed txn changed the revision"
    );

    // Exists on an absent key and absent on a present one fail, naming the key.
    let ops = [Op::put("t/y", b("y"), None)];
    let (index, reason) = failed(
        a.txn(&[Compare::exists("t/b")], &ops).await.unwrap(),
        "exists on a deleted key",
    );
    assert_eq!(index, 0);
    assert!(reason.contains("\"t/b\""), "{reason}");
    let (index, reason) = failed(
        a.txn(
            &[Compare::absent("t/missing"), Compare::absent("t/c")],
            &ops,
        )
        .await
        .unwrap(),
        "absent on a present key",
    );
    assert_eq!(index, 1);
    assert!(reason.contains("\"t/c\""), "{reason}");
    let (index, _) = failed(
        a.txn(&[Compare::mod_revision("t/missing", 0)], &ops)
            .await
            .unwrap(),
        "revision compare on an absent key",
    );
    assert_eq!(index, 0);
    assert_eq!(a.get("t/y").await.unwrap(), None);

    // No compares: the ops apply. No ops: a check that changes nothing.
    let r = committed(a.txn(&[], &ops).await.unwrap(), "no compares");
    assert_eq!(a.get("t/y").await.unwrap().unwrap().mod_revision, r);
    let r2 = committed(
        a.txn(&[Compare::exists("t/y")], &[]).await.unwrap(),
        "no ops",
    );
    assert_eq!(r2, r);
    assert_eq!(a.revision().await.unwrap(), r);

    // Bad arguments, refused before anything is looked at.
    for (compares, ops) in [
        (vec![Compare::exists("")], vec![]),
        (vec![], vec![Op::put("", b("x"), None)]),
        (vec![], vec![Op::put("t/z", b("x"), Some(Duration::ZERO))]),
        (vec![], vec![Op::delete("")]),
        (vec![], vec![Op::delete_prefix("")]),
        (
            vec![],
            vec![Op::put("t/z", b("1"), None), Op::put("t/z", b("2"), None)],
        ),
        (
            vec![],
            vec![Op::put("t/z", b("1"), None), Op::delete("t/z")],
        ),
        (
            vec![],
            vec![Op::delete_prefix("t/"), Op::put("t/z", b("1"), None)],
        ),
    ] {
        let got = a.txn(&compares, &ops).await;
        assert!(
            matches!(got, Err(Error::InvalidArgument(_))),
            "{compares:?} {ops:?}: {got:?}"
        );
    }
    assert_eq!(a.get("t/z").await.unwrap(), None);
}

/// A revision compare fails once another handle wrote the key in between, and nothing is
/// applied; many transactions racing on one revision: exactly one commits per round.
pub async fn txn_revision_compare_loses_to_concurrent_write(h: &dyn Harness) {
    const TASKS: usize = 8;
    const ROUNDS: usize = 5;
    let s = h.open(3).await;
    let kv = s[0].put("r/k", b("0"), None).await.unwrap();
    let newer = s[1].put("r/k", b("other"), None).await.unwrap();
    let (index, reason) = failed(
        s[0].txn(
            &[Compare::mod_revision("r/k", kv.mod_revision)],
            &[
                Op::put("r/k", b("stale"), None),
                Op::put("r/side", b("x"), None),
            ],
        )
        .await
        .unwrap(),
        "revision compare after a concurrent write",
    );
    assert_eq!(index, 0);
    assert!(reason.contains("\"r/k\""), "{reason}");
    assert_eq!(s[2].get("r/k").await.unwrap(), Some(newer.clone()));
    assert_eq!(s[2].get("r/side").await.unwrap(), None);

    let mut current = newer;
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(TASKS));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let store = Arc::clone(&s[t % s.len()]);
            let barrier = Arc::clone(&barrier);
            let expected = current.mod_revision;
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let ops = [
                    Op::put("r/k", b(&format!("{round}-{t}")), None),
                    Op::put(format!("r/won/{round}/{t}"), b("1"), None),
                ];
                store
                    .txn(&[Compare::mod_revision("r/k", expected)], &ops)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for (t, task) in tasks.into_iter().enumerate() {
            match task.await.unwrap() {
                TxnOutcome::Committed { revision } => winners.push((t, revision)),
                TxnOutcome::Failed { index, .. } => assert_eq!(index, 0),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let (t, revision) = winners[0];
        let stored = s[0].get("r/k").await.unwrap().unwrap();
        assert_eq!(stored.value, b(&format!("{round}-{t}")), "round {round}");
        assert!(stored.mod_revision > current.mod_revision && stored.mod_revision <= revision);
        let won = s[0].list(&format!("r/won/{round}/")).await.unwrap().kvs;
        assert_eq!(won.len(), 1, "round {round}: a losing txn applied an op");
        current = stored;
    }
}

/// A delete-prefix op removes exactly the keys under its raw byte prefix; deletes of
/// absent keys and prefixes with nothing under them are no-ops that change nothing.
pub async fn txn_delete_prefix_only_that_prefix(h: &dyn Harness) {
    let s = h.open(2).await;
    let keys = ["d/a", "d/a/1", "d/a/2", "d/a/2/x", "d/ab", "d/b", "e/a/1"];
    for k in keys {
        s[0].put(k, b(k), None).await.unwrap();
    }
    let revision = committed(
        s[0].txn(&[], &[Op::delete_prefix("d/a/")]).await.unwrap(),
        "delete prefix",
    );
    let left = keys_under(&*s[1], "").await;
    assert_eq!(left, ["d/a", "d/ab", "d/b", "e/a/1"]);
    assert_eq!(s[1].revision().await.unwrap(), revision);

    // A raw byte prefix: `d/a` also takes `d/ab`, not `d/b`.
    committed(
        s[1].txn(&[Compare::exists("d/b")], &[Op::delete_prefix("d/a")])
            .await
            .unwrap(),
        "delete prefix d/a",
    );
    let left = keys_under(&*s[0], "").await;
    assert_eq!(left, ["d/b", "e/a/1"]);

    // Nothing to delete: committed, nothing changes.
    let before = s[0].revision().await.unwrap();
    let r = committed(
        s[0].txn(&[], &[Op::delete("d/none"), Op::delete_prefix("zz/")])
            .await
            .unwrap(),
        "deletes of nothing",
    );
    assert_eq!(r, before);
    assert_eq!(s[1].revision().await.unwrap(), before);
}

/// A put with a TTL in a transaction expires like `put`'s; one without stays; an expired
/// key counts as absent for the compares.
pub async fn txn_ttl_put_expires(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(2).await;
    s[0].put("tt/was-ttl", b("x"), Some(ttl * 10))
        .await
        .unwrap();
    committed(
        s[0].txn(
            &[Compare::absent("tt/short")],
            &[
                Op::put("tt/short", b("s"), Some(ttl)),
                Op::put("tt/long", b("l"), Some(ttl * 20)),
                Op::put("tt/forever", b("f"), None),
                // Written without a TTL: permanent, like `put`.
                Op::put("tt/was-ttl", b("y"), None),
            ],
        )
        .await
        .unwrap(),
        "TTL puts",
    );
    assert!(s[1].get("tt/short").await.unwrap().is_some());
    tokio::time::sleep(ttl + ttl / 3).await;
    for (i, store) in s.iter().enumerate() {
        let keys = keys_under(store.as_ref(), "tt/").await;
        assert_eq!(keys, ["tt/forever", "tt/long", "tt/was-ttl"], "handle {i}");
    }
    let (index, _) = failed(
        s[1].txn(&[Compare::exists("tt/short")], &[]).await.unwrap(),
        "exists on an expired key",
    );
    assert_eq!(index, 0);
    committed(
        s[1].txn(
            &[Compare::absent("tt/short"), Compare::exists("tt/long")],
            &[Op::put("tt/short", b("again"), None)],
        )
        .await
        .unwrap(),
        "absent on an expired key",
    );
    assert_eq!(
        s[0].get("tt/short").await.unwrap().unwrap().value,
        b("again")
    );
}

/// The lease compare holds for the current holder (also after renewals) and fails, with
/// nothing applied, once that acquisition is over: released, expired, or taken over by
/// another holder — a stale `Lease` of a former holder never passes, even when the same
/// holder name holds the lease again.
pub async fn txn_lease_compare_fences_former_holders(h: &dyn Harness) {
    let ttl = h.ttl();
    let s = h.open(2).await;
    let (a, bb) = (&s[0], &s[1]);
    let fenced = |lease: &crate::Lease, n: u32| {
        (
            vec![Compare::lease_held(lease)],
            vec![Op::put(format!("f/write/{n}"), b(&lease.holder), None)],
        )
    };
    let la = a.lease_acquire("leader", "a", ttl).await.unwrap().unwrap();
    let (c, o) = fenced(&la, 1);
    committed(bb.txn(&c, &o).await.unwrap(), "current holder");
    let la = a.lease_renew(&la).await.unwrap();
    let (c, o) = fenced(&la, 2);
    committed(a.txn(&c, &o).await.unwrap(), "current holder after renewal");

    // Right token, wrong holder; right holder, wrong token.
    let forged = crate::Lease {
        holder: "b".into(),
        ..la.clone()
    };
    let (c, o) = fenced(&forged, 3);
    let (index, reason) = failed(bb.txn(&c, &o).await.unwrap(), "another holder's name");
    assert_eq!(index, 0);
    assert!(reason.contains("leader"), "{reason}");
    let forged = crate::Lease {
        token: la.token + 1,
        ..la.clone()
    };
    let (c, o) = fenced(&forged, 3);
    failed(bb.txn(&c, &o).await.unwrap(), "another token");

    // Released: the old value fails, also once the same holder name holds it again.
    a.lease_release(&la).await.unwrap();
    let (c, o) = fenced(&la, 3);
    let (index, reason) = failed(a.txn(&c, &o).await.unwrap(), "released lease");
    assert_eq!(index, 0);
    assert!(reason.contains("leader"), "{reason}");
    let la2 = a.lease_acquire("leader", "a", ttl).await.unwrap().unwrap();
    let (c, o) = fenced(&la, 3);
    failed(
        a.txn(&c, &o).await.unwrap(),
        "a former acquisition of the same holder",
    );
    let (c, o) = fenced(&la2, 4);
    committed(a.txn(&c, &o).await.unwrap(), "the new acquisition");

    // Expired (not renewed): fails; taken over by b: a's value still fails, b's holds.
    tokio::time::sleep(ttl + ttl / 3).await;
    let (c, o) = fenced(&la2, 5);
    let (index, _) = failed(a.txn(&c, &o).await.unwrap(), "expired lease");
    assert_eq!(index, 0);
    let lb = bb.lease_acquire("leader", "b", ttl).await.unwrap().unwrap();
    let (c, o) = fenced(&la2, 5);
    let (_, reason) = failed(a.txn(&c, &o).await.unwrap(), "taken over");
    assert!(reason.contains("leader"), "{reason}");
    let (c, o) = fenced(&lb, 6);
    committed(bb.txn(&c, &o).await.unwrap(), "the new holder");

    // A lease compare among others: its index is named, nothing applies.
    let (index, _) = failed(
        a.txn(
            &[Compare::absent("f/none"), Compare::lease_held(&la2)],
            &[Op::delete_prefix("f/")],
        )
        .await
        .unwrap(),
        "second compare",
    );
    assert_eq!(index, 1);
    let written: Vec<(String, Vec<u8>)> = a
        .list("f/")
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(
        written,
        [
            ("f/write/1".to_owned(), b("a")),
            ("f/write/2".to_owned(), b("a")),
            ("f/write/4".to_owned(), b("a")),
            ("f/write/6".to_owned(), b("b")),
        ],
        "only the holders' writes applied"
    );
    bb.lease_release(&lb).await.unwrap();
}

/// A watch (on another handle) sees a transaction's changes under its prefix, in op order
/// (a delete-prefix's keys in key order), at revisions up to the committed one and after
/// every earlier change, and nothing of a failed transaction.
pub async fn txn_watch_sees_its_events(h: &dyn Harness) {
    let s = h.open(2).await;
    let (writer, reader) = (&s[0], &s[1]);
    for k in ["tw/gone", "tw/p/1", "tw/p/2"] {
        writer.put(k, b("old"), None).await.unwrap();
    }
    let before = writer.revision().await.unwrap();
    let mut w = reader.watch("tw/", before + 1).await.unwrap();

    failed(
        writer
            .txn(
                &[Compare::absent("tw/gone")],
                &[Op::put("tw/never", b("x"), None)],
            )
            .await
            .unwrap(),
        "failing txn",
    );
    let revision = committed(
        writer
            .txn(
                &[Compare::exists("tw/gone")],
                &[
                    Op::put("tw/a", b("a"), None),
                    Op::put("outside/x", b("x"), None),
                    Op::delete("tw/gone"),
                    Op::put("tw/b", b("b"), None),
                    Op::delete_prefix("tw/p/"),
                ],
            )
            .await
            .unwrap(),
        "txn",
    );
    let a = writer.get("tw/a").await.unwrap().unwrap();
    let bkv = writer.get("tw/b").await.unwrap().unwrap();
    let mut got = Vec::new();
    for i in 0..5 {
        got.push(next_event(&mut w, &format!("txn event {i}")).await);
    }
    assert_eq!(got[0], WatchEvent::Put(a));
    assert!(matches!(&got[1], WatchEvent::Delete { key, .. } if key == "tw/gone"));
    assert_eq!(got[2], WatchEvent::Put(bkv));
    assert!(matches!(&got[3], WatchEvent::Delete { key, .. } if key == "tw/p/1"));
    assert!(matches!(&got[4], WatchEvent::Delete { key, .. } if key == "tw/p/2"));
    let mut last = before;
    for e in &got {
        assert!(
            e.revision() > before && e.revision() >= last && e.revision() <= revision,
            "event {e:?} outside ({before}, {revision}] or out of order"
        );
        last = e.revision();
    }
    assert_eq!(
        last, revision,
        "the last event is not at the txn's revision"
    );
    // Nothing else: a marker written now is the very next event.
    let marker = writer.put("tw/marker", b("m"), None).await.unwrap();
    assert_eq!(next_event(&mut w, "marker").await, WatchEvent::Put(marker));
}

/// Keys written with one long TTL (by put, CAS and in transactions, on two handles):
/// none is gone before its TTL has elapsed, rewriting or deleting some of them takes no
/// other with it, and all of them are gone at most the backend's bucket width (plus the
/// usual slack) after it, each seen by a watch as a delete after its last write (keys
/// sharing an expiry may share its revision).
pub async fn long_ttls_expire_late_never_early(h: &dyn Harness) {
    let (ttl, late) = h.long_ttl();
    let s = h.open(2).await;
    let (a, other) = (&s[0], &s[1]);
    let mut w = other.watch("lt/", 0).await.unwrap();
    let start = tokio::time::Instant::now();
    for i in 0..8 {
        a.put(&format!("lt/put/{i}"), b("x"), Some(ttl))
            .await
            .unwrap();
    }
    let ops: Vec<Op> = (0..8)
        .map(|i| Op::put(format!("lt/txn/{i}"), b("x"), Some(ttl)))
        .collect();
    committed(a.txn(&[], &ops).await.unwrap(), "long TTL puts");
    let c = other.create("lt/cas", b("x"), Some(ttl)).await.unwrap();
    // Rewrites and deletes, from both handles, of keys that may share a lease with the rest.
    other.put("lt/put/0", b("y"), Some(ttl)).await.unwrap();
    other.put("lt/put/1", b("permanent"), None).await.unwrap();
    a.delete("lt/put/2", None).await.unwrap();
    a.compare_and_swap("lt/cas", c.mod_revision, b("y"), Some(ttl))
        .await
        .unwrap();
    committed(
        other
            .txn(
                &[],
                &[
                    Op::delete("lt/txn/0"),
                    Op::put("lt/txn/1", b("permanent"), None),
                ],
            )
            .await
            .unwrap(),
        "rewrites",
    );
    let written = tokio::time::Instant::now();
    let permanent = ["lt/put/1", "lt/txn/1"];
    let mut expiring: BTreeSet<String> = (0..8)
        .filter(|i| *i != 1 && *i != 2)
        .map(|i| format!("lt/put/{i}"))
        .chain((2..8).map(|i| format!("lt/txn/{i}")))
        .chain(["lt/cas".to_owned()])
        .collect();
    let mut alive: BTreeSet<String> = expiring.clone();
    alive.extend(permanent.iter().map(|k| (*k).to_owned()));

    // Never early: a list that starts before `start + ttl` sees every key (each was
    // written after `start`).
    loop {
        let asked = start.elapsed();
        if asked >= ttl {
            break;
        }
        for (i, st) in s.iter().enumerate() {
            let keys: BTreeSet<String> = keys_under(st.as_ref(), "lt/").await.into_iter().collect();
            assert_eq!(
                keys, alive,
                "handle {i}, {asked:?} after the first write (TTL {ttl:?})"
            );
        }
        tokio::time::sleep(ttl / 8).await;
    }
    // Late by at most the bucket width (and the slack every expiry has: `h.ttl()`).
    tokio::time::sleep_until(written + ttl + late + h.ttl()).await;
    for (i, st) in s.iter().enumerate() {
        assert_eq!(
            keys_under(st.as_ref(), "lt/").await,
            permanent,
            "handle {i}: long TTL keys outlived their TTL by more than {late:?} and the slack"
        );
    }
    // The watch saw each expiry as a delete after everything else written to that key.
    let mut last_put = std::collections::BTreeMap::new();
    while !expiring.is_empty() {
        match next_event(&mut w, "the expiry of long TTL keys").await {
            WatchEvent::Put(kv) => {
                last_put.insert(kv.key.clone(), kv.mod_revision);
            }
            WatchEvent::Delete { key, revision } => {
                if expiring.remove(&key) {
                    assert!(
                        revision > last_put[&key],
                        "{key} expired before its last write"
                    );
                }
            }
        }
    }
}

/// Expands to one `#[tokio::test]` per conformance case, each on a multi-threaded
/// runtime, calling `$crate::conformance::CASE(&$harness)`. Needs `tokio` (with `macros`
/// and `rt-multi-thread`) in the calling crate's dev-dependencies.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(
            $harness;
            crud_and_errors,
            concurrent_cas_one_winner_per_round,
            concurrent_increments_lose_nothing,
            create_race_one_winner,
            ttl_expiry,
            prefix_listing,
            watch_sees_every_change_in_order,
            watch_concurrent_writers_no_gaps,
            watch_from_past_revision,
            lease_exclusive_renewable_expires,
            lease_keeper_renews_and_reports_loss,
            txn_all_or_nothing,
            txn_revision_compare_loses_to_concurrent_write,
            txn_delete_prefix_only_that_prefix,
            txn_ttl_put_expires,
            txn_lease_compare_fences_former_holders,
            txn_watch_sees_its_events,
            long_ttls_expire_late_never_early,
        );
    };
    ($harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = $harness;
                $crate::conformance::$case(&harness).await;
            }
        )*
    };
}
