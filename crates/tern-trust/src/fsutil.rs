//! The same discipline as tern-update's update.yaml: write a temporary file beside the
//! target, fsync it, rename it over, fsync the directory. A kill at any instant leaves
//! either the old file or the new one.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The directory holding `path`: `.` for a bare file name (whose `parent()` is empty).
pub(crate) fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dir_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // One temp file per call: ternd runs checks concurrently in one process, and two
    // writers sharing a name would truncate each other's file before its rename.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    // A file of this name can only be left by a killed process that had our pid; no
    // live writer shares it, so removing it first is safe.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(Error::io("cannot create", &tmp))?;
        f.write_all(bytes)
            .map_err(Error::io("cannot write", &tmp))?;
        f.sync_all().map_err(Error::io("cannot fsync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(Error::io("cannot rename into", path))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io("cannot fsync", dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
