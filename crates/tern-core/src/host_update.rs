//! What a host does with the version it is told to run, whichever way it is told:
//! by find (the rollout decides when the group updates) or by a channel (seed 001: the
//! host updates in its maintenance window, or at once when the channel says the update
//! is critical). Both modes share the rules that let a host act outside its window:
//! - a host behind and outside the compatibility window of the version it should run
//!   (seed 000: "if you are not within your compat. window attempt to upgrade right
//!   away");
//! - an unhealthy agent (seed 001: "permitted to be upgraded outside of the
//!   maintenance window in an attempt to become healthy"), at most once per
//!   [`FORCED_ATTEMPT_INTERVAL`] (the seed's one to two attempts an hour).
//!
//! A channel adds seed 001's answers (`version`, `critical`) and one refusal: never a
//! major-version downgrade. tern-update gathers the inputs (HTTP, the service's state,
//! the clock); this module decides.

use jiff::{SignedDuration, Timestamp};

use crate::version::{Version, is_compatible};

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
    /// find: the version (may be empty: no rollout) and whether the group updates now.
    Find { version: String, update_now: bool },
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

/// The decision. Versions are compared after [`crate::version::normalize`]; the
/// caller maps the target to the name it installs under.
pub fn decide(i: &Inputs<'_>) -> Decision {
    let (target, critical, window) = match &i.source {
        Source::Find {
            version,
            update_now,
        } => {
            if version.trim().is_empty() {
                return Decision::Hold("the server gives no agent version for this host (its group has none, or a version directive governs it)".into());
            }
            let w = if *update_now {
                WindowState::Open
            } else {
                WindowState::Closed { next: None }
            };
            (crate::version::normalize(version), false, w)
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
    let Some(active) = i.active.map(crate::version::normalize) else {
        return Decision::Update {
            target,
            trigger: Trigger::NotInstalled,
        };
    };
    if active == target {
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
    if i.skip.map(crate::version::normalize).as_deref() == Some(target.as_str()) {
        return Decision::Hold(format!(
            "{target} failed on this host before and is skipped; install it with `tern-update pin --force-version {target}` or wait for another version"
        ));
    }
    let update = |trigger| Decision::Update {
        target: target.clone(),
        trigger,
    };
    if critical {
        return update(Trigger::Critical);
    }
    // Seed 000 says "upgrade": a host behind, too far to work with its group. One
    // ahead of its group waits for it (a downgrade across majors is an operator's call).
    if let (Some(a), Some(t)) = &parsed
        && t > a
        && !is_compatible(a, t, true)
    {
        return update(Trigger::Incompatible);
    }
    if window == WindowState::Open {
        return update(if channel {
            Trigger::Window
        } else {
            Trigger::Rollout
        });
    }
    if let Health::Unhealthy(how) = &i.health {
        let next = i
            .last_forced_attempt
            .and_then(|t| t.checked_add(FORCED_ATTEMPT_INTERVAL).ok())
            .filter(|&next| next > i.now);
        return match next {
            None => update(Trigger::Unhealthy(how.clone())),
            Some(next) => Decision::Wait(format!(
                "the agent is unhealthy ({how}) but an update outside the window was tried at {}; the next try is after {next}",
                i.last_forced_attempt
                    .map_or_else(String::new, |t| t.to_string())
            )),
        };
    }
    Decision::Wait(match (channel, window) {
        (false, _) => format!("the server wants {target} but this group is not updating now"),
        (true, WindowState::Closed { next: Some(next) }) => format!(
            "the channel wants {target}, not critical; outside the maintenance window, which opens at {next}"
        ),
        (true, _) => {
            format!("the channel wants {target}, not critical; outside the maintenance window")
        }
    })
}
