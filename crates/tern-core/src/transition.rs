//! Manual transitions an operator applies to a rollout with groups: start a group
//! now, mark groups done, roll groups back, reset a group (seed 000's
//! `ResetAgentGroup`). All named groups are checked before any changes, so a refused
//! transition changes nothing.
//!
//! Under time-based, where each group follows its own window: start-update opens the
//! group now for one window length, mark-done ends its updates until its next window,
//! and rollback holds it on the start version until someone starts it again.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;

use crate::domain::backpressure::{self, ProgressInput};
use crate::domain::reason;
use crate::domain::resource::{
    AutoUpdateAgentRollout, GroupState, RolloutGroup, Schedule, Strategy,
};
use crate::domain::rollout::{Event, rollout_state};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// unstarted/rolledback → canary (or active with `force`, or without canaries).
    StartUpdate { groups: Vec<String>, force: bool },
    /// any → done; no groups named = the groups in canary or active.
    MarkDone { groups: Vec<String> },
    /// any → rolledback; no groups named = every started group.
    Rollback { groups: Vec<String> },
    /// canary: new canaries are picked at the next reconcile; active: its initial
    /// agent count is taken again from the agents present now. Groups must be named.
    Reset { groups: Vec<String> },
}

impl Transition {
    /// The transition of `kind` on `groups`. Only start-update has a `force`; the
    /// other kinds ignore it, as the API always has.
    pub fn new(kind: TransitionKind, groups: Vec<String>, force: bool) -> Self {
        match kind {
            TransitionKind::StartUpdate => Self::StartUpdate { groups, force },
            TransitionKind::MarkDone => Self::MarkDone { groups },
            TransitionKind::Rollback => Self::Rollback { groups },
            TransitionKind::Reset => Self::Reset { groups },
        }
    }

    pub fn kind(&self) -> TransitionKind {
        match self {
            Self::StartUpdate { .. } => TransitionKind::StartUpdate,
            Self::MarkDone { .. } => TransitionKind::MarkDone,
            Self::Rollback { .. } => TransitionKind::Rollback,
            Self::Reset { .. } => TransitionKind::Reset,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    fn named_groups(&self) -> &[String] {
        match self {
            Self::StartUpdate { groups, .. }
            | Self::MarkDone { groups }
            | Self::Rollback { groups }
            | Self::Reset { groups } => groups,
        }
    }
}

/// Which manual transition. Its kebab-case name is the one the API path
/// (`/v1/agents/NAME`), `ternctl` and scenario files use; parsing a name refuses
/// anything else rather than guessing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransitionKind {
    StartUpdate,
    MarkDone,
    Rollback,
    Reset,
}

impl TransitionKind {
    /// Every kind, in the order they are offered to users.
    pub const ALL: [Self; 4] = [
        Self::StartUpdate,
        Self::MarkDone,
        Self::Rollback,
        Self::Reset,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::StartUpdate => "start-update",
            Self::MarkDone => "mark-done",
            Self::Rollback => "rollback",
            Self::Reset => "reset",
        }
    }
}

impl fmt::Display for TransitionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TransitionKind {
    type Err = UnknownTransitionKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownTransitionKind {
                given: s.to_string(),
            })
    }
}

/// A transition name that is none of [`TransitionKind::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown transition {given:?}; the transitions are: {}",
    TransitionKind::ALL.map(TransitionKind::as_str).join(", ")
)]
pub struct UnknownTransitionKind {
    pub given: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("{action} does not apply to the immediate schedule: it has no groups")]
    ImmediateSchedule { action: &'static str },
    #[error("unknown group {group:?}; the rollout's groups are: {}", known.join(", "))]
    UnknownGroup { group: String, known: Vec<String> },
    #[error("{action} needs at least one group name")]
    NoGroupNamed { action: &'static str },
    #[error("group {group:?} is {state}; {action} applies to groups that are {allowed}")]
    WrongState {
        action: &'static str,
        group: String,
        state: &'static str,
        allowed: &'static str,
    },
    #[error("{action}: no group is {what}; name the groups explicitly")]
    NothingToDo {
        action: &'static str,
        what: &'static str,
    },
}

/// Applies `t` at `now`, returning the new rollout and what changed.
pub fn apply(
    rollout: &AutoUpdateAgentRollout,
    t: &Transition,
    now: Timestamp,
) -> Result<(AutoUpdateAgentRollout, Vec<Event>), TransitionError> {
    let action = t.name();
    check_applies(rollout, action)?;
    let strategy = rollout.spec.strategy;
    let mut next = rollout.clone();
    let groups = &mut next.status.groups;
    let selected = select(t, groups, action)?;
    check_states(t, groups, &selected, action)?;
    let events = selected
        .iter()
        .map(|&i| change(&mut groups[i], t, strategy, now))
        .collect();
    next.status.state = rollout_state(&next.status.groups);
    Ok((next, events))
}

/// Manual transitions are for rollouts with groups (both strategies).
fn check_applies(
    rollout: &AutoUpdateAgentRollout,
    action: &'static str,
) -> Result<(), TransitionError> {
    if rollout.spec.schedule == Schedule::Immediate {
        return Err(TransitionError::ImmediateSchedule { action });
    }
    Ok(())
}

/// The indices of the groups `t` changes, in rollout order: the named ones, or when
/// none is named, the ones its kind picks by default.
fn select(
    t: &Transition,
    groups: &[RolloutGroup],
    action: &'static str,
) -> Result<Vec<usize>, TransitionError> {
    let named = t.named_groups();
    check_known(groups, named)?;
    if named.is_empty() {
        select_by_default(t, groups, action)
    } else {
        Ok(named_indices(groups, named))
    }
}

/// Refuses the first name that is no group of the rollout.
fn check_known(groups: &[RolloutGroup], named: &[String]) -> Result<(), TransitionError> {
    let known: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
    match named.iter().find(|name| !known.contains(name)) {
        Some(name) => Err(TransitionError::UnknownGroup {
            group: name.clone(),
            known,
        }),
        None => Ok(()),
    }
}

/// The groups a transition takes when none is named (see [`Transition`]); start-update
/// has no such default and must be told which.
fn select_by_default(
    t: &Transition,
    groups: &[RolloutGroup],
    action: &'static str,
) -> Result<Vec<usize>, TransitionError> {
    let (pick, what): (fn(GroupState) -> bool, _) = match t {
        Transition::StartUpdate { .. } | Transition::Reset { .. } => {
            return Err(TransitionError::NoGroupNamed { action });
        }
        Transition::MarkDone { .. } => (
            |s| matches!(s, GroupState::Canary | GroupState::Active),
            "in canary or active",
        ),
        Transition::Rollback { .. } => (
            |s| !matches!(s, GroupState::Unstarted | GroupState::Rolledback),
            "started and not already rolled back",
        ),
    };
    let found: Vec<usize> = (0..groups.len())
        .filter(|&i| pick(groups[i].state))
        .collect();
    if found.is_empty() {
        return Err(TransitionError::NothingToDo { action, what });
    }
    Ok(found)
}

/// A group named twice changes once.
fn named_indices(groups: &[RolloutGroup], named: &[String]) -> Vec<usize> {
    let mut idx: Vec<usize> = named
        .iter()
        .filter_map(|n| groups.iter().position(|g| &g.name == n))
        .collect();
    idx.sort_unstable();
    idx.dedup();
    idx
}

/// Refuses the first selected group that `t` cannot move from where it is.
fn check_states(
    t: &Transition,
    groups: &[RolloutGroup],
    selected: &[usize],
    action: &'static str,
) -> Result<(), TransitionError> {
    let (allowed, ok): (&'static str, fn(GroupState) -> bool) = match t {
        Transition::StartUpdate { .. } => ("unstarted or rolledback", |s| {
            matches!(s, GroupState::Unstarted | GroupState::Rolledback)
        }),
        Transition::MarkDone { .. } => ("not done", |s| s != GroupState::Done),
        Transition::Rollback { .. } => ("not rolled back", |s| s != GroupState::Rolledback),
        Transition::Reset { .. } => ("in canary or active", |s| {
            matches!(s, GroupState::Canary | GroupState::Active)
        }),
    };
    match selected.iter().map(|&i| &groups[i]).find(|g| !ok(g.state)) {
        Some(g) => Err(TransitionError::WrongState {
            action,
            group: g.name.clone(),
            state: g.state.as_str(),
            allowed,
        }),
        None => Ok(()),
    }
}

/// Moves one checked group as `t` says, and the event that records it.
fn change(g: &mut RolloutGroup, t: &Transition, strategy: Strategy, now: Timestamp) -> Event {
    let from = g.state;
    let reason = match t {
        Transition::StartUpdate { force, .. } => {
            // Time-based groups have no canaries.
            start(g, *force || strategy == Strategy::TimeBased, now);
            reason::MANUAL_TRIGGER
        }
        Transition::Reset { .. } => {
            if g.state == GroupState::Canary {
                g.canaries.clear();
                g.canary_coverage.clear();
                // New canaries, a new analysis: a failed one no longer holds the group.
                g.analysis = None;
            } else {
                g.initial_count = g.present_count;
                g.initial_count_pending = true;
            }
            // The operator accepts the group as it is now: vanished hosts no longer hold it.
            g.peak_count = g.connected_count;
            reason::MANUAL_RESET
        }
        Transition::MarkDone { .. } => {
            g.state = GroupState::Done;
            g.progress = 1.0;
            reason::MANUAL_FORCED_DONE
        }
        Transition::Rollback { .. } => {
            g.state = GroupState::Rolledback;
            reason::MANUAL_ROLLBACK
        }
    };
    g.last_update_reason = reason.to_string();
    g.last_update_time = Some(now);
    Event::GroupChanged {
        group: g.name.clone(),
        from,
        to: g.state,
        reason,
    }
}

fn start(g: &mut RolloutGroup, force: bool, now: Timestamp) {
    g.state = if g.config.canary_count > 0 && !force {
        GroupState::Canary
    } else {
        GroupState::Active
    };
    g.start_time = Some(now);
    g.canaries.clear();
    g.canary_coverage.clear();
    g.analysis = None;
    // The last reconcile's count, until the next one counts the hosts present then
    // (`reconcile` takes it again: the last count may be none at all).
    g.initial_count = g.present_count;
    g.initial_count_pending = true;
    g.progress = match g.config.max_in_flight {
        None => 1.0,
        Some(mif) => {
            backpressure::progress(ProgressInput {
                max_in_flight: mif.fraction(),
                initial: g.initial_count,
                present: g.present_count,
                up_to_date: g.up_to_date_count,
                lowest_not_updated: None,
                previous: 0.0,
            })
            .0
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_kebab_case_name() {
        let names: Vec<&str> = TransitionKind::ALL.map(TransitionKind::as_str).to_vec();
        assert_eq!(names, ["start-update", "mark-done", "rollback", "reset"]);
        for kind in TransitionKind::ALL {
            assert_eq!(kind.to_string(), kind.as_str());
            assert_eq!(kind.as_str().parse::<TransitionKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<TransitionKind>(&json).unwrap(), kind);
        }
    }

    #[test]
    fn an_unknown_name_is_refused_naming_every_kind() {
        for bad in [
            "",
            "rollbak",
            "Rollback",
            "start_update",
            "StartUpdate",
            " mark-done",
        ] {
            let err = bad.parse::<TransitionKind>().unwrap_err();
            assert_eq!(err.given, bad);
            let msg = err.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(
                msg.ends_with("the transitions are: start-update, mark-done, rollback, reset"),
                "{msg}"
            );
        }
        let err = serde_json::from_str::<TransitionKind>("\"rollbak\"")
            .unwrap_err()
            .to_string();
        for kind in TransitionKind::ALL {
            assert!(err.contains(kind.as_str()), "{err}");
        }
    }

    #[test]
    fn a_transition_is_built_from_its_kind() {
        let groups = || vec!["dev".to_string()];
        assert_eq!(
            Transition::new(TransitionKind::StartUpdate, groups(), true),
            Transition::StartUpdate {
                groups: groups(),
                force: true
            }
        );
        assert_eq!(
            Transition::new(TransitionKind::MarkDone, groups(), true),
            Transition::MarkDone { groups: groups() }
        );
        assert_eq!(
            Transition::new(TransitionKind::Rollback, groups(), false),
            Transition::Rollback { groups: groups() }
        );
        for kind in TransitionKind::ALL {
            let t = Transition::new(kind, Vec::new(), false);
            assert_eq!(t.kind(), kind);
            assert_eq!(t.name(), kind.as_str());
        }
    }
}
