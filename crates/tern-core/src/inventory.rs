//! From the agents a replica has heard from to the report it writes every period.
//! Pure: the server keeps the inventory in memory and calls [`build_report`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use rand_core::RngCore;

use crate::backpressure::UpdaterNumeral;
use crate::canary;
use crate::resource::{
    AutoUpdateAgentRollout, ConnectedAgent, GroupReport, GroupState, Omitted, ReportSpec, Schedule,
    Strategy,
};
use crate::version::normalize;
use crate::wire::{Heartbeat, UpdaterStatus};

/// Omitted reasons (stable strings, shown by `agents report`).
pub const OMITTED_DISABLED: &str = "updates disabled";
pub const OMITTED_PINNED: &str = "version is pinned";
pub const OMITTED_NO_UPDATER_ID: &str = "no updater id";
pub const OMITTED_TOO_NEW: &str = "connected for less than one report period";

/// How many canary candidates a replica offers per group in its report.
pub const CANARY_CANDIDATES_PER_GROUP: usize = 10;

/// One agent as a replica knows it: its last heartbeat and when it was first and last
/// heard from in this connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryAgent {
    pub heartbeat: Heartbeat,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
}

impl InventoryAgent {
    /// Whether the agent counts: connected for at least one report period, so that an
    /// agent moving between replicas is not counted twice.
    pub fn settled(&self, now: Timestamp, report_period: SignedDuration) -> bool {
        now.duration_since(self.first_seen) >= report_period
    }

    /// Counted as failed: rolled back, or not healthy.
    pub fn failed(&self) -> bool {
        self.heartbeat.rollback || !self.heartbeat.healthy
    }

    pub fn connected(&self) -> ConnectedAgent {
        let hb = &self.heartbeat;
        ConnectedAgent {
            updater_id: hb.updater_id.clone(),
            host_id: hb.host_id.clone(),
            hostname: hb.hostname.clone(),
            group: hb.group.clone(),
            version: hb.version.clone(),
            updater_status: hb.updater_status,
        }
    }
}

/// The report of one replica at `now`: settled agents with updates enabled, counted
/// per group and version; everyone else under `omitted` with the reason.
pub fn build_report<'a>(
    now: Timestamp,
    agents: impl IntoIterator<Item = &'a InventoryAgent>,
    report_period: SignedDuration,
) -> ReportSpec {
    let mut groups: BTreeMap<String, GroupReport> = BTreeMap::new();
    let mut omitted: BTreeMap<&'static str, u64> = BTreeMap::new();
    for agent in agents {
        let hb = &agent.heartbeat;
        let skip = if hb.updater_id.is_empty() {
            Some(OMITTED_NO_UPDATER_ID)
        } else if hb.updater_status == UpdaterStatus::Disabled {
            Some(OMITTED_DISABLED)
        } else if hb.updater_status == UpdaterStatus::Pinned {
            Some(OMITTED_PINNED)
        } else if !agent.settled(now, report_period) {
            Some(OMITTED_TOO_NEW)
        } else {
            None
        };
        if let Some(reason) = skip {
            *omitted.entry(reason).or_default() += 1;
            continue;
        }
        let entry = groups
            .entry(hb.group.clone())
            .or_default()
            .versions
            .entry(normalize(&hb.version))
            .or_default();
        entry.count += 1;
        if agent.failed() {
            entry.failed_count += 1;
        }
        if entry.lowest_updater_id.is_empty()
            || UpdaterNumeral::of(&hb.updater_id) < UpdaterNumeral::of(&entry.lowest_updater_id)
        {
            entry.lowest_updater_id = hb.updater_id.clone();
        }
    }
    ReportSpec {
        timestamp: now,
        groups,
        omitted: omitted
            .into_iter()
            .map(|(reason, count)| Omitted {
                reason: reason.to_string(),
                count,
            })
            .collect(),
        canary_candidates: BTreeMap::new(),
        canaries: Vec::new(),
    }
}

/// The groups of `rollout` that may pick canaries soon, so that replicas offer
/// candidates for them in their reports: under halt-on-error with a regular schedule, a
/// group in `canary` with no canaries yet (after a manual start-update, or when no
/// candidate was known when it started), and the first group not done if it is
/// unstarted with `canary_count > 0` (it starts at its next window). Reports are
/// written every period and live two, so candidates are ready before the window opens.
pub fn groups_wanting_canaries(rollout: &AutoUpdateAgentRollout) -> Vec<&str> {
    if rollout.spec.strategy != Strategy::HaltOnError
        || rollout.spec.schedule == Schedule::Immediate
    {
        return Vec::new();
    }
    let groups = &rollout.status.groups;
    let mut out: Vec<&str> = groups
        .iter()
        .filter(|g| g.state == GroupState::Canary && g.canaries.is_empty())
        .map(|g| g.name.as_str())
        .collect();
    if let Some(first) = groups.iter().find(|g| g.state != GroupState::Done)
        && first.state == GroupState::Unstarted
        && first.canary_count > 0
        && !out.contains(&first.name.as_str())
    {
        out.push(first.name.as_str());
    }
    out
}

/// This replica's canary candidates for the report: for each group of
/// [`groups_wanting_canaries`], up to `per_group` agents picked uniformly at random among
/// those [`canary::candidates`] would pick from (settled, with an updater id and updates
/// enabled, served by the group, preferring agents not yet on the target). Sorted by
/// updater_id. Empty, without looking at any agent, when no group wants canaries.
pub fn canary_candidates<'a, R: RngCore + ?Sized>(
    agents: impl IntoIterator<Item = &'a InventoryAgent>,
    rollout: Option<&AutoUpdateAgentRollout>,
    now: Timestamp,
    report_period: SignedDuration,
    per_group: usize,
    rng: &mut R,
) -> BTreeMap<String, Vec<ConnectedAgent>> {
    let mut out = BTreeMap::new();
    let Some(rollout) = rollout else {
        return out;
    };
    let wanted = groups_wanting_canaries(rollout);
    if wanted.is_empty() || per_group == 0 {
        return out;
    }
    let names: Vec<&str> = rollout
        .status
        .groups
        .iter()
        .map(|g| g.name.as_str())
        .collect();
    let target = rollout.spec.target_version.to_string();
    let mut members: BTreeMap<&str, Vec<ConnectedAgent>> = BTreeMap::new();
    for agent in agents {
        if !agent.settled(now, report_period) {
            continue;
        }
        for g in &wanted {
            if canary::belongs_to(&agent.heartbeat.group, g, &names) {
                members.entry(g).or_default().push(agent.connected());
            }
        }
    }
    for (group, agents) in members {
        let eligible = canary::candidates(&agents, group, &names, &target);
        let mut pool: Vec<&ConnectedAgent> = eligible;
        let n = per_group.min(pool.len());
        for i in 0..n {
            let remaining = (pool.len() - i) as u64;
            // The modulo bias is negligible for any realistic fleet size.
            let j = i + (rng.next_u64() % remaining) as usize;
            pool.swap(i, j);
        }
        pool.truncate(n);
        let mut sample: Vec<ConnectedAgent> = pool.into_iter().cloned().collect();
        sample.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
        if !sample.is_empty() {
            out.insert(group.to_string(), sample);
        }
    }
    out
}

/// The rollout's canaries not yet successful that this replica knows (`lookup` finds an
/// agent by updater_id), as connected agents with the version they run, sorted by
/// updater_id. Connected at all is enough: a canary need not be settled to prove it
/// runs the target.
pub fn canaries_seen<'a>(
    rollout: Option<&AutoUpdateAgentRollout>,
    lookup: impl Fn(&str) -> Option<&'a InventoryAgent>,
) -> Vec<ConnectedAgent> {
    let Some(rollout) = rollout else {
        return Vec::new();
    };
    let mut out: Vec<ConnectedAgent> = rollout
        .status
        .groups
        .iter()
        .flat_map(|g| g.canaries.iter())
        .filter(|c| !c.success && !c.updater_id.is_empty())
        .filter_map(|c| lookup(&c.updater_id))
        .map(InventoryAgent::connected)
        .collect();
    out.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
    out.dedup_by(|a, b| a.updater_id == b.updater_id);
    out
}
