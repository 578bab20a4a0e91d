//! When evidence is missing the rollout holds: silent hosts do not make a group empty,
//! and a replica that stopped reporting does not make its hosts disappear.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use tern_core::reason;
use tern_core::resource::GroupState::*;
use tern_core::resource::*;

/// dev (12:00, no canary), staging (14:00, 2 canaries), prod: every host goes silent
/// (a partition, an expired token), then an operator rolls out 1.2.0. The replicas
/// are up and report no host. staging must not go active with no canary, nor any
/// group complete: the previous rollout saw their hosts.
#[test]
fn silent_hosts_do_not_complete_a_rollout_created_during_the_outage() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents = fleet("dev", 4, "1.0.0");
    w.agents.extend(fleet("staging", 4, "1.0.0"));
    w.agents.extend(fleet("prod", 4, "1.0.0"));
    // 1.1.0 goes through dev and staging on Monday.
    w.reconcile("2026-11-23T09:00:00Z");
    w.reconcile("2026-11-23T12:05:00Z");
    w.agents_follow_find("dev");
    w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(w.state("dev").0, Done);
    assert_eq!(w.group("staging").peak_count, 4);

    // Every host goes silent; 1.2.0 is rolled out during the outage (Tuesday).
    w.agents.clear();
    w.version = Some(version("1.1.0", "1.2.0"));
    w.reconcile("2026-11-24T09:00:00Z");
    assert_eq!(
        w.group("staging").peak_count,
        4,
        "the new rollout knows staging had 4"
    );
    w.reconcile("2026-11-24T12:05:00Z");
    // dev (no canary) does not start from nobody: it holds.
    assert_eq!(w.state("dev"), (Unstarted, reason::AGENTS_VANISHED.into()));
    assert!(
        w.rollout()
            .status
            .alerts
            .iter()
            .any(|a| a.kind == "agents_vanished"),
        "{:?}",
        w.rollout().status.alerts
    );
    for t in [
        "2026-11-24T13:30:00Z",
        "2026-11-24T14:05:00Z",
        "2026-11-24T15:30:00Z",
    ] {
        w.reconcile(t);
    }
    assert_eq!(w.state("dev").0, Unstarted);
    assert_eq!(w.state("staging").0, Unstarted, "nothing after dev moves");
    assert_eq!(w.state("prod").0, Unstarted);
    // The hosts come back: dev starts in its next window with all four, completes once
    // they run the new version; then staging starts with its canaries.
    w.agents = fleet("dev", 4, "1.1.0");
    w.agents.extend(fleet("staging", 4, "1.1.0"));
    w.agents.extend(fleet("prod", 4, "1.0.0"));
    w.reconcile("2026-11-25T12:05:00Z");
    assert_eq!(w.state("dev"), (Active, reason::UPDATE_IN_PROGRESS.into()));
    assert_eq!(w.group("dev").initial_count, 4);
    w.agents_follow_find("dev");
    w.reconcile("2026-11-25T12:10:00Z");
    assert_eq!(w.state("dev").0, Done);
    w.reconcile("2026-11-25T14:05:00Z");
    assert_eq!(w.state("staging").0, Canary);
    assert_eq!(w.group("staging").canaries.len(), 2);
}

/// Two replicas; replica-2 holds the staging hosts and stops writing its reports (its
/// store writes fail, or it is cut off): its last report goes stale. staging neither
/// skips its canaries nor completes on replica-1's counts alone; once replica-2
/// reports again it moves.
#[test]
fn a_replica_that_stopped_reporting_holds_the_groups_whose_hosts_it_counted() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let devs = fleet("dev", 2, "1.1.0");
    let stagings = fleet("staging", 3, "1.0.0");
    let at = |s: &str| ts(s);
    let two = |w: &mut World, t: &str, second_at: &str| {
        let r1 = report_of(at(t), &devs);
        let mut r2 = report_of(at(second_at), &stagings);
        r2.metadata.name = "replica-2".into();
        w.reconcile_with(at(t), &[r1, r2]).clone()
    };
    two(&mut w, "2026-11-23T09:00:00Z", "2026-11-23T09:00:00Z");
    two(&mut w, "2026-11-23T12:05:00Z", "2026-11-23T12:05:00Z");
    two(&mut w, "2026-11-23T12:10:00Z", "2026-11-23T12:10:00Z");
    assert_eq!(w.state("dev").0, Done);
    // replica-2's last report is from 12:10; at 14:05 it is long stale.
    let r = two(&mut w, "2026-11-23T14:05:00Z", "2026-11-23T12:10:00Z");
    let staging = r.group("staging").unwrap();
    assert_eq!(
        (staging.state, staging.last_update_reason.as_str()),
        (Unstarted, reason::REPORTS_MISSING),
        "{staging:?}"
    );
    assert!(r.status.alerts.iter().any(|a| a.kind == "reports_missing"));
    // Back: staging starts and picks its canaries from replica-2's hosts.
    w.agents = stagings.clone();
    let r = two(&mut w, "2026-11-23T14:10:00Z", "2026-11-23T14:10:00Z");
    let staging = r.group("staging").unwrap();
    assert_eq!(staging.state, Canary, "{staging:?}");
    assert_eq!(staging.canaries.len(), 2);
}

/// The same silent replica, but its staging hosts have reconnected to replica-1: every
/// host it counted is seen live elsewhere, so its stale report holds nothing and
/// staging starts in its window.
#[test]
fn hosts_of_a_silent_replica_seen_live_elsewhere_let_their_group_move() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let devs = fleet("dev", 2, "1.1.0");
    let stagings = fleet("staging", 3, "1.0.0");
    let reports = |t: &str, second_at: &str, first: Vec<ConnectedAgent>| {
        let r1 = report_of(ts(t), &first);
        let mut r2 = report_of(ts(second_at), &stagings);
        r2.metadata.name = "replica-2".into();
        [r1, r2]
    };
    for t in [
        "2026-11-23T09:00:00Z",
        "2026-11-23T12:05:00Z",
        "2026-11-23T12:10:00Z",
    ] {
        w.reconcile_with(ts(t), &reports(t, t, devs.clone()));
    }
    assert_eq!(w.state("dev").0, Done);
    let everyone: Vec<ConnectedAgent> = devs.iter().chain(&stagings).cloned().collect();
    w.agents = stagings.clone();
    let r = w
        .reconcile_with(
            ts("2026-11-23T14:05:00Z"),
            &reports("2026-11-23T14:05:00Z", "2026-11-23T12:10:00Z", everyone),
        )
        .clone();
    let staging = r.group("staging").unwrap();
    assert_eq!(staging.state, Canary, "{staging:?}");
}

/// A flood of invented hosts (random groups, versions, long hostnames) makes a report
/// too big for its bound: it is shrunk by the documented rule and still written, with
/// every host counted and what was cut named, never dropped.
#[test]
fn a_report_over_its_bound_is_shrunk_and_keeps_every_count() {
    use tern_core::inventory::{FOLDED, InventoryAgent, bound_report, build_report, shrink_report};
    use tern_core::wire::Heartbeat;
    let now = ts("2026-11-23T10:00:00Z");
    let mut inv = Vec::new();
    for i in 0..3000 {
        inv.push(InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: format!("{i:08x}-0000-4000-8000-{i:012x}"),
                host_id: format!("host-{i}"),
                hostname: format!("{}-{i}", "x".repeat(200)),
                group: if i % 2 == 0 {
                    "dev".into()
                } else {
                    format!("invented-{}", i % 97)
                },
                version: format!("1.{}.0", i % 150),
                healthy: Some(true),
                ..Heartbeat::default()
            },
            first_seen: ts("2026-11-23T08:00:00Z"),
            last_seen: now,
        });
    }
    let mut spec = build_report(now, &inv, tern_core::rollout::DEFAULT_REPORT_PERIOD);
    // As a replica offers them: up to 10 candidates for dev, with their details.
    spec.canary_candidates.insert(
        "dev".into(),
        inv.iter()
            .take(10)
            .map(|a| {
                use tern_core::inventory::AgentView;
                a.connected()
            })
            .collect(),
    );
    let known = |g: &str| g == "dev";
    bound_report(&mut spec, known);
    let total = |s: &ReportSpec| -> u64 {
        s.groups
            .values()
            .flat_map(|g| g.versions.values())
            .map(|v| v.count)
            .sum()
    };
    assert_eq!(total(&spec), 3000);
    let size = |s: &ReportSpec| serde_json::to_vec(s).unwrap().len();
    let bound = 8 * 1024;
    assert!(
        size(&spec) > bound,
        "the flood is over the bound: {}",
        size(&spec)
    );
    assert!(shrink_report(&mut spec, known, |s| size(s) <= bound));
    assert!(size(&spec) <= bound);
    assert_eq!(total(&spec), 3000, "no host is dropped");
    assert!(!spec.shrunk.is_empty());
    assert!(spec.groups.contains_key("dev") && spec.groups.contains_key(FOLDED));
}

/// Hosts back from a partition are connected before they are counted (they settle for
/// one report period). A canary group in between must wait for them, not skip its
/// canaries for want of candidates (found by the partition test on real processes).
#[test]
fn hosts_back_but_not_settled_do_not_let_a_group_skip_its_canaries() {
    use tern_core::inventory::{InventoryAgent, build_report};
    use tern_core::wire::Heartbeat;
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents = fleet("dev", 2, "1.1.0");
    w.reconcile("2026-11-23T09:00:00Z");
    w.reconcile("2026-11-23T12:05:00Z");
    w.reconcile("2026-11-23T12:10:00Z");
    assert_eq!(w.state("dev").0, Done);
    // staging's four hosts just reconnected: heard for less than a report period.
    let now = ts("2026-11-23T14:05:00Z");
    let mut inv: Vec<InventoryAgent> = fleet("dev", 2, "1.1.0")
        .into_iter()
        .map(|a| InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: a.updater_id,
                group: a.group,
                version: a.version,
                healthy: Some(true),
                ..Heartbeat::default()
            },
            first_seen: ts("2026-11-23T08:00:00Z"),
            last_seen: now,
        })
        .collect();
    for a in fleet("staging", 4, "1.0.0") {
        inv.push(InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: a.updater_id,
                group: a.group,
                version: a.version,
                healthy: Some(true),
                ..Heartbeat::default()
            },
            first_seen: now,
            last_seen: now,
        });
    }
    let report = AutoUpdateAgentReport::new(
        "replica-1",
        build_report(now, &inv, tern_core::rollout::DEFAULT_REPORT_PERIOD),
    );
    assert_eq!(report.spec.groups["staging"].uncounted, 4);
    w.agents.clear();
    let r = w.reconcile_with(now, &[report]).clone();
    let staging = r.group("staging").unwrap();
    assert_eq!(staging.state, Canary, "{staging:?}");
    assert_eq!(staging.last_update_reason, reason::WAITING_FOR_CANARIES);
    assert_eq!(staging.connected_count, 4);
}

/// Progress survives the store: a rollout written as JSON and read back admits the same
/// hosts (a one-ULP loss once kept the lowest host not updated out for ever).
#[test]
fn backpressure_progress_survives_a_json_round_trip() {
    use tern_core::backpressure::UpdaterNumeral;
    // The value the partition test lost one ULP of.
    let seen: f64 = 0.9010692272863541;
    let back: f64 = serde_json::from_str(&serde_json::to_string(&seen).unwrap()).unwrap();
    assert_eq!(back.to_bits(), seen.to_bits());
    for id in [
        "e6ac7c7b-d3bd-4c62-8a4a-fc5c2f0a7d5e",
        "1f39832e-f6f0-4ddd-bb2c-80e5875739ef",
        "99f74fab-55c1-4018-b40d-633a0d6dc499",
    ] {
        let n = UpdaterNumeral::of(id);
        let progress = n.fraction().next_up();
        assert!(n.admitted(progress));
        let g = RolloutGroup {
            name: "dev".into(),
            progress,
            ..RolloutGroup::default()
        };
        let back: RolloutGroup = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(back.progress.to_bits(), progress.to_bits(), "{id}");
        assert!(n.admitted(back.progress), "{id}");
    }
}
