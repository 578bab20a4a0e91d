//! What the admin API shows and the choices behind its writes, from the resources and
//! the reports: the mode in force, each group's status (counts, windows), the report
//! totals, an inventory entry, and the autoupdate_version a new rollout writes. ternd
//! serves these ([`crate::domain::api`] types); keeping them here keeps the rules in one place
//! and testable without a server.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::domain::aggregate::Aggregate;
use crate::domain::api::{
    GroupStatus, GroupVersions, InventoryEntry, Modes, NextSteps, PendingHost, ReportResponse,
    StatusResponse,
};
use crate::domain::duration::GoDuration;
use crate::domain::inventory::{AgentView, InventoryAgent, omitted_reason};
use crate::domain::reconcile;
use crate::domain::resource::GroupState;
use crate::domain::resource::{
    AgentsVersion, AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig,
    AutoUpdateVersion, Mode, Schedule,
};
use crate::domain::rollout::{
    self, Groups, config_mode, group_window, is_live, mode_in_force, version_mode,
};
use crate::domain::version::Version;

mod products;
pub use products::product_summary;

/// The mode in force, each resource's own, and why updates do not move when they
/// do not.
pub fn modes(
    config: Option<&AutoUpdateConfig>,
    version: Option<&AutoUpdateVersion>,
    freeze: Option<&crate::domain::api::Freeze>,
) -> Modes {
    let mode = rollout::frozen_mode(mode_in_force(config, version), freeze.is_some());
    let config_mode = config_mode(config);
    let version_mode = version_mode(version);
    let why_stopped = match mode {
        _ if let Some(f) = freeze => Some(f.describe()),
        Mode::Enabled => None,
        _ if config_mode.is_none() && version_mode.is_none() => Some(
            "agent updates are disabled: no mode is set; set spec.agents.mode: enabled in \
             the autoupdate_config (ternctl agents resume does)"
                .to_string(),
        ),
        stopped => {
            let by: Vec<&str> = [
                (config_mode, "autoupdate_config"),
                (version_mode, "autoupdate_version"),
            ]
            .into_iter()
            .filter(|(m, _)| *m == Some(stopped))
            .map(|(_, name)| name)
            .collect();
            let hint = if stopped == Mode::Suspended && by == ["autoupdate_config"] {
                " (ternctl agents resume)"
            } else {
                ""
            };
            Some(format!(
                "agent updates are {}: spec.agents.mode is {} in the {}{hint}",
                stopped.as_str(),
                stopped.as_str(),
                by.join(" and the ")
            ))
        }
    };
    Modes {
        mode,
        config_mode,
        version_mode,
        why_stopped,
        frozen: freeze.cloned(),
    }
}

/// `agents status` at `now`: the rollout's groups with their live counts and windows,
/// when each unstarted group starts, and the totals of the live reports; what the
/// config in force (`config`; `None`: the default) risks, whether the rollout runs an
/// older copy of it, and what to do at a halt. `version_exists` tells why there is no
/// rollout.
pub fn status(
    now: Timestamp,
    modes: Modes,
    config: Option<&AutoUpdateConfig>,
    rollout: Option<AutoUpdateAgentRollout>,
    version_exists: bool,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
) -> StatusResponse {
    let groups_of_rollout = rollout.as_ref().map(Groups::of).unwrap_or_default();
    let target = rollout
        .as_ref()
        .map(|r| r.spec.target_version.to_string())
        .unwrap_or_default();
    let agg = Aggregate::from_reports(reports, now, report_period, &groups_of_rollout, &target);
    let groups = rollout
        .as_ref()
        .map(|r| group_statuses(now, r, &agg, reports, report_period, modes.mode))
        .unwrap_or_default();
    let config_outdated = rollout.as_ref().and_then(|r| config_outdated(config, r));
    let next_steps = rollout.as_ref().and_then(next_steps);
    let no_rollout_reason = match (&rollout, version_exists) {
        (Some(_), _) => None,
        (None, false) => Some(
            "no autoupdate_version exists: nothing to roll out (ternctl agents new-rollout VERSION)"
                .to_string(),
        ),
        (None, true) => Some(
            "the rollout has not been created yet: it appears at the next reconcile".to_string(),
        ),
    };
    let (present, up_to_date, failed) = agg.groups.values().fold((0, 0, 0), |acc, c| {
        (acc.0 + c.present, acc.1 + c.up_to_date, acc.2 + c.failed)
    });
    let mut alerts = rollout
        .as_ref()
        .map(|r| r.status.alerts.clone())
        .unwrap_or_default();
    alerts.sort_by_key(|a| a.since);
    let hosts = crate::domain::exposure::hosts_from_reports(config, reports, now, report_period);
    StatusResponse {
        now,
        modes,
        alerts,
        config_warnings: crate::domain::exposure::all_at_once(config, hosts.as_ref()),
        rollout,
        no_rollout_reason,
        groups,
        present,
        up_to_date,
        failed,
        omitted: agg.omitted,
        live_reports: agg.live_reports,
        config_outdated,
        next_steps,
    }
}

/// The sentence that says `rollout` runs an older copy of `config`'s groups, if it
/// does ([`reconcile::config_changes`]).
fn config_outdated(
    config: Option<&AutoUpdateConfig>,
    rollout: &AutoUpdateAgentRollout,
) -> Option<String> {
    let changes = reconcile::config_changes(config, rollout);
    if changes.is_empty() {
        return None;
    }
    let since = rollout.status.start_time.map_or_else(
        || "its start".to_string(),
        |t| t.strftime("%Y-%m-%d %H:%M UTC").to_string(),
    );
    Some(format!(
        "this rollout uses the config of {since}; `ternctl agents new-rollout {}` applies the current one (every group starts over), which differs: {}",
        rollout.spec.target_version,
        changes.join("; ")
    ))
}

/// The alerts that halt a rollout: a canary failed, a group halted, hosts could not
/// install the target.
const HALTING: [&str; 3] = [
    crate::domain::alert::kind::CANARY_FAILED,
    crate::domain::alert::kind::GROUP_HALTED,
    crate::domain::alert::kind::INSTALL_REFUSED,
];

/// At a halt (an alert of [`HALTING`]): what an operator can do next, with the
/// commands. `agents status` prints it and the dashboard shows it: one wording.
pub fn next_steps(rollout: &AutoUpdateAgentRollout) -> Option<NextSteps> {
    if !rollout
        .status
        .alerts
        .iter()
        .any(|a| HALTING.contains(&a.kind.as_str()))
    {
        return None;
    }
    let (start, target) = (&rollout.spec.start_version, &rollout.spec.target_version);
    Some(NextSteps {
        title: format!("The rollout to {target} is halted: what now"),
        steps: vec![
            format!(
                "The release is broken: publish a fixed version, then `ternctl agents new-rollout VERSION`. Hosts that rolled {target} back do not retry it; they take the fix. {start} stays the start version."
            ),
            format!(
                "Return the started groups to {start}: `ternctl agents rollback`."
            ),
            "The failures are not the release's fault (a broken host): fix or remove it, then `ternctl agents reset GROUP` (new canaries) or `ternctl agents mark-done GROUP`.".to_string(),
            "Which hosts failed, and why: `ternctl inventory ls` and each host's page.".to_string(),
        ],
    })
}

/// For an unstarted group of an enabled rollout: when the reconcile starts it
/// ([`reconcile::earliest_start`]), and that in words. The group's reason is the last
/// reconcile's: a window may have opened since, and the next reconcile (every
/// `report_period` at most) starts it. `None` while it waits for earlier groups or for
/// reports (its reason says so), or when nothing would start it.
fn start_outlook(
    r: &AutoUpdateAgentRollout,
    index: usize,
    now: Timestamp,
    report_period: SignedDuration,
    mode: Mode,
) -> (Option<Timestamp>, Option<String>) {
    let Some(g) = r.status.groups.get(index) else {
        return (None, None);
    };
    let held_by_reports = [
        crate::domain::reason::WAITING_FOR_REPORTS,
        crate::domain::reason::REPORTS_MISSING,
        crate::domain::reason::AGENTS_VANISHED,
    ];
    let halt = r.spec.strategy == crate::domain::resource::Strategy::HaltOnError;
    let waits_for_earlier = halt
        && r.status.groups[..index]
            .iter()
            .any(|b| b.state != GroupState::Done);
    if g.state != GroupState::Unstarted
        || mode != Mode::Enabled
        || r.spec.schedule == Schedule::Immediate
        || waits_for_earlier
        || held_by_reports.contains(&g.last_update_reason.as_str())
    {
        return (None, None);
    }
    let Some(at) = reconcile::earliest_start(r, index, now) else {
        return (
            None,
            Some("no window ahead lets it start: start-update starts it now".to_string()),
        );
    };
    let every = GoDuration::from_secs(report_period.as_secs().max(0).unsigned_abs());
    let text = if at <= now {
        format!("its window is open: the next reconcile starts it (ternd reconciles every {every})")
    } else {
        format!(
            "starts at {} UTC at the earliest (the first reconcile from then; ternd reconciles every {every})",
            at.strftime("%Y-%m-%d %H:%M")
        )
    };
    (Some(at), Some(text))
}

/// How many pending hosts of each group a status lists.
pub const PENDING_LISTED: usize = 10;

/// The counted hosts among `agents` (one replica's) of each group of `rollout` in
/// canary or active that do not run the target healthy: how many per group, and the
/// first `limit` of them in the backpressure order (lowest updater id first: those
/// that go next). Each agent counts in the group that serves it.
pub fn pending<A: AgentView>(
    rollout: &AutoUpdateAgentRollout,
    agents: impl IntoIterator<Item = A>,
    now: Timestamp,
    report_period: SignedDuration,
    limit: usize,
) -> BTreeMap<String, (u64, Vec<A>)> {
    let groups = Groups::of(rollout);
    let moving: Vec<&str> = rollout
        .status
        .groups
        .iter()
        .filter(|g| matches!(g.state, GroupState::Canary | GroupState::Active))
        .map(|g| g.name.as_str())
        .collect();
    let target = crate::domain::version::normalize(&rollout.spec.target_version.to_string());
    let mut out: BTreeMap<String, (u64, Vec<A>)> = BTreeMap::new();
    if moving.is_empty() {
        return out;
    }
    for a in agents {
        let Some(group) = groups.serving(a.group()) else {
            continue;
        };
        if !moving.contains(&group) || omitted_reason(&a, now, report_period).is_some() {
            continue;
        }
        if !a.failed() && crate::domain::version::normalize(a.version()) == target {
            continue;
        }
        let (total, first) = out.entry(group.to_string()).or_default();
        *total += 1;
        let n = a.updater_numeral();
        let at = first.partition_point(|b| b.updater_numeral() <= n);
        if at < limit {
            first.insert(at, a);
            first.truncate(limit);
        }
    }
    out
}

/// One host of [`pending`] as the status lists it: `next_run` is how often its runs
/// heartbeat at the latest (the heartbeat interval ternd gives hosts).
pub fn pending_host(agent: InventoryAgent, next_run: SignedDuration) -> PendingHost {
    let hb = agent.heartbeat;
    let failed = hb.rollback || hb.healthy == Some(false);
    PendingHost {
        updater_id: hb.updater_id,
        hostname: hb.hostname,
        version: hb.version,
        failed,
        last_seen: agent.last_seen,
        next_run_by: agent
            .last_seen
            .saturating_add(next_run)
            .unwrap_or(agent.last_seen),
    }
}

/// For a group in canary with none picked: the candidates the live reports offer
/// (distinct hosts) and, with none, the host that becomes one first.
fn canary_wait(
    group: &str,
    now: Timestamp,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
) -> (u64, Option<crate::domain::resource::CanaryEligible>) {
    let live = || reports.iter().filter(|r| is_live(r, now, report_period));
    let offered: std::collections::BTreeSet<&str> = live()
        .filter_map(|r| r.spec.canary_candidates.get(group))
        .flatten()
        .map(|a| a.updater_id.as_str())
        .collect();
    let first = live()
        .filter_map(|r| r.spec.canary_eligible.get(group))
        .min_by(|a, b| (a.at, &a.updater_id).cmp(&(b.at, &b.updater_id)))
        .cloned();
    (offered.len() as u64, first.filter(|_| offered.is_empty()))
}

fn group_statuses(
    now: Timestamp,
    r: &AutoUpdateAgentRollout,
    agg: &Aggregate,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
    mode: Mode,
) -> Vec<GroupStatus> {
    let last = r.status.groups.len().saturating_sub(1);
    r.status
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let c = agg.group(&g.name);
            let w = group_window(&r.spec, g);
            let open = w.open_at(now);
            let waiting =
                g.state == crate::domain::resource::GroupState::Canary && g.canaries.is_empty();
            let (eligible_canaries, canary_eligible) = if waiting {
                let (n, first) = canary_wait(&g.name, now, reports, report_period);
                (Some(n), first)
            } else {
                (None, None)
            };
            let (starts_at, starts) = start_outlook(r, i, now, report_period, mode);
            let mut status = GroupStatus {
                starts_at,
                starts,
                pending: None,
                eligible_canaries,
                canary_eligible,
                canary_wait: None,
                name: g.name.clone(),
                state: g.state,
                catch_all: i == last,
                start_time: g.start_time,
                last_update_reason: g.last_update_reason.clone(),
                last_update_reason_text: crate::domain::reason::sentence(&g.last_update_reason)
                    .map(str::to_string),
                last_update_time: g.last_update_time,
                present: c.present,
                up_to_date: c.up_to_date,
                failed: c.failed,
                refused: c.refused,
                initial: g.initial_count,
                progress: g.progress,
                canary_count: g.config.canary_count,
                canaries: g.canaries.clone(),
                canary_coverage: g.canary_coverage.clone(),
                window_open_since: open.map(|o| o.opens),
                window_closes: open.map(|o| o.closes),
                next_window: w.next_open(now),
                topology: g
                    .config
                    .topology
                    .iter()
                    .map(|limit| {
                        let admission = g.topology.iter().find(|t| t.key == limit.key);
                        crate::domain::api::TopologyStatus::of(limit, admission)
                    })
                    .collect(),
            };
            status.canary_wait = status.canary_wait();
            status
        })
        .collect()
}

/// `agents report` at `now`: the live reports summed per group as the agents present
/// it, and per version.
pub fn report(
    now: Timestamp,
    reports: &[AutoUpdateAgentReport],
    report_period: SignedDuration,
    rollout_groups: &Groups,
) -> ReportResponse {
    let agg = Aggregate::from_reports(reports, now, report_period, &Groups::default(), "");
    let replicas = reports
        .iter()
        .filter(|r| is_live(r, now, report_period))
        .map(|r| r.metadata.name.clone())
        .collect();
    let mut groups = BTreeMap::new();
    let mut total = 0;
    for (g, versions) in &agg.versions {
        let t: u64 = versions.values().sum();
        total += t;
        groups.insert(
            g.clone(),
            GroupVersions {
                versions: versions.clone(),
                total: t,
                failed: agg.group(g).failed,
            },
        );
    }
    let unknown_groups = rollout_groups.unknown_among(groups.keys().map(String::as_str));
    let mut order: Vec<String> = rollout_groups
        .names()
        .filter(|g| groups.contains_key(*g))
        .map(str::to_string)
        .collect();
    order.extend(
        groups
            .keys()
            .filter(|g| !g.is_empty() && !rollout_groups.contains(g))
            .cloned(),
    );
    if groups.contains_key("") && !rollout_groups.contains("") {
        order.push(String::new());
    }
    ReportResponse {
        now,
        replicas,
        order,
        groups,
        total,
        omitted: agg.omitted,
        unknown_groups,
    }
}

/// One agent as `inventory ls` shows it.
pub fn inventory_entry(
    agent: InventoryAgent,
    now: Timestamp,
    report_period: SignedDuration,
) -> InventoryEntry {
    let settled = agent.settled(now, report_period);
    let counted = omitted_reason(&agent, now, report_period).is_none();
    let model = agent.model();
    let hb = agent.heartbeat;
    InventoryEntry {
        updater_id: hb.updater_id,
        host_id: hb.host_id,
        hostname: hb.hostname,
        group: hb.group,
        version: hb.version,
        updater_version: hb.updater_version,
        updater_status: hb.updater_status,
        healthy: hb.healthy,
        model,
        rollback: hb.rollback,
        failed_version: hb.failed_version,
        install_failure: hb.install_failure,
        update_failure: hb.update_failure.map(|f| f.cleaned()),
        first_seen: agent.first_seen,
        last_seen: agent.last_seen,
        settled,
        counted,
        labels: hb.labels,
        arch: hb.arch,
        os: hb.os,
        os_version: hb.os_version,
        fips: hb.fips,
        installers: hb.installers,
        install_state: None,
        install_result: hb.install_result,
        trust: hb.trust,
    }
}

/// What `new-rollout` writes, and what the operator should be told about it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRollout {
    pub version: AutoUpdateVersion,
    /// Why the start version is not the obvious one, or why nothing changes.
    pub note: Option<String>,
}

/// The autoupdate_version that `new-rollout` writes to roll `target` out.
///
/// Asking again for the target the version already has (and no start) changes
/// nothing. The start version is `start` when given; else the version the fleet was
/// last asked to reach (the current version's target, else the rollout's) — unless
/// the rollout of that version failed ([`rollout::target_failed`]), in which case the
/// current start, the last good version, is kept: a broken version is never made
/// what a rollback returns to. The schedule and mode of the current version are kept.
///
/// `follow_in_window` sets the rollout's `follow_in_window` (off when not given for a
/// new target); given for the current target, it changes only that.
pub fn new_rollout_version(
    current: Option<&AutoUpdateVersion>,
    rollout: Option<&AutoUpdateAgentRollout>,
    target: Version,
    start: Option<Version>,
    follow_in_window: Option<bool>,
) -> NewRollout {
    let current_agents = current.and_then(|v| v.spec.agents.as_ref());
    if let (Some(cur), Some(a), None) = (current, current_agents, &start)
        && a.target_version == target
    {
        if let Some(follow) = follow_in_window.filter(|f| *f != a.follow_in_window) {
            let mut next = cur.clone();
            if let Some(agents) = next.spec.agents.as_mut() {
                agents.follow_in_window = follow;
            }
            let how = if follow {
                "later groups now follow within the window open now once the earlier ones are done"
            } else {
                "later groups now wait for a window that opens after the rollout began"
            };
            return NewRollout {
                version: next,
                note: Some(format!("{target} is already the target: {how}")),
            };
        }
        return NewRollout {
            version: cur.clone(),
            note: Some(format!(
                "{target} is already the target (from {}): nothing changed",
                a.start_version
            )),
        };
    }
    let last_target = current_agents
        .map(|a| a.target_version.clone())
        .or_else(|| rollout.map(|r| r.spec.target_version.clone()));
    let last_start = current_agents
        .map(|a| a.start_version.clone())
        .or_else(|| rollout.map(|r| r.spec.start_version.clone()));
    // Only a rollout of the version being replaced says whether that version failed.
    let failure = rollout
        .filter(|r| Some(&r.spec.target_version) == last_target.as_ref())
        .and_then(rollout::target_failed);
    let (start, note) = match (start, last_target, failure, last_start) {
        (Some(given), ..) => (given, None),
        (None, Some(failed), Some(why), Some(good)) => {
            let note = format!("{failed} failed ({why}): {good} stays the start version");
            (good, Some(note))
        }
        (None, Some(last), ..) => (last, None),
        (None, None, ..) => (target.clone(), None),
    };
    let mut next = current
        .cloned()
        .unwrap_or_else(|| AutoUpdateVersion::new(None));
    next.spec.agents = Some(AgentsVersion {
        start_version: start,
        target_version: target,
        schedule: current_agents.map_or(Schedule::Regular, |a| a.schedule),
        mode: current_agents.and_then(|a| a.mode),
        follow_in_window: follow_in_window.unwrap_or(false),
    });
    NewRollout {
        version: next,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::wire::{Heartbeat, UpdaterStatus};

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn new_rollout_starts_from_the_last_target_unless_told() {
        let first = new_rollout_version(None, None, v("1.1.0"), None, None).version;
        let a = first.spec.agents.as_ref().unwrap();
        assert_eq!(
            (a.start_version.to_string(), a.target_version.to_string()),
            ("1.1.0".into(), "1.1.0".into())
        );
        let second = new_rollout_version(Some(&first), None, v("1.2.0"), None, None).version;
        let a = second.spec.agents.as_ref().unwrap();
        assert_eq!(a.start_version, v("1.1.0"));
        assert_eq!(a.target_version, v("1.2.0"));
        let told =
            new_rollout_version(Some(&second), None, v("1.3.0"), Some(v("1.0.0")), None).version;
        assert_eq!(told.spec.agents.as_ref().unwrap().start_version, v("1.0.0"));
    }

    /// A rollout of `start -> target` with one group `dev` set up by `group`.
    fn rollout_of(
        start: &str,
        target: &str,
        group: impl FnOnce(&mut crate::domain::resource::RolloutGroup),
    ) -> AutoUpdateAgentRollout {
        let mut dev = crate::domain::resource::RolloutGroup {
            name: "dev".into(),
            initial_count: 20,
            ..Default::default()
        };
        group(&mut dev);
        AutoUpdateAgentRollout::new(
            crate::domain::resource::RolloutSpec {
                start_version: v(start),
                target_version: v(target),
                schedule: Schedule::Regular,
                autoupdate_mode: Mode::Enabled,
                strategy: Default::default(),
                maintenance_window_duration: None,
                host_group: Default::default(),
            },
            crate::domain::resource::RolloutStatus {
                groups: vec![dev],
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_failed_target_never_becomes_the_start_version() {
        use crate::domain::resource::{Canary, GroupState};
        let current = new_rollout_version(None, None, v("1.2.0"), Some(v("1.1.0")), None).version;
        type SetUp = Box<dyn Fn(&mut crate::domain::resource::RolloutGroup)>;
        let failures: [(&str, SetUp); 3] = [
            (
                "a canary of group dev failed",
                Box::new(|g| {
                    g.state = GroupState::Canary;
                    g.canaries = vec![Canary {
                        updater_id: "u1".into(),
                        failed: true,
                        ..Default::default()
                    }];
                }),
            ),
            (
                "group dev was rolled back",
                Box::new(|g| g.state = GroupState::Rolledback),
            ),
            (
                "3 agents of group dev failed",
                Box::new(|g| {
                    g.state = GroupState::Active;
                    g.failed_count = 3; // above 10% of 20
                }),
            ),
        ];
        for (why, failure) in failures {
            let r = rollout_of("1.1.0", "1.2.0", failure);
            let next = new_rollout_version(Some(&current), Some(&r), v("1.3.0"), None, None);
            let a = next.version.spec.agents.as_ref().unwrap();
            assert_eq!(
                (a.start_version.to_string(), a.target_version.to_string()),
                ("1.1.0".into(), "1.3.0".into()),
                "{why}"
            );
            let note = next.note.unwrap();
            assert!(note.contains(why) && note.contains("1.1.0 stays"), "{note}");
        }
        // Within budget (2 of 20 at 10%), or healthy: the last target is the start.
        for healthy in [
            rollout_of("1.1.0", "1.2.0", |g| g.failed_count = 2),
            rollout_of("1.1.0", "1.2.0", |g| g.state = GroupState::Done),
        ] {
            let next = new_rollout_version(Some(&current), Some(&healthy), v("1.3.0"), None, None);
            assert_eq!(next.version.spec.agents.unwrap().start_version, v("1.2.0"));
            assert_eq!(next.note, None);
        }
        // A rollout of some other version says nothing about 1.2.0.
        let stale = rollout_of("1.0.0", "1.1.0", |g| g.state = GroupState::Rolledback);
        let next = new_rollout_version(Some(&current), Some(&stale), v("1.3.0"), None, None);
        assert_eq!(next.version.spec.agents.unwrap().start_version, v("1.2.0"));
    }

    #[test]
    fn asking_again_for_the_same_target_changes_nothing() {
        let current = new_rollout_version(None, None, v("1.3.0"), Some(v("1.1.0")), None).version;
        let r = rollout_of("1.1.0", "1.3.0", |g| {
            g.state = crate::domain::resource::GroupState::Rolledback
        });
        let again = new_rollout_version(Some(&current), Some(&r), v("1.3.0"), None, None);
        assert_eq!(again.version, current);
        assert!(again.note.unwrap().contains("nothing changed"));
        // An explicit start is a real change.
        let told =
            new_rollout_version(Some(&current), Some(&r), v("1.3.0"), Some(v("1.0.0")), None);
        assert_eq!(told.version.spec.agents.unwrap().start_version, v("1.0.0"));
    }

    #[test]
    fn modes_unset_in_both_disable_set_in_one_hold_and_combine_to_the_most_restrictive() {
        let m = modes(None, None, None);
        assert_eq!(
            (m.mode, m.config_mode, m.version_mode),
            (Mode::Disabled, None, None)
        );
        assert!(m.why_stopped.unwrap().contains("set spec.agents.mode"));
        let with_mode = |mode| {
            let mut cfg = AutoUpdateConfig::default();
            cfg.spec.agents.get_or_insert_with(Default::default).mode = mode;
            cfg
        };
        let version_with = |mode| {
            let mut v = new_rollout_version(None, None, v("1.2.0"), None, None).version;
            v.spec.agents.as_mut().unwrap().mode = mode;
            v
        };
        // A config with no mode and no version: still disabled.
        assert_eq!(
            modes(Some(&with_mode(None)), None, None).mode,
            Mode::Disabled
        );
        // Set in one: that one holds, whichever it is.
        let m = modes(Some(&with_mode(Some(Mode::Enabled))), None, None);
        assert_eq!((m.mode, m.why_stopped), (Mode::Enabled, None));
        let v_enabled = version_with(Some(Mode::Enabled));
        assert_eq!(modes(None, Some(&v_enabled), None).mode, Mode::Enabled);
        let v_unset = version_with(None);
        let m = modes(
            Some(&with_mode(Some(Mode::Suspended))),
            Some(&v_unset),
            None,
        );
        assert_eq!(
            (m.mode, m.config_mode),
            (Mode::Suspended, Some(Mode::Suspended))
        );
        assert!(m.why_stopped.unwrap().contains("ternctl agents resume"));
        // Both set: the most restrictive, and the reason names where it comes from.
        let v_disabled = version_with(Some(Mode::Disabled));
        let m = modes(
            Some(&with_mode(Some(Mode::Enabled))),
            Some(&v_disabled),
            None,
        );
        assert_eq!(m.mode, Mode::Disabled);
        assert_eq!(
            m.why_stopped.as_deref(),
            Some(
                "agent updates are disabled: spec.agents.mode is disabled in the autoupdate_version"
            )
        );
    }

    #[test]
    fn an_agent_counts_once_settled_with_an_id_and_updates_enabled() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let period = SignedDuration::from_secs(60);
        let agent = |first_seen: &str, status: UpdaterStatus| InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: "u1".into(),
                updater_status: status,
                ..Heartbeat::default()
            },
            first_seen: first_seen.parse().unwrap(),
            last_seen: now,
        };
        let e = inventory_entry(
            agent("2026-11-23T09:00:00Z", UpdaterStatus::Enabled),
            now,
            period,
        );
        assert!(e.settled && e.counted);
        let e = inventory_entry(
            agent("2026-11-23T09:59:30Z", UpdaterStatus::Enabled),
            now,
            period,
        );
        assert!(!e.settled && !e.counted);
        let e = inventory_entry(
            agent("2026-11-23T09:00:00Z", UpdaterStatus::Pinned),
            now,
            period,
        );
        assert!(e.settled && !e.counted);
    }

    #[test]
    fn status_without_a_rollout_says_why() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let period = SignedDuration::from_secs(60);
        let s = status(now, modes(None, None, None), None, None, false, &[], period);
        assert!(
            s.no_rollout_reason
                .unwrap()
                .contains("no autoupdate_version")
        );
        let s = status(now, modes(None, None, None), None, None, true, &[], period);
        assert!(s.no_rollout_reason.unwrap().contains("next reconcile"));
        assert!(s.groups.is_empty());
    }

    /// A halt's next steps are one text, for ternctl and the dashboard alike; none
    /// without a halting alert.
    #[test]
    fn next_steps_are_said_at_a_halt_only() {
        let mut r = rollout_of("1.1.0", "1.2.0", |_| {});
        assert_eq!(next_steps(&r), None);
        r.status.alerts.push(crate::domain::resource::Alert {
            kind: crate::domain::alert::kind::GROUP_OVERDUE.to_string(),
            group: Some("dev".into()),
            message: "late".into(),
            since: Timestamp::UNIX_EPOCH,
        });
        assert_eq!(next_steps(&r), None, "an overdue group is no halt");
        r.status.alerts[0].kind = crate::domain::alert::kind::CANARY_FAILED.to_string();
        let steps = next_steps(&r).unwrap();
        assert_eq!(steps.title, "The rollout to 1.2.0 is halted: what now");
        assert!(steps.steps[0].contains("`ternctl agents new-rollout VERSION`"));
        assert!(steps.steps[0].contains("1.1.0 stays the start version"));
        assert!(steps.steps[1].contains("`ternctl agents rollback`"));
    }

    /// Pending hosts: the group's counted hosts not yet on the target healthy, lowest
    /// updater id first, served by the group that serves them, at most `limit`.
    #[test]
    fn pending_lists_the_next_hosts_in_backpressure_order() {
        use crate::domain::resource::GroupState;
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let r = rollout_of("1.1.0", "1.2.0", |g| g.state = GroupState::Active);
        let host = |id: &str, group: &str, version: &str, rollback: bool| InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: id.into(),
                hostname: format!("{id}.example"),
                group: group.into(),
                version: version.into(),
                rollback,
                ..Heartbeat::default()
            },
            first_seen: "2026-11-23T09:00:00Z".parse().unwrap(),
            last_seen: "2026-11-23T09:59:30Z".parse().unwrap(),
        };
        let agents = vec![
            host(
                "c0000000-0000-4000-8000-000000000000",
                "dev",
                "1.1.0",
                false,
            ),
            host(
                "10000000-0000-4000-8000-000000000000",
                "dev",
                "1.2.0",
                false,
            ),
            host("20000000-0000-4000-8000-000000000000", "dev", "1.2.0", true),
            host(
                "50000000-0000-4000-8000-000000000000",
                "typo",
                "1.1.0",
                false,
            ),
            host(
                "90000000-0000-4000-8000-000000000000",
                "dev",
                "v1.1.0",
                false,
            ),
        ];
        let p = pending(&r, agents.clone(), now, SignedDuration::from_secs(60), 2);
        let (total, first) = &p["dev"];
        assert_eq!(
            *total, 4,
            "on the target healthy is not pending; the catch-all serves typo"
        );
        let ids: Vec<&str> = first
            .iter()
            .map(|a| a.heartbeat.updater_id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "20000000-0000-4000-8000-000000000000",
                "50000000-0000-4000-8000-000000000000"
            ]
        );
        let h = pending_host(first[0].clone(), SignedDuration::from_secs(60));
        assert!(h.failed);
        assert_eq!(h.next_run_by.to_string(), "2026-11-23T10:00:30Z");
        // Nothing is pending in a group that has not started.
        let idle = rollout_of("1.1.0", "1.2.0", |_| {});
        assert!(pending(&idle, agents, now, SignedDuration::from_secs(60), 2).is_empty());
    }

    /// `agents report` lists the groups in the rollout's order, then the others.
    #[test]
    fn the_report_keeps_the_rollout_order() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let agent = |id: &str, group: &str| InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: id.into(),
                group: group.into(),
                version: "1.0.0".into(),
                ..Heartbeat::default()
            },
            first_seen: "2026-11-23T09:00:00Z".parse().unwrap(),
            last_seen: now,
        };
        let agents: Vec<InventoryAgent> = [
            ("a", "staging"),
            ("b", "prod"),
            ("c", "dev"),
            ("d", ""),
            ("e", "typo"),
        ]
        .into_iter()
        .map(|(id, g)| agent(id, g))
        .collect();
        let period = SignedDuration::from_secs(60);
        let report = crate::domain::resource::AutoUpdateAgentReport::new(
            "r1",
            crate::domain::inventory::build_report(now, &agents, period),
        );
        let groups = Groups::new(vec!["dev".into(), "staging".into(), "prod".into()]);
        let r = super::report(now, &[report], period, &groups);
        assert_eq!(r.order, ["dev", "staging", "prod", "typo", ""]);
    }
}
