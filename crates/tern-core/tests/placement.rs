//! Groups assigned by the server: `match_labels` on groups, `host_group` on the config,
//! and `rollout::place`, from config text through the reconcile to the placement.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use tern_core::resource::AutoUpdateConfig;
use tern_core::rollout::{self, place};

const MON_10: &str = "2026-11-23T10:00:00Z";

fn labelled(host_group: Option<&str>) -> String {
    let policy = host_group.map_or(String::new(), |p| format!("    host_group: {p}\n"));
    format!(
        "kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
{policy}    schedules:
      regular:
        - name: dev
          start_hour: 10
        - name: eu-prod
          start_hour: 12
          match_labels: {{env: prod, region: eu}}
        - name: prod
          start_hour: 14
          match_labels: {{env: prod}}
        - name: rest
          start_hour: 16
"
    )
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn rollout_of(yaml: &str) -> tern_core::resource::AutoUpdateAgentRollout {
    let mut w = World::new(Some(config(yaml)), version("1.0.0", "1.1.0"));
    w.reconcile(MON_10).clone()
}

#[test]
fn the_first_matching_group_places_a_host_and_its_own_group_overrides_by_default() {
    let r = rollout_of(&labelled(None));
    assert!(rollout::places_by_labels(&r));
    let eu = labels(&[("env", "prod"), ("region", "eu"), ("rack", "7")]);
    let us = labels(&[("env", "prod"), ("region", "us")]);
    // No group, or one the rollout lacks: the labels place it, first match first.
    assert_eq!(place(&r, "", &eu), "eu-prod");
    assert_eq!(place(&r, "", &us), "prod");
    assert_eq!(place(&r, "prdo", &us), "prod");
    // No match: what it presents (the catch-all serves an unknown one).
    assert_eq!(place(&r, "", &labels(&[("env", "dev")])), "");
    assert_eq!(place(&r, "prdo", &BTreeMap::new()), "prdo");
    // Its own known group wins under `override` (the default)…
    assert_eq!(place(&r, "dev", &eu), "dev");
    // …and counts only when nothing matches under `fallback`.
    let r = rollout_of(&labelled(Some("fallback")));
    assert_eq!(place(&r, "dev", &eu), "eu-prod");
    assert_eq!(place(&r, "dev", &labels(&[("env", "dev")])), "dev");
}

#[test]
fn a_config_without_match_labels_places_nobody() {
    let r = rollout_of(&three_groups_config());
    assert!(!rollout::places_by_labels(&r));
    assert_eq!(place(&r, "staging", &labels(&[("env", "prod")])), "staging");
}

#[test]
fn only_a_name_that_alone_places_a_host_falls_back_to_the_catch_all() {
    let by_name = rollout_of(&three_groups_config());
    assert_eq!(rollout::falls_back(&by_name, "prdo"), Some("prod"));
    assert_eq!(rollout::falls_back(&by_name, "stable/cloud"), Some("prod"));
    // A group the rollout has, or none at all, is no fallback.
    assert_eq!(rollout::falls_back(&by_name, "staging"), None);
    assert_eq!(rollout::falls_back(&by_name, ""), None);
    // Where groups place hosts by labels, the labels decide, not the name.
    let by_labels = rollout_of(&labelled(None));
    assert_eq!(rollout::falls_back(&by_labels, "prdo"), None);
}

#[test]
fn bad_match_labels_are_refused_naming_the_field() {
    for (bad, field) in [
        (
            "{\"bad key!\": x}",
            "spec.agents.schedules.regular[1].match_labels",
        ),
        (
            "{env: \"a\\nb\"}",
            "spec.agents.schedules.regular[1].match_labels.env",
        ),
    ] {
        let yaml = labelled(None).replace("{env: prod, region: eu}", bad);
        let err = AutoUpdateConfig::from_text(&yaml).unwrap_err().to_string();
        assert!(err.contains(field), "{bad}: {err}");
    }
    let yaml = labelled(Some("sometimes"));
    let err = AutoUpdateConfig::from_text(&yaml).unwrap_err().to_string();
    assert!(err.contains("host_group"), "{err}");
}

proptest! {
    /// Whatever the labels: the placement is a group of the rollout or what the host
    /// presented; a group it lands in by labels has all its `match_labels` in them, and
    /// no earlier group matched.
    #[test]
    fn a_placement_is_the_first_match_or_what_was_presented(
        env in prop::sample::select(vec!["prod", "dev", "qa"]),
        region in prop::option::of(prop::sample::select(vec!["eu", "us"])),
        presented in prop::sample::select(vec!["", "dev", "prod", "prdo"]),
        fallback in any::<bool>(),
    ) {
        let r = rollout_of(&labelled(fallback.then_some("fallback")));
        let mut l = labels(&[("env", env)]);
        if let Some(region) = region {
            l.insert("region".into(), region.into());
        }
        let placed = place(&r, presented, &l);
        let groups = &r.status.groups;
        let matches = |g: &tern_core::resource::RolloutGroup| {
            !g.config.match_labels.is_empty()
                && g.config.match_labels.iter().all(|(k, v)| l.get(k) == Some(v))
        };
        if placed != presented {
            let i = groups.iter().position(|g| g.name == placed).unwrap();
            prop_assert!(matches(&groups[i]));
            prop_assert!(!groups[..i].iter().any(matches));
        } else if let Some(first) = groups.iter().find(|g| matches(g)) {
            // Kept what it presented although a group matched: only an own known group
            // under `override` (or a match on the very group it presents).
            prop_assert!(
                (!fallback && r.group(presented).is_some()) || first.name == presented
            );
        }
    }
}
