//! What the etcd tests share beyond tern-testing's cluster: a store on it.

use tern_store::{EtcdOptions, EtcdStore};
use tern_testing::etcd::EtcdCluster;

/// A store on `cluster` under `prefix`, talking to every member.
pub async fn etcd_store(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(&cluster.endpoints(), prefix, EtcdOptions::default())
        .await
        .unwrap()
}
