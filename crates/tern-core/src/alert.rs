//! Alerts: what needs a human, kept in the rollout's status while it holds. Each
//! reconcile works the active alerts out again from the groups; an alert that still
//! holds keeps the instant it was first raised, one that no longer holds is gone
//! (cleared). ternd shows them (`agents status`, the API), exports them as a metric
//! and sends raised/cleared notices to the configured receivers.

use jiff::{SignedDuration, Timestamp};

use crate::domain::duration::GoDuration;
use crate::domain::reason;
use crate::domain::resource::{Alert, GroupState, RolloutGroup};
use crate::domain::rollout;

/// A group stuck in canary or active this long raises an alert.
pub(crate) const DEFAULT_ALERT_AFTER: GoDuration = GoDuration::from_hours(4);

/// The stable kinds of alert; operators route on them, never rename.
pub mod kind {
    /// A group has been in canary or active longer than its `alert_after`.
    pub const GROUP_OVERDUE: &str = "group_overdue";
    /// A canary rolled the target back or runs it unhealthy.
    pub const CANARY_FAILED: &str = "canary_failed";
    /// A query of a group's canary analysis is past its limit (the message names it and
    /// its values).
    pub const ANALYSIS_FAILED: &str = "analysis_failed";
    /// A group's canary analysis cannot judge (Prometheus unreachable, a query error,
    /// no data): the group holds.
    pub const ANALYSIS_HELD: &str = "analysis_held";
    /// An active group cannot finish: too many of its initial agents are gone
    /// (backpressure halted), or more of its agents failed than `max_in_flight` allows.
    pub const GROUP_HALTED: &str = "group_halted";
    /// A group's agents vanished past its budget before it finished.
    pub const AGENTS_VANISHED: &str = "agents_vanished";
    /// Hosts of a group could not install the target (not signed, not as published,
    /// missing, no disk…): a canary's refusal, or as many as `max_in_flight` allows.
    pub const INSTALL_REFUSED: &str = "install_refused";
    /// A group cannot move because the evidence it needs is missing: no live report,
    /// or a replica that counted its hosts stopped reporting.
    pub const REPORTS_MISSING: &str = "reports_missing";
    /// A group was rolled back: its hosts return to the start version.
    pub const ROLLBACK: &str = "rollback";
    /// A lock-step update (`tern-lockstep`) stopped: a server failed a step or timed out.
    pub const LOCKSTEP_STOPPED: &str = "lockstep_stopped";
    /// Lock-step servers have waited at a barrier for a fraction of their barrier timeout:
    /// the servers not arrived are named (cleared when the barrier passes).
    pub const LOCKSTEP_STALLED: &str = "lockstep_stalled";
    /// The directive install loop stopped on its fault or churn limit (latched).
    pub const DIRECTIVE_INSTALLS_PAUSED: &str = "directive_installs_paused";
    /// The active directive's `stale_after` has passed.
    pub(crate) const DIRECTIVE_STALE: &str = "directive_stale";
    /// The notification controller flags hosts on versions a security advisory names.
    pub(crate) const DIRECTIVE_VERSIONS_SECURITY: &str = "directive_versions_security";
    /// … on versions at their end of life.
    pub(crate) const DIRECTIVE_VERSIONS_END_OF_LIFE: &str = "directive_versions_end_of_life";
    /// … not on the version their directive recommends.
    pub(crate) const DIRECTIVE_VERSIONS_OUTDATED: &str = "directive_versions_outdated";
}

/// The kinds whose condition is read from the hosts' reports (counts, canaries):
/// while a replica warms up after a start its reports do not hold all its hosts yet,
/// so these are neither raised nor cleared then.
const OBSERVED: [&str; 5] = [
    kind::CANARY_FAILED,
    kind::INSTALL_REFUSED,
    kind::GROUP_HALTED,
    kind::AGENTS_VANISHED,
    kind::REPORTS_MISSING,
];

/// The alerts that hold for `groups` at `now`, each keeping the `since` of the same
/// alert (kind and group) in `previous`. `warming_up`: some live report comes from a
/// replica that has not observed all its hosts yet (just started); then an alert read
/// from the reports stays as it was in `previous`, never raised from state nobody has
/// observed (a restart must not page "agents vanished") nor cleared on partial counts.
pub(crate) fn evaluate(
    groups: &[RolloutGroup],
    previous: &[Alert],
    now: Timestamp,
    warming_up: bool,
) -> Vec<Alert> {
    let mut alerts = Vec::new();
    for g in groups {
        if warming_up {
            alerts.extend(
                previous
                    .iter()
                    .filter(|a| {
                        a.group.as_deref() == Some(g.name.as_str())
                            && OBSERVED.contains(&a.kind.as_str())
                    })
                    .cloned(),
            );
        }
        for (kind, message) in group_alerts(g, now) {
            if warming_up && OBSERVED.contains(&kind) {
                continue;
            }
            let since = previous
                .iter()
                .find(|a| a.kind == kind && a.group.as_deref() == Some(g.name.as_str()))
                .map_or(now, |a| a.since);
            alerts.push(Alert {
                kind: kind.to_string(),
                group: Some(g.name.clone()),
                message,
                since,
            });
        }
    }
    alerts
}

/// Whether `alert` is new in `now_active` compared with `previous`.
pub(crate) fn newly_raised<'a>(previous: &[Alert], now_active: &'a [Alert]) -> Vec<&'a Alert> {
    now_active
        .iter()
        .filter(|a| {
            !previous
                .iter()
                .any(|p| p.kind == a.kind && p.group == a.group)
        })
        .collect()
}

fn group_alerts(g: &RolloutGroup, now: Timestamp) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let name = &g.name;
    if g.state == GroupState::Rolledback {
        out.push((
            kind::ROLLBACK,
            format!("group {name} was rolled back: its hosts return to the start version"),
        ));
    }
    if g.state == GroupState::Canary && g.canaries.iter().any(|c| c.failed) {
        let who: Vec<String> = g
            .canaries
            .iter()
            .filter(|c| c.failed)
            .map(|c| {
                // Hostnames need not be unique; the updater id is.
                let id: String = c.updater_id.chars().take(8).collect();
                if c.hostname.is_empty() {
                    c.updater_id.clone()
                } else {
                    format!("{} ({id}…)", c.hostname)
                }
            })
            .collect();
        let how = if g.refused_count > 0 {
            format!(
                "rolled back, unhealthy on the target, or could not install it: {}",
                rollout::refused_kinds(g)
            )
        } else {
            "rolled back or unhealthy on the target".to_string()
        };
        out.push((
            kind::CANARY_FAILED,
            format!(
                "group {name}: canary failed on {} ({how}); the group holds",
                who.join(", ")
            ),
        ));
    }
    if g.state == GroupState::Canary
        && let Some(a) = &g.analysis
    {
        if a.failed {
            out.push((
                kind::ANALYSIS_FAILED,
                format!(
                    "group {name}: canary analysis failed ({}); the group holds at its canaries: roll it back or reset it",
                    a.message
                ),
            ));
        } else if a.held {
            out.push((
                kind::ANALYSIS_HELD,
                format!(
                    "group {name}: canary analysis cannot judge ({}); the group holds until it can",
                    a.message
                ),
            ));
        }
    }
    let refusing = match g.state {
        GroupState::Canary => g.refused_count > 0,
        GroupState::Active | GroupState::Done => rollout::refused_over_budget(g),
        GroupState::Unstarted | GroupState::Rolledback => false,
    };
    if refusing {
        out.push((
            kind::INSTALL_REFUSED,
            format!(
                "group {name}: {} hosts could not install the target ({}); see `ternctl inventory ls` for each host's error",
                g.refused_count,
                rollout::refused_kinds(g)
            ),
        ));
    }
    if g.state == GroupState::Active {
        if g.last_update_reason == reason::TOO_MANY_AGENTS_MISSING {
            out.push((
                kind::GROUP_HALTED,
                format!(
                    "group {name}: growth halted, too many of its {} initial agents are missing",
                    g.initial_count
                ),
            ));
        } else if rollout::failed_over_budget(g) {
            out.push((
                kind::GROUP_HALTED,
                format!(
                    "group {name}: {} agents failed the update, more than its max_in_flight allows; it cannot complete",
                    g.failed_count
                ),
            ));
        }
    }
    if g.last_update_reason == reason::REPORTS_MISSING {
        out.push((
            kind::REPORTS_MISSING,
            format!(
                "group {name}: the replicas' reports cannot tell what it holds (none is live, or a replica that counted its hosts stopped reporting); it holds ({}) until they are back",
                g.state.as_str()
            ),
        ));
    }
    if g.last_update_reason == reason::AGENTS_VANISHED {
        out.push((
            kind::AGENTS_VANISHED,
            format!(
                "group {name}: {} of the {} agents it was seen with are connected; it holds until they return or an operator resets it",
                g.connected_count, g.peak_count
            ),
        ));
    }
    if let Some(since) = overdue_since(g, now) {
        out.push((
            kind::GROUP_OVERDUE,
            format!(
                "group {name}: still {} since {since}, past its alert_after: check its agents",
                g.state.as_str()
            ),
        ));
    }
    out
}

/// When the group started, if it has been in canary or active past its
/// `alert_after` (both strategies).
pub(crate) fn overdue_since(g: &RolloutGroup, now: Timestamp) -> Option<Timestamp> {
    if !matches!(g.state, GroupState::Canary | GroupState::Active) {
        return None;
    }
    let since = g.start_time?;
    let after: SignedDuration = g
        .config
        .alert_after
        .unwrap_or(DEFAULT_ALERT_AFTER)
        .as_signed();
    (now >= since.saturating_add(after).unwrap_or(since)).then_some(since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource::Canary;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn group(state: GroupState) -> RolloutGroup {
        RolloutGroup {
            name: "dev".into(),
            state,
            start_time: Some(ts("2026-11-23T12:00:00Z")),
            initial_count: 20,
            present_count: 20,
            ..RolloutGroup::default()
        }
    }

    fn kinds(alerts: &[Alert]) -> Vec<&str> {
        alerts.iter().map(|a| a.kind.as_str()).collect()
    }

    #[test]
    fn each_condition_raises_its_alert_and_clears_when_it_ends() {
        let at = ts("2026-11-23T13:00:00Z");
        assert!(evaluate(&[group(GroupState::Active)], &[], at, false).is_empty());

        let mut canary = group(GroupState::Canary);
        canary.canaries = vec![Canary {
            updater_id: "u1".into(),
            hostname: "web-1".into(),
            failed: true,
            ..Canary::default()
        }];
        let raised = evaluate(std::slice::from_ref(&canary), &[], at, false);
        assert_eq!(kinds(&raised), [kind::CANARY_FAILED]);
        assert!(raised[0].message.contains("web-1"), "{}", raised[0].message);
        // The canary recovers: the alert is gone (cleared).
        canary.canaries[0].failed = false;
        assert!(evaluate(&[canary], &raised, at, false).is_empty());

        let mut failing = group(GroupState::Active);
        failing.failed_count = 3; // above 10% of 20
        assert_eq!(
            kinds(&evaluate(&[failing], &[], at, false)),
            [kind::GROUP_HALTED]
        );
        let mut halted = group(GroupState::Active);
        halted.last_update_reason = reason::TOO_MANY_AGENTS_MISSING.into();
        assert_eq!(
            kinds(&evaluate(&[halted], &[], at, false)),
            [kind::GROUP_HALTED]
        );
        let mut vanished = group(GroupState::Canary);
        vanished.last_update_reason = reason::AGENTS_VANISHED.into();
        assert_eq!(
            kinds(&evaluate(&[vanished], &[], at, false)),
            [kind::AGENTS_VANISHED]
        );
        assert_eq!(
            kinds(&evaluate(&[group(GroupState::Rolledback)], &[], at, false)),
            [kind::ROLLBACK]
        );
    }

    #[test]
    fn overdue_after_alert_after_keeping_since_while_it_holds() {
        let g = group(GroupState::Active);
        assert!(
            evaluate(
                std::slice::from_ref(&g),
                &[],
                ts("2026-11-23T15:59:00Z"),
                false
            )
            .is_empty()
        );
        let first = evaluate(
            std::slice::from_ref(&g),
            &[],
            ts("2026-11-23T16:00:00Z"),
            false,
        );
        assert_eq!(kinds(&first), [kind::GROUP_OVERDUE]);
        assert_eq!(first[0].since, ts("2026-11-23T16:00:00Z"));
        let later = evaluate(
            std::slice::from_ref(&g),
            &first,
            ts("2026-11-23T17:00:00Z"),
            false,
        );
        assert_eq!(later, first, "the same alert, raised at the same instant");
        assert!(newly_raised(&first, &later).is_empty());
        assert_eq!(newly_raised(&[], &later).len(), 1);
        // Done: cleared.
        assert!(
            evaluate(
                &[group(GroupState::Done)],
                &later,
                ts("2026-11-23T18:00:00Z"),
                false
            )
            .is_empty()
        );
    }
}
