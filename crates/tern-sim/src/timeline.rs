//! What a simulation produces: the per-group timeline (every transition with the counts
//! at that instant) and a summary per group and overall. Serializes to one JSON object;
//! [`Timeline::render_text`] prints it for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;

use crate::params::Params;

/// The counts of a group at an event: what the reconciler saw in the reports
/// (`initial`, `present`, `up_to_date`, `failed`, `progress`) and the ground truth of
/// the simulation (`updating`: agents between deciding to update and running the new
/// version or rolling back).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counts {
    pub initial: u64,
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    pub updating: u64,
    pub progress: f64,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A rollout was created (at the start, or after a spec change).
    RolloutCreated,
    /// The reconciler says no rollout should exist.
    NoRollout,
    /// A group changed state (`from`, `to`, `reason`).
    State,
    /// Canaries were picked (`detail`: how many).
    CanariesPicked,
    /// Canaries rolled the target back or run it unhealthy (`detail`: how many).
    CanariesFailed,
    /// The canary analysis failed (`detail`: the queries and values).
    AnalysisFailed,
    /// The number of canaries running the target changed (`detail`: `alive/picked`).
    CanariesAlive,
    /// First time every present agent of a started group is up to date.
    AllUpdated,
    /// The group has been in canary or active longer than its `alert_after`.
    Overdue,
    /// Backpressure halted growth: too many initial agents missing.
    ProgressHalted,
    /// The whole rollout is done.
    RolloutDone,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RolloutCreated => "rollout_created",
            Self::NoRollout => "no_rollout",
            Self::State => "state",
            Self::CanariesPicked => "canaries_picked",
            Self::CanariesFailed => "canaries_failed",
            Self::AnalysisFailed => "analysis_failed",
            Self::CanariesAlive => "canaries_alive",
            Self::AllUpdated => "all_updated",
            Self::Overdue => "overdue",
            Self::ProgressHalted => "progress_halted",
            Self::RolloutDone => "rollout_done",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineEvent {
    pub at: Timestamp,
    /// `None` for rollout-wide events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One group from start to end of the simulation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupSummary {
    pub name: String,
    pub state: String,
    pub reason: String,
    /// When the window in which the group first left `unstarted` opened.
    pub window_opened_at: Option<Timestamp>,
    /// When the group first left `unstarted`.
    pub started_at: Option<Timestamp>,
    /// When the group first became `active`.
    pub active_at: Option<Timestamp>,
    /// When the group first became `done`.
    pub done_at: Option<Timestamp>,
    /// When the reports first showed every present agent of the group up to date.
    pub all_updated_at: Option<Timestamp>,
    pub window_to_done_secs: Option<i64>,
    pub window_to_all_updated_secs: Option<i64>,
    /// The counts of the last reconcile.
    pub counts: Counts,
    /// Ground truth at the end: the live agents served by this group, per version.
    pub hosts: BTreeMap<String, u64>,
    /// Successful updates and failed ones (rolled back) of this group's agents.
    pub updates: u64,
    pub rollbacks: u64,
    /// Most agents of the group updating at the same time.
    pub max_updating: u64,
    pub first_update_at: Option<Timestamp>,
    pub last_update_at: Option<Timestamp>,
    /// From the group's start to the first agent beginning its install (download).
    pub started_to_first_install_secs: Option<i64>,
    /// From the group's start to the last of its canaries beginning its install.
    pub started_to_canaries_installing_secs: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Overall {
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
    pub start_version: String,
    pub target_version: String,
    pub rollout_state: String,
    pub rollout_created_at: Option<Timestamp>,
    pub rollout_done_at: Option<Timestamp>,
    /// From the first group's window opening to the whole rollout done.
    pub first_window_to_done_secs: Option<i64>,
    pub agents_initial: u64,
    pub agents_live: u64,
    /// Live agents running the target version, healthy and not rolled back.
    pub on_target: u64,
    /// Live agents reporting a failed update (rolled back or unhealthy).
    pub failed: u64,
    pub joins: u64,
    pub leaves: u64,
    pub updates: u64,
    pub rollbacks: u64,
    pub max_updating: u64,
    pub reconciles: u64,
    /// Discrete events the engine processed (a measure of its work).
    pub sim_events: u64,
}

/// Everything a run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    pub params: Params,
    pub events: Vec<TimelineEvent>,
    pub groups: Vec<GroupSummary>,
    pub overall: Overall,
}

fn when(t: Timestamp) -> String {
    t.strftime("%a %Y-%m-%d %H:%M:%S").to_string()
}

/// `3h07m`, `42m10s`, `55s`, `2d04h`.
pub fn human_secs(secs: i64) -> String {
    let sign = if secs < 0 { "-" } else { "" };
    let s = secs.unsigned_abs();
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    let body = if d > 0 {
        format!("{d}d{h:02}h")
    } else if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{sec}s")
    };
    format!("{sign}{body}")
}

fn opt_secs(s: Option<i64>) -> String {
    s.map_or_else(|| "-".to_string(), human_secs)
}

fn counts_text(c: &Counts) -> String {
    let mut s = format!(
        "present {} up-to-date {} failed {} updating {}",
        c.present, c.up_to_date, c.failed, c.updating
    );
    if c.progress > 0.0 && c.progress < 1.0 {
        let _ = write!(s, " progress {:.0}%", c.progress * 100.0);
    }
    s
}

impl Timeline {
    /// The summary of one group.
    pub fn group(&self, name: &str) -> Option<&GroupSummary> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The events of one group, in order.
    pub fn group_events<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a TimelineEvent> {
        self.events
            .iter()
            .filter(move |e| e.group.as_deref() == Some(name))
    }

    /// A report for people: the events, then one line per group, then the totals.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        self.write_header(&mut out);
        let width = self.group_name_width();
        self.write_events(&mut out, width);
        self.write_groups(&mut out, width);
        self.write_overall(&mut out);
        out
    }

    fn write_header(&self, out: &mut String) {
        let p = &self.params;
        let o = &self.overall;
        let _ = writeln!(
            out,
            "tern-sim: {} agents, seed {}, poll {}, jitter {}, install {}, churn {}/h, {} replica(s)",
            p.agents,
            p.seed,
            human_secs(p.poll_secs),
            p.jitter_secs
                .map_or_else(|| "from find".to_string(), human_secs),
            human_secs(p.install_secs),
            p.churn_per_hour,
            p.replicas,
        );
        if let (Some(s), Some(e)) = (o.start, o.end) {
            let _ = writeln!(
                out,
                "rollout {} -> {}, simulated {} .. {}",
                o.start_version,
                o.target_version,
                when(s),
                when(e)
            );
        }
    }

    /// Wide enough for every group name and for the `group` heading.
    fn group_name_width(&self) -> usize {
        self.groups
            .iter()
            .map(|g| g.name.len())
            .max()
            .unwrap_or(5)
            .max(5)
    }

    fn write_events(&self, out: &mut String, width: usize) {
        let _ = writeln!(out, "\ntimeline:");
        for e in &self.events {
            let group = e.group.as_deref().unwrap_or("*");
            let what = event_text(e);
            let counts = e.counts.as_ref().map(counts_text).unwrap_or_default();
            let line = format!("  {}  {group:<width$}  {what:<44} {counts}", when(e.at));
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }

    fn write_groups(&self, out: &mut String, width: usize) {
        let _ = writeln!(out, "\ngroups:");
        let _ = writeln!(
            out,
            "  {:<width$}  {:<10} {:<16} {:>9} {:>12} {:>14} {:>8} {:>9} {:>8}  hosts",
            "group",
            "state",
            "window opened",
            "started",
            "window→done",
            "window→all-up",
            "updates",
            "rollbacks",
            "max-upd",
        );
        for g in &self.groups {
            write_group_row(out, g, width);
        }
    }

    fn write_overall(&self, out: &mut String) {
        let o = &self.overall;
        let _ = writeln!(
            out,
            "\noverall: rollout {}{}, first window → done {}; agents {} (start {}, +{} joined, -{} left), {} on target, {} failed; {} updates, {} rollbacks, at most {} updating at once; {} reconciles, {} sim events",
            o.rollout_state,
            o.rollout_done_at
                .map(|t| format!(" at {}", when(t)))
                .unwrap_or_default(),
            opt_secs(o.first_window_to_done_secs),
            o.agents_live,
            o.agents_initial,
            o.joins,
            o.leaves,
            o.on_target,
            o.failed,
            o.updates,
            o.rollbacks,
            o.max_updating,
            o.reconciles,
            o.sim_events,
        );
    }
}

/// What happened at one timeline event, without its instant, group or counts.
fn event_text(e: &TimelineEvent) -> String {
    match e.kind {
        EventKind::State => format!(
            "{} -> {} ({})",
            e.from.as_deref().unwrap_or("?"),
            e.to.as_deref().unwrap_or("?"),
            e.reason.as_deref().unwrap_or("")
        ),
        EventKind::RolloutCreated | EventKind::NoRollout => format!(
            "{} {}",
            e.kind.as_str().replace('_', " "),
            e.detail.as_deref().unwrap_or("")
        ),
        k => {
            let mut s = k.as_str().replace('_', " ");
            if let Some(d) = &e.detail {
                let _ = write!(s, " {d}");
            }
            s
        }
    }
}

/// One group's line of the summary table, under the headings `write_groups` prints.
fn write_group_row(out: &mut String, g: &GroupSummary, width: usize) {
    let opened = g
        .window_opened_at
        .map_or_else(|| "-".to_string(), |t| t.strftime("%a %H:%M").to_string());
    let started = match (g.window_opened_at, g.started_at) {
        (Some(w), Some(s)) => format!("+{}", human_secs(s.duration_since(w).as_secs())),
        _ => "-".to_string(),
    };
    let hosts: Vec<String> = g.hosts.iter().map(|(v, n)| format!("{n}x{v}")).collect();
    let _ = writeln!(
        out,
        "  {:<width$}  {:<10} {:<16} {:>9} {:>12} {:>14} {:>8} {:>9} {:>8}  {}",
        g.name,
        g.state,
        opened,
        started,
        opt_secs(g.window_to_done_secs),
        opt_secs(g.window_to_all_updated_secs),
        g.updates,
        g.rollbacks,
        g.max_updating,
        hosts.join(" ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_an_operator_writes_them() {
        assert_eq!(human_secs(55), "55s");
        assert_eq!(human_secs(42 * 60 + 10), "42m10s");
        assert_eq!(human_secs(3 * 3600 + 7 * 60), "3h07m");
        assert_eq!(human_secs(2 * 86_400 + 4 * 3600), "2d04h");
        assert_eq!(human_secs(-60), "-1m00s");
    }
}
