//! A link or file in the way that tern-update does not manage (`links`).

use std::path::PathBuf;

/// Why a link's path is not ours to replace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("is a symlink to {} which tern-update does not manage", .0.display())]
    ForeignSymlink(PathBuf),
    #[error("is a file tern-update does not manage")]
    ForeignFile,
}
