//! The stable strings of `last_update_reason`. Operators alert on them; never rename.

pub const CREATED: &str = "created";
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
pub const MANUAL_ROLLBACK: &str = "manual_rollback";
pub const RECONCILER_ERROR: &str = "reconciler_error";

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
