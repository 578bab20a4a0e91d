//! Canaries chosen for coverage: a group's `canary_cover`, from config text through
//! what replicas offer (`inventory::canary_candidates` fills in the attributes and
//! offers one host per value) to the leader's pick (`canary::pick_covering`) and what
//! the status says the canaries cover and miss.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use common::*;
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::canary::{Attribute, COVER_OFFERS_PER_GROUP, coverage, pick, pick_covering};
use tern_core::inventory::{InventoryAgent, canary_candidates, replica_report};
use tern_core::reconcile::needs;
use tern_core::resource::*;
use tern_core::rollout::DEFAULT_REPORT_PERIOD;
use tern_core::wire::Heartbeat;

/// dev, then staging with 2 canaries covering `cover` (YAML flow items).
fn covering(cover: &str) -> String {
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
        - name: dev
          start_hour: 10
        - name: staging
          start_hour: 14
          canary_count: 2
          canary_cover: [{cover}]
"
    )
}

/// A candidate with these attributes.
fn host(id: &str, attrs: &[(&str, &str)]) -> ConnectedAgent {
    let mut a = agent("staging", 0, "1.0.0");
    a.updater_id = id.to_string();
    a.attributes = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    a
}

fn cover(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn attributes_parse_and_bad_covers_are_refused_with_the_field_named() {
    assert_eq!(Attribute::parse("arch"), Some(Attribute::Arch));
    assert_eq!(Attribute::parse("os_version"), Some(Attribute::OsVersion));
    assert_eq!(
        Attribute::parse("labels.zone"),
        Some(Attribute::Label("zone"))
    );
    for bad in ["zone", "labels.", "labels.a b", "Arch", ""] {
        assert_eq!(Attribute::parse(bad), None, "{bad:?}");
    }
    assert!(AutoUpdateConfig::from_text(&covering("arch, labels.zone")).is_ok());
    let table = [
        (
            "zone",
            "spec.agents.schedules.regular[1].canary_cover[0]: \"zone\" is not an attribute: arch, os, os_version or labels.KEY",
        ),
        ("arch, arch", "canary_cover[1]: \"arch\" is named twice"),
        (
            "arch, os, os_version, labels.a, labels.b",
            "canary_cover: 5 attributes; at most 4",
        ),
    ];
    for (c, want) in table {
        let err = AutoUpdateConfig::from_text(&covering(c))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{c}: {err}");
    }
    let no_canaries = covering("arch").replace("          canary_count: 2\n", "");
    let err = AutoUpdateConfig::from_text(&no_canaries)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("canary_cover: arch needs canary_count"),
        "{err}"
    );
}

#[test]
fn the_rare_value_is_always_covered_where_a_random_pick_often_misses_it() {
    // Nine amd64 hosts and one arm64: two canaries.
    let mut hosts: Vec<ConnectedAgent> = (0..9)
        .map(|i| host(&format!("x{i}"), &[("arch", "amd64")]))
        .collect();
    hosts.push(host("arm", &[("arch", "arm64")]));
    let refs: Vec<&ConnectedAgent> = hosts.iter().collect();
    let c = cover(&["arch"]);
    let mut random_missed = 0;
    for seed in 0..50 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let picked = pick_covering(&refs, 2, &c, &mut rng);
        assert!(picked.iter().any(|p| p.updater_id == "arm"), "seed {seed}");
        let cov = coverage(&picked, &refs, &c);
        assert_eq!(cov[0].covered, ["amd64", "arm64"]);
        assert!(cov[0].missed.is_empty());
        let random = pick(&refs, 2, &mut ChaCha8Rng::seed_from_u64(seed));
        random_missed += usize::from(!random.iter().any(|p| p.updater_id == "arm"));
    }
    assert!(random_missed > 25, "a random pick misses arm64 most times");
    // One canary cannot cover both: the status says what is missed.
    let one = pick_covering(&refs, 1, &c, &mut ChaCha8Rng::seed_from_u64(1));
    let cov = coverage(&one, &refs, &c);
    assert_eq!(cov[0].covered.len() + cov[0].missed.len(), 2);
    assert_eq!(cov[0].missed.len(), 1);
    assert!(
        cov[0].summary().contains("; misses "),
        "{}",
        cov[0].summary()
    );
}

#[test]
fn several_attributes_take_the_host_that_covers_most_first() {
    let hosts = [
        host("a", &[("arch", "amd64"), ("labels.zone", "z1")]),
        host("b", &[("arch", "amd64"), ("labels.zone", "z1")]),
        host("c", &[("arch", "arm64"), ("labels.zone", "z2")]),
        host("d", &[("arch", "amd64"), ("labels.zone", "z3")]),
        // No zone label: it covers "" for it.
        host("e", &[("arch", "amd64")]),
    ];
    let refs: Vec<&ConnectedAgent> = hosts.iter().collect();
    let c = cover(&["arch", "labels.zone"]);
    for seed in 0..20 {
        let picked = pick_covering(&refs, 2, &c, &mut ChaCha8Rng::seed_from_u64(seed));
        let ids: BTreeSet<&str> = picked.iter().map(|p| p.updater_id.as_str()).collect();
        // c brings two new values and is taken first; then any host with a new zone.
        assert!(ids.contains("c"), "seed {seed}: {ids:?}");
        let cov = coverage(&picked, &refs, &c);
        assert_eq!(cov[0].covered, ["amd64", "arm64"], "seed {seed}");
        assert_eq!(cov[1].covered.len(), 2, "{cov:?}");
        assert_eq!(cov[1].missed.len(), 2, "{cov:?}");
    }
    let all = pick_covering(&refs, 5, &c, &mut ChaCha8Rng::seed_from_u64(3));
    let cov = coverage(&all, &refs, &c);
    assert_eq!(cov[1].covered, ["", "z1", "z2", "z3"]);
    assert!(cov[1].missed.is_empty());
    assert_eq!(
        cov[1].summary(),
        "labels.zone: covers (not said), z1, z2, z3"
    );
}

/// Replicas fill in the attributes from their hosts' heartbeats and offer one host per
/// value besides their random sample; the leader's canaries, picked from two replicas'
/// reports, cover the rare value only one replica holds.
#[test]
fn the_leader_covers_a_value_only_another_replica_offers() {
    let mut w = World::new(
        Some(config(&covering("arch, labels.zone"))),
        version("1.0.0", "1.1.0"),
    );
    // Dev done, staging next: it needs candidates.
    let mut r = w.reconcile("2026-11-23T09:00:00Z").clone();
    r.status.groups[0].state = GroupState::Done;
    let n = needs(&r);
    assert_eq!(n.canary_candidates, ["staging"]);
    assert_eq!(n.canary_cover["staging"], cover(&["arch", "labels.zone"]));
    let now = ts("2026-11-23T14:00:30Z");
    let inv = |i: usize, arch: &str, zone: Option<&str>| InventoryAgent {
        heartbeat: Heartbeat {
            updater_id: uid("staging", i),
            group: "staging".into(),
            version: "1.0.0".into(),
            arch: arch.into(),
            labels: zone
                .map(|z| BTreeMap::from([("zone".to_string(), z.to_string())]))
                .unwrap_or_default(),
            ..Heartbeat::default()
        },
        first_seen: ts("2026-11-23T00:00:00Z"),
        last_seen: now,
    };
    // Replica a: 200 amd64 hosts in z1. Replica b: the same, and one arm64 host in z2.
    let a: Vec<InventoryAgent> = (0..200).map(|i| inv(i, "amd64", Some("z1"))).collect();
    let mut b: Vec<InventoryAgent> = (200..400).map(|i| inv(i, "amd64", Some("z1"))).collect();
    b.push(inv(400, "arm64", Some("z2")));
    b.push(inv(401, "amd64", None));
    let offered = canary_candidates(
        &b,
        &n,
        now,
        DEFAULT_REPORT_PERIOD,
        10,
        &mut ChaCha8Rng::seed_from_u64(1),
    );
    let staging = &offered["staging"];
    assert!(staging.len() <= COVER_OFFERS_PER_GROUP + 10);
    let arm = staging
        .iter()
        .find(|c| c.updater_id == uid("staging", 400))
        .expect("the one arm64 host is offered");
    assert_eq!(
        arm.attributes,
        BTreeMap::from([
            ("arch".to_string(), "arm64".to_string()),
            ("labels.zone".to_string(), "z2".to_string())
        ])
    );
    let unlabelled = staging
        .iter()
        .find(|c| c.updater_id == uid("staging", 401))
        .expect("the host without a zone is offered");
    assert_eq!(unlabelled.attributes.get("labels.zone"), None);

    let report = |name: &str, agents: &[InventoryAgent], seed: u64| {
        let by_id: HashMap<String, InventoryAgent> = agents
            .iter()
            .map(|x| (x.heartbeat.updater_id.clone(), x.clone()))
            .collect();
        let spec = replica_report(
            now,
            agents,
            |id| by_id.get(id),
            |_| false,
            Some(&n),
            DEFAULT_REPORT_PERIOD,
            DEFAULT_REPORT_PERIOD,
            &mut ChaCha8Rng::seed_from_u64(seed),
        );
        AutoUpdateAgentReport::new(name, spec)
    };
    let reports = vec![report("a", &a, 2), report("b", &b, 3)];
    w.rollout = Some(r);
    let at = ts("2026-11-23T14:01:00Z");
    w.agents = tern_core::aggregate::connected_agents(&reports, at, DEFAULT_REPORT_PERIOD);
    w.reconcile_with(at, &reports);
    let staging = w.group("staging");
    assert_eq!(staging.state, GroupState::Canary);
    let ids: HashSet<&str> = staging
        .canaries
        .iter()
        .map(|c| c.updater_id.as_str())
        .collect();
    assert!(ids.contains(uid("staging", 400).as_str()), "{ids:?}");
    let arch = &staging.canary_coverage[0];
    assert_eq!(
        (arch.covered.clone(), arch.missed.clone()),
        (cover(&["amd64", "arm64"]), vec![])
    );
    // Two canaries, three zone values (z1, z2, and none): one is missed and said so.
    let zone = &staging.canary_coverage[1];
    assert_eq!(zone.attribute, "labels.zone");
    assert_eq!(zone.covered.len(), 2, "{zone:?}");
    assert_eq!(zone.missed.len(), 1, "{zone:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the candidates: the pick is min(count, candidates) distinct hosts,
    /// reproducible by seed; while any value is left uncovered every canary brought a
    /// new value when it was picked; with one attribute, as many values are covered as
    /// there are canaries (or values).
    #[test]
    fn a_covering_pick_wastes_no_canary_while_values_are_missed(
        hosts in prop::collection::vec((0u8..5, 0u8..3, any::<bool>()), 1..30),
        count in 1usize..6,
        attrs in 1usize..3,
        seed in any::<u64>(),
    ) {
        let names = ["arch", "labels.zone"];
        let c = cover(&names[..attrs]);
        let agents: Vec<ConnectedAgent> = hosts
            .iter()
            .enumerate()
            .map(|(i, (a, z, says_zone))| {
                let arch = format!("a{a}");
                let zone = format!("z{z}");
                let mut attrs = vec![("arch", arch.as_str())];
                if *says_zone {
                    attrs.push(("labels.zone", zone.as_str()));
                }
                host(&format!("h{i:02}"), &attrs)
            })
            .collect();
        let refs: Vec<&ConnectedAgent> = agents.iter().collect();
        let picked = pick_covering(&refs, count, &c, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(picked.len(), count.min(agents.len()));
        let ids: HashSet<&str> = picked.iter().map(|p| p.updater_id.as_str()).collect();
        prop_assert_eq!(ids.len(), picked.len());
        let again = pick_covering(&refs, count, &c, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(&again, &picked);

        let by_id: HashMap<&str, &ConnectedAgent> =
            agents.iter().map(|a| (a.updater_id.as_str(), a)).collect();
        let values_of = |a: &ConnectedAgent| -> Vec<(usize, String)> {
            c.iter()
                .enumerate()
                .map(|(i, k)| (i, a.attributes.get(k).cloned().unwrap_or_default()))
                .collect()
        };
        let cov = coverage(&picked, &refs, &c);
        let missed_any = cov.iter().any(|x| !x.missed.is_empty());
        if missed_any {
            let mut seen: HashSet<(usize, String)> = HashSet::new();
            for p in &picked {
                let v = values_of(by_id[p.updater_id.as_str()]);
                prop_assert!(
                    v.iter().any(|x| !seen.contains(x)),
                    "{} brought nothing new while {:?} is missed",
                    p.updater_id,
                    cov
                );
                seen.extend(v);
            }
        }
        for x in &cov {
            let all: BTreeSet<&String> = x.covered.iter().chain(&x.missed).collect();
            prop_assert_eq!(all.len(), x.covered.len() + x.missed.len());
        }
        if attrs == 1 {
            let distinct: HashSet<&String> =
                agents.iter().filter_map(|a| a.attributes.get("arch")).collect();
            prop_assert_eq!(cov[0].covered.len(), count.min(distinct.len()));
        }
    }
}

/// Among candidates bringing as many new values, the one whose values are rarest is
/// picked first, whatever the random order: with one canary to place and zones a, a,
/// b, the host of zone b (its value on one candidate, a's on two) is the pick for
/// every seed.
#[test]
fn among_equal_gains_the_rarest_values_go_first() {
    let hosts = [
        host("a1", &[("zone", "a")]),
        host("a2", &[("zone", "a")]),
        host("b1", &[("zone", "b")]),
    ];
    let candidates: Vec<&ConnectedAgent> = hosts.iter().collect();
    for seed in 0..64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let picked = pick_covering(&candidates, 1, &cover(&["zone"]), &mut rng);
        assert_eq!(
            picked
                .iter()
                .map(|c| c.updater_id.as_str())
                .collect::<Vec<_>>(),
            ["b1"],
            "seed {seed}"
        );
    }
}

/// Cover is asked only of a group about to pick canaries that names one: before dev is
/// done, staging (the only group with a cover) picks none yet.
#[test]
fn cover_is_asked_only_of_groups_about_to_pick_canaries() {
    let mut w = World::new(Some(config(&covering("arch"))), version("1.0.0", "1.1.0"));
    let r = w.reconcile("2026-11-23T09:00:00Z").clone();
    let n = needs(&r);
    assert!(!n.canary_candidates.iter().any(|g| g == "staging"), "{n:?}");
    assert!(n.canary_cover.is_empty(), "{:?}", n.canary_cover);
}
