//! The lock-step protocol of seed 004: release choice, plans, and the worker and updater
//! decisions, in tables and as properties of random interleavings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use tern_core::lockstep::plan::{Action, Plan};
use tern_core::lockstep::protocol::*;
use tern_core::lockstep::release::*;

fn listed(tag: &str, prerelease: bool) -> ListedRelease {
    ListedRelease {
        tag: tag.into(),
        prerelease,
        draft: false,
    }
}

#[test]
fn calendar_versions_order_where_semver_refuses_them() {
    assert!(semver::Version::parse("2018.11.07").is_err());
    let a = ReleaseVersion::parse("2018.11.07-1").unwrap();
    let b = ReleaseVersion::parse("2018.11.07-2").unwrap();
    let c = ReleaseVersion::parse("2018.12.01").unwrap();
    let d = ReleaseVersion::parse("2018.11.07-10").unwrap();
    assert!(a.compare(&b) == Some(std::cmp::Ordering::Less));
    assert!(
        b.compare(&d) == Some(std::cmp::Ordering::Less),
        "build numbers compare as numbers"
    );
    assert!(d.compare(&c) == Some(std::cmp::Ordering::Less));
    assert_eq!(a.to_string(), "2018.11.07-1");
    for bad in ["2018.13.01", "2018.11.00", "2018.11.07-x", "2018.11.07-"] {
        let e = ReleaseVersion::parse(bad).unwrap_err();
        assert!(e.to_string().contains(bad), "{e}");
    }
    let s = ReleaseVersion::parse("v1.2.0-rc.1").unwrap();
    assert!(s.is_prerelease());
    assert_eq!(s.compare(&a), None, "schemes are not comparable");
}

#[test]
fn tag_prefixes_are_ignored_when_comparing() {
    assert_eq!(
        TagPrefix::FirstHyphen.strip("release-2018.11.07-1"),
        Some("2018.11.07-1")
    );
    assert_eq!(TagPrefix::FirstHyphen.strip("release-"), None);
    assert_eq!(TagPrefix::FirstHyphen.strip("v1.0.0"), None);
    let p = TagPrefix::Exact("app-v".into());
    assert_eq!(p.strip("app-v1.2.0-rc.1"), Some("1.2.0-rc.1"));
    assert_eq!(p.strip("other-v1.2.0"), None);
}

#[test]
fn production_skips_prereleases_staging_takes_them_drafts_never() {
    let releases = vec![
        listed("release-1.0.0", false),
        listed("release-1.2.0-rc.1", false), // semver pre-release part
        listed("release-1.1.0", false),
        listed("release-1.1.5", true), // marked by the source
        ListedRelease {
            tag: "release-9.0.0".into(),
            prerelease: false,
            draft: true,
        },
        listed("nightly", false),
        listed("release-banana", false),
    ];
    let p = pick(&releases, &TagPrefix::FirstHyphen, Environment::Production).unwrap();
    assert_eq!(p.latest.unwrap().version.to_string(), "1.1.0");
    assert_eq!(p.skipped.len(), 2, "{:?}", p.skipped);
    let s = pick(&releases, &TagPrefix::FirstHyphen, Environment::Staging).unwrap();
    let latest = s.latest.unwrap();
    assert_eq!(latest.version.to_string(), "1.2.0-rc.1");
    assert!(latest.prerelease);
    assert_eq!(latest.index, 1);
}

#[test]
fn mixed_schemes_are_refused_by_name() {
    let releases = vec![
        listed("release-1.0.0", false),
        listed("release-2018.11.07-1", false),
    ];
    let e = pick(&releases, &TagPrefix::FirstHyphen, Environment::Production).unwrap_err();
    assert!(
        e.to_string().contains("2018.11.07-1") && e.to_string().contains("1.0.0"),
        "{e}"
    );
}

const PLAN: &str = r#"
components:
  - name: a
    kind: stop-everywhere
    stop: [bin/a, stop]
    start: [bin/a, start]
    check: [bin/a, check]
  - name: b
    kind: rolling
    stop: [bin/b, stop]
    start: [bin/b, start]
    timeout: 30s
  - name: d
    kind: leader-only
    start: [bin/d]
"#;

#[test]
fn a_plan_expands_into_numbered_steps() {
    let plan = Plan::from_text(PLAN).unwrap();
    let steps = plan.steps();
    let actions: Vec<(u32, Action)> = steps.iter().map(|s| (s.number, s.action)).collect();
    assert_eq!(
        actions,
        vec![
            (1, Action::StopEverywhere),
            (2, Action::StartEverywhere),
            (3, Action::Rolling),
            (4, Action::LeaderOnly)
        ]
    );
    let names: Vec<&str> = plan.commands(&steps[1]).iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["start", "check"]);
    assert_eq!(plan.timeout(1), Duration::from_secs(30));
    assert_eq!(plan.timeout(0), Duration::from_secs(300));
}

#[test]
fn bad_plans_name_the_field() {
    let cases = [
        ("components: []", "components"),
        (
            "components: [{name: A, kind: each, start: [x]}]",
            "components[0].name",
        ),
        (
            "components: [{name: a, kind: stop-everywhere, start: [x]}]",
            "components[0].stop",
        ),
        (
            "components: [{name: a, kind: each, start: []}]",
            "components[0].start",
        ),
        (
            "components: [{name: a, kind: leader-only, start: [x], stop: [y]}]",
            "components[0].stop",
        ),
        (
            "components: [{name: a, kind: each, start: [x], timeout: 0s}]",
            "components[0].timeout",
        ),
        (
            "components: [{name: a, kind: each, start: [x]}, {name: a, kind: each, start: [x]}]",
            "components[1].name",
        ),
        (
            "components: [{name: a, kind: sideways, start: [x]}]",
            "components[0].kind",
        ),
        (
            "components: [{name: a, kind: each, start: [x], shell: y}]",
            "components[0]",
        ),
    ];
    for (text, field) in cases {
        let e = Plan::from_text(text).unwrap_err().to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
}

fn request(servers: &[ServerId]) -> UpdateRequest {
    UpdateRequest {
        version: "1.1.0".into(),
        servers: servers.to_vec(),
        stop: false,
        artifact: None,
        started_at: Some(Timestamp::UNIX_EPOCH),
        reason: None,
        leader: None,
    }
}

fn status(step: u32) -> ServerStatus {
    ServerStatus {
        version: "1.1.0".into(),
        step,
        ..ServerStatus::default()
    }
}

fn view<'a>(
    me: ServerId,
    req: Option<&'a UpdateRequest>,
    statuses: &'a BTreeMap<ServerId, ServerStatus>,
    installed: bool,
) -> WorkerView<'a> {
    WorkerView {
        me,
        request: req,
        statuses,
        installed,
        steps: 4,
        waited: Duration::ZERO,
        barrier_timeout: Duration::from_secs(60),
    }
}

#[test]
fn worker_table() {
    let req = request(&[1, 2, 3]);
    let none = BTreeMap::new();
    assert_eq!(
        worker_next(&view(1, None, &none, false)),
        WorkerAction::Idle(Idle::NoUpdate)
    );
    assert_eq!(
        worker_next(&view(4, Some(&req), &none, false)),
        WorkerAction::Idle(Idle::NotListed)
    );
    assert_eq!(
        worker_next(&view(1, Some(&req), &none, false)),
        WorkerAction::Install {
            version: "1.1.0".into()
        }
    );
    assert_eq!(
        worker_next(&view(1, Some(&req), &none, true)),
        WorkerAction::Record { step: 1 }
    );
    // An old version's status is not this update's.
    let old: BTreeMap<_, _> = [(
        1,
        ServerStatus {
            version: "1.0.0".into(),
            finished: true,
            ..status(4)
        },
    )]
    .into();
    assert_eq!(
        worker_next(&view(1, Some(&req), &old, true)),
        WorkerAction::Record { step: 1 }
    );

    let mut st: BTreeMap<_, _> = [(1, status(2)), (2, status(2)), (3, status(1))].into();
    assert_eq!(
        worker_next(&view(1, Some(&req), &st, true)),
        WorkerAction::Wait {
            step: 2,
            missing: vec![3]
        }
    );
    let mut waited = view(1, Some(&req), &st, true);
    waited.waited = Duration::from_secs(60);
    match worker_next(&waited) {
        WorkerAction::Fail { step: 2, message } => {
            assert!(message.contains("server(s) 3"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Server 3 runs step 1 (everyone reached it); then everyone may run step 2.
    assert_eq!(
        worker_next(&view(3, Some(&req), &st, true)),
        WorkerAction::Run { step: 1 }
    );
    st.insert(3, status(2));
    assert_eq!(
        worker_next(&view(1, Some(&req), &st, true)),
        WorkerAction::Run { step: 2 }
    );
    // A finished server counts as past every step.
    st.insert(
        2,
        ServerStatus {
            finished: true,
            ..status(4)
        },
    );
    assert_eq!(
        worker_next(&view(2, Some(&req), &st, true)),
        WorkerAction::Idle(Idle::Finished)
    );
    assert_eq!(
        worker_next(&view(1, Some(&req), &st, true)),
        WorkerAction::Run { step: 2 }
    );
    // Errors halt everyone; stop halts everyone.
    st.insert(
        3,
        ServerStatus {
            error: true,
            ..status(2)
        },
    );
    assert_eq!(
        worker_next(&view(1, Some(&req), &st, true)),
        WorkerAction::Halted(Halt::OtherFailed(3))
    );
    assert_eq!(
        worker_next(&view(3, Some(&req), &st, true)),
        WorkerAction::Halted(Halt::OwnError)
    );
    let stopped = UpdateRequest {
        stop: true,
        ..req.clone()
    };
    assert_eq!(
        worker_next(&view(1, Some(&stopped), &none, true)),
        WorkerAction::Halted(Halt::Stopped)
    );
    // A server not listed is not waited for even when it has a status.
    let st: BTreeMap<_, _> = [
        (1, status(1)),
        (2, status(1)),
        (3, status(1)),
        (9, status(0)),
    ]
    .into();
    assert_eq!(
        worker_next(&view(1, Some(&req), &st, true)),
        WorkerAction::Run { step: 1 }
    );
    assert_eq!(after_run("1.1.0", 3, 4, Timestamp::UNIX_EPOCH).step, 4);
    assert!(after_run("1.1.0", 4, 4, Timestamp::UNIX_EPOCH).finished);
}

fn candidate(v: &str) -> Candidate {
    Candidate {
        index: 0,
        tag: format!("release-{v}"),
        version: ReleaseVersion::parse(v).unwrap(),
        prerelease: false,
    }
}

#[test]
fn updater_table() {
    let now = Timestamp::UNIX_EPOCH + Duration::from_secs(100);
    let none = BTreeMap::new();
    let latest = candidate("1.1.0");
    let v100 = ReleaseVersion::parse("1.0.0").unwrap();
    let v110 = ReleaseVersion::parse("1.1.0").unwrap();
    let base = |request, statuses, completed, latest| UpdaterView {
        request,
        statuses,
        registered: &[3, 1, 2],
        completed,
        latest,
        now,
        stall_timeout: Duration::from_secs(600),
    };
    assert_eq!(
        updater_next(&base(None, &none, Some(&v100), Some(&latest))),
        UpdaterAction::Start {
            version: "1.1.0".into(),
            servers: vec![1, 2, 3]
        }
    );
    assert_eq!(
        updater_next(&base(None, &none, Some(&v110), Some(&latest))),
        UpdaterAction::Idle(UpdaterIdle::UpToDate)
    );
    assert_eq!(
        updater_next(&base(None, &none, None, None)),
        UpdaterAction::Idle(UpdaterIdle::NoRelease)
    );
    let req = request(&[1, 2]);
    let st: BTreeMap<_, _> = [
        (1, status(2)),
        (
            2,
            ServerStatus {
                error: true,
                message: "boom".into(),
                ..status(2)
            },
        ),
    ]
    .into();
    match updater_next(&base(Some(&req), &st, Some(&v100), Some(&latest))) {
        UpdaterAction::Stop { reason } => assert!(
            reason.contains("server 2") && reason.contains("boom"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    let st: BTreeMap<_, _> = [(1, status(2))].into();
    assert_eq!(
        updater_next(&base(Some(&req), &st, Some(&v100), Some(&latest))),
        UpdaterAction::Idle(UpdaterIdle::InProgress)
    );
    let mut stalled = base(Some(&req), &st, Some(&v100), Some(&latest));
    stalled.stall_timeout = Duration::from_secs(50);
    match updater_next(&stalled) {
        UpdaterAction::Stop { reason } => {
            assert!(reason.contains("server(s) 2 never started"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let done: BTreeMap<_, _> = [
        (
            1,
            ServerStatus {
                finished: true,
                ..status(4)
            },
        ),
        (
            2,
            ServerStatus {
                finished: true,
                ..status(4)
            },
        ),
    ]
    .into();
    assert_eq!(
        updater_next(&base(Some(&req), &done, Some(&v100), Some(&latest))),
        UpdaterAction::Complete {
            version: "1.1.0".into()
        }
    );
    let newer = candidate("1.2.0");
    assert_eq!(
        updater_next(&base(Some(&req), &done, Some(&v110), Some(&newer))),
        UpdaterAction::Start {
            version: "1.2.0".into(),
            servers: vec![1, 2, 3]
        }
    );
    let stopped = UpdateRequest {
        stop: true,
        ..req.clone()
    };
    assert_eq!(
        updater_next(&base(Some(&stopped), &st, Some(&v100), Some(&newer))),
        UpdaterAction::Idle(UpdaterIdle::Halted)
    );
    // A newer release waits for the update in progress.
    assert_eq!(
        updater_next(&base(Some(&req), &st, Some(&v100), Some(&newer))),
        UpdaterAction::Idle(UpdaterIdle::InProgress)
    );
}

/// One move of the random interleaving.
#[derive(Clone, Debug)]
enum Move {
    Worker(usize),
    Fail(usize),
    Updater,
    Recover,
}

fn moves(servers: usize) -> impl Strategy<Value = Vec<Move>> {
    prop::collection::vec(
        prop_oneof![
            20 => (0..servers).prop_map(Move::Worker),
            1 => (0..servers).prop_map(Move::Fail),
            4 => Just(Move::Updater),
            1 => Just(Move::Recover),
        ],
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random interleavings of workers, failures, the updater and recover: nobody runs
    /// step k + 1 before every listed server finished step k; `stop` stays set until
    /// recover; an update that completes ran every step on every listed server.
    #[test]
    fn the_barrier_holds_and_stop_sticks(servers in 1usize..5, steps in 1u32..6, script in moves(5)) {
        let ids: Vec<ServerId> = (1..=servers as u32).collect();
        let latest = candidate("2.0.0");
        let mut request: Option<UpdateRequest> = None;
        let mut statuses: BTreeMap<ServerId, ServerStatus> = BTreeMap::new();
        let mut installed = vec![false; servers];
        let mut completed: Option<ReleaseVersion> = None;
        let mut ran: BTreeMap<ServerId, u32> = BTreeMap::new();
        let now = Timestamp::UNIX_EPOCH;
        for m in script {
            let was_stopped = request.as_ref().is_some_and(|r| r.stop);
            let mut recovered = false;
            match m {
                Move::Worker(i) if i < servers => {
                    let me = ids[i];
                    let action = worker_next(&WorkerView {
                        me,
                        request: request.as_ref(),
                        statuses: &statuses,
                        installed: installed[i],
                        steps,
                        waited: Duration::ZERO,
                        barrier_timeout: Duration::from_secs(60),
                    });
                    let req = request.clone();
                    match action {
                        WorkerAction::Install { .. } => installed[i] = true,
                        WorkerAction::Record { step } => {
                            let req = req.unwrap();
                            statuses.insert(me, ServerStatus { version: req.version.clone(), step, ..ServerStatus::default() });
                        }
                        WorkerAction::Run { step } => {
                            let req = req.unwrap();
                            // Every listed server finished step - 1: it recorded `step` or later.
                            for id in &req.servers {
                                let s = statuses.get(id).unwrap();
                                prop_assert!(s.version == req.version && (s.finished || s.step >= step),
                                    "server {me} runs step {step} while {id} is at {s:?}");
                            }
                            prop_assert_eq!(ran.get(&me).copied().unwrap_or(0) + 1, step, "steps run in order");
                            ran.insert(me, step);
                            statuses.insert(me, after_run(&req.version, step, steps, now));
                        }
                        _ => {}
                    }
                }
                Move::Fail(i) if i < servers => {
                    if let (Some(req), Some(s)) = (&request, statuses.get_mut(&ids[i]))
                        && s.version == req.version && !s.finished {
                        s.error = true;
                    }
                }
                Move::Updater => {
                    let completed_before = completed.clone();
                    let action = updater_next(&UpdaterView {
                        request: request.as_ref(),
                        statuses: &statuses,
                        registered: &ids,
                        completed: completed.as_ref(),
                        latest: Some(&latest),
                        now,
                        stall_timeout: Duration::from_secs(3600),
                    });
                    match action {
                        UpdaterAction::Start { version, servers: listed } => {
                            prop_assert!(request.as_ref().is_none_or(|r| !r.stop), "a stopped update is never replaced");
                            request = Some(UpdateRequest { version, servers: listed, stop: false, artifact: None, started_at: Some(now), reason: None, leader: None });
                            installed = vec![false; servers];
                            ran.clear();
                        }
                        UpdaterAction::Stop { .. } => request.as_mut().unwrap().stop = true,
                        UpdaterAction::Complete { version } => {
                            let req = request.as_ref().unwrap();
                            for id in &req.servers {
                                prop_assert_eq!(ran.get(id).copied(), Some(steps), "server {} did not run every step", id);
                            }
                            completed = Some(ReleaseVersion::parse(&version).unwrap());
                            prop_assert!(completed != completed_before);
                        }
                        UpdaterAction::Idle(_) => {}
                    }
                }
                Move::Recover => {
                    request = None;
                    statuses.clear();
                    ran.clear();
                    recovered = true;
                }
                _ => {}
            }
            if was_stopped && !recovered {
                prop_assert!(request.as_ref().is_some_and(|r| r.stop), "stop was cleared without recover");
            }
        }
    }
}
