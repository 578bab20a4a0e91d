//! What `ternctl agents status -o json` and `ternctl inventory ls -o json` print, read
//! back into types the tests and the demo use.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Canary {
    #[serde(default)]
    pub updater_id: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub success: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct GroupStatus {
    pub name: String,
    pub state: String,
    #[serde(default)]
    pub last_update_reason: String,
    #[serde(default)]
    pub present: u64,
    #[serde(default)]
    pub up_to_date: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub initial: u64,
    #[serde(default)]
    pub canary_count: i64,
    #[serde(default)]
    pub canaries: Vec<Canary>,
    #[serde(default)]
    pub start_time: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RolloutSpec {
    #[serde(default)]
    pub start_version: String,
    #[serde(default)]
    pub target_version: String,
    #[serde(default)]
    pub schedule: String,
    #[serde(default)]
    pub strategy: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct RolloutState {
    #[serde(default)]
    pub state: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Rollout {
    #[serde(default)]
    pub spec: RolloutSpec,
    #[serde(default)]
    pub status: RolloutState,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub now: String,
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub rollout: Option<Rollout>,
    #[serde(default)]
    pub groups: Vec<GroupStatus>,
    #[serde(default)]
    pub present: u64,
    #[serde(default)]
    pub up_to_date: u64,
    #[serde(default)]
    pub failed: u64,
}

impl Status {
    /// The named group; panics in tests that name a group the config does not have,
    /// so here it returns a default (state "") instead.
    pub fn group(&self, name: &str) -> GroupStatus {
        self.groups
            .iter()
            .find(|g| g.name == name)
            .cloned()
            .unwrap_or_default()
    }

    pub fn state_of(&self, group: &str) -> String {
        self.group(group).state
    }

    /// (group, state) for every group, for assertions that read well.
    pub fn states(&self) -> Vec<(String, String)> {
        self.groups
            .iter()
            .map(|g| (g.name.clone(), g.state.clone()))
            .collect()
    }

    pub fn start_version(&self) -> String {
        self.rollout
            .as_ref()
            .map(|r| r.spec.start_version.clone())
            .unwrap_or_default()
    }

    pub fn target_version(&self) -> String {
        self.rollout
            .as_ref()
            .map(|r| r.spec.target_version.clone())
            .unwrap_or_default()
    }

    pub fn rollout_state(&self) -> String {
        self.rollout
            .as_ref()
            .map(|r| r.status.state.clone())
            .unwrap_or_default()
    }
}

/// One agent of `ternctl inventory ls -o json`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct InventoryAgent {
    pub updater_id: String,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub updater_status: String,
    #[serde(default)]
    pub healthy: bool,
    #[serde(default)]
    pub rollback: bool,
    #[serde(default)]
    pub failed_version: Option<String>,
    #[serde(default)]
    pub counted: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Inventory {
    #[serde(default)]
    pub agents: Vec<InventoryAgent>,
}
