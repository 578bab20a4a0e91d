//! Who counts in a rollout's groups, and what counts as a failure of its target:
//! only hosts following the rollout are counted (not channel hosts, not hosts a
//! version directive governs); an install that failed before the switch is a failure
//! of that version (a canary's is a failed canary) and raises `install_refused`; and a
//! canary passes only on a known healthy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::alert::kind;
use tern_core::inventory::{
    AgentView, InventoryAgent, Model, OMITTED_CHANNEL, build_report, canary_candidates,
    omitted_reason,
};
use tern_core::reconcile::needs;
use tern_core::resource::*;
use tern_core::rollout::{DEFAULT_REPORT_PERIOD, target_failed};
use tern_core::wire::{Follows, Heartbeat, InstallFailure};

const NOW: &str = "2026-11-23T14:30:00Z";

fn host(group: &str, i: usize, version: &str) -> InventoryAgent {
    let a = agent(group, i, version);
    InventoryAgent {
        heartbeat: Heartbeat {
            updater_id: a.updater_id,
            host_id: a.host_id,
            hostname: a.hostname,
            group: a.group,
            version: a.version,
            healthy: Some(true),
            ..Heartbeat::default()
        },
        first_seen: ts("2026-11-23T08:00:00Z"),
        last_seen: ts(NOW),
    }
}

fn refusing(mut h: InventoryAgent, version: &str, kind: &str) -> InventoryAgent {
    h.heartbeat.install_failure = Some(InstallFailure {
        version: version.into(),
        kind: kind.into(),
        error: "the release is not signed by the pinned root".into(),
    });
    h
}

#[test]
fn channel_hosts_are_not_counted_in_the_rollout_group_of_the_same_name() {
    let mut sick_channel_host = host("prod", 9, "1.0.0");
    sick_channel_host.heartbeat.follows = Follows::Channel;
    sick_channel_host.heartbeat.healthy = Some(false);
    assert_eq!(sick_channel_host.model(), Model::Channel);
    let now = ts(NOW);
    assert_eq!(
        omitted_reason(&sick_channel_host, now, DEFAULT_REPORT_PERIOD),
        Some(OMITTED_CHANNEL)
    );
    let hosts = vec![
        host("prod", 0, "1.0.0"),
        host("prod", 1, "1.0.0"),
        sick_channel_host,
    ];
    let spec = build_report(now, &hosts, DEFAULT_REPORT_PERIOD);
    let prod = &spec.groups["prod"].versions["1.0.0"];
    assert_eq!((prod.count, prod.failed_count), (2, 0));
    assert_eq!(
        spec.omitted,
        vec![Omitted {
            reason: OMITTED_CHANNEL.into(),
            count: 1
        }]
    );
    // Nor is a channel host ever offered as a canary.
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    let r = w.reconcile("2026-11-23T09:00:00Z").clone();
    let mut n = needs(&r);
    n.canary_candidates = vec!["prod".into()];
    let offered = canary_candidates(
        &hosts,
        &n,
        now,
        DEFAULT_REPORT_PERIOD,
        10,
        &mut ChaCha8Rng::seed_from_u64(1),
    );
    assert_eq!(offered["prod"].len(), 2);
    assert!(
        offered["prod"]
            .iter()
            .all(|a| a.updater_id != uid("prod", 9))
    );
}

/// staging tests 2 canaries; one of them cannot install 1.1.0 (not signed for its
/// pinned root): a failed canary, an `install_refused` alert naming the kind, and a
/// target `new-rollout` will not take as a start version.
#[test]
fn a_canary_that_cannot_install_the_target_is_a_failed_canary() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents = fleet("dev", 2, "1.1.0");
    w.agents.extend(fleet("staging", 4, "1.0.0"));
    for a in &mut w.agents {
        a.healthy = Some(true);
    }
    w.reconcile("2026-11-23T09:00:00Z");
    w.reconcile("2026-11-23T12:00:00Z");
    w.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(w.group("staging").state, GroupState::Canary);
    let canaries: Vec<String> = w
        .group("staging")
        .canaries
        .iter()
        .map(|c| c.updater_id.clone())
        .collect();
    assert_eq!(canaries.len(), 2);
    // The first canary refuses 1.1.0; the second has not run yet.
    let mut inv: Vec<InventoryAgent> = w
        .agents
        .iter()
        .map(|a| {
            let i: usize = (0..4).find(|i| uid(&a.group, *i) == a.updater_id).unwrap();
            host(&a.group, i, &a.version)
        })
        .collect();
    for h in &mut inv {
        if h.heartbeat.updater_id == canaries[0] {
            *h = refusing(h.clone(), "1.1.0", "not_signed");
        }
    }
    for a in &mut w.agents {
        if a.updater_id == canaries[0] {
            a.refused_version = Some("1.1.0".into());
        }
    }
    let now = ts("2026-11-23T14:10:00Z");
    let report =
        AutoUpdateAgentReport::new("replica-1", build_report(now, &inv, DEFAULT_REPORT_PERIOD));
    assert_eq!(
        report.spec.groups["staging"].refused["1.1.0"]["not_signed"],
        1
    );
    let r = w.reconcile_with(now, &[report]).clone();
    let staging = r.group("staging").unwrap();
    assert_eq!(staging.state, GroupState::Canary);
    assert_eq!(staging.last_update_reason, "canary_failed");
    assert_eq!(staging.refused_count, 1);
    assert_eq!(staging.refused_kinds["not_signed"], 1);
    let refused = r
        .status
        .alerts
        .iter()
        .find(|a| a.kind == kind::INSTALL_REFUSED)
        .expect("install_refused is raised");
    assert!(
        refused.message.contains("1 not_signed"),
        "{}",
        refused.message
    );
    let failed = r
        .status
        .alerts
        .iter()
        .find(|a| a.kind == kind::CANARY_FAILED)
        .unwrap();
    assert!(
        failed.message.contains("could not install it"),
        "{}",
        failed.message
    );
    assert!(target_failed(&r).is_some());
}

/// A canary on the target whose updater cannot tell its agent's health (no `healthy`
/// in its heartbeat) proves nothing: the group waits; a known healthy passes it.
#[test]
fn a_canary_passes_only_on_a_known_healthy() {
    let mut w = World::new(
        Some(config(&three_groups_config())),
        version("1.0.0", "1.1.0"),
    );
    w.agents = fleet("dev", 2, "1.1.0");
    w.agents.extend(fleet("staging", 4, "1.0.0"));
    w.reconcile("2026-11-23T09:00:00Z");
    w.reconcile("2026-11-23T12:00:00Z");
    w.reconcile("2026-11-23T14:00:00Z");
    assert_eq!(w.group("staging").state, GroupState::Canary);
    let canaries: Vec<String> = w
        .group("staging")
        .canaries
        .iter()
        .map(|c| c.updater_id.clone())
        .collect();
    for a in &mut w.agents {
        if canaries.contains(&a.updater_id) {
            a.version = "1.1.0".into();
            a.healthy = None;
        }
    }
    w.reconcile("2026-11-23T14:10:00Z");
    assert_eq!(
        w.state("staging"),
        (GroupState::Canary, "waiting_for_canaries".into())
    );
    for a in &mut w.agents {
        if canaries.contains(&a.updater_id) {
            a.healthy = Some(true);
        }
    }
    w.reconcile("2026-11-23T14:20:00Z");
    assert_eq!(w.group("staging").state, GroupState::Active);
}
