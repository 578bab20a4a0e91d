//! The file operations of an unpack: directories with [`DIR_MODE`] and files with their
//! mode set explicitly, whatever the umask (updaters run as root under whatever umask
//! they inherit); everything fsynced. The same rules as tern-update's own file writes.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Every directory an unpack makes: the agent's user may read and traverse it, only
/// root may change it.
pub(crate) const DIR_MODE: u32 = 0o755;

/// Creates `dir` (which must not exist) with [`DIR_MODE`], whatever the umask.
pub(crate) fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir(dir).ctx("create directory", dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).ctx("chmod", dir)
}

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

pub(crate) fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("remove {}", path.display()), e)),
    }
}

/// Free bytes available to us on the filesystem holding `path`.
pub(crate) fn free_space(path: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(path)
        .map_err(|e| Error::io(format!("statvfs {}", path.display()), e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}
