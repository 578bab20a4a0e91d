//! What the public endpoints answer from, in memory: the rollout (with the mode the
//! config and version ask for right now), the tools version and the channels. Refreshed
//! after every local write and on every change seen by a watch of the store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tern_core::find;
use tern_core::resource::{
    AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Mode, ToolsMode,
};
use tern_core::wire::{AutoUpdateSettings, FindResponse};

/// A cloud-stable style channel (seed 001).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub critical: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<jiff::Timestamp>,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The rollout, its `autoupdate_mode` replaced by the mode config and version ask
    /// for now, so that suspend takes effect at once rather than at the next reconcile.
    pub rollout: Option<AutoUpdateAgentRollout>,
    pub tools_version: String,
    pub tools_auto_update: bool,
    pub channels: BTreeMap<String, Channel>,
}

impl Snapshot {
    pub fn build(
        config: Option<&AutoUpdateConfig>,
        version: Option<&AutoUpdateVersion>,
        rollout: Option<&AutoUpdateAgentRollout>,
        channels: BTreeMap<String, Channel>,
    ) -> Self {
        let mode = config
            .map_or(Mode::Enabled, AutoUpdateConfig::mode)
            .combine(version.map_or(Mode::Enabled, AutoUpdateVersion::mode));
        let rollout = rollout.map(|r| {
            let mut r = r.clone();
            r.spec.autoupdate_mode = mode;
            r
        });
        let tools_version = version
            .and_then(|v| v.spec.tools.as_ref())
            .map(|t| t.target_version.to_string())
            .unwrap_or_default();
        let tools_auto_update = !tools_version.is_empty()
            && config.is_some_and(|c| c.tools_mode() == ToolsMode::Enabled);
        Self {
            rollout,
            tools_version,
            tools_auto_update,
            channels,
        }
    }

    pub fn find(&self, group: &str, updater_id: &str, edition: &str) -> FindResponse {
        let agent = find::decide(self.rollout.as_ref(), group, updater_id).settings();
        FindResponse {
            edition: edition.to_string(),
            fips: false,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            auto_update: AutoUpdateSettings {
                tools_version: self.tools_version.clone(),
                tools_auto_update: self.tools_auto_update,
                ..agent
            },
        }
    }
}
