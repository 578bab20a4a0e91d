//! `tern-kube-update`, Tern's Kubernetes agent updater: the part that talks to
//! Kubernetes and ternd around `tern-kube-rules`' pure decisions. Only this crate
//! compiles the Kubernetes client (`kube`, over rustls), so the rest of the workspace
//! does not.
//!
//! - [`Controller`]: one pass over the watched namespaces: read each opted-in workload
//!   and its pods ([`read`]), heartbeat it to ternd, ask find (or its channel), decide,
//!   and write the decision as a replace of the object read.
//! - Leader election on a `coordination.k8s.io/v1` Lease ([`Elector`]): of several
//!   replicas only the leader writes.
//! - Image digests: pinned from the release keys' signatures (TUF) or a file.

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
pub use lease::{
    Elector, LeaseError, LeaseSettings, ManualMonotonic, Monotonic, Observed, Step,
    SystemMonotonic, step,
};
