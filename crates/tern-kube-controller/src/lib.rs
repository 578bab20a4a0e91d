//! Tern's Kubernetes agent updater, the part that talks to Kubernetes: the client
//! (`kube`, over rustls) and the I/O around `tern-kube-update`'s pure decisions. Only
//! this crate compiles the Kubernetes client, so the rest of the workspace does not.
//!
//! For now: leader election on a `coordination.k8s.io/v1` Lease ([`Elector`]), so that
//! of several controller replicas only one writes to workloads, and the reading of
//! Deployments, StatefulSets and pods into the decision's inputs ([`read`]).
//! Heartbeats and find, and applying decisions come next, on top of them.

mod controller;
mod digests;
#[cfg(feature = "fake-apiserver")]
pub mod fake_apiserver;
mod fleet;
mod lease;
pub mod read;

pub use controller::{Controller, Outcome, Written};

/// A Kubernetes client for `config`, with ring as the process's TLS provider (installed
/// once; a provider already installed is kept).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    // Err only when one is installed already, which is what is wanted.
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config)
}
pub use digests::{DigestError, DigestFile, DigestSource, SignedDigests};
pub use fleet::{Fleet, FleetError, Ternd, roots_from_pem};
pub use lease::{Elector, LeaseError, LeaseSettings, Observed, Step, step};
