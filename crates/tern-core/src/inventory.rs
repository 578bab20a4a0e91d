//! From the agents a replica has heard from to the report it writes every period.
//! Pure: the server keeps the inventory in memory and calls [`build_report`].

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use rand_core::RngCore;

use crate::domain::backpressure::{Lowest, UpdaterNumeral, keep_lowest};
use crate::domain::canary::{self, Attribute};
use crate::domain::reconcile::Needs;
use crate::domain::resource::{
    CanaryEligible, ConnectedAgent, GroupReport, Omitted, ReportSpec, TopologyReport,
    TopologyValueReport, VersionReport,
};
use crate::domain::version::normalize;
use crate::domain::wire::{Heartbeat, UpdaterStatus};

/// Omitted reasons (stable strings, shown by `agents report`).
pub(crate) const OMITTED_DISABLED: &str = "updates disabled";
pub(crate) const OMITTED_PINNED: &str = "version is pinned";
pub(crate) const OMITTED_NO_UPDATER_ID: &str = "no updater id";
pub const OMITTED_TOO_NEW: &str = "connected for less than one report period";
pub const OMITTED_CHANNEL: &str = "follows a channel, not the rollout";
pub(crate) const OMITTED_DIRECTIVE: &str = "governed by a version directive, not the rollout";

/// Which way a host is told its version, as a replica knows it: the host says rollout
/// or channel ([`crate::domain::wire::Follows`]); the replica knows when a version directive
/// governs it. Only rollout hosts count in the rollout's groups.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    #[default]
    Rollout,
    Channel,
    Directive,
}

impl Model {
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Rollout => "rollout",
            Model::Channel => "channel",
            Model::Directive => "directive",
        }
    }

    pub fn of(follows: crate::domain::wire::Follows, governed_by_directive: bool) -> Self {
        match (follows, governed_by_directive) {
            (_, true) => Model::Directive,
            (crate::domain::wire::Follows::Channel, false) => Model::Channel,
            (crate::domain::wire::Follows::Rollout, false) => Model::Rollout,
        }
    }
}

/// A report keeps every group of the rollout, and at most this many others (agents
/// presenting a group the rollout lacks, served by its catch-all): the rest are counted
/// together under [`FOLDED`]. A flood of invented group names cannot grow the report.
pub const MAX_UNKNOWN_GROUPS_IN_REPORT: usize = 32;
/// A report keeps at most this many versions per group; the rarer ones are counted
/// together under [`FOLDED`] (never the target, so the group is not done by mistake).
pub const MAX_VERSIONS_IN_REPORT: usize = 64;
/// The group or version key of what [`bound_report`] counted together. Not a valid
/// group name nor a version, so it never equals one; a folded group is served by the
/// catch-all like any group the rollout lacks.
pub const FOLDED: &str = "(other)";

/// A report keeps install failures of at most this many versions per group (the most
/// common): the target's is what counts, and a host reporting a stale version must not
/// grow the report.
pub(crate) const MAX_REFUSED_VERSIONS_IN_REPORT: usize = 4;

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
    /// Counted as failed: rolled back, or known unhealthy.
    fn failed(&self) -> bool;
    /// Which way the host is told its version.
    fn model(&self) -> Model {
        Model::Rollout
    }
    /// The version whose install failed before the switch, and the kind of failure.
    fn install_failure(&self) -> Option<(&str, &str)> {
        None
    }
    /// Why the host failed `target`, when its updater says ([`failure_reason`]).
    fn failure_reason(&self, _target: &str) -> Option<String> {
        None
    }
    fn first_seen(&self) -> Timestamp;
    fn connected(&self) -> ConnectedAgent;
    /// The value of the host's label `key`, if its heartbeat carried it.
    fn label(&self, key: &str) -> Option<&str>;
    /// An attribute canaries may cover, if the host's heartbeat said it.
    fn fact(&self, attribute: &Attribute<'_>) -> Option<&str>;

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
        self.heartbeat.rollback || self.heartbeat.healthy == Some(false)
    }
    fn model(&self) -> Model {
        Model::of(self.heartbeat.follows, false)
    }
    fn install_failure(&self) -> Option<(&str, &str)> {
        let f = self.heartbeat.install_failure.as_ref()?;
        Some((f.version.as_str(), f.kind.as_str()))
    }
    fn failure_reason(&self, target: &str) -> Option<String> {
        failure_reason(
            self.heartbeat.update_failure.as_ref(),
            self.heartbeat.install_failure.as_ref(),
            target,
        )
    }
    fn first_seen(&self) -> Timestamp {
        self.first_seen
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.heartbeat.labels.get(key).map(String::as_str)
    }
    fn fact(&self, attribute: &Attribute<'_>) -> Option<&str> {
        let hb = &self.heartbeat;
        let v = match attribute {
            Attribute::Arch => hb.arch.as_str(),
            Attribute::Os => hb.os.as_str(),
            Attribute::OsVersion => hb.os_version.as_str(),
            Attribute::Label(key) => return self.label(key),
        };
        (!v.is_empty()).then_some(v)
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
            healthy: hb.healthy,
            failed_version: hb.failed_version.clone(),
            refused_version: hb.install_failure.as_ref().map(|f| f.version.clone()),
            attributes: Default::default(),
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
    fn model(&self) -> Model {
        (**self).model()
    }
    fn install_failure(&self) -> Option<(&str, &str)> {
        (**self).install_failure()
    }
    fn failure_reason(&self, target: &str) -> Option<String> {
        (**self).failure_reason(target)
    }
    fn first_seen(&self) -> Timestamp {
        (**self).first_seen()
    }
    fn connected(&self) -> ConnectedAgent {
        (**self).connected()
    }
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
    fn fact(&self, attribute: &Attribute<'_>) -> Option<&str> {
        (**self).fact(attribute)
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

/// Why `agent` is left out of its replica's report (counted under `omitted`), or
/// `None` when it counts: settled, with an updater id, following the rollout, updates
/// enabled.
pub fn omitted_reason<A: AgentView>(
    agent: &A,
    now: Timestamp,
    report_period: SignedDuration,
) -> Option<&'static str> {
    let status = agent.updater_status();
    if !agent.has_updater_id() {
        Some(OMITTED_NO_UPDATER_ID)
    } else if agent.model() == Model::Channel {
        Some(OMITTED_CHANNEL)
    } else if agent.model() == Model::Directive {
        Some(OMITTED_DIRECTIVE)
    } else if status == UpdaterStatus::Disabled {
        Some(OMITTED_DISABLED)
    } else if status == UpdaterStatus::Pinned {
        Some(OMITTED_PINNED)
    } else if !agent.settled(now, report_period) {
        Some(OMITTED_TOO_NEW)
    } else {
        None
    }
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
    let mut refused: BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>> = BTreeMap::new();
    let mut normalized: HashMap<String, String> = HashMap::new();
    let mut omitted: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut uncounted: BTreeMap<String, u64> = BTreeMap::new();
    for agent in agents {
        if let Some(reason) = omitted_reason(&agent, now, report_period) {
            *omitted.entry(reason).or_default() += 1;
            if matches!(reason, OMITTED_PINNED | OMITTED_DISABLED | OMITTED_TOO_NEW) {
                *uncounted.entry(agent.group().to_owned()).or_default() += 1;
            }
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
        if let Some((version, kind)) = agent.install_failure() {
            *refused
                .entry(group.to_owned())
                .or_default()
                .entry(normalize(version))
                .or_default()
                .entry(kind.to_owned())
                .or_default() += 1;
        }
    }
    for group in uncounted.keys() {
        tallies.entry(group.clone()).or_default();
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
            let refused = most_common(refused.remove(&group).unwrap_or_default());
            let uncounted = uncounted.get(&group).copied().unwrap_or(0);
            (
                group,
                GroupReport {
                    versions,
                    refused,
                    uncounted,
                },
            )
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
        canary_eligible: BTreeMap::new(),
        canaries: Vec::new(),
        canary_failures: BTreeMap::new(),
        topology: BTreeMap::new(),
        warming_up: false,
        shrunk: Vec::new(),
    }
}

/// The [`MAX_REFUSED_VERSIONS_IN_REPORT`] versions most hosts failed to install.
fn most_common(
    refused: BTreeMap<String, BTreeMap<String, u64>>,
) -> BTreeMap<String, BTreeMap<String, u64>> {
    if refused.len() <= MAX_REFUSED_VERSIONS_IN_REPORT {
        return refused;
    }
    let mut by_count: Vec<(u64, String)> = refused
        .iter()
        .map(|(v, kinds)| (kinds.values().sum(), v.clone()))
        .collect();
    sort_largest_first(&mut by_count);
    let keep: Vec<String> = by_count
        .into_iter()
        .take(MAX_REFUSED_VERSIONS_IN_REPORT)
        .map(|(_, v)| v)
        .collect();
    refused
        .into_iter()
        .filter(|(v, _)| keep.contains(v))
        .collect()
}

/// The whole report of one replica at `now`: the counts ([`build_report`]) and what
/// the coming reconciles need from it ([`Needs`], none without a rollout): canary
/// candidates and the canaries this replica sees. `lookup` finds an agent by
/// updater_id; `pinned` tells a host a server-side pin holds now (it is not counted
/// against its zone: it will not update). ternd writes its reports with this; the simulator keeps its counts
/// incrementally and calls [`canary_candidates`] and [`canaries_seen`] itself.
///
/// A canary candidate must have been heard from for `canary_tenure` (at least one
/// report period): a host that has only just appeared, say one invented with a leaked
/// token, is never picked to prove a version.
// Each argument is a different input of the one report; bundling them would only
// rename the list.
#[allow(clippy::too_many_arguments)]
pub fn replica_report<A, I, R>(
    now: Timestamp,
    agents: I,
    lookup: impl Fn(&str) -> Option<A>,
    pinned: impl Fn(&str) -> bool,
    needs: Option<&Needs>,
    report_period: SignedDuration,
    canary_tenure: SignedDuration,
    rng: &mut R,
) -> ReportSpec
where
    A: AgentView,
    I: IntoIterator<Item = A> + Clone,
    R: RngCore + ?Sized,
{
    let mut spec = build_report(now, agents.clone(), report_period);
    if let Some(needs) = needs {
        spec.topology = topology_report(agents.clone(), needs, now, report_period, pinned);
        let tenure = report_period.max(canary_tenure);
        spec.canary_candidates = canary_candidates(
            agents.clone(),
            needs,
            now,
            tenure,
            CANARY_CANDIDATES_PER_GROUP,
            rng,
        );
        spec.canary_eligible = canary_eligible(agents, needs, now, tenure)
            .into_iter()
            .filter(|(g, _)| !spec.canary_candidates.contains_key(g))
            .collect();
        spec.canary_failures = canary_failures(needs, &lookup);
        spec.canaries = canaries_seen(needs, lookup);
    }
    spec
}

pub use crate::domain::backpressure::tracked_values;

/// This replica's part of the topology limits of [`Needs::topology`]: per group and
/// limit, per value of the limit's label, the settled hosts with updates enabled and
/// not `pinned` that are not yet healthy on the target: how many, and the lowest
/// updater ids (as many as the limit admits). The leader merges these into who may
/// update ([`crate::domain::aggregate::topology_admissions`]). Empty, without looking at any
/// agent, when no group has topology limits.
pub fn topology_report<A: AgentView>(
    agents: impl IntoIterator<Item = A>,
    needs: &Needs,
    now: Timestamp,
    report_period: SignedDuration,
    pinned: impl Fn(&str) -> bool,
) -> BTreeMap<String, Vec<TopologyReport>> {
    if needs.topology.is_empty() {
        return BTreeMap::new();
    }
    let target = normalize(&needs.target);
    // group → limit → value → (behind, lowest ascending)
    let mut acc: Vec<Vec<BTreeMap<String, (u64, Lowest)>>> = needs
        .topology
        .iter()
        .map(|(_, limits)| vec![BTreeMap::new(); limits.len()])
        .collect();
    // Whether a raw version is the target, worked out once per distinct string: this
    // runs over every agent of the replica every period.
    let mut on_target: HashMap<String, bool> = HashMap::new();
    for agent in agents {
        if omitted_reason(&agent, now, report_period).is_some() {
            continue;
        }
        let raw = agent.version();
        let is_target = match on_target.get(raw) {
            Some(t) => *t,
            None => *on_target
                .entry(raw.to_owned())
                .or_insert(normalize(raw) == target),
        };
        if is_target && !agent.failed() {
            continue;
        }
        let id = agent.updater_id();
        if pinned(&id) {
            continue;
        }
        for (gi, (group, limits)) in needs.topology.iter().enumerate() {
            if !needs.groups.serves(group, agent.group()) {
                continue;
            }
            for (li, limit) in limits.iter().enumerate() {
                let value = agent.label(&limit.key).unwrap_or("");
                let (behind, lowest) = match acc[gi][li].get_mut(value) {
                    Some(e) => e,
                    None => acc[gi][li].entry(value.to_string()).or_default(),
                };
                *behind += 1;
                keep_lowest(lowest, agent.updater_numeral(), &id, limit.max_in_flight);
            }
        }
    }
    let mut out = BTreeMap::new();
    for ((group, limits), per_limit) in needs.topology.iter().zip(acc) {
        let reports: Vec<TopologyReport> = limits
            .iter()
            .zip(per_limit)
            .map(|(limit, values)| TopologyReport {
                key: limit.key.clone(),
                values: values
                    .into_iter()
                    .take(tracked_values(limit.max_in_flight))
                    .map(|(value, (behind, lowest))| {
                        let lowest = lowest.into_iter().map(|(_, id)| id).collect();
                        (value, TopologyValueReport { behind, lowest })
                    })
                    .collect(),
            })
            .collect();
        if reports.iter().any(|r| !r.values.is_empty()) {
            out.insert(group.clone(), reports);
        }
    }
    out
}

/// Bounds a report's size whatever its agents present: every group `known` to the
/// rollout is kept, the [`MAX_UNKNOWN_GROUPS_IN_REPORT`] largest others too, and the
/// rest are counted together under [`FOLDED`]; within each group the
/// [`MAX_VERSIONS_IN_REPORT`] most common versions are kept and the rest counted under
/// [`FOLDED`]. Counts are never lost: a folded agent still counts as present and not
/// up to date, and the lowest updater id among folded ones is kept for backpressure.
/// Returns how many groups and versions were folded.
pub fn bound_report(spec: &mut ReportSpec, known: impl Fn(&str) -> bool) -> usize {
    fold_to(
        spec,
        &known,
        MAX_UNKNOWN_GROUPS_IN_REPORT,
        MAX_VERSIONS_IN_REPORT,
        false,
    )
}

/// The order in which bounded views (the report, ternd's metrics) keep entries before
/// folding the rest: largest count first, ties by name, so every replica folds alike.
pub fn sort_largest_first<N: Ord>(entries: &mut [(u64, N)]) {
    entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
}

/// Adds `from`'s install failures to `into`, keeping the most common versions.
fn merge_refused(
    into: &mut BTreeMap<String, BTreeMap<String, u64>>,
    from: BTreeMap<String, BTreeMap<String, u64>>,
) {
    for (version, kinds) in from {
        let to = into.entry(version).or_default();
        for (kind, n) in kinds {
            *to.entry(kind).or_default() += n;
        }
    }
    *into = most_common(std::mem::take(into));
}

fn merge(into: &mut VersionReport, v: &VersionReport) {
    into.count += v.count;
    into.failed_count += v.failed_count;
    if !v.lowest_updater_id.is_empty()
        && (into.lowest_updater_id.is_empty()
            || UpdaterNumeral::of(&v.lowest_updater_id)
                < UpdaterNumeral::of(&into.lowest_updater_id))
    {
        into.lowest_updater_id.clone_from(&v.lowest_updater_id);
    }
}

/// This replica's canary candidates for the report: for each group of
/// [`Needs::canary_candidates`], up to `per_group` agents picked uniformly at random
/// among those [`canary::candidates`] would pick from (heard from for `min_presence`,
/// with an updater id and updates enabled, served by the group, preferring agents not
/// yet on the target). For a group with a `canary_cover` ([`Needs::canary_cover`]),
/// each carries those attributes, and one agent per value this replica holds is
/// offered besides ([`canary::COVER_OFFERS_PER_GROUP`] at most).
/// Sorted by updater_id. Empty, without looking at any agent, when no group needs
/// candidates.
pub fn canary_candidates<A: AgentView, R: RngCore + ?Sized>(
    agents: impl IntoIterator<Item = A>,
    needs: &Needs,
    now: Timestamp,
    min_presence: SignedDuration,
    per_group: usize,
    rng: &mut R,
) -> BTreeMap<String, Vec<ConnectedAgent>> {
    let mut out = BTreeMap::new();
    let wanted = &needs.canary_candidates;
    if wanted.is_empty() || per_group == 0 {
        return out;
    }
    let mut members: BTreeMap<&str, Vec<ConnectedAgent>> = BTreeMap::new();
    for agent in agents {
        if !agent.settled(now, min_presence) || agent.model() != Model::Rollout {
            continue;
        }
        for g in wanted {
            if needs.groups.serves(g, agent.group()) {
                let mut c = agent.connected();
                if let Some(cover) = needs.canary_cover.get(g) {
                    c.attributes = cover
                        .iter()
                        .filter_map(|name| {
                            let v = agent.fact(&Attribute::parse(name)?)?;
                            Some((name.clone(), v.to_string()))
                        })
                        .collect();
                }
                members.entry(g).or_default().push(c);
            }
        }
    }
    for (group, agents) in members {
        let mut pool = canary::candidates(&agents, group, &needs.groups, &needs.target);
        match needs.canary_cover.get(group) {
            Some(cover) => canary::offer_covering(&mut pool, cover, per_group, rng),
            None => canary::sample(&mut pool, per_group, rng),
        }
        let mut sample: Vec<ConnectedAgent> = pool.into_iter().cloned().collect();
        sample.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
        if !sample.is_empty() {
            out.insert(group.to_string(), sample);
        }
    }
    out
}

/// Per group of [`Needs::canary_candidates`], the host that would be a candidate but
/// for its tenure (known for less than `min_presence`) and becomes one first: when.
/// The operator sees it while a group waits for canaries. Pinned and disabled hosts
/// never become candidates by waiting and are left out.
pub(crate) fn canary_eligible<A: AgentView>(
    agents: impl IntoIterator<Item = A>,
    needs: &Needs,
    now: Timestamp,
    min_presence: SignedDuration,
) -> BTreeMap<String, CanaryEligible> {
    let mut out: BTreeMap<String, CanaryEligible> = BTreeMap::new();
    if needs.canary_candidates.is_empty() {
        return out;
    }
    for agent in agents {
        if agent.settled(now, min_presence) || agent.model() != Model::Rollout {
            continue;
        }
        for g in &needs.canary_candidates {
            if !needs.groups.serves(g, agent.group()) {
                continue;
            }
            let one = [agent.connected()];
            if canary::candidates(&one, g, &needs.groups, &needs.target).is_empty() {
                continue;
            }
            let at = agent
                .first_seen()
                .saturating_add(min_presence)
                .unwrap_or(now);
            let [c] = one;
            let sooner = out
                .get(g)
                .is_none_or(|e| (at, c.updater_id.as_str()) < (e.at, e.updater_id.as_str()));
            if sooner {
                out.insert(
                    g.clone(),
                    CanaryEligible {
                        updater_id: c.updater_id,
                        hostname: c.hostname,
                        at,
                    },
                );
            }
        }
    }
    out
}

/// The canaries of [`Needs::canaries`] this replica knows (`lookup` finds an agent by
/// updater_id), as connected agents with the version they run, sorted by updater_id.
/// Connected at all is enough: a canary need not be settled to prove it runs the
/// target.
pub fn canaries_seen<A: AgentView>(
    needs: &Needs,
    lookup: impl Fn(&str) -> Option<A>,
) -> Vec<ConnectedAgent> {
    // `needs.canaries` is sorted and deduplicated.
    needs
        .canaries
        .iter()
        .filter_map(|id| lookup(id))
        .map(|a| a.connected())
        .collect()
}

/// Why the rollout's canaries connected here failed the target, by updater_id, for
/// those whose updater says ([`AgentView::failure_reason`]).
pub fn canary_failures<A: AgentView>(
    needs: &Needs,
    lookup: impl Fn(&str) -> Option<A>,
) -> BTreeMap<String, String> {
    needs
        .canaries
        .iter()
        .filter_map(|id| Some((id.clone(), lookup(id)?.failure_reason(&needs.target)?)))
        .collect()
}

/// The most bytes of a canary's failure reason in a report and in the rollout.
pub const MAX_CANARY_REASON_BYTES: usize = 1024;

/// Why a host failed `target`, in one line of at most [`MAX_CANARY_REASON_BYTES`]:
/// its last update of `target` that failed (the error and the agent's last output),
/// else its install of `target` that failed before the switch; `None` when neither
/// names `target`.
pub fn failure_reason(
    update: Option<&crate::domain::wire::UpdateFailure>,
    install: Option<&crate::domain::wire::InstallFailure>,
    target: &str,
) -> Option<String> {
    let target = normalize(target);
    if let Some(u) = update.filter(|u| normalize(&u.version) == target) {
        return Some(u.summary(MAX_CANARY_REASON_BYTES));
    }
    let i = install.filter(|i| normalize(&i.version) == target)?;
    Some(crate::domain::text::clean(
        &format!("installing {} failed ({}): {}", i.version, i.kind, i.error),
        MAX_CANARY_REASON_BYTES,
    ))
}

/// Makes `spec` fit (`fits`) by cutting, in this order, what the leader can do
/// without, and records each cut in `spec.shrunk`: the canaries' failure reasons (the
/// rollout keeps the last known), the canary candidates' details
/// (hostnames, host ids, cover attributes), candidates beyond two per group, the
/// topology limits' tracked values beyond 16 per limit, versions beyond 8 per group and
/// groups the rollout lacks beyond 4 (counted together under [`FOLDED`], as
/// [`bound_report`] does), and last the canary candidates altogether (the leader then
/// waits for candidates). Counts are never dropped: a host folded away still counts as
/// present and not up to date. Returns whether it fits.
pub fn shrink_report(
    spec: &mut ReportSpec,
    known: impl Fn(&str) -> bool,
    fits: impl Fn(&ReportSpec) -> bool,
) -> bool {
    type Cut<'a> = (&'static str, Box<dyn Fn(&mut ReportSpec) + 'a>);
    let cuts: [Cut<'_>; 7] = [
        (
            "canaries' failure reasons",
            Box::new(|s: &mut ReportSpec| s.canary_failures.clear()),
        ),
        (
            "canary candidates' details",
            Box::new(|s: &mut ReportSpec| {
                for c in s.canary_candidates.values_mut().flatten() {
                    c.hostname.clear();
                    c.host_id.clear();
                    c.attributes.clear();
                }
            }),
        ),
        (
            "canary candidates beyond 2 per group",
            Box::new(|s: &mut ReportSpec| {
                for v in s.canary_candidates.values_mut() {
                    v.truncate(2);
                }
            }),
        ),
        (
            "topology values beyond 16 per limit",
            Box::new(|s: &mut ReportSpec| {
                for r in s.topology.values_mut().flatten() {
                    let keep: Vec<String> = r.values.keys().take(16).cloned().collect();
                    r.values.retain(|k, _| keep.contains(k));
                }
            }),
        ),
        (
            "versions beyond 8 per group, groups the rollout lacks beyond 4",
            Box::new(|s: &mut ReportSpec| {
                fold_to(s, &known, 4, 8, true);
            }),
        ),
        (
            "every canary candidate",
            Box::new(|s: &mut ReportSpec| s.canary_candidates.clear()),
        ),
        (
            "every group the rollout lacks",
            Box::new(|s: &mut ReportSpec| {
                fold_to(s, &known, 0, 2, true);
            }),
        ),
    ];
    for (what, cut) in cuts {
        if fits(spec) {
            return true;
        }
        cut(spec);
        spec.shrunk.push(what.to_string());
    }
    fits(spec)
}

/// Keeps at most `groups` groups the rollout lacks (the largest) and `versions`
/// versions per group (the most common; one place goes to the folded entry itself),
/// counting the rest under [`FOLDED`]; with `trim_refused`, a group whose versions were
/// folded keeps only its most common install failures too. Returns how many groups and
/// versions were folded.
fn fold_to(
    spec: &mut ReportSpec,
    known: &impl Fn(&str) -> bool,
    groups: usize,
    versions: usize,
    trim_refused: bool,
) -> usize {
    let mut folded = 0;
    let mut unknown: Vec<(u64, String)> = spec
        .groups
        .iter()
        .filter(|(name, _)| !known(name) && name.as_str() != FOLDED)
        .map(|(name, g)| (g.versions.values().map(|v| v.count).sum(), name.clone()))
        .collect();
    sort_largest_first(&mut unknown);
    for (_, name) in unknown.into_iter().skip(groups) {
        if let Some(group) = spec.groups.remove(&name) {
            let into = spec.groups.entry(FOLDED.to_string()).or_default();
            for (version, v) in group.versions {
                merge(into.versions.entry(version).or_default(), &v);
            }
            merge_refused(&mut into.refused, group.refused);
            into.uncounted += group.uncounted;
            folded += 1;
        }
    }
    for group in spec.groups.values_mut() {
        if group.versions.len() <= versions {
            continue;
        }
        let mut by_count: Vec<(u64, String)> = group
            .versions
            .iter()
            .filter(|(v, _)| v.as_str() != FOLDED)
            .map(|(v, r)| (r.count, v.clone()))
            .collect();
        sort_largest_first(&mut by_count);
        for (_, version) in by_count.into_iter().skip(versions.saturating_sub(1)) {
            if let Some(v) = group.versions.remove(&version) {
                merge(group.versions.entry(FOLDED.to_string()).or_default(), &v);
                folded += 1;
            }
        }
        if trim_refused {
            group.refused = most_common(std::mem::take(&mut group.refused));
        }
    }
    folded
}

/// The report one live replica holding `agents` (settled, heard from at `now`) writes:
/// what the offline planner and tests take as the fleet when they are given agents
/// rather than reports.
pub fn report_of_agents(
    now: Timestamp,
    agents: &[ConnectedAgent],
) -> crate::domain::resource::AutoUpdateAgentReport {
    let inventory: Vec<InventoryAgent> = agents
        .iter()
        .map(|a| InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: a.updater_id.clone(),
                host_id: a.host_id.clone(),
                hostname: a.hostname.clone(),
                group: a.group.clone(),
                version: a.version.clone(),
                updater_status: a.updater_status,
                healthy: a.healthy,
                failed_version: a.failed_version.clone(),
                rollback: a.failed_version.is_some(),
                ..Heartbeat::default()
            },
            first_seen: Timestamp::UNIX_EPOCH,
            last_seen: now,
        })
        .collect();
    crate::domain::resource::AutoUpdateAgentReport::new(
        "planner",
        build_report(
            now,
            &inventory,
            crate::domain::rollout::DEFAULT_REPORT_PERIOD,
        ),
    )
}
