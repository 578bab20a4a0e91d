//! The decision, as tables: each case is the base inputs (a healthy three-replica
//! Deployment on 1.1.0 that opted in, ternd saying "1.2.0, now", the 1.2.0 digest
//! resolved) changed in one way, and what must come out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use tern_core::host_update::{CriticalAnswer, Trigger, VersionAnswer};
use tern_core::version::Version;
use tern_core::window::Day;
use tern_core::wire::{AgentSchedule, AutoUpdateSettings, FindResponse, UpdaterStatus};
use tern_kube_rules::{
    ContainerStatus, Decision, Digest, Failure, InputError, Inputs, Kind, Pod, PodManagement,
    Policy, ReadyCondition, Resolved, RolloutStatus, Skip, Source, Why, Workload, annotation,
    decide, heartbeat,
};

const REPO: &str = "registry.example/tern/agent";
const UID: &str = "3c6bcc1b-1992-4abc-a6f1-43f8f1b9ff05";

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}
fn image(tag: &str, d: char) -> String {
    format!("{REPO}:{tag}@{}", digest(d))
}
fn now() -> Timestamp {
    // A Monday.
    "2026-11-23T12:00:00Z".parse().unwrap()
}
fn ago(mins: i64) -> Timestamp {
    now() - SignedDuration::from_mins(mins)
}

struct Case {
    workload: Workload,
    pods: Vec<Pod>,
    source: Source,
    resolved: Option<Resolved>,
    policy: Policy,
    now: Timestamp,
}

impl Case {
    fn run(&self) -> Result<Decision, InputError> {
        decide(&Inputs {
            workload: &self.workload,
            pods: &self.pods,
            source: &self.source,
            resolved: self.resolved.as_ref(),
            policy: &self.policy,
            now: self.now,
        })
    }
    fn annotate(&mut self, k: &str, v: &str) {
        self.workload.annotations.insert(k.into(), v.into());
    }
    /// No pod Ready since `mins` minutes ago.
    fn none_ready_for(&mut self, mins: i64) {
        for p in &mut self.pods {
            p.ready = Some(ReadyCondition {
                ready: false,
                since: ago(mins),
            });
        }
    }
    fn channel(&mut self, critical: bool, window_open: bool) {
        self.source = Source::Channel {
            version: VersionAnswer::Version(Version::parse("1.2.0").unwrap()),
            critical: if critical {
                CriticalAnswer::Yes
            } else {
                CriticalAnswer::Other("no".into())
            },
            schedule: Some(schedule(if window_open { 12 } else { 2 })),
        };
    }
    /// The controller started the update to 1.2.0 `mins` minutes ago: the spec runs
    /// it, one pod of three is updated so far.
    fn updating(&mut self, mins: i64) {
        self.workload.image = image("1.2.0", 'b');
        self.annotate(annotation::UPDATING_TO, "1.2.0");
        self.annotate(annotation::UPDATE_STARTED, &ago(mins).to_string());
        self.annotate(annotation::PREVIOUS_IMAGE, &image("1.1.0", 'a'));
        self.workload.status.generation = 3;
        self.workload.status.observed_generation = 3;
        self.workload.status.updated_replicas = 1;
        self.workload.status.replicas = 4;
        self.pods
            .push(pod("agent-new-0", &image("1.2.0", 'b'), None));
        self.pods[3].ready = Some(ReadyCondition {
            ready: false,
            since: ago(1),
        });
    }
    fn statefulset(&mut self, pm: PodManagement) {
        self.workload.kind = Kind::StatefulSet { pod_management: pm };
        self.workload.status.current_revision = "agent-r1".into();
        self.workload.status.update_revision = "agent-r1".into();
        for (n, p) in self.pods.iter_mut().enumerate() {
            p.name = format!("agent-{n}");
            p.revision = Some("agent-r1".into());
        }
    }
}

fn schedule(start_hour: u8) -> AgentSchedule {
    AgentSchedule {
        group: "dev".into(),
        days: vec![Day::Mon],
        start_hour,
        duration_seconds: 3600,
        on_calendar: None,
        windows: Vec::new(),
        calendar: None,
        on_calendars: Vec::new(),
    }
}

fn pod(name: &str, img: &str, rev: Option<&str>) -> Pod {
    Pod {
        name: name.into(),
        revision: rev.map(Into::into),
        image: img.into(),
        ready: Some(ReadyCondition {
            ready: true,
            since: ago(60),
        }),
        created: ago(120),
        terminating: false,
        containers: vec![ContainerStatus {
            name: "agent".into(),
            restart_count: 0,
            waiting: None,
        }],
    }
}

fn find(version: &str, now: bool) -> Source {
    Source::Find(FindResponse {
        auto_update: AutoUpdateSettings {
            agent_version: version.into(),
            agent_auto_update: now,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// find's answer "not now", with the hold it gives.
fn find_held(version: &str, hold: &str) -> Source {
    Source::Find(FindResponse {
        auto_update: AutoUpdateSettings {
            agent_version: version.into(),
            agent_auto_update: false,
            agent_hold: hold.into(),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn base() -> Case {
    let img = image("1.1.0", 'a');
    Case {
        workload: Workload {
            kind: Kind::Deployment,
            uid: UID.into(),
            namespace: "agents".into(),
            name: "agent".into(),
            image: img.clone(),
            annotations: [
                (annotation::UPDATE.to_string(), "true".to_string()),
                (annotation::GROUP.to_string(), "dev".to_string()),
            ]
            .into(),
            status: RolloutStatus {
                generation: 2,
                observed_generation: 2,
                desired_replicas: 3,
                replicas: 3,
                updated_replicas: 3,
                ready_replicas: 3,
                available_replicas: 3,
                current_revision: String::new(),
                update_revision: String::new(),
            },
        },
        pods: (0..3)
            .map(|n| pod(&format!("agent-{n}"), &img, None))
            .collect(),
        source: find("1.2.0", true),
        resolved: Some(Resolved {
            repository: REPO.into(),
            tag: "1.2.0".into(),
            digest: Digest::parse(&digest('b')).unwrap(),
        }),
        policy: Policy::default(),
        now: now(),
    }
}

type Check = fn(&Result<Decision, InputError>) -> bool;
type Row<'a> = (&'a str, fn(&mut Case), Check);

fn table(cases: &[Row<'_>]) {
    let mut failed = Vec::new();
    for (name, change, check) in cases {
        let mut c = base();
        change(&mut c);
        let got = c.run();
        if !check(&got) {
            failed.push(format!("{name}: got {got:#?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

fn is_update(d: &Result<Decision, InputError>, trigger: Trigger) -> bool {
    matches!(d, Ok(Decision::Update(u)) if u.trigger == trigger
        && u.image.to_string() == image("1.2.0", 'b')
        && u.version == "1.2.0"
        && u.previous == image("1.1.0", 'a')
        && u.deadline == now() + SignedDuration::from_mins(10))
}
fn is_nothing(d: &Result<Decision, InputError>, why: Why) -> bool {
    matches!(d, Ok(Decision::Nothing { why: w, .. }) if *w == why)
}
fn deletes(d: &Result<Decision, InputError>, names: &[&str]) -> bool {
    match d {
        Ok(Decision::DeletePods(p)) => {
            p.iter().map(|p| p.name.as_str()).collect::<Vec<_>>() == names
                && p.iter().all(|p| p.why.contains("not the update revision"))
        }
        _ => false,
    }
}
fn rollback(d: &Result<Decision, InputError>, failure: Failure) -> bool {
    matches!(d, Ok(Decision::Rollback(r)) if r.failure == failure
        && r.version == "1.2.0"
        && r.to.to_string() == image("1.1.0", 'a'))
}
fn refused(d: &Result<Decision, InputError>, needle: &str) -> bool {
    matches!(d, Err(e) if e.to_string().contains(needle))
}

#[test]
fn opt_in_and_skips() {
    table(&[
        (
            "not opted in",
            |c| {
                c.workload.annotations.remove(annotation::UPDATE);
            },
            |d| matches!(d, Ok(Decision::Skip(Skip::NotOptedIn))),
        ),
        (
            "opted out with false",
            |c| c.annotate(annotation::UPDATE, "false"),
            |d| matches!(d, Ok(Decision::Skip(Skip::NotOptedIn))),
        ),
        (
            "not opted in: its other annotations are not read",
            |c| {
                c.workload.annotations.remove(annotation::UPDATE);
                c.annotate(annotation::UPDATE_STARTED, "garbage");
            },
            |d| matches!(d, Ok(Decision::Skip(Skip::NotOptedIn))),
        ),
        (
            "skip-reconcile, even with an update due and garbage elsewhere",
            |c| {
                c.annotate(annotation::SKIP_RECONCILE, "true");
                c.annotate(annotation::PREVIOUS_IMAGE, "not an image");
            },
            |d| matches!(d, Ok(Decision::Skip(Skip::SkipReconcile))),
        ),
        (
            "skip-reconcile false manages",
            |c| c.annotate(annotation::SKIP_RECONCILE, "false"),
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "skip-reconcile neither true nor false is refused",
            |c| c.annotate(annotation::SKIP_RECONCILE, "yes please"),
            |d| refused(d, "tern.dev/skip-reconcile"),
        ),
        (
            "the target is in skip-versions",
            |c| c.annotate(annotation::SKIP_VERSIONS, "1.1.5, v1.2.0"),
            |d| matches!(d, Ok(Decision::Skip(Skip::Version { version, last_failure: None })) if version == "1.2.0"),
        ),
        (
            "another version in skip-versions does not matter",
            |c| c.annotate(annotation::SKIP_VERSIONS, "1.1.5"),
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "report-only says what it would do",
            |c| c.annotate(annotation::UPDATE, "report-only"),
            |d| matches!(d, Ok(Decision::ReportOnly(inner)) if matches!(**inner, Decision::Update(_))),
        ),
        (
            "report-only with nothing to do is plain nothing",
            |c| {
                c.annotate(annotation::UPDATE, "report-only");
                c.source = find("1.1.0", true);
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
    ]);
}

#[test]
fn find_and_channel_triggers() {
    table(&[
        (
            "find: healthy, update now",
            |_| {},
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "find: not now",
            |c| c.source = find("1.2.0", false),
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "find: no version",
            |c| c.source = find("", true),
            |d| is_nothing(d, Why::NoTarget),
        ),
        (
            "find: already there",
            |c| c.source = find("v1.1.0", true),
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "find: not a canary, but no Ready pod for 6 minutes (the repair hosts may do)",
            |c| {
                c.source = find_held("1.2.0", "not_a_canary");
                c.none_ready_for(6);
            },
            |d| matches!(d, Ok(Decision::Update(u)) if u.forced && matches!(u.trigger, Trigger::Unhealthy(_))),
        ),
        (
            "find: frozen, no Ready pod for 6 minutes: the freeze holds",
            |c| {
                c.source = find_held("1.2.0", "frozen");
                c.none_ready_for(6);
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "find: group not started, no Ready pod for 6 minutes: no repair before its turn",
            |c| {
                c.source = find_held("1.2.0", "group_not_started");
                c.none_ready_for(6);
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "find: not now without a reason (an older ternd), no Ready pod: no shortcut",
            |c| {
                c.source = find("1.2.0", false);
                c.none_ready_for(6);
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: window closed, critical",
            |c| c.channel(true, false),
            |d| is_update(d, Trigger::Critical),
        ),
        (
            "channel: window closed, not critical, healthy",
            |c| c.channel(false, false),
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: window open, healthy",
            |c| c.channel(false, true),
            |d| is_update(d, Trigger::Window),
        ),
        (
            "channel: no schedule counts as closed",
            |c| {
                c.channel(false, true);
                if let Source::Channel { schedule, .. } = &mut c.source {
                    *schedule = None;
                }
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: an unusable schedule counts as closed",
            |c| {
                c.channel(false, true);
                if let Source::Channel {
                    schedule: Some(s), ..
                } = &mut c.source
                {
                    s.duration_seconds = 0;
                }
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: window closed, no Ready pod for 6 minutes",
            |c| {
                c.channel(false, false);
                c.none_ready_for(6);
            },
            |d| {
                matches!(d, Ok(Decision::Update(u)) if u.forced
            && matches!(&u.trigger, Trigger::Unhealthy(why) if why.contains("no Ready pod")))
            },
        ),
        (
            "channel: window closed, no Ready pod for only 3 minutes",
            |c| {
                c.channel(false, false);
                c.none_ready_for(3);
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: unhealthy, but a forced try 10 minutes ago",
            |c| {
                c.channel(false, false);
                c.none_ready_for(20);
                c.annotate(annotation::FORCED_ATTEMPT, &ago(10).to_string());
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: unhealthy, the last forced try 40 minutes ago",
            |c| {
                c.channel(false, false);
                c.none_ready_for(60);
                c.annotate(annotation::FORCED_ATTEMPT, &ago(40).to_string());
            },
            |d| matches!(d, Ok(Decision::Update(u)) if u.forced),
        ),
        (
            "channel: wanted pods but none exist counts as unhealthy",
            |c| {
                c.channel(false, false);
                c.pods.clear();
            },
            |d| matches!(d, Ok(Decision::Update(u)) if u.forced),
        ),
        (
            "channel: scaled to zero is not unhealthy",
            |c| {
                c.channel(false, false);
                c.pods.clear();
                c.workload.status.desired_replicas = 0;
            },
            |d| is_nothing(d, Why::NotNow),
        ),
        (
            "channel: unreachable version",
            |c| {
                c.channel(true, true);
                if let Source::Channel { version, .. } = &mut c.source {
                    *version = VersionAnswer::Unreachable("503".into());
                }
            },
            |d| is_nothing(d, Why::NoTarget),
        ),
        (
            "channel: a major downgrade is refused even when critical",
            |c| {
                c.channel(true, true);
                c.workload.image = image("2.0.0", 'a');
            },
            |d| is_nothing(d, Why::Refused),
        ),
    ]);
}

#[test]
fn digest_pinning() {
    table(&[
        (
            "no digest known: resolve first",
            |c| c.resolved = None,
            |d| {
                matches!(d, Ok(Decision::ResolveDigest { version, repository, tag })
                if version == "1.2.0" && repository == REPO && tag == "1.2.0")
            },
        ),
        (
            "a digest for another tag is not used",
            |c| {
                if let Some(r) = &mut c.resolved {
                    r.tag = "1.1.9".into();
                }
            },
            |d| matches!(d, Ok(Decision::ResolveDigest { .. })),
        ),
        (
            "a digest for another repository is not used",
            |c| {
                if let Some(r) = &mut c.resolved {
                    r.repository = "evil.example/agent".into();
                }
            },
            |d| matches!(d, Ok(Decision::ResolveDigest { .. })),
        ),
        (
            "a v-prefixed target is tagged without the v",
            |c| c.source = find("v1.2.0", true),
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "an image with no tag is replaced by a pinned one",
            |c| {
                c.workload.image = format!("{REPO}@{}", digest('a'));
            },
            |d| matches!(d, Ok(Decision::Update(u)) if u.image.to_string() == image("1.2.0", 'b')),
        ),
        (
            "a non-version tag is replaced within the rules",
            |c| {
                c.workload.image = format!("{REPO}:latest");
                c.source = find("1.2.0", false);
            },
            |d| is_nothing(d, Why::NotNow),
        ),
    ]);
}

#[test]
fn rollout_wait_complete_rollback() {
    table(&[
        (
            "in progress, within the deadline",
            |c| c.updating(3),
            |d| {
                matches!(d, Ok(Decision::Wait { version, deadline })
                if version == "1.2.0" && *deadline == ago(3) + SignedDuration::from_mins(10))
            },
        ),
        (
            "complete",
            |c| {
                c.updating(3);
                let s = &mut c.workload.status;
                (s.updated_replicas, s.replicas) = (3, 3);
            },
            |d| matches!(d, Ok(Decision::Completed { version }) if version == "1.2.0"),
        ),
        (
            "complete only when the status is of the current generation",
            |c| {
                c.updating(3);
                let s = &mut c.workload.status;
                (s.updated_replicas, s.replicas, s.observed_generation) = (3, 3, 2);
            },
            |d| matches!(d, Ok(Decision::Wait { .. })),
        ),
        (
            "deadline passed",
            |c| c.updating(11),
            |d| rollback(d, Failure::Timeout),
        ),
        (
            "a new pod crash-loops before the deadline",
            |c| {
                c.updating(3);
                c.pods[3].containers[0].waiting = Some("CrashLoopBackOff".into());
            },
            |d| rollback(d, Failure::CrashLoop),
        ),
        (
            "a new pod restarted 3 times",
            |c| {
                c.updating(3);
                c.pods[3].containers[0].restart_count = 3;
            },
            |d| rollback(d, Failure::CrashLoop),
        ),
        (
            "an old pod crash-looping is not the new version's fault",
            |c| {
                c.updating(3);
                c.pods[0].containers[0].waiting = Some("CrashLoopBackOff".into());
                c.pods[0].containers[0].restart_count = 40;
            },
            |d| matches!(d, Ok(Decision::Wait { .. })),
        ),
        (
            "a new pod cannot pull for 2 minutes: wait",
            |c| {
                c.updating(3);
                c.pods[3].created = ago(2);
                c.pods[3].containers[0].waiting = Some("ImagePullBackOff".into());
            },
            |d| matches!(d, Ok(Decision::Wait { .. })),
        ),
        (
            "a new pod cannot pull for 6 minutes: roll back",
            |c| {
                c.updating(8);
                c.pods[3].created = ago(6);
                c.pods[3].containers[0].waiting = Some("ImagePullBackOff".into());
            },
            |d| rollback(d, Failure::ImagePull),
        ),
        (
            "failed with no previous image: mark failed, nothing to restore",
            |c| {
                c.updating(11);
                c.workload.annotations.remove(annotation::PREVIOUS_IMAGE);
            },
            |d| {
                matches!(d, Ok(Decision::MarkFailed { version, failure: Failure::Timeout, detail })
            if version == "1.2.0" && detail.contains("no previous image"))
            },
        ),
        (
            "stale markers for a version the spec no longer runs are ignored",
            |c| {
                c.annotate(annotation::UPDATING_TO, "1.0.9");
                c.annotate(annotation::UPDATE_STARTED, &ago(60).to_string());
            },
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "rollback done: the version is skipped, reported, not retried",
            |c| {
                c.annotate(annotation::SKIP_VERSIONS, "1.2.0");
                c.annotate(annotation::LAST_FAILURE, "1.2.0 crash-loop");
            },
            |d| {
                matches!(d, Ok(Decision::Skip(Skip::Version { version, last_failure: Some(f) }))
            if version == "1.2.0" && f.reason == "crash-loop")
            },
        ),
        (
            "rollback done and the old version unhealthy too: still no retry",
            |c| {
                c.annotate(annotation::SKIP_VERSIONS, "1.2.0");
                c.annotate(annotation::LAST_FAILURE, "1.2.0 timeout");
                c.channel(true, true);
                c.none_ready_for(60);
            },
            |d| matches!(d, Ok(Decision::Skip(Skip::Version { .. }))),
        ),
        (
            "report-only never rolls back by itself",
            |c| {
                c.updating(11);
                c.annotate(annotation::UPDATE, "report-only");
            },
            |d| matches!(d, Ok(Decision::ReportOnly(inner)) if matches!(**inner, Decision::Rollback(_))),
        ),
    ]);
}

#[test]
fn stuck_statefulset() {
    table(&[
        (
            "old-revision pod not Ready for 10 minutes: delete it",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[0].revision = Some("agent-r2".into());
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(10),
                });
            },
            |d| deletes(d, &["agent-2"]),
        ),
        (
            "old-revision pods from several revisions, healthy ones kept",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r3".into();
                c.pods[1].revision = Some("agent-r0".into());
                c.pods[1].ready = None;
                c.pods[1].created = ago(30);
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(10),
                });
            },
            |d| deletes(d, &["agent-1", "agent-2"]),
        ),
        (
            "old-revision pod not Ready for 2 minutes: not yet",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(2),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "old-revision pod crash-looping: at once",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(1),
                });
                c.pods[2].containers[0].waiting = Some("CrashLoopBackOff".into());
            },
            |d| deletes(d, &["agent-2"]),
        ),
        (
            "update-revision pods not Ready are never deleted",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                for p in &mut c.pods[1..] {
                    p.revision = Some("agent-r2".into());
                    p.ready = Some(ReadyCondition {
                        ready: false,
                        since: ago(30),
                    });
                }
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "Parallel pod management: nothing to delete",
            |c| {
                c.statefulset(PodManagement::Parallel);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "a Deployment: nothing to delete",
            |c| {
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].revision = Some("agent-r1".into());
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "a pod without a revision label is left alone",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].revision = None;
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "a terminating pod is left alone",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].terminating = true;
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "no update revision reported: nothing is deleted",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.source = find("1.1.0", true);
                c.workload.status.update_revision = String::new();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_nothing(d, Why::UpToDate),
        ),
        (
            "skip-reconcile: nothing is deleted",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.annotate(annotation::SKIP_RECONCILE, "true");
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| matches!(d, Ok(Decision::Skip(Skip::SkipReconcile))),
        ),
        (
            "an update due goes first; the stuck pod is deleted on the next pass",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(30),
                });
            },
            |d| is_update(d, Trigger::Rollout),
        ),
        (
            "during our update: an old pod stuck is deleted before waiting",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.updating(3);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[3].revision = Some("agent-r2".into());
                c.pods[3].name = "agent-3".into();
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(8),
                });
            },
            |d| deletes(d, &["agent-2"]),
        ),
        (
            "the stuck case with a rollback, step 1: the new revision crash-loops",
            |c| {
                c.statefulset(PodManagement::OrderedReady);
                c.updating(3);
                c.workload.status.update_revision = "agent-r2".into();
                c.pods[3].revision = Some("agent-r2".into());
                c.pods[3].name = "agent-3".into();
                c.pods[3].containers[0].waiting = Some("CrashLoopBackOff".into());
            },
            |d| rollback(d, Failure::CrashLoop),
        ),
        (
            "the stuck case with a rollback, step 2: the crashing pod is now of an old revision",
            |c| {
                // After the rollback the template is 1.1.0 again (a new update revision);
                // the 1.2.0 pod never becomes Ready, so the ordered rollout back waits on it.
                c.statefulset(PodManagement::OrderedReady);
                c.annotate(annotation::SKIP_VERSIONS, "1.2.0");
                c.annotate(annotation::LAST_FAILURE, "1.2.0 crash-loop");
                c.workload.status.update_revision = "agent-r3".into();
                c.pods[2].revision = Some("agent-r2".into());
                c.pods[2].image = image("1.2.0", 'b');
                c.pods[2].ready = Some(ReadyCondition {
                    ready: false,
                    since: ago(4),
                });
                c.pods[2].containers[0].waiting = Some("CrashLoopBackOff".into());
                c.pods[0].revision = Some("agent-r3".into());
            },
            |d| deletes(d, &["agent-2"]),
        ),
    ]);
}

#[test]
fn hostile_inputs_are_refused_by_name() {
    table(&[
        (
            "an empty tag",
            |c| c.workload.image = format!("{REPO}:"),
            |d| refused(d, "tag is empty"),
        ),
        (
            "a huge tag",
            |c| c.workload.image = format!("{REPO}:{}", "9".repeat(10_000)),
            |d| refused(d, "longer than 128"),
        ),
        (
            "an empty image",
            |c| c.workload.image = String::new(),
            |d| refused(d, "it is empty"),
        ),
        (
            "find: not semver",
            |c| c.source = find("banana", true),
            |d| refused(d, "find: auto_update.agent_version"),
        ),
        (
            "find: a huge version",
            |c| c.source = find(&"1".repeat(1 << 20), true),
            |d| refused(d, "not a semantic version"),
        ),
        (
            "find: build metadata no tag carries",
            |c| c.source = find("1.2.0+build.5", true),
            |d| refused(d, "no image tag can carry"),
        ),
        (
            "negative replicas",
            |c| c.workload.status.desired_replicas = -1,
            |d| refused(d, "spec.replicas: -1"),
        ),
        (
            "overflowing counts",
            |c| c.workload.status.updated_replicas = i64::MAX,
            |d| refused(d, "updatedReplicas"),
        ),
        (
            "a count past int32",
            |c| c.workload.status.ready_replicas = 1 << 31,
            |d| refused(d, "readyReplicas"),
        ),
        (
            "a negative generation",
            |c| c.workload.status.observed_generation = -5,
            |d| refused(d, "observedGeneration"),
        ),
        (
            "a negative restart count",
            |c| c.pods[1].containers[0].restart_count = -3,
            |d| refused(d, "restartCount -3"),
        ),
        (
            "a restart count past int32",
            |c| c.pods[1].containers[0].restart_count = i64::MAX,
            |d| refused(d, "restartCount"),
        ),
        (
            "an empty pod name",
            |c| c.pods[1].name = String::new(),
            |d| refused(d, "not a pod name"),
        ),
        (
            "too many pods",
            |c| {
                let p = c.pods[0].clone();
                c.pods = vec![p; 10_001];
            },
            |d| refused(d, "10001"),
        ),
        (
            "an empty uid",
            |c| c.workload.uid = String::new(),
            |d| refused(d, "metadata.uid"),
        ),
        (
            "a uid with a slash",
            |c| c.workload.uid = "../x".into(),
            |d| refused(d, "metadata.uid"),
        ),
        (
            "a group that is no name",
            |c| c.annotate(annotation::GROUP, "dev prod"),
            |d| refused(d, "tern.dev/group"),
        ),
        (
            "a previous image that is no image",
            |c| c.annotate(annotation::PREVIOUS_IMAGE, "::"),
            |d| refused(d, "previous-image"),
        ),
        (
            "an update start that is no instant",
            |c| {
                c.updating(3);
                c.annotate(annotation::UPDATE_STARTED, "yesterday");
            },
            |d| refused(d, "tern.dev/update-started"),
        ),
        (
            "an update start far in the future (would wait forever)",
            |c| {
                c.updating(3);
                c.annotate(annotation::UPDATE_STARTED, "2999-12-31T00:00:00Z");
            },
            |d| refused(d, "in the future"),
        ),
        (
            "an update start at the dawn of time: long past its deadline",
            |c| {
                c.updating(3);
                c.annotate(annotation::UPDATE_STARTED, "0001-01-01T00:00:00Z");
            },
            |d| rollback(d, Failure::Timeout),
        ),
        (
            "updating-to without a start",
            |c| {
                c.updating(3);
                c.workload.annotations.remove(annotation::UPDATE_STARTED);
            },
            |d| refused(d, "without tern.dev/update-started"),
        ),
        (
            "a skip list longer than 64",
            |c| {
                let list: Vec<String> = (0..65).map(|n| format!("1.0.{n}")).collect();
                c.annotate(annotation::SKIP_VERSIONS, &list.join(","));
            },
            |d| refused(d, "more than 64"),
        ),
        (
            "a huge annotation",
            |c| c.annotate(annotation::SKIP_VERSIONS, &"1".repeat(5000)),
            |d| refused(d, "more than 4096"),
        ),
        (
            "a zero health timeout",
            |c| c.policy.health_timeout = SignedDuration::ZERO,
            |d| refused(d, "health_timeout"),
        ),
    ]);
}

#[test]
fn heartbeat_of_a_workload() {
    let c = base();
    let hb = heartbeat(&c.workload, "0.1.0").unwrap();
    assert_eq!(hb.updater_id, UID);
    assert_eq!(hb.host_id, UID);
    assert_eq!(hb.hostname, "agents/agent");
    assert_eq!(hb.group, "dev");
    assert_eq!(hb.version, "1.1.0");
    assert_eq!(hb.updater_status, UpdaterStatus::Enabled);
    assert_eq!(hb.healthy, Some(true));
    assert!(!hb.rollback);
    assert_eq!(hb.labels["kubernetes.kind"], "deployment");
    hb.check_facts().unwrap();

    // Mid-rollout: on the target in the spec, but not healthy until every pod is.
    let mut c = base();
    c.updating(3);
    let hb = heartbeat(&c.workload, "0.1.0").unwrap();
    assert_eq!(hb.version, "1.2.0");
    assert_eq!(hb.healthy, Some(false));

    // After a rollback: the failed version is reported as rolled back.
    let mut c = base();
    c.annotate(annotation::SKIP_VERSIONS, "1.2.0");
    c.annotate(annotation::LAST_FAILURE, "1.2.0 crash-loop");
    let hb = heartbeat(&c.workload, "0.1.0").unwrap();
    assert!(hb.rollback);
    assert_eq!(hb.failed_version.as_deref(), Some("1.2.0"));
    assert_eq!(hb.version, "1.1.0");

    let mut c = base();
    c.annotate(annotation::SKIP_RECONCILE, "true");
    assert_eq!(
        heartbeat(&c.workload, "0.1.0").unwrap().updater_status,
        UpdaterStatus::Disabled
    );
    let mut c = base();
    c.statefulset(PodManagement::OrderedReady);
    c.workload.status.desired_replicas = 0;
    let hb = heartbeat(&c.workload, "0.1.0").unwrap();
    assert_eq!(
        hb.healthy,
        Some(false),
        "a workload scaled to zero runs no agent"
    );
    assert_eq!(hb.labels["kubernetes.kind"], "statefulset");

    let mut c = base();
    c.workload.uid = "not a uid".into();
    assert!(heartbeat(&c.workload, "0.1.0").is_err());
}
