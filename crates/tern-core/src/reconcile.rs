//! One reconcile: from the config, the version, the current rollout, the replicas'
//! reports and the connected agents, at one instant, compute the next rollout.
//! Sans-IO: the caller reads the store, passes the clock and the RNG, writes back.
//!
//! Reconciling twice at the same instant with the same inputs gives the same rollout:
//! each group is driven to a fixed point in one call, and a group cannot become done
//! at the instant it started.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use rand_core::RngCore;

use crate::domain::aggregate::{self, Aggregate, GroupCounts};
use crate::domain::alert;
use crate::domain::analysis;
use crate::domain::backpressure::{self, ProgressInput};
use crate::domain::canary;
use crate::domain::reason;
use crate::domain::resource::*;
use crate::domain::rollout::{
    self, DEFAULT_MAX_IN_FLIGHT, Event, Groups, desired_spec, group_window, rollout_state,
};

/// A started group that live reports say has no host at all (and had none when it
/// started) is taken as done after this long (seed 002's "no data" rule, applied only
/// to evidence of an empty group, never to missing reports).
pub(crate) const DONE_WITHOUT_REPORTS_AFTER: SignedDuration = SignedDuration::from_hours(1);

/// Everything one reconcile reads.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileInput<'a> {
    /// `None`: no config resource exists (counts as mode enabled, halt-on-error, one
    /// `default` group).
    pub config: Option<&'a AutoUpdateConfig>,
    pub version: Option<&'a AutoUpdateVersion>,
    pub rollout: Option<&'a AutoUpdateAgentRollout>,
    pub reports: &'a [AutoUpdateAgentReport],
    /// Connected agents, to pick canaries from and to check them.
    pub agents: &'a [ConnectedAgent],
    pub report_period: SignedDuration,
    /// A global freeze holds (`api::Freeze`): the rollout is held as if suspended.
    pub frozen: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// No rollout should exist (delete any that does), and why.
    NoRollout { why: String },
    Rollout {
        rollout: Box<AutoUpdateAgentRollout>,
        events: Vec<Event>,
    },
}

/// Why `desired` needs a new rollout rather than an update of `current`, if it does.
fn reset_reason(current: &RolloutSpec, desired: &RolloutSpec) -> Option<String> {
    let mut changed = Vec::new();
    if current.start_version != desired.start_version {
        changed.push("start_version");
    }
    if current.target_version != desired.target_version {
        changed.push("target_version");
    }
    if current.schedule != desired.schedule {
        changed.push("schedule");
    }
    if current.strategy != desired.strategy {
        changed.push("strategy");
    }
    (!changed.is_empty()).then(|| format!("{} changed", changed.join(", ")))
}

/// What the resources ask of the rollout before any group moves: the spec they want,
/// and why the rollout there is must give way to a new one (`None`: it stays, a
/// reconcile updates its mode). `config_too`: a rollout running an older copy of the
/// config's groups gives way as well ([`config_changes`]). `Err`: no rollout should
/// exist, and why.
fn wanted(
    resources: Resources<'_>,
    config_too: bool,
) -> Result<(RolloutSpec, Option<String>), String> {
    let Some(version) = resources.version else {
        return Err(
            "no autoupdate_version resource exists: there is nothing to roll out".to_string(),
        );
    };
    let mut desired = desired_spec(resources.config, version)?;
    desired.autoupdate_mode = rollout::frozen_mode(desired.autoupdate_mode, resources.frozen);
    let reset = match resources.rollout {
        None => Some("no rollout existed".to_string()),
        Some(current) => reset_reason(&current.spec, &desired).or_else(|| {
            let changes = config_changes(resources.config, current);
            (config_too && !changes.is_empty()).then(|| {
                format!(
                    "the config changed since the rollout began ({})",
                    changes.join("; ")
                )
            })
        }),
    };
    Ok((desired, reset))
}

/// The version's `spec.agents.follow_in_window`.
fn follows_in_window(version: Option<&AutoUpdateVersion>) -> bool {
    version
        .and_then(|v| v.spec.agents.as_ref())
        .is_some_and(|a| a.follow_in_window)
}

/// What [`renew`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Renewal {
    /// No rollout should exist, and why (the reconcile deletes any that does).
    NoRollout { why: String },
    /// The rollout there is stays: the resources ask for no new one.
    Current,
    /// A new rollout, every group unstarted, and the event that says why.
    Fresh {
        rollout: Box<AutoUpdateAgentRollout>,
        events: Vec<Event>,
    },
}

/// The new rollout the resources ask for, if they ask for one, without moving any
/// group: what a reconcile starts from when the versions, the schedule or the strategy
/// changed. `new-rollout` writes it at once (so that the rollout exists when it
/// answers, and a start-update right after applies to it), and so do the manual
/// transitions when a reconcile has not yet (so that none lands on a rollout about to
/// be replaced). `config_too`: a rollout running an older copy of the config's groups
/// is renewed as well (`new-rollout` of the current target applies the current config).
pub fn renew(now: Timestamp, resources: Resources<'_>, config_too: bool) -> Renewal {
    let (desired, reset) = match wanted(resources, config_too) {
        Ok(w) => w,
        Err(why) => return Renewal::NoRollout { why },
    };
    let Some(why) = reset else {
        return Renewal::Current;
    };
    let mut events = Vec::new();
    let mut next = fresh(resources.config, desired, now, why, &mut events);
    if let Some(current) = resources.rollout {
        inherit_peaks(&mut next, current);
    }
    next.status.follow_in_window = follows_in_window(resources.version);
    Renewal::Fresh {
        rollout: Box::new(next),
        events,
    }
}

/// What of the config's groups `rollout` runs an older copy of: groups added,
/// removed or moved, and per group the settings a rollout copies when it is created
/// (its window, canaries, limits, analysis…), in words (`dev: analysis`). Empty when
/// the rollout runs the current config. A config change reaches a rollout only
/// through a new one (`new-rollout`), so that a rollout never changes its rules
/// halfway; this says when that is the case.
pub fn config_changes(
    config: Option<&AutoUpdateConfig>,
    rollout: &AutoUpdateAgentRollout,
) -> Vec<String> {
    if rollout.spec.schedule == Schedule::Immediate {
        return Vec::new();
    }
    let current = new_groups(config, rollout.spec.schedule, Timestamp::UNIX_EPOCH);
    let running = &rollout.status.groups;
    let mut changes = Vec::new();
    for g in &current {
        if !running.iter().any(|r| r.name == g.name) {
            changes.push(format!("{} added", g.name));
        }
    }
    for r in running {
        let Some(g) = current.iter().find(|g| g.name == r.name) else {
            changes.push(format!("{} removed", r.name));
            continue;
        };
        let fields = g.config.differing_fields(&r.config);
        if !fields.is_empty() {
            changes.push(format!("{}: {}", r.name, fields.join(", ")));
        }
    }
    let order = |gs: &[RolloutGroup]| -> Vec<String> {
        gs.iter()
            .filter(|g| {
                current.iter().any(|c| c.name == g.name) && running.iter().any(|r| r.name == g.name)
            })
            .map(|g| g.name.clone())
            .collect()
    };
    if order(&current) != order(running) {
        changes.push("the groups' order".to_string());
    }
    changes
}

fn new_groups(
    config: Option<&AutoUpdateConfig>,
    schedule: Schedule,
    now: Timestamp,
) -> Vec<RolloutGroup> {
    if schedule == Schedule::Immediate {
        return Vec::new();
    }
    let default_config = AutoUpdateConfig::default();
    config
        .unwrap_or(&default_config)
        .groups()
        .into_iter()
        .map(|g| RolloutGroup {
            config: g.rollout_copy(),
            name: g.name,
            state: GroupState::Unstarted,
            start_time: None,
            last_update_time: Some(now),
            last_update_reason: reason::CREATED.to_string(),
            ..RolloutGroup::default()
        })
        .collect()
}

/// The maintenance schedule exported to a host presenting `group` (seed 001: the
/// cluster's window, whether or not a rollout exists): from the rollout's groups when
/// a rollout with groups exists (what find follows), else from the config's groups as
/// a new rollout would take them (a missing config is one `default` group).
pub fn maintenance_schedule(
    config: Option<&AutoUpdateConfig>,
    rollout: Option<&AutoUpdateAgentRollout>,
    group: &str,
    now: Timestamp,
    count: usize,
) -> Option<crate::domain::wire::AgentSchedule> {
    if let Some(r) = rollout.filter(|r| !r.status.groups.is_empty()) {
        return rollout::group_schedule(r, group, now, count);
    }
    let default_config = AutoUpdateConfig::default();
    let config = config.unwrap_or(&default_config);
    // The versions and mode play no part in a schedule.
    let spec = RolloutSpec {
        start_version: crate::domain::version::Version(semver::Version::new(0, 0, 0)),
        target_version: crate::domain::version::Version(semver::Version::new(0, 0, 0)),
        schedule: Schedule::Regular,
        autoupdate_mode: Mode::Disabled,
        strategy: config.strategy(),
        maintenance_window_duration: config.maintenance_window_duration(),
        host_group: config.host_group(),
    };
    let groups = new_groups(Some(config), Schedule::Regular, now);
    let skeleton = AutoUpdateAgentRollout::new(
        spec,
        RolloutStatus {
            groups,
            ..RolloutStatus::default()
        },
    );
    rollout::group_schedule(&skeleton, group, now, count)
}

pub fn reconcile<R: RngCore + ?Sized>(
    now: Timestamp,
    input: &ReconcileInput<'_>,
    rng: &mut R,
) -> Outcome {
    reconcile_measured(now, input, &[], rng)
}

/// [`reconcile`] with the canary analyses the caller measured at `now` for the
/// rollout's [`analysis::requests`]. A group being analysed moves on only on what
/// `measured` holds for it; with nothing for it, it waits.
pub fn reconcile_measured<R: RngCore + ?Sized>(
    now: Timestamp,
    input: &ReconcileInput<'_>,
    measured: &[analysis::Measured],
    rng: &mut R,
) -> Outcome {
    let resources = Resources {
        config: input.config,
        version: input.version,
        rollout: input.rollout,
        frozen: input.frozen,
    };
    let (desired, reset) = match wanted(resources, false) {
        Ok(w) => w,
        Err(why) => return Outcome::NoRollout { why },
    };
    let follow_in_window = follows_in_window(input.version);
    let mut events = Vec::new();
    let mut rollout = match (input.rollout, reset) {
        (Some(current), None) => {
            let mut r = current.clone();
            if r.spec.autoupdate_mode != desired.autoupdate_mode {
                events.push(Event::ModeChanged {
                    from: r.spec.autoupdate_mode,
                    to: desired.autoupdate_mode,
                });
            }
            r.spec = desired;
            r
        }
        (current, why) => {
            let why = why.unwrap_or_else(|| "no rollout existed".to_string());
            let mut next = fresh(input.config, desired, now, why, &mut events);
            if let Some(current) = current {
                inherit_peaks(&mut next, current);
            }
            next
        }
    };
    rollout.status.follow_in_window = follow_in_window;

    let eval_now = rollout.status.time_override.unwrap_or(now);
    let groups = Groups::of(&rollout);
    let target = rollout.spec.target_version.to_string();
    let agg = Aggregate::from_reports(input.reports, now, input.report_period, &groups, &target);

    let mut ctx = Ctx {
        now,
        eval_now,
        spec: &rollout.spec,
        rollout_start: rollout.status.start_time.unwrap_or(now),
        agg: &agg,
        agents: input.agents,
        groups: &groups,
        target: &target,
        started_one: false,
        events: &mut events,
        analysis_input: measured,
        follow_in_window,
    };
    let groups = &mut rollout.status.groups;
    for i in 0..groups.len() {
        let (before, rest) = groups.split_at_mut(i);
        let group = &mut rest[0];
        ctx.observe(group);
        if ctx.spec.autoupdate_mode == Mode::Enabled {
            match ctx.spec.strategy {
                Strategy::HaltOnError => ctx.halt_on_error(before, group, rng),
                Strategy::TimeBased => ctx.time_based(group),
            }
        }
    }
    let alerts = alert::evaluate(
        &rollout.status.groups,
        &rollout.status.alerts,
        now,
        agg.warming_up > 0,
    );
    for a in alert::newly_raised(&rollout.status.alerts, &alerts) {
        if a.kind == alert::kind::GROUP_OVERDUE
            && let Some(g) = a.group.as_deref().and_then(|n| rollout.group(n))
        {
            events.push(Event::GroupOverdue {
                group: g.name.clone(),
                state: g.state,
                since: g.start_time.unwrap_or(now),
            });
        }
    }
    rollout.status.alerts = alerts;
    rollout.status.state = rollout_state(&rollout.status.groups);
    Outcome::Rollout {
        rollout: Box::new(rollout),
        events,
    }
}

/// The reconcile a leader runs: its agents are those the live reports offer (canary
/// candidates and canaries seen, [`aggregate::connected_agents`]), never the leader's
/// own connections alone. ternd and the simulator both call this.
pub fn reconcile_reports<R: RngCore + ?Sized>(
    now: Timestamp,
    resources: Resources<'_>,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
    rng: &mut R,
) -> Outcome {
    reconcile_reports_measured(now, resources, reports, report_period, &[], rng)
}

/// [`reconcile_reports`] with the canary analyses measured at `now`
/// ([`reconcile_measured`]).
pub fn reconcile_reports_measured<R: RngCore + ?Sized>(
    now: Timestamp,
    resources: Resources<'_>,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
    measured: &[analysis::Measured],
    rng: &mut R,
) -> Outcome {
    let agents = aggregate::connected_agents(reports, now, report_period);
    let input = ReconcileInput {
        config: resources.config,
        version: resources.version,
        rollout: resources.rollout,
        reports,
        agents: &agents,
        report_period,
        frozen: resources.frozen,
    };
    let mut outcome = reconcile_measured(now, &input, measured, rng);
    if let Outcome::Rollout { rollout, .. } = &mut outcome {
        let reasons = aggregate::canary_failures(reports, now, report_period);
        for g in &mut rollout.status.groups {
            canary::attach_reasons(&mut g.canaries, &reasons);
        }
    }
    outcome
}

/// The stored resources a reconcile reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resources<'a> {
    pub config: Option<&'a AutoUpdateConfig>,
    pub version: Option<&'a AutoUpdateVersion>,
    pub rollout: Option<&'a AutoUpdateAgentRollout>,
    /// A global freeze holds ([`ReconcileInput::frozen`]).
    pub frozen: bool,
}

/// What the coming reconciles of `rollout` need to find in the replicas' reports
/// besides the counts: agents to pick canaries from, and the canaries to check. A
/// replica answers it in its report ([`crate::domain::inventory::replica_report`]); the leader
/// then reconciles from the reports ([`reconcile_reports`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The rollout's groups (an agent is offered for the group that serves it).
    pub groups: Groups,
    /// Groups that pick canaries at their next reconcile or when they start: a group
    /// in `canary` without canaries yet (after a manual start-update, or when no
    /// candidate was known when it started), and the next halt-on-error group to
    /// start if it starts with canaries. Reports are written every period and live
    /// two, so candidates are ready before its window opens.
    pub canary_candidates: Vec<String>,
    /// Updater ids of the canaries not yet seen on the target, sorted, no repeats.
    pub canaries: Vec<String>,
    /// The target version (candidates not yet on it are offered first).
    pub target: String,
    /// Groups with topology limits (not rolled back), with their limits: replicas
    /// report their hosts behind per label value so the leader can work out who the
    /// limits admit ([`crate::domain::inventory::topology_report`]).
    pub topology: Vec<(String, Vec<TopologyLimit>)>,
    /// For groups of `canary_candidates` with a `canary_cover`: its attributes, which
    /// replicas fill in on the candidates they offer, and offer hosts to cover.
    pub canary_cover: BTreeMap<String, Vec<String>>,
}

/// What the coming reconciles of `rollout` need from the reports (see [`Needs`]).
pub fn needs(rollout: &AutoUpdateAgentRollout) -> Needs {
    let groups = &rollout.status.groups;
    let picks_from_reports = rollout.spec.strategy == Strategy::HaltOnError
        && rollout.spec.schedule != Schedule::Immediate;
    let canary_candidates = if picks_from_reports {
        groups
            .iter()
            .enumerate()
            .filter(|(i, g)| {
                picks_canaries(g)
                    || (g.state == GroupState::Unstarted
                        && earlier_groups_done(&groups[..*i])
                        && halt_start_state(g) == GroupState::Canary)
            })
            .map(|(_, g)| g.name.clone())
            .collect()
    } else {
        Vec::new()
    };
    let mut canaries: Vec<String> = groups
        .iter()
        .flat_map(|g| g.canaries.iter())
        .filter(|c| !c.success && !c.updater_id.is_empty())
        .map(|c| c.updater_id.clone())
        .collect();
    canaries.sort();
    canaries.dedup();
    let topology = groups
        .iter()
        .filter(|g| limits_topology(g))
        .map(|g| (g.name.clone(), g.config.topology.clone()))
        .collect();
    let canary_cover = groups
        .iter()
        .filter(|g| !g.config.canary_cover.is_empty() && canary_candidates.contains(&g.name))
        .map(|g| (g.name.clone(), g.config.canary_cover.clone()))
        .collect();
    Needs {
        groups: Groups::of(rollout),
        canary_candidates,
        canaries,
        target: rollout.spec.target_version.to_string(),
        topology,
        canary_cover,
    }
}

/// What the placeholders of `group`'s analysis queries are filled with.
pub fn analysis_vars(rollout: &AutoUpdateAgentRollout, group: &RolloutGroup) -> analysis::Vars {
    let pick = |f: fn(&Canary) -> &String| -> Vec<String> {
        group.canaries.iter().map(|c| f(c).clone()).collect()
    };
    analysis::Vars {
        group: group.name.clone(),
        version: rollout.spec.target_version.to_string(),
        start_version: rollout.spec.start_version.to_string(),
        canary_hosts: pick(|c| &c.hostname),
        canary_host_ids: pick(|c| &c.host_id),
        canary_updater_ids: pick(|c| &c.updater_id),
    }
}

/// Whether `group` is being analysed: in canary, every canary on the target healthy,
/// analysis declared and not failed.
fn analysing(group: &RolloutGroup) -> Option<&AnalysisSpec> {
    let spec = group.config.analysis.as_ref()?;
    let ready = group.state == GroupState::Canary
        && !group.canaries.is_empty()
        && group.canaries.iter().all(|c| c.success)
        && !group.analysis.as_ref().is_some_and(|a| a.failed);
    ready.then_some(spec)
}

/// The analyses due at `now`: for each group being analysed whose last evaluation is
/// at least its interval old, its queries rendered. The leader runs them and feeds
/// the values to the reconcile at the same instant ([`analysis::Measured`],
/// [`reconcile_measured`]).
pub fn analysis_requests(
    rollout: &AutoUpdateAgentRollout,
    now: Timestamp,
) -> Vec<analysis::Request> {
    if rollout.spec.autoupdate_mode != Mode::Enabled
        || rollout.spec.strategy != Strategy::HaltOnError
    {
        return Vec::new();
    }
    rollout
        .status
        .groups
        .iter()
        .filter_map(|g| {
            let spec = analysing(g)?;
            let last = g.analysis.as_ref().and_then(|a| a.evaluated_at);
            let due =
                last.is_none_or(|t| now >= t.saturating_add(analysis::interval(spec)).unwrap_or(t));
            if !due {
                return None;
            }
            let vars = analysis_vars(rollout, g);
            let queries = spec
                .queries
                .iter()
                .map(|q| analysis::RenderedQuery {
                    name: q.name.clone(),
                    query: analysis::render(&q.query, &vars),
                    baseline: q.baseline.as_deref().map(|b| analysis::render(b, &vars)),
                })
                .collect();
            Some(analysis::Request {
                group: g.name.clone(),
                queries,
            })
        })
        .collect()
}

/// halt-on-error order: a group starts only once every group before it is done.
fn earlier_groups_done(before: &[RolloutGroup]) -> bool {
    before.iter().all(|g| g.state == GroupState::Done) || crate::planted!(GroupOrder)
}

/// Whether a halt-on-error group may start in a window that opened at `opened`, in a
/// rollout that began at `rollout_start`. A window that opened before the rollout
/// began is not the group's (a change never lands in the middle of one), unless the
/// rollout follows within the window (`follow_in_window`) and the group is not the
/// first: then it starts as soon as the groups before it are done, inside the window
/// open now. The first group waits for its next window, or an operator's start-update.
/// The one rule: the reconcile, the forecast and the status all ask it.
fn window_admits(
    follow_in_window: bool,
    first: bool,
    opened: Timestamp,
    rollout_start: Timestamp,
) -> bool {
    opened >= rollout_start || (follow_in_window && !first)
}

/// The first instant at or after `now` the unstarted group at `index` may start, by
/// the rule of [`reconcile`] for a group whose earlier groups are done (halt-on-error)
/// or for a time-based group: inside its window, a window the rollout may use
/// ([`window_admits`]), and for halt-on-error `wait_hours` after the previous group
/// started. `None` with no such window ahead. The reports (hosts missing, a replica
/// warming up) may hold it longer.
pub(crate) fn earliest_start(
    rollout: &AutoUpdateAgentRollout,
    index: usize,
    now: Timestamp,
) -> Option<Timestamp> {
    const WINDOWS_AHEAD: usize = 16;
    let groups = &rollout.status.groups;
    let g = groups.get(index)?;
    let before = &groups[..index];
    let w = group_window(&rollout.spec, g);
    let rollout_start = rollout.status.start_time.unwrap_or(Timestamp::MIN);
    let halt = rollout.spec.strategy == Strategy::HaltOnError;
    let follow = halt && rollout.status.follow_in_window;
    let not_before = match (halt, before.last().and_then(|p| p.start_time)) {
        (true, Some(prev)) => {
            let wait = SignedDuration::from_hours(g.config.wait_hours);
            prev.saturating_add(wait).unwrap_or(prev).max(now)
        }
        _ => now,
    };
    w.upcoming(now, WINDOWS_AHEAD)
        .into_iter()
        .filter(|&(open, _)| window_admits(follow, before.is_empty(), open, rollout_start))
        .find_map(|(open, close)| {
            let at = open.max(not_before);
            (at < close).then_some(at)
        })
}

/// The state a halt-on-error group starts in: canary when it has canaries to pick.
fn halt_start_state(group: &RolloutGroup) -> GroupState {
    if group.config.canary_count > 0 {
        GroupState::Canary
    } else {
        GroupState::Active
    }
}

/// A group whose topology limits are tracked: it has some and is not rolled back. An
/// unstarted group's admissions are ready when it goes active; a done group still
/// limits the hosts it tells to update (those past its completion threshold, and
/// late joiners).
fn limits_topology(group: &RolloutGroup) -> bool {
    !group.config.topology.is_empty() && group.state != GroupState::Rolledback
}

/// A group in canary picks its canaries while it has none.
fn picks_canaries(group: &RolloutGroup) -> bool {
    group.state == GroupState::Canary && group.canaries.is_empty()
}

/// A new rollout's groups start from the hosts the previous rollout's groups of the
/// same name were seen with: a rollout created while hosts are silent (a partition, an
/// expired token) then knows they are missing, and neither skips its canaries nor
/// completes for want of them.
fn inherit_peaks(next: &mut AutoUpdateAgentRollout, previous: &AutoUpdateAgentRollout) {
    for g in &mut next.status.groups {
        if let Some(p) = previous.group(&g.name) {
            g.peak_count = g.peak_count.max(p.peak_count);
        }
    }
}

fn fresh(
    config: Option<&AutoUpdateConfig>,
    spec: RolloutSpec,
    now: Timestamp,
    why: String,
    events: &mut Vec<Event>,
) -> AutoUpdateAgentRollout {
    events.push(Event::RolloutCreated {
        start_version: spec.start_version.to_string(),
        target_version: spec.target_version.to_string(),
        why,
    });
    let groups = new_groups(config, spec.schedule, now);
    AutoUpdateAgentRollout::new(
        spec,
        RolloutStatus {
            state: rollout_state(&groups),
            start_time: Some(now),
            time_override: None,
            groups,
            alerts: Vec::new(),
            follow_in_window: false,
        },
    )
}

struct Ctx<'a> {
    now: Timestamp,
    /// The instant windows are evaluated at (`time_override` or now).
    eval_now: Timestamp,
    spec: &'a RolloutSpec,
    rollout_start: Timestamp,
    agg: &'a Aggregate,
    agents: &'a [ConnectedAgent],
    groups: &'a Groups,
    target: &'a str,
    started_one: bool,
    events: &'a mut Vec<Event>,
    /// The canary analyses measured for this reconcile ([`analysis::requests`]).
    analysis_input: &'a [analysis::Measured],
    /// Later halt-on-error groups may start in a window that opened before the
    /// rollout began ([`window_admits`]).
    follow_in_window: bool,
}

impl Ctx<'_> {
    fn counts(&self, group: &RolloutGroup) -> GroupCounts {
        self.agg.group(&group.name)
    }

    fn observe(&self, group: &mut RolloutGroup) {
        let c = self.counts(group);
        group.present_count = c.present;
        // Without any report the counts are unknown, not zero.
        if self.agg.live_reports > 0 {
            group.connected_count = c.connected();
            group.peak_count = group.peak_count.max(c.connected());
        }
        group.up_to_date_count = c.up_to_date;
        group.failed_count = c.failed;
        group.refused_count = c.refused_total();
        group.refused_kinds = c.refused;
        canary::refresh(&mut group.canaries, self.agents, self.target);
        if group.initial_count_pending && self.counts_tell(group) {
            // Started or reset by hand on the counts of the last reconcile (none at all
            // on a rollout new-rollout just wrote, or those of a replica warming up):
            // the group is measured against the hosts present now.
            group.initial_count = self.initial_count(group);
            group.initial_count_pending = false;
        }
        if !limits_topology(group) {
            group.topology.clear();
        } else if self.agg.live_reports > 0 {
            // Without any live report who is behind is unknown: what was admitted stays.
            group.topology =
                aggregate::topology_admissions(self.agg, &group.name, &group.config.topology);
        }
    }

    /// Hosts vanished past the group's budget, as far as live reports can tell. A
    /// replica warming up has not seen its hosts yet: not seen is not vanished.
    fn vanished(&self, group: &RolloutGroup) -> bool {
        !crate::planted!(NoEvidenceIsZeroHosts)
            && self.agg.live_reports > 0
            && self.agg.warming_up == 0
            && rollout::agents_vanished(group)
    }

    /// The live reports cannot be taken as all of `group`: none is live, or a replica
    /// that counted its hosts stopped reporting and they are not seen elsewhere (fewer
    /// present than it or the group's peak said). Then nothing may move on the
    /// group's counts ([`reason::REPORTS_MISSING`]).
    fn evidence_missing(&self, group: &RolloutGroup) -> bool {
        if crate::planted!(NoEvidenceIsZeroHosts) {
            return false;
        }
        if self.agg.live_reports == 0 {
            return true;
        }
        let stale = self.agg.stale.get(&group.name).copied().unwrap_or(0);
        stale > 0 && self.counts(group).connected() < group.peak_count.max(stale)
    }

    fn set(&mut self, group: &mut RolloutGroup, state: GroupState, reason: &'static str) {
        if group.state == state && group.last_update_reason == reason {
            return;
        }
        if group.state != state {
            self.events.push(Event::GroupChanged {
                group: group.name.clone(),
                from: group.state,
                to: state,
                reason,
            });
        }
        group.state = state;
        group.last_update_reason = reason.to_string();
        group.last_update_time = Some(self.now);
    }

    /// Whether the live reports can be taken as the whole of `group` now: some are
    /// live, none from a replica warming up, none missing.
    fn counts_tell(&self, group: &RolloutGroup) -> bool {
        self.agg.live_reports > 0 && self.agg.warming_up == 0 && !self.evidence_missing(group)
    }

    /// The hosts a group starting now is measured against.
    fn initial_count(&self, group: &RolloutGroup) -> u64 {
        let present = self.counts(group).present;
        if self.vanished(group) {
            // Hosts are missing: the group is measured against what it was, so that
            // backpressure and completion count them when they return.
            present.max(group.peak_count)
        } else {
            present
        }
    }

    fn start(&mut self, group: &mut RolloutGroup, state: GroupState, reason: &'static str) {
        group.start_time = Some(self.now);
        group.initial_count = self.initial_count(group);
        group.initial_count_pending = false;
        group.canaries.clear();
        group.canary_coverage.clear();
        group.analysis = None;
        group.progress = 0.0;
        self.set(group, state, reason);
    }

    fn halt_on_error<R: RngCore + ?Sized>(
        &mut self,
        before: &[RolloutGroup],
        group: &mut RolloutGroup,
        rng: &mut R,
    ) {
        // Each arm either settles the group or moves it to a state evaluated next.
        loop {
            match group.state {
                GroupState::Unstarted => {
                    let Some(reason) = self.halt_start_blocker(before, group) else {
                        if self.started_one {
                            self.set(group, GroupState::Unstarted, reason::CAN_START);
                            return;
                        }
                        self.started_one = true;
                        self.start(group, halt_start_state(group), reason::CAN_START);
                        continue;
                    };
                    self.set(group, GroupState::Unstarted, reason);
                    return;
                }
                GroupState::Canary => {
                    if !self.canaries(group, rng) {
                        return;
                    }
                }
                GroupState::Active => {
                    self.active(group);
                    return;
                }
                GroupState::Done | GroupState::Rolledback => return,
            }
        }
    }

    /// Why an unstarted halt-on-error group cannot start now, or `None` if it can.
    fn halt_start_blocker(
        &self,
        before: &[RolloutGroup],
        group: &RolloutGroup,
    ) -> Option<&'static str> {
        if !earlier_groups_done(before) {
            return Some(reason::PREVIOUS_GROUPS_NOT_DONE);
        }
        let Some(opened) = group_window(self.spec, group).open_since(self.eval_now) else {
            return Some(reason::CANNOT_START);
        };
        if !window_admits(
            self.follow_in_window,
            before.is_empty(),
            opened,
            self.rollout_start,
        ) {
            return Some(reason::ROLLOUT_CHANGED_DURING_WINDOW);
        }
        if let Some(prev_start) = before.last().and_then(|p| p.start_time) {
            let wait = SignedDuration::from_hours(group.config.wait_hours);
            if self.eval_now < prev_start.saturating_add(wait).unwrap_or(prev_start) {
                return Some(reason::WAIT_HOURS_NOT_ELAPSED);
            }
        }
        if self.agg.warming_up > 0 {
            return Some(reason::WAITING_FOR_REPORTS);
        }
        if self.evidence_missing(group) {
            return Some(reason::REPORTS_MISSING);
        }
        if group.peak_count > 0
            && self.counts(group).connected() == 0
            && !crate::planted!(NoEvidenceIsZeroHosts)
        {
            // Every host it was seen with is gone: nothing to start from.
            return Some(reason::AGENTS_VANISHED);
        }
        None
    }

    /// Picks canaries if there are none yet and checks them; true when the group
    /// moved on to active.
    fn canaries<R: RngCore + ?Sized>(&mut self, group: &mut RolloutGroup, rng: &mut R) -> bool {
        if picks_canaries(group) {
            let candidates = canary::candidates(self.agents, &group.name, self.groups, self.target);
            let want = usize::try_from(group.config.canary_count).unwrap_or(0);
            let cover = &group.config.canary_cover;
            group.canaries = canary::pick_covering(&candidates, want, cover, rng);
            group.canary_coverage = canary::coverage(&group.canaries, &candidates, cover);
            canary::refresh(&mut group.canaries, self.agents, self.target);
            if group.canaries.is_empty() {
                if self.vanished(group) {
                    self.set(group, GroupState::Canary, reason::AGENTS_VANISHED);
                    return false;
                }
                if self.evidence_missing(group) {
                    self.set(group, GroupState::Canary, reason::REPORTS_MISSING);
                    return false;
                }
                // Only a group with no host connected at all, counted or not, has
                // nothing to test: hosts that are back but not settled yet are hosts.
                if self.counts(group).connected() == 0 && self.agg.warming_up == 0 {
                    self.set(group, GroupState::Active, reason::NO_CANARY_CANDIDATES);
                    return true;
                }
                self.set(group, GroupState::Canary, reason::WAITING_FOR_CANARIES);
                return false;
            }
            self.events.push(Event::CanariesPicked {
                group: group.name.clone(),
                updater_ids: group
                    .canaries
                    .iter()
                    .map(|c| c.updater_id.clone())
                    .collect(),
            });
        }
        if group.canaries.iter().all(|c| c.success) {
            if group.config.analysis.is_some() {
                return self.analysis(group);
            }
            self.set(group, GroupState::Active, reason::CANARIES_ARE_ALIVE);
            true
        } else if group.canaries.iter().any(|c| c.failed) {
            if group.last_update_reason != reason::CANARY_FAILED {
                self.events.push(Event::CanariesFailed {
                    group: group.name.clone(),
                    updater_ids: group
                        .canaries
                        .iter()
                        .filter(|c| c.failed)
                        .map(|c| c.updater_id.clone())
                        .collect(),
                });
            }
            self.set(group, GroupState::Canary, reason::CANARY_FAILED);
            false
        } else {
            self.set(group, GroupState::Canary, reason::WAITING_FOR_CANARIES);
            false
        }
    }

    /// A canary group whose canaries all run the target healthy, with an analysis:
    /// records what was measured for it at this instant, if anything, and moves it to
    /// active once the analysis passed as many times in a row as it needs. True when
    /// it moved.
    fn analysis(&mut self, group: &mut RolloutGroup) -> bool {
        let Some(spec) = group.config.analysis.as_ref() else {
            return true;
        };
        let status = group.analysis.get_or_insert_with(Default::default);
        if !status.failed
            && let Some(m) = self.analysis_input.iter().find(|m| m.group == group.name)
        {
            let verdict = analysis::judge(spec, &m.values);
            if let analysis::Verdict::Fail { message, .. } = &verdict {
                self.events.push(Event::AnalysisFailed {
                    group: group.name.clone(),
                    message: message.clone(),
                });
            }
            analysis::record(status, verdict, self.now);
        }
        let (passes, needed) = (status.passes, analysis::passes_needed(spec));
        let reason = if status.failed {
            reason::ANALYSIS_FAILED
        } else if status.held {
            reason::ANALYSIS_HELD
        } else if passes >= needed {
            self.set(group, GroupState::Active, reason::ANALYSIS_PASSED);
            return true;
        } else {
            reason::ANALYSIS_PENDING
        };
        self.set(group, GroupState::Canary, reason);
        false
    }

    /// Evaluates an active group: progress, and whether it is done.
    fn active(&mut self, group: &mut RolloutGroup) {
        if self.agg.warming_up > 0 {
            // Counts of a replica that has not seen all its hosts: neither progress,
            // completion nor a halt can be read from them; the group waits.
            if self.spec.strategy == Strategy::HaltOnError {
                self.set(group, GroupState::Active, reason::WAITING_FOR_REPORTS);
            }
            return;
        }
        let c = self.counts(group);
        let mif = group
            .config
            .max_in_flight
            .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
            .fraction();
        let mut halted = false;
        group.progress = match group.config.max_in_flight {
            None => 1.0,
            Some(_) => {
                let (p, h) = backpressure::progress(ProgressInput {
                    max_in_flight: mif,
                    initial: group.initial_count,
                    present: c.present,
                    up_to_date: c.up_to_date,
                    lowest_not_updated: c.lowest_not_updated,
                    previous: group.progress,
                });
                halted = h;
                p
            }
        };
        if self.spec.strategy == Strategy::TimeBased {
            return;
        }
        let started = group.start_time.unwrap_or(self.now);
        let missing = self.evidence_missing(group);
        let done = started < self.now
            && !missing
            && if c.connected() == 0 && group.initial_count == 0 {
                // Live reports say the group is empty, and was when it started.
                self.now
                    >= started
                        .saturating_add(DONE_WITHOUT_REPORTS_AFTER)
                        .unwrap_or(started)
            } else {
                group_complete(group.initial_count, &c, mif)
            };
        let vanished = self.vanished(group);
        if done && !vanished {
            group.progress = 1.0;
            self.set(group, GroupState::Done, reason::UPDATE_COMPLETE);
        } else if halted {
            self.events.push(Event::ProgressHalted {
                group: group.name.clone(),
            });
            self.set(group, GroupState::Active, reason::TOO_MANY_AGENTS_MISSING);
        } else if vanished {
            self.set(group, GroupState::Active, reason::AGENTS_VANISHED);
        } else if missing {
            self.set(group, GroupState::Active, reason::REPORTS_MISSING);
        } else {
            self.set(group, GroupState::Active, reason::UPDATE_IN_PROGRESS);
        }
    }

    fn time_based(&mut self, group: &mut RolloutGroup) {
        let window = group_window(self.spec, group);
        let opened = window.open_since(self.eval_now);
        // An operator's start-update opens the group for one window length from then;
        // their mark-done holds it done until its next window opens.
        let manual_since = |why: &str| {
            (group.last_update_reason == why)
                .then_some(group.last_update_time)
                .flatten()
        };
        let length = rollout::group_window_length(self.spec, group);
        let started_by_hand = manual_since(reason::MANUAL_TRIGGER)
            .and_then(|t| t.checked_add(length).ok())
            .is_some_and(|until| self.eval_now < until);
        let done_by_hand_since = manual_since(reason::MANUAL_FORCED_DONE);
        match (group.state, opened) {
            (GroupState::Done, Some(open)) if done_by_hand_since.is_some_and(|t| t >= open) => {}
            (GroupState::Active, None) if started_by_hand => self.active(group),
            // Time-based groups follow their own windows: none follows another.
            (GroupState::Unstarted, Some(open))
                if !window_admits(false, true, open, self.rollout_start) =>
            {
                self.set(
                    group,
                    GroupState::Unstarted,
                    reason::ROLLOUT_CHANGED_DURING_WINDOW,
                );
            }
            (state @ (GroupState::Unstarted | GroupState::Done), Some(_))
                if self.agg.warming_up > 0 =>
            {
                self.set(group, state, reason::WAITING_FOR_REPORTS);
            }
            (state @ (GroupState::Unstarted | GroupState::Done), Some(_))
                if self.evidence_missing(group) =>
            {
                self.set(group, state, reason::REPORTS_MISSING);
            }

            (GroupState::Unstarted | GroupState::Done, Some(_)) => {
                self.start(group, GroupState::Active, reason::IN_WINDOW);
                self.active(group);
            }
            (GroupState::Unstarted, None) => {
                self.set(group, GroupState::Unstarted, reason::OUTSIDE_WINDOW);
            }
            (GroupState::Active, Some(_)) => {
                self.active(group);
                self.set(group, GroupState::Active, reason::IN_WINDOW);
            }
            (GroupState::Active, None) => {
                group.progress = 1.0;
                self.set(group, GroupState::Done, reason::OUTSIDE_WINDOW);
            }
            (GroupState::Done, None) => {
                self.set(group, GroupState::Done, reason::OUTSIDE_WINDOW);
            }
            // Canaries belong to halt-on-error; a rolled-back group waits for a human.
            (GroupState::Canary | GroupState::Rolledback, _) => {}
        }
    }
}

/// The success criteria of an active halt-on-error group (seed 002): at least `1 -
/// mif` of the agents it started with run the target version, healthy (90% with the
/// default `max_in_flight`), and so do at least `1 - mif` of those present now (a group
/// that grew is held to its new size). A large downscale during the update so never
/// completes by itself: the missing agents need an operator's `mark-done`.
pub(crate) fn group_complete(initial: u64, c: &GroupCounts, mif: f64) -> bool {
    let keep = 1.0 - mif;
    // Compare in integers scaled by 10_000 to avoid float edge cases at the threshold.
    let keep_bp = (keep * 10_000.0).round() as u128;
    let of_initial = u128::from(c.up_to_date) * 10_000 >= u128::from(initial) * keep_bp;
    let of_present = u128::from(c.up_to_date) * 10_000 >= u128::from(c.present) * keep_bp;
    of_initial && of_present
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::rollout::DEFAULT_REPORT_PERIOD;
    use crate::domain::wire::UpdaterStatus;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    use crate::fixtures::connected_agent as agent;

    /// A halt-on-error config of `(name, start_hour, canary_count)` groups, every day,
    /// and a version rolling v1.0.0 out to `target`.
    fn resources(
        groups: &[(&str, u32, u32)],
        mode: &str,
        target: &str,
    ) -> (AutoUpdateConfig, AutoUpdateVersion) {
        use crate::fixtures::{group, halt_on_error_config};
        let groups: Vec<_> = groups
            .iter()
            .map(|&(name, hour, canaries)| group(name, hour as u8).canaries(canaries as u8))
            .collect();
        let cfg = halt_on_error_config(mode, &groups);
        let ver = crate::fixtures::version("v1.0.0", target, "regular");
        (
            AutoUpdateConfig::from_text(&cfg).unwrap(),
            AutoUpdateVersion::from_text(&ver).unwrap(),
        )
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn fresh_rollout(
        config: &AutoUpdateConfig,
        version: &AutoUpdateVersion,
        now: Timestamp,
    ) -> AutoUpdateAgentRollout {
        let input = ReconcileInput {
            config: Some(config),
            version: Some(version),
            rollout: None,
            reports: &[],
            agents: &[],
            report_period: DEFAULT_REPORT_PERIOD,
            frozen: false,
        };
        match reconcile(now, &input, &mut ChaCha8Rng::seed_from_u64(0)) {
            Outcome::Rollout { rollout, .. } => *rollout,
            Outcome::NoRollout { why } => panic!("{why}"),
        }
    }

    /// Seed 002: done at 90% of the agents the group started with on the target.
    /// 90 of 100 still present with 81 updated used to pass (90% of 90% of them).
    #[test]
    fn a_group_completes_at_ninety_percent_of_its_initial_agents() {
        let c = |present, up_to_date| GroupCounts {
            present,
            up_to_date,
            ..GroupCounts::default()
        };
        assert!(!group_complete(100, &c(90, 81), 0.1));
        assert!(!group_complete(100, &c(90, 89), 0.1));
        assert!(group_complete(100, &c(90, 90), 0.1));
        assert!(group_complete(100, &c(100, 90), 0.1));
        // A group that grew is held to its new size too.
        assert!(!group_complete(100, &c(200, 100), 0.1));
        assert!(group_complete(100, &c(200, 180), 0.1));
        // An empty group is done; a group whose hosts all left is not.
        assert!(group_complete(0, &c(0, 0), 0.1));
        assert!(!group_complete(10, &c(0, 0), 0.1));
    }

    #[test]
    fn needs_names_the_groups_that_pick_canaries_next_and_the_canaries_to_check() {
        let (config, version) = resources(
            &[("dev", 12, 0), ("staging", 14, 2), ("prod", 16, 1)],
            "enabled",
            "v1.1.0",
        );
        let mut r = fresh_rollout(&config, &version, at("2026-11-23T11:00:00Z"));
        // dev starts next and has no canaries: nothing to offer.
        let n = needs(&r);
        assert!(
            n.canary_candidates.is_empty() && n.canaries.is_empty(),
            "{n:?}"
        );
        assert_eq!(n.groups.catch_all(), Some("prod"));
        // dev active: staging is not next until dev is done.
        r.status.groups[0].state = GroupState::Active;
        assert!(needs(&r).canary_candidates.is_empty());
        // dev done: staging starts next, with canaries, whatever its window says.
        r.status.groups[0].state = GroupState::Done;
        assert_eq!(needs(&r).canary_candidates, ["staging"]);
        // staging in canary with a canary picked: that canary is checked by id.
        r.status.groups[1].state = GroupState::Canary;
        r.status.groups[1].canaries = vec![Canary {
            updater_id: "c1".into(),
            ..Canary::default()
        }];
        let n = needs(&r);
        assert!(n.canary_candidates.is_empty());
        assert_eq!(n.canaries, ["c1"]);
        // A successful canary needs no more checking.
        r.status.groups[1].canaries[0].success = true;
        assert!(needs(&r).canaries.is_empty());
        // A canary group without canaries (manual start-update) picks, wherever it is.
        r.status.groups[2].state = GroupState::Canary;
        assert_eq!(needs(&r).canary_candidates, ["prod"]);
        // Time-based rollouts have no canaries.
        r.spec.strategy = Strategy::TimeBased;
        assert!(needs(&r).canary_candidates.is_empty());
    }

    /// A replica offers agents for the groups [`needs`] names and the canaries it lists.
    /// Over random fleets, configs, manual moves and instants, a reconcile over just
    /// those agents decides as one over every connected agent, except where a group
    /// starts in the same reconcile in which the group before it became done (its
    /// candidates arrive with the next reports: it waits in canary for one period).
    #[test]
    fn agents_offered_for_needs_reconcile_like_all_agents() {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let mut below = |n: u64| rng.next_u64() % n;
        let names = ["dev", "staging", "prod", "", "other"];
        let (mut compared, mut picked, mut skipped) = (0, 0, 0);
        for case in 0..300 {
            let n_groups = 1 + below(3) as usize;
            let groups: Vec<(&str, u32, u32)> = (0..n_groups)
                .map(|i| (names[i], below(24) as u32, below(3) as u32))
                .collect();
            let mode = if below(6) == 0 {
                "suspended"
            } else {
                "enabled"
            };
            let (config, version) = resources(&groups, mode, "v1.1.0");
            let agents: Vec<ConnectedAgent> = (0..below(40))
                .map(|i| {
                    // An updater id presents one group (a replica's inventory is keyed
                    // by updater id); the same id may appear twice, as after a restart.
                    let id = below(30);
                    let mut a = agent(
                        &format!("u{id:02}"),
                        names[(id % 5) as usize],
                        if below(2) == 0 { "1.0.0" } else { "v1.1.0" },
                    );
                    a.host_id = format!("h{i}");
                    if below(8) == 0 {
                        a.updater_status = UpdaterStatus::Pinned;
                    }
                    a
                })
                .collect();
            let mut now = at("2026-11-23T00:00:00Z")
                .saturating_add(SignedDuration::from_mins(below(24 * 60) as i64))
                .unwrap();
            let mut rollout = fresh_rollout(&config, &version, now);
            for step in 0..12 {
                // Manual moves the reconcile must cope with.
                let g = below(rollout.status.groups.len() as u64) as usize;
                let group = &mut rollout.status.groups[g];
                match below(8) {
                    0 => {
                        group.state = GroupState::Canary;
                        group.canaries.clear();
                    }
                    1 => group.state = GroupState::Done,
                    2 => group.state = GroupState::Unstarted,
                    _ => {}
                }
                let needs = needs(&rollout);
                let offered: Vec<ConnectedAgent> = agents
                    .iter()
                    .filter(|a| {
                        needs.canaries.contains(&a.updater_id)
                            || needs
                                .canary_candidates
                                .iter()
                                .any(|g| needs.groups.serves(g, &a.group))
                    })
                    .cloned()
                    .collect();
                let input = ReconcileInput {
                    config: Some(&config),
                    version: Some(&version),
                    rollout: Some(&rollout),
                    reports: &[],
                    agents: &agents,
                    report_period: DEFAULT_REPORT_PERIOD,
                    frozen: false,
                };
                let seed = case * 100 + step;
                let full = reconcile(now, &input, &mut ChaCha8Rng::seed_from_u64(seed));
                let from_offered = reconcile(
                    now,
                    &ReconcileInput {
                        agents: &offered,
                        ..input
                    },
                    &mut ChaCha8Rng::seed_from_u64(seed),
                );
                let Outcome::Rollout { rollout: r, events } = full else {
                    panic!("a version exists");
                };
                let became_done = events.iter().any(|e| {
                    matches!(e, Event::GroupChanged { to: GroupState::Done, from, .. } if *from != GroupState::Done)
                });
                if became_done {
                    skipped += 1;
                } else {
                    assert_eq!(
                        Outcome::Rollout {
                            rollout: r.clone(),
                            events: events.clone()
                        },
                        from_offered,
                        "case {case} step {step}: {needs:?}"
                    );
                    compared += 1;
                }
                picked += events
                    .iter()
                    .filter(|e| matches!(e, Event::CanariesPicked { .. }))
                    .count();
                rollout = *r;
                now = now
                    .saturating_add(SignedDuration::from_mins(below(240) as i64))
                    .unwrap();
            }
        }
        assert!(
            compared > 2500 && picked > 50,
            "{compared} compared ({skipped} skipped), {picked} picks"
        );
    }
}
