//! What a host does with the version it is told to run, whichever way it is told:
//! by find (the rollout decides when the group updates) or by a channel (seed 001: the
//! host updates in its maintenance window, or at once when the channel says the update
//! is critical). Both modes share the rules that let a host act before its turn:
//! - a host behind and outside the compatibility window of the version it should run
//!   (seed 000: "if you are not within your compat. window attempt to upgrade right
//!   away");
//! - an unhealthy agent (seed 001: "permitted to be upgraded outside of the
//!   maintenance window in an attempt to become healthy"), at most once per
//!   [`FORCED_ATTEMPT_INTERVAL`] (the seed's one to two attempts an hour).
//!
//! Under find these shortcuts never go through the server's holds: a stop (no rollout,
//! mode not enabled, freeze, server pin, directive, revoked version, replica cut off)
//! is final for every path, and a schedule hold is final for the shortcuts but one:
//! while its group tests canaries a host may be repaired to the group's start version
//! ([`crate::domain::hold::Hold`]). A person on the host (`update --now`) may jump a schedule
//! hold, never a stop. A host with nothing installed takes, under a stop, the last
//! known-good version the server names, and only from a server that lists its holds.
//!
//! A channel adds seed 001's answers (`version`, `critical`) and one refusal: never a
//! major-version downgrade; with no maintenance window known it holds all but a
//! critical version. tern-update gathers the inputs (HTTP, the service's state, the
//! clock); this module decides.

use jiff::{SignedDuration, Timestamp};

use crate::domain::gate::Answer;
use crate::domain::hold::{Hold, Holds};
use crate::domain::version::{Version, is_compatible};
use crate::domain::wire::{AgentSchedule, AutoUpdateSettings};

/// The shortest time between two updates started outside the window because the agent
/// is unhealthy: with a run every minute, one to two attempts an hour (seed 001).
pub const FORCED_ATTEMPT_INTERVAL: SignedDuration = SignedDuration::from_mins(30);

/// What the channel's `version` endpoint gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionAnswer {
    /// A semantic version (seed 001: "Semver string (e.g. `1.2.3`)").
    Version(Version),
    /// No answer: connection refused, timeout, a non-200 status (404, 503, …).
    Unreachable(String),
    /// An answer that is not a version.
    Malformed(String),
}

impl VersionAnswer {
    /// Reads the body of a 200 answer: one version, surrounding whitespace ignored.
    pub fn from_body(body: &str) -> Self {
        let text = body.trim();
        if text.is_empty() || text.len() > 128 || text.contains(char::is_whitespace) {
            return Self::Malformed(format!("{:?} is not a version", truncate(text)));
        }
        match Version::parse(text) {
            Ok(v) => Self::Version(v),
            Err(e) => Self::Malformed(e.to_string()),
        }
    }
}

/// What the channel's `critical` endpoint gave. Seed 001: "The string `yes` indicates
/// that we are in a critical update state. Any other value is treated as non-critical";
/// "if the `critical` endpoint is unavailable, updates should be assumed to be
/// non-critical".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CriticalAnswer {
    Yes,
    /// Anything else, kept (shortened) for `status`.
    Other(String),
    Unreachable(String),
}

impl CriticalAnswer {
    /// Reads the body of a 200 answer. Only `yes` (whitespace around it ignored) is
    /// critical; case matters, as in the seed's `[[ "$CRITICAL" == "yes" ]]`.
    pub fn from_body(body: &str) -> Self {
        let text = body.trim();
        if text == "yes" {
            Self::Yes
        } else {
            Self::Other(truncate(text))
        }
    }

    pub fn is_critical(&self) -> bool {
        matches!(self, Self::Yes)
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Where the host's maintenance window stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    Open,
    /// Closed; when it next opens, if known.
    Closed {
        next: Option<Timestamp>,
    },
    /// No window is known (no schedule received yet): as closed, with no opening.
    Unknown,
}

impl WindowState {
    /// Where the window of the schedule ternd sent stands at `now`. No schedule (none
    /// received yet, or no ternd to send one) or one whose window cannot be built is no
    /// window: `Unknown`, never assumed open (seed 001: the window is the cluster's),
    /// so that only a critical version goes.
    pub fn of(schedule: Option<&AgentSchedule>, now: Timestamp) -> WindowState {
        match schedule.map(AgentSchedule::window) {
            Some(Ok(w)) if w.is_open(now) => WindowState::Open,
            Some(Ok(w)) => WindowState::Closed {
                next: w.next_open(now),
            },
            Some(Err(_)) | None => WindowState::Unknown,
        }
    }
}

/// What find's answer lets the host do with the version it names, read from the
/// wire (`agent_auto_update`, `agent_holds`, `agent_hold`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindGate {
    /// Update now.
    Now,
    /// Not now, and every reason why.
    Held {
        holds: Holds,
        /// A hold this host does not know (a newer server): taken as a stop.
        unknown: Option<String>,
        /// The server listed every hold (`agent_holds`): it names the last known-good
        /// version under a stop, so a first install may take it.
        listed: bool,
    },
    /// Not now, no reason given (Teleport's find, a ternd that predates holds): no
    /// shortcut; a person on the host may still ask for it.
    Unspecified,
}

impl FindGate {
    /// Reads the answer; every hold the server names counts, and a hold named while
    /// the answer also says "update now" wins (an answer that contradicts itself is
    /// read the safe way).
    pub fn of(settings: &AutoUpdateSettings) -> Self {
        let listed = !settings.agent_holds.is_empty();
        let codes: Vec<&str> = if listed {
            settings.agent_holds.iter().map(|c| c.trim()).collect()
        } else {
            vec![settings.agent_hold.trim()]
        };
        let mut holds = Holds::NONE;
        let mut unknown = None;
        for code in codes.into_iter().filter(|c| !c.is_empty()).take(32) {
            match Hold::from_code(code) {
                Some(h) => holds.add(h),
                None => {
                    unknown.get_or_insert_with(|| crate::domain::text::excerpt(code, 64));
                }
            }
        }
        if holds.is_empty() && unknown.is_none() {
            return if settings.agent_auto_update {
                FindGate::Now
            } else {
                FindGate::Unspecified
            };
        }
        FindGate::Held {
            holds,
            unknown,
            listed,
        }
    }

    /// The gate of one hold (tests, and callers holding a single code).
    pub fn held(hold: Hold) -> Self {
        FindGate::Held {
            holds: Holds::of([hold]),
            unknown: None,
            listed: true,
        }
    }

    /// Whether this answer, given for one product of the host (its agent), holds the
    /// host's other products too, when those are served by another ternd (the
    /// updater's own releases, docs/updater.md): a freeze (the fleet's kill switch), a
    /// server pin of the host, a replica cut off from its store (a freeze may have been
    /// written meanwhile), or a hold this host does not know, whichever other holds
    /// come with it. A rollout's own state or mode is that product's alone.
    pub fn stops_every_product(&self) -> bool {
        match self {
            FindGate::Held { holds, unknown, .. } => {
                unknown.is_some() || holds.iter().any(Hold::stops_the_host)
            }
            FindGate::Now | FindGate::Unspecified => false,
        }
    }

    /// Whether nothing of this host's may install against it.
    pub fn stops(&self) -> bool {
        match self {
            FindGate::Held { holds, unknown, .. } => unknown.is_some() || holds.stops(),
            FindGate::Now | FindGate::Unspecified => false,
        }
    }

    fn allows_repair(&self) -> bool {
        matches!(self, FindGate::Held { holds, unknown: None, .. } if holds.allow_repair())
    }

    /// Under a stop, whether the version named is the fleet's last known-good one (a
    /// server that lists its holds names no other under a stop).
    fn names_known_good(&self) -> bool {
        matches!(self, FindGate::Held { listed: true, .. })
    }

    fn why(&self) -> String {
        match self {
            FindGate::Now => "the server says update now".into(),
            FindGate::Held { holds, unknown, .. } => {
                let mut parts: Vec<String> = holds
                    .iter()
                    .map(|h| format!("{} [{}]", h.describe(), h.code()))
                    .collect();
                if let Some(code) = unknown {
                    parts.push(format!("the server holds it ({code})"));
                }
                parts.join("; ")
            }
            FindGate::Unspecified => "the server says not now".into(),
        }
    }
}

/// What the host's updater observed of the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Not running, crash-looping, failing its health URL, or reporting itself so.
    Unhealthy(String),
    /// Nothing to observe (no service configured, nothing installed).
    Unknown,
}

/// Where the version comes from, and what the source says about timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// find: the version (may be empty: no rollout, or a directive governs the host)
    /// and what the answer lets the host do with it.
    Find { version: String, gate: FindGate },
    /// A channel: its two answers, and the host's own maintenance window.
    Channel {
        version: VersionAnswer,
        critical: CriticalAnswer,
        window: WindowState,
    },
}

/// Everything the decision needs; versions as the host names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs<'a> {
    pub source: Source,
    pub active: Option<&'a str>,
    /// A version that failed here and is not retried automatically.
    pub skip: Option<&'a str>,
    pub health: Health,
    /// When this host last started an update outside its window because the agent was
    /// unhealthy.
    pub last_forced_attempt: Option<Timestamp>,
    /// A person on the host asked to update now (`update --now`): a closed window or
    /// a schedule hold does not wait; a stop still holds.
    pub asked_now: bool,
    pub now: Timestamp,
}

/// Why a host updates now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Nothing is installed yet: install what the source names.
    NotInstalled,
    /// find says the group updates now.
    Rollout,
    /// The channel says `critical: yes`.
    Critical,
    /// Inside the host's maintenance window.
    Window,
    /// The agent is unhealthy; the string says how.
    Unhealthy(String),
    /// The installed version is outside the compatibility window of the target.
    Incompatible,
    /// Someone on the host asked for this version (`pin --force-version`).
    Forced,
    /// Someone on the host asked to update now (`update --now`).
    AskedNow,
}

impl Trigger {
    /// Whether this update starts outside the maintenance window because the agent is
    /// unhealthy (the caller records when, for [`FORCED_ATTEMPT_INTERVAL`]).
    pub fn is_forced_by_health(&self) -> bool {
        matches!(self, Self::Unhealthy(_))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Install `target` (the source's version, normalized) now.
    Update { target: String, trigger: Trigger },
    /// Nothing to do; the string says why (already on the target, no usable version,
    /// a version that failed here before).
    Hold(String),
    /// The target is due but not now (the group is not updating, the window is
    /// closed, a forced try was made recently); the string says why. A person may
    /// override it, which is the caller's to say how.
    Wait(String),
    /// The source asks for something this host must not do; the string says what.
    Refused(String),
}

/// What a host following find does with `answer` when nobody on the host asks for
/// anything: tern-update's decision, for those who stand in for hosts (the simulator,
/// the planner's replay, the forecast of a host's page).
pub fn on_find(
    answer: &Answer,
    active: Option<&str>,
    skip: Option<&str>,
    health: Health,
    now: Timestamp,
) -> Decision {
    let settings = answer.settings();
    decide(&Inputs {
        source: Source::Find {
            gate: FindGate::of(&settings),
            version: settings.agent_version,
        },
        active,
        skip,
        health,
        last_forced_attempt: None,
        asked_now: false,
        now,
    })
}

/// Whether a directive's install instruction for another product of the host (the
/// updater's own releases) first asks the agents' ternd, whose stop of the whole host
/// ([`FindGate::stops_every_product`]) holds it, as find's answer does: whatever its
/// installer, tern-update's own or a local script. A dry run changes nothing on the
/// host: it goes.
pub fn instruction_waits_for_agents(
    instruction: &crate::domain::install::InstallInstruction,
) -> bool {
    if instruction.dry_run {
        return false;
    }
    let script =
        instruction.installer.installer_type == crate::domain::install::InstallerType::LocalScript;
    !(script && crate::planted!(ScriptSkipsAgentsStop))
}

/// The decision. Versions are compared after [`crate::domain::version::normalize`]; the
/// caller maps the target to the name it installs under.
pub fn decide(i: &Inputs<'_>) -> Decision {
    let (target, critical, window) = match &i.source {
        Source::Find { version, gate } => {
            if version.trim().is_empty() {
                let why = match gate {
                    FindGate::Held { holds, .. } if !holds.is_empty() => format!(
                        " ({})",
                        holds
                            .iter()
                            .map(Hold::describe)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    _ => String::new(),
                };
                return Decision::Hold(format!(
                    "the server gives no agent version for this host{why}"
                ));
            }
            (
                crate::domain::version::normalize(version),
                false,
                WindowState::Unknown,
            )
        }
        Source::Channel {
            version,
            critical,
            window,
        } => match version {
            VersionAnswer::Version(v) => (v.to_string(), critical.is_critical(), *window),
            VersionAnswer::Unreachable(why) => {
                return Decision::Hold(format!(
                    "the channel's version is unavailable ({why}): no update is attempted"
                ));
            }
            VersionAnswer::Malformed(why) => {
                return Decision::Hold(format!(
                    "the channel's version is not usable ({why}): no update is attempted"
                ));
            }
        },
    };
    let channel = matches!(i.source, Source::Channel { .. });
    let Some(active) = i.active.map(crate::domain::version::normalize) else {
        // A first install (enrolling the host) takes the version the source names:
        // under a stop, only the last known-good version a listing server names (an
        // older one may name the target the stop holds back).
        if let Source::Find { gate, .. } = &i.source
            && gate.stops()
            && !gate.names_known_good()
        {
            return Decision::Hold(format!(
                "nothing is installed and the server holds every install ({}) without naming a known-good version: nothing installs until the hold lifts",
                gate.why()
            ));
        }
        return Decision::Update {
            target,
            trigger: Trigger::NotInstalled,
        };
    };
    if active == target {
        // Under a stop the server names the last known-good version: say what holds
        // the host, not only that it runs that version.
        if let Source::Find { gate, .. } = &i.source
            && gate.stops()
        {
            let unhealthy = match &i.health {
                Health::Unhealthy(how) => format!(
                    "; the agent is unhealthy ({how}), but nothing installs through this hold"
                ),
                _ => String::new(),
            };
            return Decision::Hold(format!(
                "already on {target}, and the server holds this host there: {}{unhealthy}",
                gate.why()
            ));
        }
        return Decision::Hold(format!("already on {target}"));
    }
    let parsed = (Version::parse(&active).ok(), Version::parse(&target).ok());
    if channel
        && let (Some(a), Some(t)) = &parsed
        && t.0.major < a.0.major
    {
        return Decision::Refused(format!(
            "the channel asks for {target}, a major-version downgrade from {active}: refused (move hosts across majors with `tern-update pin --force-version`)"
        ));
    }
    if i.skip.map(crate::domain::version::normalize).as_deref() == Some(target.as_str()) {
        return Decision::Hold(format!(
            "{target} failed on this host before and is skipped; install it with `tern-update pin --force-version {target}` or wait for another version"
        ));
    }
    let update = |trigger| Decision::Update {
        target: target.clone(),
        trigger,
    };
    // Seed 000 says "upgrade": a host behind, too far to work with its group. One
    // ahead of its group waits for it (a downgrade across majors is an operator's call).
    let incompatible = matches!(&parsed, (Some(a), Some(t)) if t > a && !is_compatible(a, t, true));
    if let Source::Find { gate, .. } = &i.source {
        return find_decision(i, gate, &target, &active, incompatible, update);
    }
    if critical {
        return update(Trigger::Critical);
    }
    if incompatible {
        return update(Trigger::Incompatible);
    }
    if window == WindowState::Open {
        return update(Trigger::Window);
    }
    if i.asked_now {
        return update(Trigger::AskedNow);
    }
    if window == WindowState::Unknown {
        // Seed 001: the window is the cluster's; with none known only a critical
        // version goes (and nothing on an unhealthy agent's account: repairing it is
        // an update outside a window nobody has given).
        return Decision::Wait(format!(
            "the channel wants {target}, not critical; no maintenance window is known (ternd has not sent this host's schedule): only a critical version installs until it does"
        ));
    }
    if let Some(wait) = unhealthy_retry_wait(i) {
        return wait;
    }
    if let Health::Unhealthy(how) = &i.health {
        return update(Trigger::Unhealthy(how.clone()));
    }
    Decision::Wait(match window {
        WindowState::Closed { next: Some(next) } => format!(
            "the channel wants {target}, not critical; outside the maintenance window, which opens at {next}"
        ),
        _ => format!("the channel wants {target}, not critical; outside the maintenance window"),
    })
}

/// A find host that is not told to update now: the server's hold decides what its
/// shortcuts may do.
fn find_decision(
    i: &Inputs<'_>,
    gate: &FindGate,
    target: &str,
    active: &str,
    incompatible: bool,
    update: impl Fn(Trigger) -> Decision,
) -> Decision {
    if *gate == FindGate::Now {
        return update(Trigger::Rollout);
    }
    if crate::planted!(NowThroughStop) && i.asked_now {
        return update(Trigger::AskedNow);
    }
    if crate::planted!(RepairThroughStop)
        && let Health::Unhealthy(how) = &i.health
    {
        return update(Trigger::Unhealthy(how.clone()));
    }
    let why = gate.why();
    let unhealthy = match &i.health {
        Health::Unhealthy(how) => {
            format!("; the agent is unhealthy ({how}), but nothing installs through this hold")
        }
        _ => String::new(),
    };
    if gate.stops() {
        let operator = if incompatible {
            format!(
                "; {active} is outside the compatibility window of {target}: it needs an operator"
            )
        } else {
            String::new()
        };
        return Decision::Hold(format!(
            "the server holds this host on {active} instead of {target}: {why}{unhealthy}{operator}"
        ));
    }
    if i.asked_now {
        return update(Trigger::AskedNow);
    }
    if gate.allows_repair() {
        if incompatible {
            return update(Trigger::Incompatible);
        }
        if let Some(wait) = unhealthy_retry_wait(i) {
            return wait;
        }
        if let Health::Unhealthy(how) = &i.health {
            return update(Trigger::Unhealthy(how.clone()));
        }
    }
    let shortcut = match (&i.health, incompatible) {
        (_, true) if !gate.allows_repair() => format!(
            "; {active} is outside the compatibility window of {target}, but the server holds it: it needs an operator (`tern-update update --now`)"
        ),
        (Health::Unhealthy(_), _) if !gate.allows_repair() => unhealthy,
        _ => String::new(),
    };
    Decision::Wait(format!(
        "the server wants {target} but not now: {why}{shortcut}"
    ))
}

/// When an unhealthy agent's update outside its turn was tried too recently: the
/// wait, saying when the next try is.
fn unhealthy_retry_wait(i: &Inputs<'_>) -> Option<Decision> {
    let Health::Unhealthy(how) = &i.health else {
        return None;
    };
    let last = i.last_forced_attempt?;
    let next = last
        .checked_add(FORCED_ATTEMPT_INTERVAL)
        .ok()
        .filter(|&next| next > i.now)?;
    Some(Decision::Wait(format!(
        "the agent is unhealthy ({how}) but an update outside the window was tried at {last}; the next try is after {next}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::window::Day;

    fn schedule(days: Vec<Day>) -> AgentSchedule {
        AgentSchedule {
            group: "dev".into(),
            days,
            start_hour: 10,
            duration_seconds: 3600,
            on_calendar: None,
            windows: Vec::new(),
            calendar: None,
            on_calendars: Vec::new(),
        }
    }

    #[test]
    fn the_window_of_a_schedule_is_open_closed_or_unknown() {
        // 2026-11-23 is a Monday.
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let monday = schedule(vec![Day::parse("Mon").unwrap()]);
        assert_eq!(
            WindowState::of(Some(&monday), at("2026-11-23T10:30:00Z")),
            WindowState::Open
        );
        assert_eq!(
            WindowState::of(Some(&monday), at("2026-11-23T12:00:00Z")),
            WindowState::Closed {
                next: Some(at("2026-11-30T10:00:00Z"))
            }
        );
        assert_eq!(
            WindowState::of(None, at("2026-11-23T10:30:00Z")),
            WindowState::Unknown,
            "no schedule is no window"
        );
        assert_eq!(
            WindowState::of(Some(&schedule(Vec::new())), at("2026-11-23T10:30:00Z")),
            WindowState::Unknown,
            "an unusable schedule is no window"
        );
    }
}
