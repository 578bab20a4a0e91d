//! The audit trail: every admin write and token change, done or refused, with the
//! token that asked (id and role), kept in the store under `/tern/audit/` (the newest
//! [`KEEP`] records; older ones are pruned) and logged. Read with `GET /v1/audit`
//! (`ternctl events`).

use jiff::Timestamp;
use tern_core::api::AuditRecord;
use tern_store::Store;

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::keys;

/// Records kept in the store (plus up to `PRUNE_SLACK` per replica between prunes).
pub(crate) const KEEP: usize = 1000;
const PRUNE_SLACK: usize = 100;

/// Writes one record (and prunes the oldest past the bound). A failure to audit is
/// logged, never turned into a failure of the write it describes.
pub(crate) async fn record(
    store: &dyn Store,
    now: Timestamp,
    replica: &str,
    actor: &Actor,
    method: &str,
    path: &str,
    status: u16,
) {
    let record = AuditRecord {
        time: now,
        token_id: actor.token_id.clone(),
        role: actor.role,
        method: method.to_string(),
        path: path.to_string(),
        status,
        replica: replica.to_string(),
    };
    tracing::info!(
        target: "tern::audit",
        token_id = %record.token_id,
        role = %record.role,
        method,
        path,
        status,
        "admin request"
    );
    if let Err(e) = write(store, &record).await {
        tracing::warn!(error = %e, "writing the audit record failed");
    }
}

async fn write(store: &dyn Store, record: &AuditRecord) -> ApiResult<()> {
    let bytes = serde_json::to_vec(record)
        .map_err(|e| ApiError::internal(format!("encoding an audit record: {e}")))?;
    // Sorted by time, then by this process's sequence (a dev clock stands still), then
    // a random suffix so that replicas never collide.
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = format!(
        "{}{:020}-{seq:016}-{}",
        keys::AUDIT_PREFIX,
        record.time.as_nanosecond().max(0),
        crate::auth::random_hex(4)?
    );
    store.put(&key, bytes, None).await?;
    // The trail is listed every PRUNE_SLACK writes of this replica, not at each: a
    // flood of admin requests must not cost a listing each. Every replica prunes, so
    // the trail holds at most KEEP plus PRUNE_SLACK per replica.
    if seq % PRUNE_SLACK as u64 != PRUNE_SLACK as u64 - 1 {
        return Ok(());
    }
    let listing = store.list(keys::AUDIT_PREFIX).await?;
    if listing.kvs.len() > KEEP {
        let mut keys: Vec<&str> = listing.kvs.iter().map(|kv| kv.key.as_str()).collect();
        keys.sort_unstable();
        for key in &keys[..keys.len() - KEEP] {
            match store.delete(key, None).await {
                // Another replica (or request) pruned it first.
                Ok(_) | Err(tern_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// The newest `limit` records, oldest first.
pub(crate) async fn list(store: &dyn Store, limit: usize) -> ApiResult<Vec<AuditRecord>> {
    let listing = store.list(keys::AUDIT_PREFIX).await?;
    let mut kvs = listing.kvs;
    kvs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    let skip = kvs.len().saturating_sub(limit);
    kvs[skip..]
        .iter()
        .map(|kv| {
            serde_json::from_slice(&kv.value)
                .map_err(|e| ApiError::internal(format!("audit record {}: {e}", kv.key)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::api::Role;

    #[tokio::test]
    async fn the_trail_keeps_the_newest_records_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = tern_store::SqliteStore::open(&dir.path().join("t.db"))
            .await
            .unwrap();
        let actor = Actor {
            token_id: "abc".into(),
            role: Role::User,
            bound_to: None,
        };
        let t0: Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
        let n = KEEP + PRUNE_SLACK + 50;
        for i in 0..n {
            let at = t0 + jiff::SignedDuration::from_secs(i64::try_from(i).unwrap());
            record(&store, at, "r1", &actor, "POST", &format!("/v1/x/{i}"), 200).await;
        }
        let all = list(&store, usize::MAX).await.unwrap();
        assert!(all.len() <= KEEP + PRUNE_SLACK, "{} kept", all.len());
        assert!(all.len() >= KEEP);
        assert_eq!(
            all.last().unwrap().path,
            format!("/v1/x/{}", n - 1),
            "the newest stays"
        );
        assert!(
            all.windows(2).all(|w| w[0].time <= w[1].time),
            "oldest first"
        );
        let newest = list(&store, 3).await.unwrap();
        assert_eq!(newest.len(), 3);
        assert_eq!(newest[2].path, format!("/v1/x/{}", n - 1));
    }
}
