//! `update.lock`: one tern-update at a time per namespace (flock, released by the kernel
//! when the process dies, so a kill never leaves a stale lock).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

use crate::error::{Error, IoContext, Result};
use crate::fsutil;

/// flock needs only read access: a lock file others can open is one they can hold
/// forever, so only root may open it.
const LOCK_MODE: u32 = 0o600;

#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// The timer's `update`: wait as long as it takes.
    Forever,
    /// Interactive commands: give up after a while.
    Timeout(Duration),
    /// `link-package`: skip when busy.
    Try,
}

/// Held lock; released on drop (or process death).
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// Takes the lock. `Ok(None)` only for `Wait::Try` when another process holds it.
pub fn acquire(path: &Path, wait: Wait) -> Result<Option<Lock>> {
    if let Some(dir) = path.parent() {
        fsutil::create_own_dir(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(LOCK_MODE)
        .open(path)
        .ctx("open lock file", path)?;
    // Also a lock file an earlier run made under another umask.
    file.set_permissions(std::fs::Permissions::from_mode(LOCK_MODE))
        .ctx("chmod", path)?;
    if let Wait::Forever = wait {
        flock(&file, FlockOperation::LockExclusive)
            .map_err(|e| Error::io(format!("lock {}", path.display()), e.into()))?;
        return Ok(Some(Lock { _file: file }));
    }
    let deadline = match wait {
        Wait::Timeout(d) => Some(Instant::now() + d),
        _ => None,
    };
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(Some(Lock { _file: file })),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(Error::io(format!("lock {}", path.display()), e.into())),
        }
        match deadline {
            None => return Ok(None),
            Some(d) if Instant::now() >= d => return Err(Error::Locked(path.to_path_buf())),
            Some(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_try_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("update.lock");
        let held = acquire(&p, Wait::Try).unwrap();
        assert!(held.is_some());
        assert!(acquire(&p, Wait::Try).unwrap().is_none());
        let err = acquire(&p, Wait::Timeout(Duration::from_millis(120))).unwrap_err();
        assert!(matches!(err, Error::Locked(_)));
        drop(held);
        assert!(
            acquire(&p, Wait::Timeout(Duration::from_secs(1)))
                .unwrap()
                .is_some()
        );
    }
}
