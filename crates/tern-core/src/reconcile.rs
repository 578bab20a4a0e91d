//! One reconcile: from the config, the version, the current rollout, the replicas'
//! reports and the connected agents, at one instant, compute the next rollout.
//! Sans-IO: the caller reads the store, passes the clock and the RNG, writes back.
//!
//! Reconciling twice at the same instant with the same inputs gives the same rollout:
//! each group is driven to a fixed point in one call, and a group cannot become done
//! at the instant it started.

use jiff::{SignedDuration, Timestamp};
use rand_core::RngCore;

use crate::aggregate::{Aggregate, GroupCounts};
use crate::backpressure::{self, ProgressInput};
use crate::canary;
use crate::duration::{GoDuration, Percent};
use crate::reason;
use crate::resource::*;
use crate::window::Window;

/// `max_in_flight` when a group does not set one: the 90% rule.
pub const DEFAULT_MAX_IN_FLIGHT: Percent = Percent::from_percent(10);
/// A group stuck in canary or active this long raises an alert event.
pub const DEFAULT_ALERT_AFTER: GoDuration = GoDuration::from_hours(4);
/// halt-on-error windows last one hour.
pub const HALT_ON_ERROR_WINDOW: SignedDuration = SignedDuration::from_hours(1);
/// With no report at all, a started group is taken as done after this long.
pub const DONE_WITHOUT_REPORTS_AFTER: SignedDuration = SignedDuration::from_hours(1);
/// How often each replica writes its report.
pub const DEFAULT_REPORT_PERIOD: SignedDuration = SignedDuration::from_secs(60);

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
}

/// What happened during a reconcile, for logs, metrics and alerts.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    RolloutCreated {
        start_version: String,
        target_version: String,
        why: String,
    },
    ModeChanged {
        from: Mode,
        to: Mode,
    },
    GroupChanged {
        group: String,
        from: GroupState,
        to: GroupState,
        reason: &'static str,
    },
    CanariesPicked {
        group: String,
        updater_ids: Vec<String>,
    },
    /// A group has been in canary or active longer than its `alert_after`.
    GroupOverdue {
        group: String,
        state: GroupState,
        since: Timestamp,
    },
    ProgressHalted {
        group: String,
    },
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

/// The rollout spec the config and version ask for.
pub fn desired_spec(
    config: Option<&AutoUpdateConfig>,
    version: &AutoUpdateVersion,
) -> Result<RolloutSpec, String> {
    let agents = version
        .spec
        .agents
        .as_ref()
        .ok_or("the autoupdate_version has no spec.agents: no agent rollout")?;
    let default_config = AutoUpdateConfig::default();
    let config = config.unwrap_or(&default_config);
    Ok(RolloutSpec {
        start_version: agents.start_version.clone(),
        target_version: agents.target_version.clone(),
        schedule: agents.schedule,
        autoupdate_mode: config.mode().combine(version.mode()),
        strategy: config.strategy(),
        maintenance_window_duration: config.maintenance_window_duration(),
    })
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
            name: g.name,
            state: GroupState::Unstarted,
            start_time: None,
            last_update_time: Some(now),
            last_update_reason: reason::CREATED.to_string(),
            config_days: g.days,
            config_start_hour: g.start_hour,
            config_wait_hours: g.wait_hours,
            canary_count: g.canary_count,
            config_max_in_flight: g.max_in_flight,
            config_alert_after: g.alert_after,
            ..RolloutGroup::default()
        })
        .collect()
}

/// Rollout state from its groups.
pub fn rollout_state(groups: &[RolloutGroup]) -> RolloutState {
    if groups.is_empty() {
        RolloutState::Unspecified
    } else if groups.iter().any(|g| g.state == GroupState::Rolledback) {
        RolloutState::Rolledback
    } else if groups.iter().all(|g| g.state == GroupState::Done) {
        RolloutState::Done
    } else if groups.iter().all(|g| g.state == GroupState::Unstarted) {
        RolloutState::Unstarted
    } else {
        RolloutState::Active
    }
}

/// The window of a group in a rollout.
pub fn group_window<'a>(spec: &RolloutSpec, group: &'a RolloutGroup) -> Window<'a> {
    let duration = match spec.strategy {
        Strategy::HaltOnError => HALT_ON_ERROR_WINDOW,
        Strategy::TimeBased => spec
            .maintenance_window_duration
            .map_or(HALT_ON_ERROR_WINDOW, GoDuration::as_signed),
    };
    Window {
        days: &group.config_days,
        start_hour: u8::try_from(group.config_start_hour).unwrap_or(u8::MAX),
        duration,
    }
}

pub fn reconcile<R: RngCore + ?Sized>(
    now: Timestamp,
    input: &ReconcileInput<'_>,
    rng: &mut R,
) -> Outcome {
    let Some(version) = input.version else {
        return Outcome::NoRollout {
            why: "no autoupdate_version resource exists: there is nothing to roll out".to_string(),
        };
    };
    let desired = match desired_spec(input.config, version) {
        Ok(spec) => spec,
        Err(why) => return Outcome::NoRollout { why },
    };
    let mut events = Vec::new();
    let mut rollout = match input.rollout {
        Some(current) => match reset_reason(&current.spec, &desired) {
            None => {
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
            Some(why) => fresh(input.config, desired, now, why, &mut events),
        },
        None => fresh(
            input.config,
            desired,
            now,
            "no rollout existed".to_string(),
            &mut events,
        ),
    };

    let eval_now = rollout.status.time_override.unwrap_or(now);
    let names: Vec<String> = rollout
        .status
        .groups
        .iter()
        .map(|g| g.name.clone())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let target = rollout.spec.target_version.to_string();
    let agg = Aggregate::from_reports(input.reports, now, input.report_period, &names, &target);

    let mut ctx = Ctx {
        now,
        eval_now,
        spec: &rollout.spec,
        rollout_start: rollout.status.start_time.unwrap_or(now),
        agg: &agg,
        agents: input.agents,
        names: &names,
        target: &target,
        started_one: false,
        events: &mut events,
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
        ctx.check_overdue(group);
    }
    rollout.status.state = rollout_state(&rollout.status.groups);
    Outcome::Rollout {
        rollout: Box::new(rollout),
        events,
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
    names: &'a [&'a str],
    target: &'a str,
    started_one: bool,
    events: &'a mut Vec<Event>,
}

impl Ctx<'_> {
    fn counts(&self, group: &RolloutGroup) -> GroupCounts {
        self.agg.group(&group.name)
    }

    fn observe(&self, group: &mut RolloutGroup) {
        let c = self.counts(group);
        group.present_count = c.present;
        group.up_to_date_count = c.up_to_date;
        group.failed_count = c.failed;
        canary::refresh_success(&mut group.canaries, self.agents, self.target);
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

    fn start(&mut self, group: &mut RolloutGroup, state: GroupState, reason: &'static str) {
        group.start_time = Some(self.now);
        group.initial_count = self.counts(group).present;
        group.canaries.clear();
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
                        let next = if group.canary_count > 0 {
                            GroupState::Canary
                        } else {
                            GroupState::Active
                        };
                        self.start(group, next, reason::CAN_START);
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
        if before.iter().any(|g| g.state != GroupState::Done) {
            return Some(reason::PREVIOUS_GROUPS_NOT_DONE);
        }
        let Some(opened) = group_window(self.spec, group).open_since(self.eval_now) else {
            return Some(reason::CANNOT_START);
        };
        if opened < self.rollout_start {
            return Some(reason::ROLLOUT_CHANGED_DURING_WINDOW);
        }
        if let Some(prev_start) = before.last().and_then(|p| p.start_time) {
            let wait = SignedDuration::from_hours(group.config_wait_hours);
            if self.eval_now < prev_start.saturating_add(wait).unwrap_or(prev_start) {
                return Some(reason::WAIT_HOURS_NOT_ELAPSED);
            }
        }
        None
    }

    /// Picks canaries if there are none yet and checks them; true when the group
    /// moved on to active.
    fn canaries<R: RngCore + ?Sized>(&mut self, group: &mut RolloutGroup, rng: &mut R) -> bool {
        if group.canaries.is_empty() {
            let candidates = canary::candidates(self.agents, &group.name, self.names, self.target);
            let want = usize::try_from(group.canary_count).unwrap_or(0);
            group.canaries = canary::pick(&candidates, want, rng);
            canary::refresh_success(&mut group.canaries, self.agents, self.target);
            if group.canaries.is_empty() {
                if self.counts(group).present == 0 {
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
            self.set(group, GroupState::Active, reason::CANARIES_ARE_ALIVE);
            true
        } else {
            self.set(group, GroupState::Canary, reason::WAITING_FOR_CANARIES);
            false
        }
    }

    /// Evaluates an active group: progress, and whether it is done.
    fn active(&mut self, group: &mut RolloutGroup) {
        let c = self.counts(group);
        let mif = group
            .config_max_in_flight
            .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
            .fraction();
        let mut halted = false;
        group.progress = match group.config_max_in_flight {
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
        let done = started < self.now
            && if self.agg.live_reports == 0 {
                self.now
                    >= started
                        .saturating_add(DONE_WITHOUT_REPORTS_AFTER)
                        .unwrap_or(started)
            } else {
                group_complete(group.initial_count, &c, mif)
            };
        if done {
            group.progress = 1.0;
            self.set(group, GroupState::Done, reason::UPDATE_COMPLETE);
        } else if halted {
            self.events.push(Event::ProgressHalted {
                group: group.name.clone(),
            });
            self.set(group, GroupState::Active, reason::TOO_MANY_AGENTS_MISSING);
        } else {
            self.set(group, GroupState::Active, reason::UPDATE_IN_PROGRESS);
        }
    }

    fn time_based(&mut self, group: &mut RolloutGroup) {
        let opened = group_window(self.spec, group).open_since(self.eval_now);
        match (group.state, opened) {
            (GroupState::Unstarted, Some(open)) if open < self.rollout_start => {
                self.set(
                    group,
                    GroupState::Unstarted,
                    reason::ROLLOUT_CHANGED_DURING_WINDOW,
                );
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

    fn check_overdue(&mut self, group: &RolloutGroup) {
        if !matches!(group.state, GroupState::Canary | GroupState::Active)
            || self.spec.strategy == Strategy::TimeBased
        {
            return;
        }
        let Some(since) = group.start_time else {
            return;
        };
        let after = group
            .config_alert_after
            .unwrap_or(DEFAULT_ALERT_AFTER)
            .as_signed();
        if self.now >= since.saturating_add(after).unwrap_or(since) {
            self.events.push(Event::GroupOverdue {
                group: group.name.clone(),
                state: group.state,
                since,
            });
        }
    }
}

/// The success criteria of an active halt-on-error group: at least `1 - mif` of the
/// initial agents are still present, and at least `1 - mif` of those present run the
/// target version.
pub fn group_complete(initial: u64, c: &GroupCounts, mif: f64) -> bool {
    let keep = 1.0 - mif;
    // Compare in integers scaled by 10_000 to avoid float edge cases at the threshold.
    let keep_bp = (keep * 10_000.0).round() as u128;
    let present_ok = u128::from(c.present) * 10_000 >= u128::from(initial) * keep_bp;
    let updated_ok = if c.present == 0 {
        initial == 0
    } else {
        u128::from(c.up_to_date) * 10_000 >= u128::from(c.present) * keep_bp
    };
    present_ok && updated_ok
}
