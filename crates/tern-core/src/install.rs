//! What a heartbeat carries of a directive's install: the instruction a server sends
//! ([`InstallInstruction`]), the result a host reports ([`AttemptResult`]), and the
//! target and installer they name. Data only, below [`wire`](crate::domain::wire): the
//! directive modules read these from resources ([`directive::resource`]), check an
//! instruction on the host ([`directive::instruct`]) and work out install states
//! ([`directive::state`]); they re-export the types under their old paths.
//!
//! [`directive::resource`]: crate::domain::directive::resource
//! [`directive::instruct`]: crate::domain::directive::instruct
//! [`directive::state`]: crate::domain::directive::state

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `HeartbeatResponse.install`: install `target` with `installer`; report the outcome as
/// `install_result` naming `attempt_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallInstruction {
    pub attempt_id: String,
    /// The installer resource's name (for messages).
    pub installer_name: String,
    pub installer: InstallerSpec,
    pub target: Target,
    /// Check that the install could be done (download and verify, a script's syntax)
    /// without changing anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The directive that chose it: its time rules (`not_before`, `not_after`, the
    /// hosts' windows) hold the instruction until it is delivered.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub directive: String,
}

/// A version to install, with the build attributes it requires of a host and what the
/// artifact must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub version: String,
    /// Given: only hosts of this arch (a host's arch never changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Given: only hosts whose build is (or is not) FIPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fips: Option<bool>,
    /// The artifact's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The artifact's SHA-256 (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The installer types a host may advertise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstallerType {
    /// The operator's script, the target passed in environment variables only.
    LocalScript,
    /// tern-update's own install, switch, health check and rollback.
    TernUpdate,
    /// The host's package manager (apt or yum), as tern-update's package mode.
    Package,
}

impl InstallerType {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallerType::LocalScript => "local-script",
            InstallerType::TernUpdate => "tern-update",
            InstallerType::Package => "package",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "local-script" => Some(InstallerType::LocalScript),
            "tern-update" => Some(InstallerType::TernUpdate),
            "package" => Some(InstallerType::Package),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallerSpec {
    #[serde(rename = "type")]
    pub installer_type: InstallerType,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// For `local-script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_script: Option<LocalScript>,
    /// For `package`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageInstaller>,
}

fn yes() -> bool {
    true
}

/// A `local-script` installer: `script` run by `shell`, the target reaching it only
/// through `env` (values may use `{target.version}`, `{target.arch}`, `{target.sha256}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalScript {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_shell")]
    pub shell: String,
    pub script: String,
    /// Go duration, default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

fn default_shell() -> String {
    "/bin/sh".to_string()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageManager {
    Apt,
    Yum,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageInstaller {
    /// The package's name (`myagent`).
    pub name: String,
    pub manager: PackageManager,
}

/// What the host reported of an attempt (in its heartbeats; every field defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AttemptResult {
    pub attempt_id: String,
    pub success: bool,
    pub error: String,
}
