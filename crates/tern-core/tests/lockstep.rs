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
        catch_up: false,
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
        untrusted: &[],
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
        untrusted: &[],
        registered: &[3, 1, 2],
        running: &[3, 1, 2],
        completed,
        completed_servers: None,
        latest,
        alert: None,
        now,
        stall_timeout: Duration::from_secs(600),
        stalled_after: 0.2,
    };
    assert_eq!(
        updater_next(&base(None, &none, Some(&v100), Some(&latest))),
        UpdaterAction::Start {
            version: "1.1.0".into(),
            servers: vec![1, 2, 3],
            catch_up: false
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
            version: "1.1.0".into(),
            servers: vec![1, 2]
        }
    );
    let newer = candidate("1.2.0");
    assert_eq!(
        updater_next(&base(Some(&req), &done, Some(&v110), Some(&newer))),
        UpdaterAction::Start {
            version: "1.2.0".into(),
            servers: vec![1, 2, 3],
            catch_up: false
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

#[test]
fn a_worker_holds_before_each_command_once_anyone_failed_or_stop_is_set() {
    let req = request(&[1, 2, 3]);
    let st: BTreeMap<_, _> = [(1, status(3)), (2, status(3)), (3, status(3))].into();
    // Server 1 was told to run step 3 (a rolling component): it may, until something
    // changes.
    assert_eq!(may_go_on(&view(1, Some(&req), &st, true), 3), Ok(()));
    // Server 2 failed step 3 (its check): server 1, waiting for the lease or between two
    // commands, holds.
    let mut failed = st.clone();
    failed.insert(
        2,
        ServerStatus {
            error: true,
            ..status(3)
        },
    );
    assert_eq!(
        may_go_on(&view(1, Some(&req), &failed, true), 3),
        Err(WorkerAction::Halted(Halt::OtherFailed(2)))
    );
    let stopped = UpdateRequest {
        stop: true,
        ..req.clone()
    };
    assert_eq!(
        may_go_on(&view(1, Some(&stopped), &st, true), 3),
        Err(WorkerAction::Halted(Halt::Stopped))
    );
    // A result is recorded against the update it ran for even once it is stopped, never
    // against a later request for the same version (recover, a catch-up).
    assert!(stopped.same_update(&req));
    let again = UpdateRequest {
        started_at: Some(Timestamp::UNIX_EPOCH + Duration::from_secs(5)),
        ..req.clone()
    };
    assert!(!again.same_update(&req));
    let catch_up = UpdateRequest {
        catch_up: true,
        ..req.clone()
    };
    assert!(!catch_up.same_update(&req));
}

#[test]
fn a_status_counts_only_when_its_server_signed_it() {
    let signed = |id, by, step| {
        (
            id,
            StatusRecord {
                status: status(step),
                signed_by: by,
            },
        )
    };
    // Server 2's record was written by someone else (unsigned, or signed by server 1).
    let records: BTreeMap<_, _> = [
        signed(1, Some(1), 2),
        signed(2, None, 2),
        signed(3, Some(1), 2),
    ]
    .into();
    let (good, untrusted) = trusted(&records);
    assert_eq!(good.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(untrusted, vec![2, 3]);
    let req = request(&[1, 2, 3]);
    let mut v = view(1, Some(&req), &good, true);
    v.untrusted = &untrusted;
    assert_eq!(worker_next(&v), WorkerAction::Halted(Halt::Untrusted(2)));
    // A server outside the update is not looked at.
    let alone = request(&[1]);
    let mut v = view(1, Some(&alone), &good, true);
    v.untrusted = &untrusted;
    assert_eq!(worker_next(&v), WorkerAction::Run { step: 2 });

    let up = UpdaterView {
        request: Some(&req),
        statuses: &good,
        untrusted: &untrusted,
        registered: &[1, 2, 3],
        running: &[1, 2, 3],
        completed: None,
        completed_servers: None,
        latest: None,
        alert: None,
        now: Timestamp::UNIX_EPOCH,
        stall_timeout: Duration::from_secs(600),
        stalled_after: 0.2,
    };
    match updater_next(&up) {
        UpdaterAction::Stop { reason } => assert!(
            reason.contains("status of server 2 is not signed by server 2"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // A server removed mid-update cannot have its status checked any more: that stops the
    // update too, saying why.
    let removed = UpdaterView {
        registered: &[1, 3],
        ..up.clone()
    };
    match updater_next(&removed) {
        UpdaterAction::Stop { reason } => {
            assert!(reason.contains("server 2 was unregistered"), "{reason}")
        }
        other => panic!("{other:?}"),
    }

    // What is signed names the server and the update, so a status cannot be moved to
    // another server's key nor replayed into a later update of the same version.
    let s = status(2);
    let m = status_message(1, &req, &s);
    assert_ne!(m, status_message(2, &req, &s));
    let later = UpdateRequest {
        started_at: Some(Timestamp::UNIX_EPOCH + Duration::from_secs(1)),
        ..req.clone()
    };
    assert_ne!(m, status_message(1, &later, &s));
    let finished = ServerStatus {
        finished: true,
        ..s.clone()
    };
    assert_ne!(m, status_message(1, &req, &finished));
}

/// A leader-only result counts only signed by its server for the update it answers, of
/// its version, from a listed server; a failure wins over a success.
#[test]
fn a_leader_only_result_counts_only_signed_for_this_update() {
    let req = UpdateRequest {
        started_at: Some(Timestamp::UNIX_EPOCH + Duration::from_secs(7)),
        ..request(&[1, 2, 3])
    };
    let result = |server, success: bool, signed| LeaderOnlyResult {
        server,
        record: LeaderOnlyRecord {
            version: req.version.clone(),
            success,
            server: Some(2),
            message: if success {
                String::new()
            } else {
                "boom".into()
            },
        },
        signed,
    };
    assert_eq!(leader_only_outcome(&req, &[]), None);
    // Unsigned (or signed for another update), or from a server the update does not list.
    assert_eq!(
        leader_only_outcome(&req, &[result(3, true, false), result(4, false, true)]),
        None
    );
    assert_eq!(
        leader_only_outcome(&req, &[result(3, true, true)]),
        Some(Ok(3))
    );
    // The failure names the server whose key signed it, not the `server` it claims.
    assert_eq!(
        leader_only_outcome(&req, &[result(1, true, true), result(3, false, true)]),
        Some(Err((3, "boom".into())))
    );
    let other_version = LeaderOnlyResult {
        record: LeaderOnlyRecord {
            version: "0.9.0".into(),
            ..result(3, true, true).record
        },
        ..result(3, true, true)
    };
    assert_eq!(leader_only_outcome(&req, &[other_version]), None);

    // What is signed binds the server, the update, the component and every field.
    let rec = result(3, true, true).record;
    let m = leader_only_message(3, &req, "d", &rec);
    assert_ne!(m, leader_only_message(2, &req, "d", &rec));
    assert_ne!(m, leader_only_message(3, &req, "e", &rec));
    let earlier = UpdateRequest {
        started_at: Some(Timestamp::UNIX_EPOCH),
        ..req.clone()
    };
    assert_ne!(m, leader_only_message(3, &earlier, "d", &rec));
    let failed = LeaderOnlyRecord {
        success: false,
        ..rec.clone()
    };
    assert_ne!(m, leader_only_message(3, &req, "d", &failed));
}

/// A lock is held by the oldest signed claim of it by a listed server: a claim unsigned,
/// of another lock, or by a server outside the update never holds it nor holds it up.
#[test]
fn the_oldest_signed_claim_holds_a_lock() {
    let req = request(&[1, 2, 3]);
    let claim = |server, lock: &str, token, signed| Claim {
        server,
        lock: lock.into(),
        token,
        signed,
    };
    assert_eq!(lock_holder(&req, &[], "rolling-b"), None);
    let claims = [
        claim(3, "rolling-b", 5, false),
        claim(4, "rolling-b", 6, true),
        claim(1, "leader-only-d", 7, true),
        claim(2, "rolling-b", 9, true),
        claim(1, "rolling-b", 12, true),
    ];
    assert_eq!(lock_holder(&req, &claims, "rolling-b"), Some(2));
    assert_eq!(lock_holder(&req, &claims, "leader-only-d"), Some(1));
    assert_eq!(lock_holder(&req, &claims[..3], "rolling-b"), None);
    let m = claim_message(1, &req, "rolling-b");
    assert_ne!(m, claim_message(2, &req, "rolling-b"));
    assert_ne!(m, claim_message(1, &req, "rolling-c"));
    let catch_up = UpdateRequest {
        catch_up: true,
        ..req.clone()
    };
    assert_ne!(m, claim_message(1, &catch_up, "rolling-b"));
}

#[test]
fn a_barrier_stalled_past_a_fraction_of_the_timeout_alerts_naming_who_is_missing() {
    let t0 = Timestamp::UNIX_EPOCH + Duration::from_secs(1000);
    let req = UpdateRequest {
        started_at: Some(t0),
        ..request(&[1, 2, 3])
    };
    // Servers 1 and 2 stopped A and wait at step 2 (start A) since t0; server 3 never
    // recorded step 2 (its worker died while stopping A).
    let waiting = |step| ServerStatus {
        at: Some(t0),
        barrier_timeout: Some(100),
        ..status(step)
    };
    let st: BTreeMap<_, _> = [(1, waiting(2)), (2, waiting(2)), (3, waiting(1))].into();
    let at = |secs: u64, alert| UpdaterView {
        request: Some(&req),
        statuses: &st,
        untrusted: &[],
        registered: &[1, 2, 3],
        running: &[1, 2, 3],
        completed: None,
        completed_servers: None,
        latest: None,
        alert,
        now: t0 + Duration::from_secs(secs),
        stall_timeout: Duration::from_secs(3600),
        stalled_after: 0.2,
    };
    assert_eq!(
        updater_next(&at(19, None)),
        UpdaterAction::Idle(UpdaterIdle::InProgress)
    );
    match updater_next(&at(20, None)) {
        UpdaterAction::AlertStalled { message } => assert!(
            message.contains("server(s) 3 have not reached step 2 of 1.1.0")
                && message.contains("server(s) 1, 2 have waited 20s of their 100s"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Raised once; nothing stops until the workers' own barrier timeout.
    assert_eq!(
        updater_next(&at(90, Some("lockstep_stalled"))),
        UpdaterAction::Idle(UpdaterIdle::InProgress)
    );
    // Server 3 arrives: the alert clears.
    let arrived: BTreeMap<_, _> = [(1, waiting(2)), (2, waiting(2)), (3, waiting(2))].into();
    let mut v = at(30, Some("lockstep_stalled"));
    v.statuses = &arrived;
    assert_eq!(updater_next(&v), UpdaterAction::ClearStalled);
}

#[test]
fn a_server_that_missed_the_completed_version_catches_up_alone() {
    let v14 = ReleaseVersion::parse("1.4.0").unwrap();
    let latest = candidate("1.4.0");
    let none = BTreeMap::new();
    let base =
        |request, statuses, registered, done: Option<&'static [ServerId]>, latest| UpdaterView {
            request,
            statuses,
            untrusted: &[],
            registered,
            running: registered,
            completed: Some(&v14),
            completed_servers: done,
            latest,
            alert: None,
            now: Timestamp::UNIX_EPOCH,
            stall_timeout: Duration::from_secs(3600),
            stalled_after: 0.2,
        };
    // 1.4.0 completed on 1 and 2 (3 was removed, dead); 3 is back.
    assert_eq!(
        updater_next(&base(None, &none, &[1, 2, 3], Some(&[1, 2]), Some(&latest))),
        UpdaterAction::Start {
            version: "1.4.0".into(),
            servers: vec![3],
            catch_up: true
        }
    );
    // Without the source too: it needs no release listing.
    assert!(matches!(
        updater_next(&base(None, &none, &[1, 2, 3], Some(&[1, 2]), None)),
        UpdaterAction::Start { catch_up: true, .. }
    ));
    // Server 3 is registered but its worker does not run (added ahead of its machine):
    // nobody is caught up, nothing waits for it.
    let mut not_running = base(None, &none, &[1, 2, 3], Some(&[1, 2]), Some(&latest));
    not_running.running = &[1, 2];
    assert_eq!(
        updater_next(&not_running),
        UpdaterAction::Idle(UpdaterIdle::UpToDate)
    );
    // A record from before catch-ups existed names nobody: nothing is guessed.
    assert_eq!(
        updater_next(&base(None, &none, &[1, 2, 3], None, Some(&latest))),
        UpdaterAction::Idle(UpdaterIdle::UpToDate)
    );
    // The catch-up finishes: 3 joins those who completed 1.4.0.
    let req = UpdateRequest {
        version: "1.4.0".into(),
        catch_up: true,
        ..request(&[3])
    };
    let fin: BTreeMap<_, _> = [(
        3,
        ServerStatus {
            version: "1.4.0".into(),
            finished: true,
            ..status(6)
        },
    )]
    .into();
    assert_eq!(
        updater_next(&base(
            Some(&req),
            &fin,
            &[1, 2, 3],
            Some(&[1, 2]),
            Some(&latest)
        )),
        UpdaterAction::Complete {
            version: "1.4.0".into(),
            servers: vec![1, 2, 3]
        }
    );
    assert_eq!(
        updater_next(&base(
            Some(&req),
            &fin,
            &[1, 2, 3],
            Some(&[1, 2, 3]),
            Some(&latest)
        )),
        UpdaterAction::Idle(UpdaterIdle::UpToDate)
    );
    // A newer release does not wait for a catch-up: every registered server takes it.
    let newer = candidate("1.5.0");
    assert_eq!(
        updater_next(&base(
            Some(&req),
            &none,
            &[1, 2, 3],
            Some(&[1, 2]),
            Some(&newer)
        )),
        UpdaterAction::Start {
            version: "1.5.0".into(),
            servers: vec![1, 2, 3],
            catch_up: false
        }
    );
    // The caught-up server is removed again: the catch-up is withdrawn.
    assert!(matches!(
        updater_next(&base(
            Some(&req),
            &none,
            &[1, 2],
            Some(&[1, 2]),
            Some(&latest)
        )),
        UpdaterAction::Withdraw { .. }
    ));
    // A catch-up that fails stops like any update.
    let failed: BTreeMap<_, _> = [(
        3,
        ServerStatus {
            version: "1.4.0".into(),
            error: true,
            ..status(2)
        },
    )]
    .into();
    assert!(matches!(
        updater_next(&base(
            Some(&req),
            &failed,
            &[1, 2, 3],
            Some(&[1, 2]),
            Some(&newer)
        )),
        UpdaterAction::Stop { .. }
    ));
}

#[test]
fn a_release_may_ship_its_own_worker() {
    let plan = Plan::from_text(
        "worker: bin/tern-lockstep\ncomponents:\n  - name: a\n    kind: each\n    start: [bin/a]\n",
    )
    .unwrap();
    assert_eq!(
        plan.worker_to_exec(None, "1.1.0@abc"),
        Some("bin/tern-lockstep")
    );
    assert_eq!(
        plan.worker_to_exec(Some("1.0.0@def"), "1.1.0@abc"),
        Some("bin/tern-lockstep")
    );
    assert_eq!(plan.worker_to_exec(Some("1.1.0@abc"), "1.1.0@abc"), None);
    for bad in ["/usr/bin/x", "../x", "bin/../../x", "", "bin//x"] {
        let text = format!(
            "worker: {bad:?}\ncomponents:\n  - name: a\n    kind: each\n    start: [bin/a]\n"
        );
        let e = Plan::from_text(&text).unwrap_err().to_string();
        assert!(e.contains("worker"), "{bad}: {e}");
    }
}

/// One move of the random interleaving.
#[derive(Clone, Debug)]
enum Move {
    /// A worker does its next thing: decide, or take a step's lease, or run one command.
    Worker(usize),
    /// The next command this server runs fails.
    Fail(usize),
    /// Someone other than the server writes its status (unsigned, or signed for an earlier
    /// update): a step, finished or not.
    Forge(usize, u32, bool),
    Updater,
    /// An operator's `stop`.
    Stop,
    Recover,
}

fn moves(servers: usize) -> impl Strategy<Value = Vec<Move>> {
    prop::collection::vec(
        prop_oneof![
            30 => (0..servers).prop_map(Move::Worker),
            1 => (0..servers).prop_map(Move::Fail),
            2 => (0..servers, 0u32..7, any::<bool>()).prop_map(|(i, s, f)| Move::Forge(i, s, f)),
            4 => Just(Move::Updater),
            1 => Just(Move::Stop),
            1 => Just(Move::Recover),
        ],
        1..500,
    )
}

/// Where a worker is inside a step: every step is modelled as rolling (a lease, then
/// `COMMANDS` commands), the kind where one failure must stop the others.
#[derive(Clone, Debug)]
struct Running {
    step: u32,
    /// Holds the step's lease.
    leased: bool,
    /// Commands run so far.
    done: usize,
    /// The request it runs for.
    request: UpdateRequest,
}

const COMMANDS: usize = 3;

/// The store as the model sees it: each server's record and whose signature it bears.
#[derive(Default)]
struct World {
    request: Option<UpdateRequest>,
    records: BTreeMap<ServerId, StatusRecord>,
}

impl World {
    /// A worker's write, guarded as the edge guards it: recorded when the request is still
    /// the same update (stopped or not), never into a later one.
    fn write(&mut self, me: ServerId, for_request: &UpdateRequest, status: ServerStatus) -> bool {
        if self
            .request
            .as_ref()
            .is_some_and(|r| r.same_update(for_request))
        {
            self.records.insert(
                me,
                StatusRecord {
                    status,
                    signed_by: Some(me),
                },
            );
            true
        } else {
            false
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random interleavings of workers (each step under a lease, a command at a time),
    /// failing commands, forged statuses, the updater, an operator's stop and recover:
    /// - nobody runs step k + 1 before every listed server finished step k;
    /// - once a failure is recorded or `stop` is set, no command runs until recover (a
    ///   worker waiting for the lease or between two commands holds);
    /// - a failed command is always recorded, even after `stop`;
    /// - a forged status never moves a barrier nor completes an update;
    /// - `stop` stays set until recover; a completed update ran every step on every
    ///   listed server.
    #[test]
    fn the_barrier_holds_a_failure_stops_everyone_and_forgeries_count_for_nothing(
        servers in 1usize..5, steps in 1u32..5, script in moves(5)
    ) {
        let ids: Vec<ServerId> = (1..=servers as u32).collect();
        let latest = candidate("2.0.0");
        let mut w = World::default();
        let mut installed = vec![false; servers];
        let mut running: Vec<Option<Running>> = vec![None; servers];
        let mut starts = 0u64;
        let mut fail_next = vec![false; servers];
        let mut lease: Option<ServerId> = None;
        let mut completed: Option<ReleaseVersion> = None;
        let mut completed_servers: Option<Vec<ServerId>> = None;
        let mut alert: Option<&'static str> = None;
        // Steps each server really finished in this update, and whether a failure was
        // recorded in it.
        let mut ran: BTreeMap<ServerId, u32> = BTreeMap::new();
        let mut failed = false;
        let now = Timestamp::UNIX_EPOCH;
        for m in script {
            let was_stopped = w.request.as_ref().is_some_and(|r| r.stop);
            let mut recovered = false;
            match m {
                Move::Worker(i) if i < servers => {
                    let me = ids[i];
                    let (statuses, untrusted) = trusted(&w.records);
                    let view = WorkerView {
                        me,
                        request: w.request.as_ref(),
                        statuses: &statuses,
                        installed: installed[i],
                        steps,
                        waited: Duration::ZERO,
                        barrier_timeout: Duration::from_secs(60),
                        untrusted: &untrusted,
                    };
                    if let Some(r) = running[i].clone() {
                        // Before taking the lease, while waiting for it and before each
                        // command: may it still go on?
                        if let Err(why) = may_go_on(&view, r.step) {
                            if r.leased { lease = None; }
                            if r.done > 0 {
                                let st = ServerStatus { version: r.request.version.clone(), step: r.step, error: true, message: format!("held by {why:?} after a command ran"), ..ServerStatus::default() };
                                if w.write(me, &r.request, st) { failed = true; }
                            }
                            running[i] = None;
                            continue;
                        }
                        prop_assert!(
                            !failed && w.request.as_ref().is_some_and(|q| !q.stop && q.same_update(&r.request)),
                            "server {me} goes on with step {} after a failure, a stop or recover", r.step
                        );
                        if !r.leased {
                            if lease.is_none() {
                                lease = Some(me);
                                running[i] = Some(Running { leased: true, ..r });
                            }
                            continue;
                        }
                        prop_assert_eq!(lease, Some(me), "two servers in a rolling step at once");
                        // Run one command.
                        if std::mem::take(&mut fail_next[i]) {
                            let st = ServerStatus { version: r.request.version.clone(), step: r.step, error: true, message: "check failed".into(), ..ServerStatus::default() };
                            // Recorded before the lease is let go, so the next holder sees it.
                            let recorded = w.write(me, &r.request, st);
                            prop_assert!(recorded, "a failure of the update in force was not recorded");
                            failed = true;
                            lease = None;
                            running[i] = None;
                        } else if r.done + 1 == COMMANDS {
                            let st = after_run(&r.request.version, r.step, steps, now);
                            if w.write(me, &r.request, st) {
                                prop_assert_eq!(ran.get(&me).copied().unwrap_or(0) + 1, r.step, "steps run in order");
                                ran.insert(me, r.step);
                            }
                            lease = None;
                            running[i] = None;
                        } else {
                            running[i] = Some(Running { done: r.done + 1, ..r });
                        }
                        continue;
                    }
                    let action = worker_next(&view);
                    let req = w.request.clone();
                    match action {
                        WorkerAction::Install { .. } => installed[i] = true,
                        WorkerAction::Record { step } => {
                            let req = req.unwrap();
                            let st = ServerStatus { version: req.version.clone(), step, ..ServerStatus::default() };
                            w.write(me, &req, st);
                        }
                        WorkerAction::Run { step } => {
                            let req = req.unwrap();
                            // Every listed server really finished step - 1, whatever the
                            // forged records say.
                            for id in &req.servers {
                                let real = ran.get(id).copied().unwrap_or(0);
                                prop_assert!(real + 1 >= step,
                                    "server {me} starts step {step} while {id} finished only step {real}");
                            }
                            running[i] = Some(Running { step, leased: false, done: 0, request: req });
                        }
                        _ => {}
                    }
                }
                Move::Fail(i) if i < servers => fail_next[i] = true,
                Move::Forge(i, step, finished) if i < servers => {
                    if let Some(req) = &w.request {
                        let forged = ServerStatus { version: req.version.clone(), step, finished, ..ServerStatus::default() };
                        w.records.insert(ids[i], StatusRecord { status: forged, signed_by: None });
                    }
                }
                Move::Updater => {
                    let completed_before = completed.clone();
                    let (statuses, untrusted) = trusted(&w.records);
                    let action = updater_next(&UpdaterView {
                        request: w.request.as_ref(),
                        statuses: &statuses,
                        untrusted: &untrusted,
                        registered: &ids,
                        running: &ids,
                        completed: completed.as_ref(),
                        completed_servers: completed_servers.as_deref(),
                        latest: Some(&latest),
                        alert,
                        now,
                        stall_timeout: Duration::from_secs(3600),
                        stalled_after: 0.2,
                    });
                    match action {
                        UpdaterAction::Start { version, servers: listed, catch_up } => {
                            prop_assert!(w.request.as_ref().is_none_or(|r| !r.stop), "a stopped update is never replaced");
                            prop_assert!(!catch_up, "every server is registered and took part");
                            w.request = Some(UpdateRequest { version, servers: listed, stop: false, artifact: None, started_at: Some(now + Duration::from_secs({ starts += 1; starts })), reason: None, leader: None, catch_up });
                            w.records.clear();
                            installed = vec![false; servers];
                            ran.clear();
                            failed = false;
                        }
                        UpdaterAction::Stop { .. } => {
                            w.request.as_mut().unwrap().stop = true;
                            alert = Some("lockstep_stopped");
                        }
                        UpdaterAction::Complete { version, servers: done } => {
                            let req = w.request.as_ref().unwrap();
                            for id in &req.servers {
                                prop_assert_eq!(ran.get(id).copied(), Some(steps), "server {} did not run every step", id);
                            }
                            prop_assert!(!failed, "an update with a failure completed");
                            completed = Some(ReleaseVersion::parse(&version).unwrap());
                            completed_servers = Some(done);
                            prop_assert!(completed != completed_before);
                            alert = None;
                        }
                        UpdaterAction::AlertStalled { .. } => alert = Some("lockstep_stalled"),
                        UpdaterAction::ClearStalled => alert = None,
                        UpdaterAction::Withdraw { .. } => prop_assert!(false, "nothing to withdraw"),
                        UpdaterAction::Idle(_) => {}
                    }
                }
                Move::Stop => {
                    if let Some(r) = w.request.as_mut() { r.stop = true; }
                }
                // Workers still inside a step write nothing into the next update.
                Move::Recover if w.request.is_some() => {
                    w.request = None;
                    w.records.clear();
                    ran.clear();
                    failed = false;
                    recovered = true;
                }
                _ => {}
            }
            if was_stopped && !recovered {
                prop_assert!(w.request.as_ref().is_some_and(|r| r.stop), "stop was cleared without recover");
            }
        }
    }
}
