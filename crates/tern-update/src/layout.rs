//! Where everything lives on the host, per namespace (`--install-suffix`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::state::Status;

/// The directory of a package install (`link-package`), shared by all namespaces.
pub(crate) const SYSTEM_DIR: &str = "system";

/// Where executables are linked in the default namespace.
pub const DEFAULT_LINK_DIR: &str = "/usr/local/bin";
pub const DEFAULT_UNIT_DIR: &str = "/usr/local/lib/systemd/system";
pub const DEFAULT_SYSTEMD_DIR: &str = "/etc/systemd/system";

/// The `update.yaml` of a namespace, before its layout is known (the layout's dirs
/// may come from that file).
pub fn update_yaml_in(install_dir: &Path, suffix: &str) -> PathBuf {
    install_dir.join(suffix).join("update.yaml")
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub install_dir: PathBuf,
    pub suffix: String,
    /// Where executables are linked.
    pub link_dir: PathBuf,
    /// Where the agent's unit file is linked (systemd looks here).
    pub unit_dir: PathBuf,
    /// Where `setup` writes the updater's units and the agent's drop-in.
    pub systemd_dir: PathBuf,
}

/// Checks a namespace name: short, lowercase, no path tricks, not a reserved name.
pub fn validate_suffix(suffix: &str) -> Result<()> {
    let ok = !suffix.is_empty()
        && suffix.len() <= 32
        && suffix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && suffix != SYSTEM_DIR;
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidSuffix {
            suffix: suffix.to_string(),
        })
    }
}

impl Layout {
    /// The settings' dirs (absolute), else the defaults: `/usr/local/bin` for links in
    /// the default namespace, `<install-dir>/<suffix>/bin` in the others.
    pub fn new(install_dir: PathBuf, suffix: &str, settings: &Settings) -> Self {
        let link_dir = match &settings.link_dir {
            Some(d) => d.clone(),
            None if suffix == "default" => PathBuf::from(DEFAULT_LINK_DIR),
            None => install_dir.join(suffix).join("bin"),
        };
        let or = |d: &Option<PathBuf>, default: &str| {
            d.clone().unwrap_or_else(|| PathBuf::from(default))
        };
        Self {
            link_dir,
            unit_dir: or(&settings.unit_dir, DEFAULT_UNIT_DIR),
            systemd_dir: or(&settings.systemd_dir, DEFAULT_SYSTEMD_DIR),
            suffix: suffix.to_string(),
            install_dir,
        }
    }

    /// The settings with this layout's dirs filled in: what `enable` saves, so that a
    /// later change of the defaults never moves an installed host's links.
    pub fn fill(&self, settings: &Settings) -> Settings {
        Settings {
            link_dir: Some(self.link_dir.clone()),
            unit_dir: Some(self.unit_dir.clone()),
            systemd_dir: Some(self.systemd_dir.clone()),
            ..settings.clone()
        }
    }

    pub(crate) fn ns_dir(&self) -> PathBuf {
        self.install_dir.join(&self.suffix)
    }
    pub(crate) fn versions_dir(&self) -> PathBuf {
        self.ns_dir().join("versions")
    }
    pub(crate) fn version_dir(&self, version: &str) -> PathBuf {
        self.versions_dir().join(version)
    }
    pub(crate) fn update_yaml(&self) -> PathBuf {
        self.ns_dir().join("update.yaml")
    }
    /// The last heartbeat's time and result (for `status`). Its own file: heartbeats
    /// are also sent without the lock, and must not rewrite update.yaml then.
    pub(crate) fn heartbeat_file(&self) -> PathBuf {
        self.ns_dir().join("last_heartbeat.yaml")
    }
    /// The last find round (`state::save_find`).
    pub(crate) fn find_file(&self) -> PathBuf {
        self.ns_dir().join("last_find.yaml")
    }
    /// The last install that failed before the switch (`state::save_install_failure`).
    pub(crate) fn install_failure_file(&self) -> PathBuf {
        self.ns_dir().join("install_failure.yaml")
    }
    /// This host's own credential from ternd (`POST /v1/agents/join`), 0600.
    pub(crate) fn credential_file(&self) -> PathBuf {
        self.ns_dir().join("host.token")
    }
    /// An install instruction from a heartbeat answer, kept until a step holding the
    /// lock runs it (heartbeats are also sent without the lock).
    pub(crate) fn install_pending_file(&self) -> PathBuf {
        self.ns_dir().join("install_pending.json")
    }
    pub(crate) fn lock_file(&self) -> PathBuf {
        self.ns_dir().join("update.lock")
    }
    pub(crate) fn id_file(&self) -> PathBuf {
        self.ns_dir().join("updater_id")
    }
    pub(crate) fn system_dir(&self) -> PathBuf {
        self.install_dir.join(SYSTEM_DIR)
    }
    /// Name of this namespace's updater units (`tern-update.service`, or
    /// `tern-update-<suffix>.service` outside the default namespace).
    pub(crate) fn updater_unit_stem(&self) -> String {
        if self.suffix == "default" {
            "tern-update".to_string()
        } else {
            format!("tern-update-{}", self.suffix)
        }
    }
    /// True when `path` lies inside this namespace's versions directory.
    pub(crate) fn is_managed(&self, path: &Path) -> bool {
        path.starts_with(self.versions_dir())
    }
    /// True when `path` lies inside the package install.
    pub(crate) fn is_package(&self, path: &Path) -> bool {
        path.starts_with(self.system_dir())
    }
}

/// Version strings become directory names: refuse anything that is not a plain name.
pub(crate) fn validate_version(version: &str) -> Result<()> {
    let ok = !version.is_empty()
        && version.len() <= 128
        && version != "."
        && version != ".."
        && !version.starts_with('.')
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidVersion {
            version: version.to_string(),
        })
    }
}

/// The name of `version` on this host (its directory under `versions/`, as `status`
/// records it): tern-core's normal form, the rule ternd and tern-ctl use.
///
/// tern-update's earlier rule (drop a leading `v` before a digit, semver or not) named
/// `v1.2` and `v16.0.0_x` differently: tern-core keeps them whole. A version `status`
/// still knows by its earlier name (active, backup or skipped) keeps that name, so an
/// existing install is found instead of downloaded again under a second name.
pub(crate) fn version_name(version: &str, status: &Status) -> String {
    let name = tern_core::version::normalize(version);
    let old = pre_core_name(version);
    let known = [&status.active, &status.backup, &status.skip]
        .into_iter()
        .any(|v| v.as_deref() == Some(old.as_str()));
    if old != name && known { old } else { name }
}

/// tern-update's earlier version rule; only to find what it named.
fn pre_core_name(version: &str) -> String {
    let v = version.trim();
    match v.strip_prefix('v') {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => rest.to_string(),
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        for ok in ["default", "a", "prod-2", "x_y"] {
            assert!(validate_suffix(ok).is_ok(), "{ok}");
        }
        for bad in ["", "system", "../x", "A", "a/b", &"x".repeat(33)] {
            assert!(validate_suffix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions() {
        for ok in ["1.2.3", "1.2.3-rc.1+build.5", "16.0.0_x"] {
            assert!(validate_version(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "../1", "1/2", ".hidden", "1 2"] {
            assert!(validate_version(bad).is_err(), "{bad}");
        }
        let none = Status::default();
        assert_eq!(version_name("v1.2.3", &none), "1.2.3");
        assert_eq!(version_name(" 1.2.3 ", &none), "1.2.3");
        assert_eq!(version_name("vnext", &none), "vnext");
    }

    #[test]
    fn version_names_follow_tern_core() {
        let none = Status::default();
        for (input, want) in [
            ("v1.2.3-rc.1+b.7", "1.2.3-rc.1+b.7"),
            ("1.2.3+001", "1.2.3+001"),
            ("16.0.0_x", "16.0.0_x"),
            // Not semver: tern-core keeps the `v`, where tern-update used to drop it.
            ("v1.2", "v1.2"),
            ("v16.0.0_x", "v16.0.0_x"),
        ] {
            assert_eq!(version_name(input, &none), want, "{input}");
            assert_eq!(
                version_name(input, &none),
                tern_core::version::normalize(input)
            );
        }
    }

    #[test]
    fn versions_installed_under_their_old_name_keep_it() {
        let known = |active: Option<&str>, backup: Option<&str>, skip: Option<&str>| Status {
            active: active.map(String::from),
            backup: backup.map(String::from),
            skip: skip.map(String::from),
            ..Status::default()
        };
        assert_eq!(version_name("v1.2", &known(Some("1.2"), None, None)), "1.2");
        assert_eq!(
            version_name("v1.2", &known(Some("2.0.0"), Some("1.2"), None)),
            "1.2"
        );
        assert_eq!(
            version_name("v1.2", &known(Some("2.0.0"), None, Some("1.2"))),
            "1.2"
        );
        assert_eq!(
            version_name("v1.2", &known(Some("1.3"), Some("1.1"), None)),
            "v1.2"
        );
        assert_eq!(
            version_name("v1.2.3", &known(Some("1.2.3"), None, None)),
            "1.2.3"
        );
    }
}
