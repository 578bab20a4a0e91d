//! Crash-safe file operations: tern-fs's, with the errors folded into tern-update's and
//! the crash tests' kill point inside [`write_atomic`].

use std::path::Path;

use crate::error::Result;

pub(crate) use tern_fs::{create_file, is_temp_name, parent_of, temp_beside};

impl From<tern_fs::Error> for crate::error::Error {
    fn from(e: tern_fs::Error) -> Self {
        Self::io(format!("{} {}", e.what, e.path.display()), e.source)
    }
}

pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    Ok(tern_fs::create_dir_all(dir)?)
}

pub(crate) fn create_own_dir(dir: &Path) -> Result<()> {
    Ok(tern_fs::create_own_dir(dir)?)
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    Ok(tern_fs::fsync_dir(dir)?)
}

/// Writes `bytes` to `path` atomically with the given mode, making its directory if
/// missing. With `test-hooks`, the crash tests may kill the process just before the
/// rename (kill point `write_before_rename`).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    create_dir_all(parent_of(path))?;
    Ok(tern_fs::write_atomic_with(path, bytes, mode, || {
        crate::hooks::kill_point("write_before_rename")
    })?)
}

pub(crate) fn symlink_atomic(target: &Path, link: &Path) -> Result<()> {
    Ok(tern_fs::symlink_atomic(target, link)?)
}

pub(crate) fn remove_file_durable(path: &Path) -> Result<()> {
    Ok(tern_fs::remove_file_durable(path)?)
}

pub(crate) fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    Ok(tern_fs::remove_dir_all_if_exists(path)?)
}

pub(crate) fn remove_dir_durable(path: &Path) -> Result<()> {
    Ok(tern_fs::remove_dir_durable(path)?)
}

pub(crate) fn free_space(path: &Path) -> Result<u64> {
    Ok(tern_fs::free_space(path)?)
}

/// A small file's text, trimmed; `None` when it cannot be read or holds only blanks.
pub(crate) fn read_trimmed(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}
