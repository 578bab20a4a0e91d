#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Behaviour of the simulator: determinism, the happy path, a broken version held at
//! the canaries, time-based windows, backpressure, churn and replicas.

use jiff::{SignedDuration, Timestamp};
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_sim::{EventKind, Params, Sim, Timeline};

const VERSION: &str = "
kind: autoupdate_version
metadata: {name: autoupdate-version}
spec:
  agents: {start_version: v1.0.0, target_version: v1.1.0, schedule: regular}
";

/// Three halt-on-error groups, every day; staging has canaries, prod waits 2h.
fn halt3() -> String {
    tern_core::fixtures::halt_on_error(&[
        ("dev", 12, 0, 0),
        ("staging", 14, 2, 0),
        ("prod", 16, 0, 2),
    ])
}

/// Monday 2026-11-23 00:00 UTC.
fn monday() -> Timestamp {
    "2026-11-23T00:00:00Z".parse().unwrap()
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn run(config: &str, params: Params, hours: i64) -> Timeline {
    let config = AutoUpdateConfig::from_text(config).unwrap();
    let version = AutoUpdateVersion::from_text(VERSION).unwrap();
    let until = params.start + SignedDuration::from_hours(hours);
    let mut sim = Sim::new(params, Some(config), version).unwrap();
    sim.run_until(until)
}

fn params(agents: u32, seed: u64) -> Params {
    Params {
        agents,
        seed,
        start: monday(),
        ..Params::default()
    }
}

fn assert_all_on_target(t: &Timeline) {
    for g in &t.groups {
        let off: Vec<_> = g.hosts.iter().filter(|(v, _)| *v != "1.1.0").collect();
        assert!(
            off.is_empty(),
            "group {} has hosts off target: {off:?}",
            g.name
        );
    }
    assert_eq!(
        t.overall.on_target, t.overall.agents_live,
        "{:?}",
        t.overall
    );
}

#[test]
fn same_seed_same_timeline_other_seed_other_timeline() {
    let p = |seed| Params {
        churn_per_hour: 0.05,
        fail: [("1.1.0".to_string(), 0.02)].into_iter().collect(),
        ..params(600, seed)
    };
    let a = serde_json::to_string(&run(&halt3(), p(7), 48)).unwrap();
    let b = serde_json::to_string(&run(&halt3(), p(7), 48)).unwrap();
    assert_eq!(a, b, "same seed, same timeline");
    let c = serde_json::to_string(&run(&halt3(), p(8), 48)).unwrap();
    assert_ne!(a, c, "another seed gives another story");
}

#[test]
fn happy_path_three_groups_in_order_everyone_on_target() {
    let p = Params {
        groups: vec![
            ("dev".into(), 0.1),
            ("staging".into(), 0.3),
            ("prod".into(), 0.6),
        ],
        ungrouped: 0.05,
        ..params(1200, 1)
    };
    let t = run(&halt3(), p, 24);
    assert_eq!(t.overall.rollout_state, "done", "{}", t.render_text());
    let g = |n| t.group(n).unwrap();
    // Exact fleet split: 95% over the groups 10/30/60, 5% ungrouped served by prod.
    assert_eq!(g("dev").hosts.values().sum::<u64>(), 114);
    assert_eq!(g("staging").hosts.values().sum::<u64>(), 342);
    assert_eq!(g("prod").hosts.values().sum::<u64>(), 684 + 60);
    // In order, each started at its window's opening hour (UTC).
    let (dev, staging, prod) = (g("dev"), g("staging"), g("prod"));
    assert_eq!(dev.window_opened_at, Some(at("2026-11-23T12:00:00Z")));
    assert_eq!(staging.window_opened_at, Some(at("2026-11-23T14:00:00Z")));
    assert_eq!(prod.window_opened_at, Some(at("2026-11-23T16:00:00Z")));
    for s in [dev, staging, prod] {
        let started = s.started_at.unwrap();
        let opened = s.window_opened_at.unwrap();
        assert!(started >= opened && started < opened + SignedDuration::from_hours(1));
    }
    assert!(dev.done_at.unwrap() <= staging.started_at.unwrap());
    assert!(staging.done_at.unwrap() <= prod.started_at.unwrap());
    assert!(dev.done_at < staging.done_at && staging.done_at < prod.done_at);
    // No agent of a later group moved before its group started.
    assert!(staging.first_update_at.unwrap() >= staging.started_at.unwrap());
    assert!(prod.first_update_at.unwrap() >= prod.started_at.unwrap());
    // Staging went through its canaries: picked, alive, then active.
    let kinds: Vec<EventKind> = t.group_events("staging").map(|e| e.kind).collect();
    let pos = |k| kinds.iter().position(|x| *x == k).unwrap();
    assert!(pos(EventKind::CanariesPicked) < pos(EventKind::CanariesAlive));
    let active = t
        .group_events("staging")
        .find(|e| e.to.as_deref() == Some("active"))
        .unwrap();
    assert_eq!(active.reason.as_deref(), Some("canaries_are_alive"));
    assert_all_on_target(&t);
    assert_eq!(t.overall.updates, 1200);
    assert_eq!(t.overall.rollbacks, 0);
}

/// The first group has canaries; the target crashes on every host.
const CANARY_FIRST: &str = "
kind: autoupdate_config
metadata: {name: autoupdate-config}
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
      - {name: dev, days: ['*'], start_hour: 12, canary_count: 3, alert_after: 2h}
      - {name: prod, days: ['*'], start_hour: 16}
";

#[test]
fn broken_version_holds_the_canary_group_and_later_groups() {
    let p = Params {
        fail: [("1.1.0".to_string(), 1.0)].into_iter().collect(),
        ..params(800, 3)
    };
    let t = run(CANARY_FIRST, p, 48);
    let dev = t.group("dev").unwrap();
    assert_eq!(dev.state, "canary", "{}", t.render_text());
    assert_eq!(
        dev.reason, "canary_failed",
        "the canaries rolled the target back"
    );
    assert_eq!(dev.rollbacks, 3, "the three canaries tried and rolled back");
    assert_eq!(dev.updates, 0);
    assert_eq!(dev.counts.failed, 3, "the reports show the failures");
    assert_eq!(t.group("prod").unwrap().state, "unstarted");
    assert_eq!(
        t.group("prod").unwrap().updates + t.group("prod").unwrap().rollbacks,
        0
    );
    assert_eq!(t.overall.rollout_state, "active");
    assert_eq!(t.overall.failed, 3);
    // Every host still runs the old version (the canaries rolled back to it).
    for g in &t.groups {
        assert_eq!(g.hosts.keys().collect::<Vec<_>>(), ["1.0.0"], "{}", g.name);
    }
    assert!(t.group_events("dev").any(|e| e.kind == EventKind::Overdue));
    // The canaries never count as alive.
    assert!(
        t.group_events("dev")
            .filter(|e| e.kind == EventKind::CanariesAlive)
            .all(|e| e.detail.as_deref() == Some("0/3"))
    );
}

/// Two time-based groups whose 2h windows overlap: they do not wait for each other.
const TIME_BASED: &str = "
kind: autoupdate_config
metadata: {name: autoupdate-config}
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 2h
    schedules:
      regular:
      - {name: dev, days: ['*'], start_hour: 8}
      - {name: prod, days: ['*'], start_hour: 9}
";

#[test]
fn time_based_groups_update_inside_their_windows() {
    let t = run(TIME_BASED, params(1000, 4), 20);
    for (name, open) in [
        ("dev", "2026-11-23T08:00:00Z"),
        ("prod", "2026-11-23T09:00:00Z"),
    ] {
        let g = t.group(name).unwrap();
        let open = at(open);
        let close = open + SignedDuration::from_hours(2);
        assert_eq!(g.window_opened_at, Some(open), "{name}");
        assert_eq!(
            g.active_at,
            Some(open),
            "{name} is active as its window opens"
        );
        assert_eq!(
            g.done_at,
            Some(close),
            "{name} is done as its window closes"
        );
        assert!(
            g.first_update_at.unwrap() >= open,
            "{name}: nobody updates early"
        );
        assert!(
            g.last_update_at.unwrap() < close,
            "{name}: all inside the window"
        );
        let done = t
            .group_events(name)
            .find(|e| e.to.as_deref() == Some("done"))
            .unwrap();
        assert_eq!(done.reason.as_deref(), Some("outside_window"));
        let c = done.counts.as_ref().unwrap();
        assert_eq!(c.up_to_date, c.present, "{name} finished within its window");
        assert_eq!(c.present, 500);
    }
    // prod started while dev was still active: independent groups.
    assert!(t.group("prod").unwrap().started_at < t.group("dev").unwrap().done_at);
    assert_all_on_target(&t);
}

const ONE_GROUP: &str = "
kind: autoupdate_config
metadata: {name: autoupdate-config}
spec:
  agents:
    mode: enabled
    schedules:
      regular:
      - {name: prod, days: ['*'], start_hour: 12}
";

#[test]
fn backpressure_bounds_the_agents_updating_at_once() {
    let n = 2000u32;
    let free = run(ONE_GROUP, params(n, 5), 24);
    let bounded = run(
        &ONE_GROUP.replace("start_hour: 12}", "start_hour: 12, max_in_flight: 10%}"),
        params(n, 5),
        24,
    );
    for t in [&free, &bounded] {
        assert_eq!(t.overall.rollout_state, "done", "{}", t.render_text());
        assert_all_on_target(t);
    }
    // In flight are agents admitted (id under progress) but not yet updated; progress
    // is 10% + the updated share, so at most 10% of the group plus the deviation of
    // the ids' spread from uniform (well under 3 sqrt(n)).
    let bound = (0.10 * f64::from(n) + 3.0 * f64::from(n).sqrt()) as u64;
    let bp = bounded.group("prod").unwrap();
    assert!(bp.max_updating <= bound, "{} > {bound}", bp.max_updating);
    assert!(bp.max_updating > 0);
    // Without backpressure the whole group rushes at once.
    let fr = free.group("prod").unwrap();
    assert!(
        fr.max_updating > 2 * bound,
        "{} <= 2 * {bound}",
        fr.max_updating
    );
    // Backpressure trades time for safety.
    assert!(bp.window_to_all_updated_secs > fr.window_to_all_updated_secs);
    // Progress grew over several reconciles.
    let steps = bounded
        .events
        .iter()
        .filter(|e| e.kind == EventKind::State && e.group.as_deref() == Some("prod"))
        .count();
    assert!(steps >= 2);
}

#[test]
fn churn_does_not_deadlock_the_rollout() {
    let p = Params {
        churn_per_hour: 0.05,
        ..params(1000, 6)
    };
    let t = run(&halt3(), p, 48);
    assert!(
        t.overall.joins > 500 && t.overall.leaves > 500,
        "{:?}",
        t.overall
    );
    assert_eq!(t.overall.rollout_state, "done", "{}", t.render_text());
    // Joiners install what find says for their group: the target once it is done.
    assert_all_on_target(&t);
}

#[test]
fn several_replicas_report_and_the_leader_reconciles() {
    let p = Params {
        replicas: 3,
        ..params(900, 9)
    };
    let t = run(&halt3(), p, 24);
    assert_eq!(t.overall.rollout_state, "done", "{}", t.render_text());
    assert_all_on_target(&t);
    // Counts are the sum of the three reports.
    assert_eq!(t.group("prod").unwrap().counts.present, 300);
}

#[test]
fn the_seeds_timer_converges_slower_than_terns() {
    let tern = run(ONE_GROUP, params(1000, 10), 24);
    let seeds = run(
        ONE_GROUP,
        Params {
            poll_secs: 600,
            jitter_secs: Some(60),
            ..params(1000, 10)
        },
        24,
    );
    let a = tern.group("prod").unwrap().window_to_done_secs.unwrap();
    let b = seeds.group("prod").unwrap().window_to_done_secs.unwrap();
    assert!(a < 5 * 60, "tern's 60s poll: {a}s");
    assert!(b > a && b < 15 * 60, "a 10m poll: {b}s vs {a}s");
}

#[test]
fn running_in_steps_is_the_same_as_running_at_once() {
    let config = AutoUpdateConfig::from_text(&halt3()).unwrap();
    let version = AutoUpdateVersion::from_text(VERSION).unwrap();
    let p = Params {
        churn_per_hour: 0.05,
        ..params(500, 11)
    };
    let end = monday() + SignedDuration::from_hours(30);
    let once = Sim::new(p.clone(), Some(config.clone()), version.clone())
        .unwrap()
        .run_until(end);
    let mut sim = Sim::new(p, Some(config), version).unwrap();
    for h in [1, 12, 13, 14, 20] {
        let partial = sim.run_until(monday() + SignedDuration::from_hours(h));
        assert_eq!(sim.now(), monday() + SignedDuration::from_hours(h));
        assert!(partial.events.iter().all(|e| e.at <= sim.now()));
    }
    assert_eq!(sim.run_until(end), once);
}

const LOCAL_TIME: &str = "
kind: autoupdate_config
metadata: {name: autoupdate-config}
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 2h
    schedules:
      regular:
      - name: paris
        timezone: Europe/Paris
        windows: [{days: ['*'], start: '09:30', duration: 1h}]
      - name: tokyo
        timezone: Asia/Tokyo
        days: ['*']
        start_hour: 9
        blackouts: ['2026-11-24']
";

/// Windows in local time through the simulator: paris opens at 09:30 CET (08:30 UTC)
/// for its own hour; tokyo's 09:00 JST on Monday is 00:00 UTC, and Tuesday in Tokyo is
/// blacked out, so it updates once, at the start of the run.
#[test]
fn local_time_windows_and_blackouts_in_the_simulator() {
    let t = run(LOCAL_TIME, params(400, 5), 40);
    let paris = t.group("paris").unwrap();
    assert_eq!(paris.window_opened_at, Some(at("2026-11-23T08:30:00Z")));
    assert_eq!(paris.active_at, Some(at("2026-11-23T08:30:00Z")));
    assert_eq!(
        paris.done_at,
        Some(at("2026-11-23T09:30:00Z")),
        "1h, not 2h"
    );
    let tokyo = t.group("tokyo").unwrap();
    assert_eq!(tokyo.window_opened_at, Some(at("2026-11-23T00:00:00Z")));
    assert_eq!(tokyo.done_at, Some(at("2026-11-23T02:00:00Z")));
    // Tuesday 09:00 JST (00:00 UTC) is a blackout date in Tokyo: no second start.
    let starts = t
        .group_events("tokyo")
        .filter(|e| e.to.as_deref() == Some("active"))
        .count();
    assert_eq!(starts, 1, "tokyo opened again on its blackout date");
    assert_all_on_target(&t);
}

#[test]
fn long_polling_agents_start_within_the_release_jitter_and_finish_no_later() {
    let timer = run(&halt3(), params(2_000, 3), 30);
    let long_poll = run(
        &halt3(),
        Params {
            long_poll_jitter_secs: Some(3),
            ..params(2_000, 3)
        },
        30,
    );
    assert_all_on_target(&timer);
    assert_all_on_target(&long_poll);
    for (t, l) in timer.groups.iter().zip(&long_poll.groups) {
        // Released by the reconcile that starts the group, within ternd's jitter.
        let first = l.started_to_first_install_secs.unwrap();
        assert!(first <= 3, "{}: {first}s", l.name);
        // The timer waits for its next run (up to 60 s) and then find's jitter.
        assert!(
            t.started_to_first_install_secs.unwrap() >= first,
            "{}: {t:?}",
            t.name
        );
        assert!(
            l.window_to_done_secs.unwrap() <= t.window_to_done_secs.unwrap(),
            "{}: long poll {:?} vs timer {:?}",
            l.name,
            l.window_to_done_secs,
            t.window_to_done_secs
        );
    }
    let staging = &long_poll.groups[1];
    let canaries = staging.started_to_canaries_installing_secs.unwrap();
    assert!(canaries <= 3, "staging's canaries began after {canaries}s");
    assert_eq!(
        long_poll.groups[0].started_to_canaries_installing_secs, None,
        "dev has no canaries"
    );
}

/// A report soon after hosts finish lets a backpressured group move on as they do,
/// without more hosts in flight than `max_in_flight` allows; with several replicas
/// too (each brings its own next report forward).
#[test]
fn reporting_after_a_change_speeds_a_backpressured_group_within_its_bound() {
    let n = 2000u32;
    let config = ONE_GROUP.replace("start_hour: 12}", "start_hour: 12, max_in_flight: 10%}");
    let moving = |replicas: u16, after_change: Option<i64>| Params {
        long_poll_jitter_secs: Some(3),
        active_report_period_secs: Some(10),
        report_after_change_secs: after_change,
        replicas,
        ..params(n, 5)
    };
    let bound = (0.10 * f64::from(n) + 3.0 * f64::from(n).sqrt()) as u64;
    for replicas in [1, 3] {
        let periodic = run(&config, moving(replicas, None), 24);
        let eager = run(&config, moving(replicas, Some(2)), 24);
        for t in [&periodic, &eager] {
            assert_eq!(t.overall.rollout_state, "done", "{}", t.render_text());
            assert_all_on_target(t);
            let g = t.group("prod").unwrap();
            assert!(g.max_updating <= bound, "{} > {bound}", g.max_updating);
        }
        let (p, e) = (
            periodic.group("prod").unwrap().window_to_done_secs.unwrap(),
            eager.group("prod").unwrap().window_to_done_secs.unwrap(),
        );
        assert!(
            e < p,
            "{replicas} replicas: {e}s after a change vs {p}s every 10 s"
        );
        // Every host updated: ten waves of 20 s installs, at least.
        let all = eager
            .group("prod")
            .unwrap()
            .window_to_all_updated_secs
            .unwrap();
        assert!(all >= 200, "{all}s: faster than backpressure allows");
    }
}

/// The control plane under seeded faults (`tern_sim::faults`): on every seed the
/// fleet-safety invariant holds. A failing seed names the command that replays it.
/// CI runs this many; `cargo xtask sim --faults --seeds N` runs more.
#[test]
fn the_invariant_holds_under_seeded_faults() {
    let base = tern_sim::faults::FaultParams {
        hours: 36,
        ..tern_sim::faults::FaultParams::default()
    };
    let (failed, _) = tern_sim::faults::run_many(0, 300, base);
    let report: Vec<String> = failed
        .iter()
        .map(|r| {
            format!(
                "seed {}: {}\n  replay: {}",
                r.params.seed,
                r.violation
                    .as_ref()
                    .map_or(String::new(), ToString::to_string),
                r.replay_command()
            )
        })
        .collect();
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The faults bite: over a few seeds, broken targets are contained at their canaries
/// and the fleet is not simply idle (some hosts install the good target).
#[test]
fn seeded_faults_exercise_the_rollout() {
    let mut reached_good = 0;
    let mut broken_runs = 0;
    for seed in 0..20 {
        let run = tern_sim::faults::run(tern_sim::faults::FaultParams {
            seed,
            hours: 36,
            ..tern_sim::faults::FaultParams::default()
        });
        assert!(!run.log.is_empty(), "seed {seed}: no fault at all");
        if run.broken_target {
            broken_runs += 1;
            assert!(
                run.reached.get("dev").copied().unwrap_or(0) <= 1,
                "seed {seed}: {:?}",
                run.reached
            );
            assert_eq!(
                run.reached.get("prod"),
                None,
                "seed {seed}: {:?}",
                run.reached
            );
        } else {
            reached_good += run.reached.values().sum::<usize>();
        }
    }
    assert!(
        broken_runs > 0 && reached_good > 0,
        "{broken_runs} {reached_good}"
    );
}
