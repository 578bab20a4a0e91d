//! Why an archive is refused as hostile (`extract`).

use std::path::PathBuf;

/// Why a tarball entry is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostileReason {
    #[error(transparent)]
    Path(#[from] BadPath),
    #[error("{} entries are not allowed", type_name(.0))]
    Special(tar::EntryType),
    #[error("setuid/setgid mode {0:o}")]
    SetId(u32),
    #[error("path goes through a symlink")]
    ThroughSymlink,
    #[error("path goes through a file")]
    ThroughFile,
    #[error("duplicate entry")]
    Duplicate,
    #[error("symlink without target")]
    SymlinkWithoutTarget,
    #[error("symlink to absolute path {}", .0.display())]
    SymlinkAbsolute(PathBuf),
    #[error("symlink {} leaves the version directory", .0.display())]
    SymlinkEscapes(PathBuf),
    #[error("hardlink without target")]
    HardlinkWithoutTarget,
    #[error("hardlink target: {0}")]
    HardlinkTarget(BadPath),
    #[error("hardlink to {} which is not an earlier file of the archive", .0.display())]
    HardlinkNotEarlier(PathBuf),
    #[error("unpacked size reaches {total} bytes, only {free} free")]
    TooBig { total: u64, free: u64 },
    #[error("archive changed while unpacking")]
    Changed,
    #[error("truncated entry")]
    Truncated,
}

/// A path that could leave the version directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadPath {
    #[error("absolute path")]
    Absolute,
    #[error("path contains `..`")]
    ParentDir,
}

/// An entry type as operators know it; the tar crate's name for the rare ones.
fn type_name(t: &tar::EntryType) -> String {
    use tar::EntryType as T;
    match t {
        T::Char => "character device".into(),
        T::Block => "block device".into(),
        T::Fifo => "fifo".into(),
        other => format!("{other:?}"),
    }
}
