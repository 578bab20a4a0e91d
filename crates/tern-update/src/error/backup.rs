//! Why a backup cannot be restored (`backup::validate`).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

/// Why a backup may not be restored. Cloneable (the errors it wraps are shared) because
/// the DB plan that carries it is.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BackupUnusable {
    #[error("no backup.yaml: {0}")]
    NoMeta(#[source] Arc<std::io::Error>),
    #[error("backup.yaml: {0}")]
    BadMeta(#[source] Arc<serde_yaml_ng::Error>),
    #[error("kind is {0:?}")]
    WrongKind(String),
    #[error("made for server {made_for:?}, not {server:?}")]
    OtherServer { made_for: String, server: String },
    #[error("made by version {made_by}, not {version}")]
    OtherVersion { made_by: String, version: String },
    #[error("created in the future ({0})")]
    FromTheFuture(Timestamp),
    #[error("too old: created {created}, older than {}h", max_age.as_secs() / 3600)]
    TooOld {
        created: Timestamp,
        max_age: Duration,
    },
    #[error("backup.yaml without sqlite.db")]
    NoDatabase,
}
