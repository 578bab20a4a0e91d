//! Teleport's RFD 169 draft files, as the draft prints them, translated to the
//! resources Tern stores; and the draft's fields Tern refuses, each named with what to
//! write instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::duration::{GoDuration, Percent};
use tern_core::fixtures::rfd169;
use tern_core::resource::{Mode, Schedule};
use tern_core::rfd169::{config, version};
use tern_core::window::Day;

fn notes<T>(t: &tern_core::rfd169::Translated<T>) -> Vec<String> {
    t.notes.iter().map(ToString::to_string).collect()
}

#[test]
fn the_drafts_config_example_is_accepted_as_written() {
    let t = config(rfd169::CONFIG).unwrap();
    let c = &t.resource;
    assert_eq!(c.metadata.name, "autoupdate-config");
    assert_eq!(c.mode(), Some(Mode::Enabled));
    let groups = c.groups();
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["dev", "prod"]);
    for g in &groups {
        assert_eq!(g.days, Day::WORKWEEK);
        assert_eq!(g.start_hour, Some(0));
        assert_eq!(g.canary_count, 5);
        assert_eq!(g.max_in_flight, Some(Percent::from_percent(20)));
        assert_eq!(g.alert_after, Some(GoDuration::from_hours(4)));
    }
    assert_eq!(groups[0].wait_hours, 0);
    assert_eq!(groups[1].wait_hours, 24);
    assert_eq!(
        notes(&t),
        [
            "spec.agent_autoupdate_mode: enable became spec.agents.mode: enabled",
            "spec.agent_schedules.regular became spec.agents.schedules.regular (strategy halt-on-error: the groups update in order)",
            "spec.agent_schedules.regular[1].wait_days: 1 became spec.agents.schedules.regular[1].wait_hours: 24",
        ]
    );
    // What Tern stores is a valid config of its own shape, read back the same.
    let stored = serde_json::to_string(c).unwrap();
    assert!(!stored.contains("agent_schedules"), "{stored}");
    let again = config(&stored).unwrap();
    assert!(!again.was_translated());
    assert_eq!(&again.resource, c);
}

#[test]
fn the_drafts_default_config_is_accepted_and_its_jitter_said_not_kept() {
    let t = config(rfd169::CONFIG_DEFAULT).unwrap();
    let g = &t.resource.groups()[0];
    assert_eq!(g.name, "default");
    assert_eq!(g.canary_count, 5);
    assert!(
        notes(&t).contains(
            &"spec.agent_schedules.regular[0].jitter_seconds: 5 is not kept: ternd's find sets the jitter hosts wait before they update (60 s, 10 s in a group with max_in_flight); no field of Tern sets it per group"
                .to_string()
        ),
        "{:#?}",
        notes(&t)
    );
}

#[test]
fn the_drafts_plans_are_accepted_as_the_version() {
    for text in [rfd169::PLAN, rfd169::PLAN_CANARY_FAILING] {
        let t = version(text).unwrap();
        let v = &t.resource;
        assert_eq!(v.kind, "autoupdate_version");
        assert_eq!(v.metadata.name, "autoupdate-version");
        let a = v.spec.agents.as_ref().unwrap();
        assert_eq!(a.start_version.to_string(), "1.0.0");
        assert_eq!(a.target_version.to_string(), "2.0.0");
        assert_eq!(a.schedule, Schedule::Regular);
        assert_eq!(a.mode, Some(Mode::Enabled));
        assert_eq!(
            notes(&t),
            [
                "kind: autoupdate_agent_plan became kind: autoupdate_version",
                "spec.current_version: v1 became spec.agents.start_version: 1.0.0 (a version is MAJOR.MINOR.PATCH: the missing numbers are 0)",
                "spec.target_version: v2 became spec.agents.target_version: 2.0.0 (a version is MAJOR.MINOR.PATCH: the missing numbers are 0)",
                "spec.schedule: regular became spec.agents.schedule: regular",
                "spec.autoupdate_mode: enabled became spec.agents.mode: enabled",
                "spec.strategy: grouped is not kept: Tern's strategy is the autoupdate_config's spec.agents.strategy (halt-on-error, the default, updates the groups in order; a group's max_in_flight applies under it whatever the plan's strategy)",
                "status is not kept: the rollout's state is ternd's own (autoupdate_agent_rollout), worked out by its reconcile; `ternctl agents status` shows it",
            ]
        );
    }
}

#[test]
fn the_reference_fields_translate_too() {
    let t = config(
        "kind: autoupdate_config
spec:
  agent_autoupdate_mode: pause
  agent_schedules:
    regular:
    - name: staging
      alert_after_hours: 2
",
    )
    .unwrap();
    let g = &t.resource.groups()[0];
    assert_eq!(t.resource.mode(), Some(Mode::Suspended));
    assert_eq!(g.alert_after, Some(GoDuration::from_hours(2)));
    // The draft's defaults, written out: every day, 5 canaries, 20% in flight.
    assert_eq!(g.days, [Day::All]);
    assert_eq!(g.canary_count, 5);
    assert_eq!(g.max_in_flight, Some(Percent::from_percent(20)));
    let n = notes(&t);
    for expected in [
        "spec.agent_autoupdate_mode: pause became spec.agents.mode: suspended",
        "spec.agent_schedules.regular[0].alert_after_hours: 2 became spec.agents.schedules.regular[0].alert_after: 2h",
        "spec.agent_schedules.regular[0].days: unset: the draft's default [\"*\"] (every day) became spec.agents.schedules.regular[0].days: [\"*\"] (Tern's own default is Mon-Thu)",
        "spec.agent_schedules.regular[0].canary_count: unset: the draft's default 5 became spec.agents.schedules.regular[0].canary_count: 5 (Tern's own default is 0)",
        "spec.agent_schedules.regular[0].max_in_flight: unset: the draft's default 20% became spec.agents.schedules.regular[0].max_in_flight: 20% (Tern's own default is none)",
    ] {
        assert!(
            n.contains(&expected.to_string()),
            "{expected}\nnot in {n:#?}"
        );
    }
    let v = version(
        "kind: autoupdate_agent_plan
spec:
  start_version: 1.2.0
  target_version: v1.3.0
  schedule: immediate
  strategy: backpressure
  autoupdate_mode: paused
",
    )
    .unwrap();
    let a = v.resource.spec.agents.unwrap();
    assert_eq!(a.schedule, Schedule::Immediate);
    assert_eq!(a.mode, Some(Mode::Suspended));
    assert_eq!(a.target_version.to_string(), "1.3.0");
}

/// Each refusal names the draft's field, its value and what to write instead.
#[test]
fn fields_without_meaning_in_tern_are_refused_by_name() {
    fn err<T>(r: Result<T, tern_core::validate::ResourceError>) -> String {
        r.map(drop).unwrap_err().to_string()
    }
    let cases: [(&str, &str); 7] = [
        (
            "kind: autoupdate_config\nspec:\n  agent_schedules:\n    critical:\n    - name: dev\n",
            "spec.agent_schedules.critical: (1 groups) is not a schedule Tern has: only regular (write the groups under spec.agent_schedules.regular)",
        ),
        (
            "kind: autoupdate_config\nspec:\n  agent_schedules:\n    regular:\n    - name: dev\n      canary_count: 8\n",
            "spec.agent_schedules.regular[0].canary_count: 8 is out of range, expected 0 to 5",
        ),
        (
            "kind: autoupdate_config\nspec:\n  agent_schedules:\n    regular:\n    - name: dev\n      wait_days: 1\n",
            "spec.agent_schedules.regular[0].wait_days: 1 must be 0 on the first group (there is no previous group to wait for)",
        ),
        (
            "kind: autoupdate_config\nspec:\n  agent_schedules:\n    regular:\n    - name: dev\n      alert_after: 4h\n      alert_after_hours: 4\n",
            "spec.agent_schedules.regular[0].alert_after_hours: (set) cannot be set with spec.agent_schedules.regular[0].alert_after: keep one",
        ),
        (
            "kind: autoupdate_config\nspec:\n  agent_autoupdate_mode: enable\n  agents:\n    mode: enabled\n",
            "spec.agent_autoupdate_mode: (set) cannot be mixed with spec.agents",
        ),
        (
            "kind: autoupdate_config\nspec:\n  agent_schedules:\n    regular:\n    - name: dev\n      jiter_seconds: 5\n",
            "spec.agent_schedules.regular[0].jiter_seconds: unknown field `jiter_seconds`, expected one of",
        ),
        (
            "kind: autoupdate_agent_plan\nspec:\n  current_version: v1\n  start_version: v1\n  target_version: v2\n",
            "spec.current_version: (set) cannot be set with spec.start_version",
        ),
    ];
    for (text, expected) in cases {
        let got = if text.contains("autoupdate_agent_plan") {
            err(version(text))
        } else {
            err(config(text))
        };
        assert!(got.starts_with(expected), "got:  {got}\nwant: {expected}");
    }
    let bad = err(version(
        "kind: autoupdate_agent_plan\nspec:\n  current_version: one\n  target_version: v2\n",
    ));
    assert!(
        bad.starts_with("spec.current_version: \"one\" is not a version"),
        "{bad}"
    );
}

#[test]
fn terns_own_shapes_pass_unchanged() {
    let text = tern_core::fixtures::dev_staging_prod(2);
    let t = config(&text).unwrap();
    assert!(!t.was_translated());
    assert_eq!(
        t.resource,
        tern_core::resource::AutoUpdateConfig::from_text(&text).unwrap()
    );
    let v = version(&tern_core::fixtures::version("1.0.0", "1.1.0", "regular")).unwrap();
    assert!(!v.was_translated());
}
