//! Crash-safe file operations: every write is temp + fsync + rename + fsync(dir), and
//! symlinks are switched by renaming a temporary symlink over the old one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique temporary name beside `path` (same directory, so rename is atomic).
pub(crate) fn temp_beside(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = format!(".{name}.tmp-{}-{n}", std::process::id());
    match path.parent() {
        Some(p) => p.join(tmp),
        None => PathBuf::from(tmp),
    }
}

/// Whether a directory entry name is one of our temporaries (left by a kill).
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .ctx("fsync directory", dir)
}

/// Writes `bytes` to `path` atomically with the given mode.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = parent_of(path);
    fs::create_dir_all(dir).ctx("create directory", dir)?;
    let tmp = temp_beside(path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .ctx("create", &tmp)?;
        f.write_all(bytes).ctx("write", &tmp)?;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .ctx("chmod", &tmp)?;
        f.sync_all().ctx("fsync", &tmp)?;
        crate::hooks::kill_point("write_before_rename");
        fs::rename(&tmp, path).ctx("rename into place", path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Points `link` at `target` atomically, replacing whatever symlink (or file) is there.
pub(crate) fn symlink_atomic(target: &Path, link: &Path) -> Result<()> {
    let dir = parent_of(link);
    fs::create_dir_all(dir).ctx("create directory", dir)?;
    let tmp = temp_beside(link);
    std::os::unix::fs::symlink(target, &tmp).ctx("symlink", &tmp)?;
    if let Err(e) = fs::rename(&tmp, link) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(
            format!("rename symlink onto {}", link.display()),
            e,
        ));
    }
    fsync_dir(dir)
}

/// Removes a file or symlink if it exists, then fsyncs its directory.
pub(crate) fn remove_file_durable(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => fsync_dir(parent_of(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("remove {}", path.display()), e)),
    }
}

pub(crate) fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("remove {}", path.display()), e)),
    }
}

/// Removes a directory tree without ever leaving a half-deleted tree under its real name:
/// it is first renamed to a temporary name, then deleted.
pub(crate) fn remove_dir_durable(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let tmp = temp_beside(path);
    fs::rename(path, &tmp).ctx("rename for removal", path)?;
    fsync_dir(parent_of(path))?;
    remove_dir_all_if_exists(&tmp)
}

/// Free bytes available to us on the filesystem holding `path`.
pub(crate) fn free_space(path: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(path)
        .map_err(|e| Error::io(format!("statvfs {}", path.display()), e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}
