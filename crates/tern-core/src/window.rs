//! Maintenance windows: a group's window opens at `start_hour` UTC on each of its
//! `days` and stays open for a fixed duration (1h for halt-on-error, the rollout's
//! `maintenance_window_duration` for time-based).

use std::fmt;

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A day a window may open on; `*` means every day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
    All,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a day (one of Mon, Tue, Wed, Thu, Fri, Sat, Sun or *)")]
pub struct DayError {
    pub input: String,
}

impl Day {
    pub const WORKWEEK: [Day; 4] = [Day::Mon, Day::Tue, Day::Wed, Day::Thu];

    pub fn parse(s: &str) -> Result<Self, DayError> {
        let day = match s.trim().to_ascii_lowercase().as_str() {
            "mon" | "monday" => Self::Mon,
            "tue" | "tuesday" => Self::Tue,
            "wed" | "wednesday" => Self::Wed,
            "thu" | "thursday" => Self::Thu,
            "fri" | "friday" => Self::Fri,
            "sat" | "saturday" => Self::Sat,
            "sun" | "sunday" => Self::Sun,
            "*" => Self::All,
            _ => {
                return Err(DayError {
                    input: s.to_string(),
                });
            }
        };
        Ok(day)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mon => "Mon",
            Self::Tue => "Tue",
            Self::Wed => "Wed",
            Self::Thu => "Thu",
            Self::Fri => "Fri",
            Self::Sat => "Sat",
            Self::Sun => "Sun",
            Self::All => "*",
        }
    }

    fn matches(self, wd: Weekday) -> bool {
        matches!(
            (self, wd),
            (Self::All, _)
                | (Self::Mon, Weekday::Monday)
                | (Self::Tue, Weekday::Tuesday)
                | (Self::Wed, Weekday::Wednesday)
                | (Self::Thu, Weekday::Thursday)
                | (Self::Fri, Weekday::Friday)
                | (Self::Sat, Weekday::Saturday)
                | (Self::Sun, Weekday::Sunday)
        )
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Day {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Day {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Day::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Recurring UTC window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window<'a> {
    pub days: &'a [Day],
    pub start_hour: u8,
    pub duration: SignedDuration,
}

impl Window<'_> {
    fn opens_on(&self, date: Date) -> Option<Timestamp> {
        let wd = date.weekday();
        if !self.days.iter().any(|d| d.matches(wd)) {
            return None;
        }
        let hour = i8::try_from(self.start_hour).ok()?;
        TimeZone::UTC.to_timestamp(date.at(hour, 0, 0, 0)).ok()
    }

    /// When the window that contains `now` opened, or `None` when it is closed.
    pub fn open_since(&self, now: Timestamp) -> Option<Timestamp> {
        if self.duration <= SignedDuration::ZERO {
            return None;
        }
        let today = now.to_zoned(TimeZone::UTC).date();
        // A window that opened up to `duration` ago may still be open.
        let days_back = self.duration.as_secs() / 86_400 + 1;
        (0..=days_back)
            .filter_map(|k| today.checked_sub(k.days()).ok())
            .filter_map(|date| self.opens_on(date))
            .filter(|&open| open <= now && now < open.saturating_add(self.duration).unwrap_or(open))
            .max()
    }

    pub fn is_open(&self, now: Timestamp) -> bool {
        self.open_since(now).is_some()
    }

    /// The first opening strictly after `now`, if the window ever opens.
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        let today = now.to_zoned(TimeZone::UTC).date();
        (0..=8i64)
            .filter_map(|k| today.checked_add(k.days()).ok())
            .filter_map(|date| self.opens_on(date))
            .find(|&open| open > now)
    }

    /// The window open at `now` (if any) and the ones after it, `count` in all, as
    /// `(opens, closes)`; empty when it never opens. This is the JSON schedule of seed
    /// 001 that hosts following a channel keep.
    pub fn upcoming(&self, now: Timestamp, count: usize) -> Vec<(Timestamp, Timestamp)> {
        if self.duration <= SignedDuration::ZERO {
            return Vec::new();
        }
        let close = |open: Timestamp| open.saturating_add(self.duration).unwrap_or(open);
        let mut out = Vec::with_capacity(count.min(64));
        let mut cursor = match self.open_since(now) {
            Some(open) => {
                out.push((open, close(open)));
                open
            }
            None => now,
        };
        while out.len() < count {
            let Some(open) = self.next_open(cursor) else {
                break;
            };
            // Windows longer than a day overlap the next one: keep them as given.
            out.push((open, close(open)));
            cursor = open;
        }
        out.truncate(count);
        out
    }

    /// The systemd `OnCalendar=` value that fires when the window opens (seed 001's
    /// override of the upgrade timer), e.g. `Mon,Tue,Wed,Thu *-*-* 12:00:00 UTC`;
    /// `None` when the window never opens (no days, an hour past 23, no duration).
    pub fn on_calendar(&self) -> Option<String> {
        if self.days.is_empty() || self.start_hour > 23 || self.duration <= SignedDuration::ZERO {
            return None;
        }
        let days = if self.days.contains(&Day::All) {
            String::new()
        } else {
            // In the week's order, each once, whatever order the config lists them in.
            let mut days: Vec<Day> = self.days.to_vec();
            days.sort();
            days.dedup();
            let names: Vec<&str> = days.iter().map(|d| d.as_str()).collect();
            format!("{} ", names.join(","))
        };
        Some(format!("{days}*-*-* {:02}:00:00 UTC", self.start_hour))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const HOUR: SignedDuration = SignedDuration::from_hours(1);

    #[test]
    fn every_weekday_against_a_workweek_window() {
        // 2026-11-16 is a Monday.
        let w = Window {
            days: &Day::WORKWEEK,
            start_hour: 12,
            duration: HOUR,
        };
        let days = [
            ("2026-11-16", true),  // Mon
            ("2026-11-17", true),  // Tue
            ("2026-11-18", true),  // Wed
            ("2026-11-19", true),  // Thu
            ("2026-11-20", false), // Fri
            ("2026-11-21", false), // Sat
            ("2026-11-22", false), // Sun
        ];
        for (date, open) in days {
            assert_eq!(w.is_open(ts(&format!("{date}T12:30:00Z"))), open, "{date}");
        }
    }

    #[test]
    fn hour_boundaries_are_half_open() {
        let w = Window {
            days: &[Day::All],
            start_hour: 12,
            duration: HOUR,
        };
        assert!(!w.is_open(ts("2026-11-21T11:59:59Z")));
        assert!(w.is_open(ts("2026-11-21T12:00:00Z")));
        assert!(w.is_open(ts("2026-11-21T12:59:59Z")));
        assert!(!w.is_open(ts("2026-11-21T13:00:00Z")));
        assert_eq!(
            w.open_since(ts("2026-11-21T12:42:00Z")),
            Some(ts("2026-11-21T12:00:00Z"))
        );
    }

    #[test]
    fn star_means_every_day_and_windows_cross_midnight() {
        let w = Window {
            days: &[Day::All],
            start_hour: 23,
            duration: SignedDuration::from_hours(2),
        };
        for date in ["2026-11-16", "2026-11-21", "2026-11-22"] {
            assert!(w.is_open(ts(&format!("{date}T23:10:00Z"))), "{date}");
        }
        assert_eq!(
            w.open_since(ts("2026-11-22T00:30:00Z")),
            Some(ts("2026-11-21T23:00:00Z"))
        );
        assert!(!w.is_open(ts("2026-11-22T01:00:00Z")));
    }

    #[test]
    fn a_window_opened_on_an_allowed_day_stays_open_past_midnight() {
        // Opens Thursday 23:00 for 3h: still open Friday 01:30, though Friday is not a day.
        let w = Window {
            days: &Day::WORKWEEK,
            start_hour: 23,
            duration: SignedDuration::from_hours(3),
        };
        assert!(w.is_open(ts("2026-11-20T01:30:00Z")));
        // Sunday 23:00 never opens, so Monday 00:30 is closed.
        assert!(!w.is_open(ts("2026-11-23T00:30:00Z")));
    }

    #[test]
    fn next_open_skips_disallowed_days() {
        let w = Window {
            days: &Day::WORKWEEK,
            start_hour: 12,
            duration: HOUR,
        };
        // Friday afternoon: next opening is Monday noon.
        assert_eq!(
            w.next_open(ts("2026-11-20T15:00:00Z")),
            Some(ts("2026-11-23T12:00:00Z"))
        );
        let never = Window {
            days: &[],
            start_hour: 12,
            duration: HOUR,
        };
        assert_eq!(never.next_open(ts("2026-11-20T15:00:00Z")), None);
    }

    #[test]
    fn days_parse_leniently_and_print_canonically() {
        assert_eq!(Day::parse("mon").unwrap(), Day::Mon);
        assert_eq!(Day::parse("Sunday").unwrap().as_str(), "Sun");
        assert!(Day::parse("Funday").is_err());
    }

    #[test]
    fn upcoming_windows_start_with_the_open_one() {
        let w = Window {
            days: &[Day::Mon, Day::Wed],
            start_hour: 22,
            duration: SignedDuration::from_hours(4),
        };
        // Monday 2026-11-23 23:30: the Monday window is open and crosses midnight.
        let got = w.upcoming(ts("2026-11-23T23:30:00Z"), 3);
        let want = [
            ("2026-11-23T22:00:00Z", "2026-11-24T02:00:00Z"),
            ("2026-11-25T22:00:00Z", "2026-11-26T02:00:00Z"),
            ("2026-11-30T22:00:00Z", "2026-12-01T02:00:00Z"),
        ];
        let want: Vec<_> = want.iter().map(|(a, b)| (ts(a), ts(b))).collect();
        assert_eq!(got, want);
        assert_eq!(w.upcoming(ts("2026-11-24T03:00:00Z"), 1), want[1..2]);
        assert_eq!(
            w.on_calendar().as_deref(),
            Some("Mon,Wed *-*-* 22:00:00 UTC")
        );
    }
}
