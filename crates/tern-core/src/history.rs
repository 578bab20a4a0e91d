//! A host's history: what changed in what it reports (group, version, a rollback, its
//! health, its updater), as events with the instant a replica heard it. ternd keeps the
//! newest [`MAX_EVENTS`] of each host in the store, with the state they were worked out
//! from, so that any replica (one that restarted, or one a host moved to) continues the
//! same history instead of starting it again.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::wire::{Heartbeat, UpdaterStatus};

/// Events kept per host; older ones are dropped.
pub(crate) const MAX_EVENTS: usize = 50;

/// Strings from a heartbeat are untrusted: an event quotes at most this many characters
/// of each.
const MAX_QUOTED: usize = 64;

/// What a host reports that its history follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostState {
    pub group: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updater_version: Option<String>,
    pub updater_status: UpdaterStatus,
    pub rollback: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    pub healthy: bool,
}

impl HostState {
    pub fn of(hb: &Heartbeat) -> Self {
        Self {
            group: hb.group.clone(),
            version: hb.version.clone(),
            updater_version: hb.updater_version.clone(),
            updater_status: hb.updater_status,
            rollback: hb.rollback,
            failed_version: hb.failed_version.clone(),
            // History records what was seen: unknown health is no unhealthy event.
            healthy: hb.healthy != Some(false),
        }
    }
}

/// What kind of change an event records (stable names: the API and the dashboard filter
/// on them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostEventKind {
    /// The first report any replica kept for this host.
    FirstSeen,
    GroupChanged,
    /// A new agent version, not by a rollback.
    Updated,
    /// The updater reverted a failed update.
    RolledBack,
    Unhealthy,
    Healthy,
    /// Its updater was enabled, disabled or pinned.
    UpdaterStatusChanged,
    /// A new tern-update version.
    UpdaterUpdated,
}

/// One change, as a replica heard it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEvent {
    pub time: Timestamp,
    pub kind: HostEventKind,
    /// One line for people: what changed, from what to what.
    pub message: String,
    /// The replica that heard it.
    pub replica: String,
}

/// What the store keeps for a host: its newest events, oldest first, and the state the
/// last of them was worked out from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostHistory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<HostState>,
    #[serde(default)]
    pub events: Vec<HostEvent>,
}

impl HostHistory {
    /// Adds the events that lead from the last state to `state`; returns whether
    /// anything changed (and so whether the record needs writing).
    pub fn observe(&mut self, state: HostState, time: Timestamp, replica: &str) -> bool {
        if self.last.as_ref() == Some(&state) {
            return false;
        }
        for (kind, message) in changes(self.last.as_ref(), &state) {
            self.events.push(HostEvent {
                time,
                kind,
                message,
                replica: quoted(replica),
            });
        }
        let excess = self.events.len().saturating_sub(MAX_EVENTS);
        self.events.drain(..excess);
        self.last = Some(state);
        true
    }

    /// The events, newest first (how a page shows them).
    pub fn newest_first(&self) -> Vec<HostEvent> {
        self.events.iter().rev().cloned().collect()
    }
}

fn quoted(s: &str) -> String {
    crate::domain::text::excerpt(s, MAX_QUOTED)
}

fn group_name(g: &str) -> String {
    if g.is_empty() {
        "no group".to_string()
    } else {
        format!("group {}", quoted(g))
    }
}

/// The events between two states (`prev` None: the host's first report). Changes of
/// fields that no event names (none today) give no event; the caller still stores the
/// new state.
pub fn changes(prev: Option<&HostState>, next: &HostState) -> Vec<(HostEventKind, String)> {
    let Some(prev) = prev else {
        let mut first = vec![(
            HostEventKind::FirstSeen,
            format!(
                "first report: version {} in {}",
                quoted(&next.version),
                group_name(&next.group)
            ),
        )];
        if next.rollback
            && let Some(failed) = &next.failed_version
        {
            first.push((
                HostEventKind::RolledBack,
                format!(
                    "had rolled back from {} to {}",
                    quoted(failed),
                    quoted(&next.version)
                ),
            ));
        }
        if !next.healthy {
            first.push((HostEventKind::Unhealthy, "the agent is not healthy".into()));
        }
        return first;
    };
    let mut out = Vec::new();
    if prev.group != next.group {
        out.push((
            HostEventKind::GroupChanged,
            format!(
                "moved from {} to {}",
                group_name(&prev.group),
                group_name(&next.group)
            ),
        ));
    }
    let rolled_back = next.rollback
        && next.failed_version.is_some()
        && (!prev.rollback || prev.failed_version != next.failed_version);
    if rolled_back {
        let failed = next.failed_version.as_deref().unwrap_or_default();
        out.push((
            HostEventKind::RolledBack,
            format!(
                "rolled back from {} to {}",
                quoted(failed),
                quoted(&next.version)
            ),
        ));
    } else if prev.version != next.version {
        out.push((
            HostEventKind::Updated,
            format!(
                "version {} → {}",
                quoted(&prev.version),
                quoted(&next.version)
            ),
        ));
    }
    if prev.healthy != next.healthy {
        out.push(if next.healthy {
            (HostEventKind::Healthy, "the agent is healthy again".into())
        } else {
            (HostEventKind::Unhealthy, "the agent is not healthy".into())
        });
    }
    if prev.updater_status != next.updater_status {
        out.push((
            HostEventKind::UpdaterStatusChanged,
            format!(
                "updater {} → {}",
                prev.updater_status.as_str(),
                next.updater_status.as_str()
            ),
        ));
    }
    if prev.updater_version != next.updater_version
        && let Some(v) = &next.updater_version
    {
        out.push((
            HostEventKind::UpdaterUpdated,
            match &prev.updater_version {
                Some(p) => format!("tern-update {} → {}", quoted(p), quoted(v)),
                None => format!("tern-update {}", quoted(v)),
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(group: &str, version: &str) -> HostState {
        HostState {
            group: group.into(),
            version: version.into(),
            updater_version: Some("0.1.0".into()),
            updater_status: UpdaterStatus::Enabled,
            rollback: false,
            failed_version: None,
            healthy: true,
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn kinds(h: &HostHistory) -> Vec<HostEventKind> {
        h.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn an_update_then_a_rollback_then_a_retry() {
        use HostEventKind::*;
        let mut h = HostHistory::default();
        assert!(h.observe(state("dev", "1.0.0"), t(0), "r1"));
        assert!(!h.observe(state("dev", "1.0.0"), t(60), "r1"), "no change");
        assert!(h.observe(state("dev", "1.1.0"), t(120), "r1"));
        let mut back = state("dev", "1.0.0");
        back.rollback = true;
        back.failed_version = Some("1.1.0".into());
        back.healthy = false;
        assert!(h.observe(back.clone(), t(180), "r2"));
        // The same rollback heard again by another replica: nothing new.
        assert!(!h.observe(back.clone(), t(240), "r1"));
        let mut healthy = back.clone();
        healthy.healthy = true;
        assert!(h.observe(healthy, t(300), "r1"));
        assert!(h.observe(state("dev", "1.1.1"), t(360), "r1"));
        assert_eq!(
            kinds(&h),
            [FirstSeen, Updated, RolledBack, Unhealthy, Healthy, Updated]
        );
        assert_eq!(h.events[1].message, "version 1.0.0 → 1.1.0");
        assert_eq!(h.events[2].message, "rolled back from 1.1.0 to 1.0.0");
        assert_eq!(h.events[2].replica, "r2");
        assert_eq!(h.events[2].time, t(180));
        assert_eq!(h.newest_first()[0].message, "version 1.0.0 → 1.1.1");
    }

    #[test]
    fn group_updater_and_status_changes() {
        use HostEventKind::*;
        let mut h = HostHistory::default();
        h.observe(state("", "1.0.0"), t(0), "r1");
        assert_eq!(
            h.events[0].message,
            "first report: version 1.0.0 in no group"
        );
        let mut s = state("prod", "1.0.0");
        s.updater_version = Some("0.2.0".into());
        s.updater_status = UpdaterStatus::Pinned;
        h.observe(s, t(10), "r1");
        assert_eq!(
            kinds(&h),
            [
                FirstSeen,
                GroupChanged,
                UpdaterStatusChanged,
                UpdaterUpdated
            ]
        );
        assert_eq!(h.events[1].message, "moved from no group to group prod");
        assert_eq!(h.events[2].message, "updater enabled → pinned");
        assert_eq!(h.events[3].message, "tern-update 0.1.0 → 0.2.0");
    }

    #[test]
    fn the_history_is_bounded_and_keeps_the_newest() {
        let mut h = HostHistory::default();
        for i in 0..(MAX_EVENTS as i64 + 20) {
            h.observe(state("dev", &format!("1.0.{i}")), t(i), "r1");
        }
        assert_eq!(h.events.len(), MAX_EVENTS);
        let last = MAX_EVENTS as i64 + 19;
        assert_eq!(
            h.events.last().unwrap().message,
            format!("version 1.0.{} → 1.0.{last}", last - 1)
        );
        assert!(h.events.windows(2).all(|w| w[0].time <= w[1].time));
    }

    #[test]
    fn hostile_strings_are_cut_and_cleaned() {
        let mut h = HostHistory::default();
        let long = format!("1.0.0-{}\n\u{1b}[31m", "x".repeat(500));
        h.observe(state("dev", &long), t(0), "r1");
        let m = &h.events[0].message;
        assert!(m.chars().count() < 120, "{m}");
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert!(m.contains('…'));
    }
}
