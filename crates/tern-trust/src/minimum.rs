//! Signed minimum versions per release line: the release keys' way to revoke old
//! builds. A compromised ternd can name any version the targets role ever signed; a
//! minimum for a line (`1` → `1.4.2`) makes every version of that line below it one a
//! pinned host refuses, whatever ternd says.
//!
//! The minimums live in the targets metadata itself (a top-level field
//! `tern_minimum_versions`, a map from line to version), so they carry the targets
//! role's signatures, version floor and expiry: an attacker cannot strip them without
//! the targets keys, nor serve an older targets file that lacks them.

use std::collections::BTreeMap;

pub use tern_core::revocation::{Minimum, ReleaseLine};
use tern_core::revocation::{Revocation, Revoked};
use tern_core::version::Version;

use crate::error::{Error, Result};

/// The field of the targets metadata that holds the minimums.
pub(crate) const FIELD: &str = "tern_minimum_versions";

/// A release line, read as the signing CLI and the metadata write it.
pub(crate) fn line(text: &str) -> Result<ReleaseLine> {
    ReleaseLine::parse(text).map_err(|e| Error::BadLine { line: e.line })
}

/// Checks a minimum before it is signed: the version must belong to its line.
pub fn minimum(line_text: &str, version: &str) -> Result<Minimum> {
    let line = line(line_text)?;
    let v = Version::parse(version).map_err(|e| Error::BadMinimum {
        line: line.to_string(),
        detail: e.to_string(),
    })?;
    if !line.contains(&v) {
        return Err(Error::BadMinimum {
            line: line.to_string(),
            detail: format!("{v} is not a version of release line {line}"),
        });
    }
    Ok(Minimum { line, version: v })
}

/// The minimums a targets metadata carries (none when the field is absent). A field
/// that is there but unreadable is an error: it was signed, so the release keys meant
/// something by it, and guessing would be failing open.
pub(crate) fn read(
    extra: &std::collections::HashMap<String, serde_json::Value>,
) -> Result<Vec<Minimum>> {
    let Some(value) = extra.get(FIELD) else {
        return Ok(Vec::new());
    };
    let map: BTreeMap<String, String> =
        serde_json::from_value(value.clone()).map_err(|e| Error::BadMinimum {
            line: "(all)".into(),
            detail: format!("the signed field {FIELD} is not a map of line to version: {e}"),
        })?;
    let mut out = Vec::with_capacity(map.len());
    for (line, version) in &map {
        out.push(minimum(line, version)?);
    }
    out.sort_by_key(|m| m.line);
    Ok(out)
}

/// The value to sign for `minimums`.
pub(crate) fn to_value(minimums: &[Minimum]) -> serde_json::Value {
    let map: BTreeMap<String, String> = minimums
        .iter()
        .map(|m| (m.line.to_string(), m.version.to_string()))
        .collect();
    serde_json::json!(map)
}

/// An error when `version` is below the signed minimum of a line it belongs to (the
/// rule is tern-core's, `revocation`). With minimums signed, a version that is not
/// semver belongs to no line that can be checked, and is refused too.
pub(crate) fn check(minimums: &[Minimum], version: &str, targets_version: u64) -> Result<()> {
    match Revocation::new(minimums.to_vec()).check(version) {
        Ok(()) => Ok(()),
        Err(Revoked::Below { version, minimum }) => Err(Error::BelowMinimum {
            version: version.to_string(),
            line: minimum.line.to_string(),
            minimum: minimum.version.to_string(),
            targets_version,
        }),
        Err(Revoked::NoLine { version, detail }) => Err(Error::NoLine { version, detail }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mins(pairs: &[(&str, &str)]) -> Vec<Minimum> {
        pairs.iter().map(|(l, v)| minimum(l, v).unwrap()).collect()
    }

    #[test]
    fn a_version_below_its_lines_minimum_is_refused_and_names_both() {
        let m = mins(&[("1", "1.4.2"), ("2.1", "2.1.5")]);
        for ok in [
            "1.4.2", "v1.4.3", "1.9.0", "0.9.0", "2.0.0", "2.1.5", "2.2.0", "3.0.0",
        ] {
            check(&m, ok, 7).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, line, min) in [
            ("1.4.1", "1", "1.4.2"),
            ("v1.0.0", "1", "1.4.2"),
            ("1.4.2-rc.1", "1", "1.4.2"),
            ("2.1.4", "2.1", "2.1.5"),
        ] {
            let e = check(&m, bad, 7).unwrap_err();
            match &e {
                Error::BelowMinimum {
                    line: l,
                    minimum,
                    targets_version: 7,
                    ..
                } => {
                    assert_eq!((l.as_str(), minimum.as_str()), (line, min), "{bad}");
                }
                other => panic!("{bad}: {other:?}"),
            }
            let text = e.to_string();
            assert!(
                text.contains(&format!(
                    "below the signed minimum {min} of release line {line}"
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn without_minimums_anything_passes_and_with_them_a_non_version_is_refused() {
        check(&[], "not-a-version", 1).unwrap();
        let m = mins(&[("1", "1.4.2")]);
        assert!(matches!(check(&m, "latest", 1), Err(Error::NoLine { .. })));
    }

    #[test]
    fn lines_and_minimums_are_checked_before_they_are_signed() {
        assert_eq!(
            ReleaseLine::parse("1").unwrap(),
            ReleaseLine {
                major: 1,
                minor: None
            }
        );
        assert_eq!(ReleaseLine::parse("v2.10").unwrap().to_string(), "2.10");
        for bad in ["", "x", "1.", "1.2.3", "-1", "1.a", " . "] {
            assert!(matches!(line(bad), Err(Error::BadLine { .. })), "{bad:?}");
        }
        assert!(matches!(
            minimum("1", "2.0.0"),
            Err(Error::BadMinimum { .. })
        ));
        assert!(matches!(
            minimum("1.4", "1.5.0"),
            Err(Error::BadMinimum { .. })
        ));
        assert!(matches!(minimum("1", "one"), Err(Error::BadMinimum { .. })));
    }

    #[test]
    fn the_signed_field_reads_back_and_a_damaged_one_is_an_error() {
        let m = mins(&[("2", "2.0.1"), ("1", "1.4.2")]);
        let mut extra = std::collections::HashMap::new();
        extra.insert(FIELD.to_string(), to_value(&m));
        let back = read(&extra).unwrap();
        assert_eq!(back, mins(&[("1", "1.4.2"), ("2", "2.0.1")]));
        extra.insert(FIELD.to_string(), serde_json::json!(["1.4.2"]));
        assert!(matches!(read(&extra), Err(Error::BadMinimum { .. })));
        extra.insert(FIELD.to_string(), serde_json::json!({"1": "2.0.0"}));
        assert!(matches!(read(&extra), Err(Error::BadMinimum { .. })));
        assert!(read(&Default::default()).unwrap().is_empty());
    }
}
