//! The history of rollouts in the store (`/tern/rollout-history/`): one record per
//! rollout (`rollouts/<id>`: its versions, groups, when it began and ended, what
//! replaced it) and, under it, one record per write of the rollout that changed
//! something (`records/<id>/<store revision>-<n>`: the events and progress samples
//! `tern_core::rollout_history::changes` finds) and one per accepted admin action on
//! rollouts (who, what). Every replica watches the rollout (`server::watch_loop`) and
//! writes what a write changed under that write's store revision with a `create`, so
//! that the replicas write each change once whoever made it (the leader's reconcile,
//! a transition, an `apply`). Bounded: [`MAX_ROLLOUTS`] rollouts, [`MAX_RECORDS`] records
//! each (`to_prune`). Read with `GET /v1/agents/history` (`ternctl agents history`,
//! the dashboard's timeline).

use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use tern_core::resource::AutoUpdateAgentRollout;
use tern_core::rollout_history::{
    Change, Event, HistoryResponse, Identity, MAX_RECORDS, MAX_ROLLOUTS, RolloutHistory,
    RolloutRecord, kind, to_prune,
};
use tern_store::{Op, Store, WatchEvent};

use crate::error::{ApiError, ApiResult};
use crate::keys;

const ROLLOUTS: &str = keys::ROLLOUT_HISTORY_ROLLOUTS;
const RECORDS: &str = keys::ROLLOUT_HISTORY_RECORDS;

/// Records are listed for pruning every this many writes of this process.
const PRUNE_EVERY: u64 = 50;
static WRITES: AtomicU64 = AtomicU64::new(0);

/// The history's key for a rollout: its start time (so that keys sort oldest first),
/// then a digest of its versions (two rollouts made at one instant differ).
fn id_of(identity: &Identity) -> String {
    // FNV-1a: stable across builds and replicas, which is all a key needs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity
        .start_version
        .bytes()
        .chain([0])
        .chain(identity.target_version.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let nanos = identity.start_time.map_or(0, |t| t.as_nanosecond().max(0));
    format!("{nanos:020}-{h:016x}")
}

fn records_of(id: &str) -> String {
    format!("{RECORDS}{id}/")
}

/// What one record holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    samples: Vec<tern_core::rollout_history::Sample>,
}

/// What a replica's watch last saw of the rollout, to tell what the next write changed.
pub(crate) struct Observer {
    last: Option<AutoUpdateAgentRollout>,
}

impl Observer {
    /// Starts from the rollout stored now (what changed while no replica watched is
    /// not told, but the rollout is recorded when it has no record yet).
    pub(crate) async fn start(store: &dyn Store, now: Timestamp) -> Self {
        let last = match store.get(keys::ROLLOUT).await {
            Ok(Some(kv)) => serde_json::from_slice(&kv.value).ok(),
            _ => None,
        };
        if let Some(r) = &last
            && let Err(e) = ensure_rollout(store, r, now).await
        {
            tracing::warn!(error = %e, "recording the rollout in its history failed");
        }
        Self { last }
    }

    /// Records what a change of the store did to the rollout, when `ev` is one.
    pub(crate) async fn observe(&mut self, store: &dyn Store, ev: &WatchEvent, now: Timestamp) {
        if ev.key() != keys::ROLLOUT {
            return;
        }
        let next: Option<AutoUpdateAgentRollout> = match ev {
            WatchEvent::Put(kv) => match serde_json::from_slice(&kv.value) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "the rollout's history: the stored rollout does not parse");
                    return;
                }
            },
            WatchEvent::Delete { .. } => None,
        };
        let changes = tern_core::rollout_history::changes(self.last.as_ref(), next.as_ref(), now);
        if let Err(e) = write(
            store,
            ev.revision(),
            &changes,
            self.last.as_ref(),
            next.as_ref(),
            now,
        )
        .await
        {
            tracing::warn!(error = %e, "writing the rollout's history failed");
        }
        self.last = next;
    }
}

/// Writes the record of a rollout that has none.
async fn ensure_rollout(
    store: &dyn Store,
    r: &AutoUpdateAgentRollout,
    now: Timestamp,
) -> ApiResult<()> {
    let identity = Identity::of(r);
    let id = id_of(&identity);
    let record = RolloutRecord {
        id: id.clone(),
        identity,
        groups: r.status.groups.iter().map(|g| g.name.clone()).collect(),
        created: r.status.start_time.unwrap_or(now),
        ended: None,
        replaced_by: None,
    };
    let bytes = encode(&record)?;
    match store.create(&format!("{ROLLOUTS}{id}"), bytes, None).await {
        Ok(_) => prune_rollouts(store).await,
        Err(tern_store::Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn encode<T: serde::Serialize>(v: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(v)
        .map_err(|e| ApiError::internal(format!("encoding the rollout's history: {e}")))
}

async fn write(
    store: &dyn Store,
    revision: tern_store::Revision,
    changes: &[Change],
    before: Option<&AutoUpdateAgentRollout>,
    after: Option<&AutoUpdateAgentRollout>,
    now: Timestamp,
) -> ApiResult<()> {
    for (n, change) in changes.iter().enumerate() {
        let id = id_of(&change.rollout);
        let ended = change
            .events
            .iter()
            .any(|e| e.kind == kind::ROLLOUT_REPLACED || e.kind == kind::ROLLOUT_DELETED);
        if let Some(a) = after.filter(|a| Identity::of(a) == change.rollout) {
            ensure_rollout(store, a, now).await?;
        } else if let Some(b) = before.filter(|b| Identity::of(b) == change.rollout) {
            ensure_rollout(store, b, now).await?;
        }
        if ended {
            end_rollout(store, &id, after.map(Identity::of), now).await?;
        }
        let key = format!("{}{revision:020}-{n}", records_of(&id));
        let record = Record {
            events: change.events.clone(),
            samples: change.samples.clone(),
        };
        match store.create(&key, encode(&record)?, None).await {
            // Another replica saw the same write first: the same record.
            Ok(_) | Err(tern_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if WRITES.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            prune_records(store, &id).await?;
        }
    }
    Ok(())
}

/// Marks a rollout ended (replaced by `by`, or deleted), once.
async fn end_rollout(
    store: &dyn Store,
    id: &str,
    by: Option<Identity>,
    now: Timestamp,
) -> ApiResult<()> {
    let key = format!("{ROLLOUTS}{id}");
    let Some(kv) = store.get(&key).await? else {
        return Ok(());
    };
    let Ok(mut record) = serde_json::from_slice::<RolloutRecord>(&kv.value) else {
        return Ok(());
    };
    if record.ended.is_some() {
        return Ok(());
    }
    record.ended = Some(now);
    record.replaced_by = by;
    match store
        .compare_and_swap(&key, kv.mod_revision, encode(&record)?, None)
        .await
    {
        // Another replica marked it first.
        Ok(_) | Err(tern_store::Error::Conflict { .. } | tern_store::Error::NotFound { .. }) => {
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps the newest [`MAX_ROLLOUTS`]: an older one goes with its records.
async fn prune_rollouts(store: &dyn Store) -> ApiResult<()> {
    let listing = store.list(ROLLOUTS).await?;
    let excess = listing.kvs.len().saturating_sub(MAX_ROLLOUTS);
    // Listed sorted by key, and keys sort by start time: the oldest first.
    for kv in &listing.kvs[..excess] {
        let id = &kv.key[ROLLOUTS.len()..];
        store
            .txn(
                &[],
                &[
                    Op::delete(kv.key.clone()),
                    Op::delete_prefix(records_of(id)),
                ],
            )
            .await?;
    }
    Ok(())
}

/// Keeps a rollout's records within [`MAX_RECORDS`].
async fn prune_records(store: &dyn Store, id: &str) -> ApiResult<()> {
    let listing = store.list(&records_of(id)).await?;
    if listing.kvs.len() <= MAX_RECORDS {
        return Ok(());
    }
    let records: Vec<(&str, bool)> = listing
        .kvs
        .iter()
        .map(|kv| {
            let events = serde_json::from_slice::<Record>(&kv.value)
                .map(|r| !r.events.is_empty())
                .unwrap_or(true);
            (kv.key.as_str(), events)
        })
        .collect();
    for key in to_prune(&records, MAX_RECORDS) {
        match store.delete(key, None).await {
            Ok(_) | Err(tern_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whether an admin write at `path` acts on rollouts (its record says who asked).
fn acts_on_rollouts(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    // A host joining acts on no rollout (and a fleet enrolling would flood the history).
    path.starts_with("/v1/agents/") && path != "/v1/agents/join"
        || path.starts_with("/v1/resources/")
        || path == "/v1/freeze"
        || path.starts_with("/v1/inventory/") && path.ends_with("/pin")
}

/// Records an accepted admin action on rollouts under the rollout stored now (after
/// the action: `new-rollout` is told in the rollout it made). A failure is logged,
/// never turned into a failure of the action.
pub(crate) async fn record_action(
    store: &dyn Store,
    now: Timestamp,
    actor: &crate::auth::Actor,
    method: &str,
    path: &str,
) {
    if !acts_on_rollouts(path) || method == "GET" {
        return;
    }
    if let Err(e) = write_action(store, now, actor, method, path).await {
        tracing::warn!(error = %e, "recording an action in the rollout's history failed");
    }
}

async fn write_action(
    store: &dyn Store,
    now: Timestamp,
    actor: &crate::auth::Actor,
    method: &str,
    path: &str,
) -> ApiResult<()> {
    let Some(kv) = store.get(keys::ROLLOUT).await? else {
        return Ok(());
    };
    let rollout: AutoUpdateAgentRollout = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("the stored rollout: {e}")))?;
    ensure_rollout(store, &rollout, now).await?;
    let who = if actor.principal.is_empty() {
        format!("token {}", actor.token_id)
    } else {
        actor.principal.clone()
    };
    let record = Record {
        events: vec![Event::action(now, &who, actor.role.as_str(), method, path)],
        samples: Vec::new(),
    };
    // After the write it caused (the revision it left), before any later one.
    let revision = store.revision().await?;
    let key = format!(
        "{}{revision:020}-a{}",
        records_of(&id_of(&Identity::of(&rollout))),
        crate::auth::random_hex(4)?
    );
    store.put(&key, encode(&record)?, None).await?;
    Ok(())
}

/// The newest `limit` rollouts, newest first, each with its events and progress.
pub(crate) async fn list(store: &dyn Store, limit: usize) -> ApiResult<HistoryResponse> {
    let listing = store.list(ROLLOUTS).await?;
    let mut rollouts = Vec::new();
    for kv in listing.kvs.iter().rev().take(limit) {
        let rollout: RolloutRecord = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("rollout history {}: {e}", kv.key)))?;
        let records = store.list(&records_of(&rollout.id)).await?;
        let mut h = RolloutHistory {
            rollout,
            ..RolloutHistory::default()
        };
        for r in &records.kvs {
            let r: Record = serde_json::from_slice(&r.value)
                .map_err(|e| ApiError::internal(format!("rollout history {}: {e}", r.key)))?;
            h.events.extend(r.events);
            h.progress.extend(r.samples);
        }
        rollouts.push(h);
    }
    Ok(HistoryResponse { rollouts })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tern_core::resource::{Canary, GroupState};

    fn rollout(target: &str, at: &str) -> AutoUpdateAgentRollout {
        let config = tern_core::resource::AutoUpdateConfig::from_text(
            &tern_core::fixtures::halt_on_error(&[("dev", 10, 1, 0), ("prod", 12, 0, 0)]),
        )
        .unwrap();
        let version = tern_core::resource::AutoUpdateVersion::from_text(
            &tern_core::fixtures::version("1.0.0", target, "regular"),
        )
        .unwrap();
        let resources = tern_core::reconcile::Resources {
            config: Some(&config),
            version: Some(&version),
            rollout: None,
            frozen: false,
        };
        match tern_core::reconcile::renew(at.parse().unwrap(), resources, false) {
            tern_core::reconcile::Renewal::Fresh { rollout, .. } => *rollout,
            _ => panic!("no rollout"),
        }
    }

    /// Writes `r` as the rollout and has two replicas' observers see the write.
    async fn store_rollout(
        store: &dyn Store,
        observers: &mut [Observer],
        r: &AutoUpdateAgentRollout,
        now: &str,
    ) {
        let kv = store
            .put(keys::ROLLOUT, serde_json::to_vec(r).unwrap(), None)
            .await
            .unwrap();
        for o in observers {
            o.observe(store, &WatchEvent::Put(kv.clone()), now.parse().unwrap())
                .await;
        }
    }

    /// A rollout whose canary fails, replaced by `new-rollout`: both stay in the
    /// history, each write told once though two replicas saw it, and it outlives the
    /// process (a store opened again).
    async fn a_replaced_rollout_stays(
        store: Arc<dyn Store>,
        reopen: impl AsyncFnOnce() -> Arc<dyn Store>,
    ) {
        let t0 = "2026-11-23T09:00:00Z";
        let mut observers = [
            Observer::start(&*store, t0.parse().unwrap()).await,
            Observer::start(&*store, t0.parse().unwrap()).await,
        ];
        let first = rollout("1.2.0", t0);
        store_rollout(&*store, &mut observers, &first, t0).await;
        let mut failed = first.clone();
        let dev = &mut failed.status.groups[0];
        dev.state = GroupState::Canary;
        dev.last_update_reason = "in_window".into();
        dev.present_count = 2;
        dev.failed_count = 1;
        dev.canaries = vec![Canary {
            updater_id: "u1".into(),
            failed: true,
            reason: "the agent is not running (5 checks in a row)".into(),
            ..Canary::default()
        }];
        store_rollout(&*store, &mut observers, &failed, "2026-11-23T10:05:00Z").await;
        let actor = crate::auth::Actor {
            token_id: "abc".into(),
            role: tern_core::api::Role::Operator,
            bound_to: None,
            principal: "alice".into(),
            minted_by: Vec::new(),
            speaks_for: "alice".into(),
            controller: false,
        };
        let second = rollout("1.2.1", "2026-11-23T10:10:00Z");
        store_rollout(&*store, &mut observers, &second, "2026-11-23T10:10:00Z").await;
        record_action(
            &*store,
            "2026-11-23T10:10:00Z".parse().unwrap(),
            &actor,
            "POST",
            "/v1/agents/new-rollout",
        )
        .await;
        drop(store);
        let store = reopen().await;
        let h = list(&*store, 5).await.unwrap();
        assert_eq!(h.rollouts.len(), 2, "{h:?}");
        let (new, old) = (&h.rollouts[0], &h.rollouts[1]);
        assert_eq!(new.rollout.identity.target_version, "1.2.1");
        assert_eq!(old.rollout.identity.target_version, "1.2.0");
        assert_eq!(
            old.rollout
                .replaced_by
                .as_ref()
                .map(|i| i.target_version.as_str()),
            Some("1.2.1")
        );
        let kinds: Vec<&str> = old.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                kind::ROLLOUT_CREATED,
                kind::GROUP,
                kind::CANARY_PICKED,
                kind::CANARY_FAILED,
                kind::ROLLOUT_REPLACED
            ],
            "{:?}",
            old.events
        );
        assert!(
            old.events[3]
                .message
                .contains("not running (5 checks in a row)")
        );
        let dev: Vec<(u64, u64, u64)> = old
            .progress
            .iter()
            .filter(|s| s.group == "dev")
            .map(|s| (s.on_target, s.failed, s.pending))
            .collect();
        assert_eq!(dev, [(0, 0, 0), (0, 1, 1)]);
        assert_eq!(new.events[0].kind, kind::ROLLOUT_CREATED);
        let action = new.events.last().unwrap();
        assert_eq!(action.kind, kind::ACTION);
        assert_eq!(action.who, "alice");
        assert_eq!(
            action.message,
            "alice (operator): POST /v1/agents/new-rollout"
        );
        assert_eq!(list(&*store, 1).await.unwrap().rollouts.len(), 1);
    }

    #[tokio::test]
    async fn a_replaced_rollout_stays_in_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store: Arc<dyn Store> = Arc::new(tern_store::SqliteStore::open(&path).await.unwrap());
        a_replaced_rollout_stays(store, async || -> Arc<dyn Store> {
            let s: Arc<dyn Store> = Arc::new(tern_store::SqliteStore::open(&path).await.unwrap());
            s
        })
        .await;
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn a_replaced_rollout_stays_in_etcd() {
        let cluster = tern_testing::etcd::EtcdCluster::start(1).await;
        let connect = async || -> Arc<dyn Store> {
            let s: Arc<dyn Store> = Arc::new(
                tern_store::EtcdStore::connect(
                    &cluster.endpoints(),
                    "/tern/",
                    tern_store::EtcdOptions::default(),
                )
                .await
                .unwrap(),
            );
            s
        };
        a_replaced_rollout_stays(connect().await, connect).await;
    }

    #[tokio::test]
    async fn rollouts_past_the_bound_go_with_their_records() {
        let store = tern_store::MemoryStore::new();
        let mut observers =
            [Observer::start(&store, "2026-11-23T09:00:00Z".parse().unwrap()).await];
        for i in 0..MAX_ROLLOUTS + 3 {
            let at = format!("2026-11-{:02}T09:00:00Z", i + 1);
            let r = rollout(&format!("1.{}.0", i + 1), &at);
            store_rollout(&store, &mut observers, &r, &at).await;
        }
        let h = list(&store, usize::MAX).await.unwrap();
        assert_eq!(h.rollouts.len(), MAX_ROLLOUTS);
        assert_eq!(
            h.rollouts[0].rollout.identity.target_version,
            format!("1.{}.0", MAX_ROLLOUTS + 3)
        );
        assert_eq!(
            h.rollouts[MAX_ROLLOUTS - 1].rollout.identity.target_version,
            "1.4.0"
        );
        let records = store.list(RECORDS).await.unwrap();
        assert!(
            records
                .kvs
                .iter()
                .all(|kv| !kv.key.starts_with(&records_of(&id_of(&Identity {
                    start_version: "1.0.0".into(),
                    target_version: "1.1.0".into(),
                    start_time: Some("2026-11-01T09:00:00Z".parse().unwrap()),
                })))),
        );
        assert!(!records.kvs.is_empty());
    }

    #[test]
    fn rollout_actions_are_told_and_others_not() {
        assert!(acts_on_rollouts("/v1/agents/start-update"));
        assert!(acts_on_rollouts("/v1/resources/config?force=true"));
        assert!(acts_on_rollouts("/v1/inventory/u1/pin"));
        assert!(!acts_on_rollouts("/v1/tokens"));
        assert!(!acts_on_rollouts("/v1/agents/join"));
        assert!(!acts_on_rollouts("/v1/inventory/u1"));
    }
}
