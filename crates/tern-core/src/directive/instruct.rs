//! The install instruction a server hands a host in its heartbeat answer, and what a
//! host checks of it before acting. The host treats it as untrusted input: every field
//! is checked again here, whatever the server validated, and a local script gets the
//! target only through environment variables of checked characters.

use std::collections::BTreeMap;
use std::time::Duration;

use super::env::{TARGET_PLACEHOLDERS, is_allowed_env_name, is_safe_env_value, reserved_env_names};
use super::resource::{InstallerType, Target};
use crate::domain::duration::GoDuration;
pub use crate::domain::install::InstallInstruction;
use crate::domain::version::Version;

/// A local script's default timeout.
pub(crate) const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);

fn is_attempt_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The value of a `{target.*}` placeholder.
fn placeholder(target: &Target, ph: &str) -> Option<String> {
    Some(match ph {
        "{target.version}" => target.version.clone(),
        "{target.arch}" => target.arch.clone().unwrap_or_default(),
        "{target.fips}" => target.fips.map(|f| f.to_string()).unwrap_or_default(),
        "{target.size}" => target.size.map(|s| s.to_string()).unwrap_or_default(),
        "{target.sha256}" => target.sha256.clone().unwrap_or_default(),
        _ => return None,
    })
}

/// The script's environment: every template with its placeholders replaced, each
/// resulting value checked against `^[A-Za-z0-9._-]*$` (a target version such as
/// `1.1.0;rm -rf /` is refused here, never passed on). Also sets `TERN_TARGET_VERSION`.
pub fn render_env(
    env: &BTreeMap<String, String>,
    target: &Target,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::with_capacity(env.len() + 1);
    for (name, template) in env {
        if !is_allowed_env_name(name) {
            return Err(format!(
                "env.{name}: not a variable a server may set (A-Z, 0-9, _; not {})",
                reserved_env_names()
            ));
        }
        let mut value = String::new();
        let mut rest = template.as_str();
        while let Some(start) = rest.find('{') {
            value.push_str(&rest[..start]);
            let tail = &rest[start..];
            let end = tail
                .find('}')
                .ok_or_else(|| format!("env.{name}: an unclosed '{{'"))?;
            let ph = &tail[..=end];
            let v = placeholder(target, ph).ok_or_else(|| {
                format!(
                    "env.{name}: unknown placeholder {ph} (known: {})",
                    TARGET_PLACEHOLDERS.join(", ")
                )
            })?;
            value.push_str(&v);
            rest = &tail[end + 1..];
        }
        value.push_str(rest);
        if !is_safe_env_value(&value) || value.len() > 256 {
            return Err(format!(
                "env.{name}: {:?} holds characters other than letters, digits, '.', '-', '_' (or is longer than 256): refused, nothing run",
                value.chars().take(80).collect::<String>()
            ));
        }
        out.push((name.clone(), value));
    }
    if !is_safe_env_value(&target.version) {
        return Err(format!(
            "target.version: {:?} holds characters other than letters, digits, '.', '-', '_': refused, nothing run",
            target.version.chars().take(80).collect::<String>()
        ));
    }
    out.push(("TERN_TARGET_VERSION".into(), target.version.clone()));
    Ok(out)
}

/// Largest script a host accepts.
pub(crate) const MAX_SCRIPT: usize = 64 * 1024;

impl InstallInstruction {
    /// What a host checks before acting: a well-formed attempt id and target, the
    /// installer's own needs (a script's env renders safely; tern-update's native
    /// installer gets a size and a sha256). The error names the field.
    pub fn check(&self) -> Result<(), String> {
        if !is_attempt_id(&self.attempt_id) {
            return Err(format!(
                "attempt_id: {:?} is not 1-64 of letters, digits, '-', '_', '.'",
                self.attempt_id.chars().take(80).collect::<String>()
            ));
        }
        let t = &self.target;
        if !is_safe_env_value(&t.version) || Version::parse(&t.version).is_err() {
            return Err(format!(
                "target.version: {:?} is not a version",
                t.version.chars().take(80).collect::<String>()
            ));
        }
        if let Some(h) = &t.sha256
            && !(h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err("target.sha256: not 64 hex digits".into());
        }
        if let Some(a) = &t.arch
            && (a.len() > 32 || !is_safe_env_value(a))
        {
            return Err("target.arch: not an arch".into());
        }
        match self.installer.installer_type {
            InstallerType::TernUpdate => {
                if t.size.is_none() || t.sha256.is_none() {
                    return Err(
                        "target: the tern-update installer refuses a target without size and sha256"
                            .into(),
                    );
                }
            }
            InstallerType::LocalScript => {
                let Some(ls) = &self.installer.local_script else {
                    return Err("installer.local_script: missing".into());
                };
                if ls.script.trim().is_empty() || ls.script.len() > MAX_SCRIPT {
                    return Err(format!(
                        "installer.local_script.script: empty or longer than {MAX_SCRIPT} bytes"
                    ));
                }
                if !ls.shell.starts_with('/') || ls.shell.len() > 256 || ls.shell.contains('\0') {
                    return Err("installer.local_script.shell: not an absolute path".into());
                }
                self.script_timeout()?;
                render_env(&ls.env, t).map_err(|e| format!("installer.local_script.{e}"))?;
            }
            InstallerType::Package => {
                let Some(p) = &self.installer.package else {
                    return Err("installer.package: missing".into());
                };
                let ok = !p.name.is_empty()
                    && p.name.len() <= 128
                    && !p.name.starts_with('-')
                    && p.name.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+')
                    });
                if !ok {
                    return Err("installer.package.name: not a package name".into());
                }
            }
        }
        Ok(())
    }

    /// A local script's timeout (default [`DEFAULT_SCRIPT_TIMEOUT`]).
    pub fn script_timeout(&self) -> Result<Duration, String> {
        match self
            .installer
            .local_script
            .as_ref()
            .and_then(|l| l.timeout.as_deref())
        {
            None => Ok(DEFAULT_SCRIPT_TIMEOUT),
            Some(text) => GoDuration::parse_positive(text)
                .map(|d| d.as_signed().unsigned_abs())
                .map_err(|e| format!("installer.local_script.timeout: {e}")),
        }
    }
}
