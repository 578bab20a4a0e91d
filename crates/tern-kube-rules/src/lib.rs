//! Tern's Kubernetes agent updater: each opted-in Deployment or StatefulSet running the
//! agent is a fleet member, like a host running `tern-update`. Its updater id is the
//! workload's uid, its group comes from the `tern.dev/group` annotation, it heartbeats
//! to ternd (so canaries, backpressure, halts and reports count it), and find (or a
//! channel, seed 001's stable channel) says when it updates.
//!
//! This crate is the pure part (the binary and its I/O are the crate
//! `tern-kube-update`): [`decide`] takes the workload, its pods,
//! the source's answer (find, or a channel's version, critical flag and schedule), a
//! digest if one was resolved, the timings and the time, and returns one action
//! ([`Decision`]), with the annotation changes that go into the same write
//! ([`Decision::annotation_changes`]); [`heartbeat`] builds what the workload reports. No I/O and no clock.
//!
//! The rules, in the order they apply:
//! - No `tern.dev/update: true|report-only` annotation: not managed.
//!   `tern.dev/skip-reconcile: true`: nothing is written or deleted.
//! - An update in progress (the spec runs `tern.dev/updating-to`): complete → clear the
//!   markers; a new pod crash-looping (or unable to pull its image for a while), or the
//!   health timeout passed → roll back to `tern.dev/previous-image` and skip the
//!   version; stuck StatefulSet pods → delete them; otherwise wait.
//! - Otherwise the version decision shared with hosts (`tern_core::host_update`):
//!   find's `agent_auto_update`, or for a channel critical first, then an unhealthy
//!   agent (no Ready pod for `unhealthy_after`, at most one forced try per half hour),
//!   then the maintenance window. A version in `tern.dev/skip-versions` is skipped.
//! - An update is only ever written as `repository:tag@digest`
//!   ([`PinnedImage`] has no other form); without a digest for the tag the decision asks
//!   for one ([`Decision::ResolveDigest`]).
//! - The stuck StatefulSet (`OrderedReady`): a pod of an old revision that is not Ready
//!   blocks the rolling update forever, even after the template is fixed or rolled
//!   back; such pods are named for deletion ([`Decision::DeletePods`]). Pods of the
//!   update revision never are; `Parallel` StatefulSets and Deployments never need it.
//!
//! Every input is untrusted: a bad annotation, image, version, count or pod is refused
//! with an [`InputError`] naming the field, and nothing is written.

mod decide;
mod error;
mod heartbeat;
mod image;
mod pods;
mod policy;
mod workload;

pub use decide::{
    AnnotationChange, Decision, Inputs, MAX_PODS, Rollback, Skip, Source, Update, Why, decide,
};
pub use error::InputError;
pub use heartbeat::heartbeat;
pub use image::{Digest, ImageRef, PinnedImage, Resolved};
pub use pods::{Failure, StuckPod};
pub use policy::Policy;
pub use workload::{
    ContainerStatus, InProgress, Kind, LastFailure, MAX_SKIP_VERSIONS, Mode, Pod, PodManagement,
    ReadyCondition, RolloutStatus, Settings, Workload, annotation,
};
