//! Tern's Kubernetes agent updater, the part that talks to Kubernetes: the client
//! (`kube`, over rustls) and the I/O around `tern-kube-update`'s pure decisions. Only
//! this crate compiles the Kubernetes client, so the rest of the workspace does not.
//!
//! For now: leader election on a `coordination.k8s.io/v1` Lease ([`Elector`]), so that
//! of several controller replicas only one writes to workloads. Reading workloads and
//! pods, heartbeats and find, and applying decisions come next, on top of it.

mod lease;

pub use lease::{Elector, LeaseError, LeaseSettings, Observed, Step, step};
