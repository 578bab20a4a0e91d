//! The agent's SQLite DB backup per version (`versions/<v>/backup/{sqlite.db,backup.yaml}`),
//! taken with SQLite's online backup API. `backup.yaml` is written last and validated
//! before any restore.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};

pub use crate::error::BackupUnusable;
use crate::error::{Error, Result};
use crate::fsutil;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct BackupFile {
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) spec: BackupSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct BackupSpec {
    /// The server the agent was enrolled with.
    pub(crate) server: String,
    /// The agent version that used this DB.
    pub(crate) version: String,
    pub(crate) creation_time: Timestamp,
}

pub(crate) const KIND: &str = "db_backup";

pub(crate) fn backup_dir(version_dir: &Path) -> PathBuf {
    version_dir.join("backup")
}

/// Why a backup may not be restored, or `Ok` (pure).
pub(crate) fn validate(
    file: &BackupFile,
    server: &str,
    version: &str,
    now: Timestamp,
    max_age: Duration,
) -> std::result::Result<(), BackupUnusable> {
    if file.kind != KIND {
        return Err(BackupUnusable::WrongKind(file.kind.clone()));
    }
    if file.spec.server.trim_end_matches('/') != server.trim_end_matches('/') {
        return Err(BackupUnusable::OtherServer {
            made_for: file.spec.server.clone(),
            server: server.to_string(),
        });
    }
    if file.spec.version != version {
        return Err(BackupUnusable::OtherVersion {
            made_by: file.spec.version.clone(),
            version: version.to_string(),
        });
    }
    let age = now.duration_since(file.spec.creation_time);
    if age.is_negative() {
        return Err(BackupUnusable::FromTheFuture(file.spec.creation_time));
    }
    if age.unsigned_abs() > max_age {
        return Err(BackupUnusable::TooOld {
            created: file.spec.creation_time,
            max_age,
        });
    }
    Ok(())
}

/// Reads and validates the backup of `version_dir`; `Err` when absent or unusable.
pub(crate) fn load_valid(
    version_dir: &Path,
    server: &str,
    version: &str,
    now: Timestamp,
    max_age: Duration,
) -> std::result::Result<BackupFile, BackupUnusable> {
    let dir = backup_dir(version_dir);
    let yaml = dir.join("backup.yaml");
    let text = std::fs::read_to_string(&yaml).map_err(|e| BackupUnusable::NoMeta(Arc::new(e)))?;
    let file: BackupFile =
        serde_yaml_ng::from_str(&text).map_err(|e| BackupUnusable::BadMeta(Arc::new(e)))?;
    validate(&file, server, version, now, max_age)?;
    if !dir.join("sqlite.db").is_file() {
        return Err(BackupUnusable::NoDatabase);
    }
    Ok(file)
}

fn sqlite_copy(src: &Path, dst: &Path) -> Result<()> {
    let err = |source| Error::Sqlite {
        from: src.to_path_buf(),
        to: dst.to_path_buf(),
        source,
    };
    let from = Connection::open_with_flags(src, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(err)?;
    let mut to = Connection::open(dst).map_err(err)?;
    {
        let b = rusqlite::backup::Backup::new(&from, &mut to).map_err(err)?;
        b.run_to_completion(256, Duration::from_millis(10), None)
            .map_err(err)?;
    }
    to.close().map_err(|(_, e)| err(e))?;
    std::fs::File::open(dst)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(format!("fsync {}", dst.display()), e))
}

/// Backs up `db` into `version_dir/backup`. The old backup.yaml goes first and the new
/// one comes last, so a kill in between leaves no backup that looks valid.
pub(crate) fn backup(
    db: &Path,
    version_dir: &Path,
    server: &str,
    version: &str,
    now: Timestamp,
) -> Result<()> {
    let dir = backup_dir(version_dir);
    fsutil::create_dir_all(&dir)?;
    // The agent's DB holds its credentials: root only.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| Error::io(format!("chmod {}", dir.display()), e))?;
    fsutil::remove_file_durable(&dir.join("backup.yaml"))?;
    let target = dir.join("sqlite.db");
    let tmp = fsutil::temp_beside(&target);
    let copied = sqlite_copy(db, &tmp).and_then(|()| {
        // SQLite made the copy with its own default mode minus the umask.
        set_mode_and_owner(&tmp, BACKUP_MODE, None)?;
        std::fs::rename(&tmp, &target)
            .map_err(|e| Error::io(format!("rename {}", target.display()), e))?;
        fsutil::fsync_dir(&dir)
    });
    if copied.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    copied?;
    let meta = BackupFile {
        version: "v1".into(),
        kind: KIND.into(),
        spec: BackupSpec {
            server: server.into(),
            version: version.into(),
            creation_time: now,
        },
    };
    let path = dir.join("backup.yaml");
    let text = serde_yaml_ng::to_string(&meta).map_err(|source| Error::BackupMeta {
        path: path.clone(),
        source,
    })?;
    fsutil::write_atomic(&path, text.as_bytes(), 0o600)
}

/// The mode of a DB backup (and of a restored DB when there is no live one to copy).
const BACKUP_MODE: u32 = 0o600;

fn set_mode_and_owner(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| Error::io(format!("chown {}", path.display()), e))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("chmod {}", path.display()), e))
}

/// Replaces `db` with the backup of `version_dir` (the agent must be stopped). Stale WAL
/// and shared-memory files are removed first so they cannot be replayed onto it. The
/// restored DB gets the mode and owner of the DB it replaces: the agent may run as
/// another user than root, and the copy is made by root under any umask.
pub(crate) fn restore(version_dir: &Path, db: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let src = backup_dir(version_dir).join("sqlite.db");
    let tmp = fsutil::temp_beside(db);
    let live = std::fs::metadata(db).ok();
    sqlite_copy(&src, &tmp)?;
    let kept = match &live {
        Some(m) => set_mode_and_owner(&tmp, m.mode() & 0o7777, Some((m.uid(), m.gid()))),
        None => set_mode_and_owner(&tmp, BACKUP_MODE, None),
    };
    if let Err(e) = kept {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        fsutil::remove_file_durable(Path::new(&p))?;
    }
    std::fs::rename(&tmp, db).map_err(|e| Error::io(format!("rename onto {}", db.display()), e))?;
    fsutil::fsync_dir(fsutil::parent_of(db))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(server: &str, version: &str, t: Timestamp) -> BackupFile {
        BackupFile {
            version: "v1".into(),
            kind: KIND.into(),
            spec: BackupSpec {
                server: server.into(),
                version: version.into(),
                creation_time: t,
            },
        }
    }

    #[test]
    fn validation() {
        let now: Timestamp = "2026-01-10T00:00:00Z".parse().unwrap();
        let day = Duration::from_secs(86400);
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let cases = [
            (file("https://s", "1.0.0", t("2026-01-09T00:00:00Z")), None),
            (file("https://s/", "1.0.0", t("2026-01-09T00:00:00Z")), None),
            (
                file("https://other", "1.0.0", t("2026-01-09T00:00:00Z")),
                Some("server"),
            ),
            (
                file("https://s", "1.0.1", t("2026-01-09T00:00:00Z")),
                Some("version"),
            ),
            (
                file("https://s", "1.0.0", t("2025-12-01T00:00:00Z")),
                Some("too old"),
            ),
            (
                file("https://s", "1.0.0", t("2026-02-01T00:00:00Z")),
                Some("future"),
            ),
        ];
        for (f, want) in cases {
            let got = validate(&f, "https://s", "1.0.0", now, 7 * day);
            match want {
                None => assert!(got.is_ok(), "{f:?}: {got:?}"),
                Some(w) => assert!(got.unwrap_err().to_string().contains(w), "{f:?}"),
            }
        }
        let mut wrong = file("https://s", "1.0.0", now);
        wrong.kind = "update_config".into();
        assert!(validate(&wrong, "https://s", "1.0.0", now, day).is_err());
    }

    #[test]
    fn backup_and_restore_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("agent.db");
        let c = Connection::open(&db).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        let vdir = dir.path().join("1.0.0");
        let now = Timestamp::now();
        backup(&db, &vdir, "https://s", "1.0.0", now).unwrap();
        c.execute("INSERT INTO t VALUES (2)", []).unwrap();
        drop(c);
        load_valid(&vdir, "https://s", "1.0.0", now, Duration::from_secs(60)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&backup_dir(&vdir).join("sqlite.db")), 0o600);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
        restore(&vdir, &db).unwrap();
        assert_eq!(
            mode(&db),
            0o640,
            "the restored DB keeps the live one's mode"
        );
        let c = Connection::open(&db).unwrap();
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }
}
