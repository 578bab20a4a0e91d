//! Properties over arbitrary (often hostile) inputs: the decision never panics, an
//! update is only ever a tag with the digest resolved for it, and a pod named for
//! deletion is always an old-revision, not-Ready, not-terminating pod of an
//! OrderedReady StatefulSet.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use tern_core::host_update::{CriticalAnswer, VersionAnswer};
use tern_core::window::Day;
use tern_core::wire::{AgentSchedule, AutoUpdateSettings, FindResponse};
use tern_kube_rules::{
    ContainerStatus, Decision, Digest, Inputs, Kind, Pod, PodManagement, Policy, ReadyCondition,
    Resolved, RolloutStatus, Source, Workload, annotation, decide, heartbeat,
};

const REPO: &str = "registry.example/agent";

fn now() -> Timestamp {
    "2026-11-23T12:00:00Z".parse().unwrap()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "1\\.[0-3]\\.[0-3]",
        "v?[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(-rc\\.1|\\+b)?",
        ".{0,40}",
        "[a-z:/@.]{0,300}",
    ]
}

fn count() -> impl Strategy<Value = i64> {
    prop_oneof![
        80 => 0i64..5,
        1 => Just(-1i64),
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>()
    ]
}

fn version() -> impl Strategy<Value = String> {
    prop_oneof![6 => Just("1.2.0".to_string()), 2 => Just("1.1.0".to_string()), 1 => text()]
}

/// Mostly `good`, sometimes anything.
fn mostly(good: &[&str]) -> impl Strategy<Value = String> {
    let good: Vec<String> = good.iter().map(|s| s.to_string()).collect();
    prop_oneof![8 => prop::sample::select(good), 1 => text()]
}

fn minutes() -> impl Strategy<Value = i64> {
    prop_oneof![
        40 => 0i64..30,
        1 => Just(-100_000_000i64),
        1 => any::<i32>().prop_map(i64::from)
    ]
}

fn at(mins: i64) -> Timestamp {
    now()
        .checked_sub(SignedDuration::from_mins(mins))
        .unwrap_or(now())
}

fn pod_strategy() -> impl Strategy<Value = Pod> {
    (
        "[a-z]{1,8}",
        prop::option::of(mostly(&["r1", "r2"])),
        mostly(&[
            "registry.example/agent:1.1.0",
            "registry.example/agent:1.2.0",
        ]),
        prop::option::of((any::<bool>(), minutes())),
        minutes(),
        any::<bool>(),
        count(),
        prop::option::of(prop_oneof![
            Just("CrashLoopBackOff".to_string()),
            Just("ImagePullBackOff".to_string()),
            text()
        ]),
    )
        .prop_map(
            |(name, revision, image, ready, created, terminating, restarts, waiting)| Pod {
                name,
                revision,
                image,
                ready: ready.map(|(ready, m)| ReadyCondition {
                    ready,
                    since: at(m),
                }),
                created: at(created),
                terminating,
                containers: vec![ContainerStatus {
                    name: "agent".into(),
                    restart_count: restarts,
                    waiting,
                }],
            },
        )
}

#[derive(Debug, Clone)]
struct World {
    workload: Workload,
    pods: Vec<Pod>,
    source: Source,
    resolved: Option<Resolved>,
}

fn world() -> impl Strategy<Value = World> {
    let kind = prop_oneof![
        Just(Kind::Deployment),
        Just(Kind::StatefulSet {
            pod_management: PodManagement::OrderedReady
        }),
        Just(Kind::StatefulSet {
            pod_management: PodManagement::Parallel
        }),
    ];
    let image = mostly(&[
        "registry.example/agent:1.1.0",
        "registry.example/agent:1.2.0",
    ]);
    let annotations = (
        mostly(&["true", "true", "report-only"]),
        prop::option::weighted(0.3, mostly(&["dev", "prod"])),
        prop::option::weighted(0.1, mostly(&["true", "false"])),
        prop::option::weighted(0.3, mostly(&["1.2.0", "1.0.0, 1.2.0"])),
        // An update in progress: both markers, or (rarely) one alone.
        prop::option::of((
            prop::option::weighted(0.95, mostly(&["1.2.0"])),
            prop::option::weighted(
                0.95,
                prop_oneof![8 => minutes().prop_map(|m| at(m).to_string()), 1 => text()],
            ),
        )),
        prop::option::of(mostly(&["registry.example/agent:1.1.0"])),
    )
        .prop_map(|(update, group, skip, skips, progress, prev)| {
            let (to, started) = progress.unwrap_or((None, None));
            let mut a = std::collections::BTreeMap::new();
            a.insert(annotation::UPDATE.to_string(), update);
            for (k, v) in [
                (annotation::GROUP, group),
                (annotation::SKIP_RECONCILE, skip),
                (annotation::SKIP_VERSIONS, skips),
                (annotation::UPDATING_TO, to),
                (annotation::UPDATE_STARTED, started),
                (annotation::PREVIOUS_IMAGE, prev),
            ] {
                if let Some(v) = v {
                    a.insert(k.to_string(), v);
                }
            }
            a
        });
    let status = (
        prop::array::uniform7(count()),
        mostly(&["r1", "r2"]),
        mostly(&["r1", "r2", ""]),
    )
        .prop_map(|(n, current_revision, update_revision)| RolloutStatus {
            generation: n[0],
            observed_generation: n[1],
            desired_replicas: n[2],
            replicas: n[3],
            updated_replicas: n[4],
            ready_replicas: n[5],
            available_replicas: n[6],
            current_revision,
            update_revision,
        });
    let source = prop_oneof![
        (version(), any::<bool>()).prop_map(|(v, now)| Source::Find(FindResponse {
            auto_update: AutoUpdateSettings {
                agent_version: v,
                agent_auto_update: now,
                ..Default::default()
            },
            ..Default::default()
        })),
        (version(), any::<bool>(), 0u8..30, 0u64..100_000).prop_map(|(v, critical, hour, secs)| {
            Source::Channel {
                version: VersionAnswer::from_body(&v),
                critical: if critical {
                    CriticalAnswer::Yes
                } else {
                    CriticalAnswer::Other(String::new())
                },
                schedule: Some(AgentSchedule {
                    group: String::new(),
                    days: vec![Day::All],
                    start_hour: hour,
                    duration_seconds: secs,
                    on_calendar: None,
                    windows: Vec::new(),
                    calendar: None,
                    on_calendars: Vec::new(),
                }),
            }
        }),
    ];
    let resolved = prop::option::of((mostly(&[REPO]), mostly(&["1.2.0"])));
    (
        kind,
        image,
        annotations,
        status,
        prop::collection::vec(pod_strategy(), 0..6),
        source,
        resolved,
        mostly(&["3c6bcc1b-1992-4abc-a6f1-43f8f1b9ff05"]),
    )
        .prop_map(
            |(kind, image, annotations, status, mut pods, source, resolved, uid)| {
                // Pod names are unique in a namespace (the API server refuses a second
                // pod of a name): keep the first pod of each name.
                let mut names = std::collections::BTreeSet::new();
                pods.retain(|p| names.insert(p.name.clone()));
                World {
                    workload: Workload {
                        kind,
                        uid,
                        namespace: "agents".into(),
                        name: "agent".into(),
                        image,
                        annotations,
                        status,
                    },
                    pods,
                    source,
                    resolved: resolved.map(|(repository, tag)| Resolved {
                        repository,
                        tag,
                        digest: Digest::parse(&format!("sha256:{}", "c".repeat(64))).unwrap(),
                    }),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_and_pins_and_deletes_only_stuck_pods(w in world()) {
        let policy = Policy::default();
        let d = decide(&Inputs {
            workload: &w.workload,
            pods: &w.pods,
            source: &w.source,
            resolved: w.resolved.as_ref(),
            policy: &policy,
            now: now(),
        });
        let d = match d {
            Ok(Decision::ReportOnly(inner)) => Ok(*inner),
            d => d,
        };
        match d {
            Ok(Decision::Update(u)) => {
                let r = w.resolved.as_ref().expect("an update without a resolved digest");
                prop_assert_eq!(u.image.to_string(), format!("{}:{}@{}", r.repository, r.tag, r.digest));
                prop_assert_eq!(u.image.tag(), u.version.as_str());
                let img = &w.workload.image;
                let same_repo = img == &r.repository
                    || img.strip_prefix(r.repository.as_str())
                        .is_some_and(|rest| rest.starts_with(':') || rest.starts_with('@'));
                prop_assert!(same_repo, "the update changed the repository of {}", img);
            }
            Ok(Decision::DeletePods(names)) => {
                prop_assert_eq!(&w.workload.kind, &Kind::StatefulSet { pod_management: PodManagement::OrderedReady });
                prop_assert!(!names.is_empty());
                for s in names {
                    let p = w.pods.iter().find(|p| p.name == s.name).expect("a named pod exists");
                    prop_assert!(!p.terminating);
                    prop_assert!(!p.ready.is_some_and(|r| r.ready));
                    let rev = p.revision.as_deref().unwrap_or("");
                    prop_assert!(!rev.is_empty() && rev != w.workload.status.update_revision);
                }
            }
            _ => {}
        }
        if let Ok(hb) = heartbeat(&w.workload, "0.1.0") {
            prop_assert_eq!(hb.updater_id.as_str(), w.workload.uid.as_str());
            prop_assert!(hb.check_facts().is_ok(), "{:?}", hb.check_facts());
        }
    }
}
