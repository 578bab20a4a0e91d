//! Invariants over random configs, fleets and instants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::backpressure::{self, ProgressInput, UpdaterNumeral};
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::{
    AgentsConfig, AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig,
    AutoUpdateVersion, ConnectedAgent, GroupConfig, GroupState, Mode, Schedules, Strategy as Plan,
};
use tern_core::rollout::group_window;
use tern_core::window::{Blackout, Day, StartTime, WindowSpec};

fn arb_group(i: usize, time_based: bool) -> impl Strategy<Value = GroupConfig> {
    (
        prop::sample::subsequence(
            vec![
                Day::Mon,
                Day::Tue,
                Day::Wed,
                Day::Thu,
                Day::Fri,
                Day::Sat,
                Day::Sun,
            ],
            0..=7,
        ),
        any::<bool>(),
        0i64..24,
        0i64..30,
        0i64..=5,
        prop::option::of(prop::sample::select(vec![10u32, 20, 50])),
    )
        .prop_flat_map(move |t| (Just(t), arb_schedule_form()))
        .prop_map(
            move |((days, star, start_hour, wait, canaries, mif), (zone, minute, blackout))| {
                let days = if star { vec![Day::All] } else { days };
                // The new form: the same days and hour (plus minutes) as a window, in
                // a zone, with a blackout; or the old fields, possibly in a zone.
                let windows_form = minute.map(|m| {
                    vec![WindowSpec {
                        // What empty days mean in the old form.
                        days: if days.is_empty() {
                            Day::WORKWEEK.to_vec()
                        } else {
                            days.clone()
                        },
                        start: StartTime::new(u8::try_from(start_hour).unwrap(), m).unwrap(),
                        duration: None,
                    }]
                });
                GroupConfig {
                    name: format!("g{i}"),
                    days: if windows_form.is_some() {
                        Vec::new()
                    } else {
                        days
                    },
                    start_hour: if windows_form.is_some() {
                        None
                    } else {
                        Some(start_hour)
                    },
                    windows: windows_form.unwrap_or_default(),
                    timezone: zone.map(str::to_string),
                    blackouts: blackout.into_iter().collect(),
                    match_labels: Default::default(),
                    topology: Vec::new(),
                    canary_cover: Vec::new(),
                    wait_hours: if time_based || i == 0 { 0 } else { wait },
                    canary_count: if time_based { 0 } else { canaries },
                    max_in_flight: mif.map(tern_core::duration::Percent::from_percent),
                    alert_after: None,
                    analysis: None,
                }
            },
        )
}

/// Mostly the old form in UTC; sometimes a zone, a window at minutes past the hour, a
/// blackout day in the week the reconcile tests run (from 2026-11-23).
fn arb_schedule_form() -> impl Strategy<Value = (Option<&'static str>, Option<u8>, Option<Blackout>)>
{
    prop_oneof![
        2 => Just((None, None, None)),
        1 => (
            prop::option::of(prop::sample::select(vec!["Europe/Paris", "America/New_York", "UTC"])),
            prop::option::of(prop::sample::select(vec![0u8, 30])),
            prop::option::of((23i8..=29).prop_map(|d| {
                let day = jiff::civil::date(2026, 11, d);
                Blackout { first: day, last: day }
            })),
        ),
    ]
}

fn arb_config() -> impl Strategy<Value = AutoUpdateConfig> {
    (any::<bool>(), 1usize..=4).prop_flat_map(|(time_based, n)| {
        let groups: Vec<_> = (0..n).map(|i| arb_group(i, time_based)).collect();
        (groups, 1u64..=6).prop_map(move |(regular, window_h)| {
            let mut c = AutoUpdateConfig::default();
            c.spec.agents = Some(AgentsConfig {
                mode: Some(Mode::Enabled),
                strategy: Some(if time_based {
                    Plan::TimeBased
                } else {
                    Plan::HaltOnError
                }),
                maintenance_window_duration: time_based
                    .then(|| tern_core::duration::GoDuration::from_hours(window_h)),
                schedules: Some(Schedules { regular }),
                host_group: None,
            });
            c.validate().unwrap();
            c
        })
    })
}

/// A run: instants (minutes after a Monday midnight, increasing) and, at each, how
/// many agents of each group run the target.
fn arb_run() -> impl Strategy<Value = (AutoUpdateConfig, Vec<(i64, Vec<usize>)>, u64)> {
    (
        arb_config(),
        prop::collection::vec((1i64..600, prop::collection::vec(0usize..=8, 4)), 1..40),
        any::<u64>(),
    )
        .prop_map(|(c, steps, seed)| {
            let mut t = 0;
            let steps = steps
                .into_iter()
                .map(|(dt, ups)| {
                    t += dt;
                    (t, ups)
                })
                .collect();
            (c, steps, seed)
        })
}

const BASE: &str = "2026-11-23T00:00:00Z";

fn fleet_at(config: &AutoUpdateConfig, ups: &[usize]) -> Vec<ConnectedAgent> {
    let mut agents = Vec::new();
    for (i, g) in config.groups().iter().enumerate() {
        let up = ups.get(i).copied().unwrap_or(0);
        for k in 0..8 {
            agents.push(agent(&g.name, k, if k < up { "1.1.0" } else { "1.0.0" }));
        }
    }
    agents
}

fn step(
    config: &AutoUpdateConfig,
    rollout: Option<&AutoUpdateAgentRollout>,
    now: Timestamp,
    agents: &[ConnectedAgent],
    rng: &mut ChaCha8Rng,
) -> AutoUpdateAgentRollout {
    let ver = version("1.0.0", "1.1.0");
    let reports = vec![report_of(now, agents)];
    let input = ReconcileInput {
        config: Some(config),
        version: Some(&ver),
        rollout,
        reports: &reports,
        agents,
        report_period: report_period(),
        frozen: false,
    };
    match reconcile::reconcile(now, &input, rng) {
        Outcome::Rollout { rollout, .. } => *rollout,
        Outcome::NoRollout { why } => panic!("{why}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn reconcile_is_idempotent_at_an_instant((config, steps, seed) in arb_run()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rollout = None;
        for (minutes, ups) in steps {
            let now = ts(BASE) + SignedDuration::from_mins(minutes);
            let agents = fleet_at(&config, &ups);
            let once = step(&config, rollout.as_ref(), now, &agents, &mut rng);
            let twice = step(&config, Some(&once), now, &agents, &mut rng);
            prop_assert_eq!(&once, &twice, "at +{}m", minutes);
            rollout = Some(once);
        }
    }

    #[test]
    fn halt_on_error_never_runs_ahead_and_groups_start_only_in_their_window(
        (config, steps, seed) in arb_run()
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rollout: Option<AutoUpdateAgentRollout> = None;
        for (minutes, ups) in steps {
            let now = ts(BASE) + SignedDuration::from_mins(minutes);
            let agents = fleet_at(&config, &ups);
            let next = step(&config, rollout.as_ref(), now, &agents, &mut rng);
            if let Some(prev) = &rollout {
                for (before, after) in prev.status.groups.iter().zip(&next.status.groups) {
                    if before.state == GroupState::Unstarted && after.state != GroupState::Unstarted {
                        prop_assert!(
                            group_window(&next.spec, after).is_open(now),
                            "{} left unstarted at {} outside its window", after.name, now
                        );
                    }
                }
                let left: usize = prev.status.groups.iter().zip(&next.status.groups)
                    .filter(|(b, a)| b.state == GroupState::Unstarted && a.state != GroupState::Unstarted)
                    .count();
                if next.spec.strategy == Plan::HaltOnError {
                    prop_assert!(left <= 1, "{} groups left unstarted in one reconcile", left);
                }
            }
            if next.spec.strategy == Plan::HaltOnError {
                let groups = &next.status.groups;
                for (i, g) in groups.iter().enumerate() {
                    if matches!(g.state, GroupState::Canary | GroupState::Active | GroupState::Done) {
                        prop_assert!(
                            groups[..i].iter().all(|p| p.state == GroupState::Done),
                            "{} is {:?} before earlier groups are done: {:?}",
                            g.name, g.state, groups.iter().map(|g| g.state).collect::<Vec<_>>()
                        );
                    }
                }
            }
            rollout = Some(next);
        }
    }

    #[test]
    fn backpressure_progress_is_monotone_and_reaches_one(
        initial in 1u64..500,
        mif_pct in 1u32..=100,
        lowest in any::<u128>(),
        mut ups in prop::collection::vec(0u64..500, 1..30),
    ) {
        ups.sort_unstable();
        let lowest_id = UpdaterNumeral::of(&format!("{lowest:032x}"));
        let mut previous = 0.0;
        for up in ups.into_iter().map(|u| u.min(initial)).chain([initial]) {
            let (p, halted) = backpressure::progress(ProgressInput {
                max_in_flight: f64::from(mif_pct) / 100.0,
                initial,
                present: initial,
                up_to_date: up,
                lowest_not_updated: (up < initial).then_some(lowest_id),
                previous,
            });
            prop_assert!(!halted);
            prop_assert!(p >= previous, "progress went back: {} -> {}", previous, p);
            prop_assert!((0.0..=1.0).contains(&p));
            if up < initial {
                // Never deadlocks: the lowest agent not yet updated is always admitted.
                prop_assert!(lowest_id.admitted(p));
            }
            previous = p;
        }
        prop_assert_eq!(previous, 1.0);
    }

    #[test]
    fn random_text_never_panics_the_parsers(text in "\\PC{0,300}") {
        let _ = AutoUpdateConfig::from_text(&text);
        let _ = AutoUpdateVersion::from_text(&text);
        let _ = AutoUpdateAgentRollout::from_text(&text);
        let _ = tern_core::codec::list_from_text::<AutoUpdateAgentReport>(&text);
        let _ = tern_core::codec::list_from_text::<ConnectedAgent>(&text);
    }

    #[test]
    fn random_yaml_shaped_input_never_panics_the_parsers(doc in arb_yaml(3)) {
        for text in [
            format!("kind: autoupdate_config\nspec:\n  agents: {doc}\n"),
            format!("kind: autoupdate_config\nspec:\n  agents:\n    schedules:\n      regular: {doc}\n"),
            format!("kind: autoupdate_version\nspec:\n  agents: {doc}\n"),
            format!("kind: autoupdate_agent_rollout\nspec: {doc}\nstatus:\n  groups: {doc}\n"),
            doc.clone(),
        ] {
            let _ = AutoUpdateConfig::from_text(&text);
            let _ = AutoUpdateVersion::from_text(&text);
            let _ = AutoUpdateAgentRollout::from_text(&text);
            let _ = tern_core::codec::list_from_text::<AutoUpdateAgentReport>(&text);
        }
    }
}

/// Flow-style YAML built from the resources' own field names and odd scalars.
fn arb_yaml(depth: u32) -> BoxedStrategy<String> {
    let scalar = prop::sample::select(vec![
        "0",
        "-1",
        "24",
        "99999999999999999999",
        "1.5",
        "true",
        "null",
        "~",
        "''",
        "'*'",
        "Mon",
        "v1.2.3",
        "1.2",
        "20%",
        "150%",
        "90m",
        "-5h",
        "enabled",
        "halt-on-error",
        "time-based",
        "immediate",
        "active",
        "canary",
        "2026-11-23T12:00:00Z",
        "\"\\u0000\"",
        "'22:30'",
        "'24:00'",
        "Europe/Paris",
        "Mars/Olympus",
        "2026-12-24/2027-01-02",
        "2027-01-02/2026-12-24",
        "2026-02-30",
    ])
    .prop_map(str::to_string);
    let key = prop::sample::select(vec![
        "name",
        "days",
        "start_hour",
        "wait_hours",
        "canary_count",
        "max_in_flight",
        "alert_after",
        "windows",
        "start",
        "duration",
        "timezone",
        "blackouts",
        "config_windows",
        "config_timezone",
        "config_blackouts",
        "mode",
        "strategy",
        "maintenance_window_duration",
        "schedules",
        "regular",
        "start_version",
        "target_version",
        "schedule",
        "state",
        "progress",
        "canaries",
        "updater_id",
        "timestamp",
        "groups",
        "versions",
        "count",
    ]);
    scalar
        .prop_recursive(depth, 32, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| format!("[{}]", v.join(", "))),
                prop::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| {
                    let body: Vec<String> =
                        kv.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    format!("{{{}}}", body.join(", "))
                }),
            ]
        })
        .boxed()
}
