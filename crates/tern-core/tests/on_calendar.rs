//! The `OnCalendar=` values tern-core writes for a group's window (seed 001's timer
//! override) fire when tern-core's own windows open: checked with systemd's parser,
//! `systemd-analyze calendar`, which needs no running systemd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use tern_core::window::{Calendar, Day, Recurring, StartTime, time_zone};

/// The next `n` times systemd says `spec` elapses, after the real now.
fn systemd_elapses(spec: &str, n: usize) -> Vec<Timestamp> {
    let out = std::process::Command::new("systemd-analyze")
        .args(["calendar", &format!("--iterations={n}"), spec])
        .env("TZ", "UTC")
        .output()
        .expect("systemd-analyze (Debian's systemd package; `cargo xtask ci` installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "systemd refused {spec:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("Next elapse:").or_else(|| {
                l.strip_prefix("Iter. #")
                    .and_then(|r| r.split_once(':').map(|x| x.1))
            })?;
            // "Mon 2026-11-23 12:00:00 UTC"
            let mut words = rest.split_whitespace().skip(1);
            let (date, time) = (words.next()?, words.next()?);
            Some(format!("{date}T{time}Z").parse::<Timestamp>().unwrap())
        })
        .collect()
}

/// Each exported value against systemd, for `w` (one window per value).
fn check_against_systemd(w: &Calendar) {
    for spec in w.on_calendar() {
        let window = Calendar::new(
            w.windows()
                .iter()
                .filter(|one| {
                    Calendar::new(vec![(*one).clone()], w.zone().clone(), Vec::new()).on_calendar()
                        == [spec.clone()]
                })
                .cloned()
                .collect(),
            w.zone().clone(),
            Vec::new(),
        );
        // A window opening at the very instant between the two reads would shift the
        // sequences by one: read again then.
        let mut tries = 0;
        loop {
            let before = Timestamp::now();
            let systemd = systemd_elapses(&spec, 6);
            let after = Timestamp::now();
            let ours: Vec<Timestamp> = window
                .upcoming(before, 7)
                .into_iter()
                .map(|(open, _)| open)
                .filter(|&open| open > before)
                .take(6)
                .collect();
            let stable = window.next_open(before) == window.next_open(after);
            if stable || tries > 2 {
                assert_eq!(systemd, ours, "{spec}");
                break;
            }
            tries += 1;
        }
    }
}

#[test]
fn systemd_fires_when_the_window_opens() {
    let cases: Vec<(Vec<Day>, u8)> = vec![
        (Day::WORKWEEK.to_vec(), 12),
        (vec![Day::All], 0),
        (vec![Day::Sun, Day::Sat], 23),
        (vec![Day::Fri, Day::Mon, Day::Fri], 7),
        (vec![Day::Wed], 3),
    ];
    for (days, start_hour) in cases {
        let w = Calendar::hourly_utc(&days, start_hour, SignedDuration::from_hours(2));
        assert_eq!(w.on_calendar().len(), 1);
        check_against_systemd(&w);
    }
}

#[test]
fn systemd_fires_when_zoned_windows_open() {
    // Zones with and without DST, minutes past the hour, several windows.
    for zone in [
        "Europe/Paris",
        "America/New_York",
        "Asia/Kolkata",
        "Australia/Sydney",
    ] {
        let w = Calendar::new(
            vec![
                Recurring {
                    days: vec![Day::Mon, Day::Tue],
                    start: StartTime::new(22, 30).unwrap(),
                    duration: SignedDuration::from_hours(3),
                },
                Recurring {
                    days: vec![Day::All],
                    start: StartTime::new(6, 15).unwrap(),
                    duration: SignedDuration::from_hours(1),
                },
            ],
            time_zone(zone).unwrap(),
            Vec::new(),
        );
        let specs = w.on_calendar();
        assert_eq!(
            specs,
            [
                format!("Mon,Tue *-*-* 22:30:00 {zone}"),
                format!("*-*-* 06:15:00 {zone}")
            ]
        );
        check_against_systemd(&w);
    }
}

#[test]
fn a_window_that_never_opens_has_no_calendar() {
    let never = Calendar::hourly_utc(&[], 12, SignedDuration::from_hours(1));
    assert!(never.on_calendar().is_empty());
    assert!(never.upcoming(Timestamp::now(), 5).is_empty());
    let bad_hour = Calendar::hourly_utc(&[Day::All], 24, SignedDuration::from_hours(1));
    assert!(bad_hour.on_calendar().is_empty());
}

/// systemd's elapses of `spec` after `base` (`--base-time`, so the test can sit on a
/// DST change).
fn systemd_elapses_from(spec: &str, base: &str, n: usize) -> Vec<Timestamp> {
    let out = std::process::Command::new("systemd-analyze")
        .args([
            "calendar",
            &format!("--base-time={base}"),
            &format!("--iterations={n}"),
            spec,
        ])
        .env("TZ", "UTC")
        .output()
        .expect("systemd-analyze");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("Next elapse:").or_else(|| {
                l.strip_prefix("Iter. #")
                    .and_then(|r| r.split_once(':').map(|x| x.1))
            })?;
            let mut words = rest.split_whitespace().skip(1);
            let (date, time) = (words.next()?, words.next()?);
            Some(format!("{date}T{time}Z").parse::<Timestamp>().unwrap())
        })
        .collect()
}

/// Across DST changes (docs/rollouts.md): on the fall-back night systemd fires once, at
/// the earlier 02:30, as the window opens; on the spring-forward night, where 02:30
/// does not exist, the window opens at 03:00 but systemd skips the day. A host whose
/// timer follows the exported calendar misses that one window; the next day agrees.
#[test]
fn systemd_and_the_calendar_across_dst_changes() {
    let w = Calendar::new(
        vec![Recurring {
            days: vec![Day::All],
            start: StartTime::new(2, 30).unwrap(),
            duration: SignedDuration::from_hours(1),
        }],
        time_zone("Europe/Paris").unwrap(),
        Vec::new(),
    );
    let spec = &w.on_calendar()[0];
    let ts = |s: &str| s.parse::<Timestamp>().unwrap();
    let opens = |from: &str| -> Vec<Timestamp> {
        w.upcoming(ts(from), 3)
            .into_iter()
            .map(|(o, _)| o)
            .collect()
    };

    let fall = systemd_elapses_from(spec, "2027-10-30 12:00:00 UTC", 3);
    assert_eq!(fall, opens("2027-10-30T12:00:00Z"));
    assert_eq!(
        fall[0],
        ts("2027-10-31T00:30:00Z"),
        "02:30 CEST, the earlier"
    );

    let spring = systemd_elapses_from(spec, "2027-03-27 12:00:00 UTC", 2);
    let ours = opens("2027-03-27T12:00:00Z");
    assert_eq!(
        ours[0],
        ts("2027-03-28T01:00:00Z"),
        "03:00 CEST, when the gap ends"
    );
    assert_eq!(
        spring[0],
        ts("2027-03-29T00:30:00Z"),
        "systemd skips the night"
    );
    assert_eq!(spring[0], ours[1]);
}
