//! A directive's time rules in the one answer (`gate::answer` with `Ask::Directed`)
//! and when it says an install may start (`gate::directed_start`): `not_before`,
//! `not_after`, and the maintenance window of the host's group, kept unless the
//! directive is critical or says `windows: ignore`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::Timestamp;
use tern_core::api::Freeze;
use tern_core::directive::resource::{Directive, DirectiveSpec, Timing, Windows};
use tern_core::gate::{self, Ask, DirectedInstall, DirectedStart, Fleet, Host};
use tern_core::hold::Hold;
use tern_core::resource::*;
use tern_core::version::Version;
use tern_core::window::Day;

const HOST: &str = "10000000-0000-4000-8000-000000000000";

fn t(s: &str) -> Timestamp {
    format!("2026-11-23T{s}:00Z").parse().unwrap()
}

/// prod's window: 14:00 for an hour, every day.
fn rollout() -> AutoUpdateAgentRollout {
    AutoUpdateAgentRollout::new(
        RolloutSpec {
            start_version: Version::parse("1.0.0").unwrap(),
            target_version: Version::parse("1.0.0").unwrap(),
            schedule: Schedule::Regular,
            autoupdate_mode: Mode::Enabled,
            strategy: Strategy::HaltOnError,
            maintenance_window_duration: None,
            host_group: Default::default(),
        },
        RolloutStatus {
            groups: vec![RolloutGroup {
                name: "prod".into(),
                state: GroupState::Done,
                config: tern_core::resource::GroupConfig {
                    days: vec![Day::parse("*").unwrap()],
                    start_hour: Some(14),
                    ..Default::default()
                },
                ..RolloutGroup::default()
            }],
            ..RolloutStatus::default()
        },
    )
}

fn directive(critical: bool, windows: Option<Windows>) -> Directive {
    Directive {
        name: "d".into(),
        selectors: Vec::new(),
        targets: Vec::new(),
        installers: Vec::new(),
        critical,
        windows,
    }
}

fn timing(d: Directive) -> Timing {
    DirectiveSpec {
        not_before: Some(t("10:00")),
        not_after: Some(t("20:00")),
        directives: vec![d],
        ..DirectiveSpec::default()
    }
    .timing("d")
}

/// A freeze of every product since 08:00.
fn incident() -> Freeze {
    Freeze {
        reason: "incident".into(),
        since: t("08:00"),
        by: "op".into(),
        products: Vec::new(),
    }
}

/// The holds and the start the answer gives at `now`.
fn at(now: &str, timing: Timing, frozen: bool) -> (Vec<Hold>, DirectedStart) {
    let r = rollout();
    let freeze = incident();
    let mut fleet = Fleet::new(Some(&r), t(now));
    if frozen {
        fleet.freeze = Some(&freeze);
    }
    let host = Host::new(gate::AGENT, "prod", HOST);
    let target = Version::parse("1.2.0").unwrap();
    let answer = gate::answer(
        &fleet,
        &host,
        Ask::Directed(DirectedInstall {
            target: &target,
            timing,
        }),
    );
    let start = gate::directed_start(&fleet, &host, timing, &answer);
    (answer.holds.iter().collect(), start)
}

#[test]
fn a_directive_keeps_to_the_window_and_its_start_and_end() {
    let keep = timing(directive(false, None));
    assert!(keep.keep_windows);
    assert_eq!(
        at("09:00", keep, false),
        (
            vec![Hold::OutsideWindow, Hold::NotYet],
            DirectedStart::At(t("14:00"))
        )
    );
    assert_eq!(
        at("12:00", keep, false),
        (vec![Hold::OutsideWindow], DirectedStart::At(t("14:00")))
    );
    assert_eq!(at("14:30", keep, false), (vec![], DirectedStart::Now));
    // Past not_after: never, even in tomorrow's window.
    assert_eq!(
        at("20:30", keep, false),
        (
            vec![Hold::OutsideWindow, Hold::Expired],
            DirectedStart::Never
        )
    );
}

#[test]
fn a_critical_directive_ignores_the_windows_unless_told_to_keep_them() {
    let critical = timing(directive(true, None));
    assert!(!critical.keep_windows);
    assert_eq!(
        at("09:00", critical, false),
        (vec![Hold::NotYet], DirectedStart::At(t("10:00")))
    );
    assert_eq!(at("10:00", critical, false), (vec![], DirectedStart::Now));
    let kept = timing(directive(true, Some(Windows::Keep)));
    assert!(kept.keep_windows);
    assert_eq!(at("10:00", kept, false).1, DirectedStart::At(t("14:00")));
    let ignored = timing(directive(false, Some(Windows::Ignore)));
    assert_eq!(at("10:00", ignored, false), (vec![], DirectedStart::Now));
}

#[test]
fn a_stop_holds_a_timed_directive_with_no_start_a_clock_could_give() {
    let keep = timing(directive(false, None));
    let (holds, start) = at("14:30", keep, true);
    assert_eq!(holds, vec![Hold::Frozen]);
    assert!(matches!(start, DirectedStart::Held(h) if h.contains(Hold::Frozen)));
}

#[test]
fn an_install_of_a_directive_no_longer_there_keeps_to_the_windows() {
    let spec = DirectiveSpec::default();
    assert!(spec.timing("gone").keep_windows);
}

/// The host page's forecast for a directive-governed host says when it installs: the
/// same answer and start as the directive pass asks, from the host's facts.
#[test]
fn the_forecast_says_when_a_directed_host_installs() {
    use std::collections::BTreeMap;
    use tern_core::directive::resource::{Installer, VersionDirective};
    use tern_core::directive::select::{HostFacts, Labels, Names};
    use tern_core::forecast::{DirectedWhen, HostState, Outlook, forecast};

    let text = |critical: bool| {
        format!(
            "kind: version_directive\nmetadata: {{name: vd}}\nspec:\n  not_before: 2026-11-23T10:00:00Z\n  not_after: 2026-11-23T20:00:00Z\n  directives:\n    - name: fix\n      critical: {critical}\n      selectors: [{{labels: {{\"*\": \"*\"}}}}]\n      targets: [{{version: 1.2.0, size: 1000, sha256: {sha}}}]\n      installers: [native]\n",
            sha = "a".repeat(64)
        )
    };
    let installers: BTreeMap<String, Installer> = [(
        "native".to_string(),
        Installer::from_text(
            "kind: installer\nmetadata: {name: native}\nspec: {type: tern-update}\n",
        )
        .unwrap(),
    )]
    .into();
    let labels = BTreeMap::from([("env".to_string(), "prod".to_string())]);
    let kinds = vec!["tern-update".to_string()];
    let facts = |version: &'static str| HostFacts {
        labels: Labels::Map(&labels),
        group: "prod",
        version,
        arch: "amd64",
        os: "linux",
        fips: false,
        installers: Names::Strings(&kinds),
    };
    let r = rollout();
    let freeze = incident();
    let run = |now: &str, critical: bool, frozen: bool, version: &'static str| {
        let d = VersionDirective::from_text(&text(critical)).unwrap();
        let mut fleet = Fleet::new(Some(&r), t(now));
        fleet.directive = Some(gate::Directive {
            spec: &d.spec,
            installers: &installers,
        });
        if frozen {
            fleet.freeze = Some(&freeze);
        }
        let mut host = Host::new(gate::AGENT, "prod", HOST);
        host.recorded.governed = true;
        let facts = facts(version);
        let f = forecast(
            &fleet,
            &host,
            HostState {
                version,
                directive_facts: Some(&facts),
                ..HostState::default()
            },
            [],
        );
        assert_eq!(f.outlook, Outlook::Directive, "{f:?}");
        let d = f.directed.clone().expect("the directive's outlook");
        assert_eq!(d.directive, "fix");
        (d, f.summary)
    };

    // Before not_before and outside prod's window: from the window's opening.
    let (d, summary) = run("09:00", false, false, "1.0.0");
    assert_eq!(d.reasons, Vec::<String>::new());
    assert_eq!(
        (d.when, d.starts_at, d.target.as_deref()),
        (DirectedWhen::At, Some(t("14:00")), Some("1.2.0"))
    );
    assert_eq!(d.holds, ["outside_window", "not_yet"]);
    assert!(
        summary.contains("moves it to 1.2.0 from 2026-11-23T14:00:00Z"),
        "{summary}"
    );
    // Critical: the window does not hold it; not_before does.
    let (d, _) = run("09:00", true, false, "1.0.0");
    assert_eq!((d.when, d.starts_at), (DirectedWhen::At, Some(t("10:00"))));
    // In the window: the next pass may pick it.
    let (d, _) = run("14:30", false, false, "1.0.0");
    assert_eq!((d.when, d.holds.len()), (DirectedWhen::Now, 0));
    // Past not_after: never.
    let (d, summary) = run("20:30", true, false, "1.0.0");
    assert_eq!(d.when, DirectedWhen::Never);
    assert!(summary.contains("expired"), "{summary}");
    // A freeze holds it whatever the time says, and the summary names it.
    let (d, summary) = run("14:30", false, true, "1.0.0");
    assert_eq!(d.when, DirectedWhen::Held);
    assert!(d.holds.contains(&"frozen".to_string()), "{d:?}");
    assert!(summary.contains("once this is lifted: frozen"), "{summary}");
    // On the target: nothing to install.
    let (d, _) = run("14:30", false, false, "1.2.0");
    assert_eq!(d.when, DirectedWhen::AtTarget);
}

/// An updater that sends no facts with find (one that predates them) is deferred to
/// the directive only where this replica's last pass found the directive governing
/// it; an updater without an id never is (no pass can have picked it).
#[test]
fn without_facts_find_defers_to_a_directive_only_where_this_replica_found_it_governing() {
    let r = rollout();
    let spec = DirectiveSpec {
        directives: vec![directive(false, None)],
        ..DirectiveSpec::default()
    };
    let installers = std::collections::BTreeMap::new();
    let mut fleet = Fleet::new(Some(&r), t("14:30"));
    fleet.directive = Some(gate::Directive {
        spec: &spec,
        installers: &installers,
    });
    let deferred = |id: &str, governed: bool| {
        let mut host = Host::new(gate::AGENT, "prod", id);
        host.recorded.governed = governed;
        gate::answer(&fleet, &host, Ask::Find)
            .holds
            .contains(Hold::Directive)
    };
    assert!(deferred(HOST, true));
    assert!(!deferred(HOST, false));
    assert!(!deferred("", true));
}
