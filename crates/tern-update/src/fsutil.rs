//! Crash-safe file operations: every write is temp + fsync + rename + fsync(dir), and
//! symlinks are switched by renaming a temporary symlink over the old one.
//!
//! tern-update runs as root under whatever umask it inherits (`umask 000` included), so
//! nothing here takes a mode from it: directories it makes are [`DIR_MODE`], and every
//! file gets its mode set explicitly after it is created.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Every directory tern-update makes: the agent's user may read and traverse it, only
/// root may change it.
pub(crate) const DIR_MODE: u32 = 0o755;

/// Creates `dir` and its missing parents, each with [`DIR_MODE`]. Directories that
/// exist already keep their mode: a link dir such as `/usr/local/bin` is not ours.
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut cur = dir;
    while fs::symlink_metadata(cur).is_err() {
        missing.push(cur);
        match cur.parent() {
            Some(p) if !p.as_os_str().is_empty() => cur = p,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {
                fs::set_permissions(d, fs::Permissions::from_mode(DIR_MODE)).ctx("chmod", d)?
            }
            // Another process made it meanwhile: it is not ours to chmod.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(Error::io(format!("create directory {}", d.display()), e)),
        }
    }
    Ok(())
}

/// [`create_dir_all`], then takes group and other write access away from `dir` if it
/// has them: for the directories only tern-update uses (a namespace, its versions),
/// which an earlier run under `umask 000` may have left world-writable.
pub(crate) fn create_own_dir(dir: &Path) -> Result<()> {
    create_dir_all(dir)?;
    let mode = fs::symlink_metadata(dir)
        .ctx("stat", dir)?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode & 0o7755)).ctx("chmod", dir)?;
    }
    Ok(())
}

/// Creates `path` (which must not exist) for writing, with exactly `mode`.
pub(crate) fn create_file(path: &Path, mode: u32) -> Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .ctx("create", path)?;
    // open(2) applied the umask: set the mode asked for.
    f.set_permissions(fs::Permissions::from_mode(mode))
        .ctx("chmod", path)?;
    Ok(f)
}

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
    create_dir_all(dir)?;
    let tmp = temp_beside(path);
    let result = (|| {
        let mut f = create_file(&tmp, mode)?;
        f.write_all(bytes).ctx("write", &tmp)?;
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
    create_dir_all(dir)?;
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
