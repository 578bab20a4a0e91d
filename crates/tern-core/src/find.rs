//! The find decision: what version a host should run, whether it should update now,
//! and when not, why ([`Hold`]). [`answer`] is the whole answer ternd gives (the
//! rollout table of [`decide`], then a freeze, a version directive governing the
//! host, a server-side pin); the host side ([`crate::host_update`]) reads the hold
//! back from the wire, and no shortcut of a host goes through a hold that stops.

use jiff::Timestamp;

use crate::backpressure::UpdaterNumeral;
use crate::resource::{AutoUpdateAgentRollout, GroupState, Mode, Schedule, Strategy};
use crate::rollout;
use crate::version::Version;
use crate::wire::AutoUpdateSettings;

/// Jitter when a group has no backpressure: spread the herd over a minute.
pub const DEFAULT_JITTER_SECONDS: u64 = 60;
/// Jitter under backpressure: progress already spreads the herd.
pub const BACKPRESSURE_JITTER_SECONDS: u64 = 10;

/// Why find tells a host not to update now. Each has a stable code, sent to the host
/// as `agent_hold` and shown by every view.
///
/// Two kinds: a **stop** (the fleet is not updating this host at all: no rollout, the
/// mode in force is not enabled, a freeze, a server-side pin, a version directive) is
/// final for every path of the host, `update --now` included; a **schedule** hold
/// (not this host's turn yet) is final for the host's own shortcuts (an unhealthy or
/// incompatible agent), except [`Hold::NotACanary`], the one hold under which the
/// group is updating and the version named is the one its hosts run (the start
/// version): an unhealthy agent may be repaired to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hold {
    NoRollout,
    ModeDisabled,
    ModeSuspended,
    Frozen,
    Pinned,
    Directive,
    CutOff,
    GroupNotStarted,
    NotACanary,
    AwaitingTurn,
    TopologyLimit,
    OutsideWindow,
}

impl Hold {
    pub const ALL: [Hold; 12] = [
        Hold::NoRollout,
        Hold::ModeDisabled,
        Hold::ModeSuspended,
        Hold::Frozen,
        Hold::Pinned,
        Hold::Directive,
        Hold::CutOff,
        Hold::GroupNotStarted,
        Hold::NotACanary,
        Hold::AwaitingTurn,
        Hold::TopologyLimit,
        Hold::OutsideWindow,
    ];

    /// The stable code (`agent_hold`, views, metrics). Never renamed.
    pub fn code(self) -> &'static str {
        match self {
            Hold::NoRollout => "no_rollout",
            Hold::ModeDisabled => "mode_disabled",
            Hold::ModeSuspended => "mode_suspended",
            Hold::Frozen => "frozen",
            Hold::Pinned => "pinned",
            Hold::Directive => "directive",
            Hold::CutOff => "replica_cut_off",
            Hold::GroupNotStarted => "group_not_started",
            Hold::NotACanary => "not_a_canary",
            Hold::AwaitingTurn => "awaiting_turn",
            Hold::TopologyLimit => "topology_limit",
            Hold::OutsideWindow => "outside_window",
        }
    }

    pub(crate) fn from_code(code: &str) -> Option<Hold> {
        Hold::ALL.into_iter().find(|h| h.code() == code)
    }

    /// The fleet does not update this host at all: final for every path of the host.
    pub fn is_stop(self) -> bool {
        matches!(
            self,
            Hold::NoRollout
                | Hold::ModeDisabled
                | Hold::ModeSuspended
                | Hold::Frozen
                | Hold::Pinned
                | Hold::Directive
                | Hold::CutOff
        )
    }

    /// An unhealthy agent, or one too far behind to work with its group, may install
    /// the version find names before its turn: only while its group is updating and
    /// that version is the one its hosts already run (a canary group's start version).
    pub fn allows_repair(self) -> bool {
        self == Hold::NotACanary
    }

    /// One line for people.
    pub fn describe(self) -> &'static str {
        match self {
            Hold::NoRollout => "there is no rollout: the server names no version",
            Hold::ModeDisabled => "automatic updates are disabled for the fleet (mode disabled)",
            Hold::ModeSuspended => "the rollout is suspended (mode suspended)",
            Hold::Frozen => "the fleet is frozen: no host updates until the freeze is lifted",
            Hold::Pinned => "the server pins this host to its version",
            Hold::Directive => "a version directive governs this host, not the rollout",
            Hold::CutOff => {
                "the replica answering has lost its store: it cannot tell whether the fleet may still move, so nothing does"
            }
            Hold::GroupNotStarted => "its group has not started",
            Hold::NotACanary => {
                "its group is testing its canaries and this host is not one: it follows once they pass"
            }
            Hold::AwaitingTurn => "its group is updating but backpressure has not reached it yet",
            Hold::TopologyLimit => {
                "a topology limit of its group lets other hosts of its zone update first"
            }
            Hold::OutsideWindow => "its group is outside its maintenance window",
        }
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// What one host is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentDecision {
    /// `None` when there is no rollout, or a directive governs the host.
    pub version: Option<Version>,
    /// Why the host does not update now; `None`: it updates to `version` now.
    pub hold: Option<Hold>,
    pub jitter_seconds: u64,
}

impl AgentDecision {
    /// Whether the host is told to update to `version` now.
    pub fn update(&self) -> bool {
        self.hold.is_none()
    }

    /// The agent half of the find response.
    pub fn settings(&self) -> AutoUpdateSettings {
        AutoUpdateSettings {
            agent_version: self
                .version
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            agent_auto_update: self.update(),
            agent_update_jitter_seconds: self.jitter_seconds,
            agent_hold: self.hold.map(|h| h.code().to_string()).unwrap_or_default(),
            ..AutoUpdateSettings::default()
        }
    }

    /// `hold` holds too: a stop replaces a schedule hold (or none); a stop already
    /// there is kept (the first cause is the one to lift).
    fn held_by(mut self, hold: Hold) -> Self {
        if !self.hold.is_some_and(Hold::is_stop) {
            self.hold = Some(hold);
        }
        self
    }
}

/// Everything find's answer for one host depends on, as a replica holds it in memory.
#[derive(Clone, Copy, Debug)]
pub struct FindInputs<'a> {
    /// The rollout, its `autoupdate_mode` the mode in force now (freeze included).
    pub rollout: Option<&'a AutoUpdateAgentRollout>,
    /// A global freeze holds.
    pub frozen: bool,
    /// The group the host counts in: the one it presents, or where groups'
    /// `match_labels` place it ([`rollout::place`]).
    pub group: &'a str,
    /// May be empty: such a host is admitted by backpressure only once progress is
    /// complete.
    pub updater_id: &'a str,
    /// A version directive governs the host: the rollout gives it no version, so it
    /// never undoes (or races) what the directive installs.
    pub governed_by_directive: bool,
    /// A server-side pin (`ternctl inventory pin`), with when it lifts. It holds while
    /// it exists: the leader lifts it (deletes it from the store) once its time has
    /// come by the leader's clock, so every replica answers alike whatever its own
    /// clock says.
    pub pinned_until: Option<Timestamp>,
    /// The replica answering has not reached its store for longer than it may serve
    /// from memory: a freeze, a suspend or a pin written meanwhile would not be in its
    /// answer, so it tells nobody to update.
    pub cut_off: bool,
    pub now: Timestamp,
}

/// find's whole answer for one host: the rollout table ([`decide`]), then the stops
/// that hold whatever the group's state: a freeze, a directive, a pin.
pub fn answer(i: &FindInputs<'_>) -> AgentDecision {
    if i.governed_by_directive {
        return AgentDecision {
            version: None,
            hold: Some(Hold::Directive),
            jitter_seconds: 0,
        };
    }
    let mut d = decide(i.rollout, i.group, i.updater_id);
    if i.frozen && d.version.is_some() {
        // The rollout's mode is at least suspended under a freeze; the cause to show
        // is the freeze.
        d = match d.hold {
            Some(Hold::ModeDisabled) => d,
            _ => AgentDecision {
                hold: Some(Hold::Frozen),
                ..d
            },
        };
    }
    if i.pinned_until.is_some() {
        d = d.held_by(Hold::Pinned);
    }
    if i.cut_off {
        d = d.held_by(Hold::CutOff);
    }
    d
}

/// Whether a host following a channel (`/v1/channels/{name}/version`, Teleport's
/// channel paths) is held: a channel has none of the rollout's groups, canaries or
/// windows, but the stops that hold every host hold it too. A freeze, or the replica
/// answering cut off from its store (a freeze written meanwhile would not be in its
/// memory): the freeze is named first, as [`answer`] names it.
pub fn channel_hold(frozen: bool, cut_off: bool) -> Option<Hold> {
    if frozen {
        Some(Hold::Frozen)
    } else if cut_off {
        Some(Hold::CutOff)
    } else {
        None
    }
}

/// The rollout table alone: the decision for a host presenting `group` (may be empty)
/// and `updater_id` (may be empty: such a host is admitted by backpressure only once
/// progress is complete). Servers and tools ask [`answer`], which starts from it.
pub fn decide(
    rollout: Option<&AutoUpdateAgentRollout>,
    group: &str,
    updater_id: &str,
) -> AgentDecision {
    let Some(rollout) = rollout else {
        return AgentDecision {
            version: None,
            hold: Some(Hold::NoRollout),
            jitter_seconds: DEFAULT_JITTER_SECONDS,
        };
    };
    let v1 = &rollout.spec.start_version;
    let v2 = &rollout.spec.target_version;
    let mode = rollout.spec.autoupdate_mode;
    let decision = |v: &Version, hold: Option<Hold>, jitter: u64| AgentDecision {
        version: Some(v.clone()),
        hold,
        jitter_seconds: jitter,
    };
    let mode_hold = match mode {
        Mode::Enabled => None,
        Mode::Suspended => Some(Hold::ModeSuspended),
        Mode::Disabled => Some(Hold::ModeDisabled),
    };
    let served = match rollout.spec.schedule {
        Schedule::Immediate => None,
        Schedule::Regular => rollout.serving_group(group),
    };
    let Some(g) = served else {
        // The immediate schedule (or a rollout without groups): everyone to v2 now.
        return decision(v2, mode_hold, DEFAULT_JITTER_SECONDS);
    };
    let jitter = if g.config_max_in_flight.is_some() {
        BACKPRESSURE_JITTER_SECONDS
    } else {
        DEFAULT_JITTER_SECONDS
    };
    use GroupState::*;
    match (mode_hold, g.state) {
        (Some(hold), _) if mode == Mode::Disabled => decision(v2, Some(hold), jitter),
        (Some(hold), Unstarted | Canary | Rolledback) => decision(v1, Some(hold), jitter),
        (Some(hold), Active | Done) => decision(v2, Some(hold), jitter),
        (_, Unstarted) => decision(v1, Some(Hold::GroupNotStarted), jitter),
        (_, Canary) => {
            let is_canary =
                !updater_id.is_empty() && g.canaries.iter().any(|c| c.updater_id == updater_id);
            if is_canary {
                decision(v2, None, jitter)
            } else {
                decision(v1, Some(Hold::NotACanary), jitter)
            }
        }
        (_, Active) => {
            // Progress gates hosts only under backpressure (seed 000).
            let admitted = if g.config_max_in_flight.is_none() {
                true
            } else if updater_id.is_empty() {
                g.progress >= 1.0
            } else {
                UpdaterNumeral::of(updater_id).admitted(g.progress)
            };
            let hold = if !admitted {
                Some(Hold::AwaitingTurn)
            } else if !rollout::topology_admits(g, updater_id) {
                Some(Hold::TopologyLimit)
            } else {
                None
            };
            decision(v2, hold, jitter)
        }
        (_, Done) => {
            let hold = if rollout.spec.strategy != Strategy::HaltOnError {
                Some(Hold::OutsideWindow)
            } else if !rollout::topology_admits(g, updater_id) {
                Some(Hold::TopologyLimit)
            } else {
                None
            };
            decision(v2, hold, jitter)
        }
        (_, Rolledback) => decision(v1, None, jitter),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_codes_read_back() {
        for h in Hold::ALL {
            assert_eq!(Hold::from_code(h.code()), Some(h));
        }
        assert_eq!(Hold::from_code("something_new"), None);
        assert!(
            Hold::ALL
                .iter()
                .filter(|h| h.allows_repair())
                .all(|h| !h.is_stop())
        );
    }

    #[test]
    fn a_pin_keeps_a_stop_and_replaces_a_schedule_hold() {
        let d = |hold| AgentDecision {
            version: None,
            hold,
            jitter_seconds: 0,
        };
        assert_eq!(d(None).held_by(Hold::Pinned).hold, Some(Hold::Pinned));
        assert_eq!(
            d(Some(Hold::AwaitingTurn)).held_by(Hold::Pinned).hold,
            Some(Hold::Pinned)
        );
        assert_eq!(
            d(Some(Hold::Frozen)).held_by(Hold::Pinned).hold,
            Some(Hold::Frozen)
        );
    }

    #[test]
    fn a_channel_is_held_by_a_freeze_and_by_a_replica_cut_off() {
        assert_eq!(channel_hold(false, false), None);
        assert_eq!(channel_hold(true, false), Some(Hold::Frozen));
        assert_eq!(channel_hold(false, true), Some(Hold::CutOff));
        assert_eq!(channel_hold(true, true), Some(Hold::Frozen));
        for frozen in [false, true] {
            for cut_off in [false, true] {
                assert!(channel_hold(frozen, cut_off).is_none_or(Hold::is_stop));
            }
        }
    }
}
