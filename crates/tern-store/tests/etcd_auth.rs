#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! etcd users and roles named in store terms, against a real etcd with authentication on:
//! a user reads and writes exactly what its grants name (store keys, prefixes, leader
//! leases), etcd refuses the rest, and a removed user cannot log in.
//!
//! Needs the `etcd` binary (Debian: `etcd-server`); run with `--features etcd`.

mod support;

use std::time::Duration;

use support::etcd_store;
use tern_store::{Compare, EtcdGrant, EtcdOptions, EtcdRange, EtcdStore, Op, Store, TxnOutcome};
use tern_testing::etcd::EtcdCluster;

async fn login(cluster: &EtcdCluster, user: &str, password: &str) -> tern_store::Result<EtcdStore> {
    let opts = EtcdOptions {
        credentials: Some((user.into(), password.into())),
        ..EtcdOptions::default()
    };
    EtcdStore::connect(&cluster.endpoints(), "/p/", opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_writes_what_its_grants_name_and_nothing_else() {
    let cluster = EtcdCluster::start(1).await;
    let admin = etcd_store(&cluster, "/p/").await;
    admin.put("shared/a", b"1".to_vec(), None).await.unwrap();
    admin.put("other/x", b"1".to_vec(), None).await.unwrap();
    admin.enable_auth("root-pw").await.unwrap();
    let root = login(&cluster, "root", "root-pw").await.unwrap();
    let grants = [
        EtcdGrant::read(EtcdRange::Prefix("shared/".into())),
        EtcdGrant::read_write(EtcdRange::Key("shared/mine".into())),
        EtcdGrant::read(EtcdRange::LeasePrefix(String::new())),
        EtcdGrant::read_write(EtcdRange::Lease("mine".into())),
    ];
    root.set_user("u1", "pw1", &grants).await.unwrap();

    let u1 = login(&cluster, "u1", "pw1").await.unwrap();
    // Its own key, a read of the prefix, a watch of it, its own lease, a guarded write.
    u1.put("shared/mine", b"2".to_vec(), None).await.unwrap();
    assert_eq!(u1.list("shared/").await.unwrap().kvs.len(), 2);
    u1.watch("shared/", 0).await.unwrap();
    let lease = u1
        .lease_acquire("mine", "u1", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let out = u1
        .txn(
            &[Compare::lease_held(&lease), Compare::exists("shared/a")],
            &[Op::put("shared/mine", b"3".to_vec(), None)],
        )
        .await
        .unwrap();
    assert!(matches!(out, TxnOutcome::Committed { .. }));
    u1.lease_release(&lease).await.unwrap();
    // Anything else is refused, by name.
    for e in [
        u1.put("shared/a", b"x".to_vec(), None).await.unwrap_err(),
        u1.put("other/x", b"x".to_vec(), None).await.unwrap_err(),
        u1.get("other/x").await.unwrap_err(),
        u1.lease_acquire("theirs", "u1", Duration::from_secs(5))
            .await
            .unwrap_err(),
    ] {
        assert!(e.to_string().contains("permission denied"), "{e}");
    }
    assert_eq!(root.get("shared/a").await.unwrap().unwrap().value, b"1");

    // Users added meanwhile change etcd's auth store: a request in flight across such a
    // change is refused ("revision of auth store is old") before it is applied; the
    // store logs in again and sends it again, so a user never sees it.
    let busy = {
        let u1 = u1.clone();
        tokio::spawn(async move {
            for i in 0..300u32 {
                u1.get("shared/a").await?;
                if i % 3 == 0 {
                    u1.put("shared/mine", i.to_string().into_bytes(), None)
                        .await?;
                }
            }
            Ok::<_, tern_store::Error>(())
        })
    };
    for n in 0..8 {
        root.set_user(&format!("other{n}"), "pw", &grants[..1])
            .await
            .unwrap();
    }
    busy.await.unwrap().unwrap();

    // Set again with fewer grants: the old ones are gone, not added to.
    root.set_user("u1", "pw2", &grants[..1]).await.unwrap();
    assert!(
        login(&cluster, "u1", "pw1").await.is_err(),
        "the old password still works"
    );
    let u1 = login(&cluster, "u1", "pw2").await.unwrap();
    let e = u1
        .put("shared/mine", b"4".to_vec(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");

    // Its role replaced, the user and its password kept: the grants are the new ones.
    root.set_role("u1", &grants).await.unwrap();
    u1.put("shared/mine", b"5".to_vec(), None).await.unwrap();
    root.set_role("u1", &grants[..1]).await.unwrap();
    let e = u1
        .put("shared/mine", b"6".to_vec(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");
    assert!(root.set_role("root", &grants).await.is_err());

    assert!(root.remove_user("u1").await.unwrap());
    assert!(!root.remove_user("u1").await.unwrap());
    assert!(login(&cluster, "u1", "pw2").await.is_err());
    assert!(root.set_user("root", "x", &grants).await.is_err());
}
