//! The `releases` version controller's decision: from the releases a source lists,
//! the draft `releases` (one directive per template of the control config, targeting
//! the newest release its requirement admits) and the advisories its security releases
//! imply. Fetching is the server's job; this is pure.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::env::is_safe_env_value;
use super::resource::{
    Advisory, AdvisoryKind, Directive, DirectiveSpec, KIND_DIRECTIVE, ReleasesController, Target,
    VersionDirective,
};
use crate::domain::duration::GoDuration;
use crate::domain::resource::{Metadata, RESOURCE_VERSION};
use crate::domain::version::Version;

/// The draft the controller writes.
pub const RELEASES_DRAFT: &str = "releases";

/// A release as the source listed it (untrusted: every field is checked here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseInfo {
    pub tag: String,
    pub prerelease: bool,
    pub draft: bool,
    /// The source marks it a security release.
    pub security: bool,
    pub assets: Vec<ReleaseAsset>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseAsset {
    /// Empty for an index entry (one artifact per entry).
    pub name: String,
    pub arch: Option<String>,
    pub size: Option<u64>,
    pub sha256: Option<String>,
}

/// What the controller made of a listing.
#[derive(Clone, Debug, PartialEq)]
pub struct Drafted {
    pub directive: VersionDirective,
    /// Releases and directives left out, and why (for the log and the status).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleasesError {
    #[error("no release matches any directive's version (of {listed} listed): nothing to draft")]
    NothingMatches { listed: usize },
}

/// How long a draft stays fresh: a day, or six periods if longer. The controller
/// rewrites it when its content changes or half of that has passed, so a pending plan
/// of the draft is not voided at every period.
pub fn freshness(c: &ReleasesController) -> SignedDuration {
    let period = GoDuration::parse_positive(&c.period).map_or(600, |d| d.as_secs());
    let secs = (period.saturating_mul(6)).max(24 * 3600);
    SignedDuration::from_secs(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// Whether the controller writes `new` over the stored draft `before`: when its
/// directives or advisories changed, or when less than half of its freshness is left
/// (rewriting only then keeps a pending plan of the draft valid between changes).
pub fn needs_write(
    c: &ReleasesController,
    before: Option<&DirectiveSpec>,
    new: &DirectiveSpec,
    now: Timestamp,
) -> bool {
    let Some(b) = before else { return true };
    let fresh = b
        .stale_after
        .is_some_and(|at| at.duration_since(now) > freshness(c) / 2);
    !(fresh && b.directives == new.directives && b.advisories == new.advisories)
}

/// The draft `releases` from `releases`, at `now`.
pub fn draft(
    c: &ReleasesController,
    releases: &[ReleaseInfo],
    now: Timestamp,
) -> Result<Drafted, ReleasesError> {
    let mut notes = Vec::new();
    // Readable, published, not pre-release; one entry per version (an index lists one
    // per arch: their assets are merged).
    let mut versions: BTreeMap<Version, (String, bool, Vec<&ReleaseAsset>)> = BTreeMap::new();
    for r in releases {
        if r.draft {
            continue;
        }
        // Build metadata is refused too: a target's version reaches scripts' environment
        // and must be plain (`[A-Za-z0-9._-]`).
        let v = match Version::parse(&r.tag) {
            Ok(v) if v.0.build.is_empty() && is_safe_env_value(&r.tag) => v,
            _ => {
                notes.push(format!(
                    "release {:?}: not a plain version, skipped",
                    clip(&r.tag)
                ));
                continue;
            }
        };
        if r.prerelease || v.is_prerelease() {
            continue;
        }
        let e = versions
            .entry(v)
            .or_insert_with(|| (r.tag.clone(), false, Vec::new()));
        e.1 |= r.security;
        e.2.extend(r.assets.iter());
    }
    let mut directives = Vec::new();
    for d in &c.directives {
        let Ok(req) = semver::VersionReq::parse(&d.version) else {
            notes.push(format!(
                "directive {}: unreadable version requirement",
                d.name
            ));
            continue;
        };
        let Some((v, (tag, _, assets))) = versions.iter().rev().find(|(v, _)| req.matches(&v.0))
        else {
            notes.push(format!(
                "directive {}: no release matches {:?}; left out",
                d.name, d.version
            ));
            continue;
        };
        let version = v.0.to_string();
        let targets = targets(c, &version, tag, assets, &mut notes);
        if targets.is_empty() {
            notes.push(format!(
                "directive {}: release {} has no asset for any configured arch; left out",
                d.name,
                clip(tag)
            ));
            continue;
        }
        directives.push(Directive {
            name: d.name.clone(),
            selectors: d.selectors.clone(),
            targets,
            installers: d.installers.clone(),
            critical: false,
            windows: None,
        });
    }
    if directives.is_empty() {
        return Err(ReleasesError::NothingMatches {
            listed: releases.len(),
        });
    }
    // A security release flags the older versions of its major, newest fix first (a
    // host's first matching advisory names the release that fixes it).
    let advisories = versions
        .iter()
        .rev()
        .filter(|(_, (_, security, _))| *security)
        .map(|(v, (tag, _, _))| Advisory {
            versions: format!(">={}.0.0, <{}", v.0.major, v.0),
            kind: AdvisoryKind::Security,
            note: Some(format!("security release {}", clip(tag))),
        })
        .collect();
    let directive = VersionDirective {
        kind: KIND_DIRECTIVE.into(),
        version: RESOURCE_VERSION.into(),
        metadata: Metadata {
            name: RELEASES_DRAFT.into(),
            ..Metadata::default()
        },
        spec: DirectiveSpec {
            stale_after: now.checked_add(freshness(c)).ok(),
            config_id: None,
            not_before: None,
            not_after: None,
            directives,
            advisories,
        },
    };
    Ok(Drafted { directive, notes })
}

/// One target per configured arch with its asset (or one target for any arch); size and
/// digest only when the source gives them well formed (the native installer refuses a
/// target without them; a script does not need them).
fn targets(
    c: &ReleasesController,
    version: &str,
    tag: &str,
    assets: &[&ReleaseAsset],
    notes: &mut Vec<String>,
) -> Vec<Target> {
    let find = |arch: Option<&str>| -> Option<&ReleaseAsset> {
        match &c.github {
            Some(g) => {
                let name = g
                    .asset
                    .replace("{version}", version)
                    .replace("{tag}", tag)
                    .replace("{arch}", arch.unwrap_or(""));
                assets.iter().copied().find(|a| a.name == name)
            }
            None => match arch {
                Some(arch) => assets
                    .iter()
                    .copied()
                    .find(|a| a.arch.as_deref() == Some(arch)),
                None => (assets.len() == 1).then(|| assets[0]),
            },
        }
    };
    let target = |arch: Option<&str>, a: Option<&ReleaseAsset>| {
        let sha256 = a
            .and_then(|a| a.sha256.as_ref())
            .map(|h| h.to_ascii_lowercase())
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let size = a.and_then(|a| a.size).filter(|s| *s > 0);
        Target {
            version: version.to_string(),
            arch: arch.map(str::to_string),
            fips: None,
            // Both or neither: a size without its digest proves nothing.
            size: sha256.as_ref().and(size),
            sha256: size.and(sha256),
        }
    };
    if c.arch.is_empty() {
        return vec![target(None, find(None))];
    }
    let mut out = Vec::new();
    for arch in &c.arch {
        match find(Some(arch)) {
            Some(a) => out.push(target(Some(arch), Some(a))),
            None => notes.push(format!("release {}: no asset for {arch}", clip(tag))),
        }
    }
    out
}

fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}
