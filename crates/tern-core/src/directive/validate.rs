//! Reading and validating the directive resources; every error names the field.

use std::collections::HashSet;

use super::env::{TARGET_PLACEHOLDERS, is_allowed_env_name, is_safe_env_value, reserved_env_names};
use super::resource::*;
use crate::domain::codec;
use crate::domain::duration::GoDuration;
use crate::domain::validate::{
    Errors, Invalid, ResourceError, is_valid_group_name, read_singleton,
};
use crate::domain::version::Version;

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

/// A short, single-line, printable text (it goes into alerts and tables).
fn is_note(s: &str) -> bool {
    s.len() <= 200 && !s.chars().any(char::is_control)
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn header(e: &mut Errors, kind: &str, version: &str, name: &str, want_kind: &str) {
    if kind != want_kind {
        e.push(
            "kind",
            format!("{kind:?}"),
            &format!("is not {want_kind:?}"),
        );
    }
    if version != crate::domain::resource::RESOURCE_VERSION {
        e.push("version", format!("{version:?}"), "is not \"v1\"");
    }
    if !is_valid_group_name(name) {
        e.push(
            "metadata.name",
            format!("{name:?}"),
            "is not a name (1-64 of letters, digits, '-', '_', '.', starting with a letter or digit)",
        );
    }
}

fn duration(e: &mut Errors, field: &str, text: &str) -> Option<GoDuration> {
    match GoDuration::parse_positive(text) {
        Ok(d) => Some(d),
        Err(err) => {
            e.push(
                field,
                format!("{text:?}"),
                &format!("is not a positive duration: {err}"),
            );
            None
        }
    }
}

impl VersionDirective {
    /// Reads a directive (the active one or a draft: any valid name).
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        let d: VersionDirective = codec::from_text(text)?;
        d.validate()?;
        Ok(d)
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        header(
            &mut e,
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_DIRECTIVE,
        );
        if self.spec.directives.is_empty() {
            e.push(
                "spec.directives",
                "[]",
                "is empty: give at least one directive",
            );
        }
        if let (Some(b), Some(a)) = (self.spec.not_before, self.spec.not_after)
            && a <= b
        {
            e.push(
                "spec.not_after",
                a.to_string(),
                &format!("is not after not_before ({b}): no install could start"),
            );
        }
        if let Some(id) = &self.spec.config_id
            && (id.len() > 256 || id.chars().any(char::is_control))
        {
            e.push(
                "spec.config_id",
                format!("{:.40?}", id),
                "must be at most 256 characters, none of them control characters",
            );
        }
        let mut names = HashSet::new();
        for (i, d) in self.spec.directives.iter().enumerate() {
            let at = |f: &str| format!("spec.directives[{i}].{f}");
            if !is_valid_group_name(&d.name) {
                e.push(at("name"), format!("{:?}", d.name), "is not a name");
            } else if !names.insert(d.name.as_str()) {
                e.push(
                    at("name"),
                    format!("{:?}", d.name),
                    "is used by an earlier directive",
                );
            }
            check_selectors(&mut e, &format!("spec.directives[{i}]"), &d.selectors);
            if d.targets.is_empty() {
                e.push(at("targets"), "[]", "is empty: give at least one target");
            }
            for (j, t) in d.targets.iter().enumerate() {
                let tat = |f: &str| format!("spec.directives[{i}].targets[{j}].{f}");
                if Version::parse(&t.version).is_err() || !is_safe_env_value(&t.version) {
                    e.push(
                        tat("version"),
                        format!("{:?}", t.version),
                        "is not a version (semver, e.g. 1.2.3)",
                    );
                }
                if let Some(a) = &t.arch
                    && (a.is_empty() || !is_safe_env_value(a))
                {
                    e.push(
                        tat("arch"),
                        format!("{a:?}"),
                        "is not an arch (e.g. amd64, arm64)",
                    );
                }
                if t.size == Some(0) {
                    e.push(tat("size"), "0", "is not a size in bytes");
                }
                if let Some(h) = &t.sha256
                    && !is_sha256(h)
                {
                    e.push(
                        tat("sha256"),
                        format!("{h:?}"),
                        "is not a SHA-256 (64 hex digits)",
                    );
                }
            }
            check_installer_names(&mut e, &format!("spec.directives[{i}]"), &d.installers);
        }
        for (i, a) in self.spec.advisories.iter().enumerate() {
            if let Err(err) = semver::VersionReq::parse(&a.versions) {
                e.push(
                    format!("spec.advisories[{i}].versions"),
                    format!("{:?}", a.versions),
                    &format!("is not a version requirement (e.g. \"<1.2.3\"): {err}"),
                );
            }
            if let Some(n) = &a.note
                && !is_note(n)
            {
                e.push(
                    format!("spec.advisories[{i}].note"),
                    format!("{:?}", n.chars().take(40).collect::<String>()),
                    "is not a one-line note of at most 200 bytes",
                );
            }
        }
        e.finish()
    }
}

impl Installer {
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        let i: Installer = codec::from_text(text)?;
        i.validate()?;
        Ok(i)
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        header(
            &mut e,
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_INSTALLER,
        );
        let s = &self.spec;
        let t = s.installer_type;
        if t != InstallerType::LocalScript && s.local_script.is_some() {
            e.push(
                "spec.local_script",
                "(given)",
                &format!("is only for type local-script, not {}", t.as_str()),
            );
        }
        if t != InstallerType::Package && s.package.is_some() {
            e.push(
                "spec.package",
                "(given)",
                &format!("is only for type package, not {}", t.as_str()),
            );
        }
        match t {
            InstallerType::LocalScript => match &s.local_script {
                None => e.push(
                    "spec.local_script",
                    "(missing)",
                    "is required for type local-script",
                ),
                Some(ls) => {
                    if ls.script.trim().is_empty() {
                        e.push("spec.local_script.script", "\"\"", "is empty");
                    }
                    if !ls.shell.starts_with('/') {
                        e.push(
                            "spec.local_script.shell",
                            format!("{:?}", ls.shell),
                            "is not an absolute path (e.g. /bin/bash)",
                        );
                    }
                    if let Some(to) = &ls.timeout {
                        duration(&mut e, "spec.local_script.timeout", to);
                    }
                    for (k, v) in &ls.env {
                        let field = format!("spec.local_script.env.{k}");
                        if !is_env_name(k) {
                            e.push(
                                &field,
                                format!("{k:?}"),
                                "is not an environment variable name (A-Z, 0-9, _)",
                            );
                        } else if !is_allowed_env_name(k) {
                            // Hosts refuse these at install time; refused here, when the
                            // installer is written, so that no rollout starts with it.
                            e.push(
                                &field,
                                format!("{k:?}"),
                                &format!(
                                    "is reserved: {} change how the shell, the loader or tern-update runs the script",
                                    reserved_env_names()
                                ),
                            );
                        }
                        if let Err(why) = check_env_template(v) {
                            e.push(field, format!("{v:?}"), &why);
                        }
                    }
                }
            },
            InstallerType::Package => match &s.package {
                None => e.push("spec.package", "(missing)", "is required for type package"),
                Some(p) => {
                    let ok = !p.name.is_empty()
                        && p.name.len() <= 128
                        && p.name.bytes().all(|b| {
                            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+')
                        })
                        && !p.name.starts_with('-');
                    if !ok {
                        e.push(
                            "spec.package.name",
                            format!("{:?}", p.name),
                            "is not a package name",
                        );
                    }
                }
            },
            InstallerType::TernUpdate => {}
        }
        e.finish()
    }
}

/// An env value: literal safe characters and `{target.*}` placeholders only, so what
/// reaches the script is checked text, never something a shell would read as code.
fn check_env_template(v: &str) -> Result<(), String> {
    let mut rest = v;
    while let Some(start) = rest.find('{') {
        let (lit, tail) = rest.split_at(start);
        if !is_safe_env_value(lit) {
            return Err(format!(
                "holds {lit:?}: only letters, digits, '.', '-', '_' and {{target.*}} placeholders"
            ));
        }
        let Some(end) = tail.find('}') else {
            return Err("has an unclosed '{'".into());
        };
        let ph = &tail[..=end];
        if !TARGET_PLACEHOLDERS.contains(&ph) {
            return Err(format!(
                "uses {ph}: known placeholders are {}",
                TARGET_PLACEHOLDERS.join(", ")
            ));
        }
        rest = &tail[end + 1..];
    }
    if is_safe_env_value(rest) {
        Ok(())
    } else {
        Err(format!(
            "holds {rest:?}: only letters, digits, '.', '-', '_' and {{target.*}} placeholders"
        ))
    }
}

impl VersionControlConfig {
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        read_singleton(
            text,
            CONTROL_NAME,
            |c: &mut VersionControlConfig| &mut c.metadata,
            VersionControlConfig::validate,
        )
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        e.header(
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_CONTROL,
            CONTROL_NAME,
        );
        let r = &self.spec.rolling_install;
        if Rate::parse(&r.rate).is_none_or(|rate| rate.amount.of(100) == 0) {
            e.push(
                "spec.rolling_install.rate",
                format!("{:?}", r.rate),
                "is not a rate above zero (e.g. 20%/h, 10/m)",
            );
        }
        for (field, v) in [
            ("fault_limit", &r.fault_limit),
            ("churn_limit", &r.churn_limit),
        ] {
            if Amount::parse(v).is_none() {
                e.push(
                    format!("spec.rolling_install.{field}"),
                    format!("{v:?}"),
                    "is not a count or a percentage (e.g. 10, 5%)",
                );
            }
        }
        let p = &self.spec.promotion;
        if !(1..=2).contains(&p.approvals) {
            e.push(
                "spec.promotion.approvals",
                p.approvals,
                "is out of range: 1, or 2 for a second approver",
            );
        }
        duration(&mut e, "spec.promotion.pending_ttl", &p.pending_ttl);
        if p.strategy == Strategy::Automatic && p.from.is_none() {
            e.push(
                "spec.promotion.from",
                "(missing)",
                "is required for the automatic strategy: name the draft to promote",
            );
        }
        let t = &self.spec.timings;
        let trig = duration(&mut e, "spec.timings.trigger_timeout", &t.trigger_timeout);
        let recent = duration(&mut e, "spec.timings.recent", &t.recent);
        duration(&mut e, "spec.timings.offline_after", &t.offline_after);
        duration(&mut e, "spec.timings.settle", &t.settle);
        if let (Some(trig), Some(recent)) = (trig, recent)
            && trig.as_secs() > recent.as_secs()
        {
            e.push("spec.timings.trigger_timeout", format!("{:?}", t.trigger_timeout), "is longer than spec.timings.recent: an attempt would stop being recent before it could fault");
        }
        if let Some(n) = &self.spec.notification {
            if n.from != "active" && !is_valid_group_name(&n.from) {
                e.push(
                    "spec.notification.from",
                    format!("{:?}", n.from),
                    "is not a draft's name (or `active`)",
                );
            }
            if n.alert_on.is_empty() {
                e.push(
                    "spec.notification.alert_on",
                    "[]",
                    "is empty: outdated, security, end-of-life",
                );
            }
        }
        if let Some(r) = &self.spec.releases {
            check_releases(&mut e, r);
        }
        e.finish()
    }

    /// The validated timings (defaults for any that do not parse).
    pub fn state_timings(&self) -> super::state::StateTimings {
        self.spec.timings.state_timings()
    }
}

impl Timings {
    /// The timings as durations (defaults for any that do not parse).
    pub fn state_timings(&self) -> super::state::StateTimings {
        let t = self;
        let d = |s: &str, default: u64| {
            std::time::Duration::from_secs(
                GoDuration::parse_positive(s).map_or(default, |d| d.as_secs()),
            )
        };
        super::state::StateTimings {
            trigger_timeout: d(&t.trigger_timeout, 900),
            recent: d(&t.recent, 3600),
            offline_after: d(&t.offline_after, 120),
            settle: d(&t.settle, 120),
        }
    }
}

fn check_releases(e: &mut Errors, r: &ReleasesController) {
    let url_ok = |u: &str| {
        (u.starts_with("https://") || (r.allow_http && u.starts_with("http://")))
            && u.len() <= 2048
            && !u.chars().any(|c| c.is_control() || c.is_whitespace())
    };
    let url_problem = if r.allow_http {
        "is not an http(s) URL"
    } else {
        "is not an https URL (plain http needs allow_http: true)"
    };
    match (&r.index, &r.github) {
        (Some(_), Some(_)) => e.push(
            "spec.releases",
            "index and github",
            "names two sources: give index or github",
        ),
        (None, None) => e.push(
            "spec.releases",
            "(no source)",
            "names no source: give index (a URL) or github",
        ),
        (Some(u), None) if !url_ok(u) => {
            e.push("spec.releases.index", format!("{u:?}"), url_problem)
        }
        (None, Some(g)) => {
            if !url_ok(&g.api) {
                e.push(
                    "spec.releases.github.api",
                    format!("{:?}", g.api),
                    url_problem,
                );
            }
            let repo_ok = g.repo.split_once('/').is_some_and(|(o, n)| {
                !o.is_empty()
                    && !n.is_empty()
                    && !n.contains('/')
                    && is_safe_env_value(o)
                    && is_safe_env_value(n)
            });
            if !repo_ok {
                e.push(
                    "spec.releases.github.repo",
                    format!("{:?}", g.repo),
                    "is not owner/name",
                );
            }
            let bare = g
                .asset
                .replace("{version}", "")
                .replace("{tag}", "")
                .replace("{arch}", "");
            if g.asset.is_empty() || !is_safe_env_value(&bare) {
                e.push(
                    "spec.releases.github.asset",
                    format!("{:?}", g.asset),
                    "is not an asset name template (letters, digits, . - _ and {version}, {tag}, {arch})",
                );
            } else if r.arch.len() > 1 && !g.asset.contains("{arch}") {
                e.push(
                    "spec.releases.github.asset",
                    format!("{:?}", g.asset),
                    "has no {arch}: with several arch, each needs its own asset",
                );
            }
            if let Some(t) = &g.token_env
                && !is_env_name(t)
            {
                e.push(
                    "spec.releases.github.token_env",
                    format!("{t:?}"),
                    "is not an environment variable's name",
                );
            }
        }
        _ => {}
    }
    if let Some(p) = duration(e, "spec.releases.period", &r.period)
        && p.as_secs() < 60
    {
        e.push(
            "spec.releases.period",
            format!("{:?}", r.period),
            "is shorter than a minute",
        );
    }
    for (i, a) in r.arch.iter().enumerate() {
        if a.is_empty() || !is_safe_env_value(a) {
            e.push(
                format!("spec.releases.arch[{i}]"),
                format!("{a:?}"),
                "is not an arch (e.g. amd64, arm64)",
            );
        }
    }
    if r.directives.is_empty() {
        e.push(
            "spec.releases.directives",
            "[]",
            "is empty: give at least one directive",
        );
    }
    let mut names = HashSet::new();
    for (i, d) in r.directives.iter().enumerate() {
        let at = |f: &str| format!("spec.releases.directives[{i}].{f}");
        if !is_valid_group_name(&d.name) || !names.insert(d.name.as_str()) {
            e.push(
                at("name"),
                format!("{:?}", d.name),
                "is not a name, or is used twice",
            );
        }
        if let Err(err) = semver::VersionReq::parse(&d.version) {
            e.push(
                at("version"),
                format!("{:?}", d.version),
                &format!("is not a version requirement (e.g. \"1.*\"): {err}"),
            );
        }
        let prefix = format!("spec.releases.directives[{i}]");
        check_selectors(e, &prefix, &d.selectors);
        check_installer_names(e, &prefix, &d.installers);
    }
}

/// A directive's (or a template's) selectors, under `prefix` (`spec.directives[0]`).
fn check_selectors(e: &mut Errors, prefix: &str, selectors: &[Selector]) {
    if selectors.is_empty() {
        e.push(
            format!("{prefix}.selectors"),
            "[]",
            "is empty: a directive selects hosts (use labels: {'*': '*'} for all)",
        );
    }
    for (j, s) in selectors.iter().enumerate() {
        let sat = |f: &str| format!("{prefix}.selectors[{j}].{f}");
        for (k, v) in &s.labels {
            if k.is_empty() || v.is_empty() {
                e.push(
                    sat("labels"),
                    format!("{k:?}: {v:?}"),
                    "has an empty key or value",
                );
            }
        }
        if let Some(req) = &s.current_version
            && let Err(err) = semver::VersionReq::parse(req)
        {
            e.push(
                sat("current_version"),
                format!("{req:?}"),
                &format!("is not a version requirement (e.g. \">=1.0.0, <2.0.0\"): {err}"),
            );
        }
        for (k, inst) in s.installers.iter().enumerate() {
            if InstallerType::parse(inst).is_none() {
                e.push(
                    sat(&format!("installers[{k}]")),
                    format!("{inst:?}"),
                    "is not an installer type (local-script, tern-update, package)",
                );
            }
        }
    }
}

/// The installer names a directive (or a template) lists, under `prefix`.
fn check_installer_names(e: &mut Errors, prefix: &str, installers: &[String]) {
    if installers.is_empty() {
        e.push(
            format!("{prefix}.installers"),
            "[]",
            "is empty: name the installers to use, in order",
        );
    }
    for (j, n) in installers.iter().enumerate() {
        if !is_valid_group_name(n) {
            e.push(
                format!("{prefix}.installers[{j}]"),
                format!("{n:?}"),
                "is not an installer name",
            );
        }
    }
}
