//! Summing the replicas' reports into per-group counts, with the catch-all rule
//! (agents in an empty or unknown group count in the last group) and expiry (a report
//! older than two report periods is ignored: its replica is presumed dead and its
//! agents have reconnected elsewhere).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::domain::backpressure::UpdaterNumeral;
use crate::domain::backpressure::{Lowest, keep_lowest, tracked_values};
use crate::domain::resource::{
    AutoUpdateAgentReport, ConnectedAgent, Omitted, TopologyAdmission, TopologyLimit,
    TopologyReport,
};
use crate::domain::rollout::{Groups, is_live};
use crate::domain::version::normalize;

/// One group's agents across all live reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCounts {
    /// Connected agents, any version.
    pub present: u64,
    /// Connected agents running the target version, healthy.
    pub up_to_date: u64,
    /// Connected agents that reported a failed update (rolled back).
    pub failed: u64,
    /// Lowest updater_id among agents not on the target version.
    pub lowest_not_updated: Option<UpdaterNumeral>,
    /// Connected agents whose install of the target failed before the switch, per
    /// kind of failure.
    pub refused: BTreeMap<String, u64>,
    /// Connected agents not counted (pinned, disabled, settling).
    pub uncounted: u64,
}

impl GroupCounts {
    /// Connected agents, counted or not: what vanishing is measured on.
    pub fn connected(&self) -> u64 {
        self.present + self.uncounted
    }

    /// Connected agents whose install of the target failed before the switch.
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    pub groups: BTreeMap<String, GroupCounts>,
    pub omitted: Vec<Omitted>,
    /// How many reports were live (not expired).
    pub live_reports: usize,
    /// How many live reports come from a replica still warming up
    /// (`ReportSpec::warming_up`): their counts are not all their hosts yet.
    pub warming_up: usize,
    /// Agents per group per version (normalized), for `agents report`.
    pub versions: BTreeMap<String, BTreeMap<String, u64>>,
    /// The live reports' topology parts, per group (see [`topology_admissions`]).
    pub topology: BTreeMap<String, Vec<Vec<TopologyReport>>>,
    /// Per group, the hosts counted by reports still stored but no longer live: a
    /// replica that stopped reporting (dead, cut off, or failing to write) whose hosts
    /// may still be connected to it, unseen.
    pub stale: BTreeMap<String, u64>,
}

impl Aggregate {
    /// Sums the live `reports` ([`is_live`]), each agent counted in the group of
    /// `groups` that serves it (without groups, in the group it presents).
    pub(crate) fn from_reports(
        reports: &[AutoUpdateAgentReport],
        now: Timestamp,
        report_period: SignedDuration,
        groups: &Groups,
        target: &str,
    ) -> Self {
        let mut agg = Aggregate::default();
        let target = normalize(target);
        let mut omitted: BTreeMap<String, u64> = BTreeMap::new();
        for report in reports {
            if !is_live(report, now, report_period) {
                for (group, group_report) in &report.spec.groups {
                    let name = groups.serving(group).unwrap_or(group);
                    let n: u64 = group_report.versions.values().map(|v| v.count).sum::<u64>()
                        + group_report.uncounted;
                    *agg.stale.entry(name.to_string()).or_default() += n;
                }
                continue;
            }
            agg.live_reports += 1;
            agg.warming_up += usize::from(report.spec.warming_up);
            for o in &report.spec.omitted {
                *omitted.entry(o.reason.clone()).or_default() += o.count;
            }
            for (group, limits) in &report.spec.topology {
                agg.topology
                    .entry(group.clone())
                    .or_default()
                    .push(limits.clone());
            }
            for (group, group_report) in &report.spec.groups {
                let name = groups.serving(group).unwrap_or(group);
                let counts = agg.groups.entry(name.to_string()).or_default();
                counts.uncounted += group_report.uncounted;
                for (version, kinds) in &group_report.refused {
                    if normalize(version) == target {
                        for (kind, n) in kinds {
                            *counts.refused.entry(kind.clone()).or_default() += n;
                        }
                    }
                }
                for (version, v) in &group_report.versions {
                    let version = normalize(version);
                    counts.present += v.count;
                    counts.failed += v.failed_count;
                    *agg.versions
                        .entry(name.to_string())
                        .or_default()
                        .entry(version.clone())
                        .or_default() += v.count;
                    if version == target {
                        // An agent on the target that failed (unhealthy, or rolled back
                        // onto it) has not been updated successfully.
                        counts.up_to_date += v.count.saturating_sub(v.failed_count);
                    } else if v.count > 0 && !v.lowest_updater_id.is_empty() {
                        let n = UpdaterNumeral::of(&v.lowest_updater_id);
                        counts.lowest_not_updated =
                            Some(counts.lowest_not_updated.map_or(n, |cur| cur.min(n)));
                    }
                }
            }
        }
        agg.omitted = omitted
            .into_iter()
            .map(|(reason, count)| Omitted { reason, count })
            .collect();
        agg
    }

    pub fn group(&self, name: &str) -> GroupCounts {
        self.groups.get(name).cloned().unwrap_or_default()
    }
}

/// Who `limits` admit in `group` from the live reports' topology parts: per limit,
/// per value of its label (the first [`tracked_values`] by name), the `max_in_flight`
/// lowest updater ids (backpressure order) not yet on the target over all replicas.
/// A replica without hosts behind in the group sends nothing for it; a limit no
/// report mentions admits nobody yet and counts nobody behind.
pub fn topology_admissions(
    agg: &Aggregate,
    group: &str,
    limits: &[TopologyLimit],
) -> Vec<TopologyAdmission> {
    let reports = agg
        .topology
        .get(group)
        .map(Vec::as_slice)
        .unwrap_or_default();
    limits
        .iter()
        .map(|limit| {
            let mut values: BTreeMap<&str, (u64, Lowest)> = BTreeMap::new();
            for report in reports {
                let Some(r) = report.iter().find(|r| r.key == limit.key) else {
                    continue;
                };
                for (value, v) in &r.values {
                    let (behind, lowest) = values.entry(value.as_str()).or_default();
                    *behind += v.behind;
                    for id in &v.lowest {
                        keep_lowest(lowest, UpdaterNumeral::of(id), id, limit.max_in_flight);
                    }
                }
            }
            let tracked = tracked_values(limit.max_in_flight);
            let untracked_values = values.len().saturating_sub(tracked) as u64;
            let mut admitted = Vec::new();
            let mut behind = BTreeMap::new();
            for (value, (n, lowest)) in values.into_iter().take(tracked) {
                behind.insert(value.to_string(), n);
                admitted.extend(lowest.into_iter().map(|(_, id)| id));
            }
            admitted.sort();
            admitted.dedup();
            TopologyAdmission {
                key: limit.key.clone(),
                admitted,
                behind,
                untracked_values,
            }
        })
        .collect()
}

/// Why the canaries failed, by updater_id, from the live reports
/// (`ReportSpec::canary_failures`): the newest report's word for a canary wins.
pub fn canary_failures(
    reports: &[AutoUpdateAgentReport],
    now: Timestamp,
    report_period: SignedDuration,
) -> BTreeMap<String, String> {
    let mut live: Vec<&AutoUpdateAgentReport> = reports
        .iter()
        .filter(|r| is_live(r, now, report_period))
        .collect();
    live.sort_by_key(|r| r.spec.timestamp);
    let mut out = BTreeMap::new();
    for r in live {
        for (id, reason) in &r.spec.canary_failures {
            out.insert(id.clone(), reason.clone());
        }
    }
    out
}

/// The connected agents a reconcile takes (`ReconcileInput::agents`), from every live
/// report: the canary candidates and canaries each replica offers. An agent in several
/// reports (it moved between replicas) is taken from the newest report, and within a
/// report a canary entry wins over a candidate entry. Sorted by updater_id.
pub fn connected_agents(
    reports: &[AutoUpdateAgentReport],
    now: Timestamp,
    report_period: SignedDuration,
) -> Vec<ConnectedAgent> {
    let mut live: Vec<&AutoUpdateAgentReport> = reports
        .iter()
        .filter(|r| is_live(r, now, report_period))
        .collect();
    // Newest first; ties by name so the outcome does not depend on the listing order.
    live.sort_by(|a, b| {
        b.spec
            .timestamp
            .cmp(&a.spec.timestamp)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut out: BTreeMap<&str, &ConnectedAgent> = BTreeMap::new();
    for report in live {
        let offered = report
            .spec
            .canaries
            .iter()
            .chain(report.spec.canary_candidates.values().flatten());
        for agent in offered.filter(|a| !a.updater_id.is_empty()) {
            out.entry(agent.updater_id.as_str()).or_insert(agent);
        }
    }
    out.into_values().cloned().collect()
}
