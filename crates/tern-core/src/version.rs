//! Version policy: semver with an optional leading `v`, and the RFD 90 compatibility rule.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A semantic version. A leading `v` is accepted on input and never written back.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub semver::Version);

/// Why a string is not a version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a semantic version (MAJOR.MINOR.PATCH, optional leading v): {reason}")]
pub struct VersionError {
    pub input: String,
    pub reason: String,
}

impl Version {
    pub fn parse(s: &str) -> Result<Self, VersionError> {
        let trimmed = s.trim();
        let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
        semver::Version::parse(bare)
            .map(Version)
            .map_err(|e| VersionError {
                input: s.to_string(),
                reason: e.to_string(),
            })
    }

    pub fn is_prerelease(&self) -> bool {
        !self.0.pre.is_empty()
    }
}

/// The normal form of a version string (no leading `v`), or the input unchanged when
/// it is not a version. Used to compare versions reported by agents with targets.
/// Whether two version texts name the same version (`v1.2.0` and `1.2.0` do), without
/// allocating when they are equal as written (the usual case, on every host of a pass).
pub(crate) fn same_version(a: &str, b: &str) -> bool {
    fn bare(s: &str) -> &str {
        let t = s.trim();
        t.strip_prefix('v').unwrap_or(t)
    }
    let (a, b) = (bare(a), bare(b));
    if a == b {
        return true;
    }
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

pub fn normalize(s: &str) -> String {
    Version::parse(s).map_or_else(|_| s.trim().to_string(), |v| v.to_string())
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Version::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// RFD 90's compatibility rule for moving a host from `current` to `target`:
/// the target is in the same major or one major up, never below the current major's
/// `x.0.0`, and a prerelease only when it was targeted explicitly.
pub(crate) fn is_compatible(
    current: &Version,
    target: &Version,
    prerelease_targeted: bool,
) -> bool {
    if target.is_prerelease() && !prerelease_targeted {
        return false;
    }
    let (cur, tgt) = (&current.0, &target.0);
    let same_or_next_major = tgt.major == cur.major || tgt.major == cur.major + 1;
    let floor = semver::Version::new(cur.major, 0, 0);
    same_or_next_major && *tgt >= floor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn leading_v_is_accepted_and_stripped() {
        assert_eq!(v("v17.2.0").to_string(), "17.2.0");
        assert_eq!(v("17.2.0").to_string(), "17.2.0");
        assert_eq!(normalize("v1.2.3-rc.1"), "1.2.3-rc.1");
        assert_eq!(normalize("garbage"), "garbage");
    }

    #[test]
    fn bad_versions_name_the_input() {
        for bad in ["", "v", "1.2", "1.2.3.4", "vv1.2.3", "latest"] {
            let err = Version::parse(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn compatibility_table() {
        let cases = [
            // current, target, prerelease targeted, compatible
            ("15.1.0", "15.1.1", false, true),
            ("15.1.0", "15.0.0", false, true), // downgrade within the major
            ("15.1.0", "16.0.0", false, true), // one major up
            ("15.1.0", "17.0.0", false, false), // two majors up
            ("15.1.0", "14.9.9", false, false), // below the current major's x.0.0
            ("15.1.0", "15.2.0-rc.1", false, false), // prerelease not targeted
            ("15.1.0", "15.2.0-rc.1", true, true),
            ("15.0.0-rc.1", "15.0.0", false, true),
        ];
        for (cur, tgt, pre, want) in cases {
            assert_eq!(is_compatible(&v(cur), &v(tgt), pre), want, "{cur} -> {tgt}");
        }
    }
}
