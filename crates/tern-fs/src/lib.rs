//! Crash-safe file operations, once for the crates that write files a kill must not
//! tear (tern-update's state and links, tern-unpack's unpacked trees, tern-trust's
//! trusted metadata): every write is temp + fsync + rename + fsync(dir), and symlinks
//! are switched by renaming a temporary symlink over the old one.
//!
//! Updaters run as root under whatever umask they inherit (`umask 000` included), so
//! nothing here takes a mode from it: directories made here are [`DIR_MODE`], and every
//! file gets its mode set explicitly after it is created.
//!
//! A leaf crate (std, rustix, thiserror): tern-trust, which ternd and tern-release link
//! too, gets these few functions without the tarball unpacker. Errors name the
//! operation and the path; each caller folds them into its own error type.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file operation that failed: what was done, to which path, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {source}", path.display())]
pub struct Error {
    /// The operation, as a verb: `create`, `fsync directory`, `rename into place`, ….
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

trait Ctx<T> {
    fn ctx(self, what: &'static str, path: &Path) -> Result<T>;
}

impl<T> Ctx<T> for std::io::Result<T> {
    fn ctx(self, what: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| Error {
            what,
            path: path.to_path_buf(),
            source,
        })
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Every directory made here: the agent's user may read and traverse it, only root may
/// change it.
pub const DIR_MODE: u32 = 0o755;

/// Creates `dir` (which must not exist) with [`DIR_MODE`], whatever the umask.
pub fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir(dir).ctx("create directory", dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).ctx("chmod", dir)
}

/// Creates `dir` and its missing parents, each with [`DIR_MODE`]. Directories that
/// exist already keep their mode: a link dir such as `/usr/local/bin` is not ours.
pub fn create_dir_all(dir: &Path) -> Result<()> {
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
            Err(e) => return Err(e).ctx("create directory", d),
        }
    }
    Ok(())
}

/// [`create_dir_all`], then takes group and other write access away from `dir` if it
/// has them: for directories only their writer uses (a namespace, its versions), which
/// an earlier run under `umask 000` may have left world-writable.
pub fn create_own_dir(dir: &Path) -> Result<()> {
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
pub fn create_file(path: &Path, mode: u32) -> Result<File> {
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

/// A unique temporary name beside `path` (same directory, so rename is atomic): unique
/// per process and call, so concurrent writers in one process (ternd runs checks
/// concurrently) never share one.
pub fn temp_beside(path: &Path) -> PathBuf {
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

/// Whether a directory entry name is one of [`temp_beside`]'s temporaries (left by a
/// kill).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// The directory holding `path`: `.` for a bare file name (whose `parent()` is empty).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .ctx("fsync directory", dir)
}

/// Writes `bytes` to `path` atomically with exactly `mode`: a kill at any instant
/// leaves either the old file or the new one. The directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_atomic_with(path, bytes, mode, || {})
}

/// [`write_atomic`], calling `before_rename` once the temporary is written and synced,
/// just before it is renamed into place (tern-update's crash tests kill it there).
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    before_rename: impl FnOnce(),
) -> Result<()> {
    let dir = parent_of(path);
    let tmp = temp_beside(path);
    // A file of this name can only be left by a killed process that had our pid; no
    // live writer shares it, so removing it first is safe.
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = create_file(&tmp, mode)?;
        f.write_all(bytes).ctx("write", &tmp)?;
        f.sync_all().ctx("fsync", &tmp)?;
        before_rename();
        fs::rename(&tmp, path).ctx("rename into place", path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Points `link` at `target` atomically, replacing whatever symlink (or file) is there.
pub fn symlink_atomic(target: &Path, link: &Path) -> Result<()> {
    let dir = parent_of(link);
    create_dir_all(dir)?;
    let tmp = temp_beside(link);
    std::os::unix::fs::symlink(target, &tmp).ctx("symlink", &tmp)?;
    if let Err(e) = fs::rename(&tmp, link) {
        let _ = fs::remove_file(&tmp);
        return Err(e).ctx("rename symlink onto", link);
    }
    fsync_dir(dir)
}

/// Removes a file or symlink if it exists, then fsyncs its directory.
pub fn remove_file_durable(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => fsync_dir(parent_of(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("remove", path),
    }
}

pub fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("remove", path),
    }
}

/// Removes a directory tree without ever leaving a half-deleted tree under its real name:
/// it is first renamed to a temporary name, then deleted.
pub fn remove_dir_durable(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let tmp = temp_beside(path);
    fs::rename(path, &tmp).ctx("rename for removal", path)?;
    fsync_dir(parent_of(path))?;
    remove_dir_all_if_exists(&tmp)
}

/// Free bytes available to us on the filesystem holding `path`.
pub fn free_space(path: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(path).map_err(|e| Error {
        what: "statvfs",
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by each test: the last one predicts the counter, which the others advance
    /// (`cargo test` runs them on threads of one process).
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn write_atomic_replaces_the_file_with_exactly_its_mode_and_leaves_no_temporary() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.yaml");
        write_atomic(&path, b"one", 0o600).unwrap();
        write_atomic(&path, b"two", 0o640).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["state.yaml".to_string()]);
    }

    #[test]
    fn the_hook_runs_before_the_rename_and_a_failure_names_the_path() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic_with(&path, b"x", 0o644, || assert!(!path.exists())).unwrap();
        assert!(path.exists());
        let missing = dir.path().join("no-such-dir").join("f");
        let e = write_atomic(&missing, b"x", 0o644).unwrap_err();
        assert_eq!(e.what, "create");
        assert!(e.to_string().contains("no-such-dir"), "{e}");
    }

    #[test]
    fn a_temporary_left_by_a_killed_writer_with_our_pid_does_not_block_the_write() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // The next temporary name this process will use, made by "someone" killed.
        let next = COUNTER.load(Ordering::Relaxed);
        let stale = dir
            .path()
            .join(format!(".f.tmp-{}-{next}", std::process::id()));
        fs::write(&stale, b"stale").unwrap();
        write_atomic(&path, b"fresh", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"fresh");
        assert!(!stale.exists());
    }
}
