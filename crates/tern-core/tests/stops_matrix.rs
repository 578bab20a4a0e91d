//! Every stop holds every path (docs/rollouts.md, "Stops hold every path"): one
//! generated table over stop × path × what the host does, each cell asserted on the
//! one answer (`gate::answer`) and on what the host makes of it on the wire
//! (`host_update::decide`). A stop never lets the target through: not to a host
//! following the rollout, nor to `update --now`, nor to an unhealthy agent's repair,
//! nor to a channel (critical or not), a directive, Teleport's channel path, the
//! updater's own product; a host with nothing installed takes the last known-good
//! version (the start version) and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use jiff::Timestamp;
use tern_core::api::{Channel, Freeze};
use tern_core::gate::{self, Answer, Ask, DirectedInstall, Fleet, Host};
use tern_core::hold::Hold;
use tern_core::host_update::{
    self, CriticalAnswer, Decision, FindGate, Health, Source, VersionAnswer, WindowState,
};
use tern_core::resource::*;
use tern_core::revocation::{Minimum, ReleaseLine, Revocation};
use tern_core::version::Version;
use tern_core::wire::FindFacts;

const START: &str = "1.0.0";
const TARGET: &str = "1.1.0";
const HOST: &str = "10000000-0000-4000-8000-000000000000";

fn now() -> Timestamp {
    "2026-11-23T10:30:00Z".parse().unwrap()
}

/// dev active on the target (so without a stop every host of dev is told to update),
/// prod testing canaries (its other hosts may be repaired to the start version).
fn rollout(mode: Mode) -> AutoUpdateAgentRollout {
    let group = |name: &str, state| RolloutGroup {
        name: name.into(),
        state,
        config: tern_core::resource::GroupConfig {
            canary_count: 1,
            ..Default::default()
        },
        canaries: vec![Canary {
            updater_id: "c0000000-0000-4000-8000-000000000000".into(),
            ..Canary::default()
        }],
        progress: 1.0,
        ..RolloutGroup::default()
    };
    AutoUpdateAgentRollout::new(
        RolloutSpec {
            start_version: Version::parse(START).unwrap(),
            target_version: Version::parse(TARGET).unwrap(),
            schedule: Schedule::Regular,
            autoupdate_mode: mode,
            strategy: Strategy::HaltOnError,
            maintenance_window_duration: None,
            host_group: Default::default(),
        },
        RolloutStatus {
            groups: vec![
                group("dev", GroupState::Active),
                group("prod", GroupState::Canary),
            ],
            ..RolloutStatus::default()
        },
    )
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    None,
    Frozen,
    FrozenProductOnly,
    Pinned,
    Disabled,
    Suspended,
    CutOff,
    Revoked,
    TrustRequired,
}

const STOPS: [Stop; 8] = [
    Stop::Frozen,
    Stop::FrozenProductOnly,
    Stop::Pinned,
    Stop::Disabled,
    Stop::Suspended,
    Stop::CutOff,
    Stop::Revoked,
    Stop::TrustRequired,
];

impl Stop {
    fn hold(self) -> Option<Hold> {
        Some(match self {
            Stop::None => return None,
            Stop::Frozen | Stop::FrozenProductOnly => Hold::Frozen,
            Stop::Pinned => Hold::Pinned,
            Stop::Disabled => Hold::ModeDisabled,
            Stop::Suspended => Hold::ModeSuspended,
            Stop::CutOff => Hold::CutOff,
            Stop::Revoked => Hold::Revoked,
            Stop::TrustRequired => Hold::TrustRequired,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// A host of dev following the rollout, on the start version.
    Find,
    /// The same, with nothing installed yet.
    FirstInstall,
    /// `update --now` on a dev host.
    AskedNow,
    /// prod's non-canary host with its agent down (the repair NotACanary allows).
    Repair,
    /// The updater's own product, same fleet.
    UpdaterProduct,
    /// Teleport's channel path for a group: find with no identity and no facts.
    TeleportGroup,
    /// A channel, not critical, window open.
    Channel,
    /// A channel, critical.
    CriticalChannel,
    /// A directive's install (native or local-script: the instruction is the same).
    Directive,
}

const PATHS: [Path; 9] = [
    Path::Find,
    Path::FirstInstall,
    Path::AskedNow,
    Path::Repair,
    Path::UpdaterProduct,
    Path::TeleportGroup,
    Path::Channel,
    Path::CriticalChannel,
    Path::Directive,
];

struct World {
    rollout: AutoUpdateAgentRollout,
    freeze: Freeze,
    pins: BTreeMap<String, Timestamp>,
    revocation: Revocation,
    channel: Channel,
    target: Version,
}

fn world(stop: Stop) -> World {
    let mode = match stop {
        Stop::Disabled => Mode::Disabled,
        Stop::Suspended => Mode::Suspended,
        _ => Mode::Enabled,
    };
    World {
        rollout: rollout(mode),
        freeze: Freeze {
            reason: "incident".into(),
            since: now(),
            by: "op".into(),
            products: if stop == Stop::FrozenProductOnly {
                // A freeze of the product the path asks for (below: agent, or updater
                // for the updater's path).
                vec!["agent".into(), "updater".into()]
            } else {
                Vec::new()
            },
        },
        pins: if stop == Stop::Pinned {
            [(
                HOST.to_string(),
                now() + jiff::SignedDuration::from_hours(4),
            )]
            .into()
        } else {
            BTreeMap::new()
        },
        revocation: if stop == Stop::Revoked {
            Revocation::new(vec![Minimum {
                line: ReleaseLine::parse("1.1").unwrap(),
                version: Version::parse("1.1.1").unwrap(),
            }])
        } else {
            Revocation::default()
        },
        channel: Channel {
            name: "stable".into(),
            version: TARGET.into(),
            critical: false,
            updated: None,
        },
        target: Version::parse(TARGET).unwrap(),
    }
}

/// The one answer for `path` under `stop`.
fn ask(w: &World, stop: Stop, path: Path) -> Answer {
    let fleet = Fleet {
        freeze: matches!(stop, Stop::Frozen | Stop::FrozenProductOnly).then_some(&w.freeze),
        pins: &w.pins,
        revocation: &w.revocation,
        require_trust: stop == Stop::TrustRequired,
        cut_off: stop == Stop::CutOff,
        ..Fleet::new(Some(&w.rollout), now())
    };
    let product = if path == Path::UpdaterProduct {
        "updater"
    } else {
        gate::AGENT
    };
    let (group, id) = match path {
        Path::Repair => ("prod", HOST),
        Path::TeleportGroup => ("dev", ""),
        _ => ("dev", HOST),
    };
    let facts = FindFacts {
        version: START.into(),
        ..FindFacts::default()
    };
    let mut host = Host::new(product, group, id);
    if path != Path::TeleportGroup {
        host.facts = Some(&facts);
    }
    let mut critical = w.channel.clone();
    critical.critical = true;
    match path {
        Path::Channel => gate::answer(&fleet, &host, Ask::Channel(&w.channel)),
        Path::CriticalChannel => gate::answer(&fleet, &host, Ask::Channel(&critical)),
        Path::Directive => gate::answer(
            &fleet,
            &host,
            Ask::Directed(DirectedInstall {
                target: &w.target,
                timing: tern_core::directive::resource::Timing::default(),
            }),
        ),
        _ => gate::answer(&fleet, &host, Ask::Find),
    }
}

/// What tern-update does with the answer on the host.
fn host_does(answer: &Answer, path: Path) -> Decision {
    let settings = answer.settings();
    let source = match path {
        Path::Channel | Path::CriticalChannel => Source::Channel {
            // A held channel answers 503 with the hold's code: no version.
            version: match &answer.version {
                Some(v) if answer.holds.is_empty() => VersionAnswer::Version(v.clone()),
                _ => VersionAnswer::Unreachable("503 held".into()),
            },
            critical: if answer.critical {
                CriticalAnswer::Yes
            } else {
                CriticalAnswer::from_body("no")
            },
            window: WindowState::Open,
        },
        _ => Source::Find {
            version: settings.agent_version.clone(),
            gate: FindGate::of(&settings),
        },
    };
    host_update::decide(&host_update::Inputs {
        source,
        active: match path {
            Path::FirstInstall => None,
            // A broken install the agent cannot run: the repair reinstalls start.
            Path::Repair => Some("0.9.5"),
            _ => Some(START),
        },
        skip: None,
        health: if path == Path::Repair {
            Health::Unhealthy("not running (5 checks in a row)".into())
        } else {
            Health::Healthy
        },
        last_forced_attempt: None,
        asked_now: path == Path::AskedNow,
        now: now(),
    })
}

#[test]
fn without_a_stop_every_path_moves() {
    let w = world(Stop::None);
    for path in PATHS {
        let a = ask(&w, Stop::None, path);
        let does = host_does(&a, path);
        let want = match path {
            // Not a canary of a testing group: held by schedule, repaired to start.
            Path::Repair => START,
            _ => TARGET,
        };
        assert!(
            matches!(&does, Decision::Update { target, .. } if target == want),
            "{path:?}: {a:?} → {does:?}"
        );
    }
}

#[test]
fn every_stop_holds_every_path() {
    let mut table = String::from("stop \\ path");
    for p in PATHS {
        table.push_str(&format!(" | {p:?}"));
    }
    table.push('\n');
    for stop in STOPS {
        let w = world(stop);
        table.push_str(&format!("{stop:?}"));
        for path in PATHS {
            if (stop, path) == (Stop::Pinned, Path::TeleportGroup) {
                // Teleport's group path carries no identity: no pin can find it.
                table.push_str(" | n/a (no identity)");
                continue;
            }
            let a = ask(&w, stop, path);
            let case = format!("{stop:?} × {path:?}: {a:?}");
            if stop == Stop::Revoked && path == Path::Repair {
                // Revocation is of a version: prod's hosts are named the start version,
                // which is not revoked, and an unhealthy one is repaired to it.
                assert!(!a.holds.contains(Hold::Revoked), "{case}");
                let does = host_does(&a, path);
                assert!(
                    matches!(&does, Decision::Update { target, .. } if target == START),
                    "{case}: {does:?}"
                );
                table.push_str(" | start (not revoked)");
                continue;
            }
            // The stop is named among the holds (every hold, not only the first).
            let hold = stop.hold().unwrap();
            assert!(a.holds.contains(hold), "{case}: {hold} not among the holds");
            assert!(!a.update(), "{case}: told to install");
            assert_ne!(
                a.version.as_ref().map(ToString::to_string).as_deref(),
                Some(TARGET),
                "{case}: names the target"
            );
            let does = host_does(&a, path);
            let cell = match (&does, path) {
                (Decision::Update { target, .. }, Path::FirstInstall) if target == START => "start",
                (Decision::Update { target, .. }, _) => {
                    panic!("{case}: the host installs {target}")
                }
                _ => "held",
            };
            if path == Path::FirstInstall {
                assert_eq!(
                    cell, "start",
                    "{case}: a first install takes the start version"
                );
            }
            table.push_str(&format!(" | {cell}"));
        }
        table.push('\n');
    }
    println!("{table}");
}

/// Teleport's group path carries no identity, so ternd cannot know a pinned host
/// asks; it is held by every other stop, and tern-update never uses it.
#[test]
fn teleports_group_path_is_held_by_every_stop_it_can_see() {
    for stop in STOPS.into_iter().filter(|s| *s != Stop::Pinned) {
        let w = world(stop);
        let a = ask(&w, stop, Path::TeleportGroup);
        assert!(
            !a.update() && a.holds.contains(stop.hold().unwrap()),
            "{stop:?}"
        );
    }
}

/// A freeze that names another product holds nothing of this one.
#[test]
fn a_freeze_of_one_product_leaves_the_others() {
    let mut w = world(Stop::Frozen);
    w.freeze.products = vec!["sidecar".into()];
    let a = ask(&w, Stop::Frozen, Path::Find);
    assert!(a.update(), "{a:?}");
    let a = ask(&w, Stop::Frozen, Path::UpdaterProduct);
    assert!(a.update(), "{a:?}");
}

/// Stops combine: a freeze under a disabled mode, with no rollout, or a pin of a
/// suspended host: each hold is listed, the first never hides the rest.
#[test]
fn stops_combine_and_every_one_is_listed() {
    let w = world(Stop::Disabled);
    let fleet = Fleet {
        freeze: Some(&w.freeze),
        pins: &w.pins,
        ..Fleet::new(Some(&w.rollout), now())
    };
    let a = gate::answer(&fleet, &Host::new(gate::AGENT, "dev", HOST), Ask::Find);
    assert!(
        a.holds.contains(Hold::ModeDisabled) && a.holds.contains(Hold::Frozen),
        "{a:?}"
    );
    assert_eq!(
        a.settings().agent_holds,
        ["mode_disabled", "frozen"],
        "every hold on the wire"
    );
    // Older updaters read only the first (Teleport's single `agent_hold`).
    assert_eq!(a.settings().agent_hold, "mode_disabled");
    let fleet = Fleet {
        freeze: Some(&w.freeze),
        ..Fleet::new(None, now())
    };
    let a = gate::answer(&fleet, &Host::new(gate::AGENT, "dev", HOST), Ask::Find);
    assert!(
        a.holds.contains(Hold::NoRollout) && a.holds.contains(Hold::Frozen),
        "{a:?}"
    );
    assert!(FindGate::of(&a.settings()).stops_every_product());
}

/// The client tools' version (Teleport's `tools_version`, `tools_auto_update`): the
/// agents' target while nothing failed it, and automatic only with the config's tools
/// mode enabled and nothing stopping them: a freeze that holds the tools, a replica cut
/// off from its store. A revoked target is never named.
#[test]
fn the_client_tools_are_held_by_a_freeze_a_cut_off_replica_and_revocation() {
    let r = rollout(Mode::Enabled);
    let config = AutoUpdateConfig {
        spec: ConfigSpec {
            tools: Some(ToolsConfig {
                mode: Some(ToolsMode::Enabled),
            }),
            ..ConfigSpec::default()
        },
        ..AutoUpdateConfig::default()
    };
    let freeze = |products: &[&str]| Freeze {
        reason: "incident".into(),
        since: now(),
        by: "op".into(),
        products: products.iter().map(|p| p.to_string()).collect(),
    };
    let (all, agents_only, tools_only) = (freeze(&[]), freeze(&["agent"]), freeze(&["tools"]));
    let revoked = Revocation::new(vec![Minimum {
        line: ReleaseLine::parse("1.1").unwrap(),
        version: Version::parse("1.1.1").unwrap(),
    }]);
    let target = Some(Version::parse(TARGET).unwrap());
    let none = Revocation::default();
    let tools = |config: Option<&AutoUpdateConfig>,
                 freeze: Option<&Freeze>,
                 cut_off: bool,
                 revocation: &Revocation| {
        gate::tools(&Fleet {
            config,
            freeze,
            cut_off,
            revocation,
            ..Fleet::new(Some(&r), now())
        })
    };
    let c = Some(&config);
    assert_eq!(tools(c, None, false, &none), (target.clone(), true));
    assert_eq!(tools(None, None, false, &none), (target.clone(), false));
    assert_eq!(tools(c, Some(&all), false, &none), (target.clone(), false));
    assert_eq!(
        tools(c, Some(&tools_only), false, &none),
        (target.clone(), false)
    );
    assert_eq!(
        tools(c, Some(&agents_only), false, &none),
        (target.clone(), true),
        "a freeze of the agents alone leaves the tools"
    );
    assert_eq!(tools(c, None, true, &none), (target.clone(), false));
    assert_eq!(tools(c, None, false, &revoked), (None, false));
}
