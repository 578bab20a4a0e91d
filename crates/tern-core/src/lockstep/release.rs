//! Which release a lock-step cluster should run: tags with a prefix, versions that are
//! semver or calendar (`2018.11.07-1`), and the environment that decides whether
//! pre-releases count.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A release's version as written after its tag prefix.
///
/// Two schemes, never mixed in one source: semver (`1.2.0`, `v1.2.0-rc.1`) and the
/// calendar versions of seed 004 (`YYYY.MM.DD` with an optional `-N` build number, the
/// date zero-padded). Semver refuses `2018.11.07` (a leading zero), so a calendar
/// version is tried first: exactly four digits, a dot, two, a dot, two.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseVersion {
    Semver(semver::Version),
    Calendar {
        year: u16,
        month: u8,
        day: u8,
        build: u32,
        /// As written, so `2018.11.07` and `2018.11.07-0` keep their spelling.
        text: String,
    },
}

/// Why a version could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a version: {why}")]
pub struct VersionError {
    pub input: String,
    pub why: String,
}

impl ReleaseVersion {
    /// Reads `1.2.3`, `v1.2.3-rc.1` or `2018.11.07-1`.
    pub fn parse(input: &str) -> Result<Self, VersionError> {
        let err = |why: &str| VersionError {
            input: input.to_string(),
            why: why.to_string(),
        };
        if input.is_empty() || input.len() > 128 {
            return Err(err("a version is 1 to 128 characters"));
        }
        if let Some(cal) = parse_calendar(input) {
            return cal.map_err(|why| err(&why));
        }
        let bare = input.strip_prefix('v').unwrap_or(input);
        semver::Version::parse(bare)
            .map(ReleaseVersion::Semver)
            .map_err(|e| {
                err(&format!(
                    "{e} (expected semver like 1.2.0 or a calendar version like 2018.11.07-1)"
                ))
            })
    }

    /// True for a semver pre-release (`1.2.0-rc.1`). Calendar versions carry no
    /// pre-release part; their source says whether a release is one.
    pub fn is_prerelease(&self) -> bool {
        matches!(self, ReleaseVersion::Semver(v) if !v.pre.is_empty())
    }

    fn scheme(&self) -> &'static str {
        match self {
            ReleaseVersion::Semver(_) => "semver",
            ReleaseVersion::Calendar { .. } => "calendar",
        }
    }

    /// The order of two versions of one scheme; `None` across schemes.
    pub fn compare(&self, other: &Self) -> Option<Ordering> {
        match (self, other) {
            (ReleaseVersion::Semver(a), ReleaseVersion::Semver(b)) => Some(a.cmp_precedence(b)),
            (
                ReleaseVersion::Calendar {
                    year,
                    month,
                    day,
                    build,
                    ..
                },
                ReleaseVersion::Calendar {
                    year: y2,
                    month: m2,
                    day: d2,
                    build: b2,
                    ..
                },
            ) => Some((year, month, day, build).cmp(&(y2, m2, d2, b2))),
            _ => None,
        }
    }
}

/// `Some(result)` when `input` has the calendar shape, `None` when it is not one at all.
fn parse_calendar(input: &str) -> Option<Result<ReleaseVersion, String>> {
    let (date, build) = match input.split_once('-') {
        Some((d, b)) => (d, Some(b)),
        None => (input, None),
    };
    let parts: Vec<&str> = date.split('.').collect();
    let shape = parts.len() == 3
        && parts[0].len() == 4
        && parts[1].len() == 2
        && parts[2].len() == 2
        && parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit()));
    if !shape {
        return None;
    }
    // The shape is checked: these parse.
    let (Ok(year), Ok(month), Ok(day)) = (
        parts[0].parse::<u16>(),
        parts[1].parse::<u8>(),
        parts[2].parse::<u8>(),
    ) else {
        return Some(Err("the date is not numeric".into()));
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Some(Err(format!(
            "{year:04}.{month:02}.{day:02} is not a date (YYYY.MM.DD)"
        )));
    }
    let build = match build {
        None => 0,
        Some(b) if !b.is_empty() && b.len() <= 9 && b.bytes().all(|c| c.is_ascii_digit()) => {
            match b.parse::<u32>() {
                Ok(n) => n,
                Err(_) => return Some(Err(format!("build number {b:?} is not a number"))),
            }
        }
        Some(b) => {
            return Some(Err(format!(
                "build number {b:?} after the date must be digits (YYYY.MM.DD-N)"
            )));
        }
    };
    Some(Ok(ReleaseVersion::Calendar {
        year,
        month,
        day,
        build,
        text: input.to_string(),
    }))
}

impl fmt::Display for ReleaseVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseVersion::Semver(v) => write!(f, "{v}"),
            ReleaseVersion::Calendar { text, .. } => f.write_str(text),
        }
    }
}

impl FromStr for ReleaseVersion {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// How a tag's prefix is found: the seed's rule (everything up to and including the
/// first hyphen) or an exact prefix; tags without it are other build targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagPrefix {
    FirstHyphen,
    Exact(String),
}

impl TagPrefix {
    /// The version part of `tag`, or `None` when the tag is not one of ours.
    pub fn strip<'a>(&self, tag: &'a str) -> Option<&'a str> {
        let rest = match self {
            TagPrefix::FirstHyphen => tag.split_once('-').map(|(_, v)| v),
            TagPrefix::Exact(p) => tag.strip_prefix(p.as_str()),
        }?;
        (!rest.is_empty()).then_some(rest)
    }
}

/// The data-center environment (`tern-lockstep config set env ENV`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// The latest release that is not a pre-release.
    #[default]
    Production,
    /// The latest release, pre-releases included.
    Staging,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Staging => "staging",
        }
    }
}

impl FromStr for Environment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "production" => Ok(Environment::Production),
            "staging" => Ok(Environment::Staging),
            other => Err(format!(
                "{other:?} is not an environment: give production (releases only) or staging (pre-releases too)"
            )),
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A release as a source lists it, before its tag is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRelease {
    pub tag: String,
    /// The source marks it a pre-release (GitHub's `prerelease`).
    pub prerelease: bool,
    /// GitHub's `draft`: never taken.
    pub draft: bool,
}

/// A release whose tag was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Index into the listing it came from.
    pub index: usize,
    pub tag: String,
    pub version: ReleaseVersion,
    pub prerelease: bool,
}

/// Why no release could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    #[error(
        "the releases mix version schemes ({a} is {}, {b} is {}): they cannot be ordered; keep one scheme per source",
        a.scheme(),
        b.scheme()
    )]
    MixedSchemes {
        a: ReleaseVersion,
        b: ReleaseVersion,
    },
}

/// What [`pick`] made of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// The newest release the environment takes, if any.
    pub latest: Option<Candidate>,
    /// Tags skipped and why (not ours, unreadable version), for the log.
    pub skipped: Vec<(String, String)>,
}

/// The newest release `env` takes among `listed`: drafts never; tags without the prefix
/// or with an unreadable version are skipped (and reported); pre-releases (marked by the
/// source or by a semver pre-release part) only in staging.
pub fn pick(
    listed: &[ListedRelease],
    prefix: &TagPrefix,
    env: Environment,
) -> Result<Picked, PickError> {
    let mut skipped = Vec::new();
    let mut latest: Option<Candidate> = None;
    for (index, r) in listed.iter().enumerate() {
        if r.draft {
            continue;
        }
        let Some(text) = prefix.strip(&r.tag) else {
            skipped.push((
                r.tag.clone(),
                "the tag does not carry the release prefix".into(),
            ));
            continue;
        };
        let version = match ReleaseVersion::parse(text) {
            Ok(v) => v,
            Err(e) => {
                skipped.push((r.tag.clone(), e.to_string()));
                continue;
            }
        };
        let prerelease = r.prerelease || version.is_prerelease();
        if prerelease && env == Environment::Production {
            continue;
        }
        let newer = match &latest {
            None => true,
            Some(best) => match version.compare(&best.version) {
                Some(o) => o == Ordering::Greater,
                None => {
                    return Err(PickError::MixedSchemes {
                        a: best.version.clone(),
                        b: version,
                    });
                }
            },
        };
        if newer {
            latest = Some(Candidate {
                index,
                tag: r.tag.clone(),
                version,
                prerelease,
            });
        }
    }
    Ok(Picked { latest, skipped })
}

/// True when `candidate` should replace `current` (nothing run yet, or strictly newer).
/// Across schemes it is not newer: the operator must say so by hand.
pub(crate) fn is_newer(candidate: &ReleaseVersion, current: Option<&ReleaseVersion>) -> bool {
    match current {
        None => true,
        Some(c) => candidate.compare(c) == Some(Ordering::Greater),
    }
}
