//! One line of text per rollout event, the same for `ternctl plan rollout --events`
//! and the replay's story. Its own module so the planner and the replay both read it
//! without importing each other.

use tern_core::reconcile::Event;

/// One line per event.
pub(crate) fn describe(e: &Event) -> String {
    match e {
        Event::RolloutCreated {
            start_version,
            target_version,
            why,
        } => format!("new rollout {start_version} -> {target_version} ({why})"),
        Event::ModeChanged { from, to } => format!("mode {} -> {}", from.as_str(), to.as_str()),
        Event::GroupChanged {
            group,
            from,
            to,
            reason,
        } => format!(
            "group {group}: {} -> {} ({reason})",
            from.as_str(),
            to.as_str()
        ),
        Event::CanariesPicked { group, updater_ids } => {
            format!("group {group}: canaries picked: {}", updater_ids.join(", "))
        }
        Event::GroupOverdue {
            group,
            state,
            since,
        } => format!(
            "ALERT group {group}: still {} since {since}",
            state.as_str()
        ),
        Event::ProgressHalted { group } => format!(
            "group {group}: progress halted, more than max_in_flight of the initial agents are missing"
        ),
    }
}
