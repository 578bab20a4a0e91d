//! The rollout table: for a host presenting a group, the version its group's state
//! names and whether it is this host's turn. The mode and the stops are the one
//! answer's ([`super::answer`]); this is the part of find DESIGN's table gives for an
//! enabled mode.

use crate::domain::backpressure::UpdaterNumeral;
use crate::domain::hold::Hold;
use crate::domain::resource::{AutoUpdateAgentRollout, GroupState, Schedule, Strategy};
use crate::domain::rollout;
use crate::domain::version::Version;

/// Jitter when a group has no backpressure: spread the herd over a minute.
pub const DEFAULT_JITTER_SECONDS: u64 = 60;
/// Jitter under backpressure: progress already spreads the herd.
pub const BACKPRESSURE_JITTER_SECONDS: u64 = 10;

/// One row of the table.
pub(super) struct Row {
    pub(super) version: Version,
    /// Why not this host's turn yet (a schedule hold), if it is not.
    pub(super) hold: Option<Hold>,
    pub(super) jitter_seconds: u64,
}

/// The row for a host counted in `group` (may be empty: the catch-all serves it) with
/// `updater_id` (may be empty: admitted by backpressure only once progress is
/// complete).
pub(super) fn row(rollout: &AutoUpdateAgentRollout, group: &str, updater_id: &str) -> Row {
    let v1 = &rollout.spec.start_version;
    let v2 = &rollout.spec.target_version;
    let row = |v: &Version, hold: Option<Hold>, jitter_seconds: u64| Row {
        version: v.clone(),
        hold,
        jitter_seconds,
    };
    let served = match rollout.spec.schedule {
        Schedule::Immediate => None,
        Schedule::Regular => rollout.serving_group(group),
    };
    let Some(g) = served else {
        // The immediate schedule (or a rollout without groups): everyone to v2 now.
        return row(v2, None, DEFAULT_JITTER_SECONDS);
    };
    let jitter = if g.config.max_in_flight.is_some() {
        BACKPRESSURE_JITTER_SECONDS
    } else {
        DEFAULT_JITTER_SECONDS
    };
    match g.state {
        GroupState::Unstarted => row(v1, Some(Hold::GroupNotStarted), jitter),
        GroupState::Canary => {
            let is_canary =
                !updater_id.is_empty() && g.canaries.iter().any(|c| c.updater_id == updater_id);
            if is_canary {
                row(v2, None, jitter)
            } else {
                row(v1, Some(Hold::NotACanary), jitter)
            }
        }
        GroupState::Active => {
            // Progress gates hosts only under backpressure (seed 000).
            let admitted = if g.config.max_in_flight.is_none() {
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
            row(v2, hold, jitter)
        }
        GroupState::Done => {
            let hold = if rollout.spec.strategy != Strategy::HaltOnError {
                Some(Hold::OutsideWindow)
            } else if !rollout::topology_admits(g, updater_id) {
                Some(Hold::TopologyLimit)
            } else {
                None
            };
            row(v2, hold, jitter)
        }
        GroupState::Rolledback => row(v1, None, jitter),
    }
}
