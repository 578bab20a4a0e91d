//! The rollout's vocabulary, below everything that decides: the groups with their
//! catch-all rule, what the config and version ask for, a group's window, the rollout
//! state derived from its groups, which reports count, and the events a decision
//! emits. `reconcile`, `transition`, `canary`, `aggregate`, `inventory` and `find`
//! build on this module; it imports none of them.

use std::fmt;

use jiff::{SignedDuration, Timestamp};

use crate::domain::duration::{GoDuration, Percent};
use crate::domain::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, GroupState,
    Mode, RolloutGroup, RolloutSpec, RolloutState, Strategy,
};
use crate::domain::window::{Calendar, CalendarSpec};

/// halt-on-error windows last one hour.
pub(crate) const HALT_ON_ERROR_WINDOW: SignedDuration = SignedDuration::from_hours(1);
/// `max_in_flight` when a group sets none: the share of its agents that may be
/// missing or failed before it counts as done or failed.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: Percent = Percent::from_percent(10);
/// How often each replica writes its report.
pub const DEFAULT_REPORT_PERIOD: SignedDuration = SignedDuration::from_secs(60);

/// A rollout's groups in order. The last one is the catch-all: it also serves agents
/// that present no group or a group the rollout does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    names: Vec<String>,
}

impl Groups {
    pub fn new(names: Vec<String>) -> Self {
        Self { names }
    }

    /// The groups of `rollout`, in its order.
    pub fn of(rollout: &AutoUpdateAgentRollout) -> Self {
        Self::new(
            rollout
                .status
                .groups
                .iter()
                .map(|g| g.name.clone())
                .collect(),
        )
    }

    /// The groups a new rollout would have under `config` (the default config when
    /// there is none).
    pub fn configured(config: Option<&AutoUpdateConfig>) -> Self {
        let default_config = AutoUpdateConfig::default();
        let config = config.unwrap_or(&default_config);
        Self::new(config.groups().into_iter().map(|g| g.name).collect())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// The catch-all group: the last one.
    pub fn catch_all(&self) -> Option<&str> {
        self.names.last().map(String::as_str)
    }

    /// The group that serves an agent presenting `presented` (possibly empty): that
    /// group if the rollout has it, else the catch-all. `None` only without groups.
    pub fn serving<'a>(&'a self, presented: &'a str) -> Option<&'a str> {
        if self.contains(presented) {
            Some(presented)
        } else {
            self.catch_all()
        }
    }

    /// When `presented` names a group the rollout lacks (a typo such as `prdo`), the
    /// catch-all group that serves it instead. An empty group is not unknown: it is
    /// "no group", which the catch-all serves by design.
    pub fn unknown<'a>(&'a self, presented: &str) -> Option<&'a str> {
        if presented.is_empty() || self.contains(presented) {
            None
        } else {
            self.catch_all()
        }
    }

    /// The unknown groups among `presented`, each with the group serving it.
    pub fn unknown_among<'p>(
        &self,
        presented: impl IntoIterator<Item = &'p str>,
    ) -> std::collections::BTreeMap<String, String> {
        presented
            .into_iter()
            .filter_map(|p| Some((p.to_string(), self.unknown(p)?.to_string())))
            .collect()
    }

    /// Whether `group` serves an agent presenting `presented`.
    pub fn serves(&self, group: &str, presented: &str) -> bool {
        presented == group || (self.catch_all() == Some(group) && !self.contains(presented))
    }
}

/// The mode the config sets, `None` when there is no config or it sets none.
pub(crate) fn config_mode(config: Option<&AutoUpdateConfig>) -> Option<Mode> {
    config.and_then(AutoUpdateConfig::mode)
}

/// The mode the version sets, `None` when there is no version or it sets none.
pub(crate) fn version_mode(version: Option<&AutoUpdateVersion>) -> Option<Mode> {
    version.and_then(AutoUpdateVersion::mode)
}

/// The mode in force (seed 002): set in both resources, the most restrictive; set in
/// one, that one; set in neither, `disabled`, so updates never start on a fleet whose
/// operator has not said so.
pub fn mode_in_force(
    config: Option<&AutoUpdateConfig>,
    version: Option<&AutoUpdateVersion>,
) -> Mode {
    match (config_mode(config), version_mode(version)) {
        (Some(c), Some(v)) => c.combine(v),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => Mode::Disabled,
    }
}

/// The mode in force under a global freeze: at least suspended (a disabled fleet stays
/// disabled), so every rule that holds a suspended rollout holds a frozen one.
pub fn frozen_mode(mode: Mode, frozen: bool) -> Mode {
    if frozen {
        mode.combine(Mode::Suspended)
    } else {
        mode
    }
}

/// The rollout spec the config and version ask for, or why there is no agent rollout.
pub(crate) fn desired_spec(
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
        autoupdate_mode: mode_in_force(Some(config), Some(version)),
        strategy: config.strategy(),
        maintenance_window_duration: config.maintenance_window_duration(),
        host_group: config.host_group(),
    })
}

/// Whether some group of `rollout` places hosts by their labels.
pub fn places_by_labels(rollout: &AutoUpdateAgentRollout) -> bool {
    rollout
        .status
        .groups
        .iter()
        .any(|g| !g.config.match_labels.is_empty())
}

/// The catch-all group answering a host that presents `presented`, when `rollout`
/// lacks that group and the name alone places the host (a typo, Teleport's Helm
/// default `stable/cloud`). `None` when the group exists, is empty ("no group", the
/// catch-all's by design), or some group places hosts by labels (the labels place the
/// host, not the name).
pub fn falls_back<'a>(rollout: &'a AutoUpdateAgentRollout, presented: &str) -> Option<&'a str> {
    if places_by_labels(rollout) || presented.is_empty() || rollout.group(presented).is_some() {
        return None;
    }
    rollout.status.groups.last().map(|g| g.name.as_str())
}

/// The group a host counts as presenting, given the group it presents and its labels:
/// under `host_group: override` a group the rollout has wins; otherwise the first
/// group whose `match_labels` the labels all hold; otherwise the presented group (the
/// catch-all serves it when the rollout lacks it). Every server decision about the host
/// (find, its report, canaries) starts from this.
pub fn place<'a>(
    rollout: &'a AutoUpdateAgentRollout,
    presented: &'a str,
    labels: &std::collections::BTreeMap<String, String>,
) -> &'a str {
    let known = rollout.group(presented).is_some();
    if known && rollout.spec.host_group == crate::domain::resource::HostGroup::Override {
        return presented;
    }
    rollout
        .status
        .groups
        .iter()
        .find(|g| {
            !g.config.match_labels.is_empty()
                && g.config
                    .match_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
        })
        .map_or(presented, |g| g.name.as_str())
}

/// Why `rollout`'s target counts as failed, or `None`: a group was rolled back, a
/// canary failed, or a group's failed agents exceed its `max_in_flight` share of the
/// agents it started with.
pub fn target_failed(rollout: &AutoUpdateAgentRollout) -> Option<String> {
    rollout.status.groups.iter().find_map(|g| {
        if g.state == GroupState::Rolledback {
            Some(format!("group {} was rolled back", g.name))
        } else if g.canaries.iter().any(|c| c.failed) {
            Some(format!("a canary of group {} failed", g.name))
        } else if failed_over_budget(g) {
            Some(format!(
                "{} agents of group {} failed, more than its max_in_flight allows",
                g.failed_count, g.name
            ))
        } else if refused_over_budget(g) {
            Some(format!(
                "{} agents of group {} could not install it ({})",
                g.refused_count,
                g.name,
                refused_kinds(g)
            ))
        } else {
            None
        }
    })
}

/// Whether more of `g`'s agents failed than its `max_in_flight` share of the agents
/// it started with.
pub(crate) fn failed_over_budget(g: &RolloutGroup) -> bool {
    let budget = g
        .config
        .max_in_flight
        .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
        .fraction()
        * g.initial_count as f64;
    g.failed_count > 0 && g.failed_count as f64 > budget
}

/// Whether `g`'s hosts that could not install the target (not signed, missing, …) are
/// enough to say so: at least one, and at least its `max_in_flight` share of the
/// agents it started with.
pub(crate) fn refused_over_budget(g: &RolloutGroup) -> bool {
    let budget = g
        .config
        .max_in_flight
        .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
        .fraction()
        * g.initial_count as f64;
    g.refused_count > 0 && g.refused_count as f64 >= budget
}

/// `g`'s install failures by kind, for people: `2 not_signed, 1 artifact_missing`.
pub fn refused_kinds(g: &RolloutGroup) -> String {
    g.refused_kinds
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `g`'s hosts vanished: fewer are connected (counted or not) than its peak
/// allows, losing more than its `max_in_flight` share. Then the group must neither
/// skip its canaries for want of candidates nor complete.
pub fn agents_vanished(g: &RolloutGroup) -> bool {
    let keep = 1.0
        - g.config
            .max_in_flight
            .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
            .fraction();
    g.peak_count > 0 && (g.connected_count as f64) < keep * g.peak_count as f64
}

/// A rollout's state, from its groups.
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

/// The length of a window that sets none under `spec`'s strategy: 1h for
/// halt-on-error, `maintenance_window_duration` for time-based.
pub(crate) fn default_window_duration(spec: &RolloutSpec) -> SignedDuration {
    match spec.strategy {
        Strategy::HaltOnError => HALT_ON_ERROR_WINDOW,
        Strategy::TimeBased => spec
            .maintenance_window_duration
            .map_or(HALT_ON_ERROR_WINDOW, GoDuration::as_signed),
    }
}

/// The schedule `group` keeps in its new form (`windows`, `timezone`, `blackouts`),
/// `None` for a group configured with `days`/`start_hour` alone.
pub(crate) fn group_calendar_spec(group: &RolloutGroup) -> Option<CalendarSpec> {
    (!group.config.windows.is_empty()).then(|| CalendarSpec {
        windows: group.config.windows.clone(),
        timezone: group.config.timezone.clone(),
        blackouts: group.config.blackouts.clone(),
    })
}

/// The maintenance windows of `group` under `spec`'s strategy: the one function every
/// decision and view asks.
pub fn group_window(spec: &RolloutSpec, group: &RolloutGroup) -> Calendar {
    let duration = default_window_duration(spec);
    match group_calendar_spec(group) {
        // A zone this build does not know (validation refuses it in a config; a
        // rollout written by another replica might carry one): never open, so the
        // group holds rather than start at a guessed hour.
        Some(cal) => cal.calendar(duration).unwrap_or_else(|_| Calendar::never()),
        None => Calendar::hourly_utc(
            &group.config.days,
            u8::try_from(group.config.start_hour.unwrap_or(0)).unwrap_or(u8::MAX),
            duration,
        ),
    }
}

/// One window length of `group`: the strategy's length for a group on the old fields
/// (whatever its days), the longest of its windows otherwise. A time-based
/// start-update opens the group for this long.
pub(crate) fn group_window_length(spec: &RolloutSpec, group: &RolloutGroup) -> SignedDuration {
    match group_calendar_spec(group) {
        Some(_) => group_window(spec, group).longest(),
        None => default_window_duration(spec),
    }
}

/// The exported maintenance schedule (seed 001) of the group that serves `group`
/// (find's rule: an unknown group gets the last one), with `count` windows from `now`
/// (the open one first). `None` when the rollout has no groups (the immediate
/// schedule).
pub(crate) fn group_schedule(
    rollout: &AutoUpdateAgentRollout,
    group: &str,
    now: Timestamp,
    count: usize,
) -> Option<crate::domain::wire::AgentSchedule> {
    let g = rollout.serving_group(group)?;
    let w = group_window(&rollout.spec, g);
    let count = count.min(crate::domain::wire::MAX_SCHEDULED_WINDOWS);
    // Hosts get the new form with every duration spelled out, so they need not know
    // the strategy's default.
    let default = default_window_duration(&rollout.spec);
    let calendar = group_calendar_spec(g).map(|mut cal| {
        for win in &mut cal.windows {
            win.duration.get_or_insert(GoDuration::from_secs(
                u64::try_from(default.as_secs()).unwrap_or(0),
            ));
        }
        cal
    });
    let on_calendar = w.on_calendar();
    Some(crate::domain::wire::AgentSchedule {
        group: g.name.clone(),
        days: g.config.days.clone(),
        start_hour: u8::try_from(g.config.start_hour.unwrap_or(0)).unwrap_or(u8::MAX),
        duration_seconds: u64::try_from(group_window_length(&rollout.spec, g).as_secs())
            .unwrap_or(0),
        on_calendar: on_calendar.first().cloned(),
        on_calendars: if calendar.is_some() {
            on_calendar
        } else {
            Vec::new()
        },
        calendar,
        windows: w
            .upcoming(now, count)
            .into_iter()
            .map(|(start, stop)| crate::domain::wire::ScheduledWindow { start, stop })
            .collect(),
    })
}

/// Whether `report` counts at `now`: at most two report periods old. An older one's
/// replica is presumed dead and its agents reconnected elsewhere.
pub(crate) fn is_live(
    report: &AutoUpdateAgentReport,
    now: Timestamp,
    report_period: SignedDuration,
) -> bool {
    now.duration_since(report.spec.timestamp) <= report_period.saturating_mul(2)
}

/// What a reconcile or a manual transition did, for logs, metrics and alerts.
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
    /// Canaries of a group rolled the target back or run it unhealthy.
    CanariesFailed {
        group: String,
        updater_ids: Vec<String>,
    },
    /// A query of a group's canary analysis is past its limit.
    AnalysisFailed {
        group: String,
        message: String,
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

impl Event {
    /// A stable name for metrics labels and API clients; never renamed.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RolloutCreated { .. } => "rollout_created",
            Self::ModeChanged { .. } => "mode_changed",
            Self::GroupChanged { .. } => "group_changed",
            Self::CanariesPicked { .. } => "canaries_picked",
            Self::CanariesFailed { .. } => "canaries_failed",
            Self::AnalysisFailed { .. } => "analysis_failed",
            Self::GroupOverdue { .. } => "group_overdue",
            Self::ProgressHalted { .. } => "progress_halted",
        }
    }
}

/// One line for people (logs, `ternctl`, the API's event messages).
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RolloutCreated {
                start_version,
                target_version,
                why,
            } => write!(
                f,
                "new rollout from {start_version} to {target_version} ({why})"
            ),
            Self::ModeChanged { from, to } => {
                write!(f, "mode changed from {} to {}", from.as_str(), to.as_str())
            }
            Self::GroupChanged {
                group,
                from,
                to,
                reason,
            } => write!(
                f,
                "group {group}: {} -> {} ({reason})",
                from.as_str(),
                to.as_str()
            ),
            Self::CanariesPicked { group, updater_ids } => {
                write!(
                    f,
                    "group {group}: canaries picked: {}",
                    updater_ids.join(", ")
                )
            }
            Self::CanariesFailed { group, updater_ids } => {
                write!(
                    f,
                    "group {group}: canary failed (rolled back or unhealthy on the target), the group holds: {}",
                    updater_ids.join(", ")
                )
            }
            Self::AnalysisFailed { group, message } => write!(
                f,
                "group {group}: canary analysis failed, the group holds: {message}"
            ),
            Self::GroupOverdue {
                group,
                state,
                since,
            } => write!(
                f,
                "ALERT group {group}: still {} since {since}, past its alert_after: check its agents",
                state.as_str()
            ),
            Self::ProgressHalted { group } => write!(
                f,
                "group {group}: progress halted, more than max_in_flight of the initial agents are missing"
            ),
        }
    }
}

/// Whether a group's topology limits let `updater_id` update now: every limit's
/// admission names it. A group without limits admits everyone; one whose admissions
/// are not worked out yet, or a host without an updater id (never reported, so never
/// counted against a zone), is held.
pub(crate) fn topology_admits(group: &RolloutGroup, updater_id: &str) -> bool {
    if group.config.topology.is_empty() {
        return true;
    }
    !updater_id.is_empty()
        && group.topology.len() == group.config.topology.len()
        && group.topology.iter().all(|t| t.admits(updater_id))
}

/// Whether the rollout is moving: updates are enabled and a group tests canaries or
/// is active. Replicas report (and the leader reconciles) more often then, so that a
/// group moves on as soon as its hosts finish rather than at the next quiet period.
pub fn in_motion(rollout: &AutoUpdateAgentRollout) -> bool {
    rollout.spec.autoupdate_mode == Mode::Enabled
        && rollout
            .status
            .groups
            .iter()
            .any(|g| matches!(g.state, GroupState::Canary | GroupState::Active))
}

/// How long until the next report and reconcile: `active` (never longer than `quiet`)
/// while `rollout` is [`in_motion`], `quiet` otherwise. ternd's loop and the simulator
/// both ask this.
pub fn report_period<T: Ord>(
    rollout: Option<&AutoUpdateAgentRollout>,
    quiet: T,
    active: Option<T>,
) -> T {
    match active {
        Some(active) if rollout.is_some_and(in_motion) => active.min(quiet),
        _ => quiet,
    }
}

/// How often a replica reports (and the leader reconciles): `D` is a duration type,
/// whichever clock the caller counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportPeriods<D> {
    /// While nothing moves.
    pub quiet: D,
    /// While the rollout is [`in_motion`] (never longer than `quiet`).
    pub active: Option<D>,
    /// While the rollout is in motion, a replica whose hosts changed (a host finished
    /// an update, rolled back, changed its health) reports this long after the first change, and
    /// never sooner than this long after its last report: a group's progress follows
    /// its hosts within seconds, and a replica writes at most one report per this
    /// long however fast its hosts change.
    pub after_change: Option<D>,
}

/// When a replica that last reported at `last` reports next, given the first change
/// among its hosts since then (`changed`). ternd's loop and the simulator both ask
/// this.
pub fn next_report<T, D>(
    rollout: Option<&AutoUpdateAgentRollout>,
    periods: &ReportPeriods<D>,
    last: T,
    changed: Option<T>,
) -> T
where
    T: Ord + Copy + std::ops::Add<D, Output = T>,
    D: Ord + Copy,
{
    let regular = last + report_period(rollout, periods.quiet, periods.active);
    match (periods.after_change, changed) {
        (Some(delay), Some(changed)) if rollout.is_some_and(in_motion) => {
            regular.min((changed + delay).max(last + delay))
        }
        _ => regular,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(names: &[&str]) -> Groups {
        Groups::new(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn the_last_group_serves_empty_and_unknown_groups() {
        let g = groups(&["dev", "prod"]);
        assert_eq!(g.serving("dev"), Some("dev"));
        assert_eq!(g.serving(""), Some("prod"));
        assert_eq!(g.serving("nope"), Some("prod"));
        assert!(g.serves("prod", "") && g.serves("prod", "nope") && g.serves("prod", "prod"));
        assert!(!g.serves("dev", "") && !g.serves("prod", "dev") && g.serves("dev", "dev"));
        assert_eq!(groups(&[]).serving("dev"), None);
    }

    #[test]
    fn event_kinds_and_lines() {
        let e = Event::GroupChanged {
            group: "dev".into(),
            from: GroupState::Unstarted,
            to: GroupState::Active,
            reason: "can_start",
        };
        assert_eq!(e.kind(), "group_changed");
        assert_eq!(e.to_string(), "group dev: unstarted -> active (can_start)");
        let e = Event::ModeChanged {
            from: Mode::Enabled,
            to: Mode::Suspended,
        };
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            ("mode_changed", "mode changed from enabled to suspended")
        );
    }
}
