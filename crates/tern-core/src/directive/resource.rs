//! The resources of the modular upgrade system, in the shape of Tern's other resources
//! (`kind`, `version: v1`, `metadata`, `spec`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::domain::install::{
    InstallerSpec, InstallerType, LocalScript, PackageInstaller, PackageManager, Target,
};
use crate::domain::resource::{Metadata, default_resource_version};

pub(crate) const KIND_DIRECTIVE: &str = "version_directive";
pub(crate) const KIND_CONTROL: &str = "version_control_config";
pub(crate) const KIND_INSTALLER: &str = "installer";
pub const CONTROL_NAME: &str = "version-control-config";

/// `version_directive`: ordered directives, each selecting hosts and naming targets and
/// installers in order of preference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionDirective {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: DirectiveSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectiveSpec {
    /// After this instant the directive is stale: its controller stopped refreshing it,
    /// and a warning is raised (an offline controller is seen, not silently trusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<Timestamp>,
    /// The id of the configuration that made it (seed 003's `config_id`): kept, shown,
    /// never interpreted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_id: Option<String>,
    /// No install of this directive starts before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// No install of this directive starts at or after this instant (those started
    /// finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<Timestamp>,
    /// Checked in order; the first whose selectors match a host governs it.
    pub directives: Vec<Directive>,
    /// Versions flagged insecure or at their end of life: the notification controller
    /// alerts on the hosts that run them, and `version-control status` counts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisories: Vec<Advisory>,
}

/// Versions an advisory flags (`versions: ">=1.0.0, <1.2.3"`), and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Advisory {
    /// A version requirement (semver), e.g. `<1.2.3` or `>=1.0.0, <1.2.3`.
    pub versions: String,
    pub kind: AdvisoryKind,
    /// Shown with the alert (`CVE-2026-1234: fixed in 1.2.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdvisoryKind {
    /// A newer release fixes a security problem of these versions.
    Security,
    /// These versions are no longer supported.
    EndOfLife,
}

/// What the notification controller alerts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeKind {
    /// A host is not on the version the directive recommends for it.
    Outdated,
    /// A host runs a version a security advisory flags.
    Security,
    /// A host runs a version at its end of life.
    EndOfLife,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Outdated => "outdated",
            NoticeKind::Security => "security",
            NoticeKind::EndOfLife => "end-of-life",
        }
    }
}

impl From<AdvisoryKind> for NoticeKind {
    fn from(k: AdvisoryKind) -> Self {
        match k {
            AdvisoryKind::Security => NoticeKind::Security,
            AdvisoryKind::EndOfLife => NoticeKind::EndOfLife,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Directive {
    pub name: String,
    /// Any of them (checked in order) selects a host.
    pub selectors: Vec<Selector>,
    /// The first that is not incompatible with a host is its target.
    pub targets: Vec<Target>,
    /// Installer names; the first the host supports (and that accepts the target) is used.
    pub installers: Vec<String>,
    /// Its targets are critical (a security fix): unless `windows` says `keep`, its
    /// installs do not wait for the hosts' maintenance windows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub critical: bool,
    /// Whether its installs keep to the maintenance window of each host's group;
    /// unset: they do, unless the directive is critical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Windows>,
}

/// A directive's installs and the hosts' maintenance windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Windows {
    /// A host installs only while its group's window is open.
    Keep,
    /// A host installs whenever the directive's pass picks it.
    Ignore,
}

impl Directive {
    /// Whether its installs wait for the hosts' windows.
    pub fn keeps_windows(&self) -> bool {
        self.windows.map_or(!self.critical, |w| w == Windows::Keep)
    }
}

impl DirectiveSpec {
    /// The time rules of an install `directive` chose: its `not_before` and
    /// `not_after`, and whether it keeps to the host's window. An unknown name (the
    /// directive changed since the install was chosen) keeps to the windows.
    pub fn timing(&self, directive: &str) -> Timing {
        Timing {
            not_before: self.not_before,
            not_after: self.not_after,
            keep_windows: self
                .directives
                .iter()
                .find(|d| d.name == directive)
                .is_none_or(Directive::keeps_windows),
        }
    }
}

/// When a directive's installs may start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    pub not_before: Option<Timestamp>,
    pub not_after: Option<Timestamp>,
    pub keep_windows: bool,
}

/// Which hosts a directive governs. Every field given must match; an empty list or map
/// matches everything. A label value `*` matches any value of that label, and the
/// label `*: *` matches every host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// A semver requirement on the host's current version (`>=1.0.0, <1.3.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arch: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub os: Vec<String>,
    /// Installer types the host must advertise (`local-script`, `tern-update`, `package`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installers: Vec<String>,
}

/// `installer`: how a host installs a target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Installer {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: InstallerSpec,
}

/// `version_control_config`: how fast directives are applied, when to pause, how
/// directives are promoted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionControlConfig {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: ControlSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSpec {
    /// Off: directives are planned and shown, nothing is installed.
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub rolling_install: RollingInstall,
    #[serde(default)]
    pub promotion: Promotion,
    /// A controller whose directive only raises alerts (outdated or insecure versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification: Option<Notification>,
    /// The `releases` controller: drafts `releases` from a release source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases: Option<ReleasesController>,
    #[serde(default)]
    pub timings: Timings,
}

/// Rate and limits of the reconciliation loop. Amounts are a count (`10`) or a
/// percentage of the governed hosts (`5%`); the rate is an amount per hour or minute
/// (`20%/h`, `10/m`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollingInstall {
    #[serde(default = "default_rate")]
    pub rate: String,
    #[serde(default = "default_fault_limit")]
    pub fault_limit: String,
    #[serde(default = "default_churn_limit")]
    pub churn_limit: String,
}

impl Default for RollingInstall {
    fn default() -> Self {
        Self {
            rate: default_rate(),
            fault_limit: default_fault_limit(),
            churn_limit: default_churn_limit(),
        }
    }
}

fn default_rate() -> String {
    "10%/h".into()
}
fn default_fault_limit() -> String {
    "5".into()
}
fn default_churn_limit() -> String {
    "5%".into()
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// A new draft from the controller becomes active at once.
    Automatic,
    /// Drafts wait for `ternctl version-control plan` and `apply`.
    #[default]
    Manual,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    #[serde(default)]
    pub strategy: Strategy,
    /// The draft promoted (a controller's name: `static`, `releases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// People who must apply a pending directive (1, or 2 for a second approver).
    #[serde(default = "one")]
    pub approvals: u8,
    /// How long a planned (pending) directive may wait for apply (Go duration).
    #[serde(default = "default_pending_ttl")]
    pub pending_ttl: String,
}

impl Default for Promotion {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            from: None,
            approvals: 1,
            pending_ttl: default_pending_ttl(),
        }
    }
}

fn one() -> u8 {
    1
}
fn default_pending_ttl() -> String {
    "1h".into()
}

/// The notification-only controller: a draft (or the active directive) evaluated over
/// the hosts without installing anything; alerts for the hosts it flags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notification {
    /// A draft's name (`releases`, `static`), or `active`.
    pub from: String,
    #[serde(default = "default_alert_on")]
    pub alert_on: Vec<NoticeKind>,
}

fn default_alert_on() -> Vec<NoticeKind> {
    vec![NoticeKind::Security, NoticeKind::EndOfLife]
}

/// The `releases` version controller: reads a release source every `period` and writes
/// the draft `releases`, one directive per entry of `directives`, each targeting the
/// newest release its `version` requirement admits (never a pre-release).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleasesController {
    /// A JSON index: `{"releases": [{"tag", "url", "sha256", "size", "arch",
    /// "prerelease", "security"}]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GitHubReleases>,
    /// Allow `http://` sources (tests, a mirror on a trusted network).
    #[serde(default)]
    pub allow_http: bool,
    #[serde(default = "d10m")]
    pub period: String,
    /// One target per architecture (an asset per arch); empty: one target, any arch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arch: Vec<String>,
    pub directives: Vec<BasicDirective>,
}

/// A GitHub-compatible releases API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubReleases {
    /// `owner/name`.
    pub repo: String,
    #[serde(default = "default_github_api")]
    pub api: String,
    /// The asset of a target, e.g. `agent-{version}-linux-{arch}.tar.gz` (`{version}`,
    /// `{tag}`, `{arch}`).
    pub asset: String,
    /// An environment variable of ternd holding a token (never the token itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
}

fn default_github_api() -> String {
    "https://api.github.com".into()
}

/// A template the `releases` controller fills with the newest matching release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicDirective {
    pub name: String,
    /// Which releases (a semver requirement: `1.*`, `>=1.2, <2`).
    pub version: String,
    pub selectors: Vec<Selector>,
    pub installers: Vec<String>,
}

/// The time edges of the install states ([`crate::domain::directive::state`]), Go durations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    /// An attempt without a result is unclear (triggered) this long, then a fault.
    #[serde(default = "d15m")]
    pub trigger_timeout: String,
    /// An attempt counts as recent this long: no new attempt, and its outcome (recent
    /// install, fault, churn) is what the host shows.
    #[serde(default = "d1h")]
    pub recent: String,
    /// A host not heard from this long is offline (churned, if an attempt is recent).
    /// Shorter than the time after which a replica forgets a silent host (three missed
    /// heartbeats), or churn would never be seen.
    #[serde(default = "d2m")]
    pub offline_after: String,
    /// A host connected for less than this is not triggered yet.
    #[serde(default = "d2m")]
    pub settle: String,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            trigger_timeout: d15m(),
            recent: d1h(),
            offline_after: d2m(),
            settle: d2m(),
        }
    }
}

fn d10m() -> String {
    "10m".into()
}
fn d15m() -> String {
    "15m".into()
}
fn d1h() -> String {
    "1h".into()
}
fn d2m() -> String {
    "2m".into()
}

/// A count (`10`) or a share of the hosts concerned (`5%`, `12.5%`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Count(u64),
    /// Hundredths of a percent (`12.5%` is 1250).
    Percent(u32),
}

impl Amount {
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let (whole, frac) = p.split_once('.').unwrap_or((p, ""));
            if whole.is_empty() || whole.len() > 3 || frac.len() > 2 {
                return None;
            }
            if !whole
                .bytes()
                .chain(frac.bytes())
                .all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let frac = format!("{frac:0<2}");
            let hundredths = whole.parse::<u32>().ok()? * 100 + frac.parse::<u32>().ok()?;
            return (hundredths <= 10_000).then_some(Amount::Percent(hundredths));
        }
        if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok().map(Amount::Count)
    }

    /// How many of `total` hosts (a share rounds up, so `1%` of 10 hosts is 1).
    pub fn of(self, total: u64) -> u64 {
        match self {
            Amount::Count(n) => n,
            Amount::Percent(h) => (total * u64::from(h)).div_ceil(10_000),
        }
    }
}

/// An amount per hour or per minute (`20%/h`, `10/m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub amount: Amount,
    pub per: std::time::Duration,
}

impl Rate {
    pub fn parse(s: &str) -> Option<Self> {
        let (amount, unit) = s.trim().rsplit_once('/')?;
        let per = match unit {
            "h" => std::time::Duration::from_secs(3600),
            "m" => std::time::Duration::from_secs(60),
            _ => return None,
        };
        Some(Rate {
            amount: Amount::parse(amount)?,
            per,
        })
    }
}
