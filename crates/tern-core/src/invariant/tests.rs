use super::*;
use crate::domain::resource::{Canary, GroupConfig, RolloutSpec, RolloutStatus};
use crate::domain::version::Version;
use crate::domain::window::Day;

fn at(m: i64) -> Timestamp {
    Timestamp::from_second(1_795_420_800 + m * 60).unwrap()
}

fn rollout(dev: GroupState, prod: GroupState, mode: Mode) -> AutoUpdateAgentRollout {
    let group = |name: &str, state| RolloutGroup {
        name: name.into(),
        state,
        config: GroupConfig {
            canary_count: 1,
            days: vec![Day::parse("*").unwrap()],
            ..GroupConfig::default()
        },
        ..RolloutGroup::default()
    };
    AutoUpdateAgentRollout::new(
        RolloutSpec {
            start_version: Version::parse("1.0.0").unwrap(),
            target_version: Version::parse("1.1.0").unwrap(),
            schedule: Schedule::Regular,
            autoupdate_mode: mode,
            strategy: Strategy::HaltOnError,
            maintenance_window_duration: None,
            host_group: Default::default(),
        },
        RolloutStatus {
            start_time: Some(at(0)),
            groups: vec![group("dev", dev), group("prod", prod)],
            ..RolloutStatus::default()
        },
    )
}

fn state(r: AutoUpdateAgentRollout, frozen: bool, m: i64) -> TraceEvent {
    TraceEvent::agent_state(at(m), Some(r), frozen, BTreeMap::new())
}

fn install(host: &str, group: &str, to: &str, kind: InstallKind, m: i64) -> TraceEvent {
    via(host, group, to, kind, Via::Find, m)
}

fn via(host: &str, group: &str, to: &str, kind: InstallKind, via: Via, m: i64) -> TraceEvent {
    TraceEvent::Install {
        at: at(m),
        product: "agent".into(),
        host: host.into(),
        group: group.into(),
        labels: BTreeMap::new(),
        from: Some("1.0.0".into()),
        to: to.into(),
        kind,
        via,
        signed: None,
        pinned_root: false,
    }
}

fn trace(events: Vec<TraceEvent>) -> Trace {
    Trace {
        grace_seconds: 0,
        events,
    }
}

fn active() -> AutoUpdateAgentRollout {
    rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled)
}

#[test]
fn installs_the_rollout_names_hold() {
    let t = trace(vec![
        state(active(), false, 1),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
        install("b", "prod", "1.1.0", InstallKind::Forced, 3),
        // update --now installs what the table names prod (its start version).
        install("c", "prod", "1.0.0", InstallKind::AskedNow, 4),
        // A first install takes the group's version.
        install("d", "dev", "1.1.0", InstallKind::FirstInstall, 5),
        via(
            "e",
            "prod",
            "2.0.0",
            InstallKind::Scheduled,
            Via::Channel,
            6,
        ),
    ]);
    assert_eq!(check(&t), Ok(()));
}

#[test]
fn every_stop_holds_every_path_and_kind() {
    let frozen = |m| state(active(), true, m);
    let suspended = |m| {
        state(
            rollout(GroupState::Active, GroupState::Unstarted, Mode::Suspended),
            false,
            m,
        )
    };
    let pinned = |m| {
        TraceEvent::agent_state(
            at(m),
            Some(active()),
            false,
            [("a".to_string(), at(99))].into(),
        )
    };
    let cut = |m| TraceEvent::State {
        at: at(m),
        product: "agent".into(),
        rollout: Some(Box::new(active())),
        mode: Some(Mode::Enabled),
        mode_recorded: true,
        frozen: false,
        pins: BTreeMap::new(),
        minimums: BTreeMap::new(),
        cut_off: true,
    };
    let states: [&dyn Fn(i64) -> TraceEvent; 4] = [&frozen, &suspended, &pinned, &cut];
    for s in states {
        for (kind, path) in [
            (InstallKind::Scheduled, Via::Find),
            (InstallKind::AskedNow, Via::Find),
            (InstallKind::Repair, Via::Find),
            (InstallKind::Scheduled, Via::Channel),
            (InstallKind::Scheduled, Via::Directive),
        ] {
            let t = trace(vec![s(1), via("a", "dev", "1.1.0", kind, path, 2)]);
            let v = check(&t).unwrap_err();
            assert_eq!((v.index, v.rule), (1, "stop"), "{kind:?} {path:?}: {v}");
        }
        // A first install under a stop takes the start version, never the target.
        let t = trace(vec![
            s(1),
            install("a", "dev", "1.1.0", InstallKind::FirstInstall, 2),
        ]);
        let v = check(&t).unwrap_err();
        assert_eq!(v.rule, "stop");
        // The verdict says which version a first install may take.
        assert!(
            v.to_string()
                .contains("under a stop a first install takes the start version 1.0.0"),
            "{v}"
        );
        let t = trace(vec![
            s(1),
            install("a", "dev", "1.0.0", InstallKind::FirstInstall, 2),
        ]);
        assert_eq!(check(&t), Ok(()));
        // A person's explicit command is the one exception.
        let t = trace(vec![
            s(1),
            install("a", "dev", "1.1.0", InstallKind::Forced, 2),
        ]);
        assert_eq!(check(&t), Ok(()));
    }
}

#[test]
fn a_mode_set_nowhere_stops_the_rollout_but_not_channels() {
    let unset = TraceEvent::State {
        at: at(1),
        product: "agent".into(),
        rollout: Some(Box::new(active())),
        mode: None,
        mode_recorded: true,
        frozen: false,
        pins: BTreeMap::new(),
        minimums: BTreeMap::new(),
        cut_off: false,
    };
    let t = trace(vec![
        unset.clone(),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
    ]);
    assert_eq!(check(&t).unwrap_err().rule, "stop");
    let t = trace(vec![
        unset,
        via("a", "dev", "1.1.0", InstallKind::Scheduled, Via::Channel, 2),
    ]);
    assert_eq!(check(&t), Ok(()));
}

#[test]
fn a_revoked_version_is_never_installed() {
    let s = TraceEvent::State {
        at: at(1),
        product: "updater".into(),
        rollout: Some(Box::new(active())),
        mode: Some(Mode::Enabled),
        mode_recorded: true,
        frozen: false,
        pins: BTreeMap::new(),
        minimums: [("1".to_string(), "1.0.5".to_string())].into(),
        cut_off: false,
    };
    let mut i = install("a", "dev", "1.0.0", InstallKind::Forced, 2);
    if let TraceEvent::Install { product, .. } = &mut i {
        *product = "updater".into();
    }
    let v = check(&trace(vec![s.clone(), i.clone()])).unwrap_err();
    assert_eq!(v.rule, "revoked", "{v}");
    // The minimums are the product's: the agent's line is not the updater's.
    if let TraceEvent::Install { product, .. } = &mut i {
        *product = "agent".into();
    }
    assert_eq!(check(&trace(vec![s, i])), Ok(()));
}

#[test]
fn an_install_of_what_the_table_does_not_name_is_caught() {
    let t = trace(vec![
        state(active(), false, 1),
        install("b", "prod", "1.1.0", InstallKind::Scheduled, 2),
    ]);
    let v = check(&t).unwrap_err();
    assert_eq!(v.rule, "table", "{v}");
    assert!(v.message.contains("unstarted"), "{v}");
    // --now cannot jump to the target either: the table names prod the start version.
    let t = trace(vec![
        state(active(), false, 1),
        install("b", "prod", "1.1.0", InstallKind::AskedNow, 2),
    ]);
    assert_eq!(check(&t).unwrap_err().rule, "table");
    // A canary group's other hosts stay on the start version; its canary moves.
    let mut canary = rollout(GroupState::Canary, GroupState::Unstarted, Mode::Enabled);
    canary.status.groups[0].canaries = vec![Canary {
        updater_id: "a".into(),
        ..Canary::default()
    }];
    let t = trace(vec![
        state(canary.clone(), false, 1),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
    ]);
    assert_eq!(check(&t), Ok(()));
    let t = trace(vec![
        state(canary, false, 1),
        install("x", "dev", "1.1.0", InstallKind::Repair, 2),
    ]);
    assert_eq!(check(&t).unwrap_err().rule, "table");
    // A time-based group outside its window (done) installs nothing on its own.
    let mut tb = rollout(GroupState::Done, GroupState::Done, Mode::Enabled);
    tb.spec.strategy = Strategy::TimeBased;
    let t = trace(vec![
        state(tb, false, 1),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
    ]);
    assert_eq!(check(&t).unwrap_err().rule, "table");
}

#[test]
fn a_failed_canary_contains_its_version() {
    let mut failed = rollout(GroupState::Canary, GroupState::Unstarted, Mode::Enabled);
    failed.status.groups[0].canaries = vec![Canary {
        updater_id: "a".into(),
        failed: true,
        ..Canary::default()
    }];
    let mut canary = failed.clone();
    canary.status.groups[0].canaries[0].failed = false;
    let ok = trace(vec![
        state(canary, false, 1),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
        state(failed.clone(), false, 3),
    ]);
    assert_eq!(check(&ok), Ok(()));
    // A reconcile that (wrongly) takes dev as done lets prod start; a prod host
    // installs the failed version: the table allows it, containment does not.
    let mut wrong = failed.clone();
    wrong.status.groups[0].state = GroupState::Done;
    wrong.status.groups[1].state = GroupState::Active;
    wrong.status.groups[1].canaries = vec![Canary {
        updater_id: "q".into(),
        success: true,
        ..Canary::default()
    }];
    let mut broken = ok.clone();
    broken.events.push(state(wrong.clone(), false, 4));
    broken
        .events
        .push(install("p", "prod", "1.1.0", InstallKind::Scheduled, 5));
    let v = check(&broken).unwrap_err();
    assert_eq!((v.index, v.rule), (4, "canary_containment"), "{v}");
    // Within dev: a second dev host, with dev active (not by hand), is one too many.
    let mut second = ok.clone();
    let mut dev_active = failed.clone();
    dev_active.status.groups[0].state = GroupState::Active;
    second.events.push(state(dev_active.clone(), false, 4));
    second
        .events
        .push(install("b", "dev", "1.1.0", InstallKind::Scheduled, 5));
    assert_eq!(check(&second).unwrap_err().rule, "canary_containment");
    // An operator who forced it (start-update --force) decided so.
    dev_active.status.groups[0].last_update_reason = reason::MANUAL_TRIGGER.into();
    second.events[3] = state(dev_active, false, 4);
    assert_eq!(check(&second), Ok(()));
    // A failure on a later group's canary contains that group and those after it, not
    // an earlier one: a dev host (dev done) may still install the version prod's
    // canary failed on.
    let mut prod_failed = rollout(GroupState::Done, GroupState::Canary, Mode::Enabled);
    prod_failed.status.groups[1].canaries = vec![Canary {
        updater_id: "q".into(),
        failed: true,
        ..Canary::default()
    }];
    let mut prod_canary = prod_failed.clone();
    prod_canary.status.groups[1].canaries[0].failed = false;
    let earlier = trace(vec![
        state(prod_canary, false, 1),
        install("q", "prod", "1.1.0", InstallKind::Scheduled, 2),
        state(prod_failed, false, 3),
        install("d", "dev", "1.1.0", InstallKind::Scheduled, 4),
    ]);
    assert_eq!(check(&earlier), Ok(()));
}

#[test]
fn a_group_that_skips_its_canaries_is_caught() {
    let mut skipped = active();
    skipped.status.groups[0].last_update_reason = reason::NO_CANARY_CANDIDATES.into();
    let t = trace(vec![
        state(skipped, false, 1),
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
        install("b", "dev", "1.1.0", InstallKind::Scheduled, 3),
    ]);
    let v = check(&t).unwrap_err();
    assert_eq!((v.index, v.rule), (2, "canaries_first"), "{v}");
    let mut vetted = active();
    vetted.status.groups[0].canaries = vec![Canary {
        updater_id: "c".into(),
        success: true,
        ..Canary::default()
    }];
    let mut ok = t.clone();
    ok.events[0] = state(vetted, false, 1);
    assert_eq!(check(&ok), Ok(()));
}

fn report(host: &str, version: &str, healthy: Option<bool>, m: i64) -> TraceEvent {
    TraceEvent::Report {
        at: at(m),
        product: "agent".into(),
        host: host.into(),
        version: Some(version.into()),
        healthy,
    }
}

#[test]
fn canaries_pass_on_what_they_reported_not_on_the_rollouts_word() {
    let mut passed = active();
    passed.status.groups[0].canaries = vec![Canary {
        updater_id: "c".into(),
        success: true,
        ..Canary::default()
    }];
    let rest = |m| {
        vec![
            install("a", "dev", "1.1.0", InstallKind::Scheduled, m),
            install("b", "dev", "1.1.0", InstallKind::Scheduled, m),
        ]
    };
    // The canary said it runs the target, unhealthy (or cannot tell, or runs another
    // version): the rollout marking it a success does not vet the group.
    for (version, healthy) in [
        ("1.1.0", Some(false)),
        ("1.1.0", None),
        ("1.0.0", Some(true)),
    ] {
        let mut events = vec![
            report("c", "1.1.0", Some(true), 0),
            report("c", version, healthy, 1),
            state(passed.clone(), false, 1),
        ];
        events.extend(rest(2));
        let v = check(&trace(events)).unwrap_err();
        assert_eq!(
            (v.index, v.rule),
            (4, "canaries_first"),
            "{version} {healthy:?}: {v}"
        );
    }
    // Its last report healthy on the target vets it, and so, within the grace a
    // replica may lag by, does a healthy one before a later unhealthy one.
    let mut events = vec![
        report("c", "1.1.0", Some(true), 1),
        state(passed.clone(), false, 1),
    ];
    events.extend(rest(2));
    assert_eq!(check(&trace(events)), Ok(()));
    let mut events = vec![
        report("c", "1.1.0", Some(true), 0),
        report("c", "1.1.0", Some(false), 1),
        state(passed.clone(), false, 1),
    ];
    events.extend(rest(2));
    let mut lagging = trace(events);
    lagging.grace_seconds = 120;
    assert_eq!(check(&lagging), Ok(()));
    // A canary that never reported proves nothing where others did.
    let mut events = vec![report("x", "1.1.0", Some(true), 0), state(passed, false, 1)];
    events.extend(rest(2));
    assert_eq!(check(&trace(events)).unwrap_err().rule, "canaries_first");
}

#[test]
fn a_group_that_leaves_unstarted_before_the_previous_is_done_is_caught() {
    for later in [GroupState::Active, GroupState::Canary, GroupState::Done] {
        let t = trace(vec![
            state(active(), false, 1),
            state(rollout(GroupState::Active, later, Mode::Enabled), false, 2),
        ]);
        let v = check(&t).unwrap_err();
        assert_eq!((v.index, v.rule), (1, "group_order"), "{later:?}");
    }
}

#[test]
fn a_pinned_root_never_installs_an_unsigned_version() {
    let mut i = install("a", "dev", "1.1.0", InstallKind::Forced, 2);
    if let TraceEvent::Install {
        signed,
        pinned_root,
        ..
    } = &mut i
    {
        *signed = Some(false);
        *pinned_root = true;
    }
    let mut t = trace(vec![state(active(), false, 1), i]);
    assert_eq!(check(&t).unwrap_err().rule, "trust");
    if let TraceEvent::Install { signed, .. } = &mut t.events[1] {
        *signed = Some(true);
    }
    assert_eq!(check(&t), Ok(()));
}

#[test]
fn products_are_judged_by_their_own_states() {
    // The updater's rollout is frozen; the agent's is not.
    let updater_frozen = TraceEvent::State {
        at: at(1),
        product: "updater".into(),
        rollout: Some(Box::new(active())),
        mode: Some(Mode::Enabled),
        mode_recorded: true,
        frozen: true,
        pins: BTreeMap::new(),
        minimums: BTreeMap::new(),
        cut_off: false,
    };
    let mut up = install("a", "dev", "1.1.0", InstallKind::Scheduled, 2);
    if let TraceEvent::Install { product, .. } = &mut up {
        *product = "updater".into();
    }
    let t = trace(vec![
        state(active(), false, 1),
        updater_frozen,
        install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
        up,
    ]);
    let v = check(&t).unwrap_err();
    assert_eq!((v.index, v.rule), (3, "stop"), "{v}");
}

/// The judge is not the defendant: this module names none of the code it judges. It
/// may use the resource types (fields only), versions, reason strings and its own code.
#[test]
fn the_judge_calls_none_of_the_code_it_judges() {
    let source = include_str!("../invariant.rs");
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let allowed = [
        "crate::domain::reason",
        "crate::domain::resource",
        "crate::domain::version",
    ];
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let path: String = rest[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        assert!(
            allowed.iter().any(|a| path.starts_with(a)),
            "invariant.rs names {path}: the judge must state its rules itself"
        );
        rest = &rest[i + 7..];
    }
    for judged in [
        "super::",
        "gate",
        "host_update",
        "rollout::",
        "backpressure",
        "reconcile",
        "canary::",
        "forecast",
        "transition",
        ".serving_group(",
        ".group(",
        ".mode(",
        "mode_in_force",
        "topology_admits",
    ] {
        let hits: Vec<&str> = code
            .lines()
            .filter(|l| l.contains(judged) && !l.contains("mod tests"))
            .collect();
        assert!(hits.is_empty(), "invariant.rs uses {judged}: {hits:?}");
    }
}

#[test]
fn a_host_is_judged_in_the_group_its_labels_place_it() {
    // dev places by the label env=dev; under `host_group: override` a group the host
    // presents wins only when the rollout has it.
    let mut r = active();
    r.spec.host_group = crate::domain::resource::HostGroup::Override;
    r.status.groups[0].config.match_labels = [("env".to_string(), "dev".to_string())].into();
    let by_labels = |presented: &str| {
        let mut event = install("a", presented, "1.1.0", InstallKind::Scheduled, 2);
        if let TraceEvent::Install { labels, .. } = &mut event {
            labels.insert("env".into(), "dev".into());
        }
        check(&trace(vec![state(r.clone(), false, 1), event]))
    };
    // A group the rollout lacks: placed by its labels, in dev (active).
    assert_eq!(by_labels("nowhere"), Ok(()));
    // prod, which the rollout has, wins over the labels: prod has not started.
    assert_eq!(by_labels("prod").unwrap_err().rule, "table");
}
