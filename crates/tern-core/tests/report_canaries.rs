//! Canary candidates and canary status travelling in the replicas' reports
//! (`reconcile::needs`, `inventory::{replica_report, canary_candidates, canaries_seen}`) and the
//! leader turning live reports into the reconcile's agents (`aggregate::connected_agents`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use common::*;
use jiff::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::aggregate::connected_agents;
use tern_core::inventory::{
    FOLDED, InventoryAgent, MAX_UNKNOWN_GROUPS_IN_REPORT, MAX_VERSIONS_IN_REPORT, bound_report,
    build_report, canaries_seen, canary_candidates, replica_report,
};
use tern_core::reconcile::{Needs, needs};
use tern_core::resource::*;
use tern_core::rollout::DEFAULT_REPORT_PERIOD;
use tern_core::wire::{Heartbeat, UpdaterStatus};

const NOW: &str = "2026-11-23T10:00:00Z";

/// An inventory agent heard since `first_seen`.
fn inv(a: &ConnectedAgent, first_seen: &str) -> InventoryAgent {
    InventoryAgent {
        heartbeat: Heartbeat {
            updater_id: a.updater_id.clone(),
            host_id: a.host_id.clone(),
            hostname: a.hostname.clone(),
            group: a.group.clone(),
            version: a.version.clone(),
            updater_status: a.updater_status,
            healthy: a.healthy,
            ..Heartbeat::default()
        },
        first_seen: ts(first_seen),
        last_seen: ts(NOW),
    }
}

/// A rollout of &three_groups_config() (dev, staging with 2 canaries, prod) with these states.
fn rollout_with(states: &[(&str, GroupState)]) -> AutoUpdateAgentRollout {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let mut r = w.reconcile("2026-11-23T09:00:00Z").clone();
    for (name, state) in states {
        r.status
            .groups
            .iter_mut()
            .find(|g| g.name == *name)
            .unwrap()
            .state = *state;
    }
    r
}

fn names(v: Vec<&str>) -> Vec<String> {
    v.into_iter().map(str::to_string).collect()
}

fn groups_wanting_canaries(r: &AutoUpdateAgentRollout) -> Vec<String> {
    needs(r).canary_candidates
}

#[test]
fn which_groups_want_canaries() {
    use GroupState::*;
    type Row<'a> = (&'a [(&'a str, GroupState)], &'a [&'a str]);
    let table: &[Row] = &[
        // dev (first, no canaries) is next: nobody needs candidates yet.
        (&[], &[]),
        // dev done: staging (canary_count 2) is next.
        (&[("dev", Done)], &["staging"]),
        // staging active: it already has (or skipped) its canaries.
        (&[("dev", Done), ("staging", Active)], &[]),
        // dev active: staging is not next yet.
        (&[("dev", Active)], &[]),
        // Everything done but prod (no canaries).
        (&[("dev", Done), ("staging", Done)], &[]),
    ];
    for (states, want) in table {
        let r = rollout_with(states);
        assert_eq!(
            groups_wanting_canaries(&r),
            names(want.to_vec()),
            "{states:?}"
        );
    }
    // A group in canary with no canaries (manual start-update) wants some, in any
    // position; one that has canaries does not.
    let mut r = rollout_with(&[("prod", Canary)]);
    assert_eq!(groups_wanting_canaries(&r), ["prod"]);
    r.status.groups[2]
        .canaries
        .push(tern_core::resource::Canary {
            updater_id: "u".into(),
            host_id: String::new(),
            hostname: String::new(),
            success: false,
            failed: false,
            reason: String::new(),
        });
    assert!(groups_wanting_canaries(&r).is_empty());
    // Time-based and immediate rollouts never pick canaries.
    let mut r = rollout_with(&[("dev", Done)]);
    r.spec.strategy = Strategy::TimeBased;
    assert!(groups_wanting_canaries(&r).is_empty());
    let mut r = rollout_with(&[("dev", Done)]);
    r.spec.schedule = Schedule::Immediate;
    assert!(groups_wanting_canaries(&r).is_empty());
}

#[test]
fn candidates_are_a_bounded_sample_of_settled_enabled_agents_behind_the_target() {
    let r = rollout_with(&[("dev", GroupState::Done)]);
    let mut agents = Vec::new();
    // 30 settled staging agents behind the target, 5 already on it.
    agents.extend(
        fleet("staging", 30, "1.0.0")
            .iter()
            .map(|a| inv(a, "2026-11-23T08:00:00Z")),
    );
    let on_target: Vec<_> = (30..35).map(|i| agent("staging", i, "1.1.0")).collect();
    agents.extend(on_target.iter().map(|a| inv(a, "2026-11-23T08:00:00Z")));
    // Not settled, pinned, or of another group: never offered.
    let fresh = agent("staging", 40, "1.0.0");
    agents.push(inv(&fresh, "2026-11-23T09:59:30Z"));
    let mut pinned = agent("staging", 41, "1.0.0");
    pinned.updater_status = UpdaterStatus::Pinned;
    agents.push(inv(&pinned, "2026-11-23T08:00:00Z"));
    agents.extend(
        fleet("dev", 3, "1.0.0")
            .iter()
            .map(|a| inv(a, "2026-11-23T08:00:00Z")),
    );

    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let c = canary_candidates(
        &agents,
        &needs(&r),
        ts(NOW),
        DEFAULT_REPORT_PERIOD,
        10,
        &mut rng,
    );
    assert_eq!(c.keys().collect::<Vec<_>>(), vec!["staging"]);
    let staging = &c["staging"];
    assert_eq!(staging.len(), 10);
    assert!(
        staging
            .windows(2)
            .all(|w| w[0].updater_id < w[1].updater_id),
        "sorted, distinct"
    );
    for a in staging {
        assert_eq!(a.group, "staging");
        assert_eq!(a.version, "1.0.0", "agents behind the target come first");
        assert_ne!(a.updater_id, fresh.updater_id);
        assert_ne!(a.updater_id, pinned.updater_id);
    }
    // Another seed, another sample (it is random, not the first ten).
    let mut rng2 = ChaCha8Rng::seed_from_u64(8);
    let c2 = canary_candidates(
        &agents,
        &needs(&r),
        ts(NOW),
        DEFAULT_REPORT_PERIOD,
        10,
        &mut rng2,
    );
    assert_ne!(c2["staging"], *staging);

    // Fewer agents than the bound: all of them. Only agents on the target: those.
    let few: Vec<_> = on_target
        .iter()
        .map(|a| inv(a, "2026-11-23T08:00:00Z"))
        .collect();
    let c = canary_candidates(
        &few,
        &needs(&r),
        ts(NOW),
        DEFAULT_REPORT_PERIOD,
        10,
        &mut rng,
    );
    assert_eq!(c["staging"].len(), 5);

    // No group wants canaries, or no rollout: nothing.
    let r0 = rollout_with(&[]);
    assert!(
        canary_candidates(
            &agents,
            &needs(&r0),
            ts(NOW),
            DEFAULT_REPORT_PERIOD,
            10,
            &mut rng
        )
        .is_empty()
    );
    assert!(
        canary_candidates(
            &agents,
            &Needs::default(),
            ts(NOW),
            DEFAULT_REPORT_PERIOD,
            10,
            &mut rng
        )
        .is_empty()
    );
}

#[test]
fn the_catch_all_group_offers_agents_of_unknown_groups() {
    let r = rollout_with(&[
        ("dev", GroupState::Done),
        ("staging", GroupState::Done),
        ("prod", GroupState::Canary),
    ]);
    let agents: Vec<_> = [
        agent("", 0, "1.0.0"),
        agent("elsewhere", 1, "1.0.0"),
        agent("dev", 2, "1.0.0"),
    ]
    .iter()
    .map(|a| inv(a, "2026-11-23T08:00:00Z"))
    .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let c = canary_candidates(
        &agents,
        &needs(&r),
        ts(NOW),
        DEFAULT_REPORT_PERIOD,
        10,
        &mut rng,
    );
    let groups: Vec<&str> = c["prod"].iter().map(|a| a.group.as_str()).collect();
    assert_eq!(groups.len(), 2);
    assert!(
        groups.contains(&"") && groups.contains(&"elsewhere"),
        "{groups:?}"
    );
}

#[test]
fn canaries_seen_are_the_unsuccessful_canaries_this_replica_knows() {
    let mut r = rollout_with(&[("dev", GroupState::Done), ("staging", GroupState::Canary)]);
    let a = agent("staging", 1, "1.1.0");
    let b = agent("staging", 2, "1.0.0");
    let elsewhere = agent("staging", 3, "1.0.0");
    let canary = |x: &ConnectedAgent, success: bool| tern_core::resource::Canary {
        updater_id: x.updater_id.clone(),
        host_id: x.host_id.clone(),
        hostname: x.hostname.clone(),
        success,
        failed: false,
        reason: String::new(),
    };
    r.status.groups[1].canaries = vec![
        canary(&a, false),
        canary(&b, true),
        canary(&elsewhere, false),
    ];
    // Not settled is fine for a canary.
    let known: HashMap<String, InventoryAgent> = [&a, &b]
        .into_iter()
        .map(|x| (x.updater_id.clone(), inv(x, "2026-11-23T09:59:59Z")))
        .collect();
    let seen = canaries_seen(&needs(&r), |id| known.get(id));
    assert_eq!(
        seen,
        vec![a.clone()],
        "b already succeeded, the third is not here"
    );
    assert!(canaries_seen(&Needs::default(), |id| known.get(id)).is_empty());
}

/// A canary that rolled the target back says why in its replica's report (its
/// update's error and the agent's last output), and the leader's reconcile keeps it in
/// the rollout's canary, cleared once the canary runs the target healthy.
#[test]
fn a_failed_canary_says_why_from_its_report_into_the_rollout() {
    let mut r = rollout_with(&[("dev", GroupState::Done), ("staging", GroupState::Canary)]);
    let a = agent("staging", 1, "1.0.0");
    r.status.groups[1].canaries = vec![tern_core::resource::Canary {
        updater_id: a.updater_id.clone(),
        ..Default::default()
    }];
    let mut host = inv(&a, "2026-11-23T08:00:00Z");
    host.heartbeat.rollback = true;
    host.heartbeat.failed_version = Some("1.1.0".into());
    host.heartbeat.update_failure = Some(tern_core::wire::UpdateFailure {
        version: "1.1.0".into(),
        error: "update to 1.1.0 failed: 1.1.0 the agent is not running (5 checks in a row)".into(),
        agent_output: "thread 'main' panicked: cannot read its configuration".into(),
        time: None,
    });
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let spec = replica_report(
        ts(NOW),
        vec![&host],
        |id| (id == a.updater_id).then_some(&host),
        |_| false,
        Some(&needs(&r)),
        DEFAULT_REPORT_PERIOD,
        DEFAULT_REPORT_PERIOD,
        &mut rng,
    );
    let reason = spec.canary_failures[&a.updater_id].clone();
    assert!(
        reason.contains("not running (5 checks in a row)") && reason.contains("panicked"),
        "{reason}"
    );
    // A failure of another version is not the target's.
    let mut stale = host.clone();
    stale.heartbeat.update_failure.as_mut().unwrap().version = "0.9.0".into();
    let spec_stale = replica_report(
        ts(NOW),
        vec![&stale],
        |id| (id == a.updater_id).then_some(&stale),
        |_| false,
        Some(&needs(&r)),
        DEFAULT_REPORT_PERIOD,
        DEFAULT_REPORT_PERIOD,
        &mut rng,
    );
    assert!(spec_stale.canary_failures.is_empty(), "{spec_stale:?}");

    let config = config(&three_groups_config());
    let version = version("1.0.0", "1.1.0");
    let resources = tern_core::reconcile::Resources {
        config: Some(&config),
        version: Some(&version),
        rollout: Some(&r),
        frozen: false,
    };
    let reports = [AutoUpdateAgentReport::new("a", spec)];
    let out = tern_core::reconcile::reconcile_reports(
        ts(NOW),
        resources,
        &reports,
        DEFAULT_REPORT_PERIOD,
        &mut rng,
    );
    let tern_core::reconcile::Outcome::Rollout { rollout, .. } = out else {
        panic!("no rollout: {out:?}");
    };
    let c = &rollout.status.groups[1].canaries[0];
    assert!(c.failed, "{c:?}");
    assert_eq!(c.reason, reason);
}

fn report(name: &str, at: &str, spec_fn: impl FnOnce(&mut ReportSpec)) -> AutoUpdateAgentReport {
    let mut spec = build_report(
        ts(at),
        std::iter::empty::<InventoryAgent>(),
        DEFAULT_REPORT_PERIOD,
    );
    spec_fn(&mut spec);
    AutoUpdateAgentReport::new(name, spec)
}

#[test]
fn connected_agents_merge_live_reports_newest_first() {
    let moved_old = agent("staging", 1, "1.0.0");
    let moved_new = agent("staging", 1, "1.1.0");
    let only_a = agent("staging", 2, "1.0.0");
    let dead = agent("staging", 3, "1.0.0");
    let reports = vec![
        report("a", "2026-11-23T09:59:00Z", |s| {
            s.canary_candidates
                .insert("staging".into(), vec![moved_old.clone(), only_a.clone()]);
        }),
        report("b", "2026-11-23T09:59:30Z", |s| {
            s.canaries = vec![moved_new.clone()]
        }),
        // Older than two report periods: its replica is presumed dead.
        report("c", "2026-11-23T09:57:59Z", |s| {
            s.canaries = vec![dead.clone()]
        }),
    ];
    let got = connected_agents(&reports, ts(NOW), DEFAULT_REPORT_PERIOD);
    let mut want = vec![moved_new, only_a];
    want.sort_by(|x, y| x.updater_id.cmp(&y.updater_id));
    assert_eq!(got, want);
    assert!(connected_agents(&[], ts(NOW), DEFAULT_REPORT_PERIOD).is_empty());
}

#[test]
fn reports_without_the_new_fields_still_parse_and_empty_ones_are_not_written() {
    let old = r#"{"kind":"autoupdate_agent_report","version":"v1","metadata":{"name":"r1"},
        "spec":{"timestamp":"2026-11-23T10:00:00Z","groups":{"dev":{"versions":{"1.0.0":{"count":2}}}}}}"#;
    let r: AutoUpdateAgentReport = serde_json::from_str(old).unwrap();
    assert!(r.spec.canary_candidates.is_empty() && r.spec.canaries.is_empty());
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("canar"), "{text}");
    let back: AutoUpdateAgentReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
}

/// Two replicas: the canary group's agents all heartbeat to replica B, the leader is A
/// and sees none of them itself. Canaries are picked from B's report and the group goes
/// active once B reports them on the target.
#[test]
fn a_leader_picks_and_checks_canaries_connected_to_another_replica() {
    let period = DEFAULT_REPORT_PERIOD;
    let dev = fleet("dev", 3, "1.0.0");
    let mut staging = fleet("staging", 4, "1.0.0");
    let report_on = |name: &str,
                     at: Timestamp,
                     agents: &[ConnectedAgent],
                     rollout: Option<&AutoUpdateAgentRollout>| {
        let inv: Vec<InventoryAgent> = agents
            .iter()
            .map(|a| inv(a, "2026-11-23T00:00:00Z"))
            .collect();
        let by_id: HashMap<&str, &InventoryAgent> = inv
            .iter()
            .map(|a| (a.heartbeat.updater_id.as_str(), a))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let needs = rollout.map(needs);
        let spec = replica_report(
            at,
            &inv,
            |id| by_id.get(id).copied(),
            |_| false,
            needs.as_ref(),
            period,
            period,
            &mut rng,
        );
        AutoUpdateAgentReport::new(name, spec)
    };
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let step = |w: &mut World, at: &str, dev: &[ConnectedAgent], staging: &[ConnectedAgent]| {
        let at = ts(at);
        let reports = vec![
            report_on("a", at, dev, w.rollout.as_ref()),
            report_on("b", at, staging, w.rollout.as_ref()),
        ];
        // The leader (A) knows only what the reports carry.
        w.agents = connected_agents(&reports, at, period);
        w.reconcile_with(at, &reports);
    };
    let dev_done: Vec<_> = dev
        .iter()
        .map(|a| ConnectedAgent {
            version: "1.1.0".into(),
            ..a.clone()
        })
        .collect();
    step(&mut w, "2026-11-23T11:00:00Z", &dev, &staging);
    step(&mut w, "2026-11-23T12:01:00Z", &dev, &staging);
    assert_eq!(w.state("dev").0, GroupState::Active);
    step(&mut w, "2026-11-23T12:02:00Z", &dev_done, &staging);
    assert_eq!(w.state("dev").0, GroupState::Done);
    // B now offers staging candidates: staging starts in canary with two of B's agents.
    step(&mut w, "2026-11-23T14:01:00Z", &dev_done, &staging);
    assert_eq!(
        w.state("staging").0,
        GroupState::Canary,
        "{:?}",
        w.state("staging")
    );
    let canaries: Vec<String> = w
        .group("staging")
        .canaries
        .iter()
        .map(|c| c.updater_id.clone())
        .collect();
    assert_eq!(canaries.len(), 2);
    assert!(
        canaries
            .iter()
            .all(|c| staging.iter().any(|a| &a.updater_id == c))
    );
    // The canaries update; B reports their version; the group goes active.
    for a in staging
        .iter_mut()
        .filter(|a| canaries.contains(&a.updater_id))
    {
        a.version = "1.1.0".into();
    }
    step(&mut w, "2026-11-23T14:03:00Z", &dev_done, &staging);
    assert_eq!(
        w.state("staging").0,
        GroupState::Active,
        "{:?}",
        w.state("staging")
    );
    assert!(w.group("staging").canaries.iter().all(|c| c.success));
}

/// 50,011 invented group/version values once made a report (and /metrics) grow without
/// bound. The report keeps the rollout's groups and the most common versions and
/// counts the rest under `(other)`: no agent is lost, none is counted as updated.
#[test]
fn a_report_stays_bounded_whatever_the_agents_present() {
    let mut spec = build_report(
        ts(NOW),
        std::iter::empty::<InventoryAgent>(),
        DEFAULT_REPORT_PERIOD,
    );
    let entry = |count: u64, id: &str| VersionReport {
        count,
        failed_count: 0,
        lowest_updater_id: id.to_string(),
    };
    for i in 0..5_000u64 {
        let mut g = GroupReport::default();
        g.versions
            .insert("1.0.0".into(), entry(1 + i % 3, &format!("{i:08x}")));
        spec.groups.insert(format!("invented-{i}"), g);
    }
    let mut prod = GroupReport::default();
    prod.versions.insert("2.0.0".into(), entry(500, "ffff0000"));
    for v in 0..1_000u64 {
        prod.versions
            .insert(format!("9.9.{v}"), entry(1, &format!("{:08x}", v + 1)));
    }
    spec.groups.insert("prod".into(), prod);
    let total = |s: &ReportSpec| -> u64 {
        s.groups
            .values()
            .flat_map(|g| g.versions.values())
            .map(|v| v.count)
            .sum()
    };
    let before = total(&spec);
    let folded = bound_report(&mut spec, |g| g == "prod");
    assert!(folded > 0);
    assert_eq!(total(&spec), before, "every agent is still counted");
    assert_eq!(spec.groups.len(), 1 + MAX_UNKNOWN_GROUPS_IN_REPORT + 1);
    let prod = &spec.groups["prod"];
    assert_eq!(prod.versions.len(), MAX_VERSIONS_IN_REPORT);
    assert_eq!(
        prod.versions["2.0.0"].count, 500,
        "the common version keeps its entry"
    );
    let other = &prod.versions[FOLDED];
    let lowest_folded = (0..1_000u64)
        .filter(|v| !prod.versions.contains_key(&format!("9.9.{v}")))
        .map(|v| format!("{:08x}", v + 1))
        .min_by_key(|id| tern_core::backpressure::UpdaterNumeral::of(id))
        .unwrap();
    assert_eq!(
        other.lowest_updater_id, lowest_folded,
        "backpressure sees the lowest id"
    );
    assert_eq!(
        spec.groups[FOLDED].versions["1.0.0"]
            .lowest_updater_id
            .len(),
        8
    );
    // Bounding again changes nothing.
    let again = spec.clone();
    assert_eq!(bound_report(&mut spec, |g| g == "prod"), 0);
    assert_eq!(spec, again);
    assert!(serde_json::to_vec(&spec).unwrap().len() < 64 * 1024);
}
