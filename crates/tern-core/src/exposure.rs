//! How far a bad version goes before anything can stop it: the groups of a config that
//! send a new version to all their hosts at once. A halt-on-error group with neither
//! canaries nor a `max_in_flight` below 100% (nor a topology limit) tells every one of
//! its hosts to update as it starts, so a version that breaks them breaks them all
//! before the group can halt. Such a config is allowed (Teleport's files keep
//! Teleport's defaults) but never silently: ternctl, ternd's answers and the dashboard
//! say so, each from [`all_at_once`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::domain::aggregate::Aggregate;
use crate::domain::duration::Percent;
use crate::domain::resource::{AutoUpdateAgentReport, AutoUpdateConfig, Strategy};
use crate::domain::rollout::Groups;

/// The stable `kind` of an [`all_at_once`] warning.
pub const ALL_AT_ONCE: &str = "all_at_once";

/// Something about a config a person should know before a rollout runs under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigWarning {
    /// Stable: [`ALL_AT_ONCE`].
    pub kind: String,
    pub group: String,
    /// The hosts the group holds now, when the inventory is known.
    pub hosts: Option<u64>,
    pub message: String,
}

/// The halt-on-error groups of `config` (the default config when there is none) that
/// would send a new version to all their hosts at once, in the config's order. `hosts`
/// holds each group's hosts when an inventory is known (a group it lacks has none).
pub fn all_at_once(
    config: Option<&AutoUpdateConfig>,
    hosts: Option<&BTreeMap<String, u64>>,
) -> Vec<ConfigWarning> {
    let default_config = AutoUpdateConfig::default();
    let config = config.unwrap_or(&default_config);
    if config.strategy() != Strategy::HaltOnError {
        return Vec::new();
    }
    let all = Percent::from_percent(100);
    config
        .groups()
        .into_iter()
        .filter(|g| {
            g.canary_count <= 0 && g.max_in_flight.is_none_or(|m| m >= all) && g.topology.is_empty()
        })
        .map(|g| {
            let n = hosts.map(|h| h.get(&g.name).copied().unwrap_or(0));
            let reach = match n {
                None => format!("every host of {}", g.name),
                Some(0) => format!("every host of {} (none connected now)", g.name),
                Some(1) => format!("the 1 host of {}", g.name),
                Some(n) => format!("all {n} hosts of {}", g.name),
            };
            ConfigWarning {
                kind: ALL_AT_ONCE.to_string(),
                message: format!(
                    "a bad version reaches {reach} at once: set canary_count or max_in_flight"
                ),
                group: g.name,
                hosts: n,
            }
        })
        .collect()
}

/// Each group's hosts under `config` from the live reports (connected, counted or not,
/// each in the group that serves it: the catch-all takes those with no or an unknown
/// group); `None` when no report is live, so nothing is known of the fleet.
pub fn hosts_from_reports(
    config: Option<&AutoUpdateConfig>,
    reports: &[AutoUpdateAgentReport],
    now: Timestamp,
    report_period: SignedDuration,
) -> Option<BTreeMap<String, u64>> {
    let groups = Groups::configured(config);
    let agg = Aggregate::from_reports(reports, now, report_period, &groups, "");
    (agg.live_reports > 0).then(|| {
        agg.groups
            .iter()
            .map(|(name, c)| (name.clone(), c.connected()))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> AutoUpdateConfig {
        AutoUpdateConfig::from_text(text).unwrap()
    }

    const GROUPS: &str = "kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
      - {name: dev, canary_count: 2}
      - {name: staging, max_in_flight: 20%}
      - {name: zoned, topology: [{key: zone, max_in_flight: 1}]}
      - {name: full, max_in_flight: 100%}
      - {name: prod}
";

    #[test]
    fn only_groups_without_canaries_or_a_limit_are_named() {
        let c = config(GROUPS);
        let w = all_at_once(Some(&c), None);
        let names: Vec<&str> = w.iter().map(|w| w.group.as_str()).collect();
        assert_eq!(names, ["full", "prod"]);
        assert_eq!(
            w[1].message,
            "a bad version reaches every host of prod at once: set canary_count or max_in_flight"
        );
        assert_eq!(w[1].kind, ALL_AT_ONCE);
        assert_eq!(w[1].hosts, None);
    }

    #[test]
    fn the_count_comes_from_the_inventory() {
        let c = config(GROUPS);
        let hosts = BTreeMap::from([("prod".to_string(), 240)]);
        let w = all_at_once(Some(&c), Some(&hosts));
        assert_eq!(
            w[1].message,
            "a bad version reaches all 240 hosts of prod at once: set canary_count or max_in_flight"
        );
        assert_eq!(w[1].hosts, Some(240));
        // A group the inventory lacks has no host now.
        assert_eq!(w[0].hosts, Some(0));
        assert!(
            w[0].message.contains("(none connected now)"),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn the_default_config_is_one_group_all_at_once() {
        let w = all_at_once(None, None);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].group, "default");
    }

    #[test]
    fn time_based_groups_are_not_flagged() {
        let c = config(
            "kind: autoupdate_config
spec:
  agents:
    strategy: time-based
    schedules:
      regular:
      - {name: prod}
",
        );
        assert!(all_at_once(Some(&c), None).is_empty());
    }

    #[test]
    fn hosts_count_in_the_group_that_serves_them() {
        use crate::domain::resource::ConnectedAgent;
        let c = config(GROUPS);
        let agent = |id: &str, group: &str| ConnectedAgent {
            updater_id: id.to_string(),
            host_id: String::new(),
            hostname: String::new(),
            group: group.to_string(),
            version: "1.0.0".to_string(),
            updater_status: Default::default(),
            healthy: None,
            failed_version: None,
            refused_version: None,
            attributes: BTreeMap::new(),
        };
        let now: Timestamp = "2026-11-23T12:00:00Z".parse().unwrap();
        let agents = [
            agent("a", "dev"),
            agent("b", "prod"),
            agent("c", ""),
            agent("d", "prdo"),
        ];
        let report = crate::domain::inventory::report_of_agents(now, &agents);
        let period = crate::domain::rollout::DEFAULT_REPORT_PERIOD;
        let hosts = hosts_from_reports(Some(&c), &[report], now, period).unwrap();
        assert_eq!(hosts.get("dev"), Some(&1));
        assert_eq!(hosts.get("prod"), Some(&3));
        // No live report: nothing is known.
        assert_eq!(hosts_from_reports(Some(&c), &[], now, period), None);
    }
}
