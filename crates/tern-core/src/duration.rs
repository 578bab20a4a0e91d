//! Durations written the Go way (`90m`, `1h30m`, `45s`) and percentages (`20%`), the
//! two scalar formats of the resources.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration with whole-second precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration {
    secs: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a duration (write it like 90m, 1h30m or 45s)")]
pub struct DurationError {
    pub input: String,
}

/// A duration that must be longer than zero (a timeout, a token's lifetime) was not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositiveDurationError {
    #[error(transparent)]
    Malformed(#[from] DurationError),
    #[error("{0:?} must be longer than zero")]
    Zero(String),
}

impl GoDuration {
    /// [`GoDuration::parse`] for the durations where zero means nothing sensible.
    pub fn parse_positive(input: &str) -> Result<Self, PositiveDurationError> {
        let d = Self::parse(input)?;
        if d.secs == 0 {
            return Err(PositiveDurationError::Zero(input.to_string()));
        }
        Ok(d)
    }

    pub const fn from_secs(secs: u64) -> Self {
        Self { secs }
    }
    pub const fn from_hours(h: u64) -> Self {
        Self { secs: h * 3600 }
    }
    pub const fn from_minutes(m: u64) -> Self {
        Self { secs: m * 60 }
    }
    pub const fn as_secs(self) -> u64 {
        self.secs
    }
    pub fn as_signed(self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_secs(i64::try_from(self.secs).unwrap_or(i64::MAX))
    }
    pub const fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_secs(self.secs)
    }

    /// A positive duration flag (`--period 30s`) as clap's value parser wants it.
    pub fn parse_positive_std(input: &str) -> Result<std::time::Duration, String> {
        Self::parse_positive(input)
            .map(Self::as_std)
            .map_err(|e| e.to_string())
    }

    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let err = || DurationError {
            input: input.to_string(),
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err());
        }
        if s == "0" {
            return Ok(Self { secs: 0 });
        }
        let mut total: u64 = 0;
        let mut digits = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let unit = match c {
                'h' => 3600,
                's' => 1,
                'm' if chars.peek() == Some(&'s') => return Err(err()), // no sub-second units
                'm' => 60,
                'd' => 86_400,
                _ => return Err(err()),
            };
            let n: u64 = digits.parse().map_err(|_| err())?;
            digits.clear();
            total = n
                .checked_mul(unit)
                .and_then(|x| total.checked_add(x))
                .ok_or_else(err)?;
        }
        if !digits.is_empty() {
            return Err(err()); // a number with no unit, like "90"
        }
        Ok(Self { secs: total })
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (h, m, s) = (self.secs / 3600, self.secs % 3600 / 60, self.secs % 60);
        if self.secs == 0 {
            return f.write_str("0s");
        }
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        if s > 0 {
            write!(f, "{s}s")?;
        }
        Ok(())
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        GoDuration::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A share of a group, written `20%`; held in basis points so it compares exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent {
    basis_points: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a percentage between 1% and 100% (write it like 10%)")]
pub struct PercentError {
    pub input: String,
}

impl Percent {
    pub const fn from_percent(p: u32) -> Self {
        Self {
            basis_points: p * 100,
        }
    }
    pub fn fraction(self) -> f64 {
        f64::from(self.basis_points) / 10_000.0
    }

    pub fn parse(input: &str) -> Result<Self, PercentError> {
        let err = || PercentError {
            input: input.to_string(),
        };
        let num = input.trim().strip_suffix('%').ok_or_else(err)?.trim();
        let value: f64 = num.parse().map_err(|_| err())?;
        if !(1.0..=100.0).contains(&value) {
            return Err(err());
        }
        // In range 1..=100, so the product fits in u32 and is not negative.
        let basis_points = (value * 100.0).round() as u32;
        Ok(Self { basis_points })
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.basis_points.is_multiple_of(100) {
            write!(f, "{}%", self.basis_points / 100)
        } else {
            write!(f, "{}%", f64::from(self.basis_points) / 100.0)
        }
    }
}

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Percent::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        let cases = [
            ("90m", 5400, "1h30m"),
            ("1h30m", 5400, "1h30m"),
            ("2h", 7200, "2h"),
            ("45s", 45, "45s"),
            ("1d", 86_400, "24h"),
            ("0", 0, "0s"),
        ];
        for (input, secs, shown) in cases {
            let d = GoDuration::parse(input).unwrap();
            assert_eq!(d.as_secs(), secs, "{input}");
            assert_eq!(d.to_string(), shown, "{input}");
        }
        for bad in [
            "",
            "90",
            "h",
            "1.5h",
            "10ms",
            "-1h",
            "1y",
            "99999999999999999999h",
        ] {
            assert!(GoDuration::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn positive_durations_refuse_zero_and_keep_the_parse_error() {
        assert_eq!(GoDuration::parse_positive("10s").unwrap().as_secs(), 10);
        for zero in ["0", "0s", "0h0m"] {
            assert_eq!(
                GoDuration::parse_positive(zero),
                Err(PositiveDurationError::Zero(zero.to_string()))
            );
        }
        let e = GoDuration::parse_positive("10ms").unwrap_err();
        assert!(matches!(e, PositiveDurationError::Malformed(_)), "{e:?}");
        assert!(e.to_string().contains("90m"), "the hint survives: {e}");
    }

    #[test]
    fn percents_parse_and_print() {
        assert_eq!(Percent::parse("20%").unwrap().fraction(), 0.2);
        assert_eq!(Percent::parse("12.5%").unwrap().to_string(), "12.5%");
        assert_eq!(Percent::parse(" 100% ").unwrap().to_string(), "100%");
        for bad in ["20", "0%", "101%", "-5%", "abc%", ""] {
            assert!(Percent::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
