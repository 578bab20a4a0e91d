//! The host's update decision (seed 001 for channels, seed 000 for find), as tables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use tern_core::hold::{Hold, Holds};
use tern_core::host_update::{
    CriticalAnswer, Decision, FORCED_ATTEMPT_INTERVAL, FindGate, Health, Inputs, Source, Trigger,
    VersionAnswer, WindowState, decide,
};

fn now() -> Timestamp {
    "2026-11-23T09:00:00Z".parse().unwrap()
}

fn channel<'a>(
    version: VersionAnswer,
    critical: CriticalAnswer,
    window: WindowState,
    health: Health,
    active: Option<&'a str>,
) -> Inputs<'a> {
    Inputs {
        source: Source::Channel {
            version,
            critical,
            window,
        },
        active,
        skip: None,
        health,
        last_forced_attempt: None,
        asked_now: false,
        now: now(),
    }
}

const CLOSED: WindowState = WindowState::Closed { next: None };

/// Every combination of the seed's inputs for a host on 1.0.0 and a channel at 1.1.0:
/// update exactly when the version is usable and (critical is `yes`, or the host is in
/// its window, or the agent is unhealthy); with the trigger in that order of priority.
#[test]
fn the_channel_decision_table() {
    let versions = [
        ("ok", VersionAnswer::from_body("1.1.0\n")),
        ("404", VersionAnswer::Unreachable("404 Not Found".into())),
        ("garbage", VersionAnswer::from_body("<html>oops</html>")),
    ];
    let criticals = [
        ("yes", CriticalAnswer::from_body("yes\n")),
        ("no", CriticalAnswer::from_body("no")),
        ("other", CriticalAnswer::from_body("YES")),
        (
            "unreachable",
            CriticalAnswer::Unreachable("timed out".into()),
        ),
    ];
    let healths = [
        ("healthy", Health::Healthy),
        ("unhealthy", Health::Unhealthy("service not running".into())),
    ];
    let windows = [("in window", WindowState::Open), ("outside", CLOSED)];
    let mut rows = 0;
    for (vn, v) in &versions {
        for (cn, c) in &criticals {
            for (hn, h) in &healths {
                for (wn, w) in &windows {
                    let got = decide(&channel(v.clone(), c.clone(), *w, h.clone(), Some("1.0.0")));
                    let want = if *vn != "ok" {
                        None
                    } else if *cn == "yes" {
                        Some(Trigger::Critical)
                    } else if *wn == "in window" {
                        Some(Trigger::Window)
                    } else if *hn == "unhealthy" {
                        Some(Trigger::Unhealthy("service not running".into()))
                    } else {
                        None
                    };
                    let case = format!("version {vn}, critical {cn}, {hn}, {wn}");
                    match (want, got) {
                        (Some(trigger), Decision::Update { target, trigger: t }) => {
                            assert_eq!(target, "1.1.0", "{case}");
                            assert_eq!(t, trigger, "{case}");
                        }
                        (None, Decision::Hold(why)) if *vn != "ok" => {
                            assert!(why.contains("no update is attempted"), "{case}: {why}");
                        }
                        (None, Decision::Wait(why)) if *vn == "ok" => {
                            assert!(
                                why.contains("outside the maintenance window"),
                                "{case}: {why}"
                            );
                        }
                        (want, got) => panic!("{case}: want {want:?}, got {got:?}"),
                    }
                    rows += 1;
                }
            }
        }
    }
    assert_eq!(rows, 48);
}

#[test]
fn the_channel_answers_are_read_strictly() {
    assert_eq!(
        VersionAnswer::from_body(" v1.2.3\n"),
        VersionAnswer::Version("1.2.3".parse().unwrap())
    );
    for bad in ["", "1.2", "1.2.3 1.2.4", "latest", &"9".repeat(300)] {
        assert!(
            matches!(VersionAnswer::from_body(bad), VersionAnswer::Malformed(_)),
            "{bad:?}"
        );
    }
    // At most 128 characters: a longer answer is refused before it is parsed, even
    // when it would parse (a prerelease may be long).
    let longest = format!("1.0.0-{}", "a".repeat(122));
    assert_eq!(longest.len(), 128);
    assert!(matches!(
        VersionAnswer::from_body(&longest),
        VersionAnswer::Version(_)
    ));
    assert!(matches!(
        VersionAnswer::from_body(&format!("{longest}a")),
        VersionAnswer::Malformed(_)
    ));
    assert!(CriticalAnswer::from_body("yes").is_critical());
    assert!(CriticalAnswer::from_body("  yes \n").is_critical());
    for other in ["Yes", "YES", "true", "1", "y", "yes please", ""] {
        assert!(!CriticalAnswer::from_body(other).is_critical(), "{other:?}");
    }
    // What `status` keeps of another value is bounded.
    let CriticalAnswer::Other(kept) = CriticalAnswer::from_body(&"x".repeat(10_000)) else {
        panic!()
    };
    assert_eq!(kept.len(), 64);
}

#[test]
fn never_a_major_downgrade_through_a_channel_but_a_minor_one_is_fine() {
    let critical = CriticalAnswer::from_body("yes");
    let to = |v: &str| VersionAnswer::from_body(v);
    let got = decide(&channel(
        to("1.9.0"),
        critical.clone(),
        WindowState::Open,
        Health::Healthy,
        Some("2.0.1"),
    ));
    let Decision::Refused(why) = got else {
        panic!("{got:?}")
    };
    assert!(why.contains("major-version downgrade from 2.0.1"), "{why}");
    let got = decide(&channel(
        to("2.0.0"),
        critical,
        WindowState::Open,
        Health::Healthy,
        Some("2.0.1"),
    ));
    assert_eq!(
        got,
        Decision::Update {
            target: "2.0.0".into(),
            trigger: Trigger::Critical
        }
    );
}

/// Seed 000: a host within the compatibility window of its group's version waits for
/// the group; one behind and outside it (two majors behind) updates at once while its
/// group updates (the repair find allows: a canary group's start version), in either
/// mode. One ahead of its group waits for the group.
#[test]
fn hosts_outside_the_compatibility_window_update_at_once() {
    let find = |active: &'static str| Inputs {
        source: Source::Find {
            version: "v3.1.0".into(),
            gate: FindGate::held(Hold::NotACanary),
        },
        active: Some(active),
        skip: None,
        health: Health::Healthy,
        last_forced_attempt: None,
        asked_now: false,
        now: now(),
    };
    for (active, incompatible) in [
        ("3.0.0", false),
        ("2.4.0", false),
        ("1.9.9", true),
        ("4.0.0", false),
    ] {
        let got = decide(&find(active));
        if incompatible {
            assert_eq!(
                got,
                Decision::Update {
                    target: "3.1.0".into(),
                    trigger: Trigger::Incompatible
                },
                "{active}"
            );
        } else {
            let Decision::Wait(why) = got else {
                panic!("{active}: {got:?}")
            };
            assert!(why.contains("not now"), "{why}");
        }
    }
    // Channel mode: the same rule (a host three majors behind catches up at once).
    let got = decide(&channel(
        VersionAnswer::from_body("4.0.0"),
        CriticalAnswer::from_body("no"),
        CLOSED,
        Health::Healthy,
        Some("1.0.0"),
    ));
    assert!(
        matches!(
            got,
            Decision::Update {
                trigger: Trigger::Incompatible,
                ..
            }
        ),
        "{got:?}"
    );
}

/// The one gate: under every hold find can give, for every health and compatibility
/// of the host, the host installs only where the hold allows it. A stop holds
/// everything but a first install, `update --now` included; a schedule hold lets
/// `update --now` through and no shortcut, but for a canary group's start version.
#[test]
fn no_shortcut_goes_through_a_hold() {
    let gates: Vec<FindGate> = Hold::ALL
        .into_iter()
        .map(FindGate::held)
        .chain([
            unknown("from_the_future"),
            FindGate::Unspecified,
            // Several holds at once: a stop among schedule holds is a stop.
            FindGate::Held {
                holds: Holds::of([Hold::NotACanary, Hold::Pinned]),
                unknown: None,
                listed: true,
            },
        ])
        .collect();
    let healths = [
        Health::Healthy,
        Health::Unknown,
        Health::Unhealthy("the agent's service is not running".into()),
    ];
    for gate in &gates {
        for health in &healths {
            // 3.0.0 is compatible with 3.1.0; 1.0.0 is two majors behind.
            for active in ["3.0.0", "1.0.0"] {
                for asked_now in [false, true] {
                    for last_forced_attempt in [None, Some(now() - FORCED_ATTEMPT_INTERVAL)] {
                        let i = Inputs {
                            source: Source::Find {
                                version: "3.1.0".into(),
                                gate: gate.clone(),
                            },
                            active: Some(active),
                            skip: None,
                            health: health.clone(),
                            last_forced_attempt,
                            asked_now,
                            now: now(),
                        };
                        let got = decide(&i);
                        let stop = match gate {
                            FindGate::Held { holds, unknown, .. } => {
                                unknown.is_some() || holds.iter().any(|h| h.is_stop())
                            }
                            _ => false,
                        };
                        let repair = matches!(gate, FindGate::Held { holds, unknown: None, .. }
                            if holds.iter().all(|h| h == Hold::NotACanary) && !holds.is_empty());
                        let shortcut = active == "1.0.0" || matches!(health, Health::Unhealthy(_));
                        let may = !stop && (asked_now || (repair && shortcut));
                        let case = format!(
                            "{gate:?} {health:?} on {active} now={asked_now} tried={last_forced_attempt:?}"
                        );
                        match &got {
                            Decision::Update { trigger, .. } => {
                                assert!(may, "{case}: installs ({trigger:?})");
                            }
                            Decision::Hold(why) | Decision::Wait(why) => {
                                assert!(!may, "{case}: holds ({why})");
                                // An unhealthy agent left alone says so, whatever holds it (an
                                // incompatible one says that it needs an operator).
                                if matches!(health, Health::Unhealthy(_))
                                    && last_forced_attempt.is_none()
                                    && active == "3.0.0"
                                {
                                    assert!(why.contains("unhealthy"), "{case}: {why}");
                                }
                                if stop && active == "1.0.0" {
                                    assert!(why.contains("needs an operator"), "{case}: {why}");
                                }
                            }
                            Decision::Refused(why) => panic!("{case}: refused {why}"),
                        }
                    }
                }
            }
        }
    }
    // A first install (enrolling a host) takes the version named, whatever the hold,
    // from a server that lists its holds (under a stop it names the last known-good
    // version); from one that does not, nothing installs under a stop.
    for gate in gates {
        let old_server_stop = match &gate {
            FindGate::Held { holds, unknown, .. } => {
                let single = FindGate::Held {
                    holds: *holds,
                    unknown: unknown.clone(),
                    listed: false,
                };
                (unknown.is_some() || holds.iter().any(|h| h.is_stop())).then_some(single)
            }
            _ => None,
        };
        if let Some(old) = old_server_stop {
            let i = Inputs {
                source: Source::Find {
                    version: "3.1.0".into(),
                    gate: old,
                },
                active: None,
                skip: None,
                health: Health::Unknown,
                last_forced_attempt: None,
                asked_now: false,
                now: now(),
            };
            assert!(matches!(decide(&i), Decision::Hold(_)), "{:?}", decide(&i));
        }
        let i = Inputs {
            source: Source::Find {
                version: "3.1.0".into(),
                gate,
            },
            active: None,
            skip: None,
            health: Health::Unknown,
            last_forced_attempt: None,
            asked_now: false,
            now: now(),
        };
        assert!(matches!(
            decide(&i),
            Decision::Update {
                trigger: Trigger::NotInstalled,
                ..
            }
        ));
    }
}

/// Seed 001 with no window known: a channel host holds all but a critical version,
/// even with an unhealthy agent; a person on the host may still ask.
#[test]
fn a_channel_host_with_no_window_known_holds_non_critical_versions() {
    for health in [
        Health::Healthy,
        Health::Unhealthy("restarted 3 times".into()),
    ] {
        let mut i = channel(
            VersionAnswer::from_body("1.1.0"),
            CriticalAnswer::from_body("no"),
            WindowState::Unknown,
            health,
            Some("1.0.0"),
        );
        let Decision::Wait(why) = decide(&i) else {
            panic!("{:?}", decide(&i))
        };
        assert!(why.contains("no maintenance window is known"), "{why}");
        i.asked_now = true;
        assert!(matches!(
            decide(&i),
            Decision::Update {
                trigger: Trigger::AskedNow,
                ..
            }
        ));
        i.asked_now = false;
        i.source = Source::Channel {
            version: VersionAnswer::from_body("1.1.0"),
            critical: CriticalAnswer::from_body("yes"),
            window: WindowState::Unknown,
        };
        assert!(matches!(
            decide(&i),
            Decision::Update {
                trigger: Trigger::Critical,
                ..
            }
        ));
    }
}

#[test]
fn an_unhealthy_agent_is_retried_outside_the_window_at_most_every_half_hour() {
    let mut i = channel(
        VersionAnswer::from_body("1.1.0"),
        CriticalAnswer::from_body("no"),
        WindowState::Closed {
            next: Some("2026-11-24T12:00:00Z".parse().unwrap()),
        },
        Health::Unhealthy("restarted 3 times".into()),
        Some("1.0.0"),
    );
    assert!(matches!(decide(&i), Decision::Update { .. }));
    i.last_forced_attempt = Some(now() - SignedDuration::from_mins(10));
    let Decision::Wait(why) = decide(&i) else {
        panic!()
    };
    assert!(
        why.contains("next try is after 2026-11-23T09:20:00Z"),
        "{why}"
    );
    i.last_forced_attempt = Some(now() - FORCED_ATTEMPT_INTERVAL);
    assert!(matches!(decide(&i), Decision::Update { .. }));
    // A version that failed here is skipped, unhealthy or not: no loop.
    i.skip = Some("1.1.0");
    let Decision::Hold(why) = decide(&i) else {
        panic!()
    };
    assert!(why.contains("skipped"), "{why}");
    // Healthy and outside: the next window is named.
    i.skip = None;
    i.health = Health::Healthy;
    let Decision::Wait(why) = decide(&i) else {
        panic!()
    };
    assert!(why.contains("opens at 2026-11-24T12:00:00Z"), "{why}");
}

#[test]
fn find_mode_keeps_its_answers() {
    let find = |version: &str, update_now: bool, active: Option<&'static str>| Inputs {
        source: Source::Find {
            version: version.into(),
            gate: if update_now {
                FindGate::Now
            } else {
                FindGate::held(Hold::GroupNotStarted)
            },
        },
        active,
        skip: None,
        health: Health::Unknown,
        last_forced_attempt: None,
        asked_now: false,
        now: now(),
    };
    assert_eq!(
        decide(&Inputs {
            source: Source::Find {
                version: String::new(),
                gate: FindGate::held(Hold::Directive),
            },
            ..find("", true, Some("1.0.0"))
        }),
        Decision::Hold(format!(
            "the server gives no agent version for this host ({})",
            Hold::Directive.describe()
        ))
    );
    assert_eq!(
        decide(&find("1.1.0", false, None)),
        Decision::Update {
            target: "1.1.0".into(),
            trigger: Trigger::NotInstalled
        }
    );
    assert_eq!(
        decide(&find("v1.1.0", true, Some("1.0.0"))),
        Decision::Update {
            target: "1.1.0".into(),
            trigger: Trigger::Rollout
        }
    );
    assert_eq!(
        decide(&find("1.1.0", true, Some("v1.1.0"))),
        Decision::Hold("already on 1.1.0".into())
    );
    // find may move a host down a major (an operator's rollback): only channels refuse.
    assert!(matches!(
        decide(&find("1.0.0", true, Some("2.0.0"))),
        Decision::Update { .. }
    ));
}

/// Which of the agent's holds hold the host's updater releases too: the stops that
/// are the whole host's (a freeze, a pin, a replica cut off, a hold not known), never
/// a state or mode of the agent's rollout.
#[test]
fn only_the_hosts_own_stops_hold_its_other_products() {
    for h in Hold::ALL {
        let every = FindGate::held(h).stops_every_product();
        let want = matches!(
            h,
            Hold::Frozen | Hold::Pinned | Hold::CutOff | Hold::TrustRequired
        );
        assert_eq!(every, want, "{h}");
        assert!(
            !every || h.is_stop(),
            "{h}: only a stop may hold other products"
        );
    }
    assert!(unknown("new_hold").stops_every_product());
    // Every hold counts, not only the first: a freeze under a disabled mode, a freeze
    // with no rollout, a pin of a suspended host (issue: the first stop hid the rest).
    for (first, then) in [
        (Hold::ModeDisabled, Hold::Frozen),
        (Hold::NoRollout, Hold::Frozen),
        (Hold::ModeSuspended, Hold::Pinned),
    ] {
        let settings = tern_core::wire::AutoUpdateSettings {
            agent_version: "1.0.0".into(),
            agent_hold: first.code().into(),
            agent_holds: vec![first.code().into(), then.code().into()],
            ..Default::default()
        };
        assert!(
            FindGate::of(&settings).stops_every_product(),
            "{first} {then}"
        );
    }
    assert!(!FindGate::Now.stops_every_product());
    assert!(!FindGate::Unspecified.stops_every_product());
}

fn unknown(code: &str) -> FindGate {
    FindGate::Held {
        holds: Holds::NONE,
        unknown: Some(code.into()),
        listed: true,
    }
}
