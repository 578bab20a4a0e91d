//! What `ternctl agents status -o json` and `ternctl inventory ls -o json` print, read
//! back into the API's own types (`tern_core::api`), with a few helpers that read well
//! in tests and the demo.

use std::ops::Deref;

use serde::Deserialize;
pub use tern_core::api::{GroupStatus, InventoryEntry, InventoryResponse, StatusResponse};

/// `agents status`, as ternctl prints it.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct Status(pub StatusResponse);

impl Deref for Status {
    type Target = StatusResponse;
    fn deref(&self) -> &StatusResponse {
        &self.0
    }
}

impl Status {
    /// The named group. Panics naming the groups there are: the tests and the demo
    /// name only groups of their own config.
    pub fn group(&self, name: &str) -> &GroupStatus {
        match self.0.group(name) {
            Some(g) => g,
            None => panic!(
                "no group {name:?} in the status; its groups: {:?}",
                self.groups.iter().map(|g| &g.name).collect::<Vec<_>>()
            ),
        }
    }

    /// The state of the named group (`""` when it has none).
    pub fn state_of(&self, group: &str) -> &'static str {
        self.0.group(group).map_or("", |g| g.state.as_str())
    }

    /// (group, state) for every group, for assertions that read well.
    pub fn states(&self) -> Vec<(String, &'static str)> {
        self.groups
            .iter()
            .map(|g| (g.name.clone(), g.state.as_str()))
            .collect()
    }

    pub fn start_version(&self) -> String {
        self.rollout
            .as_ref()
            .map(|r| r.spec.start_version.to_string())
            .unwrap_or_default()
    }

    pub fn target_version(&self) -> String {
        self.rollout
            .as_ref()
            .map(|r| r.spec.target_version.to_string())
            .unwrap_or_default()
    }

    pub fn rollout_state(&self) -> &'static str {
        self.rollout
            .as_ref()
            .map_or("", |r| r.status.state.as_str())
    }
}
