//! A rollout's history: what changed between two stored copies of the rollout
//! ([`changes`]: group transitions with their reasons, canary results, alerts raised
//! and cleared, the mode, a rollout replaced by the next), each group's progress over
//! time ([`Sample`]), and the shapes ternd keeps and answers (`GET /v1/history`).
//! Worked out from the rollout alone, so that every writer of it (the reconcile, a
//! transition, an `apply`) is seen the same way; who asked is recorded apart
//! ([`Event::action`]).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::resource::{AutoUpdateAgentRollout, RolloutGroup};

/// Rollouts the history keeps: the newest, with every event each holds.
pub const MAX_ROLLOUTS: usize = 20;
/// Records (one per write of the rollout that changed something, one per action) kept
/// per rollout ([`to_prune`]).
pub const MAX_RECORDS: usize = 1000;
/// The most bytes of an event's message (a canary's reason, an alert's message).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Which rollout: its versions and when it started. Two stored copies with the same
/// identity are the same rollout; a `new-rollout` (or a renewal) makes another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub start_version: String,
    pub target_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
}

impl Identity {
    pub fn of(r: &AutoUpdateAgentRollout) -> Self {
        Self {
            start_version: r.spec.start_version.to_string(),
            target_version: r.spec.target_version.to_string(),
            start_time: r.status.start_time,
        }
    }
}

/// One rollout in the history: who it is, when it was first and last seen, and what
/// replaced it (when one did).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The history's key for it (sorts oldest first).
    pub id: String,
    #[serde(flatten)]
    pub identity: Identity,
    /// The groups, in rollout order.
    #[serde(default)]
    pub groups: Vec<String>,
    pub created: Timestamp,
    /// When it stopped being the stored rollout: replaced by `replaced_by`, or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<Identity>,
}

/// What an event is about.
pub mod kind {
    /// A rollout was made (by `new-rollout`, an `apply`, a renewal, the first reconcile).
    pub const ROLLOUT_CREATED: &str = "rollout_created";
    /// Another rollout took its place (`new-rollout`), or it was deleted.
    pub const ROLLOUT_REPLACED: &str = "rollout_replaced";
    pub const ROLLOUT_DELETED: &str = "rollout_deleted";
    /// `spec.autoupdate_mode` changed (suspend, resume).
    pub const MODE: &str = "mode";
    /// A group moved from one state to another, with the reason it gave.
    pub const GROUP: &str = "group";
    pub const CANARY_PICKED: &str = "canary_picked";
    pub const CANARY_HEALTHY: &str = "canary_healthy";
    pub const CANARY_FAILED: &str = "canary_failed";
    pub const ALERT_RAISED: &str = "alert_raised";
    pub const ALERT_CLEARED: &str = "alert_cleared";
    /// Someone asked for a change (an admin write that was accepted): who, and what.
    pub const ACTION: &str = "action";
}

/// One event of a rollout's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub time: Timestamp,
    /// One of [`kind`].
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A group's state before and after; a canary's updater_id; an alert's kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub to: String,
    /// The reason code the group gave.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// One line for people, cleaned, at most [`MAX_MESSAGE_BYTES`].
    pub message: String,
    /// Who asked (an action): the principal, or the token id when it has none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub who: String,
}

impl Event {
    fn new(time: Timestamp, kind: &str, group: Option<&str>, message: String) -> Self {
        Self {
            time,
            kind: kind.to_string(),
            group: group.map(str::to_string),
            message: crate::domain::text::clean(&message, MAX_MESSAGE_BYTES),
            ..Self::default()
        }
    }

    /// An accepted admin write: `who` (role) `method path`.
    pub fn action(time: Timestamp, who: &str, role: &str, method: &str, path: &str) -> Self {
        let mut e = Self::new(
            time,
            kind::ACTION,
            None,
            format!("{who} ({role}): {method} {path}"),
        );
        e.who = crate::domain::text::clean(who, 256);
        e
    }
}

/// One group's hosts at one time, for the progress chart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub time: Timestamp,
    pub group: String,
    /// On the target.
    pub on_target: u64,
    pub failed: u64,
    /// Present and neither on the target nor failed.
    pub pending: u64,
}

impl Sample {
    fn of(time: Timestamp, g: &RolloutGroup) -> Self {
        Self {
            time,
            group: g.name.clone(),
            on_target: g.up_to_date_count,
            failed: g.failed_count,
            pending: g
                .present_count
                .saturating_sub(g.up_to_date_count)
                .saturating_sub(g.failed_count),
        }
    }

    fn same_counts(&self, other: &Self) -> bool {
        (self.on_target, self.failed, self.pending)
            == (other.on_target, other.failed, other.pending)
    }
}

/// What one write of the rollout changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The rollout the events and samples belong to.
    pub rollout: Identity,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
}

/// What changed from `before` to `after` (the rollout as stored before and after one
/// write, `None` when there was none), at `now`: the changes of the rollout that was
/// stored before when another replaced it (its end), then those of the one stored now.
pub fn changes(
    before: Option<&AutoUpdateAgentRollout>,
    after: Option<&AutoUpdateAgentRollout>,
    now: Timestamp,
) -> Vec<Change> {
    let mut out = Vec::new();
    match (before, after) {
        (None, None) => {}
        (Some(b), None) => out.push(Change {
            rollout: Identity::of(b),
            events: vec![Event::new(
                now,
                kind::ROLLOUT_DELETED,
                None,
                format!(
                    "rollout {} → {} deleted",
                    b.spec.start_version, b.spec.target_version
                ),
            )],
            samples: Vec::new(),
        }),
        (Some(b), Some(a)) if Identity::of(a) == Identity::of(b) => {
            let c = Change {
                rollout: Identity::of(a),
                events: same_rollout(b, a, now),
                samples: a
                    .status
                    .groups
                    .iter()
                    .map(|g| Sample::of(now, g))
                    .filter(|s| {
                        b.status
                            .groups
                            .iter()
                            .find(|g| g.name == s.group)
                            .is_none_or(|g| !Sample::of(now, g).same_counts(s))
                    })
                    .collect(),
            };
            if !c.events.is_empty() || !c.samples.is_empty() {
                out.push(c);
            }
        }
        (b, Some(a)) => {
            if let Some(b) = b {
                out.push(Change {
                    rollout: Identity::of(b),
                    events: vec![Event::new(
                        now,
                        kind::ROLLOUT_REPLACED,
                        None,
                        format!(
                            "replaced by the rollout {} → {}",
                            a.spec.start_version, a.spec.target_version
                        ),
                    )],
                    samples: Vec::new(),
                });
            }
            let created = Event::new(
                now,
                kind::ROLLOUT_CREATED,
                None,
                format!(
                    "rollout {} → {} created ({} groups: {})",
                    a.spec.start_version,
                    a.spec.target_version,
                    a.status.groups.len(),
                    a.status
                        .groups
                        .iter()
                        .map(|g| g.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            // A rollout made already past its start (a transition in the same write)
            // says so as if from an empty one.
            let empty = AutoUpdateAgentRollout {
                status: crate::domain::resource::RolloutStatus {
                    groups: a
                        .status
                        .groups
                        .iter()
                        .map(|g| RolloutGroup {
                            name: g.name.clone(),
                            state: crate::domain::resource::GroupState::Unstarted,
                            ..RolloutGroup::default()
                        })
                        .collect(),
                    ..crate::domain::resource::RolloutStatus::default()
                },
                ..a.clone()
            };
            let mut events = vec![created];
            events.extend(same_rollout(&empty, a, now));
            out.push(Change {
                rollout: Identity::of(a),
                events,
                samples: a.status.groups.iter().map(|g| Sample::of(now, g)).collect(),
            });
        }
    }
    out
}

/// The events between two copies of one rollout.
fn same_rollout(
    b: &AutoUpdateAgentRollout,
    a: &AutoUpdateAgentRollout,
    now: Timestamp,
) -> Vec<Event> {
    let mut events = Vec::new();
    if b.spec.autoupdate_mode != a.spec.autoupdate_mode {
        let mut e = Event::new(
            now,
            kind::MODE,
            None,
            format!(
                "mode {} → {}",
                b.spec.autoupdate_mode.as_str(),
                a.spec.autoupdate_mode.as_str()
            ),
        );
        e.from = b.spec.autoupdate_mode.as_str().to_string();
        e.to = a.spec.autoupdate_mode.as_str().to_string();
        events.push(e);
    }
    for g in &a.status.groups {
        let old = b.status.groups.iter().find(|o| o.name == g.name);
        let old_state = old.map(|o| o.state).unwrap_or_default();
        if old_state != g.state {
            let mut e = Event::new(
                now,
                kind::GROUP,
                Some(&g.name),
                format!(
                    "{}: {} → {} ({})",
                    g.name,
                    old_state.as_str(),
                    g.state.as_str(),
                    g.last_update_reason
                ),
            );
            e.from = old_state.as_str().to_string();
            e.to = g.state.as_str().to_string();
            e.reason = crate::domain::text::clean(&g.last_update_reason, 128);
            events.push(e);
        }
        for c in &g.canaries {
            let was = old.and_then(|o| o.canaries.iter().find(|x| x.updater_id == c.updater_id));
            let who = if c.hostname.is_empty() {
                c.updater_id.clone()
            } else {
                format!("{} ({})", c.hostname, c.updater_id)
            };
            let mut push = |kind: &str, message: String| {
                let mut e = Event::new(now, kind, Some(&g.name), message);
                e.to = crate::domain::text::clean(&c.updater_id, 128);
                events.push(e);
            };
            if was.is_none() {
                push(
                    kind::CANARY_PICKED,
                    format!("{}: canary {who} picked", g.name),
                );
            }
            if c.success && !was.is_some_and(|w| w.success) {
                push(
                    kind::CANARY_HEALTHY,
                    format!(
                        "{}: canary {who} healthy on {}",
                        g.name, a.spec.target_version
                    ),
                );
            }
            // A reason arriving after the failure was first seen is said too.
            let failed_before = was.filter(|w| w.failed);
            if c.failed && failed_before.is_none_or(|w| w.reason.is_empty() && !c.reason.is_empty())
            {
                let why = if c.reason.is_empty() {
                    "rolled the new version back or runs it unhealthy".to_string()
                } else {
                    c.reason.clone()
                };
                push(
                    kind::CANARY_FAILED,
                    format!(
                        "{}: canary {who} failed {}: {why}",
                        g.name, a.spec.target_version
                    ),
                );
            }
        }
    }
    for al in only_in(&a.status.alerts, &b.status.alerts) {
        let mut e = Event::new(
            now,
            kind::ALERT_RAISED,
            al.group.as_deref(),
            al.message.clone(),
        );
        e.to = crate::domain::text::clean(&al.kind, 128);
        events.push(e);
    }
    for al in only_in(&b.status.alerts, &a.status.alerts) {
        let message = format!("cleared: {}", al.message);
        let mut e = Event::new(now, kind::ALERT_CLEARED, al.group.as_deref(), message);
        e.from = crate::domain::text::clean(&al.kind, 128);
        events.push(e);
    }
    events
}

/// The alerts of `these` (by kind and group) that `those` lacks.
fn only_in<'a>(
    these: &'a [crate::domain::resource::Alert],
    those: &'a [crate::domain::resource::Alert],
) -> impl Iterator<Item = &'a crate::domain::resource::Alert> {
    these.iter().filter(|al| {
        !those
            .iter()
            .any(|x| x.kind == al.kind && x.group == al.group)
    })
}

/// Which of a rollout's records to prune to keep at most `max` (`records`: each
/// record's key and whether it holds events, oldest first): first every other record
/// of the older half that holds progress only (the chart keeps its whole span, coarser
/// where it is older), then the oldest records after the first (its creation).
pub fn to_prune<'a>(records: &[(&'a str, bool)], max: usize) -> Vec<&'a str> {
    let mut excess = records.len().saturating_sub(max);
    let mut pruned = Vec::with_capacity(excess);
    let mut gone = vec![false; records.len()];
    for i in (1..records.len() / 2).step_by(2) {
        if excess == 0 {
            break;
        }
        if !records[i].1 {
            gone[i] = true;
            pruned.push(records[i].0);
            excess -= 1;
        }
    }
    for (i, (key, _)) in records.iter().enumerate().skip(1) {
        if excess == 0 {
            break;
        }
        if !gone[i] {
            pruned.push(*key);
            excess -= 1;
        }
    }
    pruned
}

/// `GET /v1/history`: the newest rollouts, newest first, each with its events and its
/// groups' progress, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryResponse {
    pub rollouts: Vec<RolloutHistory>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutHistory {
    pub rollout: RolloutRecord,
    #[serde(default)]
    pub events: Vec<Event>,
    #[serde(default)]
    pub progress: Vec<Sample>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource::{Alert, Canary, GroupState};

    fn rollout(target: &str) -> AutoUpdateAgentRollout {
        let config = crate::domain::resource::AutoUpdateConfig::from_text(
            &crate::fixtures::halt_on_error(&[("dev", 10, 1, 0), ("prod", 12, 0, 0)]),
        )
        .unwrap();
        let version = crate::domain::resource::AutoUpdateVersion::from_text(
            &crate::fixtures::version("1.0.0", target, "regular"),
        )
        .unwrap();
        let now: Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
        let resources = crate::domain::reconcile::Resources {
            config: Some(&config),
            version: Some(&version),
            rollout: None,
            frozen: false,
        };
        match crate::domain::reconcile::renew(now, resources, false) {
            crate::domain::reconcile::Renewal::Fresh { rollout, .. } => *rollout,
            _ => panic!("no rollout"),
        }
    }

    #[test]
    fn a_write_says_what_changed_and_a_new_rollout_ends_the_old() {
        let t: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let a = rollout("1.1.0");
        let created = changes(None, Some(&a), t);
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].events[0].kind, kind::ROLLOUT_CREATED);
        assert_eq!(created[0].samples.len(), 2);
        // Nothing changed, nothing said.
        assert!(changes(Some(&a), Some(&a), t).is_empty());

        let mut b = a.clone();
        b.status.groups[0].state = GroupState::Canary;
        b.status.groups[0].last_update_reason = "in_window".into();
        b.status.groups[0].present_count = 3;
        b.status.groups[0].canaries = vec![Canary {
            updater_id: "u1".into(),
            hostname: "dev-1".into(),
            failed: true,
            reason: "the agent is not running\n(5 checks in a row)".into(),
            ..Canary::default()
        }];
        b.status.alerts = vec![Alert {
            kind: "canary_failed".into(),
            group: Some("dev".into()),
            message: "dev halted".into(),
            since: t,
        }];
        let c = changes(Some(&a), Some(&b), t);
        assert_eq!(c.len(), 1);
        let kinds: Vec<&str> = c[0].events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kind::GROUP,
                kind::CANARY_PICKED,
                kind::CANARY_FAILED,
                kind::ALERT_RAISED
            ]
        );
        assert_eq!(
            c[0].events[0].message,
            "dev: unstarted → canary (in_window)"
        );
        assert_eq!(
            c[0].events[2].message,
            "dev: canary dev-1 (u1) failed 1.1.0: the agent is not running (5 checks in a row)"
        );
        assert_eq!(c[0].samples.len(), 1, "only dev's counts changed");
        assert_eq!(c[0].samples[0].pending, 3);

        // new-rollout: the old one ends, replaced; the new one starts.
        let n = rollout("1.2.1");
        let c = changes(Some(&b), Some(&n), t);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].rollout, Identity::of(&b));
        assert_eq!(c[0].events[0].kind, kind::ROLLOUT_REPLACED);
        assert_eq!(c[1].rollout.target_version, "1.2.1");
        assert_eq!(c[1].events[0].kind, kind::ROLLOUT_CREATED);
    }

    #[test]
    fn pruning_thins_the_older_progress_then_drops_the_oldest_events() {
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let recs: Vec<(&str, bool)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i == 0 || i == 3))
            .collect();
        assert!(to_prune(&recs, 10).is_empty());
        // Progress-only records of the older half first: k1 (k3 holds events).
        assert_eq!(to_prune(&recs, 9), ["k1"]);
        // Then the oldest after the first.
        assert_eq!(to_prune(&recs, 7), ["k1", "k2", "k3"]);
        assert_eq!(to_prune(&recs, 1).len(), 9);
        assert!(!to_prune(&recs, 1).contains(&"k0"));
    }
}
