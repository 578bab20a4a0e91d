//! The worker on each server: registers the server, then asks
//! [`worker_next`](tern_core::lockstep::protocol::worker_next) what to do and does it:
//! install the request's version, record a step, wait at the barrier, run the step
//! (under a lease for rolling and leader-only components), record the result.
//!
//! Every status write is guarded by the request's revision, so a worker acting on an
//! update that was stopped, recovered or replaced meanwhile writes nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use jiff::Timestamp;
use tern_core::lockstep::plan::{Action, Step};
use tern_core::lockstep::protocol::{
    LeaderOnlyRecord, ServerId, ServerStatus, WorkerAction, WorkerView, after_run, worker_next,
};
use tern_store::{Compare, Lease, LeaseKeeper, Op, Revision, Store, TxnOutcome};
use tokio::time::Instant;

use crate::changes::Changes;
use crate::command::{self, Env};
use crate::install::{self, Installed};
use crate::keys;
use crate::records::{self, Registration, to_json};

pub(crate) struct WorkerConfig {
    pub(crate) id: ServerId,
    pub(crate) name: String,
    pub(crate) root: PathBuf,
    pub(crate) barrier_timeout: Duration,
    pub(crate) insecure: bool,
    pub(crate) lease_ttl: Duration,
}

/// Registers this server unless it already is (an operator's `servers add` or an earlier
/// start); the update request lists the servers registered when it began.
pub(crate) async fn register(store: &dyn Store, id: ServerId, name: &str) -> anyhow::Result<()> {
    let reg = Registration {
        id,
        name: name.to_string(),
        registered_at: Timestamp::now(),
    };
    match store.create(&keys::server(id), to_json(&reg), None).await {
        Ok(_) => {
            tracing::info!(server = id, "registered this server");
            Ok(())
        }
        Err(tern_store::Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e).context("registering this server"),
    }
}

pub(crate) async fn run(store: Arc<dyn Store>, cfg: WorkerConfig) -> anyhow::Result<()> {
    register(&*store, cfg.id, &cfg.name).await?;
    let changes = Changes::watch(Arc::clone(&store));
    let mut installed: Option<Installed> = None;
    // (version, step) this worker waits at, and since when.
    let mut waiting: Option<(String, u32, Instant)> = None;
    let mut last_said = String::new();
    loop {
        let snap = match records::read(&*store).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's records; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let (request, req_rev) = match &snap.request {
            Some((r, rev)) => (Some(r), *rev),
            None => (None, 0),
        };
        let inst = installed.as_ref().filter(|i| {
            request.is_some_and(|r| {
                r.version == i.version
                    && r.artifact
                        .as_ref()
                        .is_some_and(|a| a.sha256.eq_ignore_ascii_case(&i.sha256))
            })
        });
        let mine = request.and_then(|r| {
            snap.statuses
                .get(&cfg.id)
                .filter(|s| s.version == r.version)
                .map(|s| (r.version.clone(), s.step))
        });
        let waited = match (&mine, &waiting) {
            (Some((v, s)), Some((wv, ws, since))) if v == wv && s == ws => since.elapsed(),
            (Some((v, s)), _) => {
                waiting = Some((v.clone(), *s, Instant::now()));
                Duration::ZERO
            }
            (None, _) => {
                waiting = None;
                Duration::ZERO
            }
        };
        let steps = inst.map_or(0, |i| i.plan.steps().len() as u32);
        let action = worker_next(&WorkerView {
            me: cfg.id,
            request,
            statuses: &snap.statuses,
            installed: inst.is_some(),
            steps,
            waited,
            barrier_timeout: cfg.barrier_timeout,
        });
        let said = format!("{action:?}");
        if said != last_said {
            tracing::info!(server = cfg.id, action = %said, "next");
            last_said = said;
        }
        let version = request.map(|r| r.version.clone()).unwrap_or_default();
        match action {
            WorkerAction::Idle(_) | WorkerAction::Halted(_) => {
                changes.wait(Duration::from_secs(5)).await;
            }
            WorkerAction::Wait { .. } => {
                let left = cfg.barrier_timeout.saturating_sub(waited);
                changes.wait(left.min(Duration::from_secs(1))).await;
            }
            WorkerAction::Install { version } => {
                let root = cfg.root.clone();
                let artifact = request.and_then(|r| r.artifact.clone());
                let insecure = cfg.insecure;
                let v = version.clone();
                let done = tokio::task::spawn_blocking(move || {
                    install::install(&root, &v, artifact.as_ref(), insecure)
                })
                .await
                .unwrap_or_else(|e| Err(format!("the install task failed: {e}")));
                match done {
                    Ok(i) => {
                        tracing::info!(server = cfg.id, version = %i.version, dir = %i.dir.display(), steps = i.plan.steps().len(), "installed");
                        installed = Some(i);
                    }
                    Err(message) => {
                        tracing::error!(server = cfg.id, %version, %message, "install failed");
                        let status = failed(&version, 0, message);
                        write_status(&*store, cfg.id, req_rev, &status).await;
                    }
                }
            }
            WorkerAction::Record { step } => {
                let status = ServerStatus {
                    version,
                    step,
                    at: Some(Timestamp::now()),
                    ..ServerStatus::default()
                };
                write_status(&*store, cfg.id, req_rev, &status).await;
            }
            WorkerAction::Run { step } => {
                let Some(inst) = inst.cloned() else { continue };
                let Some(s) = inst.plan.steps().into_iter().nth(step as usize - 1) else {
                    let status = failed(
                        &version,
                        step,
                        format!("the plan of {version} has no step {step}"),
                    );
                    write_status(&*store, cfg.id, req_rev, &status).await;
                    continue;
                };
                let result = run_step(&store, &cfg, &inst, &s, req_rev, &changes).await;
                let status = match result {
                    Ok(()) => after_run(&version, step, steps, Timestamp::now()),
                    Err(message) => {
                        tracing::error!(server = cfg.id, %version, step, %message, "step failed");
                        failed(&version, step, message)
                    }
                };
                write_status(&*store, cfg.id, req_rev, &status).await;
            }
            WorkerAction::Fail { step, message } => {
                tracing::error!(server = cfg.id, %version, step, %message, "barrier timed out");
                write_status(&*store, cfg.id, req_rev, &failed(&version, step, message)).await;
            }
        }
    }
}

fn failed(version: &str, step: u32, message: String) -> ServerStatus {
    ServerStatus {
        version: version.to_string(),
        step,
        finished: false,
        error: true,
        message,
        at: Some(Timestamp::now()),
    }
}

/// Writes this server's status if the request is still the one acted on.
async fn write_status(store: &dyn Store, id: ServerId, req_rev: Revision, status: &ServerStatus) {
    let compares = [Compare::mod_revision(keys::CURRENT, req_rev)];
    let ops = [Op::put(keys::server_status(id), to_json(status), None)];
    match store.txn(&compares, &ops).await {
        Ok(TxnOutcome::Committed { .. }) => {}
        Ok(TxnOutcome::Failed { .. }) => {
            tracing::info!(
                server = id,
                "the update changed meanwhile; not recording this status"
            );
        }
        Err(e) => {
            tracing::warn!(server = id, error = %e, "cannot record this server's status; will retry")
        }
    }
}

/// Runs one step on this server.
async fn run_step(
    store: &Arc<dyn Store>,
    cfg: &WorkerConfig,
    inst: &Installed,
    step: &Step,
    req_rev: Revision,
    changes: &Changes,
) -> Result<(), String> {
    let component = &inst.plan.components[step.component];
    let env = Env {
        version: &inst.version,
        server: cfg.id,
        step: step.number,
        component: &component.name,
        release_dir: &inst.dir,
    };
    let timeout = inst.plan.timeout(step.component);
    let holder = format!("server-{}", cfg.id);
    match step.action {
        Action::StopEverywhere | Action::StartEverywhere | Action::Each => {
            run_commands(inst, step, &env, timeout).await
        }
        Action::Rolling => {
            let name = keys::rolling_lease(&component.name);
            let lease = acquire(store, &name, &holder, cfg, changes).await?;
            let keeper = LeaseKeeper::spawn(Arc::clone(store), lease);
            tracing::info!(server = cfg.id, component = %component.name, "holding the rolling lease");
            let result = run_commands(inst, step, &env, timeout).await;
            if let Err(e) = keeper.release().await {
                tracing::warn!(error = %e, lease = %name, "releasing the rolling lease failed; it expires by itself");
            }
            result
        }
        Action::LeaderOnly => {
            leader_only(store, cfg, inst, step, &env, timeout, req_rev, changes).await
        }
    }
}

async fn run_commands(
    inst: &Installed,
    step: &Step,
    env: &Env<'_>,
    timeout: Duration,
) -> Result<(), String> {
    for (what, argv) in inst.plan.commands(step) {
        let what = format!("step {} ({} {what})", step.number, env.component);
        command::run(&what, argv, env, timeout).await?;
    }
    Ok(())
}

/// Takes lease `name`, waiting for its holder at most the barrier timeout.
async fn acquire(
    store: &Arc<dyn Store>,
    name: &str,
    holder: &str,
    cfg: &WorkerConfig,
    changes: &Changes,
) -> Result<Lease, String> {
    let deadline = Instant::now() + cfg.barrier_timeout;
    loop {
        match store.lease_acquire(name, holder, cfg.lease_ttl).await {
            Ok(Some(lease)) => return Ok(lease),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, lease = name, "cannot ask for the lease; retrying")
            }
        }
        if Instant::now() >= deadline {
            let by = store
                .lease_info(name)
                .await
                .ok()
                .flatten()
                .map_or_else(|| "someone".to_string(), |i| i.holder);
            return Err(format!(
                "timed out after {}s waiting for lease {name} (held by {by})",
                cfg.barrier_timeout.as_secs()
            ));
        }
        // Leases are not under lockstep/: poll, waking early on other changes.
        changes.wait(Duration::from_millis(100)).await;
    }
}

/// A leader-only component: the server that takes its lease and finds no record for this
/// version runs it and writes `{version, success}`; every other server waits for that
/// record. A recorded failure fails the step everywhere.
#[allow(clippy::too_many_arguments)]
async fn leader_only(
    store: &Arc<dyn Store>,
    cfg: &WorkerConfig,
    inst: &Installed,
    step: &Step,
    env: &Env<'_>,
    timeout: Duration,
    req_rev: Revision,
    changes: &Changes,
) -> Result<(), String> {
    let name = &inst.plan.components[step.component].name;
    let key = keys::contents(name);
    let lease_name = keys::leader_only_lease(name);
    let holder = format!("server-{}", cfg.id);
    let deadline = Instant::now() + cfg.barrier_timeout;
    let recorded = |kv: Option<tern_store::KeyValue>| -> Option<Result<(), String>> {
        let rec: LeaderOnlyRecord = serde_json::from_slice(&kv?.value).ok()?;
        (rec.version == inst.version).then(|| {
            if rec.success {
                Ok(())
            } else {
                Err(format!(
                    "leader-only {name} failed for {} on server {}: {}",
                    rec.version,
                    rec.server.map_or_else(|| "?".into(), |s| s.to_string()),
                    rec.message
                ))
            }
        })
    };
    loop {
        let kv = store.get(&key).await.map_err(|e| e.to_string())?;
        if let Some(done) = recorded(kv) {
            return done;
        }
        if let Ok(Some(lease)) = store
            .lease_acquire(&lease_name, &holder, cfg.lease_ttl)
            .await
        {
            let keeper = LeaseKeeper::spawn(Arc::clone(store), lease);
            // Someone may have finished between the read and the lease.
            let kv = store.get(&key).await.map_err(|e| e.to_string())?;
            let result = match recorded(kv) {
                Some(done) => done,
                None => {
                    tracing::info!(server = cfg.id, component = %name, "running the leader-only component");
                    let result = run_commands(inst, step, env, timeout).await;
                    let rec = LeaderOnlyRecord {
                        version: inst.version.clone(),
                        success: result.is_ok(),
                        server: Some(cfg.id),
                        message: result.as_ref().err().cloned().unwrap_or_default(),
                    };
                    let written = match keeper.lease() {
                        Some(lease) => store
                            .txn(
                                &[
                                    Compare::lease_held(&lease),
                                    Compare::mod_revision(keys::CURRENT, req_rev),
                                ],
                                &[Op::put(&key, to_json(&rec), None)],
                            )
                            .await
                            .map_err(|e| e.to_string())
                            .and_then(|o| match o {
                                TxnOutcome::Committed { .. } => Ok(()),
                                TxnOutcome::Failed { reason, .. } => Err(reason),
                            }),
                        None => Err("the lease was lost while it ran".to_string()),
                    };
                    match written {
                        Ok(()) => result,
                        Err(why) => Err(format!(
                            "leader-only {name} ran but its record was not written: {why}"
                        )),
                    }
                }
            };
            if let Err(e) = keeper.release().await {
                tracing::warn!(error = %e, lease = %lease_name, "releasing the leader-only lease failed");
            }
            return result;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out after {}s waiting for leader-only {name} to be recorded",
                cfg.barrier_timeout.as_secs()
            ));
        }
        changes.wait(Duration::from_millis(200)).await;
    }
}
