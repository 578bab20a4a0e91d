//! Why a tarball was not unpacked. Messages name the entry or the file.

use std::path::Path;

use crate::hostile::HostileReason;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing tarball entry {entry:?}: {reason}")]
    Hostile {
        entry: String,
        #[source]
        reason: HostileReason,
    },
    #[error("refusing the tarball: the archive contains no files")]
    EmptyArchive,
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// What kind of install failure this is, as heartbeats report it
    /// (`tern_core::wire::INSTALL_FAILURE_KINDS`).
    pub fn install_failure_kind(&self) -> &'static str {
        match self {
            Self::Io { .. } => "disk",
            Self::Hostile { .. } | Self::EmptyArchive => "hostile_artifact",
        }
    }
}

/// Adds a context to an I/O result.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("{what} {}", path.display()), e))
    }
}
