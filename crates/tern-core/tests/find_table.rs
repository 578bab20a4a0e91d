//! Every cell of the find table: mode × group state × (canary or not), both
//! strategies for done (under a mode that is not enabled, a stop, every cell names
//! the last known-good version, the start version, and nobody updates), backpressure inside and outside progress, the immediate
//! schedule, the catch-all group, and no rollout at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::duration::Percent;
use tern_core::gate::{self, BACKPRESSURE_JITTER_SECONDS, DEFAULT_JITTER_SECONDS};
use tern_core::resource::*;
use tern_core::version::Version;

const CANARY_ID: &str = "11111111-1111-4111-8111-111111111111";
const LOW_ID: &str = "10000000-0000-4000-8000-000000000000"; // at 0.0625
const HIGH_ID: &str = "f0000000-0000-4000-8000-000000000000"; // at 0.9375

fn rollout(mode: Mode, strategy: Strategy, state: GroupState) -> AutoUpdateAgentRollout {
    let group = |name: &str| RolloutGroup {
        name: name.into(),
        state,
        config: tern_core::resource::GroupConfig {
            canary_count: 1,
            ..Default::default()
        },
        canaries: vec![Canary {
            updater_id: CANARY_ID.into(),
            ..Canary::default()
        }],
        progress: 1.0,
        ..RolloutGroup::default()
    };
    AutoUpdateAgentRollout::new(
        RolloutSpec {
            start_version: Version::parse("1.0.0").unwrap(),
            target_version: Version::parse("2.0.0").unwrap(),
            schedule: Schedule::Regular,
            autoupdate_mode: mode,
            strategy,
            maintenance_window_duration: None,
            host_group: Default::default(),
        },
        RolloutStatus {
            groups: vec![group("dev"), group("prod")],
            ..RolloutStatus::default()
        },
    )
}

fn ask(r: &AutoUpdateAgentRollout, group: &str, id: &str) -> (String, bool) {
    let d = gate::rollout_answer(Some(r), group, id);
    {
        let u = d.update();
        (d.version.unwrap().to_string(), u)
    }
}

#[test]
fn the_whole_table() {
    use GroupState::*;
    use Mode::*;
    let (v1, v2) = ("1.0.0", "2.0.0");
    // (mode, state, answer for a canary, answer for any other agent)
    let table = [
        (Enabled, Unstarted, (v1, false), (v1, false)),
        (Enabled, Canary, (v2, true), (v1, false)),
        (Enabled, Active, (v2, true), (v2, true)),
        (Enabled, Done, (v2, true), (v2, true)),
        (Enabled, Rolledback, (v1, true), (v1, true)),
        // A stop: the last known-good version, never the target.
        (Suspended, Unstarted, (v1, false), (v1, false)),
        (Suspended, Canary, (v1, false), (v1, false)),
        (Suspended, Active, (v1, false), (v1, false)),
        (Suspended, Done, (v1, false), (v1, false)),
        (Suspended, Rolledback, (v1, false), (v1, false)),
        (Disabled, Unstarted, (v1, false), (v1, false)),
        (Disabled, Canary, (v1, false), (v1, false)),
        (Disabled, Active, (v1, false), (v1, false)),
        (Disabled, Done, (v1, false), (v1, false)),
        (Disabled, Rolledback, (v1, false), (v1, false)),
    ];
    for (mode, state, canary, other) in table {
        let r = rollout(mode, Strategy::HaltOnError, state);
        let got_canary = ask(&r, "dev", CANARY_ID);
        let got_other = ask(&r, "dev", HIGH_ID);
        assert_eq!(
            got_canary,
            (canary.0.to_string(), canary.1),
            "{mode:?}/{state:?} canary"
        );
        assert_eq!(
            got_other,
            (other.0.to_string(), other.1),
            "{mode:?}/{state:?} other"
        );
    }
}

#[test]
fn done_under_time_based_does_not_update_stragglers() {
    let r = rollout(Mode::Enabled, Strategy::TimeBased, GroupState::Done);
    assert_eq!(ask(&r, "dev", HIGH_ID), ("2.0.0".into(), false));
    let r = rollout(Mode::Enabled, Strategy::TimeBased, GroupState::Active);
    assert_eq!(ask(&r, "dev", HIGH_ID), ("2.0.0".into(), true));
}

/// Seed 000: progress matters only under backpressure. An active group without
/// `max_in_flight` tells every host to update, whatever `progress` holds (a group a
/// manual start-update --force made active has progress 0 until the next reconcile).
#[test]
fn without_backpressure_an_active_group_updates_everyone() {
    let mut r = rollout(Mode::Enabled, Strategy::HaltOnError, GroupState::Active);
    r.status.groups[0].config.max_in_flight = None;
    r.status.groups[0].progress = 0.0;
    assert_eq!(ask(&r, "dev", HIGH_ID), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "dev", LOW_ID), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "dev", ""), ("2.0.0".into(), true));
}

#[test]
fn backpressure_admits_only_ids_under_progress() {
    let mut r = rollout(Mode::Enabled, Strategy::HaltOnError, GroupState::Active);
    for g in &mut r.status.groups {
        g.config.max_in_flight = Some(Percent::from_percent(20));
        g.progress = 0.5;
    }
    assert_eq!(ask(&r, "dev", LOW_ID), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "dev", HIGH_ID), ("2.0.0".into(), false));
    // No updater id: only once progress is complete.
    assert_eq!(ask(&r, "dev", ""), ("2.0.0".into(), false));
    r.status.groups[0].progress = 1.0;
    assert_eq!(ask(&r, "dev", ""), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "dev", HIGH_ID), ("2.0.0".into(), true));
    // Backpressure groups get the short jitter.
    assert_eq!(
        gate::rollout_answer(Some(&r), "dev", LOW_ID).jitter_seconds,
        BACKPRESSURE_JITTER_SECONDS
    );
}

#[test]
fn unknown_and_empty_groups_are_served_by_the_last_group() {
    let mut r = rollout(Mode::Enabled, Strategy::HaltOnError, GroupState::Unstarted);
    r.status.groups[1].state = GroupState::Active;
    assert_eq!(ask(&r, "dev", HIGH_ID), ("1.0.0".into(), false));
    assert_eq!(ask(&r, "prod", HIGH_ID), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "", HIGH_ID), ("2.0.0".into(), true));
    assert_eq!(ask(&r, "no-such-group", HIGH_ID), ("2.0.0".into(), true));
}

#[test]
fn the_immediate_schedule_sends_everyone_to_the_target() {
    // Under a mode that is not enabled (a stop): the start version, not now.
    for (mode, version, update) in [
        (Mode::Enabled, "2.0.0", true),
        (Mode::Suspended, "1.0.0", false),
        (Mode::Disabled, "1.0.0", false),
    ] {
        let mut r = rollout(mode, Strategy::HaltOnError, GroupState::Unstarted);
        r.spec.schedule = Schedule::Immediate;
        r.status.groups.clear();
        assert_eq!(
            ask(&r, "dev", HIGH_ID),
            (version.into(), update),
            "{mode:?}"
        );
        assert_eq!(ask(&r, "", ""), (version.into(), update), "{mode:?}");
    }
}

#[test]
fn no_rollout_means_no_version_and_no_update() {
    let d = gate::rollout_answer(None, "dev", HIGH_ID);
    assert_eq!(d.version, None);
    assert!(!d.update());
    let s = d.settings();
    assert_eq!(s.agent_version, "");
    assert_eq!(s.agent_update_jitter_seconds, DEFAULT_JITTER_SECONDS);
}

#[test]
fn the_response_carries_the_decision() {
    let r = rollout(Mode::Enabled, Strategy::HaltOnError, GroupState::Active);
    let s = gate::rollout_answer(Some(&r), "dev", HIGH_ID).settings();
    assert_eq!(s.agent_version, "2.0.0");
    assert!(s.agent_auto_update);
    assert_eq!(s.agent_update_jitter_seconds, DEFAULT_JITTER_SECONDS);
}
