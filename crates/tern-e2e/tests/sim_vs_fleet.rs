//! The simulator against the real fleet: the same config, version and fleet, once with
//! real processes (ternd, tern-update, agents) and once in `tern-sim`, must give the
//! same group timelines: each group starts at the same instant, in the same order, and
//! is done within the same window. The simulator runs with one replica and with
//! several (its leader reconciles from every replica's report, canary candidates
//! included, as ternd's does), and both must match the real fleet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use tern_core::fixtures::{halt_on_error, version};
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_e2e::{Fleet, FleetOptions};
use tern_sim::{Params, Sim};

const GROUPS: [(&str, u8, u8, u32); 3] = [
    ("dev", 10, 0, 0),
    ("staging", 12, 1, 0),
    ("prod", 14, 0, 24),
];
const CREATED: &str = "2026-11-23T09:30:00Z";
const END: &str = "2026-11-24T16:00:00Z";
/// How often the real fleet's hosts run their updater in this test (one step).
const STEP_MINUTES: i64 = 10;

/// (group, started at, first seen done at) for each group.
type Timeline = Vec<(String, Timestamp, Timestamp)>;

/// What the real fleet showed, for a failure's message: what each step saw of every
/// group (a group that starts a step late says why in its reason), and ternd's
/// warnings.
struct Seen {
    steps: Vec<(Timestamp, String)>,
    warnings: Vec<String>,
}

impl Seen {
    /// The steps from half an hour before `from` to a step after `to`, then ternd's
    /// warnings: enough to say why a start moved, short enough for a CI log.
    fn around(&self, from: Timestamp, to: Timestamp) -> String {
        let early = from - SignedDuration::from_mins(30);
        let late = to + SignedDuration::from_mins(STEP_MINUTES);
        let steps: Vec<&str> = self
            .steps
            .iter()
            .filter(|(at, _)| (early..=late).contains(at))
            .map(|(_, s)| s.as_str())
            .collect();
        let warnings = if self.warnings.is_empty() {
            "(none)".to_string()
        } else {
            self.warnings.join("\n")
        };
        format!(
            "the real fleet's steps:\n{}\nternd's warnings:\n{warnings}",
            steps.join("\n")
        )
    }
}

/// The real fleet's timeline, and what it showed on the way.
fn real_fleet(config: &str) -> (Timeline, Seen) {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(config).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    for (group, ..) in GROUPS {
        f.add_hosts(group, 2).unwrap();
    }
    assert!(f.tick("2m").unwrap().failures().is_empty());
    f.clock_set(CREATED).unwrap();
    f.new_rollout("1.1.0").unwrap();
    let mut done: Vec<(String, Timestamp)> = Vec::new();
    let mut now: Timestamp = CREATED.parse().unwrap();
    let end: Timestamp = END.parse().unwrap();
    let mut last = None;
    let mut seen = Vec::new();
    while now < end && done.len() < GROUPS.len() {
        now += SignedDuration::from_mins(STEP_MINUTES);
        let step = f.step_at(&now.to_string()).unwrap();
        assert!(step.failures().is_empty(), "{:?}", step.failures());
        let groups: Vec<String> = step
            .status
            .groups
            .iter()
            .map(|g| {
                format!(
                    "{} {} ({}, {} present)",
                    g.name,
                    g.state.as_str(),
                    g.last_update_reason,
                    g.present
                )
            })
            .collect();
        seen.push((now, format!("{now}: {}", groups.join("; "))));
        for g in &step.status.groups {
            if g.state.as_str() == "done" && !done.iter().any(|(n, _)| n == &g.name) {
                done.push((g.name.clone(), now));
            }
        }
        last = Some(step.status);
    }
    let status = last.unwrap();
    let timeline = done
        .into_iter()
        .map(|(name, done_at)| {
            let started = status.group(&name).start_time.unwrap();
            (name, started, done_at)
        })
        .collect();
    let warnings = f.ternd.log_warnings();
    (
        timeline,
        Seen {
            steps: seen,
            warnings,
        },
    )
}

fn simulated(config: &str, replicas: u16) -> Timeline {
    let config = AutoUpdateConfig::from_text(config).unwrap();
    let version = AutoUpdateVersion::from_text(&version("1.0.0", "1.1.0", "regular")).unwrap();
    let mut sim = Sim::new(
        Params {
            agents: 6,
            start: CREATED.parse().unwrap(),
            seed: 7,
            poll_secs: STEP_MINUTES * 60,
            jitter_secs: Some(0),
            replicas,
            ..Params::default()
        },
        Some(config),
        version,
    )
    .unwrap();
    let timeline = sim.run_until(END.parse().unwrap());
    timeline
        .groups
        .iter()
        .map(|g| (g.name.clone(), g.started_at.unwrap(), g.done_at.unwrap()))
        .collect()
}

#[test]
fn the_simulator_reproduces_the_real_fleets_happy_path() {
    let config = halt_on_error(&GROUPS);
    let (real, seen) = real_fleet(&config);
    assert_eq!(
        real.len(),
        3,
        "every group finished on the real fleet: {real:?}"
    );
    let order = |t: &Timeline| t.iter().map(|(n, ..)| n.clone()).collect::<Vec<_>>();
    assert_eq!(order(&real), ["dev", "staging", "prod"]);
    for replicas in [1, 3] {
        let sim = simulated(&config, replicas);
        eprintln!("real: {real:?}\nsim ({replicas} replicas):  {sim:?}");
        assert_eq!(
            order(&sim),
            order(&real),
            "{replicas} replicas: the same order"
        );
        for ((name, real_start, real_done), (_, sim_start, sim_done)) in real.iter().zip(&sim) {
            // The real fleet's reconciles run only at its steps (every 10 minutes from
            // 09:30), so a group starts at the first step inside its window; the
            // simulator reconciles every minute, so it starts at the window's opening.
            let gap = real_start.duration_since(*sim_start);
            assert!(
                gap >= SignedDuration::ZERO && gap < SignedDuration::from_mins(STEP_MINUTES),
                "{name}, {replicas} replicas: started at {real_start} on the real fleet, {sim_start} simulated; {}",
                seen.around(*real_start.min(sim_start), *real_start.max(sim_start))
            );
            // Done within the same window: at most two steps apart.
            let gap = real_done.duration_since(*sim_done).abs();
            assert!(
                gap <= SignedDuration::from_mins(2 * STEP_MINUTES),
                "{name}, {replicas} replicas: done at {real_done} on the real fleet, {sim_done} simulated; {}",
                seen.around(*real_done.min(sim_done), *real_done.max(sim_done))
            );
        }
    }
}
