//! When will this host update? The dashboard's host page asks it of one host. The
//! answer starts from the one answer for the host ([`gate::answer`]: the rollout, the
//! mode, a freeze, a directive, a pin, a revoked version) and from what the host itself would do with
//! it ([`host_update::decide`]: a version it failed before is skipped), then adds what
//! people want to know: the group's state, its window, the earliest start `reconcile`
//! would allow, and the host's place in the backpressure order among its group's
//! peers. So a forecast never disagrees with find or with the host. Pure: the instant
//! and the peers are arguments.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::backpressure::UpdaterNumeral;
use crate::domain::directive::select::{self, HostFacts, Selection};
use crate::domain::gate::{self, Answer, Ask, DirectedInstall, DirectedStart, Fleet, Host, NoPins};
use crate::domain::hold::Hold;
use crate::domain::host_update;
use crate::domain::resource::{
    AutoUpdateAgentRollout, GroupState, Mode, RolloutGroup, Schedule, Strategy,
};
use crate::domain::rollout::{Groups, group_window};
use crate::domain::version::Version;

/// What a host should expect, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outlook {
    /// No rollout exists: nothing will move.
    NoRollout,
    /// It runs the version find gives it, and nothing more is planned.
    UpToDate,
    /// find tells it to update now (within its jitter).
    Now,
    /// The mode in force is disabled or suspended: nothing moves until it is enabled.
    Stopped,
    /// The fleet is frozen: nothing moves until the freeze is lifted.
    Frozen,
    /// The replica answering has lost its store: nothing moves until it is back.
    CutOff,
    /// A version directive governs it: the rollout gives it no version.
    Directive,
    /// It failed the version find names and rolled it back: it does not retry it.
    Skipped,
    /// Its group waits for earlier groups to finish (halt-on-error).
    AfterEarlierGroups,
    /// Its group starts (or, time-based, opens again) at the next window it may start
    /// in (`starts_at`).
    AtWindow,
    /// Its group tests canaries and this host is not one: it follows once they pass.
    AfterCanaries,
    /// Its group is active but backpressure has not reached its place yet.
    Backpressure,
    /// A topology limit of its group holds it: as many hosts sharing its label value
    /// (its zone, its rack) are updating as the limit lets through at once.
    Topology,
    /// The server pins it (`ternctl inventory pin`) until `pinned_until`; `summary` says
    /// what follows.
    Pinned,
    /// The version it would move to is revoked (below its line's signed minimum).
    Revoked,
    /// ternd serves only hosts that pin the release root, and this one pins none.
    Untrusted,
}

/// What the host does with find's answer, in three words: the forecast's outlook and
/// find's answer always give the same one (property-tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It installs another version at its next run.
    UpdateNow,
    /// It has nothing to install: it runs what it should, or no version is named.
    Stays,
    /// A hold keeps it where it is until the hold lifts.
    Held,
}

impl Outlook {
    /// The find verdict this outlook corresponds to (the tests check the two agree).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn verdict(self) -> Verdict {
        match self {
            Outlook::Now => Verdict::UpdateNow,
            Outlook::NoRollout | Outlook::UpToDate | Outlook::Directive => Verdict::Stays,
            _ => Verdict::Held,
        }
    }
}

/// A host's forecast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub outlook: Outlook,
    /// One line for people.
    pub summary: String,
    /// find's hold for this host ([`Hold::code`]), when it is not told to update now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// The group serving it (the catch-all for an unknown or empty group).
    pub serving_group: Option<String>,
    /// It presents a group the rollout lacks (served by the catch-all).
    pub unknown_group: bool,
    pub group_state: Option<GroupState>,
    pub mode: Option<Mode>,
    /// The version find gives it now, and whether it is told to update now.
    pub find_version: Option<String>,
    pub find_update: bool,
    pub target_version: Option<String>,
    /// It is one of its group's canaries.
    pub canary: bool,
    /// Its place in the backpressure order: its numeral in [0, 1], against the group's
    /// progress (admitted below it).
    pub position: f64,
    pub progress: Option<f64>,
    /// Hosts of its group ahead of it in the backpressure order, and of how many
    /// (`None` when no peers were given).
    pub ahead: Option<u64>,
    pub peers: Option<u64>,
    /// The groups before its own that are not done yet (halt-on-error).
    pub waiting_for: Vec<String>,
    /// When its group can start at the earliest (a window opening), if known.
    pub starts_at: Option<Timestamp>,
    /// The next opening of its group's window after `now`.
    pub next_window: Option<Timestamp>,
    pub window_open: bool,
    /// A server-side pin holds it until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_until: Option<Timestamp>,
    /// What the directive governing it does with it, when one does and the server knows
    /// the host's facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directed: Option<Directed>,
}

/// A directive-governed host's outlook: the directive's install asked of the one answer
/// ([`gate::answer`] with [`Ask::Directed`]) and, when its time rules hold it, when
/// they let it start ([`gate::directed_start`]), as the directive pass asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directed {
    /// The directive (of the active version directive) that selects it.
    pub directive: String,
    /// The version it moves the host to (none when no target fits the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub when: DirectedWhen,
    /// When its time rules let it start (`when: at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<Timestamp>,
    /// Every hold on the install ([`Hold::code`]), when it may not start now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// Why no target or installer fits the host (`when: no_fit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// When a directive installs on a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectedWhen {
    /// It runs the directive's target: nothing to install.
    AtTarget,
    /// Nothing holds it: the directive's next pass may pick it (within its rate).
    Now,
    /// Its time rules (not before, its group's window) hold it until `starts_at`.
    At,
    /// Its time rules leave it no instant (the directive expired, or no window is
    /// ahead).
    Never,
    /// A stop or a revoked target holds it until that is lifted.
    Held,
    /// No target or installer fits the host.
    NoFit,
}

/// What the server knows of the host itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostState<'a> {
    /// The version it runs.
    pub version: &'a str,
    /// The version it tried, failed and rolled back (it skips it), if any.
    pub failed_version: Option<&'a str>,
    /// When it may first be picked as a canary (the server has known it for the canary
    /// tenure), if that is still ahead.
    pub canary_eligible_at: Option<Timestamp>,
    /// Its facts as the directive pass reads them (labels, arch, installers…), when the
    /// server has them: with them a directive-governed host's forecast says when it
    /// installs.
    pub directive_facts: Option<&'a HostFacts<'a>>,
}

/// The forecast for `asking` in `fleet` (the instant is the fleet's), running what
/// `host` says. `peers` are the backpressure numerals of the hosts the same group
/// serves (for its place in the backpressure order); pass an empty iterator when
/// unknown.
pub fn forecast(
    fleet: &Fleet<'_>,
    asking: &Host<'_>,
    host: HostState<'_>,
    peers: impl IntoIterator<Item = UpdaterNumeral>,
) -> Forecast {
    let now = fleet.now;
    let decision = gate::answer(fleet, asking, Ask::Find);
    let pinned_until = fleet.pins.until(asking.updater_id, asking.product);
    if let (Some(Hold::Pinned), Some(until)) = (decision.hold(), pinned_until) {
        // What follows the pin: the forecast without it.
        let mut f = forecast(
            &Fleet {
                pins: &NoPins,
                ..*fleet
            },
            asking,
            host,
            peers,
        );
        f.pinned_until = Some(until);
        f.find_update = false;
        f.find_version = decision.version.as_ref().map(ToString::to_string);
        f.hold = Some(Hold::Pinned.code().to_string());
        if !matches!(f.outlook, Outlook::UpToDate | Outlook::NoRollout) {
            f.outlook = Outlook::Pinned;
            f.summary = format!("pinned by the server until {until}; then: {}", f.summary);
        }
        return f;
    }
    let rollout = fleet.rollout;
    let group = gate::counted_group(rollout, asking);
    let updater_id = asking.updater_id;
    let position = UpdaterNumeral::of(updater_id).fraction();
    let mut f = Forecast {
        outlook: Outlook::NoRollout,
        summary: String::new(),
        hold: decision.hold().map(|h| h.code().to_string()),
        serving_group: None,
        unknown_group: false,
        group_state: None,
        mode: None,
        find_version: decision.version.as_ref().map(ToString::to_string),
        find_update: decision.update(),
        target_version: None,
        canary: false,
        position,
        progress: None,
        ahead: None,
        peers: None,
        waiting_for: Vec::new(),
        starts_at: None,
        next_window: None,
        window_open: false,
        pinned_until: None,
        directed: None,
    };
    let served = rollout.and_then(|r| match r.spec.schedule {
        Schedule::Immediate => None,
        Schedule::Regular => r.serving_group(group),
    });
    if let Some(rollout) = rollout {
        f.target_version = Some(rollout.spec.target_version.to_string());
        f.mode = Some(rollout.spec.autoupdate_mode);
        f.unknown_group = Groups::of(rollout).unknown(group).is_some();
    }
    if let (Some(rollout), Some(g)) = (rollout, served) {
        describe_group(&mut f, rollout, g, updater_id, peers, now);
    }
    f.outlook = outlook(&f, &decision, host, now);
    if f.outlook == Outlook::Directive {
        f.directed = host
            .directive_facts
            .and_then(|facts| directed(fleet, asking, facts));
    }
    f.summary = summary(&f, rollout.zip(served).map(|(_, g)| g), host);
    f
}

/// What the active directive does with a host it governs: the install it selects,
/// asked of the one answer under the directive's time rules.
fn directed(fleet: &Fleet<'_>, asking: &Host<'_>, facts: &HostFacts<'_>) -> Option<Directed> {
    let d = fleet.directive?;
    let (directive, target) = match select::select(d.spec, d.installers, facts) {
        Selection::Unmatched => return None,
        Selection::AtTarget { directive, target } => {
            return Some(Directed {
                directive: directive.name.clone(),
                target: Some(target.version.clone()),
                when: DirectedWhen::AtTarget,
                starts_at: None,
                holds: Vec::new(),
                reasons: Vec::new(),
            });
        }
        Selection::NoFit {
            directive,
            target,
            reasons,
        } => {
            return Some(Directed {
                directive: directive.name.clone(),
                target: target.map(|t| t.version.clone()),
                when: DirectedWhen::NoFit,
                starts_at: None,
                holds: Vec::new(),
                reasons,
            });
        }
        Selection::Install {
            directive, target, ..
        } => (directive, target),
    };
    let mut out = Directed {
        directive: directive.name.clone(),
        target: Some(target.version.clone()),
        when: DirectedWhen::Never,
        starts_at: None,
        holds: Vec::new(),
        reasons: Vec::new(),
    };
    let Ok(version) = Version::parse(&target.version) else {
        out.reasons = vec![format!("its target {:?} is not a version", target.version)];
        out.when = DirectedWhen::NoFit;
        return Some(out);
    };
    let timing = d.spec.timing(&directive.name);
    let answer = gate::answer(
        fleet,
        asking,
        Ask::Directed(DirectedInstall {
            target: &version,
            timing,
        }),
    );
    out.holds = answer.holds.codes();
    match gate::directed_start(fleet, asking, timing, &answer) {
        DirectedStart::Now => out.when = DirectedWhen::Now,
        DirectedStart::At(t) => {
            out.when = DirectedWhen::At;
            out.starts_at = Some(t);
        }
        DirectedStart::Never => out.when = DirectedWhen::Never,
        DirectedStart::Held(_) => out.when = DirectedWhen::Held,
    }
    Some(out)
}

/// The group part of a forecast: its state, window, canaries and backpressure place.
fn describe_group(
    f: &mut Forecast,
    rollout: &AutoUpdateAgentRollout,
    g: &RolloutGroup,
    updater_id: &str,
    peers: impl IntoIterator<Item = UpdaterNumeral>,
    now: Timestamp,
) {
    f.serving_group = Some(g.name.clone());
    f.group_state = Some(g.state);
    f.canary = g.canaries.iter().any(|c| c.updater_id == updater_id);
    let w = group_window(&rollout.spec, g);
    f.window_open = w.is_open(now);
    f.next_window = w.next_open(now);
    if g.config.max_in_flight.is_some() {
        f.progress = Some(g.progress);
        let me = UpdaterNumeral::of(updater_id);
        let (mut ahead, mut all) = (0, 0);
        for p in peers {
            all += 1;
            if p < me {
                ahead += 1;
            }
        }
        if all > 0 {
            f.ahead = Some(ahead);
            f.peers = Some(all);
        }
    }
    if g.state == GroupState::Unstarted {
        let index = rollout
            .status
            .groups
            .iter()
            .position(|x| x.name == g.name)
            .unwrap_or(0);
        let before = &rollout.status.groups[..index];
        let halt = rollout.spec.strategy == Strategy::HaltOnError;
        f.waiting_for = before
            .iter()
            .filter(|b| halt && b.state != GroupState::Done)
            .map(|b| b.name.clone())
            .collect();
        if f.waiting_for.is_empty() {
            f.starts_at = crate::domain::reconcile::earliest_start(rollout, index, now);
        }
    } else if g.state == GroupState::Done && rollout.spec.strategy == Strategy::TimeBased {
        f.starts_at = f.next_window;
    }
}

/// The outlook: what the host does with find's answer (the host's own rule), then the
/// hold that keeps it.
fn outlook(f: &Forecast, decision: &Answer, host: HostState<'_>, now: Timestamp) -> Outlook {
    if decision.holds.contains(Hold::Directive) {
        return Outlook::Directive;
    }
    let Some(version) = &decision.version else {
        return Outlook::NoRollout;
    };
    let runs_target = f
        .target_version
        .as_deref()
        .is_some_and(|t| same_version(host.version, t));
    let rolled_back = f.group_state == Some(GroupState::Rolledback);
    let on_find_version = same_version(host.version, &version.to_string());
    // On the target it is done (unless its group rolled back); on the version find
    // names it is done when nothing more is planned for its group.
    if (runs_target && !rolled_back)
        || (on_find_version
            && (decision.holds.is_empty() || rolled_back || f.serving_group.is_none()))
    {
        return Outlook::UpToDate;
    }
    let host_says = host_update::on_find(
        decision,
        (!host.version.is_empty()).then_some(host.version),
        host.failed_version,
        host_update::Health::Unknown,
        now,
    );
    match (host_says, decision.hold()) {
        (host_update::Decision::Update { .. }, _) => Outlook::Now,
        (_, None) => Outlook::Skipped,
        (_, Some(hold)) => match hold {
            Hold::NoRollout => Outlook::NoRollout,
            Hold::ModeDisabled | Hold::ModeSuspended => Outlook::Stopped,
            Hold::Frozen => Outlook::Frozen,
            Hold::CutOff => Outlook::CutOff,
            Hold::Directive => Outlook::Directive,
            Hold::Pinned => Outlook::Pinned,
            Hold::Revoked => Outlook::Revoked,
            Hold::TrustRequired => Outlook::Untrusted,
            Hold::GroupNotStarted if !f.waiting_for.is_empty() => Outlook::AfterEarlierGroups,
            Hold::GroupNotStarted | Hold::OutsideWindow => Outlook::AtWindow,
            Hold::NotACanary => Outlook::AfterCanaries,
            Hold::AwaitingTurn => Outlook::Backpressure,
            Hold::TopologyLimit => Outlook::Topology,
            // Directives' own hold: not one of find's.
            Hold::NotYet | Hold::Expired => Outlook::AtWindow,
        },
    }
}

/// One line on a directive-governed host.
fn directed_summary(d: &Directed) -> String {
    let target = d.target.as_deref().unwrap_or("?");
    let name = &d.directive;
    match d.when {
        DirectedWhen::AtTarget => {
            format!("directive {name} governs this host: it runs {target}, the directive's target")
        }
        DirectedWhen::Now => format!(
            "directive {name} moves it to {target}: nothing holds it, the directive's next pass may pick it (within its rate)"
        ),
        DirectedWhen::At => format!(
            "directive {name} moves it to {target} from {} ({})",
            d.starts_at
                .map_or_else(|| "?".to_string(), |t| t.to_string()),
            d.holds.join(", ")
        ),
        DirectedWhen::Never => format!(
            "directive {name} would move it to {target}, but its time rules leave no instant to start ({})",
            d.holds.join(", ")
        ),
        DirectedWhen::Held => format!(
            "directive {name} moves it to {target} once this is lifted: {}",
            d.holds.join(", ")
        ),
        DirectedWhen::NoFit => format!(
            "directive {name} selects this host but nothing fits it: {}",
            d.reasons.join("; ")
        ),
    }
}

/// Versions as hosts send them may carry a `v`: compared as versions when both parse.
fn same_version(a: &str, b: &str) -> bool {
    match (a.parse::<Version>(), b.parse::<Version>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn summary(f: &Forecast, g: Option<&RolloutGroup>, host: HostState<'_>) -> String {
    let target = f.target_version.as_deref().unwrap_or("?");
    let group = g.map_or("", |g| g.name.as_str());
    let when =
        |t: Option<Timestamp>| t.map_or_else(|| "no window ahead".to_string(), |t| t.to_string());
    match f.outlook {
        Outlook::NoRollout => "no rollout: nothing is planned for this host".into(),
        Outlook::UpToDate => format!(
            "runs {}, the version find gives it: nothing is planned",
            f.find_version.as_deref().unwrap_or("?")
        ),
        Outlook::Now => format!(
            "told to update to {} now{}",
            f.find_version.as_deref().unwrap_or(target),
            if f.canary { " (it is a canary)" } else { "" }
        ),
        Outlook::Stopped => format!(
            "updates are {}: nothing moves until the mode is enabled",
            f.mode.map_or("disabled", Mode::as_str)
        ),
        Outlook::Frozen => {
            "the fleet is frozen: nothing moves until the freeze is lifted".to_string()
        }
        Outlook::CutOff => {
            "this replica has lost its store: it tells no host to update until it is back"
                .to_string()
        }
        Outlook::Directive => match &f.directed {
            None => "a version directive governs this host: the rollout gives it no version".into(),
            Some(d) => directed_summary(d),
        },
        Outlook::Revoked => format!(
            "{target} is revoked (below the signed minimum of its release line): nothing moves to it; roll out a version at or above the minimum"
        ),
        Outlook::Untrusted => {
            "ternd serves only hosts that pin the release root: enable this host with --trust-root"
                .to_string()
        }
        Outlook::Skipped => format!(
            "{} failed on this host and was rolled back: it does not retry it (publish a fix, or `tern-update pin --force-version` on the host)",
            f.find_version.as_deref().unwrap_or(target)
        ),
        Outlook::AfterEarlierGroups => format!(
            "group {group} waits for {} to finish, then its next window (next opening {})",
            f.waiting_for.join(", "),
            when(f.next_window)
        ),
        Outlook::AtWindow if f.group_state == Some(GroupState::Done) => format!(
            "group {group} is outside its window: it updates when the window opens again at {}",
            when(f.starts_at)
        ),
        Outlook::AtWindow => format!(
            "group {group} may start at {} (canary: {})",
            when(f.starts_at),
            if g.is_some_and(|g| g.config.canary_count > 0) {
                "the group first tests canaries"
            } else {
                "no"
            }
        ),
        Outlook::AfterCanaries if g.is_some_and(|g| g.canaries.is_empty()) => format!(
            "group {group} waits for canary candidates (none picked yet){}; this host follows to {target} once they pass",
            match host.canary_eligible_at {
                Some(at) => format!(
                    "; this host may be picked from {} UTC, once ternd has known it for the canary tenure",
                    at.strftime("%Y-%m-%d %H:%M")
                ),
                None => String::new(),
            }
        ),
        Outlook::AfterCanaries => format!(
            "group {group} tests {} canaries; this host follows to {target} once they pass",
            g.map_or(0, |g| g.canaries.len())
        ),
        Outlook::Backpressure => match (f.progress, f.ahead, f.peers) {
            (Some(p), Some(a), Some(n)) => format!(
                "backpressure: its place is {:.1}% ({a} of {n} hosts of {group} ahead), progress {:.1}%: it updates when progress passes its place",
                f.position * 100.0,
                p * 100.0
            ),
            (Some(p), _, _) => format!(
                "backpressure: its place is {:.1}%, progress {:.1}%: it updates when progress passes its place",
                f.position * 100.0,
                p * 100.0
            ),
            _ => format!("group {group} is active: it updates at its next check"),
        },
        Outlook::Pinned => format!("pinned by the server until {}", when(f.pinned_until)),
        Outlook::Topology => format!(
            "topology limit of group {group}: {}; it updates when its turn comes",
            g.map_or_else(String::new, |g| g
                .config
                .topology
                .iter()
                .map(|t| format!("at most {} per {} at once", t.max_in_flight, t.key))
                .collect::<Vec<_>>()
                .join(", "))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::duration::Percent;
    use crate::domain::resource::{Canary, GroupConfig, RolloutSpec, RolloutStatus};
    use crate::domain::window::Day;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn group(name: &str, hour: i64, state: GroupState) -> RolloutGroup {
        RolloutGroup {
            name: name.into(),
            state,
            config: GroupConfig {
                days: vec![Day::parse("*").unwrap()],
                start_hour: Some(hour),
                ..GroupConfig::default()
            },
            ..RolloutGroup::default()
        }
    }

    fn rollout(groups: Vec<RolloutGroup>) -> AutoUpdateAgentRollout {
        AutoUpdateAgentRollout::new(
            RolloutSpec {
                start_version: "1.0.0".parse().unwrap(),
                target_version: "1.1.0".parse().unwrap(),
                schedule: Schedule::Regular,
                autoupdate_mode: Mode::Enabled,
                strategy: Strategy::HaltOnError,
                maintenance_window_duration: None,
                host_group: Default::default(),
            },
            RolloutStatus {
                start_time: Some(at("2026-11-23T08:00:00Z")),
                groups,
                ..RolloutStatus::default()
            },
        )
    }

    /// The forecast of a host with no pin, directive or freeze.
    fn fc(
        r: Option<&AutoUpdateAgentRollout>,
        group: &str,
        updater_id: &str,
        version: &str,
        peers: impl IntoIterator<Item = UpdaterNumeral>,
        now: Timestamp,
    ) -> Forecast {
        forecast(
            &Fleet::new(r, now),
            &Host::new(crate::domain::gate::AGENT, group, updater_id),
            HostState {
                version,
                failed_version: None,
                canary_eligible_at: None,
                directive_facts: None,
            },
            peers,
        )
    }

    const LOW: &str = "10000000-0000-4000-8000-000000000000";
    const HIGH: &str = "e0000000-0000-4000-8000-000000000000";
    const NOW: &str = "2026-11-23T09:00:00Z";

    #[test]
    fn no_rollout_plans_nothing() {
        let f = fc(None, "dev", LOW, "1.0.0", [], at(NOW));
        assert_eq!(f.outlook, Outlook::NoRollout);
    }

    #[test]
    fn a_later_group_waits_for_the_earlier_ones() {
        let r = rollout(vec![
            group("dev", 10, GroupState::Active),
            group("prod", 14, GroupState::Unstarted),
        ]);
        let f = fc(Some(&r), "prod", LOW, "1.0.0", [], at(NOW));
        assert_eq!(f.outlook, Outlook::AfterEarlierGroups);
        assert_eq!(f.waiting_for, vec!["dev".to_string()]);
        assert_eq!(f.next_window, Some(at("2026-11-23T14:00:00Z")));
        assert!(f.summary.contains("dev"), "{}", f.summary);
    }

    #[test]
    fn the_first_group_starts_at_its_window_after_the_wait() {
        let r = rollout(vec![group("dev", 10, GroupState::Unstarted)]);
        let f = fc(Some(&r), "dev", LOW, "1.0.0", [], at(NOW));
        assert_eq!(f.outlook, Outlook::AtWindow);
        assert_eq!(f.starts_at, Some(at("2026-11-23T10:00:00Z")));
        // wait_hours after the previous group's start push it to a later window.
        let mut dev = group("dev", 10, GroupState::Done);
        dev.start_time = Some(at("2026-11-23T10:00:00Z"));
        let mut prod = group("prod", 11, GroupState::Unstarted);
        prod.config.wait_hours = 24;
        let r = rollout(vec![dev, prod]);
        let f = fc(Some(&r), "prod", LOW, "1.0.0", [], at(NOW));
        assert_eq!(f.outlook, Outlook::AtWindow);
        assert_eq!(f.starts_at, Some(at("2026-11-24T11:00:00Z")));
    }

    #[test]
    fn an_unknown_group_is_served_by_the_catch_all() {
        let r = rollout(vec![
            group("dev", 10, GroupState::Active),
            group("prod", 14, GroupState::Unstarted),
        ]);
        let f = fc(Some(&r), "prdo", LOW, "1.0.0", [], at(NOW));
        assert!(f.unknown_group);
        assert_eq!(f.serving_group.as_deref(), Some("prod"));
    }

    #[test]
    fn canaries_update_first_and_the_rest_follow() {
        let mut dev = group("dev", 8, GroupState::Canary);
        dev.config.canary_count = 1;
        dev.canaries = vec![Canary {
            updater_id: LOW.into(),
            ..Canary::default()
        }];
        let r = rollout(vec![dev]);
        let canary = fc(Some(&r), "dev", LOW, "1.0.0", [], at(NOW));
        assert!(canary.canary);
        assert_eq!(canary.outlook, Outlook::Now);
        let other = fc(Some(&r), "dev", HIGH, "1.0.0", [], at(NOW));
        assert!(!other.canary);
        assert_eq!(other.outlook, Outlook::AfterCanaries);
    }

    #[test]
    fn backpressure_places_the_host_among_its_peers() {
        let mut dev = group("dev", 8, GroupState::Active);
        dev.config.max_in_flight = Some(Percent::from_percent(10));
        dev.progress = 0.5;
        let r = rollout(vec![dev]);
        let peers = [LOW, HIGH, "f0000000-0000-4000-8000-000000000000"].map(UpdaterNumeral::of);
        let low = fc(Some(&r), "dev", LOW, "1.0.0", peers, at(NOW));
        assert_eq!(low.outlook, Outlook::Now, "find admits it under 0.5");
        let high = fc(Some(&r), "dev", HIGH, "1.0.0", peers, at(NOW));
        assert_eq!(high.outlook, Outlook::Backpressure);
        assert_eq!((high.ahead, high.peers), (Some(1), Some(3)));
        assert!(high.position > 0.5 && high.progress == Some(0.5));
    }

    #[test]
    fn a_topology_limit_holding_the_host_is_named() {
        use crate::domain::resource::{TopologyAdmission, TopologyLimit};
        let mut dev = group("dev", 8, GroupState::Active);
        dev.config.max_in_flight = Some(Percent::from_percent(10));
        dev.progress = 1.0;
        dev.config.topology = vec![TopologyLimit {
            key: "zone".into(),
            max_in_flight: 1,
        }];
        dev.topology = vec![TopologyAdmission {
            key: "zone".into(),
            admitted: vec![LOW.into()],
            ..TopologyAdmission::default()
        }];
        let r = rollout(vec![dev.clone()]);
        assert_eq!(
            fc(Some(&r), "dev", LOW, "1.0.0", [], at(NOW)).outlook,
            Outlook::Now
        );
        let high = fc(Some(&r), "dev", HIGH, "1.0.0", [], at(NOW));
        assert_eq!(high.outlook, Outlook::Topology);
        assert!(!high.find_update);
        assert!(
            high.summary.contains("at most 1 per zone at once"),
            "{}",
            high.summary
        );
        // Under progress it is backpressure that holds it, not the limit.
        dev.progress = 0.0;
        let r = rollout(vec![dev.clone()]);
        let high = fc(Some(&r), "dev", HIGH, "1.0.0", [], at(NOW));
        assert_eq!(high.outlook, Outlook::Backpressure);
        // A done halt-on-error group still limits the hosts it tells to update.
        dev.state = GroupState::Done;
        let r = rollout(vec![dev]);
        let high = fc(Some(&r), "dev", HIGH, "1.0.0", [], at(NOW));
        assert_eq!(high.outlook, Outlook::Topology);
    }

    #[test]
    fn the_forecast_agrees_with_find() {
        let mut dev = group("dev", 8, GroupState::Active);
        dev.config.max_in_flight = Some(Percent::from_percent(10));
        dev.progress = 0.3;
        let r = rollout(vec![dev, group("prod", 14, GroupState::Unstarted)]);
        for id in [LOW, HIGH, "host-a", ""] {
            for g in ["dev", "prod", "other", ""] {
                let f = fc(Some(&r), g, id, "1.0.0", [], at(NOW));
                let d = gate::answer(
                    &Fleet::new(Some(&r), at(NOW)),
                    &Host::new(gate::AGENT, g, id),
                    Ask::Find,
                );
                assert_eq!(f.outlook == Outlook::Now, d.update(), "{g} {id}: {f:?}");
            }
        }
    }

    #[test]
    fn a_suspended_rollout_stops_everyone() {
        let mut r = rollout(vec![group("dev", 8, GroupState::Active)]);
        r.spec.autoupdate_mode = Mode::Suspended;
        let f = fc(Some(&r), "dev", LOW, "1.0.0", [], at(NOW));
        assert_eq!(f.outlook, Outlook::Stopped);
        let done = fc(Some(&r), "dev", LOW, "1.1.0", [], at(NOW));
        assert_eq!(done.outlook, Outlook::UpToDate);
    }

    /// What a test changes of a host's fleet.
    #[derive(Default)]
    struct Change {
        pinned_until: Option<Timestamp>,
        governed: bool,
        frozen: bool,
    }

    fn with(
        r: &AutoUpdateAgentRollout,
        updater_id: &str,
        version: &str,
        failed_version: Option<&str>,
        change: impl FnOnce(&mut Change),
        now: Timestamp,
    ) -> Forecast {
        let mut c = Change::default();
        change(&mut c);
        let pins: std::collections::BTreeMap<String, Timestamp> = c
            .pinned_until
            .map(|t| (updater_id.to_string(), t))
            .into_iter()
            .collect();
        let freeze = crate::domain::api::Freeze {
            reason: "test".into(),
            since: now,
            by: "t".into(),
            products: Vec::new(),
        };
        let (spec, installers) = (
            crate::domain::directive::resource::DirectiveSpec::default(),
            std::collections::BTreeMap::new(),
        );
        let fleet = Fleet {
            pins: &pins,
            freeze: c.frozen.then_some(&freeze),
            directive: c.governed.then_some(crate::domain::gate::Directive {
                spec: &spec,
                installers: &installers,
            }),
            ..Fleet::new(Some(r), now)
        };
        let mut host = Host::new(crate::domain::gate::AGENT, "dev", updater_id);
        host.recorded.governed = c.governed;
        forecast(
            &fleet,
            &host,
            HostState {
                version,
                failed_version,
                canary_eligible_at: None,
                directive_facts: None,
            },
            [],
        )
    }

    #[test]
    fn a_pinned_host_is_told_to_wait_until_the_pin_lifts() {
        let r = rollout(vec![group("dev", 10, GroupState::Active)]);
        let now = at("2026-11-23T10:30:00Z");
        let free = fc(Some(&r), "dev", LOW, "1.0.0", [], now);
        assert_eq!(free.outlook, Outlook::Now);
        let until = at("2026-12-01T00:00:00Z");
        let f = with(
            &r,
            LOW,
            "1.0.0",
            None,
            |i| i.pinned_until = Some(until),
            now,
        );
        assert_eq!(f.outlook, Outlook::Pinned);
        assert!(!f.find_update);
        assert_eq!(f.hold.as_deref(), Some("pinned"));
        assert_eq!(f.pinned_until, Some(until));
        assert!(
            f.summary.starts_with(
                "pinned by the server until 2026-12-01T00:00:00Z; then: told to update"
            ),
            "{}",
            f.summary
        );
        // Lifted (the leader deleted it): the group's forecast again, whatever the
        // time; and a host on the target stays up to date.
        assert_eq!(
            with(&r, LOW, "1.0.0", None, |i| i.pinned_until = None, until),
            fc(Some(&r), "dev", LOW, "1.0.0", [], until)
        );
        let done = with(
            &r,
            LOW,
            "1.1.0",
            None,
            |i| i.pinned_until = Some(until),
            now,
        );
        assert_eq!(done.outlook, Outlook::UpToDate);
    }

    #[test]
    fn a_directive_a_freeze_and_a_failed_canary_are_what_find_and_the_host_say() {
        let mut dev = group("dev", 8, GroupState::Canary);
        dev.config.canary_count = 1;
        dev.canaries = vec![Canary {
            updater_id: LOW.into(),
            ..Canary::default()
        }];
        let r = rollout(vec![dev]);
        let now = at(NOW);
        let governed = with(&r, LOW, "1.0.0", None, |i| i.governed = true, now);
        assert_eq!(governed.outlook, Outlook::Directive);
        assert_eq!(governed.find_version, None);
        assert!(
            !governed.summary.contains("update now"),
            "{}",
            governed.summary
        );
        let mut frozen_r = r.clone();
        frozen_r.spec.autoupdate_mode = Mode::Suspended;
        let frozen = with(&frozen_r, LOW, "1.0.0", None, |i| i.frozen = true, now);
        assert_eq!(frozen.outlook, Outlook::Frozen);
        assert_eq!(frozen.hold.as_deref(), Some("frozen"));
        // The canary rolled 1.1.0 back: find still names it, the host skips it.
        let failed = with(&r, LOW, "1.0.0", Some("1.1.0"), |_| {}, now);
        assert_eq!(failed.outlook, Outlook::Skipped);
        assert!(
            failed.summary.contains("does not retry"),
            "{}",
            failed.summary
        );
        assert!(!failed.summary.contains("now"), "{}", failed.summary);
    }
}
