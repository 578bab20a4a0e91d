//! The global flags `enable` saves in `update.yaml`, so that every later command (the
//! timer's, an operator's `pin` or `status`) links, names itself and reaches the server
//! as `enable` did without repeating them.
//!
//! The rule: a flag given to a command wins for that run; one not given comes from
//! `update.yaml`; only `enable` saves. `--link-dir` and `--unit-dir` are the exception:
//! the links live there, so a later command given a different one is refused rather
//! than leaving links in two places; `enable` given a new one moves the links.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_timeout: Option<u64>,
}

/// A later command given a link or unit dir other than the one the links are in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{flag} {} differs from {} that `tern-update enable` saved: the links are there; leave {flag} out, or run `tern-update enable --server URL {flag} {}` to move them",
    given.display(), saved.display(), given.display()
)]
pub struct Conflict {
    pub flag: &'static str,
    pub given: PathBuf,
    pub saved: PathBuf,
}

fn pick<T: Clone>(given: &Option<T>, saved: &Option<T>) -> Option<T> {
    given.clone().or_else(|| saved.clone())
}

/// What a command runs with: each flag `given`, else what `saved` holds. `enable` may
/// change the link and unit dirs; other commands may only repeat them.
pub fn resolve(given: &Settings, saved: &Settings, enable: bool) -> Result<Settings, Conflict> {
    if !enable {
        for (flag, g, s) in [
            ("--link-dir", &given.link_dir, &saved.link_dir),
            ("--unit-dir", &given.unit_dir, &saved.unit_dir),
        ] {
            if let (Some(g), Some(s)) = (g, s)
                && g != s
            {
                return Err(Conflict {
                    flag,
                    given: g.clone(),
                    saved: s.clone(),
                });
            }
        }
    }
    Ok(Settings {
        link_dir: pick(&given.link_dir, &saved.link_dir),
        unit_dir: pick(&given.unit_dir, &saved.unit_dir),
        systemd_dir: pick(&given.systemd_dir, &saved.systemd_dir),
        hostname: pick(&given.hostname, &saved.hostname),
        host_id: pick(&given.host_id, &saved.host_id),
        ca_cert: pick(&given.ca_cert, &saved.ca_cert),
        insecure: pick(&given.insecure, &saved.insecure),
        http_timeout: pick(&given.http_timeout, &saved.http_timeout),
    })
}

impl Settings {
    /// The settings `saved` holds that `given` lacks: what a delegated updater (an
    /// older one may not read them from update.yaml) must be told on its command line.
    pub fn missing_from(saved: &Self, given: &Self) -> Self {
        fn only<T: Clone>(saved: &Option<T>, given: &Option<T>) -> Option<T> {
            if given.is_some() { None } else { saved.clone() }
        }
        Self {
            link_dir: only(&saved.link_dir, &given.link_dir),
            unit_dir: only(&saved.unit_dir, &given.unit_dir),
            systemd_dir: only(&saved.systemd_dir, &given.systemd_dir),
            hostname: only(&saved.hostname, &given.hostname),
            host_id: only(&saved.host_id, &given.host_id),
            ca_cert: only(&saved.ca_cert, &given.ca_cert),
            insecure: only(&saved.insecure, &given.insecure),
            http_timeout: only(&saved.http_timeout, &given.http_timeout),
        }
    }

    /// These settings as command-line flags, in the forms every tern-update since the
    /// flags exist accepts (`--insecure` bare, only when true).
    pub fn flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        let paths = [
            ("--link-dir", &self.link_dir),
            ("--unit-dir", &self.unit_dir),
            ("--systemd-dir", &self.systemd_dir),
            ("--ca-cert", &self.ca_cert),
        ];
        for (flag, value) in paths {
            if let Some(v) = value {
                out.push(flag.to_string());
                out.push(v.display().to_string());
            }
        }
        for (flag, value) in [("--hostname", &self.hostname), ("--host-id", &self.host_id)] {
            if let Some(v) = value {
                out.push(format!("{flag}={v}"));
            }
        }
        if self.insecure == Some(true) {
            out.push("--insecure".into());
        }
        if let Some(t) = self.http_timeout {
            out.push(format!("--http-timeout={t}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(link: Option<&str>, unit: Option<&str>) -> Settings {
        Settings {
            link_dir: link.map(PathBuf::from),
            unit_dir: unit.map(PathBuf::from),
            ..Settings::default()
        }
    }

    #[test]
    fn given_wins_saved_fills_in_and_link_dirs_do_not_move_outside_enable() {
        let saved = Settings {
            hostname: Some("web-1".into()),
            insecure: Some(true),
            ..dirs(Some("/l"), Some("/u"))
        };
        let given = Settings {
            hostname: Some("once".into()),
            ..dirs(Some("/l"), None)
        };
        let got = resolve(&given, &saved, false).unwrap();
        assert_eq!(got.hostname.as_deref(), Some("once"));
        assert_eq!(got.insecure, Some(true));
        assert_eq!(got.unit_dir, Some(PathBuf::from("/u")));

        let moved = dirs(Some("/elsewhere"), None);
        let err = resolve(&moved, &saved, false).unwrap_err();
        assert_eq!(err.flag, "--link-dir");
        assert!(err.to_string().contains("enable"), "{err}");
        assert!(resolve(&dirs(None, Some("/u2")), &saved, false).is_err());
        assert_eq!(
            resolve(&moved, &saved, true).unwrap().link_dir,
            Some(PathBuf::from("/elsewhere"))
        );
        // Nothing saved (an update.yaml older than these fields): the flags as given.
        assert_eq!(resolve(&moved, &Settings::default(), false).unwrap(), moved);
    }

    #[test]
    fn flags_for_a_delegate() {
        let saved = Settings {
            hostname: Some("web 1".into()),
            insecure: Some(false),
            http_timeout: Some(9),
            ..dirs(Some("/l"), Some("/u"))
        };
        let given = dirs(Some("/l"), None);
        assert_eq!(
            Settings::missing_from(&saved, &given).flags(),
            ["--unit-dir", "/u", "--hostname=web 1", "--http-timeout=9"]
        );
    }
}
