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
    /// What the control plane says now, as the fleet-safety checker reads it: the
    /// product's rollout as the leader wrote it, the mode an operator set (none when
    /// neither resource sets one), whether a freeze holds the product, the pins.
    pub fn trace_state(
        &self,
        product: &str,
        pins: std::collections::BTreeMap<String, jiff::Timestamp>,
    ) -> tern_core::invariant::TraceEvent {
        let set = self.modes.config_mode.is_some() || self.modes.version_mode.is_some();
        tern_core::invariant::TraceEvent::State {
            at: self.now,
            product: product.to_string(),
            rollout: self.0.rollout.clone().map(Box::new),
            mode: set.then_some(self.modes.mode),
            mode_recorded: true,
            frozen: self.modes.frozen.as_ref().is_some_and(|f| f.holds(product)),
            pins,
            minimums: Default::default(),
            cut_off: false,
        }
    }

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
