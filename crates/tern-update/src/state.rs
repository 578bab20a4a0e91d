//! `update.yaml`: the namespace's spec (what the operator asked) and status (what the
//! updater did). Written atomically, so it is readable after a kill at any instant.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tern_core::wire::UpdaterStatus;

pub use crate::error::StateProblem;
pub(crate) use crate::error::state::KIND;
use crate::error::state::{FOOTER, HEADER};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::settings::Settings;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateFile {
    pub version: String,
    pub kind: String,
    pub spec: Spec,
    pub status: Status,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spec {
    /// Base URL of ternd (find and heartbeat).
    pub server: String,
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_template: Option<String>,
    /// Whether `update` may change the version.
    pub enabled: bool,
    /// Whether the version is pinned (`pin`); `update` does nothing while pinned.
    pub pinned: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_version: Option<String>,
    /// When the pin lifts by itself (`pin --until`); none: until `unpin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_until: Option<jiff::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_config: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_token_file: Option<PathBuf>,
    /// Channel mode (seed 001): the channel's base URL, answering `version` and
    /// `critical`. Unset: the host follows find.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Package mode: the agent is installed by the OS package manager (apt or yum)
    /// instead of from tarballs. Unset: tarballs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageSpec>,
    /// How many versions to keep installed: 2 = active + backup, 1 = active only.
    pub keep: u32,
    /// The host's labels (`enable --label k=v`), sent in heartbeats for directives to
    /// select on.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The agent's build is a FIPS build (`enable --fips true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fips: bool,
    /// Installer types this host accepts from version directives besides its native one
    /// (`enable --installer local-script`); heartbeats advertise them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installers: Vec<String>,
    /// Where the signed release metadata (TUF) is, for a host enrolled with
    /// `--trust-root` (the pinned root itself is in `trust.json`). Unset: unverified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_url: Option<String>,
    /// This namespace manages tern-update itself (`enable --self-update`, only in the
    /// `updater` namespace): its "agent" is the updater's own release, checked by
    /// `tern-update self-check` instead of a service (`self_update`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_update: bool,
    /// The product this namespace installs, as its ternd names it (`enable
    /// --product`; `updater` by default for `--self-update` against the agent
    /// namespace's ternd). Unset: the agent, or whatever a ternd serves without a
    /// product (the updater's own second ternd of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// How long a command handed to this namespace's updater release may run before
    /// the watch counts it as hung (`enable --self-update --release-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_timeout_seconds: Option<u64>,
    /// The global flags `enable` was given (link dirs, host names, transport).
    #[serde(flatten)]
    pub settings: Settings,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            server: String::new(),
            group: String::new(),
            base_url: None,
            url_template: None,
            enabled: false,
            pinned: false,
            pinned_version: None,
            pinned_until: None,
            service_config: None,
            join_token_file: None,
            channel: None,
            package: None,
            keep: 2,
            labels: std::collections::BTreeMap::new(),
            fips: false,
            installers: Vec::new(),
            trust_url: None,
            self_update: false,
            product: None,
            release_timeout_seconds: None,
            settings: Settings::default(),
        }
    }
}

impl Spec {
    /// Lifts a pin whose `pinned_until` has come (the next `update` follows the server
    /// again); whether it did.
    pub(crate) fn lift_expired_pin(&mut self, now: jiff::Timestamp) -> bool {
        match self.pinned_until {
            Some(until) if self.pinned && until <= now => {
                self.pinned = false;
                self.pinned_version = None;
                self.pinned_until = None;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn updater_status(&self) -> UpdaterStatus {
        if !self.enabled {
            UpdaterStatus::Disabled
        } else if self.pinned {
            UpdaterStatus::Pinned
        } else {
            UpdaterStatus::Enabled
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// The version the links point to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// The previous good version, kept for rollback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// A version that failed here and is not retried automatically.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<String>,
    /// True when the active version was restored by an automatic rollback.
    pub rollback: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update: Option<LastUpdate>,
    /// A switch that was started and not finished (the process was killed). The next
    /// run reverts it before doing anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<InProgress>,
    /// The last updates failed because of this host, not of the version (the reverted
    /// version failed the same health check): nothing is skipped, and the timer's runs
    /// wait for `retry_after`. Cleared by a successful update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_failure: Option<EnvironmentFailure>,
    /// When an update last started outside the window because the agent was unhealthy
    /// (at most one such start per half hour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_forced_attempt: Option<Timestamp>,
    /// The maintenance schedule ternd last sent (channel mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<tern_core::wire::AgentSchedule>,
    /// Channel mode: what the channel answered last, for `status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelSeen>,
    /// The outcome of the last install a version directive asked for; every heartbeat
    /// carries it until a newer attempt replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_result: Option<tern_core::directive::state::AttemptResult>,
    /// The attempt a directive install started and has not finished (its journal): a
    /// run that finds it set was interrupted, and reports the attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_running: Option<String>,
    /// The ids of the last attempts run (newest last, bounded): ternd may send an
    /// attempt again, and it is never run twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub install_attempts: Vec<String>,
    /// The version the last successful local-script install put in place: on a host
    /// whose agent tern-update does not install itself, the version heartbeats report
    /// (the script's exit 0 says it installed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_version: Option<String>,
    /// The `updater` namespace: how many of its runs in a row since the switch found
    /// the active release proven (every namespace's heartbeat and find by it); a
    /// release reports healthy (and passes a canary) only from the second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub proven_runs: u32,
    /// The `updater` namespace: whether the agent was healthy when the active release
    /// was switched in; a release is not proven while an agent healthy then is not now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_healthy_at_switch: Option<bool>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The channel's last answers, as `status` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelSeen {
    pub time: Timestamp,
    /// The version, or why there was none (unreachable, malformed).
    pub version: String,
    /// `yes`, another value, or why there was none.
    pub critical: String,
    /// Whether the host was inside its maintenance window.
    pub in_window: bool,
    /// Whether it knew its window at all (ternd had sent its schedule).
    #[serde(default = "known")]
    pub window_known: bool,
    /// What the run decided.
    pub decision: String,
}

/// A `ChannelSeen` written before `window_known` existed came from a run that
/// treated a missing schedule as open: say known, as it acted.
fn known() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentFailure {
    /// The version the last attempt tried to install.
    pub target: String,
    /// When the last attempt failed.
    pub time: Timestamp,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// The timer's runs do not try again before this.
    pub retry_after: Timestamp,
    pub error: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastUpdate {
    pub time: Timestamp,
    pub target: String,
    pub success: bool,
    /// Why it failed, ending with the agent's last output when there was some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agent's last output alone (also at the end of `error`), for the heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_output: Option<String>,
}

/// How `error` ends when the agent's output is appended to it.
const OUTPUT_LEAD: &str = "; the agent's last output: ";

impl LastUpdate {
    /// A failed update's error, with the agent's last output when there is some.
    pub(crate) fn error_with_output(reason: String, output: Option<&str>) -> String {
        match output {
            Some(out) => format!("{reason}{OUTPUT_LEAD}{out}"),
            None => reason,
        }
    }

    /// What the heartbeat says of a failed update (`None` for a successful one):
    /// the error without the output appended to it, and the output apart, each cut to
    /// what ternd accepts (`wire::MAX_*`) and cleaned of control characters.
    pub(crate) fn failure(&self) -> Option<tern_core::wire::UpdateFailure> {
        if self.success {
            return None;
        }
        let output = self.agent_output.as_deref().unwrap_or_default();
        let error = self.error.as_deref().unwrap_or("the update failed");
        let error = if output.is_empty() {
            error
        } else {
            error
                .strip_suffix(output)
                .and_then(|e| e.strip_suffix(OUTPUT_LEAD))
                .unwrap_or(error)
        };
        Some(tern_core::wire::UpdateFailure {
            version: tern_core::text::clean(&self.target, 128),
            error: tern_core::text::clean(error, tern_core::wire::MAX_UPDATE_ERROR_BYTES),
            agent_output: tern_core::text::clean_tail(
                output,
                tern_core::wire::MAX_AGENT_OUTPUT_BYTES,
            ),
            time: Some(self.time),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InProgress {
    #[serde(default)]
    pub from: Option<String>,
    pub to: String,
    pub started: Timestamp,
    /// Set once the old version's DB backup is complete: from then on the live DB may
    /// have been replaced or migrated, so reverting restores the backup.
    #[serde(default)]
    pub db_backed_up: bool,
}

/// The OS package manager of package mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    /// `apt-cache madison`, `apt-get update|install`, `dpkg-query` (Debian, Ubuntu).
    Apt,
    /// `yum install|downgrade`, `rpm -q` (RHEL, CentOS, Amazon Linux, Fedora).
    Yum,
}

impl Manager {
    pub fn label(self) -> &'static str {
        match self {
            Self::Apt => "apt",
            Self::Yum => "yum",
        }
    }
}

/// What `enable --package NAME --package-manager M` saves in `update.yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageSpec {
    pub name: String,
    pub manager: Manager,
}

/// When the last heartbeat was sent and whether ternd took it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastHeartbeat {
    pub time: Timestamp,
    pub accepted: bool,
    /// Why it was not taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The updater release that sent it (`reexec::running_release`): what the watch of
    /// a new release reads as proof that the release does its job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// When this namespace last asked its server (find) and whether it answered, and which
/// updater release asked: with [`LastHeartbeat`], the proof that a new updater release
/// does its job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastFind {
    pub time: Timestamp,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Best effort, as [`save_heartbeat`].
pub(crate) fn save_find(path: &Path, f: &LastFind) {
    let written = serde_yaml_ng::to_string(f)
        .map_err(|source| Error::StateSerialize {
            path: path.to_path_buf(),
            source,
        })
        .and_then(|text| fsutil::write_atomic(path, text.as_bytes(), 0o644));
    if let Err(e) = written {
        crate::log::warn(format!("could not record the find round: {e}"));
    }
}

pub(crate) fn load_find(path: &Path) -> Option<LastFind> {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Best effort: a heartbeat's result is for `status`, never a reason to fail a run.
pub(crate) fn save_heartbeat(path: &Path, hb: &LastHeartbeat) {
    let written = serde_yaml_ng::to_string(hb)
        .map_err(|source| Error::StateSerialize {
            path: path.to_path_buf(),
            source,
        })
        .and_then(|text| fsutil::write_atomic(path, text.as_bytes(), 0o644));
    if let Err(e) = written {
        crate::log::warn(format!("could not record the heartbeat: {e}"));
    }
}

/// Records the last install that failed before the switch (not signed, not as
/// published, missing, download, disk), or clears it (`None`). Kept apart from
/// `update.yaml`, which a refused install leaves untouched: it is only what the
/// heartbeats report, so ternd counts it as a failure of that version.
pub(crate) fn save_install_failure(path: &Path, failure: Option<&tern_core::wire::InstallFailure>) {
    let written = match failure {
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", e)),
            _ => Ok(()),
        },
        Some(f) => serde_yaml_ng::to_string(f)
            .map_err(|source| Error::StateSerialize {
                path: path.to_path_buf(),
                source,
            })
            .and_then(|text| fsutil::write_atomic(path, text.as_bytes(), 0o644)),
    };
    if let Err(e) = written {
        crate::log::warn(format!("could not record the failed install: {e}"));
    }
}

/// The last install that failed before the switch, if one is recorded (an unreadable
/// record is none: it only feeds heartbeats).
pub(crate) fn load_install_failure(path: &Path) -> Option<tern_core::wire::InstallFailure> {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The last heartbeat recorded; `None` when none was (or the record is unreadable:
/// it is only shown).
pub(crate) fn load_heartbeat(path: &Path) -> Option<LastHeartbeat> {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Reads `update.yaml`; `None` when the namespace was never enabled.
pub(crate) fn load(path: &Path) -> Result<Option<UpdateFile>> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("read {}", path.display()), e)),
    };
    let damaged = |problem| Error::State {
        path: path.to_path_buf(),
        problem,
    };
    let text = String::from_utf8(text).map_err(|_| damaged(StateProblem::NotText))?;
    parse(&text).map(Some).map_err(damaged)
}

/// The settings saved in `update_yaml` (none when it does not exist). A damaged file is
/// an error, except for `enable`, which replaces it (and says so).
pub fn saved_settings(update_yaml: &Path, enable: bool) -> Result<Settings> {
    match load(update_yaml) {
        Ok(file) => Ok(file.map(|f| f.spec.settings).unwrap_or_default()),
        Err(Error::State { .. }) if enable => Ok(Settings::default()),
        Err(e) => Err(e),
    }
}

/// Parses `update.yaml`, refusing a file that is damaged rather than filling the gaps
/// with defaults.
pub fn parse(text: &str) -> std::result::Result<UpdateFile, StateProblem> {
    if text.trim().is_empty() {
        return Err(StateProblem::Empty);
    }
    // Files written before the header existed have no footer either: for them the
    // required keys below are the check.
    let last_line = text.lines().rev().map(str::trim).find(|l| !l.is_empty());
    if text.lines().next() == Some(HEADER) && last_line != Some(FOOTER) {
        return Err(StateProblem::Truncated);
    }
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)?;
    let top = value.as_mapping().ok_or(StateProblem::NotAMapping)?;
    let kind = top.get("kind").ok_or(StateProblem::Missing("kind"))?;
    if kind.as_str() != Some(KIND) {
        return Err(StateProblem::WrongKind(
            kind.as_str().unwrap_or("(not a string)").to_string(),
        ));
    }
    for (section, keys) in [
        ("spec", &["server", "enabled", "pinned"][..]),
        ("status", &["rollback"][..]),
    ] {
        let map = top
            .get(section)
            .ok_or(StateProblem::Missing(section))?
            .as_mapping()
            .ok_or(StateProblem::NotAMapping)?;
        for key in keys {
            if !map.contains_key(*key) {
                return Err(StateProblem::Missing(match (section, *key) {
                    ("spec", "server") => "spec.server",
                    ("spec", "enabled") => "spec.enabled",
                    ("spec", "pinned") => "spec.pinned",
                    _ => "status.rollback",
                }));
            }
        }
    }
    Ok(serde_yaml_ng::from_value(value)?)
}

pub fn save(path: &Path, file: &UpdateFile) -> Result<()> {
    let mut file = file.clone();
    file.version = "v1".into();
    file.kind = KIND.into();
    let yaml = serde_yaml_ng::to_string(&file).map_err(|source| Error::StateSerialize {
        path: path.to_path_buf(),
        source,
    })?;
    let text = format!("{HEADER}\n{yaml}{FOOTER}\n");
    fsutil::write_atomic(path, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_update_is_reported_with_its_error_and_the_agents_output_apart() {
        let out = "thread 'main' panicked | \u{1b}[1mboom";
        let last = LastUpdate {
            time: Timestamp::UNIX_EPOCH,
            target: "1.2.0".into(),
            success: false,
            error: Some(LastUpdate::error_with_output(
                "update to 1.2.0 failed: 1.2.0 the agent is not running (5 checks in a row)".into(),
                Some(out),
            )),
            agent_output: Some(out.into()),
        };
        let f = last.failure().unwrap();
        assert_eq!(f.version, "1.2.0");
        assert_eq!(
            f.error,
            "update to 1.2.0 failed: 1.2.0 the agent is not running (5 checks in a row)"
        );
        assert_eq!(f.agent_output, "thread 'main' panicked |  [1mboom");
        assert_eq!(
            tern_core::wire::Heartbeat {
                update_failure: Some(f),
                ..Default::default()
            }
            .check_facts(),
            Ok(())
        );
        // Recorded before the output was kept apart: the error as it is.
        let older = LastUpdate {
            agent_output: None,
            ..last.clone()
        };
        assert!(older.failure().unwrap().error.ends_with("boom"));
        let ok = LastUpdate {
            success: true,
            error: None,
            agent_output: None,
            ..last
        };
        assert_eq!(ok.failure(), None);
    }

    #[test]
    fn roundtrip_and_tolerance() {
        let mut f = UpdateFile {
            kind: KIND.into(),
            ..UpdateFile::default()
        };
        f.spec.server = "https://t.example".into();
        f.spec.enabled = true;
        f.status.active = Some("1.2.3".into());
        f.status.in_progress = Some(InProgress {
            from: Some("1.2.3".into()),
            to: "1.3.0".into(),
            started: Timestamp::UNIX_EPOCH,
            db_backed_up: true,
        });
        let text = serde_yaml_ng::to_string(&f).unwrap();
        assert_eq!(parse(&text).unwrap(), f);
        let old = parse(
            "kind: update_config\nspec:\n  server: x\n  enabled: true\n  pinned: false\n  future_field: 1\nstatus:\n  rollback: false\n",
        )
        .unwrap();
        assert_eq!(old.spec.server, "x");
        assert_eq!(old.spec.keep, 2);
        assert_eq!(old.spec.settings, Settings::default());
        let mut with = f.clone();
        with.spec.settings = Settings {
            link_dir: Some("/l".into()),
            insecure: Some(true),
            http_timeout: Some(9),
            ..Settings::default()
        };
        let text = serde_yaml_ng::to_string(&with).unwrap();
        assert!(text.contains("\n  link_dir: /l\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), with);
        assert!(parse("kind: db_backup\n").is_err());
        assert!(parse("spec: [").is_err());
    }

    #[test]
    fn package_mode_is_saved_and_files_without_it_load() {
        let base = "kind: update_config\nspec:\n  server: x\n  enabled: true\n  pinned: false\n";
        let old = parse(&format!("{base}status:\n  rollback: false\n")).unwrap();
        assert_eq!(old.spec.package, None);
        assert!(!serde_yaml_ng::to_string(&old).unwrap().contains("package"));
        let f = parse(&format!(
            "{base}  package:\n    name: tern-agent\n    manager: yum\nstatus:\n  rollback: false\n"
        ))
        .unwrap();
        let p = f.spec.package.clone().unwrap();
        assert_eq!(p.name, "tern-agent");
        assert_eq!(p.manager, crate::package::Manager::Yum);
        let text = serde_yaml_ng::to_string(&f).unwrap();
        assert!(
            text.contains("package:\n    name: tern-agent\n    manager: yum\n"),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), f);
        assert!(
            parse(&format!(
                "{base}  package:\n    name: x\n    manager: pacman\nstatus:\n  rollback: false\n"
            ))
            .is_err()
        );
    }

    #[test]
    fn damage_is_named() {
        let cases = [
            ("", "empty"),
            ("spec: [", "not valid YAML"),
            ("- a\n", "not a YAML mapping"),
            ("spec: {}\nstatus: {}\n", "kind is missing"),
            (
                "kind: update_config\nstatus: {rollback: false}\n",
                "spec is missing",
            ),
            (
                "kind: update_config\nspec:\n  server: x\n",
                "spec.enabled is missing",
            ),
            (
                "kind: update_config\nspec: {server: x, enabled: true, pinned: false}\nstatus: {}\n",
                "status.rollback is missing",
            ),
            (&format!("{HEADER}\nkind: update_config\n"), "cut short"),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err().to_string();
            assert!(got.contains(want), "{text:?}: {got}");
        }
    }

    #[test]
    fn updater_status() {
        let mut s = Spec::default();
        assert_eq!(s.updater_status(), UpdaterStatus::Disabled);
        s.enabled = true;
        assert_eq!(s.updater_status(), UpdaterStatus::Enabled);
        s.pinned = true;
        assert_eq!(s.updater_status(), UpdaterStatus::Pinned);
    }
}
