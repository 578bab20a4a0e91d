//! A downgrade refused for want of a backup (`decide`).

/// A downgrade the DB rules forbid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to downgrade {from} -> {to}: the agent has a database and there is no valid backup from {to} ({backup})"
)]
pub struct DowngradeRefused<E> {
    pub from: String,
    pub to: String,
    /// Why the backup `to` made is unusable.
    #[source]
    pub backup: E,
}
