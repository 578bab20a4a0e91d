//! The find decision: what version a host should run and whether it should update
//! now, from the rollout alone (the server answers it from memory).

use crate::backpressure::UpdaterNumeral;
use crate::resource::{AutoUpdateAgentRollout, GroupState, Mode, Schedule, Strategy};
use crate::rollout;
use crate::version::Version;
use crate::wire::AutoUpdateSettings;

/// Jitter when a group has no backpressure: spread the herd over a minute.
pub const DEFAULT_JITTER_SECONDS: u64 = 60;
/// Jitter under backpressure: progress already spreads the herd.
pub const BACKPRESSURE_JITTER_SECONDS: u64 = 10;

/// What one host is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentDecision {
    /// `None` when there is no rollout.
    pub version: Option<Version>,
    pub update: bool,
    pub jitter_seconds: u64,
}

impl AgentDecision {
    /// What find answers a host a version directive governs: no version and no update,
    /// so the rollout never undoes (or races) what the directive installs. The host
    /// holds until its heartbeat answer brings an install instruction.
    pub fn governed_by_directive() -> Self {
        AgentDecision {
            version: None,
            update: false,
            jitter_seconds: 0,
        }
    }

    /// Under a pin that lifts at `until` (`ternctl inventory pin`): the same version,
    /// never told to update before `until`; from then on the group's decision again.
    pub fn pinned(mut self, until: jiff::Timestamp, now: jiff::Timestamp) -> Self {
        if now < until {
            self.update = false;
        }
        self
    }

    /// The agent half of the find response.
    pub fn settings(&self) -> AutoUpdateSettings {
        AutoUpdateSettings {
            agent_version: self
                .version
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            agent_auto_update: self.update,
            agent_update_jitter_seconds: self.jitter_seconds,
            ..AutoUpdateSettings::default()
        }
    }
}

/// The decision for a host presenting `group` (may be empty) and `updater_id` (may be
/// empty: such a host is admitted by backpressure only once progress is complete).
pub fn decide(
    rollout: Option<&AutoUpdateAgentRollout>,
    group: &str,
    updater_id: &str,
) -> AgentDecision {
    let Some(rollout) = rollout else {
        return AgentDecision {
            version: None,
            update: false,
            jitter_seconds: DEFAULT_JITTER_SECONDS,
        };
    };
    let v1 = &rollout.spec.start_version;
    let v2 = &rollout.spec.target_version;
    let mode = rollout.spec.autoupdate_mode;
    let decision = |v: &Version, update: bool, jitter: u64| AgentDecision {
        version: Some(v.clone()),
        update,
        jitter_seconds: jitter,
    };
    let served = match rollout.spec.schedule {
        Schedule::Immediate => None,
        Schedule::Regular => rollout.serving_group(group),
    };
    let Some(g) = served else {
        // The immediate schedule (or a rollout without groups): everyone to v2 now.
        return decision(v2, mode == Mode::Enabled, DEFAULT_JITTER_SECONDS);
    };
    let jitter = if g.config_max_in_flight.is_some() {
        BACKPRESSURE_JITTER_SECONDS
    } else {
        DEFAULT_JITTER_SECONDS
    };
    use GroupState::*;
    match (mode, g.state) {
        (Mode::Disabled, _) => decision(v2, false, jitter),
        (Mode::Suspended, Unstarted | Canary | Rolledback) => decision(v1, false, jitter),
        (Mode::Suspended, Active | Done) => decision(v2, false, jitter),
        (Mode::Enabled, Unstarted) => decision(v1, false, jitter),
        (Mode::Enabled, Canary) => {
            let is_canary =
                !updater_id.is_empty() && g.canaries.iter().any(|c| c.updater_id == updater_id);
            if is_canary {
                decision(v2, true, jitter)
            } else {
                decision(v1, false, jitter)
            }
        }
        (Mode::Enabled, Active) => {
            // Progress gates hosts only under backpressure (seed 000).
            let admitted = if g.config_max_in_flight.is_none() {
                true
            } else if updater_id.is_empty() {
                g.progress >= 1.0
            } else {
                UpdaterNumeral::of(updater_id).admitted(g.progress)
            };
            decision(
                v2,
                admitted && rollout::topology_admits(g, updater_id),
                jitter,
            )
        }
        (Mode::Enabled, Done) => decision(
            v2,
            rollout.spec.strategy == Strategy::HaltOnError
                && rollout::topology_admits(g, updater_id),
            jitter,
        ),
        (Mode::Enabled, Rolledback) => decision(v1, true, jitter),
    }
}
