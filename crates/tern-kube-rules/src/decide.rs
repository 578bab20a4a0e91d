//! The decision: what the controller does with one workload on one pass. Pure: every
//! fact (the workload, its pods, ternd's or the channel's answer, the digest found for
//! a tag, the time) is an argument, and the answer is one action the caller performs
//! with one write (or none), then asks again on the next pass.

use jiff::{SignedDuration, Timestamp};
use tern_core::host_update::{self, CriticalAnswer, Trigger, VersionAnswer, WindowState};
use tern_core::version::{Version, normalize};
use tern_core::wire::{AgentSchedule, FindResponse};

use crate::error::InputError;
use crate::image::{ImageRef, PinnedImage, Resolved, check_tag, shorten};
use crate::pods::{self, Failure, StuckPod};
use crate::policy::Policy;
use crate::workload::{
    Counts, LastFailure, MAX_SKIP_VERSIONS, Mode, Pod, Settings, Workload, check_counts, check_pod,
};

/// More pods than any agent workload has; past it the list is refused, not walked.
pub const MAX_PODS: usize = 10_000;
/// How far in the future an update's start may lie (replicas' clocks differ a little).
const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(1);

/// Where the version comes from: ternd's find (the rollout decides when the group
/// updates) or a channel (seed 001: critical first, then an unhealthy agent, then the
/// maintenance window given by the schedule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Find(FindResponse),
    Channel {
        version: VersionAnswer,
        critical: CriticalAnswer,
        /// The group's schedule from ternd; `None` (or an unusable one) keeps the
        /// window closed, so only a critical update or an unhealthy agent moves it.
        schedule: Option<AgentSchedule>,
    },
}

/// Everything one decision reads.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    pub workload: &'a Workload,
    pub pods: &'a [Pod],
    pub source: &'a Source,
    /// The digest the caller found for a tag a previous [`Decision::ResolveDigest`]
    /// asked for; used only when it names the same repository and tag.
    pub resolved: Option<&'a Resolved>,
    pub policy: &'a Policy,
    pub now: Timestamp,
}

/// Why nothing happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The workload runs the target already.
    UpToDate,
    /// A target exists but may not be installed now (find says wait, or outside the
    /// window, not critical, agent healthy or tried recently).
    NotNow,
    /// There is no target: find names no version, or the channel did not answer.
    NoTarget,
    /// The source asks for something the controller must not do (a major downgrade
    /// through a channel).
    Refused,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// No `tern.dev/update` opt-in.
    NotOptedIn,
    /// `tern.dev/skip-reconcile: true`.
    SkipReconcile,
    /// The target is in `tern.dev/skip-versions` (by an operator, or a rollback);
    /// `last_failure` is set when it failed here.
    Version {
        version: String,
        last_failure: Option<LastFailure>,
    },
}

/// Set the agent container's image to `image` (tag and digest) and, in the same write,
/// the annotations `previous-image`, `updating-to`, `update-started` (and
/// `forced-attempt` when `forced`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub version: String,
    pub image: PinnedImage,
    /// The image to restore on failure (the spec's image now).
    pub previous: String,
    pub trigger: Trigger,
    /// Started outside the window because the agent is unhealthy.
    pub forced: bool,
    /// When the rollout must be available.
    pub deadline: Timestamp,
}

/// Restore `to`, and in the same write add `version` to `skip-versions`, set
/// `last-failure`, and remove `updating-to`/`update-started`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollback {
    pub version: String,
    pub to: ImageRef,
    pub failure: Failure,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Nothing {
        why: Why,
        detail: String,
    },
    Skip(Skip),
    /// An update is due to `version`, but no digest is known for `repository:tag`:
    /// resolve it (and verify it) and decide again with it.
    ResolveDigest {
        version: String,
        repository: String,
        tag: String,
    },
    Update(Update),
    /// The rollout to `version` is under way and within its deadline.
    Wait {
        version: String,
        deadline: Timestamp,
    },
    /// The rollout to `version` is available everywhere: remove `updating-to`,
    /// `update-started` and `last-failure` (the last update did not fail).
    Completed {
        version: String,
    },
    Rollback(Rollback),
    /// The update failed and there is no previous image to restore: mark `version`
    /// skipped, set `last-failure`, remove the in-progress annotations, report it.
    MarkFailed {
        version: String,
        failure: Failure,
        detail: String,
    },
    /// Delete these pods (each on its own: they are picked by state, which no label
    /// selector expresses).
    DeletePods(Vec<StuckPod>),
    /// `tern.dev/update: report-only`: what would have been done; nothing is written.
    ReportOnly(Box<Decision>),
}

/// The decision for one workload. A refused input (a field named in the error) means:
/// write nothing, log it, try again next pass.
pub fn decide(i: &Inputs<'_>) -> Result<Decision, InputError> {
    let w = i.workload;
    let Some(mode) = w.mode() else {
        return Ok(Decision::Skip(Skip::NotOptedIn));
    };
    if w.skip_reconcile()? {
        return Ok(Decision::Skip(Skip::SkipReconcile));
    }
    check_policy(i.policy)?;
    w.updater_id()?;
    let settings = w.settings()?;
    let counts = check_counts(&w.status)?;
    let current = ImageRef::parse("the agent container's image", &w.image)?;
    if i.pods.len() > MAX_PODS {
        return Err(InputError::Field {
            field: "pods",
            value: i.pods.len().to_string(),
            why: "is more pods than an agent workload has (10000)",
        });
    }
    for p in i.pods {
        check_pod(p)?;
    }
    let d = decide_checked(i, &settings, &counts, &current)?;
    Ok(match (mode, d) {
        (Mode::Manage, d) => d,
        (Mode::ReportOnly, d @ (Decision::Nothing { .. } | Decision::Skip(_))) => d,
        (Mode::ReportOnly, d) => Decision::ReportOnly(Box::new(d)),
    })
}

fn check_policy(p: &Policy) -> Result<(), InputError> {
    for (field, d) in [
        ("health_timeout", p.health_timeout),
        ("unhealthy_after", p.unhealthy_after),
        ("stuck_after", p.stuck_after),
    ] {
        if d <= SignedDuration::ZERO || d > SignedDuration::from_hours(24 * 7) {
            return Err(InputError::Policy {
                field,
                why: "is not between 1s and a week",
            });
        }
    }
    if p.crash_restarts == 0 {
        return Err(InputError::Policy {
            field: "crash_restarts",
            why: "must be at least 1",
        });
    }
    Ok(())
}

fn decide_checked(
    i: &Inputs<'_>,
    settings: &Settings,
    counts: &Counts,
    current: &ImageRef,
) -> Result<Decision, InputError> {
    let w = i.workload;
    let current_version = current.tag.as_deref().map(normalize);
    if let Some(p) = &settings.in_progress
        && current_version.as_deref() == Some(p.version.as_str())
    {
        return in_progress(i, settings, counts, &p.version, p.started);
    }
    // In-progress annotations for a version the spec no longer runs (someone changed the
    // image): stale. The normal path goes on; an update replaces them.
    let stuck = pods::stuck_pods(&w.kind, &w.status, i.pods, i.policy, i.now);
    let d = version_decision(i, settings, counts, current, current_version.as_deref())?;
    Ok(match d {
        Decision::Update(_) | Decision::ResolveDigest { .. } => d,
        _ if !stuck.is_empty() => Decision::DeletePods(stuck),
        _ => d,
    })
}

fn in_progress(
    i: &Inputs<'_>,
    settings: &Settings,
    counts: &Counts,
    version: &str,
    started: Timestamp,
) -> Result<Decision, InputError> {
    let w = i.workload;
    if started.duration_since(i.now) > CLOCK_SKEW {
        return Err(InputError::Annotation {
            key: crate::workload::annotation::UPDATE_STARTED,
            value: started.to_string(),
            why: format!("is in the future (now is {})", i.now),
        });
    }
    if pods::rollout_complete(&w.kind, &w.status, counts) {
        return Ok(Decision::Completed {
            version: version.to_string(),
        });
    }
    // Past the end of time, the deadline is the end of time.
    let deadline = started
        .checked_add(i.policy.health_timeout)
        .unwrap_or(Timestamp::MAX);
    let failure = pods::new_version_failure(i.pods, &w.image, i.policy, i.now).or_else(|| {
        (i.now > deadline).then(|| {
            (
                Failure::Timeout,
                format!(
                    "not available by {deadline} ({} of {} pods ready, {} updated)",
                    counts.ready, counts.desired, counts.updated
                ),
            )
        })
    });
    if let Some((failure, detail)) = failure {
        return Ok(match &settings.previous_image {
            Some(to) if to.to_string() != w.image => Decision::Rollback(Rollback {
                version: version.to_string(),
                to: to.clone(),
                failure,
                detail,
            }),
            _ => Decision::MarkFailed {
                version: version.to_string(),
                failure,
                detail: format!("{detail}; no previous image is recorded to restore"),
            },
        });
    }
    let stuck = pods::stuck_pods(&w.kind, &w.status, i.pods, i.policy, i.now);
    if !stuck.is_empty() {
        return Ok(Decision::DeletePods(stuck));
    }
    Ok(Decision::Wait {
        version: version.to_string(),
        deadline,
    })
}

fn version_decision(
    i: &Inputs<'_>,
    settings: &Settings,
    counts: &Counts,
    current: &ImageRef,
    current_version: Option<&str>,
) -> Result<Decision, InputError> {
    let (source, target) = match i.source {
        Source::Find(f) => {
            let v = f.auto_update.agent_version.trim();
            if v.is_empty() {
                return Ok(nothing(
                    Why::NoTarget,
                    "ternd names no agent version for this group",
                ));
            }
            let target = checked_version("find: auto_update.agent_version", v)?;
            (
                host_update::Source::Find {
                    version: target.clone(),
                    gate: host_update::FindGate::of(&f.auto_update),
                },
                target,
            )
        }
        Source::Channel {
            version,
            critical,
            schedule,
        } => {
            let target = match version {
                VersionAnswer::Version(v) => checked_version("channel version", &v.to_string())?,
                VersionAnswer::Unreachable(why) | VersionAnswer::Malformed(why) => {
                    return Ok(nothing(
                        Why::NoTarget,
                        &format!("the channel gives no usable version ({why})"),
                    ));
                }
            };
            // No schedule from ternd yet: no window is known (the host's rule).
            let window = WindowState::of(schedule.as_ref(), i.now);
            (
                host_update::Source::Channel {
                    version: version.clone(),
                    critical: critical.clone(),
                    window,
                },
                target,
            )
        }
    };
    if current_version == Some(target.as_str()) {
        return Ok(nothing(Why::UpToDate, &format!("runs {target}")));
    }
    if settings.skip_versions.contains(&target) {
        return Ok(Decision::Skip(Skip::Version {
            last_failure: settings
                .last_failure
                .clone()
                .filter(|f| f.version == target),
            version: target,
        }));
    }
    let health = pods::health(i.pods, counts, i.policy, i.now);
    // A tag that is not a version still names what runs: compared as written, it
    // differs from the target, and the window rules decide when it is replaced.
    let active = current.tag.clone().unwrap_or_else(|| "(untagged)".into());
    let d = host_update::decide(&host_update::Inputs {
        source,
        active: Some(&active),
        skip: None,
        health,
        last_forced_attempt: settings.forced_attempt,
        asked_now: false,
        now: i.now,
    });
    Ok(match d {
        host_update::Decision::Update { target, trigger } => {
            let tag = target;
            match i.resolved {
                Some(r) if r.repository == current.repository && r.tag == tag => {
                    let image = PinnedImage::new(&current.repository, &tag, r.digest.clone())?;
                    Decision::Update(Update {
                        forced: trigger.is_forced_by_health(),
                        version: tag,
                        image,
                        previous: i.workload.image.clone(),
                        trigger,
                        deadline: i
                            .now
                            .checked_add(i.policy.health_timeout)
                            .unwrap_or(Timestamp::MAX),
                    })
                }
                _ => Decision::ResolveDigest {
                    version: tag.clone(),
                    repository: current.repository.clone(),
                    tag,
                },
            }
        }
        host_update::Decision::Hold(why) | host_update::Decision::Wait(why) => {
            nothing(Why::NotNow, &why)
        }
        host_update::Decision::Refused(why) => nothing(Why::Refused, &why),
    })
}

/// A target from the network: a semantic version whose normal form is a valid tag.
fn checked_version(field: &'static str, v: &str) -> Result<String, InputError> {
    let bad = |why| InputError::Field {
        field,
        value: shorten(v),
        why,
    };
    let parsed = Version::parse(v).map_err(|_| bad("is not a semantic version"))?;
    let s = parsed.to_string();
    check_tag(&s).map_err(|_| bad("is a version no image tag can carry (build metadata '+'?)"))?;
    Ok(s)
}

fn nothing(why: Why, detail: &str) -> Decision {
    Decision::Nothing {
        why,
        detail: detail.to_string(),
    }
}

/// One annotation change: set to a value, or remove (`None`).
pub type AnnotationChange = (&'static str, Option<String>);

impl Decision {
    /// The annotation changes that go with this decision, in the same write as its image
    /// change (if any), so the workload records what the next pass needs: what an update
    /// replaced and when it started; after a failure, the version skipped and why.
    /// `w` is the workload as read for this decision. Decisions that write nothing (or
    /// only delete pods) change no annotation.
    pub fn annotation_changes(
        &self,
        w: &Workload,
        now: Timestamp,
    ) -> Result<Vec<AnnotationChange>, InputError> {
        use crate::workload::annotation::*;
        let done = |version: &str, failure: Failure| -> Result<Vec<AnnotationChange>, InputError> {
            let mut skip = w.settings()?.skip_versions;
            if !skip.iter().any(|v| v == version) {
                // A full list loses its oldest entry rather than refusing: refusing would
                // leave the failed version free to be tried again.
                if skip.len() >= MAX_SKIP_VERSIONS {
                    skip.remove(0);
                }
                skip.push(version.to_string());
            }
            Ok(vec![
                (SKIP_VERSIONS, Some(skip.join(","))),
                (
                    LAST_FAILURE,
                    Some(format!("{version} {}", failure.as_str())),
                ),
                (UPDATING_TO, None),
                (UPDATE_STARTED, None),
            ])
        };
        Ok(match self {
            Decision::Update(u) => {
                let mut c = vec![
                    (PREVIOUS_IMAGE, Some(u.previous.clone())),
                    (UPDATING_TO, Some(u.version.clone())),
                    (UPDATE_STARTED, Some(now.to_string())),
                ];
                if u.forced {
                    c.push((FORCED_ATTEMPT, Some(now.to_string())));
                }
                c
            }
            Decision::Completed { .. } => vec![
                (UPDATING_TO, None),
                (UPDATE_STARTED, None),
                (LAST_FAILURE, None),
            ],
            Decision::Rollback(r) => done(&r.version, r.failure)?,
            Decision::MarkFailed {
                version, failure, ..
            } => done(version, *failure)?,
            Decision::Nothing { .. }
            | Decision::Skip(_)
            | Decision::ResolveDigest { .. }
            | Decision::Wait { .. }
            | Decision::DeletePods(_)
            | Decision::ReportOnly(_) => Vec::new(),
        })
    }
}
