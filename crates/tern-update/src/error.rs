//! The library's error type. Every message says what failed; the binary adds what the
//! host runs now.

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("http: {0}")]
    Http(String),
    #[error("checksum file {url} is missing or unreadable: {reason}")]
    MissingChecksum { url: String, reason: String },
    #[error("checksum mismatch for {url}: expected {expected}, got {actual}")]
    ChecksumMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("refusing tarball entry {entry:?}: {reason}")]
    Hostile { entry: String, reason: String },
    #[error("not enough free space in {}: need {needed} bytes, {available} available", path.display())]
    NoSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("state file {}: {reason}", path.display())]
    State { path: PathBuf, reason: String },
    #[error("another tern-update holds {} (timed out waiting)", .0.display())]
    Locked(PathBuf),
    #[error("service: {0}")]
    Service(String),
    #[error("database backup: {0}")]
    Backup(String),
    #[error("{0}")]
    Refused(String),
    #[error("update to {target} failed: {reason}; rolled back: {outcome}")]
    UpdateFailed {
        target: String,
        reason: String,
        outcome: String,
    },
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Adds a context to an I/O result.
pub trait IoContext<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("{what} {}", path.display()), e))
    }
}
