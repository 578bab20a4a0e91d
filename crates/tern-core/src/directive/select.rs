//! Which directive governs a host, and which target and installer it gets (RFD 90's
//! rules): directives and their selectors in order, the first match wins; then the first
//! target that is not incompatible with the host, then the first installer the host
//! supports that accepts that target. A host a directive selects but cannot serve gets
//! nothing, with the reasons.

use std::collections::BTreeMap;
use std::fmt;

use super::resource::{Directive, DirectiveSpec, Installer, InstallerType, Selector, Target};
use crate::domain::version::{Version, is_compatible};

/// A host's labels, as a map or as the sorted pairs a server keeps in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Labels<'a> {
    #[default]
    None,
    Map(&'a BTreeMap<String, String>),
    /// Sorted by key (as collected from a `BTreeMap`).
    Pairs(&'a [(Box<str>, Box<str>)]),
}

impl<'a> Labels<'a> {
    pub fn get(self, key: &str) -> Option<&'a str> {
        match self {
            Labels::None => None,
            Labels::Map(m) => m.get(key).map(String::as_str),
            Labels::Pairs(p) => p
                .binary_search_by(|(k, _)| (**k).cmp(key))
                .ok()
                .map(|i| &*p[i].1),
        }
    }
}

/// A list of names (installer types), owned either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names<'a> {
    Strings(&'a [String]),
    Boxed(&'a [Box<str>]),
}

impl Default for Names<'_> {
    fn default() -> Self {
        Names::Strings(&[])
    }
}

impl Names<'_> {
    pub fn contains(self, name: &str) -> bool {
        match self {
            Names::Strings(l) => l.iter().any(|n| n == name),
            Names::Boxed(l) => l.iter().any(|n| &**n == name),
        }
    }
}

/// What a host tells about itself (heartbeats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts<'a> {
    pub labels: Labels<'a>,
    pub group: &'a str,
    pub version: &'a str,
    pub arch: &'a str,
    pub os: &'a str,
    pub fips: bool,
    /// Installer types it advertises (`local-script`, `tern-update`, `package`).
    pub installers: Names<'a>,
}

/// Why a target cannot go to a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatible {
    /// The target is for another arch: a host's arch never changes.
    Arch { target: String, host: String },
    /// The target's FIPS build differs from the host's.
    Fips { target: bool, host: bool },
    /// More than one major up, or below the host's major: never skipped, never downgraded
    /// across a major.
    MajorVersion { host: String, target: String },
    /// The host runs a pre-release: it is not moved automatically.
    PrereleaseInstall { host: String },
    /// A version that is not semver (the host's or the target's).
    NotAVersion(String),
    /// Already there.
    Same,
}

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatible::Arch { target, host } => {
                write!(
                    f,
                    "target is for {target}, the host is {host} (arch never changes)"
                )
            }
            Incompatible::Fips { target, host } => write!(
                f,
                "target is {}a FIPS build, the host is {}",
                if *target { "" } else { "not " },
                if *host { "FIPS" } else { "not FIPS" }
            ),
            Incompatible::MajorVersion { host, target } => {
                write!(f, "{host} → {target} skips or goes below a major version")
            }
            Incompatible::PrereleaseInstall { host } => {
                write!(
                    f,
                    "the host runs the pre-release {host}: not moved automatically"
                )
            }
            Incompatible::NotAVersion(v) => write!(f, "{v:?} is not a version"),
            Incompatible::Same => f.write_str("the host runs it already"),
        }
    }
}

/// Whether `target` may go to `host`. `Same` is not an error of the directive: the host
/// is at parity. Production code calls `fits` with versions parsed once; this is the
/// decision as the integration tests ask it.
#[cfg(any(test, feature = "fixtures"))]
pub fn target_fits(target: &Target, host: &HostFacts<'_>) -> Result<(), Incompatible> {
    let want = Version::parse(&target.version).ok();
    let have = Version::parse(host.version).ok();
    fits(target, want.as_ref(), host, have.as_ref())
}

/// `target_fits` with both versions parsed once (`None`: not a version).
fn fits(
    target: &Target,
    want: Option<&Version>,
    host: &HostFacts<'_>,
    have: Option<&Version>,
) -> Result<(), Incompatible> {
    if let Some(arch) = &target.arch
        && arch != host.arch
    {
        return Err(Incompatible::Arch {
            target: arch.clone(),
            host: host.arch.to_string(),
        });
    }
    if let Some(fips) = target.fips
        && fips != host.fips
    {
        return Err(Incompatible::Fips {
            target: fips,
            host: host.fips,
        });
    }
    let want = want.ok_or_else(|| Incompatible::NotAVersion(target.version.clone()))?;
    // Nothing installed yet: a first install, no version rule to keep.
    if host.version.is_empty() {
        return Ok(());
    }
    let have = have.ok_or_else(|| Incompatible::NotAVersion(host.version.to_string()))?;
    if have.0 == want.0 {
        return Err(Incompatible::Same);
    }
    if have.is_prerelease() {
        return Err(Incompatible::PrereleaseInstall {
            host: host.version.to_string(),
        });
    }
    // A pre-release target is one the operator named explicitly in the directive.
    if !is_compatible(have, want, true) {
        return Err(Incompatible::MajorVersion {
            host: host.version.to_string(),
            target: target.version.clone(),
        });
    }
    Ok(())
}

/// Whether `installer` can install `target` on `host`: enabled, advertised by the host,
/// and given what its security model needs (tern-update's native installer verifies
/// size and digest, so it refuses a target without them).
pub(crate) fn installer_fits(
    installer: &Installer,
    target: &Target,
    host: &HostFacts<'_>,
) -> Result<(), String> {
    let t = installer.spec.installer_type;
    if !installer.spec.enabled {
        return Err(format!("installer {} is disabled", installer.metadata.name));
    }
    if !host.installers.contains(t.as_str()) {
        return Err(format!(
            "the host does not advertise {} (installer {})",
            t.as_str(),
            installer.metadata.name
        ));
    }
    if t == InstallerType::TernUpdate && (target.size.is_none() || target.sha256.is_none()) {
        return Err(format!(
            "installer {} (tern-update) needs the target's size and sha256",
            installer.metadata.name
        ));
    }
    Ok(())
}

fn label_matches(want: &BTreeMap<String, String>, have: Labels<'_>) -> bool {
    want.iter().all(|(k, v)| {
        if k == "*" && v == "*" {
            return true;
        }
        have.get(k).is_some_and(|hv| v == "*" || hv == v)
    })
}

/// Whether `sel` selects `host`, with the selector's version requirement parsed once
/// (`None`: none given; `Some(None)`: it does not parse, and then it selects nothing;
/// validation refuses such a requirement before it is stored) and the host's version too.
fn selects_prepared(
    sel: &Selector,
    req: Option<&Option<semver::VersionReq>>,
    host: &HostFacts<'_>,
    have: Option<&Version>,
) -> bool {
    let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    label_matches(&sel.labels, host.labels)
        && any(&sel.groups, host.group)
        && any(&sel.arch, host.arch)
        && any(&sel.os, host.os)
        && sel
            .installers
            .iter()
            .all(|want| host.installers.contains(want))
        && req.is_none_or(|req| match (req, have) {
            (Some(req), Some(v)) => req.matches(&v.0),
            _ => false,
        })
}

/// What the directive says for one host.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection<'a> {
    /// No directive selects the host: the rollout (or nothing) governs it.
    Unmatched,
    /// Selected, and already on the first target that fits.
    AtTarget {
        directive: &'a Directive,
        target: &'a Target,
    },
    /// Selected, should move to `target` with `installer`.
    Install {
        directive: &'a Directive,
        target: &'a Target,
        installer: &'a Installer,
    },
    /// Selected, but no (target, installer) pair fits: each reason, in order.
    NoFit {
        directive: &'a Directive,
        /// The target that fits the host, when only an installer is missing (the host
        /// is behind it all the same: the notification view counts it).
        target: Option<&'a Target>,
        reasons: Vec<String>,
    },
}

impl Selection<'_> {
    /// The directive's name, when one selects the host.
    pub fn directive(&self) -> Option<&str> {
        match self {
            Selection::Unmatched => None,
            Selection::AtTarget { directive, .. }
            | Selection::Install { directive, .. }
            | Selection::NoFit { directive, .. } => Some(&directive.name),
        }
    }
}

/// The directive, target and installer for `host`; `installers` are the installer
/// resources by name.
pub fn select<'a>(
    spec: &'a DirectiveSpec,
    installers: &'a BTreeMap<String, Installer>,
    host: &HostFacts<'_>,
) -> Selection<'a> {
    let have = Version::parse(host.version).ok();
    Prepared::new(spec, installers).select(host, have.as_ref())
}

/// A directive spec with everything a pass would otherwise parse per host parsed once:
/// the selectors' version requirements, the targets' versions.
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    spec: &'a DirectiveSpec,
    installers: &'a BTreeMap<String, Installer>,
    /// Per directive, per selector.
    reqs: Vec<Vec<Option<Option<semver::VersionReq>>>>,
    /// Per directive, per target.
    targets: Vec<Vec<Option<Version>>>,
}

impl<'a> Prepared<'a> {
    pub fn new(spec: &'a DirectiveSpec, installers: &'a BTreeMap<String, Installer>) -> Self {
        Prepared {
            spec,
            installers,
            reqs: spec
                .directives
                .iter()
                .map(|d| {
                    d.selectors
                        .iter()
                        .map(|s| {
                            s.current_version
                                .as_deref()
                                .map(|r| semver::VersionReq::parse(r).ok())
                        })
                        .collect()
                })
                .collect(),
            targets: spec
                .directives
                .iter()
                .map(|d| {
                    d.targets
                        .iter()
                        .map(|t| Version::parse(&t.version).ok())
                        .collect()
                })
                .collect(),
        }
    }

    /// As [`select`], the host's version parsed by the caller (`None`: not a version).
    pub fn select(&self, host: &HostFacts<'_>, have: Option<&Version>) -> Selection<'a> {
        let spec = self.spec;
        let Some((di, directive)) = spec.directives.iter().enumerate().find(|(di, d)| {
            d.selectors
                .iter()
                .zip(&self.reqs[*di])
                .any(|(s, req)| selects_prepared(s, req.as_ref(), host, have))
        }) else {
            return Selection::Unmatched;
        };
        let mut reasons = Vec::new();
        for (target, want) in directive.targets.iter().zip(&self.targets[di]) {
            match fits(target, want.as_ref(), host, have) {
                Err(Incompatible::Same) => return Selection::AtTarget { directive, target },
                Err(why) => reasons.push(format!("target {}: {why}", target.version)),
                Ok(()) => {
                    // The first target that is not incompatible is the one; its installer
                    // is the first that fits, else nothing (no fallback to a later target).
                    for name in &directive.installers {
                        match self.installers.get(name) {
                            None => reasons.push(format!("installer {name} does not exist")),
                            Some(i) => match installer_fits(i, target, host) {
                                Ok(()) => {
                                    return Selection::Install {
                                        directive,
                                        target,
                                        installer: i,
                                    };
                                }
                                Err(why) => reasons.push(why),
                            },
                        }
                    }
                    return Selection::NoFit {
                        directive,
                        target: Some(target),
                        reasons,
                    };
                }
            }
        }
        Selection::NoFit {
            directive,
            target: None,
            reasons,
        }
    }
}
