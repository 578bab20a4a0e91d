//! Manual transitions an operator applies to a halt-on-error rollout: start a group
//! now, mark groups done, roll groups back. All named groups are checked before any
//! changes, so a refused transition changes nothing.

use jiff::Timestamp;

use crate::backpressure::{self, ProgressInput};
use crate::reason;
use crate::resource::{AutoUpdateAgentRollout, GroupState, RolloutGroup, Schedule, Strategy};
use crate::rollout::{Event, rollout_state};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// unstarted/rolledback → canary (or active with `force`, or without canaries).
    StartUpdate { groups: Vec<String>, force: bool },
    /// any → done; no groups named = the groups in canary or active.
    MarkDone { groups: Vec<String> },
    /// any → rolledback; no groups named = every started group.
    Rollback { groups: Vec<String> },
}

/// Which manual transition: the name the API path, ternctl and scenario files use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransitionKind {
    StartUpdate,
    MarkDone,
    Rollback,
}

impl TransitionKind {
    pub const ALL: [TransitionKind; 3] = [Self::StartUpdate, Self::MarkDone, Self::Rollback];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::StartUpdate => "start-update",
            Self::MarkDone => "mark-done",
            Self::Rollback => "rollback",
        }
    }
}

impl std::fmt::Display for TransitionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transition name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a transition: one of start-update, mark-done, rollback")]
pub struct UnknownTransition(pub String);

impl std::str::FromStr for TransitionKind {
    type Err = UnknownTransition;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownTransition(s.to_string()))
    }
}

impl Transition {
    /// The transition of `kind` on `groups` (`force` applies to start-update only).
    pub fn of_kind(kind: TransitionKind, groups: Vec<String>, force: bool) -> Self {
        match kind {
            TransitionKind::StartUpdate => Self::StartUpdate { groups, force },
            TransitionKind::MarkDone => Self::MarkDone { groups },
            TransitionKind::Rollback => Self::Rollback { groups },
        }
    }

    pub fn kind(&self) -> TransitionKind {
        match self {
            Self::StartUpdate { .. } => TransitionKind::StartUpdate,
            Self::MarkDone { .. } => TransitionKind::MarkDone,
            Self::Rollback { .. } => TransitionKind::Rollback,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn kinds_parse_print_and_refuse_unknown_names() {
        for k in TransitionKind::ALL {
            assert_eq!(k.as_str().parse::<TransitionKind>(), Ok(k));
            assert_eq!(Transition::of_kind(k, vec![], false).kind(), k);
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
        let err = "rollbak".parse::<TransitionKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"rollbak\" is not a transition: one of start-update, mark-done, rollback"
        );
        assert!(serde_json::from_str::<TransitionKind>("\"undo\"").is_err());
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error(
        "{action} needs the halt-on-error strategy; this rollout is time-based, where each group follows its own window (suspend updates instead)"
    )]
    NotHaltOnError { action: &'static str },
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
    if rollout.spec.schedule == Schedule::Immediate {
        return Err(TransitionError::ImmediateSchedule { action });
    }
    if rollout.spec.strategy != Strategy::HaltOnError {
        return Err(TransitionError::NotHaltOnError { action });
    }
    let mut next = rollout.clone();
    let groups = &mut next.status.groups;
    let known: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
    let named = match t {
        Transition::StartUpdate { groups, .. }
        | Transition::MarkDone { groups }
        | Transition::Rollback { groups } => groups,
    };
    for name in named {
        if !known.contains(name) {
            return Err(TransitionError::UnknownGroup {
                group: name.clone(),
                known,
            });
        }
    }
    let selected: Vec<usize> = if named.is_empty() {
        let (pick, what): (fn(GroupState) -> bool, _) = match t {
            Transition::StartUpdate { .. } => return Err(TransitionError::NoGroupNamed { action }),
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
        found
    } else {
        let mut idx: Vec<usize> = named
            .iter()
            .filter_map(|n| groups.iter().position(|g| &g.name == n))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx
    };
    let (allowed, ok): (&'static str, fn(GroupState) -> bool) = match t {
        Transition::StartUpdate { .. } => ("unstarted or rolledback", |s| {
            matches!(s, GroupState::Unstarted | GroupState::Rolledback)
        }),
        Transition::MarkDone { .. } => ("not done", |s| s != GroupState::Done),
        Transition::Rollback { .. } => ("not rolled back", |s| s != GroupState::Rolledback),
    };
    for &i in &selected {
        let g = &groups[i];
        if !ok(g.state) {
            return Err(TransitionError::WrongState {
                action,
                group: g.name.clone(),
                state: g.state.as_str(),
                allowed,
            });
        }
    }
    let mut events = Vec::new();
    for &i in &selected {
        let g = &mut groups[i];
        let from = g.state;
        let reason = match t {
            Transition::StartUpdate { force, .. } => {
                start(g, *force, now);
                reason::MANUAL_TRIGGER
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
        events.push(Event::GroupChanged {
            group: g.name.clone(),
            from,
            to: g.state,
            reason,
        });
    }
    next.status.state = rollout_state(&next.status.groups);
    Ok((next, events))
}

fn start(g: &mut RolloutGroup, force: bool, now: Timestamp) {
    g.state = if g.canary_count > 0 && !force {
        GroupState::Canary
    } else {
        GroupState::Active
    };
    g.start_time = Some(now);
    g.canaries.clear();
    g.initial_count = g.present_count;
    g.progress = match g.config_max_in_flight {
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
