//! The SQLite backend: one file, several processes.
//!
//! Layout: `meta` (one row: the global revision, the compaction point, the lease sequence),
//! `kv` (key, value, create/mod revision, expiry in wall-clock ms), `events` (append-only
//! log, one row per revision, read by watches and pruned to the last `history` revisions)
//! and `leases` (name, holder, fencing token, expiry).
//!
//! Every write is one `BEGIN IMMEDIATE` transaction on a dedicated writer connection, so
//! writers from every process are serialised by SQLite and each revision is committed
//! with its event: a reader that sees revision N sees every event up to N (no gaps).
//! A `txn` is one such transaction: its compares are read and its ops applied inside it,
//! each change at a revision of its own with its event, so readers and watches in every
//! process see all of them or none.
//! Reads use a second connection; WAL lets them run beside the writer and other processes.
//! All SQLite calls run in `spawn_blocking`, never on the async runtime's workers.
//!
//! `synchronous = FULL`: in WAL mode, NORMAL can lose the last commits on power loss (not
//! on a crash of the process). Tern writes a few records a minute and acts on them
//! (rollout transitions reach hosts), so an acknowledged write must survive; the cost of
//! one fsync per commit is irrelevant at that rate.
//!
//! Watches poll the event log every `poll_interval` (to see other processes' writes) and
//! are also woken at once by writes made through the same `SqliteStore`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior, params,
};
use tern_core::backoff::Backoff;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::watch::{Batch, spawn_watch};
use crate::{
    Compare, Error, Found, KeyValue, Lease, LeaseInfo, Listing, Op, Result, Revision, Store,
    TxnOutcome, Watch, WatchEvent, check_key, check_lease_args, check_ttl, check_txn,
    first_failure, prefix_end,
};

/// The schema this code writes (`PRAGMA user_version`). A newer file is refused.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL,
    compacted INTEGER NOT NULL,
    lease_seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (id, revision, compacted, lease_seq) VALUES (1, 0, 0, 0);
CREATE TABLE IF NOT EXISTS kv (
    key BLOB PRIMARY KEY,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL,
    expires_at_ms INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS events (
    revision INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    kind INTEGER NOT NULL,
    value BLOB,
    create_revision INTEGER
);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
";

const EVENT_PUT: i64 = 0;
const EVENT_DELETE: i64 = 1;

/// Tuning of a [`SqliteStore`]; the defaults suit ternd.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// How long a statement waits for another process's write lock before
    /// [`Error::Unavailable`].
    pub busy_timeout: Duration,
    /// How often watches look for writes made by other processes.
    pub poll_interval: Duration,
    /// How often (at most) expired keys are looked for; they are also purged on every write.
    pub sweep_interval: Duration,
    /// How many past revisions the event log keeps for watches from the past.
    pub history: u64,
    /// At most this many events per watch query.
    pub watch_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            poll_interval: Duration::from_millis(200),
            sweep_interval: Duration::from_millis(500),
            history: 10_000,
            watch_batch: 1000,
        }
    }
}

/// A [`Store`] in one SQLite file (e.g. `DATA_DIR/tern.db`), safe to open from several
/// processes on the same machine (they must share a clock: TTLs use the wall clock).
/// Cloning gives another handle onto the same connections.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    wake: watch::Sender<Revision>,
    opts: SqliteOptions,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options. Call it
    /// inside a Tokio runtime: it starts the expiry sweeper.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    pub async fn open_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let busy = opts.busy_timeout;
        let p = path.clone();
        let (writer, reader) = tokio::task::spawn_blocking(move || -> Result<_> {
            let writer = open_connection(&p, busy)?;
            init_schema(&writer, &p)?;
            let reader = open_connection(&p, busy)?;
            Ok((writer, reader))
        })
        .await
        .map_err(join_err)??;
        let (wake, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            path,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            wake,
            opts,
        });
        tokio::spawn(sweeper(Arc::downgrade(&inner), inner.wake.subscribe()));
        Ok(SqliteStore { inner })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

fn open_connection(path: &Path, busy: Duration) -> Result<Connection> {
    let ctx = |e: rusqlite::Error| sql_err(&format!("opening {}", path.display()), e);
    let conn = Connection::open(path).map_err(ctx)?;
    conn.busy_timeout(busy).map_err(ctx)?;
    // Every statement of the store is prepared once per connection and kept (rusqlite
    // keeps 16 by default; the store has fewer than 32 distinct ones).
    conn.set_prepared_statement_cache_capacity(32);
    // Switching a fresh file to WAL takes an exclusive lock, and SQLite may answer
    // "locked" at once, without its busy handler, while another process does the same:
    // several processes opening a new store together take turns here.
    let deadline = std::time::Instant::now() + busy;
    let backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(100));
    let mut failures = 0;
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) => break mode,
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                failures += 1;
                std::thread::sleep(backoff.after(failures));
            }
            Err(e) => return Err(ctx(e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Backend(format!(
            "{}: cannot enable WAL journal mode (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(ctx)?;
    Ok(conn)
}

fn init_schema(conn: &Connection, path: &Path) -> Result<()> {
    let ctx = |e: rusqlite::Error| sql_err(&format!("initialising {}", path.display()), e);
    // IMMEDIATE: two processes opening a fresh file at once take turns.
    conn.execute_batch("BEGIN IMMEDIATE").map_err(ctx)?;
    let result = (|| {
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(ctx)?;
        if version > SCHEMA_VERSION {
            return Err(Error::Backend(format!(
                "{}: schema version {version} is newer than this program supports ({SCHEMA_VERSION}); upgrade it",
                path.display()
            )));
        }
        conn.execute_batch(SCHEMA).map_err(ctx)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(ctx)?;
        Ok(())
    })();
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(end).map_err(ctx)?;
    result
}

/// Maps a SQLite error; `what` names the operation and key.
fn sql_err(what: &str, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::SystemIoFailure,
        ) => Error::Unavailable(format!("{what}: {e}")),
        _ => Error::Backend(format!("{what}: {e}")),
    }
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::Backend(format!("sqlite task failed: {e}"))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn rev(r: i64) -> Revision {
    // Revisions are written by this code from 0 upwards and never negative.
    u64::try_from(r).unwrap_or(0)
}

fn to_i64(r: Revision) -> i64 {
    i64::try_from(r).unwrap_or(i64::MAX)
}

fn key_string(bytes: Vec<u8>) -> rusqlite::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Blob, Box::new(e))
    })
}

fn lock(m: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while a connection was locked leaves at worst an open transaction, which
    // rusqlite's `Transaction` rolls back on unwind: the connection is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    /// Runs `f` on the reader connection in a read transaction (one consistent snapshot).
    async fn read<T, F>(self: &Arc<Self>, what: String, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, i64) -> rusqlite::Result<Result<T>> + Send + 'static,
    {
        let inner = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut conn = lock(&inner.reader);
            let tx = conn.transaction().map_err(|e| sql_err(&what, e))?;
            let out = f(&tx, now_ms()).map_err(|e| sql_err(&what, e))?;
            // Read-only: ending it either way is the same.
            tx.rollback().map_err(|e| sql_err(&what, e))?;
            out
        })
        .await
        .map_err(join_err)?
    }

    /// Runs `f` in a write transaction after purging expired keys, commits if it returns
    /// `Ok(Ok(_))`, then wakes local watchers.
    async fn write<T, F>(self: &Arc<Self>, what: String, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, i64) -> rusqlite::Result<Result<T>> + Send + 'static,
    {
        let inner = Arc::clone(self);
        let (out, revision) = tokio::task::spawn_blocking(move || {
            let mut conn = lock(&inner.writer);
            let e = |e| sql_err(&what, e);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(e)?;
            let now = now_ms();
            purge_expired(&tx, now).map_err(e)?;
            let out = f(&tx, now).map_err(e)??;
            let revision = current_revision(&tx).map_err(e)?;
            tx.commit().map_err(e)?;
            Ok::<_, Error>((out, revision))
        })
        .await
        .map_err(join_err)??;
        self.wake.send_if_modified(|r| {
            let changed = *r != revision;
            *r = revision;
            changed
        });
        Ok(out)
    }

    fn fetch_events(
        self: &Arc<Self>,
        prefix: String,
        after: Revision,
    ) -> impl Future<Output = Result<Batch>> + Send + use<> {
        let inner = Arc::clone(self);
        let batch = i64::try_from(self.opts.watch_batch.max(1)).unwrap_or(i64::MAX);
        async move {
            inner
                .read(format!("watching {prefix:?}"), move |tx, _| {
                    let (revision, compacted) = tx.query_row(
                        "SELECT revision, compacted FROM meta WHERE id = 1",
                        [],
                        |r| Ok((rev(r.get(0)?), rev(r.get(1)?))),
                    )?;
                    if after < compacted {
                        return Ok(Err(Error::Compacted {
                            prefix,
                            requested: after + 1,
                            compacted,
                        }));
                    }
                    let start = prefix.as_bytes();
                    let end = prefix_end(start);
                    let mut stmt = tx.prepare_cached(
                        "SELECT revision, key, kind, value, create_revision FROM events
                         WHERE revision > ?1 AND revision <= ?2 AND key >= ?3
                           AND (?4 IS NULL OR key < ?4)
                         ORDER BY revision LIMIT ?5",
                    )?;
                    let rows = stmt.query_map(
                        params![to_i64(after), to_i64(revision), start, end, batch],
                        |r| {
                            let revision = rev(r.get(0)?);
                            let key = key_string(r.get(1)?)?;
                            let kind: i64 = r.get(2)?;
                            Ok(if kind == EVENT_PUT {
                                WatchEvent::Put(KeyValue {
                                    key,
                                    value: r.get::<_, Option<Vec<u8>>>(3)?.unwrap_or_default(),
                                    create_revision: rev(r
                                        .get::<_, Option<i64>>(4)?
                                        .unwrap_or_default()),
                                    mod_revision: revision,
                                })
                            } else {
                                WatchEvent::Delete { key, revision }
                            })
                        },
                    )?;
                    let events = rows.collect::<rusqlite::Result<Vec<_>>>()?;
                    let full = i64::try_from(events.len()).unwrap_or(i64::MAX) >= batch;
                    let scanned_to = match events.last() {
                        Some(last) if full => last.revision(),
                        _ => revision,
                    };
                    Ok(Ok(Batch { events, scanned_to }))
                })
                .await
        }
    }
}

fn current_revision(tx: &Transaction<'_>) -> rusqlite::Result<Revision> {
    tx.prepare_cached("SELECT revision FROM meta WHERE id = 1")?
        .query_row([], |r| Ok(rev(r.get(0)?)))
}

fn next_revision(tx: &Transaction<'_>) -> rusqlite::Result<Revision> {
    tx.prepare_cached("UPDATE meta SET revision = revision + 1 WHERE id = 1 RETURNING revision")?
        .query_row([], |r| Ok(rev(r.get(0)?)))
}

/// Deletes every expired key, one revision and one delete event each.
fn purge_expired(tx: &Transaction<'_>, now: i64) -> rusqlite::Result<()> {
    let keys: Vec<Vec<u8>> = {
        let mut stmt = tx.prepare_cached(
            "SELECT key FROM kv WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?1 ORDER BY key",
        )?;
        stmt.query_map([now], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    for key in keys {
        tx.execute("DELETE FROM kv WHERE key = ?1", [&key])?;
        let revision = next_revision(tx)?;
        tx.execute(
            "INSERT INTO events (revision, key, kind) VALUES (?1, ?2, ?3)",
            params![to_i64(revision), key, EVENT_DELETE],
        )?;
    }
    Ok(())
}

/// The live row of `key`: its mod_revision (expired rows were purged by `write`).
fn mod_revision_of(tx: &Transaction<'_>, key: &str) -> rusqlite::Result<Option<Revision>> {
    tx.prepare_cached("SELECT mod_revision FROM kv WHERE key = ?1")?
        .query_row([key.as_bytes()], |r| Ok(rev(r.get(0)?)))
        .optional()
}

/// Writes `key` at a new revision (keeping create_revision if it exists) and logs the event.
fn put_row(
    tx: &Transaction<'_>,
    key: &str,
    value: Vec<u8>,
    ttl: Option<Duration>,
    now: i64,
) -> rusqlite::Result<KeyValue> {
    let revision = next_revision(tx)?;
    let expires = ttl.map(|t| now.saturating_add(ms(t)));
    // Cached statements: a history flush writes thousands of rows, and preparing
    // each statement again was most of the cost of a row (callgrind, `bench profile`).
    let create_revision: i64 = tx
        .prepare_cached(
            "INSERT INTO kv (key, value, create_revision, mod_revision, expires_at_ms)
             VALUES (?1, ?2, ?3, ?3, ?4)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value,
                 mod_revision = excluded.mod_revision, expires_at_ms = excluded.expires_at_ms
             RETURNING create_revision",
        )?
        .query_row(
            params![key.as_bytes(), value, to_i64(revision), expires],
            |r| r.get(0),
        )?;
    tx.prepare_cached(
        "INSERT INTO events (revision, key, kind, value, create_revision) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        to_i64(revision),
        key.as_bytes(),
        EVENT_PUT,
        value,
        create_revision
    ])?;
    Ok(KeyValue {
        key: key.to_owned(),
        value,
        create_revision: rev(create_revision),
        mod_revision: revision,
    })
}

/// Deletes `key` if present, at a new revision, and logs the event.
fn delete_row(tx: &Transaction<'_>, key: &[u8]) -> rusqlite::Result<Option<Revision>> {
    if tx
        .prepare_cached("DELETE FROM kv WHERE key = ?1")?
        .execute([key])?
        == 0
    {
        return Ok(None);
    }
    let revision = next_revision(tx)?;
    tx.prepare_cached("INSERT INTO events (revision, key, kind) VALUES (?1, ?2, ?3)")?
        .execute(params![to_i64(revision), key, EVENT_DELETE])?;
    Ok(Some(revision))
}

/// The live holder of lease `name`, if any.
fn lease_row(tx: &Transaction<'_>, name: &str, now: i64) -> rusqlite::Result<Option<LeaseInfo>> {
    tx.query_row(
        "SELECT holder, token FROM leases WHERE name = ?1 AND expires_at_ms > ?2",
        params![name, now],
        |r| {
            Ok(LeaseInfo {
                name: name.to_owned(),
                holder: r.get(0)?,
                token: rev(r.get(1)?),
            })
        },
    )
    .optional()
}

fn row_to_kv(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue {
        key: key_string(r.get(0)?)?,
        value: r.get(1)?,
        create_revision: rev(r.get(2)?),
        mod_revision: rev(r.get(3)?),
    })
}

async fn sweeper(inner: Weak<Inner>, mut wake: watch::Receiver<Revision>) {
    let mut last_prune: Option<Instant> = None;
    loop {
        let sleep_for = {
            let Some(inner) = inner.upgrade() else { return };
            let interval = inner.opts.sweep_interval;
            let next = inner
                .read("looking for expired keys".into(), |tx, _| {
                    tx.query_row(
                        "SELECT MIN(expires_at_ms) FROM kv WHERE expires_at_ms IS NOT NULL",
                        [],
                        |r| r.get::<_, Option<i64>>(0),
                    )
                    .map(Ok)
                })
                .await;
            let mut sleep_for = interval;
            match next {
                Ok(Some(at)) if at <= now_ms() => {
                    if let Err(e) = inner
                        .write("purging expired keys".into(), |_, _| Ok(Ok(())))
                        .await
                    {
                        tracing::warn!(error = %e, "sqlite store: purging expired keys failed");
                    } else {
                        continue;
                    }
                }
                Ok(Some(at)) => {
                    let until = Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0));
                    sleep_for = sleep_for.min(until);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "sqlite store: sweeper read failed"),
            }
            if last_prune.is_none_or(|t| t.elapsed() >= interval * 10) {
                last_prune = Some(Instant::now());
                let history = to_i64(inner.opts.history.max(1));
                let pruned = inner
                    .write("pruning the event log".into(), move |tx, _| {
                        let cutoff = to_i64(current_revision(tx)?).saturating_sub(history);
                        if cutoff > 0 {
                            tx.execute("DELETE FROM events WHERE revision <= ?1", [cutoff])?;
                            tx.execute(
                                "UPDATE meta SET compacted = MAX(compacted, ?1) WHERE id = 1",
                                [cutoff],
                            )?;
                        }
                        Ok(Ok(()))
                    })
                    .await;
                if let Err(e) = pruned {
                    tracing::warn!(error = %e, "sqlite store: pruning the event log failed");
                }
            }
            sleep_for
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep_for) => {}
            changed = wake.changed() => if changed.is_err() { return },
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let k = key.to_owned();
        self.inner
            .read(format!("reading key {key:?}"), move |tx, now| {
                tx.prepare_cached(
                    "SELECT key, value, create_revision, mod_revision FROM kv
                     WHERE key = ?1 AND (expires_at_ms IS NULL OR expires_at_ms > ?2)",
                )?
                .query_row(params![k.as_bytes(), now], row_to_kv)
                .optional()
                .map(Ok)
            })
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Listing> {
        let p = prefix.to_owned();
        self.inner
            .read(format!("listing prefix {prefix:?}"), move |tx, now| {
                let revision = current_revision(tx)?;
                // Two statements rather than `(?2 IS NULL OR key < ?2)`, so both are
                // plain range scans of the primary key.
                let kvs = match prefix_end(p.as_bytes()) {
                    Some(end) => tx
                        .prepare_cached(
                            "SELECT key, value, create_revision, mod_revision FROM kv
                             WHERE key >= ?1 AND key < ?2
                               AND (expires_at_ms IS NULL OR expires_at_ms > ?3)
                             ORDER BY key",
                        )?
                        .query_map(params![p.as_bytes(), end, now], row_to_kv)?
                        .collect::<rusqlite::Result<Vec<_>>>()?,
                    None => tx
                        .prepare_cached(
                            "SELECT key, value, create_revision, mod_revision FROM kv
                             WHERE key >= ?1 AND (expires_at_ms IS NULL OR expires_at_ms > ?2)
                             ORDER BY key",
                        )?
                        .query_map(params![p.as_bytes(), now], row_to_kv)?
                        .collect::<rusqlite::Result<Vec<_>>>()?,
                };
                Ok(Ok(Listing { kvs, revision }))
            })
            .await
    }

    async fn revision(&self) -> Result<Revision> {
        self.inner
            .read("reading the revision".into(), |tx, _| {
                current_revision(tx).map(Ok)
            })
            .await
    }

    async fn create(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let k = key.to_owned();
        self.inner
            .write(format!("creating key {key:?}"), move |tx, now| {
                if mod_revision_of(tx, &k)?.is_some() {
                    return Ok(Err(Error::AlreadyExists { key: k }));
                }
                put_row(tx, &k, value, ttl, now).map(Ok)
            })
            .await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
        ttl: Option<Duration>,
    ) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let k = key.to_owned();
        self.inner
            .write(
                format!("updating key {key:?}"),
                move |tx, now| match mod_revision_of(tx, &k)? {
                    None => Ok(Err(Error::NotFound { key: k })),
                    Some(actual) if actual != expected => Ok(Err(Error::Conflict {
                        key: k,
                        expected,
                        actual,
                    })),
                    Some(_) => put_row(tx, &k, value, ttl, now).map(Ok),
                },
            )
            .await
    }

    async fn put(&self, key: &str, value: Vec<u8>, ttl: Option<Duration>) -> Result<KeyValue> {
        check_key(key)?;
        check_ttl(key, ttl)?;
        let k = key.to_owned();
        self.inner
            .write(format!("writing key {key:?}"), move |tx, now| {
                put_row(tx, &k, value, ttl, now).map(Ok)
            })
            .await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Revision> {
        check_key(key)?;
        let k = key.to_owned();
        self.inner
            .write(format!("deleting key {key:?}"), move |tx, _| {
                match (mod_revision_of(tx, &k)?, expected) {
                    (None, _) => return Ok(Err(Error::NotFound { key: k })),
                    (Some(actual), Some(expected)) if actual != expected => {
                        return Ok(Err(Error::Conflict {
                            key: k,
                            expected,
                            actual,
                        }));
                    }
                    _ => {}
                }
                let revision = delete_row(tx, k.as_bytes())?;
                Ok(Ok(revision.unwrap_or_default()))
            })
            .await
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        let after = match start_revision {
            0 => self.revision().await?,
            n => n - 1,
        };
        // Fail at once (compacted history) rather than as the stream's first item.
        // The first batch is then fetched again by the watch task; it is cheap.
        self.inner.fetch_events(prefix.to_owned(), after).await?;
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.to_owned();
        Ok(spawn_watch(
            move |after| inner.fetch_events(prefix.clone(), after),
            after,
            self.inner.wake.subscribe(),
            Some(self.inner.opts.poll_interval),
        ))
    }

    async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        check_lease_args(name, holder, ttl)?;
        let start = Instant::now();
        let (n, h) = (name.to_owned(), holder.to_owned());
        let token = self
            .inner
            .write(format!("acquiring lease {name:?}"), move |tx, now| {
                let held: Option<i64> = tx
                    .query_row(
                        "SELECT expires_at_ms FROM leases WHERE name = ?1",
                        [&n],
                        |r| r.get(0),
                    )
                    .optional()?;
                if held.is_some_and(|expires| expires > now) {
                    return Ok(Ok(None));
                }
                let token: i64 = tx.query_row(
                    "UPDATE meta SET lease_seq = lease_seq + 1 WHERE id = 1 RETURNING lease_seq",
                    [],
                    |r| r.get(0),
                )?;
                tx.execute(
                    "INSERT OR REPLACE INTO leases (name, holder, token, expires_at_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![n, h, token, now.saturating_add(ms(ttl))],
                )?;
                Ok(Ok(Some(token)))
            })
            .await?;
        Ok(token.map(|token| Lease {
            name: name.to_owned(),
            holder: holder.to_owned(),
            token: rev(token),
            id: token,
            ttl,
            valid_until: start + ttl,
        }))
    }

    async fn lease_renew(&self, lease: &Lease) -> Result<Lease> {
        let start = Instant::now();
        let (name, token, ttl) = (lease.name.clone(), to_i64(lease.token), lease.ttl);
        let renewed = self
            .inner
            .write(
                format!("renewing lease {:?}", lease.name),
                move |tx, now| {
                    let n = tx.execute(
                        "UPDATE leases SET expires_at_ms = ?1
                     WHERE name = ?2 AND token = ?3 AND expires_at_ms > ?4",
                        params![now.saturating_add(ms(ttl)), name, token, now],
                    )?;
                    Ok(Ok(n == 1))
                },
            )
            .await?;
        if !renewed {
            return Err(Error::LeaseLost {
                name: lease.name.clone(),
                holder: lease.holder.clone(),
            });
        }
        Ok(Lease {
            valid_until: start + lease.ttl,
            ..lease.clone()
        })
    }

    async fn lease_release(&self, lease: &Lease) -> Result<()> {
        let (name, token) = (lease.name.clone(), to_i64(lease.token));
        self.inner
            .write(format!("releasing lease {:?}", lease.name), move |tx, _| {
                tx.execute(
                    "DELETE FROM leases WHERE name = ?1 AND token = ?2",
                    params![name, token],
                )?;
                Ok(Ok(()))
            })
            .await
    }

    async fn lease_info(&self, name: &str) -> Result<Option<LeaseInfo>> {
        let n = name.to_owned();
        self.inner
            .read(format!("reading lease {name:?}"), move |tx, now| {
                lease_row(tx, &n, now).map(Ok)
            })
            .await
    }

    async fn txn(&self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome> {
        check_txn(compares, ops)?;
        let (compares, ops) = (compares.to_vec(), ops.to_vec());
        let what = format!("applying a transaction of {} ops", ops.len());
        self.inner
            .write(what, move |tx, now| {
                // `write` purged expired keys: every row left is live.
                let mut found = Vec::with_capacity(compares.len());
                for c in &compares {
                    found.push(match c {
                        Compare::ModRevision { key, .. }
                        | Compare::Exists { key }
                        | Compare::Absent { key } => Found::Key(mod_revision_of(tx, key)?),
                        Compare::LeaseHeld { lease } => {
                            Found::Lease(lease_row(tx, &lease.name, now)?)
                        }
                    });
                }
                if let Some(failed) = first_failure(&compares, &found) {
                    return Ok(Ok(failed));
                }
                for op in ops {
                    match op {
                        Op::Put { key, value, ttl } => {
                            put_row(tx, &key, value, ttl, now)?;
                        }
                        Op::Delete { key } => {
                            delete_row(tx, key.as_bytes())?;
                        }
                        Op::DeletePrefix { prefix } => {
                            let start = prefix.as_bytes();
                            let keys: Vec<Vec<u8>> = tx
                                .prepare_cached(
                                    "SELECT key FROM kv WHERE key >= ?1 AND (?2 IS NULL OR key < ?2)
                                     ORDER BY key",
                                )?
                                .query_map(params![start, prefix_end(start)], |r| r.get(0))?
                                .collect::<rusqlite::Result<_>>()?;
                            for key in keys {
                                delete_row(tx, &key)?;
                            }
                        }
                    }
                }
                Ok(Ok(TxnOutcome::Committed {
                    revision: current_revision(tx)?,
                }))
            })
            .await
    }
}
