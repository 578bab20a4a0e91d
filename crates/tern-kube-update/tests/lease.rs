//! Leader election against the stand-in API server (`fake_apiserver`: no real
//! Kubernetes API server can run here): one replica holds the Lease and renews it,
//! the others follow; a replica that stops renewing is replaced once the Lease has
//! been unchanged for its duration; a lost compare-and-swap leaves a replica not the
//! leader; an unreachable API server is an error naming the Lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tern_kube_update::fake_apiserver::FakeApiServer;
use tern_kube_update::{Elector, LeaseSettings, ManualMonotonic};

const NS: &str = "tern-system";
const NAME: &str = "tern-kube-update";

fn elector(server: &FakeApiServer, id: &str, duration: Duration) -> Elector {
    Elector::new(
        server.client(),
        LeaseSettings {
            namespace: NS.into(),
            name: NAME.into(),
            identity: id.into(),
            duration,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_holds_the_lease_and_renews_it_while_others_follow() {
    let server = FakeApiServer::start().await;
    let (mut a, mut b) = (
        elector(&server, "a", Duration::from_secs(15)),
        elector(&server, "b", Duration::from_secs(15)),
    );
    assert!(a.round().await.unwrap());
    assert!(a.is_leader());
    assert!(!b.round().await.unwrap());
    assert!(!b.is_leader());
    let first = server.lease(NS, NAME).unwrap();
    assert_eq!(first["spec"]["holderIdentity"], "a");
    assert_eq!(first["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(first["spec"]["leaseTransitions"], 0);
    assert!(a.round().await.unwrap(), "renewed");
    let renewed = server.lease(NS, NAME).unwrap();
    assert_ne!(
        renewed["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    assert_eq!(renewed["spec"]["acquireTime"], first["spec"]["acquireTime"]);
    assert_ne!(renewed["spec"]["renewTime"], first["spec"]["renewTime"]);
    assert!(!b.round().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_replicas_starting_together_exactly_one_leads() {
    let server = FakeApiServer::start().await;
    let mut electors: Vec<Elector> = (0..6)
        .map(|i| elector(&server, &format!("r{i}"), Duration::from_secs(15)))
        .collect();
    // The first round races: every replica reads "no Lease" before any writes.
    server.objects.lock().unwrap().gate_reads = Some(std::sync::Arc::new(
        tokio::sync::Barrier::new(electors.len()),
    ));
    for round in 0..5 {
        let rounds = electors.iter_mut().map(|e| async move {
            let led = e.round().await.unwrap();
            (led, e.is_leader())
        });
        let results: Vec<(bool, bool)> = join_all(rounds).await;
        let leading: Vec<usize> = (0..results.len()).filter(|&i| results[i].0).collect();
        assert_eq!(leading.len(), 1, "{results:?}");
        assert_eq!(
            electors.iter().filter(|e| e.is_leader()).count(),
            1,
            "exactly one counts itself leader"
        );
        let holder = server.lease(NS, NAME).unwrap()["spec"]["holderIdentity"].clone();
        assert_eq!(holder, electors[leading[0]].identity());
        if round == 0 {
            // Every replica tried to create it; five were refused.
            let mut o = server.objects.lock().unwrap();
            assert_eq!(o.conflicts, 5);
            o.gate_reads = None;
        }
    }
}

/// Both replicas read one clock that moves only when the test says (no sleeps): the
/// windows are checked at their edges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_renewing_is_replaced_after_the_duration() {
    let server = FakeApiServer::start().await;
    let clock = Arc::new(ManualMonotonic::new());
    let d = Duration::from_secs(10);
    let on_clock = |id: &str| {
        Elector::with_clock(
            server.client(),
            LeaseSettings {
                namespace: NS.into(),
                name: NAME.into(),
                identity: id.into(),
                duration: d,
            },
            clock.clone(),
        )
    };
    let (mut a, mut b) = (on_clock("a"), on_clock("b"));
    assert!(a.round().await.unwrap());
    assert!(!b.round().await.unwrap(), "b sees a's record");
    // a stops renewing. It leads for nine tenths of the duration after its write.
    clock.advance(Duration::from_millis(8_999));
    assert!(a.is_leader(), "within nine tenths of its duration");
    clock.advance(Duration::from_millis(1));
    assert!(!a.is_leader(), "a's own window ends at nine tenths");
    // b follows until the record has been unchanged, as b saw it, for the whole
    // duration (b first saw it at 0).
    assert!(!b.round().await.unwrap());
    clock.advance(Duration::from_millis(999));
    assert!(!b.round().await.unwrap(), "9.999 s unchanged: still a's");
    clock.advance(Duration::from_millis(1));
    assert!(
        b.round().await.unwrap(),
        "unchanged for its duration: taken over"
    );
    let lease = server.lease(NS, NAME).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    // a comes back: b's record is fresh, a follows.
    assert!(!a.round().await.unwrap());
    assert!(!a.is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_compare_and_swap_leaves_the_replica_not_the_leader() {
    let server = FakeApiServer::start().await;
    let mut a = elector(&server, "a", Duration::from_secs(15));
    assert!(a.round().await.unwrap());
    server.objects.lock().unwrap().conflict_next_replace = true;
    assert!(!a.round().await.unwrap(), "409 on the renewal");
    assert!(!a.is_leader(), "no longer counts itself leader");
    assert!(a.round().await.unwrap(), "the next round renews");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_an_error_naming_the_lease() {
    let server = FakeApiServer::start().await;
    let mut a = elector(&server, "a", Duration::from_secs(15));
    assert!(a.round().await.unwrap());
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let mut b = Elector::new(
        tern_kube_update::client(config).unwrap(),
        LeaseSettings {
            namespace: NS.into(),
            name: NAME.into(),
            identity: "b".into(),
            duration: Duration::from_secs(15),
        },
    );
    let err = b.round().await.unwrap_err();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain = format!("{chain}: {s}");
        source = s.source();
    }
    assert!(
        chain.starts_with("reading or writing the Lease tern-system/tern-kube-update: "),
        "{chain}"
    );
    assert!(chain.contains("Connection refused"), "{chain}");
    assert!(!b.is_leader());
}
