//! From the agents a replica has heard from to the report it writes every period.
//! Pure: the server keeps the inventory in memory and calls [`build_report`].

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use rand_core::RngCore;

use crate::backpressure::UpdaterNumeral;
use crate::canary;
use crate::resource::{
    AutoUpdateAgentRollout, ConnectedAgent, GroupReport, GroupState, Omitted, ReportSpec, Schedule,
    Strategy, VersionReport,
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

/// What the report and canary helpers read of an agent. [`InventoryAgent`] is the plain
/// form; a server may keep its agents in a compact form and lend views of them.
pub trait AgentView {
    fn updater_id(&self) -> Cow<'_, str>;
    /// The updater_id's backpressure position ([`UpdaterNumeral::of`] of it).
    fn updater_numeral(&self) -> UpdaterNumeral;
    fn has_updater_id(&self) -> bool;
    fn group(&self) -> &str;
    /// The version as the agent reported it (not normalized).
    fn version(&self) -> &str;
    fn updater_status(&self) -> UpdaterStatus;
    /// Counted as failed: rolled back, or not healthy.
    fn failed(&self) -> bool;
    fn first_seen(&self) -> Timestamp;
    fn connected(&self) -> ConnectedAgent;

    /// Whether the agent counts: connected for at least one report period, so that an
    /// agent moving between replicas is not counted twice.
    fn settled(&self, now: Timestamp, report_period: SignedDuration) -> bool {
        now.duration_since(self.first_seen()) >= report_period
    }
}

impl AgentView for InventoryAgent {
    fn updater_id(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.heartbeat.updater_id)
    }
    fn updater_numeral(&self) -> UpdaterNumeral {
        UpdaterNumeral::of(&self.heartbeat.updater_id)
    }
    fn has_updater_id(&self) -> bool {
        !self.heartbeat.updater_id.is_empty()
    }
    fn group(&self) -> &str {
        &self.heartbeat.group
    }
    fn version(&self) -> &str {
        &self.heartbeat.version
    }
    fn updater_status(&self) -> UpdaterStatus {
        self.heartbeat.updater_status
    }
    fn failed(&self) -> bool {
        self.heartbeat.rollback || !self.heartbeat.healthy
    }
    fn first_seen(&self) -> Timestamp {
        self.first_seen
    }
    fn connected(&self) -> ConnectedAgent {
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

impl<T: AgentView + ?Sized> AgentView for &T {
    fn updater_id(&self) -> Cow<'_, str> {
        (**self).updater_id()
    }
    fn updater_numeral(&self) -> UpdaterNumeral {
        (**self).updater_numeral()
    }
    fn has_updater_id(&self) -> bool {
        (**self).has_updater_id()
    }
    fn group(&self) -> &str {
        (**self).group()
    }
    fn version(&self) -> &str {
        (**self).version()
    }
    fn updater_status(&self) -> UpdaterStatus {
        (**self).updater_status()
    }
    fn failed(&self) -> bool {
        (**self).failed()
    }
    fn first_seen(&self) -> Timestamp {
        (**self).first_seen()
    }
    fn connected(&self) -> ConnectedAgent {
        (**self).connected()
    }
}

/// One (group, version) of a report being counted; the lowest updater_id is compared by
/// numeral, kept alongside so it is computed once per agent.
#[derive(Default)]
struct Tally {
    count: u64,
    failed_count: u64,
    lowest: Option<(UpdaterNumeral, String)>,
}

/// The report of one replica at `now`: settled agents with updates enabled, counted
/// per group and version; everyone else under `omitted` with the reason.
pub fn build_report<A: AgentView>(
    now: Timestamp,
    agents: impl IntoIterator<Item = A>,
    report_period: SignedDuration,
) -> ReportSpec {
    // Per agent this only looks strings up (no allocation): a report covers every agent
    // of the replica every period, a million of them on a big one.
    let mut tallies: BTreeMap<String, BTreeMap<String, Tally>> = BTreeMap::new();
    let mut normalized: HashMap<String, String> = HashMap::new();
    let mut omitted: BTreeMap<&'static str, u64> = BTreeMap::new();
    for agent in agents {
        let status = agent.updater_status();
        let skip = if !agent.has_updater_id() {
            Some(OMITTED_NO_UPDATER_ID)
        } else if status == UpdaterStatus::Disabled {
            Some(OMITTED_DISABLED)
        } else if status == UpdaterStatus::Pinned {
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
        let raw = agent.version();
        let version = match normalized.get(raw) {
            Some(v) => v,
            None => normalized.entry(raw.to_owned()).or_insert(normalize(raw)),
        };
        let group = agent.group();
        let versions = match tallies.get_mut(group) {
            Some(v) => v,
            None => tallies.entry(group.to_owned()).or_default(),
        };
        let tally = match versions.get_mut(version.as_str()) {
            Some(t) => t,
            None => versions.entry(version.clone()).or_default(),
        };
        tally.count += 1;
        if agent.failed() {
            tally.failed_count += 1;
        }
        let numeral = agent.updater_numeral();
        if tally.lowest.as_ref().is_none_or(|(n, _)| numeral < *n) {
            tally.lowest = Some((numeral, agent.updater_id().into_owned()));
        }
    }
    let groups = tallies
        .into_iter()
        .map(|(group, versions)| {
            let versions = versions
                .into_iter()
                .map(|(version, t)| {
                    let report = VersionReport {
                        count: t.count,
                        failed_count: t.failed_count,
                        lowest_updater_id: t.lowest.map(|(_, id)| id).unwrap_or_default(),
                    };
                    (version, report)
                })
                .collect();
            (group, GroupReport { versions })
        })
        .collect();
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
pub fn canary_candidates<A: AgentView, R: RngCore + ?Sized>(
    agents: impl IntoIterator<Item = A>,
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
            if canary::belongs_to(agent.group(), g, &names) {
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
pub fn canaries_seen<A: AgentView>(
    rollout: Option<&AutoUpdateAgentRollout>,
    lookup: impl Fn(&str) -> Option<A>,
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
        .map(|a| a.connected())
        .collect();
    out.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
    out.dedup_by(|a, b| a.updater_id == b.updater_id);
    out
}
