//! What the pods say: whether the agent is healthy (seed 001's unhealthy trigger),
//! whether the new version's pods fail, whether the rollout is done, and which
//! StatefulSet pods of an old revision block it.

use jiff::{SignedDuration, Timestamp};
use tern_core::host_update::Health;

use crate::policy::Policy;
use crate::workload::{Counts, Kind, Pod, PodManagement, RolloutStatus};

/// Why an update (or its rollout) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Not available within the health timeout.
    Timeout,
    CrashLoop,
    ImagePull,
}

impl Failure {
    /// The word written into `tern.dev/last-failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::CrashLoop => "crash-loop",
            Self::ImagePull => "image-pull",
        }
    }
}

/// A pod to delete so a StatefulSet's rollout can go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckPod {
    pub name: String,
    pub revision: String,
    pub why: String,
}

/// Waiting reasons that mean the container keeps exiting.
const CRASH_LOOP: &[&str] = &["CrashLoopBackOff", "RunContainerError"];
/// Waiting reasons that mean the image cannot be pulled or run as named.
const IMAGE_PULL: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
];

fn waiting_in<'a>(p: &'a Pod, reasons: &[&str]) -> Option<(&'a str, &'a str)> {
    p.containers.iter().find_map(|c| {
        c.waiting
            .as_deref()
            .filter(|w| reasons.contains(w))
            .map(|w| (c.name.as_str(), w))
    })
}

fn is_ready(p: &Pod) -> bool {
    p.ready.is_some_and(|r| r.ready)
}

/// Since when the pod has not been Ready: its Ready condition's transition, or its
/// creation when it has no condition yet.
fn not_ready_since(p: &Pod) -> Timestamp {
    p.ready.map_or(p.created, |r| r.since)
}

fn longer_than(now: Timestamp, since: Timestamp, limit: SignedDuration) -> bool {
    // A `since` in the future (a skewed clock, a hostile status) counts as "just now".
    now.duration_since(since) > limit
}

fn minutes(d: SignedDuration) -> String {
    format!("{}m", d.as_secs().max(0) / 60)
}

/// The agent's health as the triggers see it (seed 001): unhealthy when no pod has been
/// Ready for longer than `policy.unhealthy_after`, or when pods are wanted and none
/// exist. A workload scaled to zero says nothing.
pub(crate) fn health(pods: &[Pod], counts: &Counts, policy: &Policy, now: Timestamp) -> Health {
    if counts.desired == 0 {
        return Health::Unknown;
    }
    let live: Vec<&Pod> = pods.iter().filter(|p| !p.terminating).collect();
    if live.is_empty() {
        return Health::Unhealthy(format!("{} pods wanted, none exist", counts.desired));
    }
    if live.iter().any(|p| is_ready(p)) {
        return Health::Healthy;
    }
    let since = live.iter().map(|p| not_ready_since(p)).max().unwrap_or(now);
    if longer_than(now, since, policy.unhealthy_after) {
        Health::Unhealthy(format!(
            "no Ready pod for {}",
            minutes(now.duration_since(since))
        ))
    } else {
        Health::Unknown
    }
}

/// Whether the workload runs its pod template everywhere, Ready and available.
pub(crate) fn rollout_complete(kind: &Kind, status: &RolloutStatus, counts: &Counts) -> bool {
    let all = |n: u32| n == counts.desired;
    let base = counts.observed && all(counts.updated) && all(counts.ready) && all(counts.available);
    match kind {
        Kind::Deployment => base && all(counts.replicas),
        Kind::StatefulSet { .. } => {
            base && !status.update_revision.is_empty()
                && status.current_revision == status.update_revision
        }
    }
}

/// A failure of the pods running the workload's current image (the version being rolled
/// out): a crash loop at once; an image that cannot be pulled once the pod has tried for
/// `policy.stuck_after` (a registry's hiccup is not a broken release).
pub(crate) fn new_version_failure(
    pods: &[Pod],
    image: &str,
    policy: &Policy,
    now: Timestamp,
) -> Option<(Failure, String)> {
    let new = || pods.iter().filter(|p| !p.terminating && p.image == image);
    for p in new() {
        if let Some((c, w)) = waiting_in(p, CRASH_LOOP) {
            return Some((
                Failure::CrashLoop,
                format!("pod {}: container {c} is in {w}", p.name),
            ));
        }
        if let Some(c) = p
            .containers
            .iter()
            .find(|c| c.restart_count >= i64::from(policy.crash_restarts))
        {
            return Some((
                Failure::CrashLoop,
                format!(
                    "pod {}: container {} restarted {} times",
                    p.name, c.name, c.restart_count
                ),
            ));
        }
    }
    for p in new() {
        if let Some((c, w)) = waiting_in(p, IMAGE_PULL)
            && longer_than(now, p.created, policy.stuck_after)
        {
            return Some((
                Failure::ImagePull,
                format!(
                    "pod {}: container {c} is in {w} after {}",
                    p.name,
                    minutes(now.duration_since(p.created))
                ),
            ));
        }
    }
    None
}

/// The pods blocking a StatefulSet's rolling update. With `OrderedReady` pod management
/// the StatefulSet controller replaces one pod at a time and waits for each to be Ready;
/// a pod of an old revision that never becomes Ready stops it for good (the template
/// may already be fixed, or rolled back). Deleting such a pod lets the controller
/// recreate it from the update revision. Only pods that carry a revision label, are not
/// of `updateRevision`, are not already terminating, and have not been Ready for
/// `policy.stuck_after` (or crash-loop or cannot pull) qualify; a pod of the update
/// revision is never deleted (it is the rollout's own outcome, judged by the health
/// timeout), nor anything when the StatefulSet reports no update revision.
pub(crate) fn stuck_pods(
    kind: &Kind,
    status: &RolloutStatus,
    pods: &[Pod],
    policy: &Policy,
    now: Timestamp,
) -> Vec<StuckPod> {
    if *kind
        != (Kind::StatefulSet {
            pod_management: PodManagement::OrderedReady,
        })
        || status.update_revision.is_empty()
    {
        return Vec::new();
    }
    let update = status.update_revision.as_str();
    let mut out = Vec::new();
    for p in pods {
        let Some(rev) = p.revision.as_deref().filter(|r| !r.is_empty()) else {
            continue;
        };
        if rev == update || p.terminating || is_ready(p) {
            continue;
        }
        let why = if let Some((c, w)) = waiting_in(p, CRASH_LOOP).or(waiting_in(p, IMAGE_PULL)) {
            format!("has container {c} in {w}")
        } else if longer_than(now, not_ready_since(p), policy.stuck_after) {
            format!(
                "has not been Ready for {}",
                minutes(now.duration_since(not_ready_since(p)))
            )
        } else {
            continue;
        };
        out.push(StuckPod {
            name: p.name.clone(),
            revision: rev.to_string(),
            why: format!(
                "revision {rev} is not the update revision {update} and the pod {why}; an ordered rollout waits for it forever"
            ),
        });
    }
    out
}
