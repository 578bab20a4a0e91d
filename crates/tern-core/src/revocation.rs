//! Revoked versions: the release keys sign a minimum version per release line (`1` →
//! `1.4.2`), and every version of that line below it is revoked. This is the one
//! statement of the rule: tern-trust checks signed metadata with it on the hosts, and
//! the one answer ([`crate::domain::gate`]) holds a revoked version on every path ternd serves.

use crate::domain::version::Version;

/// A release line: every version of one major (`1`), or of one major and minor (`1.4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReleaseLine {
    pub major: u64,
    pub minor: Option<u64>,
}

/// Why a text is not a release line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line:?} is not a release line: write MAJOR or MAJOR.MINOR, e.g. 1 or 1.4")]
pub struct BadLine {
    pub line: String,
}

impl ReleaseLine {
    /// `MAJOR` or `MAJOR.MINOR`, plain numbers (a leading `v` is accepted).
    pub fn parse(text: &str) -> Result<Self, BadLine> {
        let bad = || BadLine { line: text.into() };
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let num = |s: &str| -> Result<u64, BadLine> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        match t.split_once('.') {
            None => Ok(Self {
                major: num(t)?,
                minor: None,
            }),
            Some((major, minor)) => Ok(Self {
                major: num(major)?,
                minor: Some(num(minor)?),
            }),
        }
    }

    /// Whether `v` belongs to this line.
    pub fn contains(&self, v: &Version) -> bool {
        v.0.major == self.major && self.minor.is_none_or(|m| v.0.minor == m)
    }
}

impl std::fmt::Display for ReleaseLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.minor {
            None => write!(f, "{}", self.major),
            Some(m) => write!(f, "{}.{m}", self.major),
        }
    }
}

/// One line's signed minimum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Minimum {
    pub line: ReleaseLine,
    pub version: Version,
}

/// Why a version may not be installed under the signed minimums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// Below the minimum of a line it belongs to.
    Below { version: Version, minimum: Minimum },
    /// Not a version at all: with minimums signed it belongs to no line that can be
    /// checked (Tern's versions are semver everywhere), so it is refused too.
    NoLine { version: String, detail: String },
}

impl std::fmt::Display for Revoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Revoked::Below { version, minimum } => write!(
                f,
                "{version} is below the signed minimum {} of release line {}",
                minimum.version, minimum.line
            ),
            Revoked::NoLine { version, detail } => write!(
                f,
                "{version:?} is not a version of any release line the minimums cover ({detail})"
            ),
        }
    }
}

/// The signed minimums in force (none: nothing is revoked), kept in memory by whoever
/// knows them: a pinned host from its verified metadata, ternd from the repository of
/// `--trust-root`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revocation {
    minimums: Vec<Minimum>,
}

static NONE: Revocation = Revocation {
    minimums: Vec::new(),
};

impl Revocation {
    /// Nothing revoked.
    pub fn none() -> &'static Revocation {
        &NONE
    }

    pub fn new(mut minimums: Vec<Minimum>) -> Self {
        minimums.sort_by_key(|m| m.line);
        Self { minimums }
    }

    pub fn minimums(&self) -> &[Minimum] {
        &self.minimums
    }

    pub fn is_empty(&self) -> bool {
        self.minimums.is_empty()
    }

    /// Whether `version` is revoked, and why.
    pub fn check(&self, version: &str) -> Result<(), Revoked> {
        if self.minimums.is_empty() {
            return Ok(());
        }
        let v = Version::parse(version).map_err(|e| Revoked::NoLine {
            version: version.to_string(),
            detail: e.to_string(),
        })?;
        self.check_version(&v)
    }

    /// [`check`](Self::check) for a parsed version.
    pub fn check_version(&self, v: &Version) -> Result<(), Revoked> {
        match self
            .minimums
            .iter()
            .find(|m| m.line.contains(v) && *v < m.version)
        {
            Some(m) => Err(Revoked::Below {
                version: v.clone(),
                minimum: m.clone(),
            }),
            None => Ok(()),
        }
    }

    pub fn revokes(&self, v: &Version) -> bool {
        self.check_version(v).is_err()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rev(pairs: &[(&str, &str)]) -> Revocation {
        Revocation::new(
            pairs
                .iter()
                .map(|(l, v)| Minimum {
                    line: ReleaseLine::parse(l).unwrap(),
                    version: Version::parse(v).unwrap(),
                })
                .collect(),
        )
    }

    #[test]
    fn a_version_below_its_lines_minimum_is_revoked() {
        let r = rev(&[("1", "1.4.2"), ("2.1", "2.1.5")]);
        for ok in [
            "1.4.2", "v1.4.3", "1.9.0", "0.9.0", "2.0.0", "2.1.5", "2.2.0",
        ] {
            r.check(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["1.4.1", "v1.0.0", "1.4.2-rc.1", "2.1.4"] {
            assert!(matches!(r.check(bad), Err(Revoked::Below { .. })), "{bad}");
        }
        assert!(matches!(r.check("latest"), Err(Revoked::NoLine { .. })));
        assert_eq!(Revocation::default().check("latest"), Ok(()));
    }

    #[test]
    fn lines_parse_strictly() {
        assert_eq!(
            ReleaseLine::parse("v1.4").unwrap(),
            ReleaseLine {
                major: 1,
                minor: Some(4)
            }
        );
        for bad in ["", "1.", "a", "1.4.2", "-1"] {
            assert!(ReleaseLine::parse(bad).is_err(), "{bad}");
        }
    }
}
