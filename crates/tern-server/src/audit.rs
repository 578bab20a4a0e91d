//! The audit trail: every admin write and token change, done or refused, with the
//! token that asked (id and role), logged, and kept in the store in two trails: the
//! accepted actions (answered below 400) under `/tern/audit/`, the refused attempts
//! under `/tern/audit-refused/`, each about [`KEEP`] records. Apart, so that a token
//! that may only read cannot push the actions of others out of the trail by sending
//! refused requests; and pruned token by token ([`to_prune`]: the oldest record of the
//! token holding the most goes first), so that no one token's flood pushes out another
//! token's actions. Read-level routes are not audited at all (`routes::authorize`). Read
//! with `GET /v1/audit` (`ternctl events`).

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
    if status < 400 {
        crate::rollout_history::record_action(store, now, actor, method, path).await;
    }
    let trail = if status < 400 { &ACCEPTED } else { &REFUSED };
    if let Err(e) = write(store, trail, &record).await {
        tracing::warn!(error = %e, "writing the audit record failed");
    }
}

/// One of the two trails: its prefix and this process's count of writes to it (when
/// to prune).
struct Trail {
    prefix: &'static str,
    writes: std::sync::atomic::AtomicU64,
}

static ACCEPTED: Trail = Trail {
    prefix: keys::AUDIT_PREFIX,
    writes: std::sync::atomic::AtomicU64::new(0),
};
static REFUSED: Trail = Trail {
    prefix: keys::AUDIT_REFUSED_PREFIX,
    writes: std::sync::atomic::AtomicU64::new(0),
};

/// This process's sequence over both trails, so that they merge in order.
static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

async fn write(store: &dyn Store, trail: &Trail, record: &AuditRecord) -> ApiResult<()> {
    let bytes = serde_json::to_vec(record)
        .map_err(|e| ApiError::internal(format!("encoding an audit record: {e}")))?;
    // Sorted by time, then by this process's sequence (a dev clock stands still), then
    // a random suffix so that replicas never collide.
    let seq = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = format!(
        "{}{:020}-{seq:016}-{}",
        trail.prefix,
        record.time.as_nanosecond().max(0),
        crate::auth::random_hex(4)?
    );
    store.put(&key, bytes, None).await?;
    // The trail is listed every PRUNE_SLACK writes of this replica, not at each: a
    // flood of admin requests must not cost a listing each. Every replica prunes, so
    // the trail holds at most KEEP plus PRUNE_SLACK per replica.
    let writes = trail
        .writes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if writes % PRUNE_SLACK as u64 != PRUNE_SLACK as u64 - 1 {
        return Ok(());
    }
    let listing = store.list(trail.prefix).await?;
    if listing.kvs.len() > KEEP {
        let records: Vec<(&str, String)> = listing
            .kvs
            .iter()
            .map(|kv| {
                let token = serde_json::from_slice::<AuditRecord>(&kv.value)
                    .map(|r| r.token_id)
                    .unwrap_or_default();
                (kv.key.as_str(), token)
            })
            .collect();
        for key in to_prune(&records, listing.kvs.len() - KEEP) {
            match store.delete(key, None).await {
                // Another replica (or request) pruned it first.
                Ok(_) | Err(tern_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Which `excess` of a trail's `records` (key, token id) to prune: each time, the
/// oldest record of the token that holds the most (of two holding as many, the one
/// whose oldest record is older). So a token's flood prunes its own records: another
/// token's go only once it holds as many as the flooder, and a token with a handful of
/// actions keeps them while others hold hundreds.
fn to_prune<'a>(records: &[(&'a str, String)], excess: usize) -> Vec<&'a str> {
    let mut by_token: std::collections::HashMap<&str, Vec<&'a str>> =
        std::collections::HashMap::new();
    for (key, token) in records {
        by_token.entry(token.as_str()).or_default().push(key);
    }
    // Newest first, so that the oldest is popped from the end.
    let mut queues: Vec<Vec<&'a str>> = by_token
        .into_values()
        .map(|mut keys| {
            keys.sort_unstable_by(|a, b| b.cmp(a));
            keys
        })
        .collect();
    let mut pruned = Vec::with_capacity(excess);
    for _ in 0..excess {
        let Some(q) = queues
            .iter_mut()
            .filter(|q| !q.is_empty())
            .max_by(|a, b| a.len().cmp(&b.len()).then_with(|| b.last().cmp(&a.last())))
        else {
            break;
        };
        if let Some(key) = q.pop() {
            pruned.push(key);
        }
    }
    pruned
}

/// The newest `limit` accepted actions and the newest `limit` refused attempts,
/// together, oldest first.
pub(crate) async fn list(store: &dyn Store, limit: usize) -> ApiResult<Vec<AuditRecord>> {
    let mut all = newest(store, keys::AUDIT_PREFIX, limit).await?;
    all.extend(newest(store, keys::AUDIT_REFUSED_PREFIX, limit).await?);
    // The keys (less their prefix) sort by time, then by the writing process's sequence.
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

/// The newest `limit` records under `prefix` with their keys, oldest first.
async fn newest(
    store: &dyn Store,
    prefix: &str,
    limit: usize,
) -> ApiResult<Vec<(String, AuditRecord)>> {
    let listing = store.list(prefix).await?;
    let mut kvs = listing.kvs;
    kvs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    let skip = kvs.len().saturating_sub(limit);
    kvs[skip..]
        .iter()
        .map(|kv| {
            let r = serde_json::from_slice(&kv.value)
                .map_err(|e| ApiError::internal(format!("audit record {}: {e}", kv.key)))?;
            // The key without its trail's prefix: time, then sequence.
            Ok((kv.key[prefix.len()..].to_string(), r))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::api::Role;

    #[test]
    fn a_flood_prunes_the_flooders_records_first() {
        // Keys sort by time: k000 is the oldest.
        let keys: Vec<String> = (0..20).map(|i| format!("k{i:03}")).collect();
        let mut records: Vec<(&str, String)> = Vec::new();
        records.push((&keys[0], "user".into()));
        records.push((&keys[1], "operator".into()));
        for k in &keys[2..18] {
            records.push((k, "flood".into()));
        }
        records.push((&keys[18], "user".into()));
        records.push((&keys[19], "other".into()));
        let pruned = to_prune(&records, 10);
        assert_eq!(
            pruned,
            keys[2..12].iter().map(String::as_str).collect::<Vec<_>>()
        );
        // Once the flooder holds no more than the others, the oldest of the largest go.
        let pruned = to_prune(&records, 16);
        assert_eq!(pruned.len(), 16);
        assert!(pruned.contains(&"k000"), "{pruned:?}");
        assert!(
            !pruned.contains(&"k001") && !pruned.contains(&"k019"),
            "{pruned:?}"
        );
        assert!(to_prune(&records, 0).is_empty());
        assert_eq!(to_prune(&records, 100).len(), 20);
    }

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
            principal: "alice".into(),
            minted_by: Vec::new(),
            speaks_for: "alice".into(),
            controller: false,
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
