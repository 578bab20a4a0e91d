//! The stable strings of `last_update_reason`. Operators alert on them; never rename.

pub(crate) const CREATED: &str = "created";
/// Start conditions are met but another group already started in this reconcile.
pub const CAN_START: &str = "can_start";
/// The group's window is closed.
pub const CANNOT_START: &str = "cannot_start";
pub const PREVIOUS_GROUPS_NOT_DONE: &str = "previous_groups_not_done";
pub const ROLLOUT_CHANGED_DURING_WINDOW: &str = "rollout_changed_during_window";
pub const UPDATE_COMPLETE: &str = "update_complete";
pub const UPDATE_IN_PROGRESS: &str = "update_in_progress";
pub const WAITING_FOR_CANARIES: &str = "waiting_for_canaries";
pub const CANARIES_ARE_ALIVE: &str = "canaries_are_alive";
pub const IN_WINDOW: &str = "in_window";
pub const OUTSIDE_WINDOW: &str = "outside_window";
pub const MANUAL_TRIGGER: &str = "manual_trigger";
pub const MANUAL_FORCED_DONE: &str = "manual_forced_done";
pub(crate) const MANUAL_ROLLBACK: &str = "manual_rollback";
pub(crate) const RECONCILER_ERROR: &str = "reconciler_error";

// Added by Tern.

/// halt-on-error: the window is open but `wait_hours` have not passed since the
/// previous group started.
pub const WAIT_HOURS_NOT_ELAPSED: &str = "wait_hours_not_elapsed";
/// A canary group with no connected agent at all: nothing to test, so it goes active.
pub const NO_CANARY_CANDIDATES: &str = "no_canary_candidates";
/// A group that could start waits: a replica started so recently that its report does
/// not count all its hosts yet (after a restart, every host reconnects within a
/// heartbeat interval and settles within a report period). Starting then would take
/// too small an initial count for backpressure, or find no canary and skip canaries.
pub const WAITING_FOR_REPORTS: &str = "waiting_for_reports";
/// An operator reset the group: new canaries are picked, or the initial count is
/// taken again.
pub const MANUAL_RESET: &str = "manual_reset";
/// A canary rolled the target back or runs it unhealthy: the group holds in canary
/// until it runs the target healthy (or an operator acts).
pub const CANARY_FAILED: &str = "canary_failed";
/// Agents of the group vanished past its budget before it finished: it neither skips
/// its canaries nor completes until they return or an operator acts.
pub const AGENTS_VANISHED: &str = "agents_vanished";
/// Growth is halted: more than `max_in_flight` of the initial agents dropped off.
pub const TOO_MANY_AGENTS_MISSING: &str = "too_many_agents_missing";
/// The live reports cannot tell what the group holds: no replica's report is live, or a
/// replica that counted hosts of the group stopped reporting while they are not seen
/// elsewhere. The group holds (it neither starts, skips its canaries, nor completes)
/// until the reports are back: no evidence is not zero hosts.
pub const REPORTS_MISSING: &str = "reports_missing";
/// Every canary runs the target healthy and the group's analysis has not yet passed
/// as many times in a row as it needs: the group waits in canary.
pub const ANALYSIS_PENDING: &str = "analysis_pending";
/// The canary analysis passed as many times in a row as it needs: the group goes active.
pub const ANALYSIS_PASSED: &str = "analysis_passed";
/// A query of the canary analysis is past its limit: a failed canary. The group holds
/// in canary until an operator rolls it back or resets it.
pub const ANALYSIS_FAILED: &str = "analysis_failed";
/// The canary analysis could not judge (Prometheus unreachable, a query error, no
/// data): the group holds in canary until it can (fail closed).
pub const ANALYSIS_HELD: &str = "analysis_held";

/// What a reason code means, in one sentence for people (the dashboard shows it beside
/// the code, and the status JSON carries it as `last_update_reason_text`). `None` for a
/// code this version does not know.
pub(crate) fn sentence(code: &str) -> Option<&'static str> {
    Some(match code {
        CREATED => "the rollout was just created",
        CAN_START => "it may start, but another group started in the same pass",
        CANNOT_START => "its window is closed: it waits for the next one",
        PREVIOUS_GROUPS_NOT_DONE => "it waits for the groups before it to be done",
        ROLLOUT_CHANGED_DURING_WINDOW => {
            "the rollout was created or changed while its window was open: it waits for the next window (start-update starts it now)"
        }
        UPDATE_COMPLETE => "enough of its hosts run the target healthy: done",
        UPDATE_IN_PROGRESS => "its hosts are updating",
        WAITING_FOR_CANARIES => {
            "its canaries have not all reported the target healthy yet (or none could be picked yet)"
        }
        CANARIES_ARE_ALIVE => "its canaries run the target healthy: the rest of the group follows",
        IN_WINDOW => "its window is open",
        OUTSIDE_WINDOW => "its window is closed",
        MANUAL_TRIGGER => "an operator started it",
        MANUAL_FORCED_DONE => "an operator marked it done",
        MANUAL_ROLLBACK => "an operator rolled it back: its hosts return to the start version",
        RECONCILER_ERROR => "the reconciler failed on it: see ternd's log",
        WAIT_HOURS_NOT_ELAPSED => {
            "its window is open, but wait_hours have not passed since the previous group started"
        }
        NO_CANARY_CANDIDATES => "no host of the group is connected: nothing to test, it went on",
        WAITING_FOR_REPORTS => {
            "ternd started moments ago and has not heard from all its hosts yet: it waits"
        }
        MANUAL_RESET => "an operator reset it: new canaries, or a new initial count",
        CANARY_FAILED => {
            "a canary rolled the target back, runs it unhealthy or could not install it: the group holds"
        }
        AGENTS_VANISHED => {
            "more of its hosts disappeared than max_in_flight allows: it holds until they return or an operator resets it"
        }
        TOO_MANY_AGENTS_MISSING => {
            "growth halted: more than max_in_flight of the hosts it started with dropped off"
        }
        REPORTS_MISSING => {
            "the replicas' reports cannot tell what it holds: it holds until they are back"
        }
        ANALYSIS_PENDING => {
            "its canaries run the target healthy; the canary analysis has not passed often enough yet"
        }
        ANALYSIS_PASSED => "the canary analysis passed: the rest of the group follows",
        ANALYSIS_FAILED => {
            "a query of the canary analysis is past its limit: a failed canary, the group holds"
        }
        ANALYSIS_HELD => {
            "the canary analysis cannot judge (Prometheus unreachable, a query error, no data): the group holds"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_code_has_a_sentence() {
        use super::*;
        for code in [
            CREATED,
            CAN_START,
            CANNOT_START,
            PREVIOUS_GROUPS_NOT_DONE,
            ROLLOUT_CHANGED_DURING_WINDOW,
            UPDATE_COMPLETE,
            UPDATE_IN_PROGRESS,
            WAITING_FOR_CANARIES,
            CANARIES_ARE_ALIVE,
            IN_WINDOW,
            OUTSIDE_WINDOW,
            MANUAL_TRIGGER,
            MANUAL_FORCED_DONE,
            MANUAL_ROLLBACK,
            RECONCILER_ERROR,
            WAIT_HOURS_NOT_ELAPSED,
            NO_CANARY_CANDIDATES,
            WAITING_FOR_REPORTS,
            MANUAL_RESET,
            CANARY_FAILED,
            AGENTS_VANISHED,
            TOO_MANY_AGENTS_MISSING,
            REPORTS_MISSING,
            ANALYSIS_PENDING,
            ANALYSIS_PASSED,
            ANALYSIS_FAILED,
            ANALYSIS_HELD,
        ] {
            assert!(sentence(code).is_some_and(|s| !s.is_empty()), "{code}");
        }
        assert_eq!(sentence("not_a_code"), None);
    }
}
