//! Table tests of the reconcile: both strategies, canaries, the 90% rule, resets,
//! modes, the catch-all group, expired reports, backpressure, alerts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use jiff::SignedDuration;
use tern_core::reason;
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::*;
use tern_core::rollout::{self, Event};

use GroupState::*;

// 2026-11-23 is a Monday.
const MON_10: &str = "2026-11-23T10:00:00Z";
const MON_12: &str = "2026-11-23T12:05:00Z";

fn three_groups() -> World {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents.extend(fleet("dev", 10, "1.0.0"));
    w.agents.extend(fleet("staging", 10, "1.0.0"));
    w.agents.extend(fleet("prod", 10, "1.0.0"));
    w
}

#[test]
fn no_version_or_no_agent_spec_means_no_rollout() {
    let input = ReconcileInput {
        config: None,
        version: None,
        rollout: None,
        reports: &[],
        agents: &[],
        report_period: report_period(),
        frozen: false,
    };
    let mut rng = rand_chacha::ChaCha8Rng::from_seed([0; 32]);
    use rand_core::SeedableRng;
    assert!(matches!(
        reconcile::reconcile(ts(MON_10), &input, &mut rng),
        Outcome::NoRollout { why } if why.contains("autoupdate_version")
    ));
    let tools_only = AutoUpdateVersion::new(None);
    let input = ReconcileInput {
        version: Some(&tools_only),
        ..input
    };
    assert!(matches!(
        reconcile::reconcile(ts(MON_10), &input, &mut rng),
        Outcome::NoRollout { why } if why.contains("spec.agents")
    ));
}

#[test]
fn a_freeze_holds_the_rollout_as_suspended_until_lifted() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    w.frozen = true;
    let r = w.reconcile(MON_12);
    assert_eq!(r.spec.autoupdate_mode, Mode::Suspended);
    assert_eq!(
        w.group("dev").state,
        Unstarted,
        "dev's window is open, but frozen"
    );
    assert!(
        w.events.iter().any(|e| matches!(
            e,
            Event::ModeChanged {
                from: Mode::Enabled,
                to: Mode::Suspended
            }
        )),
        "{:?}",
        w.events
    );
    // A disabled fleet stays disabled under a freeze: the freeze never loosens a mode.
    assert_eq!(rollout::frozen_mode(Mode::Disabled, true), Mode::Disabled);
    assert_eq!(rollout::frozen_mode(Mode::Enabled, false), Mode::Enabled);
    w.frozen = false;
    let r = w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(r.spec.autoupdate_mode, Mode::Enabled);
    assert_ne!(
        w.group("dev").state,
        Unstarted,
        "lifted: dev starts in its window"
    );
}

#[test]
fn a_new_rollout_copies_the_groups_and_starts_unstarted() {
    let mut w = three_groups();
    let r = w.reconcile(MON_10).clone();
    assert_eq!(r.status.state, RolloutState::Unstarted);
    assert_eq!(r.status.start_time, Some(ts(MON_10)));
    assert_eq!(r.spec.start_version.to_string(), "1.0.0");
    let names: Vec<&str> = r.status.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["dev", "staging", "prod"]);
    assert_eq!(w.state("dev"), (Unstarted, reason::CANNOT_START.into()));
    assert_eq!(
        w.state("staging"),
        (Unstarted, reason::PREVIOUS_GROUPS_NOT_DONE.into())
    );
    assert_eq!(w.group("staging").config.canary_count, 2);
    assert_eq!(w.group("prod").config.wait_hours, 24);
    assert!(matches!(w.events[0], Event::RolloutCreated { .. }));
}

#[test]
fn without_a_config_there_is_one_default_group_at_noon_mon_to_thu() {
    // The mode is set in the version alone: that one holds (seed 002).
    let enabled_version = |start, target| {
        let mut v = version(start, target);
        v.spec.agents.as_mut().unwrap().mode = Some(Mode::Enabled);
        v
    };
    let mut w = World::new(None, enabled_version("1.0.0", "1.1.0"));
    w.reconcile(MON_10);
    let r = w.rollout();
    assert_eq!(r.spec.autoupdate_mode, Mode::Enabled);
    assert_eq!(r.spec.strategy, Strategy::HaltOnError);
    assert_eq!(r.status.groups.len(), 1);
    let g = &r.status.groups[0];
    assert_eq!(g.name, "default");
    assert_eq!(g.config.start_hour, Some(12));
    assert_eq!(g.config.days.len(), 4);
    w.reconcile(MON_12);
    assert_eq!(w.state("default").0, Active);
    // Friday noon is outside the default days.
    let mut f = World::new(None, enabled_version("1.0.0", "1.1.0"));
    f.reconcile("2026-11-27T10:00:00Z");
    f.reconcile("2026-11-27T12:05:00Z");
    assert_eq!(f.state("default"), (Unstarted, reason::CANNOT_START.into()));
}

#[test]
fn halt_on_error_walks_the_groups_in_order() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    // dev's window opens at 12:00.
    w.reconcile(MON_12);
    assert_eq!(w.state("dev"), (Active, reason::UPDATE_IN_PROGRESS.into()));
    assert_eq!(w.group("dev").initial_count, 10);
    assert_eq!(w.group("dev").start_time, Some(ts(MON_12)));
    assert_eq!(
        w.state("staging"),
        (Unstarted, reason::PREVIOUS_GROUPS_NOT_DONE.into())
    );
    assert!(w.events.iter().any(|e| matches!(e,
        Event::GroupChanged { group, from: Unstarted, to: Active, reason } if group == "dev" && *reason == reason::CAN_START)));

    // 8 of 10 updated: below the 90% rule, not done.
    w.set_versions("dev", 8, "1.1.0");
    w.reconcile("2026-11-23T12:20:00Z");
    assert_eq!(w.state("dev").0, Active);
    assert_eq!(w.group("dev").up_to_date_count, 8);
    // 9 of 10: done.
    w.set_versions("dev", 9, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(w.state("dev"), (Done, reason::UPDATE_COMPLETE.into()));
    // staging's window opens at 14:00; before that it cannot start.
    assert_eq!(w.state("staging"), (Unstarted, reason::CANNOT_START.into()));
    w.reconcile("2026-11-23T14:01:00Z");
    assert_eq!(
        w.state("staging"),
        (Canary, reason::WAITING_FOR_CANARIES.into())
    );
    assert_eq!(w.rollout().status.state, RolloutState::Active);
}

#[test]
fn the_90_percent_rule_also_needs_90_percent_still_present() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    // Two of ten dropped off; all eight left are updated: 80% present, not done.
    w.agents
        .retain(|a| !(a.group == "dev" && a.hostname.starts_with("dev-9")));
    w.agents
        .retain(|a| !(a.group == "dev" && a.hostname.starts_with("dev-8")));
    w.set_versions("dev", 8, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(w.group("dev").present_count, 8);
    assert_eq!(w.state("dev").0, Active, "8/10 present is under 90%");
    // Operators can force it (seed 002: mark-done after a large downscale).
}

/// No live report is no evidence, not zero hosts: the group holds with
/// `reports_missing` (and an alert). Only live reports saying the group has no host at
/// all let it finish, an hour after it started.
#[test]
fn a_group_without_live_reports_holds_and_one_reported_empty_is_done_an_hour_after_it_started() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.reconcile_with(ts(MON_10), &[]);
    w.reconcile_with(ts(MON_12), &[]);
    assert_eq!(w.state("dev"), (Unstarted, reason::REPORTS_MISSING.into()));
    let alerts = &w.rollout().status.alerts;
    assert!(
        alerts.iter().any(|a| a.kind == "reports_missing"),
        "{alerts:?}"
    );
    // A live replica that holds no host: the evidence of an empty group.
    w.reconcile(MON_12);
    assert_eq!(w.state("dev").0, Active);
    assert!(w.rollout().status.alerts.is_empty());
    // Its reports stop: dev neither completes nor moves on.
    w.reconcile_with(ts("2026-11-23T12:30:00Z"), &[]);
    assert_eq!(w.state("dev"), (Active, reason::REPORTS_MISSING.into()));
    w.reconcile("2026-11-23T13:04:59Z");
    assert_eq!(w.state("dev").0, Active);
    w.reconcile("2026-11-23T13:05:00Z");
    assert_eq!(w.state("dev"), (Done, reason::UPDATE_COMPLETE.into()));
}

#[test]
fn a_rollout_created_inside_a_window_waits_for_the_next_one() {
    let mut w = three_groups();
    w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(
        w.state("dev"),
        (Unstarted, reason::ROLLOUT_CHANGED_DURING_WINDOW.into())
    );
    w.reconcile("2026-11-23T12:50:00Z");
    assert_eq!(w.state("dev").0, Unstarted);
    w.reconcile("2026-11-24T12:00:00Z");
    assert_eq!(w.state("dev").0, Active);
}

#[test]
fn wait_hours_count_from_the_previous_group_start() {
    let mut w = three_groups();
    // Skip the canaries of staging for this test.
    w.config
        .as_mut()
        .unwrap()
        .spec
        .agents
        .as_mut()
        .unwrap()
        .schedules
        .as_mut()
        .unwrap()
        .regular[1]
        .canary_count = 0;
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.set_versions("dev", 10, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    w.reconcile("2026-11-23T14:05:00Z");
    assert_eq!(w.state("staging").0, Active);
    w.set_versions("staging", 10, "1.1.0");
    w.reconcile("2026-11-23T14:30:00Z");
    assert_eq!(w.state("staging").0, Done);
    // prod's window opens at 16:00 but staging started at 14:05 today: wait 24h.
    w.reconcile("2026-11-23T16:10:00Z");
    assert_eq!(
        w.state("prod"),
        (Unstarted, reason::WAIT_HOURS_NOT_ELAPSED.into())
    );
    // Tuesday 16:00 is before 14:05 + 24h? No: Tuesday 14:05 has passed, so it starts.
    w.reconcile("2026-11-24T16:00:00Z");
    assert_eq!(w.state("prod").0, Active);
}

#[test]
fn wait_hours_can_skip_a_whole_window() {
    let cfg = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
      - {name: dev, days: ["*"], start_hour: 12}
      - {name: prod, days: ["*"], start_hour: 13, wait_hours: 30}
"#;
    let mut w = World::new(Some(config(cfg)), version("1.0.0", "1.1.0"));
    w.reconcile(MON_10);
    w.reconcile("2026-11-23T12:00:00Z");
    w.reconcile("2026-11-23T13:10:00Z"); // no reports: dev done at 13:00
    assert_eq!(w.state("dev").0, Done);
    assert_eq!(
        w.state("prod"),
        (Unstarted, reason::WAIT_HOURS_NOT_ELAPSED.into())
    );
    w.reconcile("2026-11-24T13:10:00Z"); // 25h10m after dev started
    assert_eq!(
        w.state("prod"),
        (Unstarted, reason::WAIT_HOURS_NOT_ELAPSED.into())
    );
    w.reconcile("2026-11-24T18:00:00Z"); // window closed
    assert_eq!(w.state("prod"), (Unstarted, reason::CANNOT_START.into()));
    w.reconcile("2026-11-25T13:00:00Z");
    assert_eq!(w.state("prod").0, Active);
}

fn to_staging_canaries(w: &mut World) {
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.set_versions("dev", 10, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    w.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(w.state("staging").0, Canary);
}

#[test]
fn canaries_are_picked_from_the_group_and_gate_it() {
    let mut w = three_groups();
    to_staging_canaries(&mut w);
    let canaries = w.group("staging").canaries.clone();
    assert_eq!(canaries.len(), 2);
    for c in &canaries {
        assert!(
            (0..10).any(|i| uid("staging", i) == c.updater_id),
            "{c:?} is not a staging agent"
        );
        assert!(!c.success);
    }
    assert!(
        w.events
            .iter()
            .any(|e| matches!(e, Event::CanariesPicked { group, .. } if group == "staging"))
    );
    // Only the canaries are told to update.
    w.agents_follow_find("staging");
    let updated: Vec<_> = w
        .agents
        .iter()
        .filter(|a| a.group == "staging" && a.version == "1.1.0")
        .collect();
    assert_eq!(updated.len(), 2);
    // The next reconcile sees them on the target: the group goes active.
    w.reconcile("2026-11-23T14:05:00Z");
    assert_eq!(
        w.state("staging"),
        (Active, reason::UPDATE_IN_PROGRESS.into())
    );
    assert!(w.group("staging").canaries.iter().all(|c| c.success));
    assert!(w.events.iter().any(
        |e| matches!(e, Event::GroupChanged { group, to: Active, reason, .. }
        if group == "staging" && *reason == reason::CANARIES_ARE_ALIVE)
    ));
}

#[test]
fn a_crashing_canary_keeps_the_group_in_canary_and_later_groups_unstarted() {
    let mut w = three_groups();
    to_staging_canaries(&mut w);
    // The canaries tried 1.1.0, crashed, and rolled back to 1.0.0 (they stay on 1.0.0).
    let mut overdue_events = 0;
    for hour in ["15", "18", "23"] {
        w.reconcile(&format!("2026-11-23T{hour}:00:00Z"));
        assert_eq!(
            w.state("staging"),
            (Canary, reason::WAITING_FOR_CANARIES.into())
        );
        overdue_events += w
            .events
            .iter()
            .filter(|e| matches!(e, Event::GroupOverdue { group, state: Canary, .. } if group == "staging"))
            .count();
    }
    // The alert is raised once, after alert_after (default 4h), and then kept as state.
    assert_eq!(overdue_events, 1);
    w.reconcile("2026-11-24T16:30:00Z");
    assert_eq!(w.state("prod").0, Unstarted);
    // The canaries stay the same ones: a crash does not get them replaced.
    let before = w.group("staging").canaries.clone();
    w.reconcile("2026-11-24T17:00:00Z");
    assert_eq!(w.group("staging").canaries, before);
    let alerts = &w.rollout().status.alerts;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(
        (alerts[0].kind.as_str(), alerts[0].group.as_deref()),
        ("group_overdue", Some("staging"))
    );
    assert_eq!(
        alerts[0].since,
        ts("2026-11-23T18:00:00Z"),
        "kept from when raised"
    );
}

#[test]
fn a_canary_that_disappears_blocks_but_success_is_sticky() {
    let mut w = three_groups();
    to_staging_canaries(&mut w);
    let canaries = w.group("staging").canaries.clone();
    // First canary updates then disconnects; second disconnects before updating.
    let first = canaries[0].updater_id.clone();
    let second = canaries[1].updater_id.clone();
    w.agents
        .iter_mut()
        .filter(|a| a.updater_id == first)
        .for_each(|a| a.version = "1.1.0".into());
    w.reconcile("2026-11-23T14:02:00Z");
    w.agents
        .retain(|a| a.updater_id != first && a.updater_id != second);
    w.reconcile("2026-11-23T14:04:00Z");
    let g = w.group("staging");
    assert_eq!(g.state, Canary);
    assert!(
        g.canaries
            .iter()
            .find(|c| c.updater_id == first)
            .unwrap()
            .success
    );
    assert!(
        !g.canaries
            .iter()
            .find(|c| c.updater_id == second)
            .unwrap()
            .success
    );
}

#[test]
fn a_canary_group_without_agents_goes_active() {
    // Nothing to pick: the reconcile that starts staging finds no candidates and no agents.
    let mut w2 = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w2.agents.extend(fleet("dev", 3, "1.0.0"));
    w2.reconcile(MON_10);
    w2.reconcile(MON_12);
    w2.set_versions("dev", 3, "1.1.0");
    w2.reconcile("2026-11-23T12:30:00Z");
    w2.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(
        w2.state("staging"),
        (Active, reason::UPDATE_IN_PROGRESS.into())
    );
    assert!(w2.events.iter().any(|e| matches!(e, Event::GroupChanged { to: Active, reason, .. } if *reason == reason::NO_CANARY_CANDIDATES)));
}

#[test]
fn done_and_rolledback_groups_stay_put_under_halt_on_error() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.set_versions("dev", 10, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(w.state("dev").0, Done);
    // Agents drifting back does not un-done a group.
    w.set_versions("dev", 10, "1.0.0");
    w.reconcile("2026-11-24T12:30:00Z");
    assert_eq!(w.state("dev").0, Done);
    let mut r = w.rollout().clone();
    r.status.groups[0].state = Rolledback;
    w.rollout = Some(r);
    w.reconcile("2026-11-25T12:30:00Z");
    assert_eq!(w.state("dev").0, Rolledback);
    assert_eq!(w.rollout().status.state, RolloutState::Rolledback);
}

#[test]
fn modes_combine_to_the_most_restrictive() {
    use Mode::*;
    let table = [
        // Unset in both: disabled (seed 002), so nothing moves until an operator says so.
        (None, None, Disabled),
        (Some(Enabled), None, Enabled),
        (None, Some(Enabled), Enabled),
        (Some(Enabled), Some(Enabled), Enabled),
        (Some(Suspended), Some(Enabled), Suspended),
        (Some(Enabled), Some(Suspended), Suspended),
        (Some(Disabled), Some(Suspended), Disabled),
        (Some(Enabled), Some(Disabled), Disabled),
        (Some(Suspended), None, Suspended),
        (None, Some(Disabled), Disabled),
    ];
    for (cfg_mode, ver_mode, want) in table {
        let mut cfg = config(&three_groups_config());
        cfg.spec.agents.as_mut().unwrap().mode = cfg_mode;
        let mut ver = version("1.0.0", "1.1.0");
        ver.spec.agents.as_mut().unwrap().mode = ver_mode;
        let mut w = World::new(Some(cfg), ver);
        w.reconcile(MON_10);
        assert_eq!(
            w.rollout().spec.autoupdate_mode,
            want,
            "{cfg_mode:?} + {ver_mode:?}"
        );
        w.reconcile(MON_12);
        let dev_started = w.state("dev").0 != Unstarted;
        assert_eq!(dev_started, want == Enabled, "{cfg_mode:?} + {ver_mode:?}");
    }
}

#[test]
fn only_enabled_progresses_but_counts_stay_current() {
    let mut w = three_groups();
    w.config
        .as_mut()
        .unwrap()
        .spec
        .agents
        .as_mut()
        .unwrap()
        .mode = Some(Mode::Suspended);
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    assert_eq!(w.state("dev").0, Unstarted, "suspended: no group starts");
    assert_eq!(w.group("dev").present_count, 10, "counts still observed");
    // Resume: the mode change keeps the rollout (same start time) and progresses.
    w.config
        .as_mut()
        .unwrap()
        .spec
        .agents
        .as_mut()
        .unwrap()
        .mode = Some(Mode::Enabled);
    w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(w.rollout().status.start_time, Some(ts(MON_10)));
    assert_eq!(w.state("dev").0, Active);
    assert!(w.events.iter().any(|e| matches!(
        e,
        Event::ModeChanged {
            from: Mode::Suspended,
            to: Mode::Enabled
        }
    )));
}

#[test]
fn reset_rules() {
    // Each change of start, target, schedule or strategy starts a new rollout.
    type Edit = fn(&mut World);
    let resets: [(&str, Edit); 4] = [
        ("target", |w| w.version = Some(version("1.0.0", "1.2.0"))),
        ("start", |w| w.version = Some(version("0.9.0", "1.1.0"))),
        ("schedule", |w| {
            w.version
                .as_mut()
                .unwrap()
                .spec
                .agents
                .as_mut()
                .unwrap()
                .schedule = Schedule::Immediate
        }),
        ("strategy", |w| w.config = Some(config(TIME_BASED))),
    ];
    for (what, edit) in resets {
        let mut w = three_groups();
        w.reconcile(MON_10);
        w.reconcile(MON_12);
        assert_eq!(w.state("dev").0, Active);
        edit(&mut w);
        w.reconcile("2026-11-23T12:20:00Z");
        let r = w.rollout();
        assert_eq!(
            r.status.start_time,
            Some(ts("2026-11-23T12:20:00Z")),
            "{what}"
        );
        assert!(
            r.status.groups.iter().all(|g| g.state == Unstarted),
            "{what}: {:?}",
            r.status.groups
        );
        assert!(
            matches!(&w.events[0], Event::RolloutCreated { why, .. } if why.contains(what)),
            "{what}: {:?}",
            w.events
        );
    }
    // A mode change or a group edit does not.
    let mut w = three_groups();
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.config
        .as_mut()
        .unwrap()
        .spec
        .agents
        .as_mut()
        .unwrap()
        .schedules
        .as_mut()
        .unwrap()
        .regular[0]
        .start_hour = Some(3);
    w.version
        .as_mut()
        .unwrap()
        .spec
        .agents
        .as_mut()
        .unwrap()
        .mode = Some(Mode::Suspended);
    w.reconcile("2026-11-23T12:20:00Z");
    assert_eq!(w.rollout().status.start_time, Some(ts(MON_10)));
    assert_eq!(w.state("dev").0, Active);
    assert_eq!(
        w.group("dev").config.start_hour,
        Some(12),
        "group edits wait for the next rollout"
    );
    assert_eq!(w.rollout().spec.autoupdate_mode, Mode::Suspended);
}

#[test]
fn time_based_groups_follow_their_own_windows() {
    let mut w = World::new(Some(config(TIME_BASED)), version("1.0.0", "1.1.0"));
    w.agents.extend(fleet("us-east", 4, "1.0.0"));
    w.agents.extend(fleet("europe", 4, "1.0.0"));
    w.reconcile("2026-11-23T10:00:00Z");
    assert_eq!(
        w.state("us-east"),
        (Unstarted, reason::OUTSIDE_WINDOW.into())
    );
    // europe's window (12–14) opens first and nothing waits for us-east.
    w.reconcile("2026-11-23T12:00:00Z");
    assert_eq!(w.state("europe"), (Active, reason::IN_WINDOW.into()));
    assert_eq!(w.state("us-east").0, Unstarted);
    assert_eq!(w.group("europe").initial_count, 4);
    // Even with nobody updated, the group is done when its window closes.
    w.reconcile("2026-11-23T13:59:59Z");
    assert_eq!(w.state("europe").0, Active);
    w.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(w.state("europe"), (Done, reason::OUTSIDE_WINDOW.into()));
    // us-east opens next day at 04:00; europe re-activates at 12:00 for stragglers.
    w.reconcile("2026-11-24T04:30:00Z");
    assert_eq!(w.state("us-east"), (Active, reason::IN_WINDOW.into()));
    assert_eq!(w.state("europe").0, Done);
    w.reconcile("2026-11-24T12:10:00Z");
    assert_eq!(w.state("europe"), (Active, reason::IN_WINDOW.into()));
    assert_eq!(
        w.group("europe").start_time,
        Some(ts("2026-11-24T12:10:00Z"))
    );
    assert_eq!(w.state("us-east").0, Done);
}

#[test]
fn time_based_rollout_created_in_a_window_waits_for_the_next() {
    let mut w = World::new(Some(config(TIME_BASED)), version("1.0.0", "1.1.0"));
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(
        w.state("europe"),
        (Unstarted, reason::ROLLOUT_CHANGED_DURING_WINDOW.into())
    );
    w.reconcile("2026-11-23T13:30:00Z");
    assert_eq!(w.state("europe").0, Unstarted);
    w.reconcile("2026-11-24T12:00:00Z");
    assert_eq!(w.state("europe").0, Active);
}

#[test]
fn the_last_group_counts_agents_with_no_or_unknown_group() {
    let mut w = three_groups();
    w.agents.extend(fleet("", 3, "1.0.0"));
    w.agents.extend(fleet("qa", 2, "1.1.0"));
    w.reconcile(MON_10);
    let prod = w.group("prod");
    assert_eq!(prod.present_count, 15);
    assert_eq!(prod.up_to_date_count, 2);
    assert_eq!(w.group("dev").present_count, 10);
}

#[test]
fn reports_older_than_two_periods_are_ignored() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    let now = ts("2026-11-23T10:10:00Z");
    let fresh = report_of(
        now - SignedDuration::from_secs(120),
        &fleet("dev", 5, "1.0.0"),
    );
    let stale = report_of(
        now - SignedDuration::from_secs(121),
        &fleet("staging", 7, "1.0.0"),
    );
    let mut fresh2 = report_of(now, &fleet("dev", 2, "1.1.0"));
    fresh2.metadata.name = "replica-2".into();
    w.reconcile_with(now, &[fresh, stale, fresh2]);
    assert_eq!(
        w.group("dev").present_count,
        7,
        "both live replicas are summed"
    );
    assert_eq!(w.group("dev").up_to_date_count, 2);
    assert_eq!(
        w.group("staging").present_count,
        0,
        "the stale report is ignored"
    );
}

#[test]
fn backpressure_admits_a_growing_share_and_never_deadlocks() {
    let cfg = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
      - {name: fleet, days: ["*"], start_hour: 12, max_in_flight: 20%}
"#;
    let mut w = World::new(Some(config(cfg)), version("1.0.0", "1.1.0"));
    w.agents.extend(fleet("fleet", 50, "1.0.0"));
    w.reconcile(MON_10);
    w.reconcile("2026-11-23T12:00:00Z");
    let mut last = 0.0;
    let mut steps = 0;
    while w.state("fleet").0 == Active {
        let p = w.group("fleet").progress;
        assert!(p >= last, "progress went back: {last} -> {p}");
        last = p;
        w.agents_follow_find("fleet");
        steps += 1;
        assert!(steps < 50, "stuck at progress {p}");
        w.reconcile(&format!("2026-11-23T12:{:02}:00Z", steps));
    }
    assert_eq!(w.state("fleet").0, Done);
    assert_eq!(w.group("fleet").progress, 1.0);
    assert!(steps > 1, "backpressure must take more than one poll");
}

#[test]
fn backpressure_halts_growth_when_agents_drop_off() {
    let cfg = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
      - {name: fleet, days: ["*"], start_hour: 12, max_in_flight: 10%}
"#;
    let mut w = World::new(Some(config(cfg)), version("1.0.0", "1.1.0"));
    w.agents.extend(fleet("fleet", 20, "1.0.0"));
    w.reconcile(MON_10);
    w.reconcile("2026-11-23T12:00:00Z");
    let p0 = w.group("fleet").progress;
    w.agents.truncate(15); // 25% gone
    w.agents[0].version = "1.1.0".into();
    w.reconcile("2026-11-23T12:01:00Z");
    assert_eq!(w.group("fleet").progress, p0);
    assert_eq!(
        w.state("fleet"),
        (Active, reason::TOO_MANY_AGENTS_MISSING.into())
    );
    assert!(
        w.events
            .iter()
            .any(|e| matches!(e, Event::ProgressHalted { .. }))
    );
}

#[test]
fn time_override_moves_the_window_clock() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    let mut r = w.rollout().clone();
    r.status.time_override = Some(ts("2026-11-23T12:30:00Z"));
    w.rollout = Some(r);
    w.reconcile("2026-11-23T10:01:00Z");
    assert_eq!(w.state("dev").0, Active);
}

#[test]
fn the_immediate_schedule_has_no_groups() {
    let mut ver = version("1.0.0", "1.1.0");
    ver.spec.agents.as_mut().unwrap().schedule = Schedule::Immediate;
    let mut w = World::new(Some(config(&three_groups_config())), ver);
    w.reconcile(MON_10);
    assert!(w.rollout().status.groups.is_empty());
    assert_eq!(w.rollout().status.state, RolloutState::Unspecified);
    let d = tern_core::gate::rollout_answer(w.rollout.as_ref(), "dev", "x");
    assert_eq!(
        {
            let u = d.update();
            (d.version.unwrap().to_string(), u)
        },
        ("1.1.0".into(), true)
    );
}

#[test]
fn rollout_state_is_derived_from_the_groups() {
    let g = |s| RolloutGroup {
        state: s,
        ..RolloutGroup::default()
    };
    use rollout::rollout_state as st;
    assert_eq!(st(&[]), RolloutState::Unspecified);
    assert_eq!(st(&[g(Unstarted), g(Unstarted)]), RolloutState::Unstarted);
    assert_eq!(st(&[g(Done), g(Unstarted)]), RolloutState::Active);
    assert_eq!(st(&[g(Canary)]), RolloutState::Active);
    assert_eq!(st(&[g(Done), g(Done)]), RolloutState::Done);
    assert_eq!(
        st(&[g(Done), g(Rolledback), g(Active)]),
        RolloutState::Rolledback
    );
}

#[test]
fn failed_agents_on_the_target_do_not_count_as_up_to_date() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.set_versions("dev", 10, "1.1.0");
    let now = ts("2026-11-23T12:30:00Z");
    let mut report = report_of(now, &w.agents);
    report
        .spec
        .groups
        .get_mut("dev")
        .unwrap()
        .versions
        .get_mut("1.1.0")
        .unwrap()
        .failed_count = 2;
    w.reconcile_with(now, &[report]);
    assert_eq!(w.group("dev").up_to_date_count, 8);
    assert_eq!(w.group("dev").failed_count, 2);
    assert_eq!(w.state("dev").0, Active);
}

/// The tester's run: hosts vanished (their token was revoked), then start-update on a
/// canary group found no candidates and went active, then done with 0/0. A group whose
/// hosts vanished past its budget must hold, with a reason and an alert, until they
/// return or an operator resets it.
#[test]
fn vanished_hosts_hold_the_gates() {
    use tern_core::transition::{Transition, apply};
    let mut w = three_groups();
    w.reconcile("2026-11-23T10:00:00Z");
    assert_eq!(w.group("staging").peak_count, 10);
    // Every staging host vanishes; start-update staging (2 canaries) by hand.
    w.agents.retain(|a| a.group != "staging");
    w.reconcile("2026-11-23T10:05:00Z");
    let start = Transition::StartUpdate {
        groups: vec!["staging".into()],
        force: false,
    };
    let (next, _) = apply(w.rollout(), &start, ts("2026-11-23T10:06:00Z")).unwrap();
    w.rollout = Some(next);
    for at in ["2026-11-23T10:07:00Z", "2026-11-23T10:30:00Z"] {
        w.reconcile(at);
        assert_eq!(
            w.state("staging"),
            (Canary, reason::AGENTS_VANISHED.into()),
            "{at}: no canary skipped"
        );
    }
    let alerts = &w.rollout().status.alerts;
    assert!(
        alerts
            .iter()
            .any(|a| a.kind == "agents_vanished" && a.group.as_deref() == Some("staging")),
        "{alerts:?}"
    );
    // The hosts come back: canaries are picked as usual.
    w.agents.extend(fleet("staging", 10, "1.0.0"));
    w.reconcile("2026-11-23T10:31:00Z");
    assert_eq!(w.state("staging").0, Canary);
    assert_eq!(w.group("staging").canaries.len(), 2);
    assert!(
        w.rollout()
            .status
            .alerts
            .iter()
            .all(|a| a.kind != "agents_vanished")
    );
}

#[test]
fn an_active_group_whose_hosts_vanish_does_not_complete_until_reset() {
    use tern_core::transition::{Transition, apply};
    let mut w = three_groups();
    w.reconcile("2026-11-23T10:00:00Z");
    w.reconcile("2026-11-23T12:00:00Z");
    assert_eq!(w.state("dev").0, Active);
    // Two update; the other eight vanish. 2/2 present are up to date, but 8 of 10 are gone.
    w.set_versions("dev", 2, "1.1.0");
    w.agents
        .retain(|a| a.group != "dev" || a.version == "1.1.0");
    w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(w.state("dev"), (Active, reason::AGENTS_VANISHED.into()));
    assert_eq!(
        w.state("staging").0,
        Unstarted,
        "the next group does not start"
    );
    // The operator accepts the smaller group: reset recounts it, and it completes.
    let reset = Transition::Reset {
        groups: vec!["dev".into()],
    };
    let (next, _) = apply(w.rollout(), &reset, ts("2026-11-23T12:11:00Z")).unwrap();
    w.rollout = Some(next);
    w.reconcile("2026-11-23T12:12:00Z");
    assert_eq!(w.state("dev"), (Done, reason::UPDATE_COMPLETE.into()));
}

/// The report period ternd and the simulator ask for: the active one only while a
/// group tests canaries or is active with updates enabled, and never longer than the
/// quiet one.
#[test]
fn the_active_report_period_holds_while_the_rollout_moves() {
    use tern_core::rollout::{in_motion, report_period};
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let mut r = w.reconcile("2026-11-23T09:00:00Z").clone();
    assert!(!in_motion(&r), "nothing started");
    assert_eq!(report_period(Some(&r), 60, Some(10)), 60);
    assert_eq!(report_period(None, 60, Some(10)), 60);
    for state in [GroupState::Canary, GroupState::Active] {
        r.status.groups[1].state = state;
        assert!(in_motion(&r), "{state:?}");
        assert_eq!(report_period(Some(&r), 60, Some(10)), 10);
        assert_eq!(
            report_period(Some(&r), 60, None),
            60,
            "no active period set"
        );
        assert_eq!(
            report_period(Some(&r), 5, Some(10)),
            5,
            "never slower than quiet"
        );
    }
    r.spec.autoupdate_mode = Mode::Suspended;
    assert!(!in_motion(&r), "a suspended rollout does not move");
    r.spec.autoupdate_mode = Mode::Enabled;
    r.status.groups[1].state = GroupState::Done;
    assert!(!in_motion(&r), "done groups do not move");
}

/// A change among a replica's hosts brings its next report forward while the rollout
/// moves: `after_change` after the change, never sooner than `after_change` after the
/// last report, never later than the regular period.
#[test]
fn a_change_brings_the_next_report_forward_only_while_the_rollout_moves() {
    use tern_core::rollout::{ReportPeriods, next_report};
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let mut r = w.reconcile("2026-11-23T09:00:00Z").clone();
    let periods = ReportPeriods {
        quiet: 60,
        active: Some(10),
        after_change: Some(2),
    };
    let last = 100;
    assert_eq!(
        next_report(Some(&r), &periods, last, Some(101)),
        160,
        "nothing moves: a change waits for the quiet period"
    );
    assert_eq!(next_report(None, &periods, last, Some(101)), 160);
    r.status.groups[1].state = GroupState::Active;
    assert_eq!(next_report(Some(&r), &periods, last, None), 110);
    assert_eq!(
        next_report(Some(&r), &periods, last, Some(105)),
        107,
        "two seconds after the change"
    );
    assert_eq!(
        next_report(Some(&r), &periods, last, Some(100)),
        102,
        "a change at the report itself"
    );
    assert_eq!(
        next_report(Some(&r), &periods, last, Some(109)),
        110,
        "never later than the active period"
    );
    assert_eq!(
        next_report(Some(&r), &periods, last, Some(99)),
        102,
        "at most one report per two seconds, even for a change before the last report"
    );
    let off = ReportPeriods {
        after_change: None,
        ..periods
    };
    assert_eq!(next_report(Some(&r), &off, last, Some(105)), 110);
    r.spec.autoupdate_mode = Mode::Suspended;
    assert_eq!(next_report(Some(&r), &periods, last, Some(105)), 160);
}

/// Reports of `agents` at `now`, the first one from a replica still warming up (just
/// restarted: its hosts have not all heartbeated and settled yet).
fn warming(now: &str, agents: &[ConnectedAgent]) -> Vec<AutoUpdateAgentReport> {
    let mut r = report_of(ts(now), agents);
    r.spec.warming_up = true;
    vec![r]
}

/// A replica that just started counts too few hosts: no group starts on its counts
/// (the initial count backpressure protects, the canaries picked), and a canary group
/// with nobody counted yet does not skip its canaries. Once it has warmed up, the
/// group starts as it would have.
#[test]
fn no_group_starts_on_the_counts_of_a_replica_warming_up() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.reconcile(MON_10);
    // Just restarted: nobody counted yet, but hosts are reconnecting.
    w.reconcile_with(ts(MON_12), &warming(MON_12, &[]));
    assert_eq!(
        w.state("dev"),
        (Unstarted, reason::WAITING_FOR_REPORTS.into())
    );
    assert_eq!(w.group("dev").start_time, None);
    // Warmed up, the hosts counted: dev starts with its real initial count.
    w.agents.extend(fleet("dev", 5, "1.0.0"));
    w.agents.extend(fleet("staging", 5, "1.0.0"));
    w.reconcile("2026-11-23T12:07:00Z");
    assert_eq!(w.state("dev").0, Active);
    assert_eq!(w.group("dev").initial_count, 5);
    w.set_versions("dev", 5, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(w.state("dev").0, Done);
    // staging (2 canaries) opens at 14:00 while a replica restarted again and counts
    // nobody yet: it neither starts nor, once started, skips its canaries.
    let at = "2026-11-23T14:00:00Z";
    let dev_only: Vec<ConnectedAgent> = w
        .agents
        .iter()
        .filter(|a| a.group == "dev")
        .cloned()
        .collect();
    w.reconcile_with(ts(at), &warming(at, &dev_only));
    assert_eq!(
        w.state("staging"),
        (Unstarted, reason::WAITING_FOR_REPORTS.into())
    );
    w.reconcile("2026-11-23T14:02:00Z");
    assert_eq!(w.state("staging").0, Canary);
    assert_eq!(w.group("staging").canaries.len(), 2);
}

/// The same for a group in canary that has not picked its canaries yet (as after an
/// operator's reset), and for a time-based group whose window opens.
#[test]
fn a_replica_warming_up_holds_canary_picks_and_time_based_starts() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents.extend(fleet("dev", 3, "1.0.0"));
    w.agents.extend(fleet("staging", 4, "1.0.0"));
    w.reconcile(MON_10);
    w.reconcile(MON_12);
    w.set_versions("dev", 3, "1.1.0");
    w.reconcile("2026-11-23T12:30:00Z");
    w.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(w.state("staging").0, Canary);
    // Its canaries cleared, and the only report from a replica that counts no staging
    // host yet.
    let dev_only: Vec<ConnectedAgent> = w
        .agents
        .iter()
        .filter(|a| a.group == "dev")
        .cloned()
        .collect();
    let cleared = {
        let mut r = w.rollout().clone();
        r.status.groups[1].canaries.clear();
        // As in a rollout just created: no peak yet, so the vanished-hosts rule does
        // not hold it.
        r.status.groups[1].peak_count = 0;
        r
    };
    let at = ts("2026-11-23T14:05:00Z");
    let everyone = std::mem::replace(&mut w.agents, dev_only.clone());
    w.rollout = Some(cleared.clone());
    let mut reports = warming("2026-11-23T14:05:00Z", &dev_only);
    w.reconcile_with(at, &reports);
    assert_eq!(
        w.state("staging"),
        (Canary, reason::WAITING_FOR_CANARIES.into()),
        "no canary group goes active for want of counted hosts while a replica warms up"
    );
    // The same counts from a replica that has warmed up: nobody there, it goes active.
    w.rollout = Some(cleared);
    reports[0].spec.warming_up = false;
    w.reconcile_with(at, &reports);
    assert_eq!(
        w.state("staging"),
        (Active, reason::UPDATE_IN_PROGRESS.into())
    );
    w.agents = everyone;

    let mut t = World::new(Some(config(TIME_BASED)), version("1.0.0", "1.1.0"));
    t.agents.extend(fleet("europe", 4, "1.0.0"));
    t.reconcile("2026-11-23T10:00:00Z");
    let at = "2026-11-23T12:00:00Z";
    let agents = t.agents.clone();
    t.reconcile_with(ts(at), &warming(at, &agents));
    assert_eq!(
        t.state("europe"),
        (Unstarted, reason::WAITING_FOR_REPORTS.into())
    );
    t.reconcile("2026-11-23T12:02:00Z");
    assert_eq!(t.state("europe"), (Active, reason::IN_WINDOW.into()));
    assert_eq!(t.group("europe").initial_count, 4);
}

/// After a restart the replica has not seen its hosts yet: what its first reports
/// lack is not a vanished fleet. No alert is raised from counts it has not observed
/// (an active group with a peak of 10 and nobody counted yet, a canary group that
/// still has to pick), and the group waits for reports instead of halting. An alert
/// raised before the restart is neither cleared nor raised again meanwhile. Warmed
/// up, a fleet that is really gone raises `agents_vanished` as before.
#[test]
fn no_alert_is_raised_from_counts_a_warming_replica_has_not_observed() {
    use tern_core::transition::{Transition, apply};
    let mut w = three_groups();
    w.reconcile("2026-11-23T10:00:00Z");
    w.reconcile("2026-11-23T12:00:00Z");
    assert_eq!(w.state("dev").0, Active);
    assert_eq!(w.group("dev").peak_count, 10);
    // ternd restarts: its only report is warming up and counts nobody yet.
    let at = "2026-11-23T12:05:00Z";
    w.reconcile_with(ts(at), &warming(at, &[]));
    assert_eq!(
        w.state("dev"),
        (Active, reason::WAITING_FOR_REPORTS.into()),
        "an active group neither halts nor completes on a warming replica's counts"
    );
    assert!(
        w.rollout().status.alerts.is_empty(),
        "{:?}",
        w.rollout().status.alerts
    );
    // A canary group (reset: it picks again) while the replica warms up.
    let reset = Transition::Reset {
        groups: vec!["staging".into()],
    };
    let start = Transition::StartUpdate {
        groups: vec!["staging".into()],
        force: false,
    };
    let (next, _) = apply(w.rollout(), &start, ts("2026-11-23T12:06:00Z")).unwrap();
    let (next, _) = apply(&next, &reset, ts("2026-11-23T12:06:00Z")).unwrap();
    w.rollout = Some(next);
    let at = "2026-11-23T12:07:00Z";
    w.reconcile_with(ts(at), &warming(at, &[]));
    assert_eq!(w.state("staging").0, Canary);
    assert_ne!(
        w.state("staging").1,
        reason::AGENTS_VANISHED,
        "not observed is not vanished"
    );
    assert!(
        w.rollout().status.alerts.is_empty(),
        "{:?}",
        w.rollout().status.alerts
    );
    // Warmed up, dev's hosts really gone: the alert is raised.
    let dev_gone: Vec<ConnectedAgent> = w
        .agents
        .iter()
        .filter(|a| a.group != "dev")
        .cloned()
        .collect();
    w.agents = dev_gone;
    w.reconcile("2026-11-23T12:10:00Z");
    let kinds: Vec<_> = w
        .rollout()
        .status
        .alerts
        .iter()
        .map(|a| a.kind.clone())
        .collect();
    assert!(kinds.contains(&"agents_vanished".to_string()), "{kinds:?}");
    // Another restart: the raised alert stays as it was (same since), none is added.
    let before = w.rollout().status.alerts.clone();
    let at = "2026-11-23T12:12:00Z";
    w.reconcile_with(ts(at), &warming(at, &[]));
    assert_eq!(w.rollout().status.alerts, before);
}

/// dev and staging both open every day at 12:00 for an hour, dev without canaries;
/// the rollout (created at 12:10, inside the window) follows within the window or not.
fn same_window(follow_in_window: bool) -> World {
    use tern_core::fixtures::{group, halt_on_error_config};
    let mut v = version("1.0.0", "1.1.0");
    if let Some(a) = v.spec.agents.as_mut() {
        a.follow_in_window = follow_in_window;
    }
    let mut w = World::new(
        Some(config(&halt_on_error_config(
            "enabled",
            &[group("dev", 12), group("staging", 12)],
        ))),
        v,
    );
    w.agents.extend(fleet("dev", 4, "1.0.0"));
    w.agents.extend(fleet("staging", 4, "1.0.0"));
    w
}

/// Starts `group` by hand, as `ternctl agents start-update` does.
fn start_by_hand(w: &mut World, group: &str, at: &str) {
    let t = tern_core::transition::Transition::StartUpdate {
        groups: vec![group.to_string()],
        force: false,
    };
    let (next, _) = tern_core::transition::apply(w.rollout(), &t, ts(at)).unwrap();
    w.rollout = Some(next);
}

/// A rollout created inside its groups' window: by default each group waits for a
/// window that opens after the rollout began (the operator starts the first by hand,
/// then every later one); following within the window, the later groups start as
/// soon as the groups before them are done, while the window is open. The first group
/// never follows anything: it waits, or is started by hand.
#[test]
fn later_groups_follow_within_the_window_only_when_the_rollout_says_so() {
    for follow in [false, true] {
        let mut w = same_window(follow);
        w.reconcile("2026-11-23T12:10:00Z");
        assert_eq!(w.rollout().status.follow_in_window, follow);
        assert_eq!(
            w.state("dev"),
            (Unstarted, reason::ROLLOUT_CHANGED_DURING_WINDOW.into()),
            "follow {follow}"
        );
        start_by_hand(&mut w, "dev", "2026-11-23T12:11:00Z");
        w.reconcile("2026-11-23T12:12:00Z");
        assert_eq!(w.state("dev").0, Active);
        w.set_versions("dev", 4, "1.1.0");
        w.reconcile("2026-11-23T12:20:00Z");
        assert_eq!(w.state("dev").0, Done, "follow {follow}");
        let staging = w.state("staging");
        if follow {
            assert_eq!(staging, (Active, reason::UPDATE_IN_PROGRESS.into()));
            assert_eq!(w.group("staging").initial_count, 4);
        } else {
            assert_eq!(
                staging,
                (Unstarted, reason::ROLLOUT_CHANGED_DURING_WINDOW.into())
            );
            // The next window opened after the rollout began: it starts then.
            w.reconcile("2026-11-24T12:01:00Z");
            assert_eq!(w.state("staging").0, Active);
        }
    }
}

/// Following within the window never starts a group outside it: once the window
/// closed, the group waits for the next one, as without.
#[test]
fn following_within_the_window_waits_once_the_window_closed() {
    let mut w = same_window(true);
    w.reconcile("2026-11-23T12:10:00Z");
    start_by_hand(&mut w, "dev", "2026-11-23T12:11:00Z");
    w.reconcile("2026-11-23T12:12:00Z");
    w.set_versions("dev", 4, "1.1.0");
    w.reconcile("2026-11-23T13:20:00Z");
    assert_eq!(w.state("dev").0, Done);
    assert_eq!(w.state("staging"), (Unstarted, reason::CANNOT_START.into()));
    w.reconcile("2026-11-24T12:00:00Z");
    assert_eq!(w.state("staging").0, Active);
}

/// Time-based groups follow their own windows, never each other: the flag changes
/// nothing for them.
#[test]
fn time_based_groups_ignore_follow_in_window() {
    let mut v = version("1.0.0", "1.1.0");
    v.spec.agents.as_mut().unwrap().follow_in_window = true;
    let mut w = World::new(Some(config(TIME_BASED)), v);
    w.agents.extend(fleet("us-east", 3, "1.0.0"));
    w.agents.extend(fleet("europe", 3, "1.0.0"));
    w.reconcile("2026-11-23T12:30:00Z");
    assert_eq!(
        w.state("europe"),
        (Unstarted, reason::ROLLOUT_CHANGED_DURING_WINDOW.into())
    );
}

/// A group started by hand takes the count of the last reconcile, which may be none at
/// all (a rollout new-rollout just wrote, hosts a restarted replica has not settled):
/// the next reconcile whose reports can tell takes the hosts present then, so that
/// backpressure and completion measure the group against its real size.
#[test]
fn a_group_started_by_hand_counts_its_hosts_at_the_first_reconcile_that_can() {
    let mut w = three_groups();
    // The rollout as new-rollout writes it: no reconcile has counted anything yet.
    let reconcile::Renewal::Fresh { rollout, .. } = reconcile::renew(
        ts(MON_10),
        reconcile::Resources {
            config: w.config.as_ref(),
            version: w.version.as_ref(),
            rollout: None,
            frozen: false,
        },
        false,
    ) else {
        panic!("a new rollout is due");
    };
    assert_eq!(rollout.group("dev").unwrap().present_count, 0);
    w.rollout = Some(*rollout);
    start_by_hand(&mut w, "dev", MON_10);
    assert_eq!(w.group("dev").initial_count, 0);
    assert!(w.group("dev").initial_count_pending);
    // A replica warming up cannot tell yet: the count waits.
    w.reconcile_with(
        ts("2026-11-23T10:01:00Z"),
        &warming("2026-11-23T10:01:00Z", &[]),
    );
    assert_eq!(w.group("dev").initial_count, 0);
    assert!(w.group("dev").initial_count_pending);
    // Reports that can tell: the ten hosts of dev.
    w.reconcile("2026-11-23T10:02:00Z");
    assert_eq!(w.group("dev").initial_count, 10);
    assert!(!w.group("dev").initial_count_pending);
    // Taken once: hosts leaving later do not change what the group started with.
    w.agents
        .retain(|a| a.group != "dev" || a.hostname != "dev-0.example");
    w.reconcile("2026-11-23T10:03:00Z");
    assert_eq!(w.group("dev").initial_count, 10);
}

/// new-rollout's renewal: a new rollout when the versions changed (or none exists),
/// none when they did not; with `config_too`, also when the rollout runs an older
/// copy of the config's groups.
#[test]
fn renew_replaces_the_rollout_only_when_the_resources_ask_for_another() {
    let mut w = three_groups();
    w.reconcile(MON_10);
    fn resources(w: &World) -> reconcile::Resources<'_> {
        reconcile::Resources {
            config: w.config.as_ref(),
            version: w.version.as_ref(),
            rollout: w.rollout.as_ref(),
            frozen: false,
        }
    }
    let now = ts("2026-11-23T10:05:00Z");
    assert_eq!(
        reconcile::renew(now, resources(&w), false),
        reconcile::Renewal::Current
    );
    assert_eq!(
        reconcile::renew(now, resources(&w), true),
        reconcile::Renewal::Current
    );
    assert!(reconcile::config_changes(w.config.as_ref(), w.rollout()).is_empty());
    // The config gains an analysis-free change: staging loses its canaries.
    use tern_core::fixtures::{group, halt_on_error_config};
    w.config = Some(config(&halt_on_error_config(
        "enabled",
        &[
            group("dev", 12),
            group("staging", 15),
            group("prod", 16)
                .days(&["Mon", "Tue", "Wed", "Thu"])
                .wait(24),
            group("edge", 18),
        ],
    )));
    assert_eq!(
        reconcile::config_changes(w.config.as_ref(), w.rollout()),
        vec![
            "edge added".to_string(),
            "staging: window, canary_count".to_string()
        ]
    );
    assert_eq!(
        reconcile::renew(now, resources(&w), false),
        reconcile::Renewal::Current
    );
    let reconcile::Renewal::Fresh { rollout, events } = reconcile::renew(now, resources(&w), true)
    else {
        panic!("the config changed");
    };
    assert_eq!(rollout.status.groups.len(), 4);
    assert!(reconcile::config_changes(w.config.as_ref(), &rollout).is_empty());
    assert!(
        matches!(&events[..], [Event::RolloutCreated { why, .. }] if why.contains("config changed"))
    );
    // A new target: renewed, the hosts seen carried over as peaks.
    w.version = Some(version("1.1.0", "1.2.0"));
    let reconcile::Renewal::Fresh { rollout, .. } = reconcile::renew(now, resources(&w), false)
    else {
        panic!("the target changed");
    };
    assert_eq!(rollout.spec.target_version.to_string(), "1.2.0");
    assert_eq!(rollout.group("dev").unwrap().peak_count, 10);
    assert!(rollout.status.groups.iter().all(|g| g.state == Unstarted));
    // What the reconcile then does with it: nothing new to create.
    w.rollout = Some(*rollout);
    w.reconcile("2026-11-23T10:06:00Z");
    assert!(
        !w.events
            .iter()
            .any(|e| matches!(e, Event::RolloutCreated { .. })),
        "{:?}",
        w.events
    );
    w.version = None;
    assert!(matches!(
        reconcile::renew(now, resources(&w), false),
        reconcile::Renewal::NoRollout { .. }
    ));
}

/// A host is told its window before any rollout exists (seed 001: the cluster's window
/// whether or not a rollout exists): from the config's groups, the catch-all's for a
/// group the config lacks; once a rollout has groups, from the rollout's.
#[test]
fn the_maintenance_schedule_comes_from_the_config_until_a_rollout_has_groups() {
    let cfg = config(&three_groups_config());
    let now = ts(MON_10);
    let window = |r: Option<&AutoUpdateAgentRollout>, group: &str| {
        let s = reconcile::maintenance_schedule(Some(&cfg), r, group, now, 3).unwrap();
        (s.group, s.start_hour)
    };
    assert_eq!(window(None, "staging"), ("staging".to_string(), 14));
    assert_eq!(window(None, "prdo"), ("prod".to_string(), 16));
    let mut w = three_groups();
    let mut r = w.reconcile(MON_10).clone();
    r.status.groups[1].config.start_hour = Some(9);
    assert_eq!(window(Some(&r), "staging"), ("staging".to_string(), 9));
    // Without a config: one default group.
    let s = reconcile::maintenance_schedule(None, None, "dev", now, 3).unwrap();
    assert_eq!(s.group, "default");
}
