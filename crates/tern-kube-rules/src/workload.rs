//! The decision's inputs as the controller reads them from the API server: the workload
//! (a Deployment or a StatefulSet), its annotations, its rollout status and its pods.
//! Plain data with the Kubernetes field names; [`Workload::settings`] and
//! [`check_counts`] turn the untrusted parts into checked values.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::error::InputError;
use crate::image::{ImageRef, shorten};

/// The annotations an operator (or the controller itself) sets on a workload.
pub mod annotation {
    /// Opt-in: `true` manages the workload, `report-only` heartbeats and says what it
    /// would do without writing; absent or anything else leaves it alone.
    pub const UPDATE: &str = "tern.dev/update";
    /// The update group (empty or absent: the catch-all group).
    pub const GROUP: &str = "tern.dev/group";
    /// A channel to follow instead of find (seed 001: `https://…/channels/NAME`, whose
    /// `version` and `critical` the controller reads; the window is the group's
    /// schedule from ternd).
    pub const CHANNEL: &str = "tern.dev/channel";
    /// `true`: the controller neither writes nor deletes anything for this workload.
    pub const SKIP_RECONCILE: &str = "tern.dev/skip-reconcile";
    /// Comma-separated versions never installed automatically (operators add some; a
    /// rollback adds the version that failed).
    pub const SKIP_VERSIONS: &str = "tern.dev/skip-versions";
    /// Written with an update: the image before it, restored by a rollback.
    pub const PREVIOUS_IMAGE: &str = "tern.dev/previous-image";
    /// Written with an update: the version being rolled out, and when it started.
    pub const UPDATING_TO: &str = "tern.dev/updating-to";
    pub const UPDATE_STARTED: &str = "tern.dev/update-started";
    /// When an update last started outside the window because the agent was unhealthy
    /// (at most one such try per `tern_core::host_update::FORCED_ATTEMPT_INTERVAL`).
    pub const FORCED_ATTEMPT: &str = "tern.dev/forced-attempt";
    /// Written with a rollback: `VERSION REASON` of the last failed update, for the
    /// heartbeat (the fleet view counts it as rolled back).
    pub const LAST_FAILURE: &str = "tern.dev/last-failure";
}

/// At most this many versions in the skip list, so an annotation cannot make every
/// pass walk a huge list.
pub const MAX_SKIP_VERSIONS: usize = 64;
const MAX_ANNOTATION: usize = 4096;
/// Kubernetes counts are int32.
const MAX_COUNT: i64 = i32::MAX as i64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    StatefulSet { pod_management: PodManagement },
}

/// A StatefulSet's `spec.podManagementPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodManagement {
    /// The default: pods start, stop and are replaced one at a time, each waiting for
    /// the one before to be Running and Ready.
    OrderedReady,
    Parallel,
}

/// A Deployment or StatefulSet, as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub kind: Kind,
    /// `metadata.uid`: the workload's updater id in the fleet.
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The agent container's `image` in the pod template.
    pub image: String,
    pub annotations: BTreeMap<String, String>,
    pub status: RolloutStatus,
}

/// The rollout fields of the workload, raw (signed, as JSON numbers may be anything).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutStatus {
    pub generation: i64,
    pub observed_generation: i64,
    /// `spec.replicas`: how many pods the workload wants.
    pub desired_replicas: i64,
    pub replicas: i64,
    pub updated_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    /// StatefulSets only: the revision of the pods not yet updated, and the revision
    /// the pod template is at now (`controller-revision-hash` values).
    pub current_revision: String,
    pub update_revision: String,
}

/// One of the workload's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    /// The `controller-revision-hash` label (StatefulSet) or `pod-template-hash`.
    pub revision: Option<String>,
    /// The agent container's image in the pod's spec.
    pub image: String,
    /// The `Ready` condition: absent when the pod has none yet.
    pub ready: Option<ReadyCondition>,
    pub created: Timestamp,
    /// `metadata.deletionTimestamp` is set: the pod is going away.
    pub terminating: bool,
    pub containers: Vec<ContainerStatus>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyCondition {
    pub ready: bool,
    /// `lastTransitionTime`: since when the pod has been (not) Ready.
    pub since: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerStatus {
    pub name: String,
    pub restart_count: i64,
    /// `state.waiting.reason` (`CrashLoopBackOff`, `ImagePullBackOff`, …).
    pub waiting: Option<String>,
}

/// The opt-in annotation's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Manage,
    ReportOnly,
}

impl Mode {
    /// The opt-in that `annotations` hold (`tern.dev/update`): `true`, `report-only`, or
    /// none (absent, `false`, anything else). The controller asks it before reading the
    /// rest of a workload, so a workload that did not opt in is never heartbeated.
    pub fn of(annotations: &BTreeMap<String, String>) -> Option<Self> {
        match annotations.get(annotation::UPDATE).map(|s| s.trim()) {
            Some("true") => Some(Mode::Manage),
            Some("report-only") => Some(Mode::ReportOnly),
            _ => None,
        }
    }
}

/// An update the controller started and has not finished or undone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InProgress {
    pub version: String,
    pub started: Timestamp,
}

/// The last update that failed here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastFailure {
    pub version: String,
    pub reason: String,
}

/// The workload's annotations, read and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    pub group: String,
    pub skip_versions: Vec<String>,
    pub previous_image: Option<ImageRef>,
    pub in_progress: Option<InProgress>,
    pub forced_attempt: Option<Timestamp>,
    pub last_failure: Option<LastFailure>,
}

impl Workload {
    /// The opt-in, before anything else is read: a workload that did not opt in is not
    /// the controller's business, whatever its other annotations hold.
    pub fn mode(&self) -> Option<Mode> {
        Mode::of(&self.annotations)
    }

    /// Whether the operator asked the controller to keep its hands off. A value that is
    /// neither `true` nor `false` is refused rather than guessed.
    pub fn skip_reconcile(&self) -> Result<bool, InputError> {
        match self.annotations.get(annotation::SKIP_RECONCILE) {
            None => Ok(false),
            Some(v) => match v.trim() {
                "true" => Ok(true),
                "false" | "" => Ok(false),
                _ => Err(InputError::Annotation {
                    key: annotation::SKIP_RECONCILE,
                    value: shorten(v),
                    why: "is not true or false".into(),
                }),
            },
        }
    }

    /// Every annotation the decision reads, checked.
    pub fn settings(&self) -> Result<Settings, InputError> {
        for (key, value) in &self.annotations {
            if key.starts_with("tern.dev/") && value.len() > MAX_ANNOTATION {
                return Err(InputError::Annotation {
                    key: known_key(key),
                    value: shorten(value),
                    why: format!("is {} bytes, more than {MAX_ANNOTATION}", value.len()),
                });
            }
        }
        let get = |k: &str| {
            self.annotations
                .get(k)
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
        };
        let bad = |key: &'static str, value: &str, why: String| InputError::Annotation {
            key,
            value: shorten(value),
            why,
        };
        let mode = self.mode().ok_or_else(|| {
            bad(
                annotation::UPDATE,
                self.annotations.get(annotation::UPDATE).map_or("", |s| s),
                "is not true or report-only".into(),
            )
        })?;
        let group = get(annotation::GROUP).unwrap_or("");
        if group.len() > 128
            || !group
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(bad(
                annotation::GROUP,
                group,
                "is not a group name (letters, digits, '-', '_', '.'; at most 128)".into(),
            ));
        }
        let mut skip_versions = Vec::new();
        if let Some(list) = get(annotation::SKIP_VERSIONS) {
            for v in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
                if skip_versions.len() == MAX_SKIP_VERSIONS {
                    return Err(bad(
                        annotation::SKIP_VERSIONS,
                        list,
                        format!("lists more than {MAX_SKIP_VERSIONS} versions"),
                    ));
                }
                skip_versions.push(tern_core::version::normalize(v));
            }
        }
        let previous_image = get(annotation::PREVIOUS_IMAGE)
            .map(|s| ImageRef::parse("annotation tern.dev/previous-image", s))
            .transpose()?;
        let timestamp = |key: &'static str| -> Result<Option<Timestamp>, InputError> {
            get(key)
                .map(|s| {
                    s.parse::<Timestamp>()
                        .map_err(|e| bad(key, s, format!("is not an RFC 3339 instant ({e})")))
                })
                .transpose()
        };
        let in_progress = match (
            get(annotation::UPDATING_TO),
            timestamp(annotation::UPDATE_STARTED)?,
        ) {
            (Some(v), Some(started)) => Some(InProgress {
                version: tern_core::version::normalize(v),
                started,
            }),
            (None, None) => None,
            (Some(v), None) => {
                return Err(bad(
                    annotation::UPDATING_TO,
                    v,
                    "is set without tern.dev/update-started".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    annotation::UPDATE_STARTED,
                    get(annotation::UPDATE_STARTED).unwrap_or(""),
                    "is set without tern.dev/updating-to".into(),
                ));
            }
        };
        let last_failure = get(annotation::LAST_FAILURE).map(|s| {
            let (v, reason) = s.split_once(' ').unwrap_or((s, ""));
            LastFailure {
                version: tern_core::version::normalize(v),
                reason: shorten(reason.trim()),
            }
        });
        Ok(Settings {
            mode,
            group: group.to_string(),
            skip_versions,
            previous_image,
            in_progress,
            forced_attempt: timestamp(annotation::FORCED_ATTEMPT)?,
            last_failure,
        })
    }

    /// The `namespace/name` the controller's messages use.
    pub fn display_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The uid as an updater id: ternd takes letters, digits, '-', '_', '.' (a
    /// Kubernetes uid is a UUID).
    pub fn updater_id(&self) -> Result<&str, InputError> {
        let u = self.uid.as_str();
        if u.is_empty()
            || u.len() > 128
            || !u
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(InputError::Field {
                field: "metadata.uid",
                value: shorten(u),
                why: "is not an updater id (1-128 letters, digits, '-', '_', '.')",
            });
        }
        Ok(u)
    }
}

fn known_key(key: &str) -> &'static str {
    use annotation::*;
    [
        UPDATE,
        GROUP,
        SKIP_RECONCILE,
        SKIP_VERSIONS,
        PREVIOUS_IMAGE,
        UPDATING_TO,
        UPDATE_STARTED,
        FORCED_ATTEMPT,
        LAST_FAILURE,
    ]
    .into_iter()
    .find(|k| *k == key)
    .unwrap_or("tern.dev/*")
}

/// The status counts, checked: each is an int32 count, never negative. Returned as
/// `u32` so nothing downstream can overflow or go below zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    pub desired: u32,
    pub replicas: u32,
    pub updated: u32,
    pub ready: u32,
    pub available: u32,
    /// `observedGeneration >= generation`: the status describes the current spec.
    pub observed: bool,
}

pub(crate) fn check_counts(s: &RolloutStatus) -> Result<Counts, InputError> {
    let count = |field: &'static str, value: i64| -> Result<u32, InputError> {
        if !(0..=MAX_COUNT).contains(&value) {
            return Err(InputError::Count { field, value });
        }
        u32::try_from(value).map_err(|_| InputError::Count { field, value })
    };
    for (field, value) in [
        ("metadata.generation", s.generation),
        ("status.observedGeneration", s.observed_generation),
    ] {
        // Generations are int64 and start at 1; only a negative one is nonsense.
        if value < 0 {
            return Err(InputError::Count { field, value });
        }
    }
    for (field, value) in [
        ("status.currentRevision", &s.current_revision),
        ("status.updateRevision", &s.update_revision),
    ] {
        if value.len() > 253 || value.chars().any(char::is_control) {
            return Err(InputError::Field {
                field,
                value: shorten(value),
                why: "is not a revision name",
            });
        }
    }
    Ok(Counts {
        desired: count("spec.replicas", s.desired_replicas)?,
        replicas: count("status.replicas", s.replicas)?,
        updated: count("status.updatedReplicas", s.updated_replicas)?,
        ready: count("status.readyReplicas", s.ready_replicas)?,
        available: count("status.availableReplicas", s.available_replicas)?,
        observed: s.observed_generation >= s.generation,
    })
}

/// Checks a pod's untrusted fields (names, counts, reasons).
pub(crate) fn check_pod(p: &Pod) -> Result<(), InputError> {
    let bad = |why: String| InputError::Pod {
        pod: shorten(&p.name),
        why,
    };
    if p.name.is_empty() || p.name.len() > 253 || p.name.chars().any(char::is_control) {
        return Err(bad("is not a pod name".into()));
    }
    if p.containers.len() > 64 {
        return Err(bad(format!(
            "{} containers, more than 64",
            p.containers.len()
        )));
    }
    for c in &p.containers {
        if !(0..=MAX_COUNT).contains(&c.restart_count) {
            return Err(bad(format!(
                "container {:?}: restartCount {} is not a count",
                shorten(&c.name),
                c.restart_count
            )));
        }
        if c.waiting.as_ref().is_some_and(|w| w.len() > 256) {
            return Err(bad(format!(
                "container {:?}: a waiting reason longer than 256 bytes",
                shorten(&c.name)
            )));
        }
    }
    Ok(())
}
