//! The engine: a discrete-event simulation of a fleet and its ternd replicas, driving
//! `tern_core::reconcile::reconcile` and the one answer (`tern_core::gate`) exactly as ternd does.
//!
//! Time is whole seconds since the start. Nothing is touched every tick: a binary heap
//! holds the next instants at which something happens (a replica's report, and on the
//! leader the reconcile that follows it; an agent's next updater run when it has
//! something to do; the end of an agent's jitter + install; an agent leaving; the next
//! agent joining). An agent whose find answer says "nothing to do" sleeps until a
//! reconcile changes its group's answer; its periodic runs are then no-ops that only
//! keep it in the inventory, which the simulation takes as given (see `docs/simulator.md`).
//! Reports are kept incrementally per replica: counts per (group, version) and, for
//! `lowest_updater_id`, the agents of each bucket ordered by updater id.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::borrow::Cow;
use tern_core::backpressure::UpdaterNumeral;

use tern_core::gate;
use tern_core::host_update;
use tern_core::inventory::OMITTED_TOO_NEW;
use tern_core::inventory::{self, AgentView};
use tern_core::reconcile::{self, Outcome, Resources};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
    ConnectedAgent, GroupReport, GroupState, Omitted, ReportSpec, RolloutGroup, RolloutSpec,
    RolloutState, TopologyReport, VersionReport,
};
use tern_core::rollout::{Event, Groups, group_window};
use tern_core::wire::UpdaterStatus;

use crate::params::{ParamError, Params};
use crate::timeline::{Counts, EventKind, GroupSummary, Overall, Timeline, TimelineEvent};

/// Why a simulation cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    // Not a `source`: the message says it all, and a printed chain would repeat it.
    #[error("invalid parameter: {0}")]
    Param(ParamError),
    #[error("the autoupdate_version has no spec.agents: there is no agent rollout to simulate")]
    NoAgentRollout,
    #[error(transparent)]
    Version(#[from] tern_core::version::VersionError),
}

impl From<ParamError> for SimError {
    fn from(e: ParamError) -> Self {
        Self::Param(e)
    }
}

/// What an agent's updater is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Activity {
    /// Nothing to do under the current rollout (its runs are no-ops).
    Idle,
    /// Its next run is in the queue.
    PollScheduled,
    /// Told to update: waiting out the jitter, then installing `target`.
    Updating { target: u16 },
}

struct Agent {
    updater_id: String,
    /// Position of the updater id in [0, 1] as bits (orders like the fraction).
    frac_bits: u64,
    numeral: UpdaterNumeral,
    /// Index into `Sim::presented`: the group the agent presents.
    group: u16,
    /// Index into `Sim::group_names`: the group that serves it.
    served: u16,
    replica: u16,
    version: u16,
    rollback: bool,
    healthy: bool,
    skip: Option<u16>,
    live: bool,
    /// Settled (connected for one report period) and counted in its replica's report.
    counted: bool,
    /// Offset of its timer in [0, poll).
    phase: i64,
    activity: Activity,
    /// Its next run was brought forward by a long poll released on a change: ternd
    /// spread it already, so the run waits no jitter of its own.
    released: bool,
}

impl Agent {
    fn failed(&self) -> bool {
        self.rollback || !self.healthy
    }
}

#[derive(Default)]
struct Bucket {
    count: u64,
    failed: u64,
    by_id: BTreeSet<(UpdaterNumeral, u32)>,
}

struct Replica {
    name: String,
    /// Agents not yet settled, in the order they connected.
    pending: VecDeque<(i64, u32)>,
    unsettled: u64,
    /// (presented group, version) → counts.
    buckets: BTreeMap<(u16, u16), Bucket>,
    /// When it last reported, and when it reports next (a `Tick` for another instant
    /// was superseded).
    last_tick: i64,
    next_tick: i64,
    /// The first change among its agents since its last report.
    changed: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A replica writes its report; the leader (0) then reconciles.
    Tick(u16),
    Leave(u32),
    Join,
    /// An agent's jitter + install is over.
    Done(u32),
    /// An agent's updater runs.
    Poll(u32),
}

/// Per served group, what the last reconcile told its agents (to wake the ones whose
/// answer changed).
#[derive(Clone, Debug, PartialEq)]
struct GroupSig {
    state: GroupState,
    progress: f64,
    canaries: Vec<String>,
}

#[derive(Default)]
struct GroupStats {
    started_at: Option<i64>,
    window_opened_at: Option<Timestamp>,
    active_at: Option<i64>,
    done_at: Option<i64>,
    all_updated_at: Option<i64>,
    canaries_alive: Option<(usize, usize)>,
    overdue_since: Option<Timestamp>,
    halted: bool,
    updates: u64,
    rollbacks: u64,
    updating: u64,
    max_updating: u64,
    first_update_at: Option<i64>,
    last_update_at: Option<i64>,
    /// When the first agent began installing (its jitter over), and when the last
    /// canary did (installs begun while the group was in canary).
    first_install_at: Option<i64>,
    last_canary_install_at: Option<i64>,
}

/// A simulated fleet, its replicas and its leader, at some instant.
pub struct Sim {
    params: Params,
    config: Option<AutoUpdateConfig>,
    version: AutoUpdateVersion,
    start: Timestamp,
    now: i64,
    rng: ChaCha8Rng,
    reconcile_rng: ChaCha8Rng,
    /// Samples the canary candidates the replicas offer.
    report_rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(i64, Kind, u64)>>,
    seq: u64,
    agents: Vec<Agent>,
    by_id: HashMap<String, u32>,
    versions: Vec<String>,
    version_idx: HashMap<String, u16>,
    fail_p: Vec<f64>,
    from_version: u16,
    /// Group names agents present (the config's, then any other from the params, then
    /// `""` for ungrouped agents), with the join distribution (cumulative weights).
    presented: Vec<String>,
    presented_served: Vec<u16>,
    join_cdf: Vec<f64>,
    /// The rollout's groups (from the config), in order; the last is the catch-all.
    group_names: Vec<String>,
    /// Per served group: live agents ordered by updater id position.
    members: Vec<BTreeSet<(u64, u32)>>,
    replicas: Vec<Replica>,
    reports: Vec<AutoUpdateAgentReport>,
    rollout: Option<AutoUpdateAgentRollout>,
    sigs: Vec<Option<GroupSig>>,
    last_spec: Option<RolloutSpec>,
    stats: Vec<GroupStats>,
    events: Vec<TimelineEvent>,
    rollout_created_at: Option<i64>,
    rollout_done_at: Option<i64>,
    no_rollout: Option<String>,
    agents_initial: u64,
    joins: u64,
    leaves: u64,
    reconciles: u64,
    sim_events: u64,
    max_updating: u64,
    updating: u64,
}

/// The live agents at the end of a run.
struct LiveTally {
    /// Per served group: how many run each version.
    hosts: Vec<BTreeMap<String, u64>>,
    live: u64,
    on_target: u64,
    failed: u64,
}

/// The simulated agents as a replica's inventory lends them to the core's report
/// helpers ([`AgentView`]).
#[derive(Clone, Copy)]
struct FleetView<'a> {
    agents: &'a [Agent],
    presented: &'a [String],
    versions: &'a [String],
}

#[derive(Clone, Copy)]
struct AgentOf<'a> {
    fleet: FleetView<'a>,
    idx: u32,
}

impl AgentOf<'_> {
    fn agent(&self) -> &Agent {
        &self.fleet.agents[self.idx as usize]
    }
}

impl AgentView for AgentOf<'_> {
    fn updater_id(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.agent().updater_id)
    }
    fn updater_numeral(&self) -> UpdaterNumeral {
        self.agent().numeral
    }
    fn has_updater_id(&self) -> bool {
        true
    }
    fn group(&self) -> &str {
        &self.fleet.presented[self.agent().group as usize]
    }
    fn version(&self) -> &str {
        &self.fleet.versions[self.agent().version as usize]
    }
    fn updater_status(&self) -> UpdaterStatus {
        UpdaterStatus::Enabled
    }
    fn failed(&self) -> bool {
        self.agent().failed()
    }
    fn first_seen(&self) -> Timestamp {
        // Unused: `settled` below answers from what the simulation tracks.
        Timestamp::UNIX_EPOCH
    }
    fn settled(&self, _now: Timestamp, _report_period: SignedDuration) -> bool {
        self.agent().counted
    }
    fn label(&self, _key: &str) -> Option<&str> {
        // Simulated hosts carry no labels: a topology limit sees one value, "".
        None
    }
    fn fact(&self, _attribute: &tern_core::canary::Attribute<'_>) -> Option<&str> {
        // Nor facts: canaries chosen for coverage see one value of each, "".
        None
    }
    fn connected(&self) -> ConnectedAgent {
        let a = self.agent();
        ConnectedAgent {
            updater_id: a.updater_id.clone(),
            host_id: format!("host-{}", self.idx),
            hostname: format!("host-{}.sim", self.idx),
            group: self.group().to_string(),
            version: self.version().to_string(),
            updater_status: UpdaterStatus::Enabled,
            healthy: Some(a.healthy),
            failed_version: a.skip.map(|v| self.fleet.versions[usize::from(v)].clone()),
            refused_version: None,
            attributes: Default::default(),
        }
    }
}

/// What a replica offers besides its counts: canary candidates, the canaries it sees
/// and its topology part.
type Offered = (
    BTreeMap<String, Vec<ConnectedAgent>>,
    Vec<ConnectedAgent>,
    BTreeMap<String, Vec<TopologyReport>>,
);

/// A random UUID v4 from the seeded generator.
fn uuid_v4(rng: &mut impl RngCore) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    tern_core::ids::uuid_v4(b)
}

/// Uniform in (0, 1].
fn unit(rng: &mut impl RngCore) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// Uniform in [0, n).
fn below(rng: &mut impl RngCore, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

/// Whole seconds until the next event of a Poisson process of `rate` per second.
fn exp_secs(rng: &mut impl RngCore, rate: f64) -> i64 {
    let s = -unit(rng).ln() / rate;
    if s >= 1e15 {
        i64::MAX / 4
    } else {
        (s.ceil() as i64).max(1)
    }
}

/// How the fleet spreads over groups: the groups agents present, the group serving
/// each, and each one's share of the fleet.
struct Layout {
    /// The rollout's groups (from the config), in order; the last is the catch-all.
    group_names: Vec<String>,
    /// Presented group names with their share of the fleet.
    shares: Vec<(String, f64)>,
    /// Per presented group, its index in `group_names`.
    served: Vec<u16>,
}

impl Layout {
    fn new(params: &Params, config: Option<&AutoUpdateConfig>) -> Self {
        let groups = Groups::configured(config);
        let group_names: Vec<String> = groups.names().map(str::to_string).collect();
        let shares = presented_shares(params, &group_names);
        let served = shares
            .iter()
            .map(|(p, _)| {
                let served = groups.serving(p);
                let i = group_names
                    .iter()
                    .position(|n| Some(n.as_str()) == served)
                    .unwrap_or(group_names.len().saturating_sub(1));
                u16::try_from(i).unwrap_or(u16::MAX)
            })
            .collect();
        Self {
            group_names,
            shares,
            served,
        }
    }

    /// The shares as cumulative weights, to draw a joining agent's group.
    fn join_cdf(&self) -> Vec<f64> {
        let mut acc = 0.0;
        self.shares
            .iter()
            .map(|(_, w)| {
                acc += w;
                acc
            })
            .collect()
    }

    /// Exactly `n` agents over the presented groups, by largest remainder.
    fn initial_counts(&self, n: u64) -> Vec<u64> {
        let shares = &self.shares;
        let mut counts: Vec<u64> = shares.iter().map(|(_, w)| (w * n as f64) as u64).collect();
        let mut rest = n.saturating_sub(counts.iter().sum());
        let mut order: Vec<usize> = (0..shares.len()).collect();
        order.sort_by(|&a, &b| {
            let fa = shares[a].1 * n as f64 - counts[a] as f64;
            let fb = shares[b].1 * n as f64 - counts[b] as f64;
            fb.total_cmp(&fa).then(a.cmp(&b))
        });
        for &i in order.iter().cycle().take(shares.len() * 2) {
            if rest == 0 {
                break;
            }
            counts[i] += 1;
            rest -= 1;
        }
        counts
    }
}

/// The groups agents present and their shares: the params' groups, or else the
/// config's evenly, then `""` for the ungrouped share.
fn presented_shares(params: &Params, group_names: &[String]) -> Vec<(String, f64)> {
    let mut shares: Vec<(String, f64)> = if params.groups.is_empty() {
        let each = (1.0 - params.ungrouped) / group_names.len().max(1) as f64;
        group_names.iter().map(|n| (n.clone(), each)).collect()
    } else {
        let total: f64 = params.groups.iter().map(|(_, w)| w).sum();
        params
            .groups
            .iter()
            .map(|(n, w)| (n.clone(), w / total * (1.0 - params.ungrouped)))
            .collect()
    };
    if params.ungrouped > 0.0 {
        shares.push((String::new(), params.ungrouped));
    }
    shares
}

/// The version the fleet runs at the start: the params' or the rollout's start version.
fn from_version(params: &Params, version: &AutoUpdateVersion) -> Result<String, SimError> {
    let agents_spec = version
        .spec
        .agents
        .as_ref()
        .ok_or(SimError::NoAgentRollout)?;
    Ok(match &params.from_version {
        Some(v) => tern_core::version::Version::parse(v)?.to_string(),
        None => agents_spec.start_version.to_string(),
    })
}

impl Sim {
    /// Sets up the fleet at `params.start`. `config` `None` means no config resource
    /// exists (one `default` group, halt-on-error).
    pub fn new(
        params: Params,
        config: Option<AutoUpdateConfig>,
        version: AutoUpdateVersion,
    ) -> Result<Self, SimError> {
        params.validate()?;
        let from = from_version(&params, &version)?;
        let layout = Layout::new(&params, config.as_ref());
        let counts = layout.initial_counts(u64::from(params.agents));
        let mut sim = Self::empty(params, config, version, layout);
        sim.from_version = sim.intern(&from);
        sim.add_initial_fleet(&counts);
        sim.schedule_first_reports();
        sim.schedule_first_join();
        Ok(sim)
    }

    /// No agent, nothing queued, at the start.
    fn empty(
        params: Params,
        config: Option<AutoUpdateConfig>,
        version: AutoUpdateVersion,
        layout: Layout,
    ) -> Self {
        let join_cdf = layout.join_cdf();
        let Layout {
            group_names,
            shares,
            served,
        } = layout;
        let presented: Vec<String> = shares.into_iter().map(|(n, _)| n).collect();
        let replicas = (0..params.replicas)
            .map(|r| Replica {
                name: format!("ternd-{r}"),
                pending: VecDeque::new(),
                unsettled: 0,
                buckets: BTreeMap::new(),
                last_tick: 0,
                next_tick: 0,
                changed: None,
            })
            .collect();
        Sim {
            config,
            version,
            start: params.start,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            reconcile_rng: ChaCha8Rng::seed_from_u64(params.seed ^ 0x7e41_5eed_c0ff_ee00),
            report_rng: ChaCha8Rng::seed_from_u64(params.seed ^ 0x2e90_7c4a_d1da_7e5a),
            queue: BinaryHeap::new(),
            seq: 0,
            agents: Vec::with_capacity(params.agents as usize),
            by_id: HashMap::with_capacity(params.agents as usize),
            versions: Vec::new(),
            version_idx: HashMap::new(),
            fail_p: Vec::new(),
            from_version: 0,
            presented,
            presented_served: served,
            join_cdf,
            members: vec![BTreeSet::new(); group_names.len()],
            stats: (0..group_names.len())
                .map(|_| GroupStats::default())
                .collect(),
            sigs: vec![None; group_names.len()],
            group_names,
            replicas,
            reports: Vec::new(),
            rollout: None,
            last_spec: None,
            events: Vec::new(),
            rollout_created_at: None,
            rollout_done_at: None,
            no_rollout: None,
            agents_initial: u64::from(params.agents),
            joins: 0,
            leaves: 0,
            reconciles: 0,
            sim_events: 0,
            max_updating: 0,
            updating: 0,
            params,
        }
    }

    /// The initial fleet, `counts[g]` agents presenting group `g`, all on the start
    /// version and settled long ago.
    fn add_initial_fleet(&mut self, counts: &[u64]) {
        for (g, &c) in counts.iter().enumerate() {
            for _ in 0..c {
                let group = u16::try_from(g).unwrap_or(u16::MAX);
                let version = self.from_version;
                self.add_agent(group, version, true, -3600);
            }
        }
    }

    /// Every replica has been running: each writes a report at the start; the leader
    /// reports and reconciles at once, the others at a random phase of the period.
    fn schedule_first_reports(&mut self) {
        let period = self.params.report_period_secs;
        for r in 0..self.params.replicas {
            let spec = self.build_report(r);
            self.reports.push(AutoUpdateAgentReport::new(
                &self.replicas[r as usize].name,
                spec,
            ));
            let phase = if r == 0 {
                0
            } else {
                below(&mut self.rng, period as u64) as i64
            };
            let replica = &mut self.replicas[r as usize];
            replica.last_tick = phase - period;
            replica.next_tick = phase;
            self.push(phase, Kind::Tick(r));
        }
    }

    fn schedule_first_join(&mut self) {
        let n = u64::from(self.params.agents);
        if self.params.churn_per_hour > 0.0 && n > 0 {
            let rate = self.params.churn_per_hour / 3600.0 * n as f64;
            let at = exp_secs(&mut self.rng, rate);
            self.push(at, Kind::Join);
        }
    }

    fn ts(&self, t: i64) -> Timestamp {
        self.start
            .saturating_add(SignedDuration::from_secs(t))
            .unwrap_or(self.start)
    }

    fn secs_until(&self, until: Timestamp) -> i64 {
        until.duration_since(self.start).as_secs()
    }

    fn push(&mut self, at: i64, kind: Kind) {
        self.seq += 1;
        self.queue.push(Reverse((at, kind, self.seq)));
    }

    fn intern(&mut self, v: &str) -> u16 {
        if let Some(&i) = self.version_idx.get(v) {
            return i;
        }
        let i = u16::try_from(self.versions.len()).unwrap_or(u16::MAX);
        self.versions.push(v.to_string());
        self.version_idx.insert(v.to_string(), i);
        self.fail_p
            .push(self.params.fail.get(v).copied().unwrap_or(0.0));
        i
    }

    /// A new agent, connected now (or long ago when `settled`).
    fn add_agent(&mut self, group: u16, version: u16, settled: bool, first_seen: i64) -> u32 {
        let updater_id = uuid_v4(&mut self.rng);
        let numeral = UpdaterNumeral::of(&updater_id);
        let replica = below(&mut self.rng, u64::from(self.params.replicas)) as u16;
        let phase = below(&mut self.rng, self.params.poll_secs as u64) as i64;
        let served = self.presented_served[group as usize];
        let idx = u32::try_from(self.agents.len()).unwrap_or(u32::MAX);
        let frac_bits = numeral.fraction().to_bits();
        self.agents.push(Agent {
            updater_id: updater_id.clone(),
            frac_bits,
            numeral,
            group,
            served,
            replica,
            version,
            rollback: false,
            healthy: true,
            skip: None,
            live: true,
            counted: false,
            phase,
            activity: Activity::Idle,
            released: false,
        });
        self.by_id.insert(updater_id, idx);
        self.members[served as usize].insert((frac_bits, idx));
        if settled {
            self.agents[idx as usize].counted = true;
            self.count(idx, true);
        } else {
            let rep = &mut self.replicas[replica as usize];
            rep.pending.push_back((first_seen, idx));
            rep.unsettled += 1;
        }
        if self.params.churn_per_hour > 0.0 {
            let life = exp_secs(&mut self.rng, self.params.churn_per_hour / 3600.0);
            self.push(self.now.saturating_add(life), Kind::Leave(idx));
        }
        idx
    }

    /// Adds (`true`) or removes an agent from its replica's report buckets.
    fn count(&mut self, idx: u32, add: bool) {
        let a = &self.agents[idx as usize];
        if !a.counted {
            return;
        }
        let key = (a.group, a.version);
        let failed = a.failed();
        let entry = (a.numeral, idx);
        let b = self.replicas[a.replica as usize]
            .buckets
            .entry(key)
            .or_default();
        if add {
            b.count += 1;
            b.failed += u64::from(failed);
            b.by_id.insert(entry);
        } else {
            b.count -= 1;
            b.failed -= u64::from(failed);
            b.by_id.remove(&entry);
        }
    }

    fn build_report(&mut self, r: u16) -> ReportSpec {
        let period = self.params.report_period_secs;
        let now = self.now;
        let rep = &mut self.replicas[r as usize];
        let mut newly = Vec::new();
        while let Some(&(seen, idx)) = rep.pending.front() {
            if now - seen < period {
                break;
            }
            rep.pending.pop_front();
            if self.agents[idx as usize].live {
                rep.unsettled -= 1;
                newly.push(idx);
            }
        }
        for idx in newly {
            self.agents[idx as usize].counted = true;
            self.count(idx, true);
        }
        let rep = &self.replicas[r as usize];
        let mut groups: BTreeMap<String, GroupReport> = BTreeMap::new();
        for (&(g, v), b) in &rep.buckets {
            if b.count == 0 {
                continue;
            }
            let lowest = b
                .by_id
                .first()
                .map(|&(_, i)| self.agents[i as usize].updater_id.clone())
                .unwrap_or_default();
            groups
                .entry(self.presented[g as usize].clone())
                .or_default()
                .versions
                .insert(
                    self.versions[v as usize].clone(),
                    VersionReport {
                        count: b.count,
                        failed_count: b.failed,
                        lowest_updater_id: lowest,
                    },
                );
        }
        let omitted = if rep.unsettled > 0 {
            vec![Omitted {
                reason: OMITTED_TOO_NEW.to_string(),
                count: rep.unsettled,
            }]
        } else {
            Vec::new()
        };
        let (canary_candidates, canaries, topology) = self.offered(r);
        ReportSpec {
            timestamp: self.ts(now),
            groups,
            omitted,
            canary_candidates,
            // Simulated hosts are offered as candidates from the start: none waits.
            canary_eligible: Default::default(),
            canaries,
            // Simulated hosts fail without saying why.
            canary_failures: Default::default(),
            topology,
            // Every simulated replica has been running long before the start.
            warming_up: false,
            shrunk: Vec::new(),
        }
    }

    /// What replica `r` offers the leader in its report, as a ternd replica does: canary
    /// candidates for the groups the rollout [`reconcile::needs`] them for, the
    /// canaries it is connected to, and its hosts behind in groups with topology limits. The counts above are kept incrementally instead
    /// of by [`tern_core::inventory::build_report`] (the same numbers, without walking
    /// 100k agents every minute); the candidates walk only the needed groups.
    fn offered(&mut self, r: u16) -> Offered {
        let Some(needs) = self.rollout.as_ref().map(reconcile::needs) else {
            return (BTreeMap::new(), Vec::new(), BTreeMap::new());
        };
        let now = self.ts(self.now);
        let period = SignedDuration::from_secs(self.params.report_period_secs);
        let fleet = FleetView {
            agents: &self.agents,
            presented: &self.presented,
            versions: &self.versions,
        };
        let here = |idx: u32| {
            let a = &self.agents[idx as usize];
            (a.live && a.replica == r).then_some(AgentOf { fleet, idx })
        };
        let needed: Vec<AgentOf<'_>> = needs
            .canary_candidates
            .iter()
            .filter_map(|g| self.group_names.iter().position(|n| n == g))
            .filter_map(|gi| self.members.get(gi))
            .flat_map(|set| set.iter().map(|&(_, idx)| idx))
            .filter_map(here)
            .collect();
        let candidates = inventory::canary_candidates(
            needed,
            &needs,
            now,
            period,
            inventory::CANARY_CANDIDATES_PER_GROUP,
            &mut self.report_rng,
        );
        let canaries =
            inventory::canaries_seen(&needs, |id| self.by_id.get(id).and_then(|&i| here(i)));
        let limited: Vec<AgentOf<'_>> = needs
            .topology
            .iter()
            .filter_map(|(g, _)| self.group_names.iter().position(|n| n == g))
            .filter_map(|gi| self.members.get(gi))
            .flat_map(|set| set.iter().map(|&(_, idx)| idx))
            .filter_map(here)
            .collect();
        let topology = inventory::topology_report(limited, &needs, now, period, |_| false);
        (candidates, canaries, topology)
    }

    /// Processes every event up to `until` (inclusive) and returns the timeline so far.
    pub fn run_until(&mut self, until: Timestamp) -> Timeline {
        let end = self.secs_until(until);
        while let Some(&Reverse((at, kind, _))) = self.queue.peek() {
            if at > end {
                break;
            }
            self.queue.pop();
            self.now = at;
            self.sim_events += 1;
            match kind {
                Kind::Tick(r) => self.tick(r),
                Kind::Leave(i) => self.leave(i),
                Kind::Join => self.join(),
                Kind::Done(i) => self.done(i),
                Kind::Poll(i) => self.poll(i),
            }
        }
        self.now = self.now.max(end);
        self.timeline()
    }

    /// Runs for `d` of simulated time from where the simulation is.
    pub fn run_for(&mut self, d: SignedDuration) -> Timeline {
        let until = self.ts(self.now).saturating_add(d).unwrap_or(self.start);
        self.run_until(until)
    }

    /// The simulated instant the simulation has reached.
    pub fn now(&self) -> Timestamp {
        self.ts(self.now)
    }

    /// The rollout as the leader last wrote it.
    pub fn rollout(&self) -> Option<&AutoUpdateAgentRollout> {
        self.rollout.as_ref()
    }

    fn tick(&mut self, r: u16) {
        if self.replicas[r as usize].next_tick != self.now {
            return; // brought forward since
        }
        let spec = self.build_report(r);
        let replica = &mut self.replicas[r as usize];
        replica.last_tick = self.now;
        replica.changed = None;
        let name = replica.name.clone();
        self.reports[r as usize] = AutoUpdateAgentReport::new(&name, spec);
        self.replicas[r as usize].next_tick = i64::MAX;
        if r == 0 {
            self.reconcile();
            // Every replica sees the new rollout (ternd: its snapshot): one set moving
            // reports sooner.
            for other in 1..self.params.replicas {
                self.schedule_tick(other);
            }
        }
        self.schedule_tick(r);
    }

    /// Schedules replica `r`'s next report where tern-core puts it, when that is
    /// sooner than the one scheduled.
    fn schedule_tick(&mut self, r: u16) {
        let periods = tern_core::rollout::ReportPeriods {
            quiet: self.params.report_period_secs,
            active: self.params.active_report_period_secs,
            after_change: self.params.report_after_change_secs,
        };
        let replica = &self.replicas[r as usize];
        let due = tern_core::rollout::next_report(
            self.rollout.as_ref(),
            &periods,
            replica.last_tick,
            replica.changed,
        )
        .max(self.now);
        if due < replica.next_tick {
            self.replicas[r as usize].next_tick = due;
            self.push(due, Kind::Tick(r));
        }
    }

    /// What replica `r` counts changed (ternd: a heartbeat with another version or
    /// health, or a new host).
    fn hosts_changed(&mut self, r: u16) {
        self.replicas[r as usize].changed.get_or_insert(self.now);
        self.schedule_tick(r);
    }

    /// The leader's reconcile, from every replica's report, as ternd's
    /// ([`reconcile::reconcile_reports`]).
    fn reconcile(&mut self) {
        self.reconciles += 1;
        let now = self.ts(self.now);
        let resources = Resources {
            config: self.config.as_ref(),
            version: Some(&self.version),
            rollout: self.rollout.as_ref(),
            frozen: false,
        };
        let period = SignedDuration::from_secs(self.params.report_period_secs);
        let measured = self.measure(now);
        match reconcile::reconcile_reports_measured(
            now,
            resources,
            &self.reports,
            period,
            &measured,
            &mut self.reconcile_rng,
        ) {
            Outcome::NoRollout { why } => {
                if self.no_rollout.as_deref() != Some(why.as_str()) {
                    self.event(None, EventKind::NoRollout, None, Some(why.clone()));
                    self.no_rollout = Some(why);
                }
                self.rollout = None;
            }
            Outcome::Rollout { rollout, events } => {
                self.no_rollout = None;
                self.rollout = Some(*rollout);
                self.record(&events);
                self.wake_changed();
            }
        }
    }

    /// The simulated Prometheus: the canary analyses due now, answered from the one
    /// measure the simulation has, each version's error ratio (`Params::errors`): every
    /// query with the mean over the canaries' running versions, every baseline with
    /// the start version's. It cannot run PromQL; what it shows is what an analysis
    /// that measures the error ratio buys.
    fn measure(&self, now: Timestamp) -> Vec<tern_core::analysis::Measured> {
        use tern_core::analysis::{Measured, QueryValues};
        use tern_core::reconcile::analysis_requests as requests;
        let Some(rollout) = self.rollout.as_ref() else {
            return Vec::new();
        };
        let ratio = |v: &str| {
            let v = tern_core::version::normalize(v);
            self.params
                .errors
                .get(&v)
                .copied()
                .unwrap_or(crate::params::DEFAULT_ERROR_RATIO)
        };
        requests(rollout, now)
            .into_iter()
            .map(|req| {
                let canaries: Vec<f64> = rollout
                    .group(&req.group)
                    .map(|g| g.canaries.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| self.by_id.get(&c.updater_id))
                    .map(|&i| ratio(&self.versions[self.agents[i as usize].version as usize]))
                    .collect();
                let canary = if canaries.is_empty() {
                    Err("no canary is connected".to_string())
                } else {
                    Ok(canaries.iter().sum::<f64>() / canaries.len() as f64)
                };
                let baseline = ratio(&rollout.spec.start_version.to_string());
                Measured {
                    group: req.group,
                    values: req
                        .queries
                        .into_iter()
                        .map(|q| QueryValues {
                            name: q.name,
                            canary: canary.clone(),
                            baseline: q.baseline.map(|_| Ok(baseline)),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    fn group_index(&self, name: &str) -> Option<usize> {
        self.group_names.iter().position(|n| n == name)
    }

    /// The group named `name` in `rollout`, with its index in `group_names`.
    fn rollout_group<'r>(
        &self,
        rollout: &'r AutoUpdateAgentRollout,
        name: &str,
    ) -> Option<(usize, &'r RolloutGroup)> {
        Some((self.group_index(name)?, rollout.group(name)?))
    }

    fn counts_of(&self, g: &RolloutGroup) -> Counts {
        let updating = self
            .group_index(&g.name)
            .map_or(0, |i| self.stats[i].updating);
        Counts {
            initial: g.initial_count,
            present: g.present_count,
            up_to_date: g.up_to_date_count,
            failed: g.failed_count,
            updating,
            progress: g.progress,
        }
    }

    fn event(
        &mut self,
        group: Option<&RolloutGroup>,
        kind: EventKind,
        state: Option<(GroupState, GroupState, &str)>,
        detail: Option<String>,
    ) {
        let counts = group.map(|g| self.counts_of(g));
        self.events.push(TimelineEvent {
            at: self.ts(self.now),
            group: group.map(|g| g.name.clone()),
            kind,
            from: state.map(|s| s.0.as_str().to_string()),
            to: state.map(|s| s.1.as_str().to_string()),
            reason: state.map(|s| s.2.to_string()),
            counts,
            detail,
        });
    }

    /// Turns the reconciler's events (and what the counts show) into timeline entries.
    fn record(&mut self, events: &[Event]) {
        let Some(rollout) = self.rollout.clone() else {
            return;
        };
        for e in events {
            self.record_event(&rollout, e);
        }
        for g in &rollout.status.groups {
            self.record_group_status(g);
        }
        if rollout.status.state == RolloutState::Done && self.rollout_done_at.is_none() {
            self.rollout_done_at = Some(self.now);
            self.event(None, EventKind::RolloutDone, None, None);
        }
    }

    fn record_event(&mut self, rollout: &AutoUpdateAgentRollout, e: &Event) {
        match e {
            Event::RolloutCreated {
                start_version,
                target_version,
                why,
            } => {
                if self.rollout_created_at.is_none() {
                    self.rollout_created_at = Some(self.now);
                }
                self.event(
                    None,
                    EventKind::RolloutCreated,
                    None,
                    Some(format!("{start_version} -> {target_version} ({why})")),
                );
            }
            Event::GroupChanged {
                group,
                from,
                to,
                reason,
            } => self.record_group_changed(rollout, group, (*from, *to, reason)),
            Event::CanariesPicked { group, updater_ids } => {
                if let Some(g) = rollout.group(group) {
                    self.event(
                        Some(g),
                        EventKind::CanariesPicked,
                        None,
                        Some(updater_ids.len().to_string()),
                    );
                }
            }
            Event::CanariesFailed { group, updater_ids } => {
                if let Some(g) = rollout.group(group) {
                    self.event(
                        Some(g),
                        EventKind::CanariesFailed,
                        None,
                        Some(updater_ids.len().to_string()),
                    );
                }
            }
            Event::AnalysisFailed { group, message } => {
                if let Some(g) = rollout.group(group) {
                    self.event(
                        Some(g),
                        EventKind::AnalysisFailed,
                        None,
                        Some(message.clone()),
                    );
                }
            }
            Event::GroupOverdue {
                group,
                state,
                since,
            } => self.record_overdue(rollout, group, *state, *since),
            Event::ProgressHalted { group } => self.record_halted(rollout, group),
            Event::ModeChanged { .. } => {}
        }
    }

    /// A state change, and the first start, active and done of the group for its summary.
    fn record_group_changed(
        &mut self,
        rollout: &AutoUpdateAgentRollout,
        group: &str,
        (from, to, reason): (GroupState, GroupState, &str),
    ) {
        let Some((i, g)) = self.rollout_group(rollout, group) else {
            return;
        };
        let now = self.ts(self.now);
        let st = &mut self.stats[i];
        if from == GroupState::Unstarted && st.started_at.is_none() {
            st.started_at = Some(self.now);
            let eval_now = rollout.status.time_override.unwrap_or(now);
            st.window_opened_at = group_window(&rollout.spec, g).open_since(eval_now);
        }
        if to == GroupState::Active && st.active_at.is_none() {
            st.active_at = Some(self.now);
        }
        if to == GroupState::Done && st.done_at.is_none() {
            st.done_at = Some(self.now);
        }
        self.event(Some(g), EventKind::State, Some((from, to, reason)), None);
    }

    /// The reconciler repeats it on every reconcile while the group is late; the
    /// timeline keeps the first for each `since`.
    fn record_overdue(
        &mut self,
        rollout: &AutoUpdateAgentRollout,
        group: &str,
        state: GroupState,
        since: Timestamp,
    ) {
        let Some((i, g)) = self.rollout_group(rollout, group) else {
            return;
        };
        if self.stats[i].overdue_since != Some(since) {
            self.stats[i].overdue_since = Some(since);
            self.event(
                Some(g),
                EventKind::Overdue,
                None,
                Some(format!("in {} since {}", state.as_str(), since)),
            );
        }
    }

    /// The reconciler repeats it while growth is halted; the timeline keeps one per halt
    /// (`record_group_status` ends a halt).
    fn record_halted(&mut self, rollout: &AutoUpdateAgentRollout, group: &str) {
        let Some((i, g)) = self.rollout_group(rollout, group) else {
            return;
        };
        if !self.stats[i].halted {
            self.stats[i].halted = true;
            self.event(Some(g), EventKind::ProgressHalted, None, None);
        }
    }

    /// What no reconciler event says but the group's status shows: the end of a halt,
    /// canaries coming up, every present agent up to date.
    fn record_group_status(&mut self, g: &RolloutGroup) {
        let Some(i) = self.group_index(&g.name) else {
            return;
        };
        if g.last_update_reason != tern_core::reason::TOO_MANY_AGENTS_MISSING {
            self.stats[i].halted = false;
        }
        if g.state == GroupState::Canary && !g.canaries.is_empty() {
            let alive = (
                g.canaries.iter().filter(|c| c.success).count(),
                g.canaries.len(),
            );
            if self.stats[i].canaries_alive != Some(alive) {
                self.stats[i].canaries_alive = Some(alive);
                self.event(
                    Some(g),
                    EventKind::CanariesAlive,
                    None,
                    Some(format!("{}/{}", alive.0, alive.1)),
                );
            }
        }
        if matches!(g.state, GroupState::Active | GroupState::Done)
            && self.stats[i].all_updated_at.is_none()
            && g.present_count > 0
            && g.up_to_date_count == g.present_count
        {
            self.stats[i].all_updated_at = Some(self.now);
            self.event(Some(g), EventKind::AllUpdated, None, None);
        }
    }

    /// After a reconcile: wakes the idle agents whose find answer may have changed.
    fn wake_changed(&mut self) {
        let Some(rollout) = &self.rollout else {
            return;
        };
        let spec_changed = self.last_spec.as_ref() != Some(&rollout.spec);
        let mut scans: Vec<(usize, Option<(f64, f64)>)> = Vec::new();
        let mut new_sigs = self.sigs.clone();
        for (i, name) in self.group_names.iter().enumerate() {
            let sig = rollout.group(name).map(|g| GroupSig {
                state: g.state,
                progress: g.progress,
                canaries: g.canaries.iter().map(|c| c.updater_id.clone()).collect(),
            });
            let old = &self.sigs[i];
            if spec_changed {
                scans.push((i, None));
            } else if sig != *old {
                match (old, &sig) {
                    (Some(o), Some(n))
                        if o.state == n.state
                            && o.canaries == n.canaries
                            && n.progress > o.progress =>
                    {
                        scans.push((i, Some((o.progress, n.progress))));
                    }
                    _ => scans.push((i, None)),
                }
            }
            new_sigs[i] = sig;
        }
        self.last_spec = Some(rollout.spec.clone());
        self.sigs = new_sigs;
        for (gi, range) in scans {
            let candidates: Vec<u32> = match range {
                None => self.members[gi].iter().map(|&(_, i)| i).collect(),
                Some((lo, hi)) => {
                    let lo = (lo.max(0.0).to_bits(), 0u32);
                    if hi >= 1.0 {
                        self.members[gi].range(lo..).map(|&(_, i)| i).collect()
                    } else {
                        self.members[gi]
                            .range(lo..(hi.to_bits(), 0u32))
                            .map(|&(_, i)| i)
                            .collect()
                    }
                }
            };
            let long_poll = self.params.long_poll_jitter_secs;
            for idx in candidates {
                let activity = self.agents[idx as usize].activity;
                // A long-polling agent is released whether its timer run was due or
                // not; the timer's run, if it comes first, finds the work done.
                let wakes = match long_poll {
                    Some(_) => matches!(activity, Activity::Idle | Activity::PollScheduled),
                    None => activity == Activity::Idle,
                };
                if !wakes || self.wants_update(idx).is_none() {
                    continue;
                }
                match long_poll {
                    Some(j) => self.schedule_release(idx, j),
                    None => self.schedule_poll(idx),
                }
            }
        }
    }

    /// What find tells this agent and what the host's own rule does with it (the same
    /// two functions ternd and tern-update call): the version to install, if any.
    fn wants_update(&mut self, idx: u32) -> Option<(u16, u64)> {
        let a = &self.agents[idx as usize];
        if !a.live {
            return None;
        }
        let now = self.ts(self.now);
        let d = gate::answer(
            &gate::Fleet::new(self.rollout.as_ref(), now),
            &gate::Host::new(
                gate::AGENT,
                &self.presented[a.group as usize],
                &a.updater_id,
            ),
            gate::Ask::Find,
        );
        let health = if a.healthy {
            host_update::Health::Healthy
        } else {
            host_update::Health::Unhealthy("the simulated agent is unhealthy".into())
        };
        let decision = host_update::on_find(
            &d,
            Some(&self.versions[a.version as usize]),
            a.skip.map(|s| self.versions[s as usize].as_str()),
            health,
            now,
        );
        match decision {
            host_update::Decision::Update { target, .. } => {
                Some((self.intern(&target), d.jitter_seconds))
            }
            _ => None,
        }
    }

    fn schedule_poll(&mut self, idx: u32) {
        let a = &mut self.agents[idx as usize];
        let p = self.params.poll_secs;
        let next = if self.now < a.phase {
            a.phase
        } else {
            a.phase + ((self.now - a.phase) / p + 1) * p
        };
        a.activity = Activity::PollScheduled;
        self.push(next, Kind::Poll(idx));
    }

    /// A long poll released by a change: the agent asks again after ternd's release
    /// jitter (up to `jitter` seconds), and acts without a jitter of its own.
    fn schedule_release(&mut self, idx: u32, jitter: i64) {
        let wait = below(&mut self.rng, u64::try_from(jitter).unwrap_or(0) + 1) as i64;
        let a = &mut self.agents[idx as usize];
        a.activity = Activity::PollScheduled;
        a.released = true;
        self.push(self.now + wait, Kind::Poll(idx));
    }

    fn poll(&mut self, idx: u32) {
        let a = &self.agents[idx as usize];
        if !a.live || a.activity != Activity::PollScheduled {
            return;
        }
        let released = a.released;
        let a = &mut self.agents[idx as usize];
        a.activity = Activity::Idle;
        a.released = false;
        let Some((target, find_jitter)) = self.wants_update(idx) else {
            return;
        };
        let bound = if released {
            0
        } else {
            self.params
                .jitter_secs
                .map_or(find_jitter, |j| u64::try_from(j).unwrap_or(0))
        };
        let wait = below(&mut self.rng, bound) as i64;
        self.agents[idx as usize].activity = Activity::Updating { target };
        let served = self.agents[idx as usize].served as usize;
        let in_canary = self
            .rollout
            .as_ref()
            .and_then(|r| r.group(&self.group_names[served]))
            .is_some_and(|g| g.state == GroupState::Canary);
        let install_at = self.now + wait;
        let st = &mut self.stats[served];
        st.first_install_at = Some(
            st.first_install_at
                .map_or(install_at, |t| t.min(install_at)),
        );
        if in_canary {
            st.last_canary_install_at = Some(
                st.last_canary_install_at
                    .map_or(install_at, |t| t.max(install_at)),
            );
        }
        st.updating += 1;
        st.max_updating = st.max_updating.max(st.updating);
        self.updating += 1;
        self.max_updating = self.max_updating.max(self.updating);
        self.push(self.now + wait + self.params.install_secs, Kind::Done(idx));
    }

    fn done(&mut self, idx: u32) {
        let a = &self.agents[idx as usize];
        let Activity::Updating { target } = a.activity else {
            return;
        };
        if !a.live {
            return;
        }
        let served = a.served as usize;
        self.stats[served].updating -= 1;
        self.updating -= 1;
        let p = self.fail_p[target as usize];
        let fails = p > 0.0 && unit(&mut self.rng) <= p;
        self.count(idx, false);
        let a = &mut self.agents[idx as usize];
        a.activity = Activity::Idle;
        if fails {
            // tern-update: the new version did not come up; links and DB reverted, the
            // old version restarted, the target skipped until another one comes.
            a.rollback = true;
            a.skip = Some(target);
            self.stats[served].rollbacks += 1;
        } else {
            a.version = target;
            a.rollback = false;
            a.healthy = true;
            let st = &mut self.stats[served];
            st.updates += 1;
            st.first_update_at.get_or_insert(self.now);
            st.last_update_at = Some(self.now);
        }
        self.count(idx, true);
        let replica = self.agents[idx as usize].replica;
        self.hosts_changed(replica);
        if self.wants_update(idx).is_some() {
            self.schedule_poll(idx);
        }
    }

    fn leave(&mut self, idx: u32) {
        if !self.agents[idx as usize].live {
            return;
        }
        self.leaves += 1;
        self.count(idx, false);
        let a = &mut self.agents[idx as usize];
        a.live = false;
        let (served, replica, counted, frac) = (a.served, a.replica, a.counted, a.frac_bits);
        if let Activity::Updating { .. } = a.activity {
            self.stats[served as usize].updating -= 1;
            self.updating -= 1;
        }
        a.activity = Activity::Idle;
        if !counted {
            self.replicas[replica as usize].unsettled -= 1;
        }
        let id = a.updater_id.clone();
        self.by_id.remove(&id);
        self.members[served as usize].remove(&(frac, idx));
    }

    fn join(&mut self) {
        self.joins += 1;
        let x = unit(&mut self.rng) * self.join_cdf.last().copied().unwrap_or(1.0);
        let group = self
            .join_cdf
            .iter()
            .position(|&c| x <= c)
            .unwrap_or(self.join_cdf.len().saturating_sub(1));
        let group = u16::try_from(group).unwrap_or(0);
        // A new host installs what find says for its group, whatever the update flag.
        let name = self.presented[group as usize].clone();
        let told = gate::rollout_answer(self.rollout.as_ref(), &name, "").version;
        let version = match told {
            Some(v) => self.intern(&v.to_string()),
            None => self.from_version,
        };
        let now = self.now;
        let idx = self.add_agent(group, version, false, now);
        // A fresh install of a broken version has nothing to roll back to: it runs
        // unhealthy (counted as failed).
        let p = self.fail_p[version as usize];
        if p > 0.0 && unit(&mut self.rng) <= p {
            self.agents[idx as usize].healthy = false;
        }
        if self.wants_update(idx).is_some() {
            self.schedule_poll(idx);
        }
        let rate = self.params.churn_per_hour / 3600.0 * self.agents_initial as f64;
        let at = now + exp_secs(&mut self.rng, rate);
        self.push(at, Kind::Join);
    }

    /// The timeline up to now, with the summaries.
    pub fn timeline(&self) -> Timeline {
        let (start_version, target) = self.rollout_versions();
        let tally = self.tally_live(&target);
        let groups: Vec<GroupSummary> = self
            .group_names
            .iter()
            .enumerate()
            .zip(tally.hosts)
            .map(|((i, name), hosts)| self.group_summary(i, name, hosts))
            .collect();
        let first_window = self.stats.first().and_then(|s| s.window_opened_at);
        Timeline {
            params: self.params.clone(),
            events: self.events.clone(),
            overall: Overall {
                start: Some(self.start),
                end: Some(self.ts(self.now)),
                start_version,
                target_version: target,
                rollout_state: self
                    .rollout
                    .as_ref()
                    .map_or("none", |r| r.status.state.as_str())
                    .to_string(),
                rollout_created_at: self.rollout_created_at.map(|t| self.ts(t)),
                rollout_done_at: self.rollout_done_at.map(|t| self.ts(t)),
                first_window_to_done_secs: self.secs_since(first_window, self.rollout_done_at),
                agents_initial: self.agents_initial,
                agents_live: tally.live,
                on_target: tally.on_target,
                failed: tally.failed,
                joins: self.joins,
                leaves: self.leaves,
                updates: self.stats.iter().map(|s| s.updates).sum(),
                rollbacks: self.stats.iter().map(|s| s.rollbacks).sum(),
                max_updating: self.max_updating,
                reconciles: self.reconciles,
                sim_events: self.sim_events,
            },
            groups,
        }
    }

    /// The version's start and target versions (empty without an agent rollout).
    fn rollout_versions(&self) -> (String, String) {
        let agents = self.version.spec.agents.as_ref();
        (
            agents
                .map(|a| a.start_version.to_string())
                .unwrap_or_default(),
            agents
                .map(|a| a.target_version.to_string())
                .unwrap_or_default(),
        )
    }

    /// Counts the live agents themselves, not what the reports say of them.
    fn tally_live(&self, target: &str) -> LiveTally {
        let mut tally = LiveTally {
            hosts: vec![BTreeMap::new(); self.group_names.len()],
            live: 0,
            on_target: 0,
            failed: 0,
        };
        for a in self.agents.iter().filter(|a| a.live) {
            tally.live += 1;
            let v = &self.versions[a.version as usize];
            *tally.hosts[a.served as usize].entry(v.clone()).or_default() += 1;
            if a.failed() {
                tally.failed += 1;
            } else if *v == target {
                tally.on_target += 1;
            }
        }
        tally
    }

    /// Seconds from `from` to the simulated instant `to`, when both happened.
    fn secs_since(&self, from: Option<Timestamp>, to: Option<i64>) -> Option<i64> {
        Some(self.ts(to?).duration_since(from?).as_secs())
    }

    /// The summary of served group `i`, whose live agents run `hosts`.
    fn group_summary(&self, i: usize, name: &str, hosts: BTreeMap<String, u64>) -> GroupSummary {
        let st = &self.stats[i];
        let g = self.rollout.as_ref().and_then(|r| r.group(name));
        GroupSummary {
            name: name.to_string(),
            state: g.map_or("none", |g| g.state.as_str()).to_string(),
            reason: g.map(|g| g.last_update_reason.clone()).unwrap_or_default(),
            window_opened_at: st.window_opened_at,
            started_at: st.started_at.map(|t| self.ts(t)),
            active_at: st.active_at.map(|t| self.ts(t)),
            done_at: st.done_at.map(|t| self.ts(t)),
            all_updated_at: st.all_updated_at.map(|t| self.ts(t)),
            window_to_done_secs: self.secs_since(st.window_opened_at, st.done_at),
            window_to_all_updated_secs: self.secs_since(st.window_opened_at, st.all_updated_at),
            counts: g.map(|g| self.counts_of(g)).unwrap_or_default(),
            hosts,
            updates: st.updates,
            rollbacks: st.rollbacks,
            max_updating: st.max_updating,
            first_update_at: st.first_update_at.map(|t| self.ts(t)),
            last_update_at: st.last_update_at.map(|t| self.ts(t)),
            started_to_first_install_secs: st
                .started_at
                .zip(st.first_install_at)
                .map(|(s, i)| i - s),
            started_to_canaries_installing_secs: st
                .started_at
                .zip(st.last_canary_install_at)
                .map(|(s, i)| i - s),
        }
    }
}
