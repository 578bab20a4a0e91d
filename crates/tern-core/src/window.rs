//! Maintenance windows. A group's [`Calendar`] is a set of recurring windows, each
//! opening at a civil time of day on some days of the week in the group's time zone
//! and open for a fixed length of absolute time, minus the blackout dates on which no
//! window opens. Every user of a window (reconcile, forecast, views, the exported
//! schedule, hosts following a channel) asks a `Calendar`; nothing else computes one.
//!
//! Daylight saving time: a start that falls in a gap (spring forward) opens at the
//! first instant after the gap; a start that falls in a fold (fall back) opens at the
//! earlier of its two instants. Either way a window opens once on each of its days.

use std::fmt;

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::domain::duration::GoDuration;

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

/// The time of day a window opens, written `HH:MM` (24-hour clock, in the group's
/// time zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StartTime {
    hour: i8,
    minute: i8,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a time of day (HH:MM, from 00:00 to 23:59)")]
pub struct StartTimeError {
    pub input: String,
}

impl StartTime {
    /// `None` unless `hour` is 0–23 and `minute` 0–59.
    pub fn new(hour: u8, minute: u8) -> Option<Self> {
        let hour = i8::try_from(hour).ok().filter(|h| (0..=23).contains(h))?;
        let minute = i8::try_from(minute).ok().filter(|m| (0..=59).contains(m))?;
        Some(Self { hour, minute })
    }

    pub fn parse(s: &str) -> Result<Self, StartTimeError> {
        let err = || StartTimeError {
            input: s.to_string(),
        };
        let (h, m) = s.split_once(':').ok_or_else(err)?;
        let digits = |part: &str, max_len: usize| {
            (!part.is_empty() && part.len() <= max_len && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u8>().ok())
                .flatten()
        };
        match (digits(h, 2), m.len() == 2, digits(m, 2)) {
            (Some(h), true, Some(m)) => Self::new(h, m).ok_or_else(err),
            _ => Err(err()),
        }
    }

    pub fn hour(self) -> u8 {
        self.hour.unsigned_abs()
    }

    pub fn minute(self) -> u8 {
        self.minute.unsigned_abs()
    }

    fn on(self, date: Date) -> jiff::civil::DateTime {
        date.at(self.hour, self.minute, 0, 0)
    }
}

impl fmt::Display for StartTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

impl Serialize for StartTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StartTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        StartTime::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Civil dates on which no window opens, both ends included, in the group's zone:
/// `2026-12-24/2027-01-02`, or one date `2026-12-25`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Blackout {
    pub first: Date,
    pub last: Date,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} {problem}")]
pub struct BlackoutError {
    pub input: String,
    pub problem: &'static str,
}

impl Blackout {
    pub fn parse(s: &str) -> Result<Self, BlackoutError> {
        let err = |problem| BlackoutError {
            input: s.to_string(),
            problem,
        };
        const SHAPE: &str =
            "is not a date or a range of dates (YYYY-MM-DD or YYYY-MM-DD/YYYY-MM-DD)";
        let date = |part: &str| -> Result<Date, BlackoutError> {
            // Exactly YYYY-MM-DD: jiff also reads other ISO 8601 forms we do not promise.
            let shaped = part.len() == 10
                && part.bytes().enumerate().all(|(i, b)| {
                    if i == 4 || i == 7 {
                        b == b'-'
                    } else {
                        b.is_ascii_digit()
                    }
                });
            if !shaped {
                return Err(err(SHAPE));
            }
            part.parse::<Date>()
                .map_err(|_| err("names a day that does not exist"))
        };
        let (first, last) = match s.trim().split_once('/') {
            Some((a, b)) => (date(a.trim())?, date(b.trim())?),
            None => {
                let d = date(s.trim())?;
                (d, d)
            }
        };
        if last < first {
            return Err(err("ends before it starts"));
        }
        Ok(Self { first, last })
    }

    pub fn contains(&self, date: Date) -> bool {
        self.first <= date && date <= self.last
    }
}

impl fmt::Display for Blackout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}/{}", self.first, self.last)
        }
    }
}

impl Serialize for Blackout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Blackout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Blackout::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The time zone named `name` from the bundled IANA database (hosts need no
/// `/usr/share/zoneinfo`).
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name)
        .map_err(|_| format!("{name:?} is not an IANA time zone (e.g. Europe/Paris)"))
}

/// One window as a config writes it: `{days: [Mon, Tue], start: "22:30", duration: 3h}`.
/// Without `duration` the window lasts the strategy's length (1h for halt-on-error,
/// `maintenance_window_duration` for time-based).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    pub days: Vec<Day>,
    pub start: StartTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<GoDuration>,
}

/// A schedule as written with `windows`, `timezone` and `blackouts`: what a group's
/// config says, what the rollout keeps of it, what ternd exports to hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalendarSpec {
    pub windows: Vec<WindowSpec>,
    /// An IANA zone name; `None` is UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blackouts: Vec<Blackout>,
}

impl CalendarSpec {
    /// The calendar, windows without a `duration` lasting `default_duration`; an
    /// error names the zone that is not one.
    pub fn calendar(&self, default_duration: SignedDuration) -> Result<Calendar, String> {
        let zone = match &self.timezone {
            Some(name) => time_zone(name)?,
            None => TimeZone::UTC,
        };
        let windows = self
            .windows
            .iter()
            .map(|w| Recurring {
                days: w.days.clone(),
                start: w.start,
                duration: w.duration.map_or(default_duration, GoDuration::as_signed),
            })
            .collect();
        Ok(Calendar::new(windows, zone, self.blackouts.clone()))
    }
}

/// One recurring window: on each of `days` it opens at `start` and stays open for
/// `duration` of absolute time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recurring {
    pub days: Vec<Day>,
    pub start: StartTime,
    pub duration: SignedDuration,
}

/// One opening of a window: open from `opens` (included) to `closes` (excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Opening {
    pub opens: Timestamp,
    pub closes: Timestamp,
}

/// A group's schedule: its recurring windows in its zone, minus its blackout dates.
#[derive(Clone, Debug, PartialEq)]
pub struct Calendar {
    windows: Vec<Recurring>,
    zone: TimeZone,
    blackouts: Vec<Blackout>,
}

impl Calendar {
    /// Windows that can never open (no day, no length) are dropped, so a calendar
    /// without windows is one that never opens.
    pub fn new(windows: Vec<Recurring>, zone: TimeZone, blackouts: Vec<Blackout>) -> Self {
        let windows = windows
            .into_iter()
            .filter(|w| !w.days.is_empty() && w.duration > SignedDuration::ZERO)
            .collect();
        Self {
            windows,
            zone,
            blackouts,
        }
    }

    /// The schedule of a config written with `days` and `start_hour`: one window in
    /// UTC, never open when the hour is not one.
    pub fn hourly_utc(days: &[Day], start_hour: u8, duration: SignedDuration) -> Self {
        let windows = StartTime::new(start_hour, 0)
            .map(|start| Recurring {
                days: days.to_vec(),
                start,
                duration,
            })
            .into_iter()
            .collect();
        Self::new(windows, TimeZone::UTC, Vec::new())
    }

    /// A calendar that never opens.
    pub(crate) fn never() -> Self {
        Self::new(Vec::new(), TimeZone::UTC, Vec::new())
    }

    pub fn windows(&self) -> &[Recurring] {
        &self.windows
    }

    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    #[cfg(any(test, feature = "fixtures"))]
    pub fn blackouts(&self) -> &[Blackout] {
        &self.blackouts
    }

    /// The longest of the windows (zero when there is none): how long an operator's
    /// start-update keeps a time-based group open.
    pub(crate) fn longest(&self) -> SignedDuration {
        self.windows
            .iter()
            .map(|w| w.duration)
            .max()
            .unwrap_or(SignedDuration::ZERO)
    }

    fn blackout_covering(&self, date: Date) -> Option<&Blackout> {
        self.blackouts
            .iter()
            .filter(|b| b.contains(date))
            .max_by_key(|b| b.last)
    }

    /// Whether `date` (civil, in the zone) is a blackout date.
    pub fn is_blackout(&self, date: Date) -> bool {
        self.blackout_covering(date).is_some()
    }

    /// The openings scheduled on `date`, earliest first, one per instant (the longest
    /// when two windows open together). None on a blackout date; a window still open
    /// when a blackout date begins closes then.
    fn openings_on(&self, date: Date) -> Vec<Opening> {
        if self.is_blackout(date) {
            return Vec::new();
        }
        let wd = date.weekday();
        let mut out: Vec<Opening> = self
            .windows
            .iter()
            .filter(|w| w.days.iter().any(|d| d.matches(wd)))
            .filter_map(|w| {
                let opens = local_instant(&self.zone, w.start.on(date))?;
                let closes = opens.checked_add(w.duration).ok()?;
                Some(Opening {
                    opens,
                    closes: self.cut_by_blackouts(opens, closes),
                })
            })
            .collect();
        out.sort();
        // Sorted by (opens, closes): keep the last, longest, of each opening instant.
        out.reverse();
        out.dedup_by_key(|o| o.opens);
        out.reverse();
        out
    }

    fn cut_by_blackouts(&self, opens: Timestamp, closes: Timestamp) -> Timestamp {
        self.blackouts
            .iter()
            .filter_map(|b| local_instant(&self.zone, b.first.at(0, 0, 0, 0)))
            .filter(|&begins| opens < begins && begins < closes)
            .min()
            .unwrap_or(closes)
    }

    fn local_date(&self, now: Timestamp) -> Date {
        now.to_zoned(self.zone.clone()).date()
    }

    /// The opening that contains `now` (the latest, when windows overlap), or `None`
    /// when every window is closed.
    pub fn open_at(&self, now: Timestamp) -> Option<Opening> {
        let today = self.local_date(now);
        // An opening up to `longest` ago may still be open; a day more for the zone's
        // offset changes.
        let days_back = self.longest().as_secs() / 86_400 + 2;
        (0..=days_back)
            .filter_map(|k| today.checked_sub(k.days()).ok())
            .flat_map(|date| self.openings_on(date))
            .filter(|o| o.opens <= now && now < o.closes)
            .max()
    }

    /// When the window that contains `now` opened, or `None` when it is closed.
    pub fn open_since(&self, now: Timestamp) -> Option<Timestamp> {
        self.open_at(now).map(|o| o.opens)
    }

    pub fn is_open(&self, now: Timestamp) -> bool {
        self.open_at(now).is_some()
    }

    /// The first opening strictly after `now`, if any window ever opens again.
    pub(crate) fn next_opening(&self, now: Timestamp) -> Option<Opening> {
        if self.windows.is_empty() {
            return None;
        }
        // Every eight dates outside blackouts hold an opening of every window, and
        // each blackout is skipped in one step: this bounds the walk.
        let mut steps = 8 * (self.blackouts.len() + 2);
        let mut date = self.local_date(now);
        while steps > 0 {
            steps -= 1;
            if let Some(b) = self.blackout_covering(date) {
                date = b.last.checked_add(1.day()).ok()?;
                continue;
            }
            if let Some(o) = self.openings_on(date).into_iter().find(|o| o.opens > now) {
                return Some(o);
            }
            date = date.checked_add(1.day()).ok()?;
        }
        None
    }

    /// The first opening strictly after `now`.
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        self.next_opening(now).map(|o| o.opens)
    }

    /// The opening that contains `now` (if any) and the ones after it, `count` in all,
    /// as `(opens, closes)`; empty when the calendar never opens. This is the JSON
    /// schedule of seed 001 that hosts following a channel keep.
    pub fn upcoming(&self, now: Timestamp, count: usize) -> Vec<(Timestamp, Timestamp)> {
        let mut out = Vec::with_capacity(count.min(64));
        // After the open one, openings after `now`: one that opened since and has
        // closed already (a short window inside a long one) is past.
        let mut cursor = now;
        if let Some(o) = self.open_at(now) {
            out.push((o.opens, o.closes));
        }
        while out.len() < count {
            let Some(o) = self.next_opening(cursor) else {
                break;
            };
            // Windows longer than the gap to the next one overlap it: kept as given.
            out.push((o.opens, o.closes));
            cursor = o.opens;
        }
        out.truncate(count);
        out
    }

    /// The systemd `OnCalendar=` values, one per window, that fire when the windows
    /// open, e.g. `Mon,Tue,Wed,Thu *-*-* 12:00:00 UTC` or `Sat *-*-* 22:30:00
    /// Europe/Paris`; empty when the calendar never opens. Blackouts have no systemd
    /// form: the timer still fires on them and the updater, which checks this calendar
    /// itself, holds.
    pub fn on_calendar(&self) -> Vec<String> {
        let zone = self.zone.iana_name().unwrap_or("UTC");
        let mut out: Vec<String> = Vec::new();
        for w in &self.windows {
            let days = if w.days.contains(&Day::All) {
                String::new()
            } else {
                // In the week's order, each once, whatever order the config lists them in.
                let mut days = w.days.clone();
                days.sort();
                days.dedup();
                let names: Vec<&str> = days.iter().map(|d| d.as_str()).collect();
                format!("{} ", names.join(","))
            };
            let line = format!("{days}*-*-* {}:00 {zone}", w.start);
            if !out.contains(&line) {
                out.push(line);
            }
        }
        out
    }
}

/// The instant a civil time in `zone` names, by the rules of this module: in a gap,
/// the first instant after it (the transition); in a fold, the earlier instant.
fn local_instant(zone: &TimeZone, dt: jiff::civil::DateTime) -> Option<Timestamp> {
    use jiff::tz::AmbiguousOffset;
    match zone.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok(),
        AmbiguousOffset::Gap { before, after } => {
            // dt - after lies before the transition and dt - before after it, so the
            // first transition following dt - after is the one that skipped dt.
            let early = after.to_timestamp(dt).ok()?;
            let late = before.to_timestamp(dt).ok()?;
            Some(
                zone.following(early)
                    .next()
                    .map(|t| t.timestamp())
                    .filter(|&t| t <= late)
                    .unwrap_or(late),
            )
        }
        AmbiguousOffset::Fold { before, after } => {
            let a = before.to_timestamp(dt).ok()?;
            let b = after.to_timestamp(dt).ok()?;
            Some(a.min(b))
        }
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
        let w = Calendar::hourly_utc(&Day::WORKWEEK, 12, HOUR);
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
        let w = Calendar::hourly_utc(&[Day::All], 12, HOUR);
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
        let w = Calendar::hourly_utc(&[Day::All], 23, SignedDuration::from_hours(2));
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
        let w = Calendar::hourly_utc(&Day::WORKWEEK, 23, SignedDuration::from_hours(3));
        assert!(w.is_open(ts("2026-11-20T01:30:00Z")));
        // Sunday 23:00 never opens, so Monday 00:30 is closed.
        assert!(!w.is_open(ts("2026-11-23T00:30:00Z")));
    }

    #[test]
    fn next_open_skips_disallowed_days() {
        let w = Calendar::hourly_utc(&Day::WORKWEEK, 12, HOUR);
        // Friday afternoon: next opening is Monday noon.
        assert_eq!(
            w.next_open(ts("2026-11-20T15:00:00Z")),
            Some(ts("2026-11-23T12:00:00Z"))
        );
        let never = Calendar::hourly_utc(&[], 12, HOUR);
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
        let w = Calendar::hourly_utc(&[Day::Mon, Day::Wed], 22, SignedDuration::from_hours(4));
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
        assert_eq!(w.on_calendar(), ["Mon,Wed *-*-* 22:00:00 UTC"]);
    }

    fn paris(windows: Vec<Recurring>, blackouts: &[&str]) -> Calendar {
        Calendar::new(
            windows,
            time_zone("Europe/Paris").unwrap(),
            blackouts
                .iter()
                .map(|b| Blackout::parse(b).unwrap())
                .collect(),
        )
    }

    fn every_day_at(h: u8, m: u8, hours: i64) -> Recurring {
        Recurring {
            days: vec![Day::All],
            start: StartTime::new(h, m).unwrap(),
            duration: SignedDuration::from_hours(hours),
        }
    }

    #[test]
    fn start_times_parse_strictly() {
        assert_eq!(StartTime::parse("22:30").unwrap().to_string(), "22:30");
        assert_eq!(StartTime::parse("7:05").unwrap().to_string(), "07:05");
        for bad in [
            "24:00", "12:60", "12", "12:5", "-1:00", "12:00:00", " 12:00", "ab:cd", "",
        ] {
            let err = StartTime::parse(bad).unwrap_err().to_string();
            assert!(err.contains("is not a time of day"), "{bad}: {err}");
        }
    }

    #[test]
    fn blackouts_parse_single_dates_and_inclusive_ranges() {
        let b = Blackout::parse("2026-12-24/2027-01-02").unwrap();
        assert!(b.contains("2026-12-24".parse().unwrap()));
        assert!(b.contains("2027-01-02".parse().unwrap()));
        assert!(!b.contains("2027-01-03".parse().unwrap()));
        assert_eq!(b.to_string(), "2026-12-24/2027-01-02");
        assert_eq!(
            Blackout::parse("2026-12-25").unwrap().to_string(),
            "2026-12-25"
        );
        let reversed = Blackout::parse("2027-01-02/2026-12-24").unwrap_err();
        assert_eq!(reversed.problem, "ends before it starts");
        for bad in [
            "2026-02-30",
            "2026-12",
            "12/24/2026",
            "2026-12-24/",
            "20261224",
        ] {
            assert!(Blackout::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_zones_are_refused_with_their_name() {
        let err = time_zone("Europe/Pariss").unwrap_err();
        assert!(
            err.contains("\"Europe/Pariss\" is not an IANA time zone"),
            "{err}"
        );
        assert!(time_zone("America/New_York").is_ok());
    }

    #[test]
    fn a_paris_window_follows_the_local_clock_across_the_seasons() {
        let w = paris(vec![every_day_at(22, 30, 3)], &[]);
        // Winter (UTC+1) and summer (UTC+2).
        assert_eq!(
            w.open_since(ts("2026-01-15T21:40:00Z")),
            Some(ts("2026-01-15T21:30:00Z"))
        );
        assert_eq!(
            w.open_since(ts("2026-07-15T20:40:00Z")),
            Some(ts("2026-07-15T20:30:00Z"))
        );
        assert_eq!(w.on_calendar(), ["*-*-* 22:30:00 Europe/Paris"]);
    }

    #[test]
    fn a_start_in_the_spring_gap_opens_once_when_the_gap_ends() {
        // 2026-03-29 in Paris: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let w = paris(vec![every_day_at(2, 30, 1)], &[]);
        let day = w.upcoming(ts("2026-03-28T12:00:00Z"), 3);
        assert_eq!(
            day[0],
            (ts("2026-03-29T01:00:00Z"), ts("2026-03-29T02:00:00Z"))
        );
        // The day before and the day after open at 02:30 local, once each.
        assert_eq!(day[1].0, ts("2026-03-30T00:30:00Z"));
        assert_eq!(
            w.upcoming(ts("2026-03-27T12:00:00Z"), 1)[0].0,
            ts("2026-03-28T01:30:00Z")
        );
    }

    #[test]
    fn a_start_in_the_autumn_fold_opens_once_at_the_earlier_instant() {
        // 2026-10-25 in Paris: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
        let w = paris(vec![every_day_at(2, 30, 1)], &[]);
        let got = w.upcoming(ts("2026-10-24T12:00:00Z"), 2);
        assert_eq!(
            got[0],
            (ts("2026-10-25T00:30:00Z"), ts("2026-10-25T01:30:00Z"))
        );
        assert_eq!(got[1].0, ts("2026-10-26T01:30:00Z"));
        // At the second 02:30 the window (open one hour of absolute time) has closed.
        assert!(!w.is_open(ts("2026-10-25T01:30:00Z")));
    }

    #[test]
    fn no_window_opens_on_a_blackout_date_and_one_open_closes_when_it_begins() {
        let w = paris(
            vec![every_day_at(22, 0, 4)],
            &["2026-12-24/2026-12-26", "2027-01-01"],
        );
        // Dec 23 22:00 CET opens, and closes at Dec 24 00:00 CET instead of 02:00.
        let got = w.upcoming(ts("2026-12-23T12:00:00Z"), 4);
        let want = [
            ("2026-12-23T21:00:00Z", "2026-12-23T23:00:00Z"),
            ("2026-12-27T21:00:00Z", "2026-12-28T01:00:00Z"),
            ("2026-12-28T21:00:00Z", "2026-12-29T01:00:00Z"),
            ("2026-12-29T21:00:00Z", "2026-12-30T01:00:00Z"),
        ];
        let want: Vec<_> = want.iter().map(|(a, b)| (ts(a), ts(b))).collect();
        assert_eq!(got, want);
        assert!(!w.is_open(ts("2026-12-24T00:30:00Z")));
        assert!(!w.is_open(ts("2026-12-25T21:30:00Z")));
        // Dec 31 opens and is cut at the single blackout date's midnight.
        let new_year = w.open_at(ts("2026-12-31T22:00:00Z")).unwrap();
        assert_eq!(new_year.closes, ts("2026-12-31T23:00:00Z"));
        assert_eq!(
            w.next_open(ts("2026-12-31T23:00:00Z")),
            Some(ts("2027-01-02T21:00:00Z"))
        );
    }

    #[test]
    fn a_long_blackout_is_skipped_not_walked() {
        let w = paris(vec![every_day_at(10, 0, 1)], &["2026-01-01/2029-12-31"]);
        assert_eq!(
            w.next_open(ts("2025-12-31T12:00:00Z")),
            Some(ts("2030-01-01T09:00:00Z"))
        );
    }

    #[test]
    fn several_windows_each_open_on_their_own_days() {
        let w = Calendar::new(
            vec![
                Recurring {
                    days: vec![Day::Mon, Day::Tue],
                    start: StartTime::new(22, 30).unwrap(),
                    duration: SignedDuration::from_hours(3),
                },
                Recurring {
                    days: vec![Day::Sat],
                    start: StartTime::new(6, 0).unwrap(),
                    duration: SignedDuration::from_mins(90),
                },
            ],
            TimeZone::UTC,
            Vec::new(),
        );
        // From Sunday 2026-11-22: Mon 22:30, Tue 22:30, Sat 06:00.
        let got: Vec<_> = w.upcoming(ts("2026-11-22T00:00:00Z"), 3);
        let want = [
            ("2026-11-23T22:30:00Z", "2026-11-24T01:30:00Z"),
            ("2026-11-24T22:30:00Z", "2026-11-25T01:30:00Z"),
            ("2026-11-28T06:00:00Z", "2026-11-28T07:30:00Z"),
        ];
        let want: Vec<_> = want.iter().map(|(a, b)| (ts(a), ts(b))).collect();
        assert_eq!(got, want);
        assert_eq!(w.longest(), SignedDuration::from_hours(3));
        assert_eq!(
            w.on_calendar(),
            ["Mon,Tue *-*-* 22:30:00 UTC", "Sat *-*-* 06:00:00 UTC"]
        );
    }

    #[test]
    fn overlapping_windows_report_the_latest_opening() {
        let w = Calendar::new(
            vec![every_day_at(10, 0, 4), every_day_at(11, 0, 1)],
            TimeZone::UTC,
            Vec::new(),
        );
        let at = w.open_at(ts("2026-11-23T11:30:00Z")).unwrap();
        assert_eq!(
            (at.opens, at.closes),
            (ts("2026-11-23T11:00:00Z"), ts("2026-11-23T12:00:00Z"))
        );
        // After the short one closes the long one still holds the group open.
        assert_eq!(
            w.open_since(ts("2026-11-23T12:30:00Z")),
            Some(ts("2026-11-23T10:00:00Z"))
        );
    }
}
