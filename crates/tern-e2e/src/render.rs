//! The demo's live status: the rollout per group (from `ternctl agents status`), what
//! the agent processes really run (from the hosts), and what each `tern-update` did.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::fleet::{Fleet, Step};
use crate::status::{GroupStatus, Status};
use tern_core::resource::{GroupState, Mode};

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-23T10:00:00Z` → `Mon 2026-11-23 10:00 UTC` (other input is returned as is).
pub fn when(rfc3339: &str) -> String {
    let parse = || -> Option<String> {
        let (date, time) = rfc3339.split_once('T')?;
        let mut p = date.splitn(3, '-');
        let y: i64 = p.next()?.parse().ok()?;
        let m: u32 = p.next()?.parse().ok()?;
        let d: u32 = p.next()?.parse().ok()?;
        let days = days_from_civil(y, m, d);
        debug_assert_eq!(civil(days), (y, m, d));
        let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
        Some(format!("{wd} {date} {} UTC", time.get(..5)?))
    };
    parse().unwrap_or_else(|| rfc3339.to_string())
}

/// The state column, in the words of the seeds' `agent status`.
pub fn state_cell(g: &GroupStatus) -> String {
    match g.state {
        GroupState::Unstarted => "not started".into(),
        GroupState::Canary => format!("canary ({})", g.canary_summary()),
        GroupState::Active => "in progress".into(),
        GroupState::Done => "done".into(),
        GroupState::Rolledback => "rolled back".into(),
    }
}

/// What the agents of `group` really run: `3× 1.1.0`, `2× 1.1.0, 1 down`.
fn running_cell(fleet: &Fleet, group: &str, catch_all: bool, groups: &[String]) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    let mut down = 0;
    for h in &fleet.hosts {
        let mine = h.group == group || (catch_all && !groups.contains(&h.group));
        if !mine {
            continue;
        }
        match h.running_version() {
            Some(v) => *by.entry(v).or_default() += 1,
            None => down += 1,
        }
    }
    let mut parts: Vec<String> = by.iter().map(|(v, n)| format!("{n}× {v}")).collect();
    if down > 0 {
        parts.push(format!("{down} down"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn pad(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        format!("{s} ")
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// The status table: one row per group, its canaries under it.
pub fn table(fleet: &Fleet, status: &Status) -> String {
    let mut out = String::new();
    let names: Vec<String> = status.groups.iter().map(|g| g.name.clone()).collect();
    let rollout = match &status.rollout {
        Some(r) => format!(
            "rollout {} → {} ({}, {})",
            r.spec.start_version,
            r.spec.target_version,
            if r.status.groups.is_empty() {
                "no groups"
            } else {
                r.status.state.as_str()
            },
            r.spec.schedule.as_str()
        ),
        None => "no rollout".into(),
    };
    let mode = if status.modes.mode == Mode::Enabled {
        String::new()
    } else {
        format!(", updates {}", status.modes.mode.as_str())
    };
    let _ = writeln!(
        out,
        "── {} ── {rollout}{mode}",
        when(&status.now.to_string())
    );
    // The state column grows to fit `canary (0/2 ok, 2 failed)` when it is there.
    let state_width = status
        .groups
        .iter()
        .map(|g| state_cell(g).chars().count() + 1)
        .fold(16, usize::max);
    let w = [10, state_width, 11, 8, 20];
    let _ = writeln!(
        out,
        "   {}{}{}{}{}reason",
        pad("group", w[0]),
        pad("state", w[1]),
        pad("on target", w[2]),
        pad("failed", w[3]),
        pad("agents running", w[4]),
    );
    let last = status.groups.len().saturating_sub(1);
    for (i, g) in status.groups.iter().enumerate() {
        let _ = writeln!(
            out,
            "   {}{}{}{}{}{}",
            pad(&g.name, w[0]),
            pad(&state_cell(g), w[1]),
            pad(&format!("{}/{}", g.up_to_date, g.present), w[2]),
            pad(&g.failed.to_string(), w[3]),
            pad(&running_cell(fleet, &g.name, i == last, &names), w[4]),
            g.last_update_reason
        );
        if !g.canaries.is_empty() && matches!(g.state, GroupState::Canary | GroupState::Active) {
            let list: Vec<String> = g
                .canaries
                .iter()
                .map(|c| {
                    let who = fleet
                        .host_by_updater_id(&c.updater_id)
                        .map(|h| h.name.clone())
                        .unwrap_or_else(|| c.updater_id.chars().take(8).collect());
                    let mark = match (c.success, c.failed) {
                        (true, _) => "✓",
                        (false, true) => "✗ failed",
                        (false, false) => "…",
                    };
                    format!("{who} {mark}")
                })
                .collect();
            let _ = writeln!(out, "   {}canaries: {}", pad("", w[0]), list.join(", "));
        }
    }
    for a in &status.alerts {
        let _ = writeln!(out, "   ! alert {}: {}", a.kind, a.message);
    }
    if status.groups.is_empty() && status.rollout.is_some() {
        let _ = writeln!(
            out,
            "   every agent: {}/{} on target, {} failed",
            status.up_to_date, status.present, status.failed
        );
    }
    out
}

/// `updating 1.0.0 -> 1.1.0` in tern-update's log → ("1.0.0", "1.1.0").
fn switched(stderr: &str) -> Option<(String, String)> {
    let line = stderr.lines().rev().find(|l| l.contains("updating "))?;
    let rest = &line[line.find("updating ")? + "updating ".len()..];
    let (from, to) = rest.split_once(" -> ")?;
    Some((from.trim().to_string(), to.trim().to_string()))
}

/// What the hosts' `tern-update update` did in a step, one line per kind of outcome:
/// `updated dev-1, dev-2: 1.0.0 → 1.1.0`, and one line per failure with its message.
pub fn actions(step: &Step) -> String {
    let mut updated: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut out = String::new();
    for (host, o) in &step.runs {
        if !o.ok() {
            let _ = writeln!(out, "   ✗ {host}: {}", o.message());
        } else if let Some(k) = switched(&o.stderr) {
            updated.entry(k).or_default().push(host.clone());
        }
    }
    let mut lines = String::new();
    for ((from, to), hosts) in updated {
        let _ = writeln!(lines, "   ✓ {}: {from} → {to}, healthy", hosts.join(", "));
    }
    lines + &out
}
