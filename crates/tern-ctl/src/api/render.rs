//! Text rendering of ternd's answers: the seeds' `agents status` table and friends.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use tern_core::api::{GroupStatus, ReportResponse, StatusResponse};
use tern_core::resource::{GroupState, Schedule};

use crate::text::plural;

/// Columns separated by three spaces, each as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let pad = widths[i] - c.chars().count();
                s.push_str(c);
                s.push_str(&" ".repeat(pad + 3));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    );
    let _ = writeln!(
        out,
        "{}",
        line(widths.iter().map(|w| "-".repeat(*w)).collect())
    );
    for row in rows {
        let _ = writeln!(out, "{}", line(row.clone()));
    }
    out
}

pub fn time(t: Timestamp) -> String {
    t.to_zoned(TimeZone::UTC)
        .strftime("%Y-%m-%d %H:%M")
        .to_string()
}

fn day_time(t: Timestamp) -> String {
    t.to_zoned(TimeZone::UTC).strftime("%a %H:%M").to_string()
}

/// The state column: `not started`, `canary (n/m ok[, k failed])`, `in progress (53%)`, `complete`,
/// `rolledback`.
pub fn group_state(g: &GroupStatus) -> String {
    match g.state {
        GroupState::Unstarted => "not started".to_string(),
        GroupState::Canary => format!("canary ({})", g.canary_summary()),
        GroupState::Active => {
            let base = g.present.max(g.initial);
            let pct = (g.up_to_date.min(base) * 100)
                .checked_div(base)
                .unwrap_or(0);
            format!("in progress ({pct}%)")
        }
        GroupState::Done => "complete".to_string(),
        GroupState::Rolledback => "rolledback".to_string(),
    }
}

/// The mode in force, where it comes from when the two resources differ, and why
/// nothing moves when it does not.
fn mode_line(s: &StatusResponse) -> String {
    let m = &s.modes;
    let own = |mode: Option<tern_core::resource::Mode>| mode.map_or("unset", |m| m.as_str());
    let mut line = if m.config_mode == m.version_mode {
        m.mode.as_str().to_string()
    } else {
        format!(
            "{} (autoupdate_config: {}, autoupdate_version: {})",
            m.mode.as_str(),
            own(m.config_mode),
            own(m.version_mode)
        )
    };
    if let Some(why) = &m.why_stopped {
        line.push_str(&format!("\n  {why}"));
    }
    line
}

pub fn status(s: &StatusResponse) -> String {
    let mut out = String::new();
    let Some(r) = &s.rollout else {
        let _ = writeln!(out, "No rollout.");
        if let Some(why) = &s.no_rollout_reason {
            let _ = writeln!(out, "{why}");
        }
        let _ = writeln!(out, "Status: {}", mode_line(s));
        return out;
    };
    if let Some(t) = r.status.start_time {
        let _ = writeln!(out, "Rollout plan created the {} UTC", time(t));
    }
    let _ = writeln!(out, "Previous version: {}", r.spec.start_version);
    let _ = writeln!(out, "New version: {}", r.spec.target_version);
    let _ = writeln!(out, "Status: {}", mode_line(s));
    let _ = writeln!(
        out,
        "Strategy: {}, schedule {}",
        r.spec.strategy.as_str(),
        r.spec.schedule.as_str()
    );
    let _ = writeln!(out, "Rollout state: {}", r.status.state.as_str());
    let _ = writeln!(out);
    if r.spec.schedule == Schedule::Immediate || s.groups.is_empty() {
        let _ = writeln!(
            out,
            "Immediate schedule: every agent updates to {} now.",
            r.spec.target_version
        );
        let _ = writeln!(
            out,
            "Connected agents: {}   Up-to-date agents: {}   Failed updates: {}",
            s.present, s.up_to_date, s.failed
        );
    } else {
        out.push_str(&group_table(&s.groups));
        out.push_str(&why(&s.groups));
        out.push_str(&canaries(&s.groups));
        out.push_str(&pending(&s.groups));
        out.push_str(&coverage(&s.groups));
        out.push_str(&topology(&s.groups));
    }
    if let Some(outdated) = &s.config_outdated {
        let _ = writeln!(out, "\nNote: {outdated}");
    }
    if !s.alerts.is_empty() {
        let _ = writeln!(out, "\nAlerts:");
        for a in &s.alerts {
            let _ = writeln!(
                out,
                "  ! {} (since {} UTC): {}",
                a.kind,
                time(a.since),
                a.message
            );
        }
    }
    if let Some(n) = &s.next_steps {
        let _ = writeln!(out, "\n{}:", n.title);
        for step in &n.steps {
            let _ = writeln!(out, "  - {step}");
        }
    }
    if !s.omitted.is_empty() {
        let _ = writeln!(out, "\nNot counted:");
        for o in &s.omitted {
            let _ = writeln!(out, "  {}: {}", plural(o.count, "agent"), o.reason);
        }
    }
    out
}

/// The seeds' group table, with each group's window, and the catch-all footnote.
fn group_table(groups: &[GroupStatus]) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let window = match (g.window_open_since, g.window_closes, g.next_window) {
                (Some(_), Some(close), _) => format!("open until {}", day_time(close)),
                (_, _, Some(next)) => format!("next {}", day_time(next)),
                _ => "never".to_string(),
            };
            vec![
                if g.catch_all {
                    format!("{}*", g.name)
                } else {
                    g.name.clone()
                },
                group_state(g),
                g.start_time.map(time).unwrap_or_default(),
                g.last_update_reason.clone(),
                g.present.to_string(),
                g.up_to_date.to_string(),
                failed_updates(g),
                window,
            ]
        })
        .collect();
    let mut out = table(
        &[
            "Group Name",
            "Status",
            "Update Start Time",
            "Reason",
            "Connected Agents",
            "Up-to-date agents",
            "Failed updates",
            "Window (UTC)",
        ],
        &rows,
    );
    if let Some(last) = groups.iter().find(|g| g.catch_all) {
        let _ = writeln!(
            out,
            "\n* {} is the catch-all group: it also serves agents with no group or an unknown group.",
            last.name
        );
    }
    out
}

/// Each group's reason in a sentence (what the dashboard shows beside the code), and
/// when an unstarted group starts.
fn why(groups: &[GroupStatus]) -> String {
    let mut out = String::new();
    for g in groups {
        let mut said = Vec::new();
        if let Some(text) = &g.last_update_reason_text {
            said.push(text.clone());
        }
        if let Some(starts) = &g.starts {
            said.push(starts.clone());
        }
        if !said.is_empty() {
            if out.is_empty() {
                let _ = writeln!(out, "\nWhy:");
            }
            let _ = writeln!(
                out,
                "  {} ({}): {}",
                g.name,
                g.last_update_reason,
                said.join("; ")
            );
        }
    }
    out
}

/// The hosts of each moving group not yet on the target, with their next run.
fn pending(groups: &[GroupStatus]) -> String {
    let mut out = String::new();
    for g in groups {
        let Some(p) = g.pending.as_ref().filter(|p| p.total > 0) else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nPending hosts of {} ({} not on the target yet among the hosts of replica {}):",
            g.name, p.total, p.replica
        );
        for line in p.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// Failed updates, and the hosts that could not even install the target (`3, 2 could
/// not install: 2 not_signed`).
fn failed_updates(g: &GroupStatus) -> String {
    let refused: u64 = g.refused.values().sum();
    if refused == 0 {
        return g.failed.to_string();
    }
    let kinds: Vec<String> = g.refused.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!(
        "{}, {refused} could not install: {}",
        g.failed,
        kinds.join(", ")
    )
}

/// What the canaries of each group in canary or active cover of its `canary_cover`.
fn coverage(groups: &[GroupStatus]) -> String {
    let mut out = String::new();
    for g in groups.iter().filter(|g| {
        matches!(g.state, GroupState::Canary | GroupState::Active) && !g.canary_coverage.is_empty()
    }) {
        let _ = writeln!(out, "\nWhat the canaries of {} cover:", g.name);
        for c in &g.canary_coverage {
            let _ = writeln!(out, "  {}", c.summary());
        }
    }
    out
}

/// Each group's topology limits: per label value, hosts that may update now of those
/// not yet on the target.
fn topology(groups: &[GroupStatus]) -> String {
    let mut out = String::new();
    for g in groups.iter().filter(|g| !g.topology.is_empty()) {
        let _ = writeln!(
            out,
            "\nTopology limits of {} (may update now/behind):",
            g.name
        );
        for t in &g.topology {
            let _ = writeln!(out, "  {}", t.summary());
        }
    }
    out
}

/// The canaries of each group in canary, and whether they run the new version; for a
/// group that has picked none yet, why it waits (no candidate yet, and who is one
/// when).
fn canaries(groups: &[GroupStatus]) -> String {
    let mut out = String::new();
    for g in groups.iter().filter(|g| g.state == GroupState::Canary) {
        if let Some(wait) = g.canary_wait() {
            let _ = writeln!(out, "\nCanaries of {}: {wait}", g.name);
        }
    }
    for g in groups
        .iter()
        .filter(|g| g.state == GroupState::Canary && !g.canaries.is_empty())
    {
        let _ = writeln!(out, "\nCanaries of {}:", g.name);
        for c in &g.canaries {
            let mut who = vec![c.updater_id.as_str()];
            who.extend(
                [c.hostname.as_str(), c.host_id.as_str()]
                    .into_iter()
                    .filter(|s| !s.is_empty()),
            );
            let _ = writeln!(
                out,
                "  {}: {}",
                who.join(" "),
                if c.success {
                    "runs the new version"
                } else if c.failed {
                    "FAILED: rolled the new version back or runs it unhealthy"
                } else {
                    "waiting for the new version"
                }
            );
            if c.failed && !c.reason.is_empty() {
                let _ = writeln!(out, "    why: {}", c.reason);
            }
        }
    }
    out
}

/// The rollouts' history: per rollout, newest first, its events (oldest first) and
/// where each group's hosts stand at its last sample.
pub(crate) fn history(h: &tern_core::rollout_history::HistoryResponse) -> String {
    use tern_core::rollout_history::kind;
    let mut out = String::new();
    if h.rollouts.is_empty() {
        out.push_str("No rollout recorded yet.\n");
    }
    for r in &h.rollouts {
        let rec = &r.rollout;
        let _ = write!(
            out,
            "Rollout {} → {}, started {}",
            rec.identity.start_version,
            rec.identity.target_version,
            stamp(rec.created)
        );
        match (&rec.ended, &rec.replaced_by) {
            (Some(at), Some(by)) => {
                let _ = write!(
                    out,
                    ", replaced {} by {} → {}",
                    stamp(*at),
                    by.start_version,
                    by.target_version
                );
            }
            (Some(at), None) => {
                let _ = write!(out, ", ended {}", stamp(*at));
            }
            _ => out.push_str(" (current)"),
        }
        out.push('\n');
        for e in &r.events {
            let what = match e.kind.as_str() {
                kind::GROUP => "group",
                kind::CANARY_PICKED | kind::CANARY_HEALTHY | kind::CANARY_FAILED => "canary",
                kind::ALERT_RAISED => "ALERT",
                kind::ALERT_CLEARED => "alert",
                kind::ACTION => "action",
                _ => "rollout",
            };
            let _ = writeln!(out, "  {}  {what:<7} {}", stamp(e.time), e.message);
        }
        for g in &rec.groups {
            if let Some(s) = r.progress.iter().rev().find(|s| &s.group == g) {
                let _ = writeln!(
                    out,
                    "  {g}: {} on target, {} failed, {} pending (at {})",
                    s.on_target,
                    s.failed,
                    s.pending,
                    stamp(s.time)
                );
            }
        }
        out.push('\n');
    }
    out
}

/// `2026-11-23 10:05:00 UTC`.
fn stamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// Why each host that says so failed its last update: the error, then the agent's
/// last output (`inventory ls` prints it under its table).
pub(crate) fn update_failures(agents: &[tern_core::api::InventoryEntry]) -> String {
    let mut out = String::new();
    for a in agents {
        let Some(f) = &a.update_failure else {
            continue;
        };
        if out.is_empty() {
            out.push_str("\nWhy hosts failed their last update:\n");
        }
        let who = if a.hostname.is_empty() {
            a.updater_id.clone()
        } else {
            format!("{} {}", a.updater_id, a.hostname)
        };
        let _ = writeln!(out, "  {who}: {}", f.error);
        if !f.agent_output.is_empty() {
            let _ = writeln!(out, "    the agent's last output: {}", f.agent_output);
        }
    }
    out
}

fn group_label(g: &str) -> String {
    if g.is_empty() {
        "(no group)".to_string()
    } else {
        g.to_string()
    }
}

pub fn report(r: &ReportResponse) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Agents reported at {} UTC by {}{}",
        time(r.now),
        plural(r.replicas.len() as u64, "replica"),
        if r.replicas.is_empty() {
            String::new()
        } else {
            format!(": {}", r.replicas.join(", "))
        }
    );
    let _ = writeln!(out);
    if r.groups.is_empty() {
        let _ = writeln!(out, "No agent counted.");
    } else {
        // The rollout's order, then the groups it lacks (what ternd sends in `order`).
        let groups: Vec<&String> = r
            .order
            .iter()
            .filter(|g| r.groups.contains_key(*g))
            .chain(r.groups.keys().filter(|g| !r.order.contains(g)))
            .collect();
        let versions: BTreeSet<&String> =
            r.groups.values().flat_map(|g| g.versions.keys()).collect();
        let mut header: Vec<String> = vec!["Version".to_string()];
        header.extend(groups.iter().map(|g| group_label(g)));
        header.push("Total".to_string());
        let mut rows = Vec::new();
        for v in &versions {
            let mut row = vec![(*v).clone()];
            let mut total = 0;
            for g in &groups {
                let n = r.groups[*g].versions.get(*v).copied().unwrap_or(0);
                total += n;
                row.push(n.to_string());
            }
            row.push(total.to_string());
            rows.push(row);
        }
        let mut totals = vec!["Total".to_string()];
        totals.extend(groups.iter().map(|g| r.groups[*g].total.to_string()));
        totals.push(r.total.to_string());
        rows.push(totals);
        let mut failed = vec!["Failed".to_string()];
        failed.extend(groups.iter().map(|g| r.groups[*g].failed.to_string()));
        failed.push(r.groups.values().map(|g| g.failed).sum::<u64>().to_string());
        rows.push(failed);
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        out.push_str(&table(&header, &rows));
    }
    if !r.omitted.is_empty() {
        let _ = writeln!(out, "\nOmitted from the report:");
        for o in &r.omitted {
            let _ = writeln!(out, "  {}: {}", plural(o.count, "agent"), o.reason);
        }
    }
    out.push_str(&unknown_groups(&r.unknown_groups));
    out
}

/// The groups agents present that the rollout lacks (typos?), and who serves them.
pub fn unknown_groups(unknown: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    if !unknown.is_empty() {
        let _ = writeln!(
            out,
            "\nUnknown groups (not in the rollout; the catch-all group serves them):"
        );
        for (group, served_by) in unknown {
            let _ = writeln!(out, "  {group:?} → {served_by}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::resource::Canary;

    fn g(state: GroupState) -> GroupStatus {
        GroupStatus {
            name: "dev".into(),
            state,
            catch_all: false,
            start_time: None,
            last_update_reason: String::new(),
            last_update_reason_text: None,
            last_update_time: None,
            present: 20,
            up_to_date: 10,
            failed: 0,
            refused: Default::default(),
            initial: 19,
            progress: 0.0,
            canary_count: 2,
            canaries: vec![],
            canary_coverage: vec![],
            window_open_since: None,
            window_closes: None,
            next_window: None,
            topology: vec![],
            eligible_canaries: None,
            canary_eligible: None,
            canary_wait: None,
            starts_at: None,
            starts: None,
            pending: None,
        }
    }

    #[test]
    fn a_failed_canary_says_why() {
        let mut c = g(GroupState::Canary);
        c.canaries = vec![tern_core::resource::Canary {
            updater_id: "u1".into(),
            hostname: "host-a".into(),
            failed: true,
            reason: "update to 1.2.0 failed: the agent is not running (5 checks in a row)".into(),
            ..Default::default()
        }];
        let out = canaries(&[c]);
        assert!(
            out.contains("  u1 host-a: FAILED: rolled the new version back or runs it unhealthy\n    why: update to 1.2.0 failed: the agent is not running (5 checks in a row)\n"),
            "{out}"
        );
    }

    #[test]
    fn a_group_waiting_for_canaries_says_who_is_eligible_when() {
        let mut c = g(GroupState::Canary);
        c.eligible_canaries = Some(0);
        c.canary_eligible = Some(tern_core::resource::CanaryEligible {
            updater_id: "u1".into(),
            hostname: "host-a".into(),
            at: "2026-11-23T09:53:00Z".parse().unwrap(),
        });
        let out = canaries(&[c]);
        assert!(
            out.contains("Canaries of dev: 0 eligible canaries; host-a eligible at 09:53 UTC"),
            "{out}"
        );
    }

    #[test]
    fn canary_coverage_shows_while_it_matters() {
        use tern_core::resource::CanaryCoverage;
        let mut c = g(GroupState::Canary);
        c.canary_coverage = vec![CanaryCoverage {
            attribute: "arch".into(),
            covered: vec!["amd64".into()],
            missed: vec!["arm64".into(), "".into()],
        }];
        assert_eq!(
            coverage(&[c.clone()]),
            "\nWhat the canaries of dev cover:\n  arch: covers amd64; misses arm64, (not said)\n"
        );
        c.state = GroupState::Done;
        assert_eq!(coverage(&[c]), "");
    }

    #[test]
    fn topology_limits_show_each_value_and_what_waits() {
        use std::collections::BTreeMap;
        use tern_core::api::{TopologyStatus, TopologyValueStatus};
        let mut a = g(GroupState::Active);
        assert_eq!(topology(&[a.clone()]), "");
        a.topology = vec![TopologyStatus {
            key: "zone".into(),
            max_in_flight: 2,
            values: BTreeMap::from([
                (
                    "".into(),
                    TopologyValueStatus {
                        behind: 1,
                        admitted: 1,
                    },
                ),
                (
                    "eu-1".into(),
                    TopologyValueStatus {
                        behind: 5,
                        admitted: 2,
                    },
                ),
            ]),
            untracked_values: 3,
        }];
        assert_eq!(
            topology(&[a]),
            "\nTopology limits of dev (may update now/behind):\n  zone, at most 2 at once: (no label) 1/1, eu-1 2/5; 3 more values wait for these to finish\n"
        );
    }

    #[test]
    fn state_column_reads_like_the_seeds() {
        assert_eq!(group_state(&g(GroupState::Unstarted)), "not started");
        assert_eq!(group_state(&g(GroupState::Active)), "in progress (50%)");
        assert_eq!(group_state(&g(GroupState::Done)), "complete");
        assert_eq!(group_state(&g(GroupState::Rolledback)), "rolledback");
        let mut c = g(GroupState::Canary);
        assert_eq!(group_state(&c), "canary (0/2 ok)");
        c.canaries = vec![
            Canary {
                updater_id: "a".into(),
                success: true,
                ..Canary::default()
            },
            Canary::default(),
        ];
        assert_eq!(group_state(&c), "canary (1/2 ok)");
        c.canaries[1].failed = true;
        assert_eq!(group_state(&c), "canary (1/2 ok, 1 failed)");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "Long header"], &[vec!["xyz".into(), "1".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "A     Long header");
        assert_eq!(lines[1], "---   -----------");
        assert_eq!(lines[2], "xyz   1");
    }
}
