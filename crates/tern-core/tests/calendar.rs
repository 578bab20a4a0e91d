//! Properties of the window arithmetic across daylight saving transitions: random
//! zones that change their offset, instants near their transitions, random windows
//! and blackouts. Each property checks the calendar against a definition that does
//! not share its code (the local clock read back through jiff, or an enumeration
//! forward from an earlier instant).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use tern_core::resource::GroupConfig;
use tern_core::window::{
    Blackout, Calendar, CalendarSpec, Day, Recurring, StartTime, WindowSpec, time_zone,
};

/// Zones with DST (north and south, transitions at 02:00, at midnight, by 30 minutes)
/// and a few that changed their rules.
const ZONES: &[&str] = &[
    "Europe/Paris",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "America/Havana",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Asia/Tehran",
    "Europe/Chisinau",
];

const DAYS: [Day; 7] = [
    Day::Mon,
    Day::Tue,
    Day::Wed,
    Day::Thu,
    Day::Fri,
    Day::Sat,
    Day::Sun,
];

fn arb_days() -> impl Strategy<Value = Vec<Day>> {
    prop_oneof![
        1 => Just(vec![Day::All]),
        4 => prop::sample::subsequence(DAYS.to_vec(), 1..=7),
    ]
}

fn arb_window() -> impl Strategy<Value = Recurring> {
    (
        arb_days(),
        // Transitions happen at night: weigh the small hours.
        prop_oneof![0u8..4, 0u8..24],
        prop::sample::select(vec![0u8, 15, 30, 45, 59]),
        10i64..=24 * 60,
    )
        .prop_map(|(days, hour, minute, minutes)| Recurring {
            days,
            start: StartTime::new(hour, minute).unwrap(),
            duration: SignedDuration::from_mins(minutes),
        })
}

/// A zone, an instant within four days of one of its transitions from 2025 on, and
/// blackouts around that instant.
fn arb_case() -> impl Strategy<Value = (Calendar, Timestamp)> {
    (
        prop::sample::select(ZONES),
        0usize..8,
        -4 * 86_400i64..4 * 86_400,
        prop::collection::vec(arb_window(), 1..=3),
        prop::collection::vec((-6i64..6, 0i64..4), 0..=2),
    )
        .prop_map(|(zone, nth, offset, windows, blackouts)| {
            let tz = time_zone(zone).unwrap();
            let from: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
            let transition = tz.following(from).nth(nth).map_or(from, |t| t.timestamp());
            let now = transition
                .checked_add(SignedDuration::from_secs(offset))
                .unwrap();
            let today = now.to_zoned(tz.clone()).date();
            let blackouts = blackouts
                .into_iter()
                .map(|(start, len)| {
                    let first = today.checked_add(jiff::Span::new().days(start)).unwrap();
                    Blackout {
                        first,
                        last: first.checked_add(jiff::Span::new().days(len)).unwrap(),
                    }
                })
                .collect();
            (Calendar::new(windows, tz, blackouts), now)
        })
}

fn local(tz: &TimeZone, t: Timestamp) -> DateTime {
    t.to_zoned(tz.clone()).datetime()
}

fn local_date(tz: &TimeZone, t: Timestamp) -> Date {
    t.to_zoned(tz.clone()).date()
}

/// Every opening from three days before `now` to well after it, by walking forward.
fn walk(cal: &Calendar, now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
    let from = now.checked_sub(SignedDuration::from_hours(72)).unwrap();
    cal.upcoming(from, 40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn each_window_opens_once_per_scheduled_day_at_its_local_start((cal, now) in arb_case()) {
        let tz = cal.zone().clone();
        for w in cal.windows() {
            let one = Calendar::new(vec![w.clone()], tz.clone(), cal.blackouts().to_vec());
            let openings = walk(&one, now);
            let mut dates: Vec<Date> = Vec::new();
            for &(opens, closes) in &openings {
                // The scheduled date: the local date of the start (a start in a gap
                // opens at the end of the gap, still on that date).
                let date = local_date(&tz, opens);
                prop_assert!(w.days.iter().any(|d| *d == Day::All
                    || d.as_str() == DAYS[date.weekday().to_monday_zero_offset() as usize].as_str()),
                    "{date} is not one of {:?}", w.days);
                prop_assert!(!dates.contains(&date), "opened twice on {date}");
                dates.push(date);
                // The first instant whose local clock reads the start or later.
                let start = date.to_datetime(jiff::civil::time(
                    w.start.hour() as i8, w.start.minute() as i8, 0, 0));
                prop_assert!(local(&tz, opens) >= start, "{opens} reads {} before {start}", local(&tz, opens));
                for back in [1i64, 1800, 3600, 5400, 7200, 10_800] {
                    let before = opens.checked_sub(SignedDuration::from_secs(back)).unwrap();
                    prop_assert!(local(&tz, before) < start,
                        "{before} already read {} >= {start}: {opens} is not the first", local(&tz, before));
                }
                // Open exactly its duration in absolute time, unless a blackout
                // date begins first (then it closes at that date's first instant).
                let open_for = closes.duration_since(opens);
                prop_assert!(open_for <= w.duration && open_for > SignedDuration::ZERO);
                if open_for < w.duration {
                    let cut = local_date(&tz, closes);
                    prop_assert!(cal.is_blackout(cut), "cut at {closes}, {cut} is no blackout");
                    let just_before = closes.checked_sub(SignedDuration::from_secs(1)).unwrap();
                    prop_assert!(!cal.is_blackout(local_date(&tz, just_before)));
                }
            }
            // Dates are scheduled in order.
            prop_assert!(dates.windows(2).all(|p| p[0] < p[1]));
        }
    }

    #[test]
    fn nothing_opens_or_stays_open_on_a_blackout_date((cal, now) in arb_case()) {
        let tz = cal.zone().clone();
        for (opens, closes) in walk(&cal, now) {
            prop_assert!(!cal.is_blackout(local_date(&tz, opens)), "opens {opens} on a blackout");
            // The last instant it is open is not on a blackout date either.
            let last = closes.checked_sub(SignedDuration::from_nanos(1)).unwrap();
            prop_assert!(!cal.is_blackout(local_date(&tz, last)), "open at {last} on a blackout");
        }
        if cal.is_blackout(local_date(&tz, now)) {
            prop_assert!(!cal.is_open(now));
        }
    }

    #[test]
    fn open_now_and_next_opening_agree_with_the_walk((cal, now) in arb_case()) {
        let openings = walk(&cal, now);
        let containing = openings
            .iter()
            .filter(|(opens, closes)| *opens <= now && now < *closes)
            .map(|(opens, _)| *opens)
            .max();
        prop_assert_eq!(cal.open_since(now), containing);
        let next = cal.next_open(now);
        prop_assert!(next.is_some(), "finitely many blackouts cannot close a calendar for good");
        let next = next.unwrap();
        prop_assert!(next > now);
        prop_assert_eq!(Some(next), openings.iter().map(|(o, _)| *o).find(|o| *o > now));
        // upcoming starts with the open window, then strictly later openings.
        let up = cal.upcoming(now, 5);
        prop_assert_eq!(up.first().map(|(o, _)| *o), Some(containing.unwrap_or(next)));
        prop_assert!(up.windows(2).all(|p| p[0].0 < p[1].0));
        prop_assert!(up.iter().skip(usize::from(containing.is_some())).all(|(o, _)| *o >= now));
    }

    #[test]
    fn the_old_fields_give_the_windows_form_in_utc(
        days in arb_days(),
        hour in 0u8..24,
        hours in 1i64..=24,
        now in 1_700_000_000i64..1_900_000_000,
        zone_named in any::<bool>(),
    ) {
        let now = Timestamp::from_second(now).unwrap();
        let duration = SignedDuration::from_hours(hours);
        let old = Calendar::hourly_utc(&days, hour, duration);
        let new = CalendarSpec {
            windows: vec![WindowSpec {
                days: days.clone(),
                start: StartTime::new(hour, 0).unwrap(),
                duration: None,
            }],
            timezone: None,
            blackouts: Vec::new(),
        }
        .calendar(duration)
        .unwrap();
        // And the old fields with `timezone: UTC`, through the config group.
        let group = GroupConfig {
            name: "g".into(),
            days: days.clone(),
            start_hour: Some(i64::from(hour)),
            timezone: zone_named.then(|| "UTC".to_string()),
            ..GroupConfig::default()
        };
        let via_group = match group.calendar_spec() {
            Some(spec) => spec.calendar(duration).unwrap(),
            None => Calendar::hourly_utc(&group.days, hour, duration),
        };
        for cal in [&new, &via_group] {
            prop_assert_eq!(old.upcoming(now, 12), cal.upcoming(now, 12));
            prop_assert_eq!(old.open_at(now), cal.open_at(now));
            prop_assert_eq!(old.on_calendar(), cal.on_calendar());
        }
    }
}
