//! Why a host may not install now: [`Hold`], one reason with a stable code, and
//! [`Holds`], every reason that applies at once. The one answer ([`crate::domain::gate`])
//! returns every hold, never only the first: a freeze does not hide a pin, a mode does
//! not hide a freeze, and whoever lifts one still sees the others.
//!
//! Two kinds. A **stop** (the fleet does not move this host at all) is final for every
//! product and every path of the host: the rollout's own updates, `update --now`, the
//! unhealthy and incompatible shortcuts, channels, directives, the updater's releases;
//! under a stop a host with nothing installed takes the last known-good version the
//! answer names, never the target. A **schedule** hold (not this host's turn yet) is
//! final for the host's own shortcuts, except [`Hold::NotACanary`]: the group is
//! updating and the version named is the one its hosts run (the start version), so an
//! unhealthy agent may be repaired to it.

/// One reason a host may not install now. Each has a stable code, sent to hosts
/// (`agent_hold`, `agent_holds`) and shown by every view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hold {
    /// The ternd answering serves only hosts that pin the release root, and this one
    /// does not.
    TrustRequired,
    /// A version directive governs the host: the rollout names it no version.
    Directive,
    NoRollout,
    ModeDisabled,
    Frozen,
    ModeSuspended,
    Pinned,
    CutOff,
    /// The version that would be installed is revoked: below the signed minimum of its
    /// release line.
    Revoked,
    GroupNotStarted,
    NotACanary,
    AwaitingTurn,
    TopologyLimit,
    OutsideWindow,
    /// A directive's install may not start yet (its `not_before`).
    NotYet,
    /// A directive's installs may no longer start (its `not_after` has passed).
    Expired,
}

impl Hold {
    /// Every hold, stops first, in the order [`Holds::first`] names them.
    pub const ALL: [Hold; 16] = [
        Hold::TrustRequired,
        Hold::Directive,
        Hold::NoRollout,
        Hold::ModeDisabled,
        Hold::Frozen,
        Hold::ModeSuspended,
        Hold::Pinned,
        Hold::CutOff,
        Hold::Revoked,
        Hold::GroupNotStarted,
        Hold::NotACanary,
        Hold::AwaitingTurn,
        Hold::TopologyLimit,
        Hold::OutsideWindow,
        Hold::NotYet,
        Hold::Expired,
    ];

    /// The stable code (`agent_hold`, views, metrics). Never renamed.
    pub fn code(self) -> &'static str {
        match self {
            Hold::TrustRequired => "trust_required",
            Hold::Directive => "directive",
            Hold::NoRollout => "no_rollout",
            Hold::ModeDisabled => "mode_disabled",
            Hold::Frozen => "frozen",
            Hold::ModeSuspended => "mode_suspended",
            Hold::Pinned => "pinned",
            Hold::CutOff => "replica_cut_off",
            Hold::Revoked => "revoked",
            Hold::GroupNotStarted => "group_not_started",
            Hold::NotACanary => "not_a_canary",
            Hold::AwaitingTurn => "awaiting_turn",
            Hold::TopologyLimit => "topology_limit",
            Hold::OutsideWindow => "outside_window",
            Hold::NotYet => "not_yet",
            Hold::Expired => "expired",
        }
    }

    pub fn from_code(code: &str) -> Option<Hold> {
        Hold::ALL.into_iter().find(|h| h.code() == code)
    }

    /// The fleet does not move this host at all: final for every product and path.
    pub fn is_stop(self) -> bool {
        matches!(
            self,
            Hold::TrustRequired
                | Hold::Directive
                | Hold::NoRollout
                | Hold::ModeDisabled
                | Hold::Frozen
                | Hold::ModeSuspended
                | Hold::Pinned
                | Hold::CutOff
                | Hold::Revoked
        )
    }

    /// An unhealthy agent, or one too far behind to work with its group, may install
    /// the version named before its turn: only while its group is updating and that
    /// version is the one its hosts already run (a canary group's start version).
    pub fn allows_repair(self) -> bool {
        self == Hold::NotACanary
    }

    /// A stop of the whole host, whichever product asked: what an updater release
    /// reads from the agent's answer when the two are served by different ternds. The
    /// rollout's own state, mode or versions are that product's alone.
    pub fn stops_the_host(self) -> bool {
        matches!(
            self,
            Hold::Frozen | Hold::Pinned | Hold::CutOff | Hold::TrustRequired
        )
    }

    /// One line for people.
    pub fn describe(self) -> &'static str {
        match self {
            Hold::TrustRequired => {
                "this ternd serves only hosts that pin the release root, and this host pins none"
            }
            Hold::Directive => "a version directive governs this host, not the rollout",
            Hold::NoRollout => "there is no rollout: the server names no version",
            Hold::ModeDisabled => "automatic updates are disabled for the fleet (mode disabled)",
            Hold::Frozen => "the fleet is frozen: no host updates until the freeze is lifted",
            Hold::ModeSuspended => "the rollout is suspended (mode suspended)",
            Hold::Pinned => "the server pins this host to its version",
            Hold::CutOff => {
                "the replica answering has lost its store: it cannot tell whether the fleet may still move, so nothing does"
            }
            Hold::Revoked => {
                "the version is revoked: it is below the signed minimum of its release line"
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
            Hold::NotYet => "the directive's installs may not start yet (its not_before)",
            Hold::Expired => "the directive's time for installs has passed (its not_after)",
        }
    }

    fn bit(self) -> u16 {
        // At most 16 holds: `ALL`'s length is checked by a test.
        1 << (self as u16)
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// Every hold that applies: a set, iterated stops first in [`Hold::ALL`]'s order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Holds(u16);

impl Holds {
    pub const NONE: Holds = Holds(0);

    pub fn of(holds: impl IntoIterator<Item = Hold>) -> Holds {
        let mut all = Holds::NONE;
        for h in holds {
            all.add(h);
        }
        all
    }

    pub fn add(&mut self, hold: Hold) {
        self.0 |= hold.bit();
    }

    pub fn with(mut self, hold: Hold) -> Holds {
        self.add(hold);
        self
    }

    pub fn contains(self, hold: Hold) -> bool {
        self.0 & hold.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn iter(self) -> impl Iterator<Item = Hold> {
        Hold::ALL.into_iter().filter(move |h| self.contains(*h))
    }

    /// The hold to name first: the first stop, else the first schedule hold.
    pub fn first(self) -> Option<Hold> {
        self.iter().next()
    }

    /// Some hold is a stop.
    pub fn stops(self) -> bool {
        self.iter().any(Hold::is_stop)
    }

    /// Only holds that let an unhealthy or incompatible agent be repaired.
    pub fn allow_repair(self) -> bool {
        !self.is_empty() && self.iter().all(Hold::allows_repair)
    }

    /// The stable codes, in order.
    pub fn codes(self) -> Vec<String> {
        self.iter().map(|h| h.code().to_string()).collect()
    }
}

impl FromIterator<Hold> for Holds {
    fn from_iter<I: IntoIterator<Item = Hold>>(iter: I) -> Self {
        Holds::of(iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_back_and_fit_the_set() {
        assert!(Hold::ALL.len() <= 16);
        for h in Hold::ALL {
            assert_eq!(Hold::from_code(h.code()), Some(h));
            assert_eq!(Holds::of([h]).first(), Some(h));
        }
        assert_eq!(Hold::from_code("something_new"), None);
        assert!(
            Hold::ALL
                .iter()
                .filter(|h| h.allows_repair() || h.stops_the_host())
                .all(|h| h.allows_repair() != h.is_stop() || h.stops_the_host())
        );
        // Stops come first in ALL, so `first` names a stop whenever one holds.
        let first_schedule = Hold::ALL.iter().position(|h| !h.is_stop()).unwrap();
        assert!(Hold::ALL[first_schedule..].iter().all(|h| !h.is_stop()));
    }

    #[test]
    fn every_hold_is_kept_and_a_stop_is_named_first() {
        let h = Holds::of([Hold::AwaitingTurn, Hold::Pinned, Hold::Frozen]);
        assert_eq!(h.len(), 3);
        assert_eq!(h.first(), Some(Hold::Frozen));
        assert!(h.stops());
        assert_eq!(h.codes(), ["frozen", "pinned", "awaiting_turn"]);
        assert!(!h.allow_repair());
        assert!(Holds::of([Hold::NotACanary]).allow_repair());
        assert!(!Holds::NONE.allow_repair());
        assert!(!Holds::of([Hold::NotACanary, Hold::Pinned]).allow_repair());
    }
}
