//! Manual transitions and their refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use tern_core::reason;
use tern_core::resource::*;
use tern_core::transition::{Transition, TransitionError, apply};

use GroupState::*;

const NOW: &str = "2026-11-23T09:00:00Z";

fn rollout_with(states: &[(&str, GroupState, i64)]) -> AutoUpdateAgentRollout {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.reconcile("2026-11-23T08:00:00Z");
    let mut r = w.rollout().clone();
    r.status.groups = states
        .iter()
        .map(|(name, state, canaries)| RolloutGroup {
            name: name.to_string(),
            state: *state,
            canary_count: *canaries,
            present_count: 7,
            config_days: vec![tern_core::window::Day::All],
            ..RolloutGroup::default()
        })
        .collect();
    r
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn start_update_goes_to_canary_or_active() {
    let r = rollout_with(&[("dev", Unstarted, 2), ("prod", Rolledback, 0)]);
    let (next, events) = apply(
        &r,
        &Transition::StartUpdate {
            groups: names(&["dev", "prod"]),
            force: false,
        },
        ts(NOW),
    )
    .unwrap();
    let dev = next.group("dev").unwrap();
    assert_eq!(dev.state, Canary);
    assert_eq!(dev.last_update_reason, reason::MANUAL_TRIGGER);
    assert_eq!(dev.start_time, Some(ts(NOW)));
    assert_eq!(dev.initial_count, 7);
    assert_eq!(
        next.group("prod").unwrap().state,
        Active,
        "rolledback groups can restart"
    );
    assert_eq!(events.len(), 2);
    assert_eq!(next.status.state, RolloutState::Active);
    // --force skips the canaries.
    let (forced, _) = apply(
        &r,
        &Transition::StartUpdate {
            groups: names(&["dev"]),
            force: true,
        },
        ts(NOW),
    )
    .unwrap();
    assert_eq!(forced.group("dev").unwrap().state, Active);
}

#[test]
fn start_update_refuses_groups_already_started() {
    for state in [Canary, Active, Done] {
        let r = rollout_with(&[("dev", state, 0)]);
        let err = apply(
            &r,
            &Transition::StartUpdate {
                groups: names(&["dev"]),
                force: false,
            },
            ts(NOW),
        )
        .unwrap_err();
        assert!(
            matches!(err, TransitionError::WrongState { .. }),
            "{state:?}: {err}"
        );
        assert!(err.to_string().contains("unstarted or rolledback"), "{err}");
    }
    let r = rollout_with(&[("dev", Unstarted, 0)]);
    assert_eq!(
        apply(
            &r,
            &Transition::StartUpdate {
                groups: vec![],
                force: false
            },
            ts(NOW)
        )
        .unwrap_err(),
        TransitionError::NoGroupNamed {
            action: "start-update"
        }
    );
}

#[test]
fn mark_done_named_or_in_progress() {
    let r = rollout_with(&[
        ("dev", Canary, 1),
        ("staging", Active, 0),
        ("prod", Unstarted, 0),
    ]);
    let (next, _) = apply(&r, &Transition::MarkDone { groups: vec![] }, ts(NOW)).unwrap();
    let states: Vec<_> = next.status.groups.iter().map(|g| g.state).collect();
    assert_eq!(states, [Done, Done, Unstarted]);
    assert_eq!(
        next.group("dev").unwrap().last_update_reason,
        reason::MANUAL_FORCED_DONE
    );
    let (next, _) = apply(
        &r,
        &Transition::MarkDone {
            groups: names(&["prod"]),
        },
        ts(NOW),
    )
    .unwrap();
    assert_eq!(next.group("prod").unwrap().state, Done);
    // Nothing in progress and nothing named.
    let idle = rollout_with(&[("dev", Done, 0), ("prod", Unstarted, 0)]);
    assert!(matches!(
        apply(&idle, &Transition::MarkDone { groups: vec![] }, ts(NOW)),
        Err(TransitionError::NothingToDo { .. })
    ));
    assert!(matches!(
        apply(
            &idle,
            &Transition::MarkDone {
                groups: names(&["dev"])
            },
            ts(NOW)
        ),
        Err(TransitionError::WrongState { .. })
    ));
}

#[test]
fn rollback_defaults_to_every_started_group() {
    let r = rollout_with(&[
        ("dev", Done, 0),
        ("staging", Active, 0),
        ("prod", Unstarted, 0),
    ]);
    let (next, events) = apply(&r, &Transition::Rollback { groups: vec![] }, ts(NOW)).unwrap();
    let states: Vec<_> = next.status.groups.iter().map(|g| g.state).collect();
    assert_eq!(states, [Rolledback, Rolledback, Unstarted]);
    assert_eq!(events.len(), 2);
    assert_eq!(next.status.state, RolloutState::Rolledback);
    // Named groups may be rolled back from any state but rolledback.
    let (next, _) = apply(
        &r,
        &Transition::Rollback {
            groups: names(&["prod"]),
        },
        ts(NOW),
    )
    .unwrap();
    assert_eq!(next.group("prod").unwrap().state, Rolledback);
    let (again, _) = apply(
        &r,
        &Transition::Rollback {
            groups: names(&["dev"]),
        },
        ts(NOW),
    )
    .unwrap();
    assert!(matches!(
        apply(
            &again,
            &Transition::Rollback {
                groups: names(&["dev"])
            },
            ts(NOW)
        ),
        Err(TransitionError::WrongState { .. })
    ));
    let fresh = rollout_with(&[("dev", Unstarted, 0)]);
    assert!(matches!(
        apply(&fresh, &Transition::Rollback { groups: vec![] }, ts(NOW)),
        Err(TransitionError::NothingToDo { .. })
    ));
}

#[test]
fn a_refused_transition_changes_nothing() {
    let r = rollout_with(&[("dev", Unstarted, 0), ("prod", Active, 0)]);
    let err = apply(
        &r,
        &Transition::StartUpdate {
            groups: names(&["dev", "prod"]),
            force: false,
        },
        ts(NOW),
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"prod\" is active"), "{err}");
    let err = apply(
        &r,
        &Transition::Rollback {
            groups: names(&["dev", "nope"]),
        },
        ts(NOW),
    )
    .unwrap_err();
    assert!(
        matches!(&err, TransitionError::UnknownGroup { group, known } if group == "nope" && known.len() == 2),
        "{err}"
    );
    assert!(err.to_string().contains("dev, prod"), "{err}");
}

#[test]
fn transitions_need_halt_on_error_and_regular_schedule() {
    let mut r = rollout_with(&[("dev", Unstarted, 0)]);
    r.spec.strategy = Strategy::TimeBased;
    let err = apply(
        &r,
        &Transition::MarkDone {
            groups: names(&["dev"]),
        },
        ts(NOW),
    )
    .unwrap_err();
    assert!(matches!(err, TransitionError::NotHaltOnError { .. }));
    assert!(err.to_string().contains("time-based"), "{err}");
    r.spec.strategy = Strategy::HaltOnError;
    r.spec.schedule = Schedule::Immediate;
    assert!(matches!(
        apply(&r, &Transition::Rollback { groups: vec![] }, ts(NOW)),
        Err(TransitionError::ImmediateSchedule { .. })
    ));
}

#[test]
fn reconcile_after_a_manual_start_picks_the_canaries() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents.extend(fleet("staging", 6, "1.0.0"));
    w.reconcile("2026-11-23T08:00:00Z");
    let (next, _) = apply(
        w.rollout(),
        &Transition::StartUpdate {
            groups: names(&["staging"]),
            force: false,
        },
        ts("2026-11-23T08:01:00Z"),
    )
    .unwrap();
    assert!(next.group("staging").unwrap().canaries.is_empty());
    w.rollout = Some(next);
    w.reconcile("2026-11-23T08:02:00Z");
    assert_eq!(
        w.state("staging"),
        (Canary, reason::WAITING_FOR_CANARIES.into())
    );
    assert_eq!(w.group("staging").canaries.len(), 2);
    // dev is still unstarted: a forced start skips the order, as the operator asked.
    assert_eq!(w.state("dev").0, Unstarted);
}
