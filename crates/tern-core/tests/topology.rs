//! Topology-aware backpressure: a group's `topology` limits, from config text through
//! the replicas' reports (`inventory::topology_report`), the leader's admissions
//! (`aggregate::topology_admissions` in the reconcile) to find's answer, on a small
//! fleet whose hosts act on find.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::gate;
use tern_core::inventory::{InventoryAgent, replica_report, tracked_values};
use tern_core::reconcile::{Resources, needs, reconcile_reports};
use tern_core::resource::*;
use tern_core::rollout::DEFAULT_REPORT_PERIOD;
use tern_core::wire::{Heartbeat, UpdaterStatus};

const T0: &str = "2026-11-23T10:00:00Z";

/// One group, `prod`, always in its window, with `max_in_flight` and the limits given
/// (YAML flow sequence items).
fn limited(max_in_flight: &str, limits: &str) -> String {
    format!(
        "kind: autoupdate_config
version: v1
metadata: {{name: autoupdate-config}}
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
        - name: prod
          days: [\"*\"]
          start_hour: 10
          max_in_flight: {max_in_flight}
          topology: [{limits}]
"
    )
}

/// A host of the simulated fleet.
#[derive(Clone, Debug)]
struct Host {
    id: String,
    zone: Option<String>,
    rack: String,
    version: String,
    replica: usize,
    /// Told to update at this step: it reports the target (or fails) a few steps on.
    installing_since: Option<u32>,
    /// Installing the target fails on this host: it rolls back and keeps reporting it.
    fails: bool,
    rolled_back: bool,
}

impl Host {
    fn heartbeat(&self) -> InventoryAgent {
        let mut labels = BTreeMap::from([("rack".to_string(), self.rack.clone())]);
        if let Some(z) = &self.zone {
            labels.insert("zone".into(), z.clone());
        }
        InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: self.id.clone(),
                host_id: format!("m-{}", self.id),
                hostname: format!("{}.example", self.id),
                group: "prod".into(),
                version: self.version.clone(),
                updater_status: UpdaterStatus::Enabled,
                healthy: Some(true),
                rollback: self.rolled_back,
                failed_version: self.rolled_back.then(|| "1.1.0".to_string()),
                labels,
                ..Heartbeat::default()
            },
            first_seen: ts("2026-11-23T00:00:00Z"),
            last_seen: ts(T0),
        }
    }
}

struct Fleet {
    config: AutoUpdateConfig,
    version: AutoUpdateVersion,
    rollout: Option<AutoUpdateAgentRollout>,
    hosts: Vec<Host>,
    now: Timestamp,
    step: u32,
    rng: ChaCha8Rng,
}

impl Fleet {
    fn new(yaml: &str, hosts: Vec<Host>, seed: u64) -> Self {
        Fleet {
            config: config(yaml),
            version: version("1.0.0", "1.1.0"),
            rollout: None,
            hosts,
            now: ts(T0),
            step: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Two replicas report, the leader reconciles, every host asks find; hosts told to
    /// update finish `install_steps` later.
    fn step(&mut self, install_steps: u32) {
        let period = DEFAULT_REPORT_PERIOD;
        let needs = self.rollout.as_ref().map(needs);
        let reports: Vec<AutoUpdateAgentReport> = (0..2)
            .map(|r| {
                let inv: Vec<InventoryAgent> = self
                    .hosts
                    .iter()
                    .filter(|h| h.replica == r)
                    .map(Host::heartbeat)
                    .collect();
                let by_id: HashMap<String, InventoryAgent> = inv
                    .iter()
                    .map(|a| (a.heartbeat.updater_id.clone(), a.clone()))
                    .collect();
                let mut spec = replica_report(
                    self.now,
                    &inv,
                    |id| by_id.get(id),
                    |_| false,
                    needs.as_ref(),
                    period,
                    period,
                    &mut self.rng,
                );
                spec.timestamp = self.now;
                AutoUpdateAgentReport::new(&format!("r{r}"), spec)
            })
            .collect();
        let outcome = reconcile_reports(
            self.now,
            Resources {
                config: Some(&self.config),
                version: Some(&self.version),
                rollout: self.rollout.as_ref(),
                frozen: false,
            },
            &reports,
            period,
            &mut self.rng,
        );
        let tern_core::reconcile::Outcome::Rollout { rollout, .. } = outcome else {
            panic!("no rollout: {outcome:?}");
        };
        self.rollout = Some(*rollout);
        for h in &mut self.hosts {
            if let Some(since) = h.installing_since {
                if self.step >= since + install_steps {
                    h.installing_since = None;
                    if h.fails {
                        h.rolled_back = true;
                    } else {
                        h.version = "1.1.0".into();
                    }
                }
                continue;
            }
            let d = gate::rollout_answer(self.rollout.as_ref(), "prod", &h.id);
            let target = d.version.as_ref().map(ToString::to_string);
            if d.update()
                && target.as_deref() == Some("1.1.0")
                && h.version != "1.1.0"
                && !h.rolled_back
            {
                h.installing_since = Some(self.step);
            }
        }
        self.step += 1;
        self.now = self.now.checked_add(SignedDuration::from_secs(30)).unwrap();
    }

    fn group(&self) -> &RolloutGroup {
        &self.rollout.as_ref().unwrap().status.groups[0]
    }

    /// Hosts installing now, per value of `key`.
    fn in_flight(&self, key: &str) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for h in self.hosts.iter().filter(|h| h.installing_since.is_some()) {
            let v = match key {
                "zone" => h.zone.clone().unwrap_or_default(),
                _ => h.rack.clone(),
            };
            *out.entry(v).or_default() += 1;
        }
        out
    }
}

/// `n` hosts spread over `zones` zones (host i in zone i % zones) and 3 racks.
fn hosts(n: usize, zones: usize) -> Vec<Host> {
    (0..n)
        .map(|i| Host {
            id: uid("prod", i),
            zone: Some(format!("z{}", i % zones)),
            rack: format!("r{}", i % 3),
            version: "1.0.0".into(),
            replica: i % 2,
            installing_since: None,
            fails: false,
            rolled_back: false,
        })
        .collect()
}

#[test]
fn config_topology_is_validated_with_the_field_named() {
    let ok = AutoUpdateConfig::from_text(&limited("100%", "{key: zone, max_in_flight: 2}"));
    assert!(ok.is_ok(), "{ok:?}");
    let table = [
        (
            "{key: zone, max_in_flight: 0}",
            "spec.agents.schedules.regular[0].topology[0].max_in_flight: 0 is out of range, expected 1 to 100 hosts per value",
        ),
        (
            "{key: zone, max_in_flight: 101}",
            "topology[0].max_in_flight: 101 is out of range",
        ),
        (
            "{key: \"a b\", max_in_flight: 1}",
            "topology[0].key: \"a b\" is not a label key",
        ),
        (
            "{key: zone, max_in_flight: 1}, {key: zone, max_in_flight: 2}",
            "topology[1].key: \"zone\" is limited twice",
        ),
        (
            "{key: a, max_in_flight: 1}, {key: b, max_in_flight: 1}, {key: c, max_in_flight: 1}",
            "regular[0].topology: 3 limits; at most 2",
        ),
        ("{key: zone, max: 2}", "max"),
    ];
    for (limits, want) in table {
        let err = AutoUpdateConfig::from_text(&limited("10%", limits))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{limits}: {err}");
    }
}

#[test]
fn a_rollout_copies_the_limits_and_replicas_report_hosts_behind_per_zone() {
    let mut fleet = Fleet::new(
        &limited("50%", "{key: zone, max_in_flight: 2}"),
        hosts(12, 3),
        1,
    );
    // One host is already on the target.
    fleet.hosts[0].version = "1.1.0".into();
    fleet.step(2);
    let g = fleet.group();
    assert_eq!(
        g.config.topology,
        vec![TopologyLimit {
            key: "zone".into(),
            max_in_flight: 2
        }]
    );
    // Active from the first reconcile (the window is open, no canaries): the first
    // reconcile had no report yet, so it admits nobody.
    assert_eq!(g.state, GroupState::Active);
    // The next reconcile has the reports: z0 has 3 hosts behind (host 0 is on the
    // target), z1 and z2 have 4; each admits its 2 lowest.
    fleet.step(100);
    let t = &fleet.group().topology[0];
    assert_eq!(
        t.behind,
        BTreeMap::from([("z0".into(), 3), ("z1".into(), 4), ("z2".into(), 4)])
    );
    assert_eq!(t.admitted.len(), 6, "{t:?}");
    assert_eq!(fleet.in_flight("zone").values().max(), Some(&2));
}

#[test]
fn a_replica_reports_settled_enabled_unpinned_hosts_not_yet_healthy_on_the_target() {
    use tern_core::inventory::topology_report;
    let mut fleet = Fleet::new(
        &limited("10%", "{key: zone, max_in_flight: 2}"),
        hosts(8, 1),
        7,
    );
    fleet.step(100);
    let needs = needs(fleet.rollout.as_ref().unwrap());
    assert_eq!(needs.topology.len(), 1);
    let mut inv: Vec<InventoryAgent> = fleet.hosts.iter().map(Host::heartbeat).collect();
    // 0: on the target, healthy: not behind. 1: on the target, unhealthy: behind.
    // 2: its updater is disabled; 3: pinned by the server; 4: heard from only now.
    inv[0].heartbeat.version = "v1.1.0".into();
    inv[1].heartbeat.version = "1.1.0".into();
    inv[1].heartbeat.healthy = Some(false);
    inv[2].heartbeat.updater_status = UpdaterStatus::Disabled;
    inv[4].first_seen = ts(T0);
    let pinned = inv[3].heartbeat.updater_id.clone();
    let now = ts(T0);
    let got = topology_report(&inv, &needs, now, DEFAULT_REPORT_PERIOD, |id| id == pinned);
    let z0 = &got["prod"][0].values["z0"];
    assert_eq!(z0.behind, 4, "hosts 1, 5, 6, 7: {got:?}");
    let mut want: Vec<&str> = [1, 5, 6, 7]
        .iter()
        .map(|&i| inv[i].heartbeat.updater_id.as_str())
        .collect();
    want.sort_by_key(|id| tern_core::backpressure::UpdaterNumeral::of(id));
    assert_eq!(z0.lowest, want[..2].to_vec());
    // A rollout without limits asks for nothing.
    let mut none = needs.clone();
    none.topology.clear();
    assert!(topology_report(&inv, &none, now, DEFAULT_REPORT_PERIOD, |_| false).is_empty());
}

#[test]
fn each_zone_updates_at_most_its_limit_at_once_and_the_group_completes() {
    let mut fleet = Fleet::new(
        &limited("10%", "{key: zone, max_in_flight: 2}"),
        hosts(30, 3),
        2,
    );
    let mut most = 0;
    for _ in 0..60 {
        fleet.step(2);
        for (zone, n) in fleet.in_flight("zone") {
            assert!(n <= 2, "zone {zone}: {n} in flight");
            most = most.max(n);
        }
        if fleet.group().state == GroupState::Done {
            break;
        }
    }
    assert_eq!(most, 2, "the limit is used, not only respected");
    assert_eq!(fleet.group().state, GroupState::Done);
    // Done at 90% updated (max_in_flight 10%); the rest follow under the same limit.
    for _ in 0..20 {
        fleet.step(2);
        assert!(fleet.in_flight("zone").values().all(|n| *n <= 2));
    }
    assert!(fleet.hosts.iter().all(|h| h.version == "1.1.0"));
    assert_eq!(fleet.group().topology[0].behind, BTreeMap::new());
}

#[test]
fn a_zone_whose_hosts_fail_holds_while_the_other_zones_finish() {
    let mut fleet = Fleet::new(
        &limited("100%", "{key: zone, max_in_flight: 1}"),
        hosts(12, 3),
        3,
    );
    // Every host of zone z1 fails the target.
    for h in fleet
        .hosts
        .iter_mut()
        .filter(|h| h.zone.as_deref() == Some("z1"))
    {
        h.fails = true;
    }
    for _ in 0..60 {
        fleet.step(1);
    }
    let z1: Vec<&Host> = fleet
        .hosts
        .iter()
        .filter(|h| h.zone.as_deref() == Some("z1"))
        .collect();
    // One host of z1 tried and rolled back; it keeps its place, so no other z1 host
    // is ever told to update.
    assert_eq!(z1.iter().filter(|h| h.rolled_back).count(), 1, "{z1:?}");
    assert!(z1.iter().all(|h| h.version == "1.0.0"));
    for h in fleet
        .hosts
        .iter()
        .filter(|h| h.zone.as_deref() != Some("z1"))
    {
        assert_eq!(h.version, "1.1.0", "{h:?}");
    }
    // max_in_flight 100%: done at once, and a done group still limits the hosts it
    // tells to update.
    assert_eq!(fleet.group().state, GroupState::Done);
    assert_eq!(fleet.group().topology[0].behind["z1"], 4);
}

#[test]
fn hosts_without_the_label_share_one_value_and_every_limit_must_admit() {
    let mut hs = hosts(12, 2);
    for h in hs.iter_mut().take(4) {
        h.zone = None;
    }
    let mut fleet = Fleet::new(
        &limited(
            "100%",
            "{key: zone, max_in_flight: 2}, {key: rack, max_in_flight: 1}",
        ),
        hs,
        4,
    );
    for _ in 0..80 {
        fleet.step(2);
        assert!(fleet.in_flight("zone").values().all(|n| *n <= 2));
        assert!(
            fleet.in_flight("rack").values().all(|n| *n <= 1),
            "{:?}",
            fleet.in_flight("rack")
        );
    }
    assert_eq!(fleet.group().state, GroupState::Done);
    assert!(fleet.hosts.iter().all(|h| h.version == "1.1.0"));
}

#[test]
fn find_holds_hosts_the_admissions_do_not_name() {
    let mut fleet = Fleet::new(
        &limited("10%", "{key: zone, max_in_flight: 1}"),
        hosts(6, 1),
        5,
    );
    fleet.step(100);
    fleet.step(100);
    let r = fleet.rollout.clone().unwrap();
    let admitted = &r.status.groups[0].topology[0].admitted;
    assert_eq!(admitted.len(), 1);
    let told: Vec<bool> = fleet
        .hosts
        .iter()
        .map(|h| gate::rollout_answer(Some(&r), "prod", &h.id).update())
        .collect();
    assert_eq!(told.iter().filter(|t| **t).count(), 1, "{told:?}");
    // A host without an updater id is never counted against a zone: held.
    assert!(!gate::rollout_answer(Some(&r), "prod", "").update());
    // Admissions not worked out yet (a rollout written by an older leader): held.
    let mut r2 = r.clone();
    r2.status.groups[0].topology.clear();
    assert!(!gate::rollout_answer(Some(&r2), "prod", &admitted[0]).update());
}

#[test]
fn past_the_tracked_values_hosts_wait_for_earlier_values_to_finish() {
    // 100 per value tracks 20 values; 30 zones of one host each.
    assert_eq!(tracked_values(100), 20);
    assert_eq!(tracked_values(1), 256);
    let mut fleet = Fleet::new(
        &limited("10%", "{key: zone, max_in_flight: 100}"),
        hosts(30, 30),
        6,
    );
    fleet.step(100);
    fleet.step(100);
    let t = &fleet.group().topology[0];
    assert_eq!(t.behind.len(), 20);
    assert_eq!(t.untracked_values, 10);
    assert_eq!(t.admitted.len(), 20);
    for _ in 0..20 {
        fleet.step(1);
    }
    assert_eq!(fleet.group().state, GroupState::Done);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the fleet, the limit and the pace of installs: no value of the label
    /// ever has more hosts installing than its limit, and without failures the group
    /// completes.
    #[test]
    fn no_zone_exceeds_its_limit_and_the_group_completes(
        n in 1usize..40,
        zones in 1usize..6,
        limit in 1u32..4,
        mif in prop::sample::select(vec!["10%", "50%", "100%"]),
        install_steps in 0u32..4,
        seed in any::<u64>(),
    ) {
        let mut fleet = Fleet::new(
            &limited(mif, &format!("{{key: zone, max_in_flight: {limit}}}")),
            hosts(n, zones),
            seed,
        );
        for _ in 0..400 {
            fleet.step(install_steps);
            for (zone, k) in fleet.in_flight("zone") {
                prop_assert!(k <= limit as usize, "zone {zone}: {k} > {limit}");
            }
            if fleet.group().state == GroupState::Done {
                break;
            }
        }
        prop_assert_eq!(fleet.group().state, GroupState::Done);
    }
}

/// The reconcile asks the replicas for topology counts only of groups that have limits
/// and are not rolled back (a rolled-back group tells no host to update).
#[test]
fn only_groups_with_limits_not_rolled_back_are_tracked() {
    let two = limited("10%", "{key: zone, max_in_flight: 2}")
        + "        - name: rest\n          days: [\"*\"]\n          start_hour: 10\n";
    let mut w = World::new(Some(config(&two)), version("1.0.0", "1.1.0"));
    let mut r = w.reconcile(T0).clone();
    let tracked = |r: &AutoUpdateAgentRollout| -> Vec<String> {
        needs(r).topology.into_iter().map(|(g, _)| g).collect()
    };
    assert_eq!(tracked(&r), ["prod"]);
    r.status.groups[0].state = GroupState::Rolledback;
    assert!(tracked(&r).is_empty(), "{:?}", tracked(&r));
}
