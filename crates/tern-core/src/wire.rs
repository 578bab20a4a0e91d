//! What travels between `tern-update` and `ternd`: the public find response and the
//! heartbeat. These shapes are a contract with every older and newer updater, so every
//! field has a default and unknown fields are ignored on read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::install::{AttemptResult, InstallInstruction};

/// `GET /v1/webapi/find` — the shape Teleport's updater reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FindResponse {
    pub edition: String,
    pub fips: bool,
    pub server_version: String,
    pub auto_update: AutoUpdateSettings,
}

/// The `auto_update` object of a find response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AutoUpdateSettings {
    /// The version this host should run (or install, for a new host). Empty when the
    /// server has no rollout. Under a stop (a hold in `agent_holds` that is one) it is
    /// the fleet's last known-good version, never the target: only a host with nothing
    /// installed may take it.
    pub agent_version: String,
    /// Whether an existing installation should update to `agent_version` now.
    pub agent_auto_update: bool,
    /// Upper bound of the random delay an updater waits before acting.
    pub agent_update_jitter_seconds: u64,
    /// Why the host is not told to update now ([`crate::domain::hold::Hold::code`]), the first
    /// of `agent_holds`; empty when it is, and from servers that predate it (Teleport's,
    /// older ternd), which the host then reads as "not now, no reason given": no
    /// shortcut of its own.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent_hold: String,
    /// Every hold that applies, the first named first. A ternd that sends it names the
    /// last known-good version under a stop; from one that does not, a host with
    /// nothing installed installs nothing under a stop.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agent_holds: Vec<String>,
    pub tools_version: String,
    pub tools_auto_update: bool,
}

/// What a host tells find about itself besides its group and updater id, so that any
/// replica, right after a restart too, answers it as its heartbeats would have it
/// answered: the groups' `match_labels` place it by its labels, and a version directive
/// governs it by these facts. Sent as query parameters: `version`, one `label=KEY=VALUE`
/// per label, `arch`, `os`, `fips=1`, one `installer` per installer type. Bounded like
/// a heartbeat's facts ([`Heartbeat::check_facts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FindFacts {
    pub version: String,
    pub labels: BTreeMap<String, String>,
    pub arch: String,
    pub os: String,
    pub fips: bool,
    pub installers: Vec<String>,
    /// The version of the release root the host pins (`enable --trust-root`); 0: it
    /// pins none and installs what it is told unverified.
    pub trust_root: u64,
    /// The product asked for (`product=`; empty: the agent). Not a fact of the host
    /// but of the request, carried here so that every find of an updater names it.
    pub product: String,
}

impl FindFacts {
    /// The query parameters that carry them.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("version", self.version.clone())];
        for (k, v) in &self.labels {
            q.push(("label", format!("{k}={v}")));
        }
        if !self.arch.is_empty() {
            q.push(("arch", self.arch.clone()));
        }
        if !self.os.is_empty() {
            q.push(("os", self.os.clone()));
        }
        if self.fips {
            q.push(("fips", "1".into()));
        }
        for i in &self.installers {
            q.push(("installer", i.clone()));
        }
        if self.trust_root > 0 {
            q.push(("trust_root", self.trust_root.to_string()));
        }
        if !self.product.is_empty() {
            q.push(("product", self.product.clone()));
        }
        q
    }

    /// Whether `key` is a query parameter of the facts.
    pub fn is_key(key: &str) -> bool {
        matches!(
            key,
            "version" | "label" | "arch" | "os" | "fips" | "installer" | "trust_root"
        )
    }

    /// Adds one query parameter to what was read so far; false when it is not one of
    /// the facts.
    pub fn read(&mut self, key: &str, value: &str) -> bool {
        match key {
            "version" => self.version = value.to_string(),
            "label" => {
                let (k, v) = value.split_once('=').unwrap_or((value, ""));
                self.labels.insert(k.to_string(), v.to_string());
            }
            "arch" => self.arch = value.to_string(),
            "os" => self.os = value.to_string(),
            "fips" => self.fips = value == "1" || value == "true",
            "installer" => self.installers.push(value.to_string()),
            // Not a number: no root is claimed.
            "trust_root" => self.trust_root = value.parse().unwrap_or(0),
            _ => return false,
        }
        true
    }

    /// Refuses facts past a heartbeat's bounds, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.version.len() > 128 || self.version.chars().any(char::is_control) {
            return Err("version: longer than 128 bytes or holds control characters".into());
        }
        Heartbeat {
            labels: self.labels.clone(),
            arch: self.arch.clone(),
            os: self.os.clone(),
            fips: self.fips,
            installers: self.installers.clone(),
            ..Heartbeat::default()
        }
        .check_facts()
    }
}

/// What the updater says about itself on the host.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum UpdaterStatus {
    #[default]
    Enabled,
    Disabled,
    Pinned,
}

impl UpdaterStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Disabled => "disabled",
            Self::Pinned => "pinned",
        }
    }
}

/// Which way a host is told its version: by find (the rollout) or by a channel.
/// Only rollout hosts are counted in the rollout's groups (its reports, canaries,
/// failures and alerts); ternd shows a third model, `directive`, for hosts a version
/// directive governs (it knows that itself).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Follows {
    #[default]
    Rollout,
    Channel,
}

impl Follows {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rollout => "rollout",
            Self::Channel => "channel",
        }
    }

    pub(crate) fn is_rollout(&self) -> bool {
        *self == Self::Rollout
    }
}

/// An install that failed before the switch (nothing changed on the host): the
/// version, what kind of failure ([`INSTALL_FAILURE_KINDS`]), and the error. Reported
/// with every heartbeat until an install succeeds, so the server can count it as a
/// failure of that version (a canary's is a failed canary) and say why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstallFailure {
    pub version: String,
    pub kind: String,
    pub error: String,
}

/// The kinds of [`InstallFailure`]: the release is not signed by the keys this host
/// pins, the artifact is not what its checksum or signature says, the artifact or its
/// checksum is not published, the download failed, the host lacks disk space, the
/// tarball was refused as hostile, or anything else.
pub const INSTALL_FAILURE_KINDS: [&str; 7] = [
    "not_signed",
    "digest_mismatch",
    "artifact_missing",
    "download",
    "disk",
    "hostile_artifact",
    "other",
];

/// An update that switched to `version` and was reverted (or left linked, failing):
/// why, as the updater's last update recorded it, and what the agent printed last
/// when the new version itself failed. Reported with every heartbeat until an update
/// succeeds, so that every view of ternd says why the host failed, not only
/// `tern-update status` on the host. Bounded by [`Heartbeat::check_facts`];
/// [`UpdateFailure::cleaned`] before it is kept or shown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateFailure {
    /// The version the update tried.
    pub version: String,
    /// Why it failed: `update to 1.2.0 failed: 1.2.0 the agent is not running (5 checks
    /// in a row); rolled back: …`.
    pub error: String,
    /// The agent's last lines of output (its log file, or the journal of its unit),
    /// joined with ` | `; empty when there was none to read or the host failed, not
    /// the version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent_output: String,
    /// When it failed, by the host's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<jiff::Timestamp>,
}

/// The most bytes of [`UpdateFailure::error`] a heartbeat may carry.
pub const MAX_UPDATE_ERROR_BYTES: usize = 2048;
/// The most bytes of [`UpdateFailure::agent_output`] a heartbeat may carry.
pub const MAX_AGENT_OUTPUT_BYTES: usize = 2048;

impl UpdateFailure {
    /// The failure as ternd keeps and shows it: every control character (a newline
    /// in an error chain, an escape sequence in the agent's output) replaced by a
    /// space, so that it cannot forge a log line or a table row.
    pub fn cleaned(&self) -> Self {
        Self {
            version: crate::domain::text::clean(&self.version, 128),
            error: crate::domain::text::clean(&self.error, MAX_UPDATE_ERROR_BYTES),
            agent_output: crate::domain::text::clean_tail(
                &self.agent_output,
                MAX_AGENT_OUTPUT_BYTES,
            ),
            time: self.time,
        }
    }

    /// One line saying why: the error, then the agent's output, at most `max_bytes`
    /// (the output cut at its front: its last words say what failed). What a failed
    /// canary's `reason` says in the rollout.
    pub fn summary(&self, max_bytes: usize) -> String {
        const SEP: &str = "; the agent's last output: ";
        if self.agent_output.is_empty() || max_bytes < SEP.len() + 32 {
            return crate::domain::text::clean(&self.error, max_bytes);
        }
        // The output keeps at least half the room when it needs it.
        let output_room = self.agent_output.len().min(max_bytes / 2);
        let error = crate::domain::text::clean(&self.error, max_bytes - SEP.len() - output_room);
        let room = max_bytes - SEP.len() - error.len();
        format!(
            "{error}{SEP}{}",
            crate::domain::text::clean_tail(&self.agent_output, room)
        )
    }
}

/// `POST /v1/agents/heartbeat` request body, sent by `tern-update` after every run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Heartbeat {
    pub updater_id: String,
    pub host_id: String,
    pub hostname: String,
    /// The update group; empty means "none", served by the catch-all group.
    pub group: String,
    /// The agent version the host runs now.
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updater_version: Option<String>,
    pub updater_status: UpdaterStatus,
    /// True when the last update was reverted by an automatic rollback.
    pub rollback: bool,
    /// The version that failed and was rolled back, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    /// Whether the agent runs and passes its health check (its `health_url` when one
    /// is configured); absent when the updater cannot tell (nothing to observe), and
    /// then never taken as healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// Which way the host is told its version (absent: the rollout).
    #[serde(skip_serializing_if = "Follows::is_rollout")]
    pub follows: Follows,
    /// The last install that failed before the switch, until one succeeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install_failure: Option<InstallFailure>,
    /// The last update that switched and failed (rolled back, or left linked), until
    /// an update succeeds: why, and the agent's last output. Absent from updaters
    /// that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_failure: Option<UpdateFailure>,
    /// What directives select on (the modular upgrade system): the host's labels,
    /// build (arch, OS, FIPS) and the installer types it accepts. Absent from updaters
    /// that predate them; bounded by [`Heartbeat::check_facts`].
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub arch: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub os: String,
    /// The distribution and its version (`ID-VERSION_ID` of os-release, `debian-13`):
    /// what canaries may be chosen to cover.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub os_version: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fips: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub installers: Vec<String>,
    /// The outcome of the last install the server asked this host for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install_result: Option<AttemptResult>,
    /// Whether the host pins a release root (installs only signed releases), and
    /// which root version. Absent from updaters that predate it: unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust: Option<HostTrust>,
    /// The product this heartbeat reports (`version` is its version); empty: the
    /// agent. Each product a host runs heartbeats on its own.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub product: String,
}

impl Heartbeat {
    /// The product reported ([`crate::domain::product::AGENT`] when none is named).
    pub fn product(&self) -> &str {
        if self.product.is_empty() {
            crate::domain::product::AGENT
        } else {
            &self.product
        }
    }
}

/// A host's trust posture, as its heartbeat states it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostTrust {
    /// The host pins a release root (`tern-update enable --trust-root`).
    pub pinned: bool,
    /// The version of the newest root it trusts (0 when none is pinned).
    #[serde(skip_serializing_if = "is_zero")]
    pub root_version: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// At most this many labels per host.
pub(crate) const MAX_LABELS: usize = 32;
/// At most this many installer types per host.
pub(crate) const MAX_INSTALLERS: usize = 8;

/// A label key as heartbeats may carry it (and `match_labels` may name).
pub(crate) fn is_label_key(k: &str) -> bool {
    is_fact_token(k, 63)
}

/// A label value as heartbeats may carry it.
pub(crate) fn is_label_value(v: &str) -> bool {
    v.len() <= 128 && !v.chars().any(char::is_control)
}

fn is_fact_token(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
}

impl Heartbeat {
    /// Refuses host facts past their bounds, naming the field: a heartbeat is untrusted
    /// input, and what it carries is kept in memory and matched by every directive pass.
    pub fn check_facts(&self) -> Result<(), String> {
        if self.labels.len() > MAX_LABELS {
            return Err(format!(
                "labels: {} labels, at most {MAX_LABELS}",
                self.labels.len()
            ));
        }
        for (k, v) in &self.labels {
            if !is_label_key(k) {
                return Err(format!(
                    "labels: key {:?} is not 1-63 of letters, digits, '.', '-', '_', '/'",
                    k.chars().take(80).collect::<String>()
                ));
            }
            if !is_label_value(v) {
                return Err(format!(
                    "labels.{k}: the value is longer than 128 bytes or holds control characters"
                ));
            }
        }
        for (field, value, max) in [
            ("arch", &self.arch, 32),
            ("os", &self.os, 32),
            ("os_version", &self.os_version, 64),
        ] {
            if !value.is_empty() && !is_fact_token(value, max) {
                return Err(format!(
                    "{field}: {:?} is not 1-{max} of letters, digits, '.', '-', '_'",
                    value.chars().take(max + 8).collect::<String>()
                ));
            }
        }
        if self.installers.len() > MAX_INSTALLERS {
            return Err(format!(
                "installers: {} types, at most {MAX_INSTALLERS}",
                self.installers.len()
            ));
        }
        if let Some(i) = self.installers.iter().find(|i| !is_fact_token(i, 32)) {
            return Err(format!(
                "installers: {:?} is not an installer type",
                i.chars().take(40).collect::<String>()
            ));
        }
        if let Some(f) = &self.install_failure {
            if f.version.len() > 128 || f.version.chars().any(char::is_control) {
                return Err(
                    "install_failure.version: longer than 128 bytes or holds control characters"
                        .into(),
                );
            }
            if !INSTALL_FAILURE_KINDS.contains(&f.kind.as_str()) {
                return Err(format!(
                    "install_failure.kind: {:?} is not one of {}",
                    f.kind.chars().take(40).collect::<String>(),
                    INSTALL_FAILURE_KINDS.join(", ")
                ));
            }
            if f.error.len() > 4096 {
                return Err("install_failure.error: longer than 4096 bytes".into());
            }
        }
        if let Some(f) = &self.update_failure {
            if f.version.len() > 128 {
                return Err("update_failure.version: longer than 128 bytes".into());
            }
            if f.error.len() > MAX_UPDATE_ERROR_BYTES {
                return Err(format!(
                    "update_failure.error: longer than {MAX_UPDATE_ERROR_BYTES} bytes"
                ));
            }
            if f.agent_output.len() > MAX_AGENT_OUTPUT_BYTES {
                return Err(format!(
                    "update_failure.agent_output: longer than {MAX_AGENT_OUTPUT_BYTES} bytes"
                ));
            }
        }
        if !self.product.is_empty() && !crate::domain::product::is_product_name(&self.product) {
            return Err(format!(
                "product: {:?} is not a product name (1 to 63 of a-z, 0-9 and '-', starting with a letter)",
                crate::domain::text::excerpt(&self.product, 64)
            ));
        }
        if let Some(r) = &self.install_result
            && (r.attempt_id.len() > 64 || r.error.len() > 4096)
        {
            return Err(
                "install_result: attempt_id longer than 64 bytes or error longer than 4096".into(),
            );
        }
        Ok(())
    }
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self {
            updater_id: String::new(),
            host_id: String::new(),
            hostname: String::new(),
            group: String::new(),
            version: String::new(),
            updater_version: None,
            updater_status: UpdaterStatus::Enabled,
            rollback: false,
            failed_version: None,
            healthy: None,
            follows: Follows::Rollout,
            install_failure: None,
            update_failure: None,
            labels: BTreeMap::new(),
            arch: String::new(),
            os: String::new(),
            os_version: String::new(),
            fips: false,
            installers: Vec::new(),
            install_result: None,
            trust: None,
            product: String::new(),
        }
    }
}

/// How often an updater heartbeats unless the server says otherwise; the server
/// forgets an agent after three missed heartbeats.
pub const DEFAULT_HEARTBEAT_SECONDS: u64 = 60;

/// `POST /v1/agents/heartbeat` response body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeartbeatResponse {
    /// When the updater should send its next heartbeat, at the latest.
    pub next_heartbeat_seconds: u64,
    /// Set when the host's group is not one of the rollout's (a typo?): what it
    /// presented, the catch-all group that serves it, and the groups that exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_group: Option<UnknownGroup>,
    /// Set when groups declare `match_labels` and the server counts this host in
    /// another group than the one it presents (`rollout::place`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_group: Option<String>,
    /// An install the server's directives ask of this host (checked by the host with
    /// [`InstallInstruction::check`] before anything runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<Box<InstallInstruction>>,
}

/// A group the rollout does not have, as the heartbeat answer reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnknownGroup {
    pub group: String,
    pub served_by: String,
    pub groups: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_tolerates_missing_and_unknown_fields() {
        let hb: Heartbeat = serde_json::from_str(
            r#"{"updater_id":"u1","version":"1.2.3","from_the_future":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(hb.updater_id, "u1");
        assert_eq!(hb.updater_status, UpdaterStatus::Enabled);
        assert_eq!(
            hb.healthy, None,
            "a heartbeat that says nothing of health is unknown"
        );
        assert_eq!(hb.follows, Follows::Rollout);
        assert!(!hb.rollback);
        let hb: Heartbeat =
            serde_json::from_str(r#"{"updater_id":"u1","healthy":true,"follows":"channel"}"#)
                .unwrap();
        assert_eq!((hb.healthy, hb.follows), (Some(true), Follows::Channel));
    }

    #[test]
    fn install_failures_are_bounded() {
        let hb = |kind: &str, error: String| Heartbeat {
            install_failure: Some(InstallFailure {
                version: "1.2.0".into(),
                kind: kind.into(),
                error,
            }),
            ..Heartbeat::default()
        };
        assert_eq!(hb("not_signed", "x".into()).check_facts(), Ok(()));
        assert!(
            hb("made_up", "x".into())
                .check_facts()
                .unwrap_err()
                .contains("install_failure.kind")
        );
        assert!(
            hb("download", "x".repeat(5000))
                .check_facts()
                .unwrap_err()
                .contains("install_failure.error")
        );
    }

    #[test]
    fn update_failures_are_bounded_and_cleaned() {
        let hb = |error: String, agent_output: String| Heartbeat {
            update_failure: Some(UpdateFailure {
                version: "1.2.0".into(),
                error,
                agent_output,
                time: None,
            }),
            ..Heartbeat::default()
        };
        assert_eq!(hb("x".into(), "y".into()).check_facts(), Ok(()));
        let long = "x".repeat(MAX_UPDATE_ERROR_BYTES + 1);
        assert!(
            hb(long.clone(), String::new())
                .check_facts()
                .unwrap_err()
                .contains("update_failure.error")
        );
        assert!(
            hb(String::new(), long)
                .check_facts()
                .unwrap_err()
                .contains("update_failure.agent_output")
        );
        // An updater that predates it sends none; one that sends it is read back.
        let old: Heartbeat = serde_json::from_str(r#"{"updater_id":"u1"}"#).unwrap();
        assert_eq!(old.update_failure, None);
        let f = UpdateFailure {
            version: "1.2.0".into(),
            error: "update to 1.2.0 failed:\n1.2.0 the agent is not running".into(),
            agent_output: "thread 'main' panicked\u{1b}[0m | boom".into(),
            time: None,
        }
        .cleaned();
        assert!(
            !f.error.contains('\n') && !f.agent_output.contains('\u{1b}'),
            "{f:?}"
        );
        let summary = f.summary(120);
        assert_eq!(
            summary,
            "update to 1.2.0 failed: 1.2.0 the agent is not running; the agent's last output: thread 'main' panicked [0m | boom"
        );
        // Cut to fit: the error's start and the output's end are kept.
        let summary = f.summary(80);
        assert!(summary.len() <= 80, "{summary}");
        assert!(summary.starts_with("update to"), "{summary}");
        assert!(summary.ends_with("| boom"), "{summary}");
    }

    #[test]
    fn find_response_has_teleport_shape() {
        let resp = FindResponse {
            edition: "community".into(),
            server_version: "0.1.0".into(),
            auto_update: AutoUpdateSettings {
                agent_version: "1.2.3".into(),
                agent_auto_update: true,
                agent_update_jitter_seconds: 60,
                ..Default::default()
            },
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::to_value(&resp).unwrap();
        assert_eq!(v["auto_update"]["agent_version"], "1.2.3");
        assert_eq!(v["auto_update"]["agent_auto_update"], true);
        assert_eq!(v["auto_update"]["agent_update_jitter_seconds"], 60);
        assert_eq!(v["fips"], false);
    }
}

/// `GET /v1/agents/schedule?group=G`: a group's maintenance window (seed 001's
/// exported schedule), in the forms hosts use: the recurring rule, systemd's
/// `OnCalendar=` value, and the next windows as instants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSchedule {
    /// The group whose window this is (an unknown group gets the last group's).
    pub group: String,
    pub days: Vec<crate::domain::window::Day>,
    /// The UTC hour the window opens, 0–23.
    pub start_hour: u8,
    pub duration_seconds: u64,
    /// `None` when the window never opens; the first of `on_calendars` when the
    /// group has several windows.
    pub on_calendar: Option<String>,
    pub windows: Vec<ScheduledWindow>,
    /// The group's schedule when its config uses `windows`, `timezone` or `blackouts`
    /// (every window's duration spelled out); `days` is then empty, so an updater that
    /// predates it refuses the schedule and keeps its last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<crate::domain::window::CalendarSpec>,
    /// With `calendar`: one `OnCalendar=` value per window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_calendars: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledWindow {
    pub start: jiff::Timestamp,
    pub stop: jiff::Timestamp,
}

/// The most windows a schedule lists (`count` is clamped to it).
pub(crate) const MAX_SCHEDULED_WINDOWS: usize = 64;
/// The most windows a group's schedule may have.
pub(crate) const MAX_CALENDAR_WINDOWS: usize = 32;
/// The most blackout entries a group's schedule may have (a year of single dates).
pub(crate) const MAX_BLACKOUTS: usize = 366;
/// The longest window a host accepts from a schedule: a week.
pub(crate) const MAX_WINDOW_SECONDS: u64 = 7 * 86_400;

impl AgentSchedule {
    /// The windows as tern-core computes with them, or why the schedule (which came
    /// over the network) cannot be used.
    pub fn window(&self) -> Result<crate::domain::window::Calendar, String> {
        let seconds_ok = |s: u64| s > 0 && s <= MAX_WINDOW_SECONDS;
        let days_ok = |days: &[crate::domain::window::Day]| !days.is_empty() && days.len() <= 8;
        if let Some(cal) = &self.calendar {
            if cal.windows.is_empty() || cal.windows.len() > MAX_CALENDAR_WINDOWS {
                return Err(format!(
                    "{} windows is not 1 to {MAX_CALENDAR_WINDOWS}",
                    cal.windows.len()
                ));
            }
            if cal.blackouts.len() > MAX_BLACKOUTS {
                return Err(format!(
                    "{} blackouts is more than {MAX_BLACKOUTS}",
                    cal.blackouts.len()
                ));
            }
            for w in &cal.windows {
                match w.duration {
                    Some(d) if seconds_ok(d.as_secs()) => {}
                    _ => return Err("a window's duration is not between 1s and a week".into()),
                }
                if !days_ok(&w.days) {
                    return Err(format!("{} days is not 1 to 8", w.days.len()));
                }
            }
            // Every duration is set (checked above): the default is never used.
            return cal.calendar(jiff::SignedDuration::ZERO);
        }
        if self.start_hour > 23 {
            return Err(format!("start_hour {} is not an hour", self.start_hour));
        }
        if !seconds_ok(self.duration_seconds) {
            return Err(format!(
                "a window of {}s is not between 1s and a week",
                self.duration_seconds
            ));
        }
        if !days_ok(&self.days) {
            return Err(format!("{} days is not 1 to 8", self.days.len()));
        }
        Ok(crate::domain::window::Calendar::hourly_utc(
            &self.days,
            self.start_hour,
            // At most a week, checked above.
            jiff::SignedDuration::from_secs(
                i64::try_from(self.duration_seconds).unwrap_or(i64::MAX),
            ),
        ))
    }
}
