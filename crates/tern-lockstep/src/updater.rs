//! The updater: every replica campaigns for one lease; the holder polls the release
//! source, asks [`updater_next`](tern_core::lockstep::protocol::updater_next) what to do
//! and does it: start an update (or a catch-up of servers that missed the completed
//! version), set `stop` (and alert), raise or clear `lockstep_stalled`, or record a
//! completed update (and clear the alert).
//!
//! Every write is one `Store::txn` guarded by `LeaseHeld` on the leader lease (and the
//! request's revision): a former leader that was paused or cut off writes nothing, even
//! if it has not noticed yet.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jiff::Timestamp;
use tern_core::alert::kind;
use tern_core::lockstep::protocol::{
    Artifact, ServerId, UpdateRequest, UpdaterAction, UpdaterIdle, UpdaterView, updater_next,
};
use tern_core::lockstep::release::{Candidate, Environment, TagPrefix, pick};
use tern_core::resource::Alert;
use tern_outbound::notify::{Notice, NoticeEvent, Notifiers, NotifySettings};
use tern_store::{Compare, Lease, LeaseKeeper, Op, Store, TxnOutcome};
use tokio::time::Instant;

use crate::changes::Changes;
use crate::keys;
use crate::records::{self, Completed, Snapshot, to_json};
use tern_outbound::release_source::{self as source, Fetcher, Source, SourceRelease};

pub(crate) struct UpdaterConfig {
    pub(crate) holder: String,
    pub(crate) source: Source,
    pub(crate) prefix: TagPrefix,
    pub(crate) poll: Duration,
    pub(crate) stall_timeout: Duration,
    /// Alert `lockstep_stalled` at this fraction of the waiting workers' barrier timeout.
    pub(crate) stalled_after: f64,
    pub(crate) lease_ttl: Duration,
    pub(crate) insecure: bool,
    pub(crate) notify: NotifySettings,
}

/// The newest release the environment takes, as last fetched.
struct Latest {
    env: Environment,
    at: Instant,
    release: Option<(Candidate, SourceRelease)>,
}

pub(crate) async fn run(store: Arc<dyn Store>, cfg: UpdaterConfig) -> anyhow::Result<()> {
    let notifiers = Notifiers::start(&cfg.notify);
    let changes = Changes::watch(Arc::clone(&store));
    let fetcher = Fetcher::new(cfg.insecure, Duration::from_secs(30));
    let mut keeper: Option<LeaseKeeper> = None;
    let mut latest: Option<Latest> = None;
    let mut said_untrusted: Vec<tern_core::lockstep::protocol::ServerId> = Vec::new();
    loop {
        let Some(lease) = keeper.as_ref().and_then(LeaseKeeper::lease) else {
            if keeper.take().is_some() {
                tracing::warn!(holder = %cfg.holder, "lost the updater lease; no longer leading");
            }
            match store
                .lease_acquire(keys::UPDATER_LEASE, &cfg.holder, cfg.lease_ttl)
                .await
            {
                Ok(Some(lease)) => {
                    tracing::info!(holder = %cfg.holder, token = lease.token, "became the leading updater");
                    keeper = Some(LeaseKeeper::spawn(Arc::clone(&store), lease));
                }
                Ok(None) => tokio::time::sleep(cfg.lease_ttl / 4).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot campaign for the updater lease; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            continue;
        };
        let snap = match records::read(&*store).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's records; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let due = latest
            .as_ref()
            .is_none_or(|l| l.env != snap.env || l.at.elapsed() >= cfg.poll);
        if due {
            latest = Some(fetch_latest(&fetcher, &cfg, snap.env).await);
        }
        if snap.untrusted != said_untrusted {
            if !snap.untrusted.is_empty() {
                tracing::error!(servers = ?snap.untrusted, "status records not signed by their server's registered key: ignored");
            }
            said_untrusted = snap.untrusted.clone();
        }
        let candidate = latest.as_ref().and_then(|l| l.release.as_ref());
        let completed = snap.completed_version();
        let registered = snap.registered();
        let running = running_workers(&*store, &snap).await;
        let action = updater_next(&UpdaterView {
            request: snap.request(),
            statuses: &snap.statuses,
            untrusted: &snap.untrusted,
            registered: &registered,
            running: &running,
            completed: completed.as_ref(),
            completed_servers: snap.completed_servers(),
            latest: candidate.map(|(c, _)| c),
            alert: snap.alert.as_ref().map(|(a, _)| a.kind.as_str()),
            now: Timestamp::now(),
            stall_timeout: cfg.stall_timeout,
            stalled_after: cfg.stalled_after,
        });
        match action {
            UpdaterAction::Idle(why) => {
                if why == UpdaterIdle::NoServers {
                    tracing::warn!("a newer release is out but no server is registered");
                }
                changes.wait(Duration::from_secs(1)).await;
            }
            UpdaterAction::Start {
                version,
                servers,
                catch_up,
            } => {
                let artifact = if catch_up {
                    // The version every other server runs, from the same tarball.
                    match snap
                        .completed
                        .as_ref()
                        .and_then(|(c, _)| c.artifact.clone())
                    {
                        Some(a) => Ok(a),
                        None => match candidate {
                            Some((c, release)) if c.version.to_string() == version => {
                                artifact(cfg.insecure, &cfg.source, release, &version).await
                            }
                            _ => Err(anyhow::anyhow!(
                                "the completed record of {version} names no artifact and the source no longer lists it"
                            )),
                        },
                    }
                } else {
                    match candidate {
                        Some((_, release)) => {
                            artifact(cfg.insecure, &cfg.source, release, &version).await
                        }
                        None => continue,
                    }
                };
                match artifact {
                    Ok(artifact) => {
                        let req = UpdateRequest {
                            version: version.clone(),
                            servers: servers.clone(),
                            stop: false,
                            artifact: Some(artifact),
                            started_at: Some(Timestamp::now()),
                            reason: None,
                            leader: Some(cfg.holder.clone()),
                            catch_up,
                        };
                        if write_start(&*store, &lease, &snap, &req).await? {
                            if catch_up {
                                tracing::info!(%version, ?servers, "started a catch-up: these servers did not finish the version the others run");
                            } else {
                                tracing::info!(%version, ?servers, "started the update");
                            }
                        }
                    }
                    Err(e) => {
                        tracing::error!(%version, error = %e, "cannot start the update: its artifact is not usable");
                        changes.wait(cfg.poll.min(Duration::from_secs(30))).await;
                    }
                }
            }
            UpdaterAction::Stop { reason } => {
                let alert = Alert {
                    kind: kind::LOCKSTEP_STOPPED.to_string(),
                    group: None,
                    message: reason.clone(),
                    since: Timestamp::now(),
                };
                if write_stop(&*store, &lease, &snap, &reason, &alert, &cfg.holder).await? {
                    tracing::error!(%reason, "stopped the update; nothing moves until `tern-lockstep recover`");
                    // The stop's alert replaces a stalled barrier's.
                    if let Some((old, _)) = &snap.alert
                        && old.kind == kind::LOCKSTEP_STALLED
                    {
                        notifiers.send(notice(&notifiers, NoticeEvent::Cleared, old.clone()));
                    }
                    notifiers.send(notice(&notifiers, NoticeEvent::Raised, alert));
                }
            }
            UpdaterAction::Complete { version, servers } => {
                if write_complete(&*store, &lease, &snap, &version, &servers).await? {
                    tracing::info!(%version, ?servers, "every listed server finished the update");
                    if let Some((alert, _)) = &snap.alert {
                        notifiers.send(notice(&notifiers, NoticeEvent::Cleared, alert.clone()));
                    }
                }
            }
            UpdaterAction::AlertStalled { message } => {
                let alert = Alert {
                    kind: kind::LOCKSTEP_STALLED.to_string(),
                    group: None,
                    message: message.clone(),
                    since: Timestamp::now(),
                };
                let ops = [Op::put(keys::ALERT, to_json(&alert), None)];
                if fenced(&*store, &lease, &snap, &ops).await? {
                    tracing::warn!(%message, "a barrier is stalled");
                    notifiers.send(notice(&notifiers, NoticeEvent::Raised, alert));
                }
            }
            UpdaterAction::ClearStalled => {
                let ops = [Op::delete(keys::ALERT)];
                if fenced(&*store, &lease, &snap, &ops).await?
                    && let Some((alert, _)) = &snap.alert
                {
                    tracing::info!("the stalled barrier passed");
                    notifiers.send(notice(&notifiers, NoticeEvent::Cleared, alert.clone()));
                }
            }
            UpdaterAction::Withdraw { reason } => {
                let ops = [
                    Op::delete_prefix(keys::SERVER_STATUS),
                    Op::delete(keys::CURRENT),
                ];
                if fenced(&*store, &lease, &snap, &ops).await? {
                    tracing::info!(%reason, "withdrew a catch-up");
                }
            }
        }
    }
}

/// The registered servers that missed the completed version and whose worker runs (holds
/// its worker lease): the ones a catch-up may list. Only they are asked about.
pub(crate) async fn running_workers(store: &dyn Store, snap: &Snapshot) -> Vec<ServerId> {
    let Some(done) = snap.completed_servers() else {
        return Vec::new();
    };
    let mut running = Vec::new();
    for id in snap
        .registered()
        .into_iter()
        .filter(|id| !done.contains(id))
    {
        match store.lease_info(&keys::worker_lease(id)).await {
            Ok(Some(_)) => running.push(id),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(server = id, error = %e, "cannot tell whether its worker runs")
            }
        }
    }
    running
}

fn notice(notifiers: &Notifiers, event: NoticeEvent, alert: Alert) -> Notice {
    Notice {
        event,
        alert,
        rollout: None,
        server: notifiers.server_name().to_string(),
        at: Timestamp::now(),
        program: "tern-lockstep",
    }
}

async fn fetch_latest(fetcher: &Fetcher, cfg: &UpdaterConfig, env: Environment) -> Latest {
    let (f, source, prefix) = (fetcher.clone(), cfg.source.clone(), cfg.prefix.clone());
    let found = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let mut releases = f.list(&source).map_err(|e| e.to_string())?;
        // GitHub's own latest, in case the listing was cut at its page cap.
        if env == Environment::Production
            && let Some(l) = f.latest(&source).map_err(|e| e.to_string())?
            && !releases.iter().any(|r| r.listed.tag == l.listed.tag)
        {
            releases.push(l);
        }
        let listed: Vec<_> = releases.iter().map(|r| r.listed.clone()).collect();
        let picked = pick(&listed, &prefix, env).map_err(|e| e.to_string())?;
        for (tag, why) in &picked.skipped {
            tracing::debug!(tag, why, "skipped a release");
        }
        Ok(picked.latest.map(|c| {
            let r = releases[c.index].clone();
            (c, r)
        }))
    })
    .await
    .unwrap_or_else(|e| Err(format!("the fetch task failed: {e}")));
    let release = match found {
        Ok(r) => {
            tracing::debug!(%env, latest = ?r.as_ref().map(|(c, _)| c.version.to_string()), "polled the release source");
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the release source; will poll again");
            None
        }
    };
    Latest {
        env,
        at: Instant::now(),
        release,
    }
}

/// The artifact of `release`, with its digest (stated by the index, or read once from
/// `<url>.sha256`) pinned for every worker.
async fn artifact(
    insecure: bool,
    src: &Source,
    release: &SourceRelease,
    version: &str,
) -> anyhow::Result<Artifact> {
    let url = source::artifact_url(src, release, version)?;
    let sha256 = match &release.sha256 {
        Some(s) => s.trim().to_ascii_lowercase(),
        None => {
            let u = url.clone();
            tokio::task::spawn_blocking(move || {
                client(insecure, Duration::from_secs(30)).checksum(&u)
            })
            .await
            .context("the checksum task failed")??
        }
    };
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        anyhow::bail!("the checksum of {url} is not a SHA-256 digest: {sha256:?}");
    }
    Ok(Artifact { url, sha256 })
}

/// The client of artifact servers (checksums, downloads): tern-update's, on ring.
pub(crate) fn client(insecure: bool, timeout: Duration) -> tern_client::Client {
    tern_client::Client::for_host(
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        insecure,
        timeout,
        None,
    )
}

/// Commits `ops` if `lease` is still held and the request is as read; false when fenced
/// off or raced (nothing written).
async fn fenced(
    store: &dyn Store,
    lease: &Lease,
    snap: &Snapshot,
    ops: &[Op],
) -> anyhow::Result<bool> {
    let request = match &snap.request {
        Some((_, rev)) => Compare::mod_revision(keys::CURRENT, *rev),
        None => Compare::absent(keys::CURRENT),
    };
    match store.txn(&[Compare::lease_held(lease), request], ops).await {
        Ok(TxnOutcome::Committed { .. }) => Ok(true),
        Ok(TxnOutcome::Failed { index: 0, .. }) => {
            tracing::warn!("the updater lease is no longer held: writing nothing");
            Ok(false)
        }
        Ok(TxnOutcome::Failed { reason, .. }) => {
            tracing::info!(%reason, "the update changed meanwhile; deciding again");
            Ok(false)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot write to the store; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(false)
        }
    }
}

/// A new request; the old statuses and leader-only results go with it (they belong to
/// the previous update, and their signatures bind them to it anyway).
pub(crate) async fn write_start(
    store: &dyn Store,
    lease: &Lease,
    snap: &Snapshot,
    req: &UpdateRequest,
) -> anyhow::Result<bool> {
    let ops = [
        Op::delete_prefix(keys::SERVER_STATUS),
        Op::delete_prefix(keys::CONTENTS),
        Op::put(keys::CURRENT, to_json(req), None),
    ];
    fenced(store, lease, snap, &ops).await
}

async fn write_stop(
    store: &dyn Store,
    lease: &Lease,
    snap: &Snapshot,
    reason: &str,
    alert: &Alert,
    holder: &str,
) -> anyhow::Result<bool> {
    let Some(mut req) = snap.request().cloned() else {
        return Ok(false);
    };
    req.stop = true;
    req.reason = Some(reason.to_string());
    req.leader = Some(holder.to_string());
    let ops = [
        Op::put(keys::CURRENT, to_json(&req), None),
        Op::put(keys::ALERT, to_json(alert), None),
    ];
    fenced(store, lease, snap, &ops).await
}

async fn write_complete(
    store: &dyn Store,
    lease: &Lease,
    snap: &Snapshot,
    version: &str,
    servers: &[ServerId],
) -> anyhow::Result<bool> {
    let completed = Completed {
        version: version.to_string(),
        at: Timestamp::now(),
        servers: Some(servers.to_vec()),
        artifact: snap.request().and_then(|r| r.artifact.clone()),
    };
    let mut ops = vec![Op::put(keys::COMPLETED, to_json(&completed), None)];
    if snap.alert.is_some() {
        ops.push(Op::delete(keys::ALERT));
    }
    fenced(store, lease, snap, &ops).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_store::MemoryStore;

    fn request(leader: &str) -> UpdateRequest {
        UpdateRequest {
            version: "1.1.0".into(),
            servers: vec![1, 2],
            stop: false,
            artifact: None,
            started_at: None,
            reason: None,
            leader: Some(leader.into()),
            catch_up: false,
        }
    }

    /// A leader whose lease was taken over writes nothing, though its own deadline has
    /// not passed (the case a renew-then-write would race).
    #[tokio::test]
    async fn a_former_leader_writes_nothing() {
        let store = MemoryStore::new();
        let ttl = Duration::from_millis(300);
        let old = store
            .lease_acquire(keys::UPDATER_LEASE, "a", ttl)
            .await
            .unwrap()
            .unwrap();
        let snap = records::read(&store).await.unwrap();
        assert!(
            write_start(&store, &old, &snap, &request("a"))
                .await
                .unwrap()
        );
        // `a` pauses past its TTL; `b` takes over (as soon as the lease is free) and writes.
        let new = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(l) = store
                    .lease_acquire(keys::UPDATER_LEASE, "b", Duration::from_secs(30))
                    .await
                    .unwrap()
                {
                    return l;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a's lease expired");
        let snap_b = records::read(&store).await.unwrap();
        let alert = Alert {
            kind: kind::LOCKSTEP_STOPPED.into(),
            group: None,
            message: "x".into(),
            since: Timestamp::now(),
        };
        assert!(
            write_stop(&store, &new, &snap_b, "x", &alert, "b")
                .await
                .unwrap()
        );
        // `a` resumes with a fresh-looking lease (its deadline pushed forward) and its
        // snapshot of the request as it last read it: every write is refused.
        let mut stale = old.clone();
        stale.valid_until = Instant::now() + Duration::from_secs(60);
        let snap_a = records::read(&store).await.unwrap();
        let before = store.list(keys::ROOT).await.unwrap();
        assert!(
            !write_start(&store, &stale, &snap_a, &request("a"))
                .await
                .unwrap()
        );
        assert!(
            !write_complete(&store, &stale, &snap_a, "1.1.0", &[1, 2])
                .await
                .unwrap()
        );
        assert!(
            !write_stop(&store, &stale, &snap_a, "y", &alert, "a")
                .await
                .unwrap()
        );
        let after = store.list(keys::ROOT).await.unwrap();
        assert_eq!(before.kvs, after.kvs, "the former leader changed the store");
        // The holder itself can write.
        let snap_b = records::read(&store).await.unwrap();
        assert!(
            write_complete(&store, &new, &snap_b, "1.1.0", &[1, 2])
                .await
                .unwrap()
        );
    }
}
