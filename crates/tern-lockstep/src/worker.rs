//! The worker on each server: registers the server (with its signing key), holds the
//! server's worker lease, then asks
//! [`worker_next`](tern_core::lockstep::protocol::worker_next) what to do and does it:
//! install the request's version (and, when the release ships its own worker, replace
//! itself with it), record a step, wait at the barrier, run the step (holding a lock for
//! rolling and leader-only components: a claim on this server's own lease, signed, the
//! oldest holding it), record the result.
//!
//! Before it claims a step's lock, while it waits for it, once it holds it, and before each
//! command but the first of a step without a lock (which runs on the decision just made)
//! it asks [`may_go_on`](tern_core::lockstep::protocol::may_go_on) again: a stop or a peer's error
//! holds it there. Its statuses are signed, written only while it holds the worker lease,
//! and only into the update they belong to (`same_update`): a result is recorded even
//! after `stop` was set, never into a later update.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use jiff::Timestamp;
use tern_core::lockstep::plan::{Action, Step};
use tern_core::lockstep::protocol::{
    LeaderOnlyRecord, ServerId, ServerStatus, UpdateRequest, WorkerAction, WorkerView, after_run,
    claim_message, leader_only_message, leader_only_outcome, lock_holder, may_go_on,
    status_message, worker_next,
};
use tern_store::{Compare, Lease, LeaseKeeper, Op, Revision, Store, TxnOutcome};
use tokio::time::Instant;

use crate::changes::Changes;
use crate::command::{self, Env};
use crate::identity::Identity;
use crate::install::{self, Installed};
use crate::keys;
use crate::records::{self, Registration, SignedLeaderOnly, SignedStatus, Snapshot, to_json};

/// Set by a worker that execs a release's own worker: `<version>@<sha256>` of that
/// release, so the new process does not exec it again.
pub(crate) const WORKER_RELEASE_ENV: &str = "TERN_LOCKSTEP_WORKER_RELEASE";

pub(crate) struct WorkerConfig {
    pub(crate) id: ServerId,
    pub(crate) name: String,
    pub(crate) root: PathBuf,
    pub(crate) barrier_timeout: Duration,
    pub(crate) insecure: bool,
    pub(crate) lease_ttl: Duration,
    pub(crate) identity: Identity,
}

/// Registers this server with its public key unless it already is. A registration
/// without a key (`servers add` without credentials) takes this worker's; one with
/// another key is another server's identity: refused.
pub(crate) async fn register(
    store: &dyn Store,
    id: ServerId,
    name: &str,
    identity: &Identity,
) -> anyhow::Result<()> {
    let key = keys::server(id);
    let mine = identity.public_hex();
    for _ in 0..10 {
        let Some(kv) = store
            .get(&key)
            .await
            .context("reading this server's registration")?
        else {
            let reg = Registration {
                id,
                name: name.to_string(),
                registered_at: Timestamp::now(),
                key: Some(mine.clone()),
            };
            match store.create(&key, to_json(&reg), None).await {
                Ok(_) => {
                    tracing::info!(server = id, "registered this server");
                    return Ok(());
                }
                Err(tern_store::Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e).context("registering this server"),
            }
        };
        let mut reg: Registration = serde_json::from_slice(&kv.value)
            .with_context(|| format!("the registration {key} does not parse"))?;
        match &reg.key {
            Some(k) if *k == mine => return Ok(()),
            Some(k) => bail!(
                "server {id} is registered with another signing key ({}…) than this worker's ({}…): \
                 another machine is server {id}. Start this worker with server {id}'s credentials \
                 (--credentials FILE from `tern-lockstep servers add {id} --credentials-out FILE`), \
                 or give it its own id; to replace a server that is gone for good, \
                 `tern-lockstep servers rm {id}` first",
                &k[..k.len().min(16)],
                &mine[..16]
            ),
            None => {
                reg.key = Some(mine.clone());
                match store
                    .compare_and_swap(&key, kv.mod_revision, to_json(&reg), None)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(server = id, "recorded this server's signing key");
                        return Ok(());
                    }
                    Err(tern_store::Error::Conflict { .. }) => continue,
                    Err(e) => return Err(e).context("recording this server's signing key"),
                }
            }
        }
    }
    bail!("this server's registration kept changing; try again")
}

/// What a worker carries from step to step.
struct Worker {
    store: Arc<dyn Store>,
    cfg: WorkerConfig,
    changes: Changes,
    /// This server's worker lease, kept alive.
    keeper: LeaseKeeper,
    /// The request as last read and its revision: a write for that update tries it
    /// first, and reads the request again only when it changed.
    last_request: std::sync::Mutex<Option<(UpdateRequest, Revision)>>,
}

/// How a step's commands ended.
enum Outcome {
    Ok,
    Failed(String),
    /// A stop or a peer's error held this server before a command; `ran` lists the
    /// commands that had run.
    Held {
        why: String,
        ran: Vec<&'static str>,
    },
}

pub(crate) async fn run(store: Arc<dyn Store>, cfg: WorkerConfig) -> anyhow::Result<()> {
    register(&*store, cfg.id, &cfg.name, &cfg.identity).await?;
    let changes = Changes::watch(Arc::clone(&store));
    let lease = worker_lease(&store, &cfg, &changes).await?;
    let keeper = LeaseKeeper::spawn(Arc::clone(&store), lease);
    let w = Worker {
        store,
        cfg,
        changes,
        keeper,
        last_request: std::sync::Mutex::new(None),
    };
    w.run().await
}

/// Waits until this process holds server `id`'s worker lease: one worker per server.
async fn worker_lease(
    store: &Arc<dyn Store>,
    cfg: &WorkerConfig,
    changes: &Changes,
) -> anyhow::Result<Lease> {
    let name = keys::worker_lease(cfg.id);
    let holder = format!("{}-{}", cfg.name, std::process::id());
    let mut said = false;
    loop {
        match store.lease_acquire(&name, &holder, cfg.lease_ttl).await {
            Ok(Some(lease)) => return Ok(lease),
            Ok(None) => {
                if !said {
                    let by = store.lease_info(&name).await.ok().flatten();
                    tracing::error!(
                        server = cfg.id,
                        holder = ?by.map(|i| i.holder),
                        "another worker runs as server {}: waiting for it to stop (two workers of one server never act at once)",
                        cfg.id
                    );
                    said = true;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot ask for the worker lease; retrying"),
        }
        changes.wait(cfg.lease_ttl / 4).await;
    }
}

impl Worker {
    async fn run(self) -> anyhow::Result<()> {
        let cfg = &self.cfg;
        let mut installed: Option<Installed> = None;
        // (version, step) this worker waits at, and since when.
        let mut waiting: Option<(String, u32, Instant)> = None;
        let mut last_said = String::new();
        loop {
            if self.keeper.lease().is_none() {
                bail!(
                    "lost server {}'s worker lease (the store was out of reach longer than --lease-ttl, or another worker took it): exiting so that one worker acts",
                    cfg.id
                );
            }
            let snap = match records::read(&*self.store).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the cluster's records; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            self.remember(&snap);
            let request = snap.request().cloned();
            let inst = installed
                .as_ref()
                .filter(|i| request.as_ref().is_some_and(|r| i.serves(r)));
            let mine = request.as_ref().and_then(|r| {
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
            let action = worker_next(&self.view(&snap, inst, waited));
            let said = format!("{action:?}");
            if said != last_said {
                tracing::info!(server = cfg.id, action = %said, "next");
                last_said = said;
            }
            let Some(req) = request else {
                self.changes.wait(Duration::from_secs(5)).await;
                continue;
            };
            let version = req.version.clone();
            match action {
                WorkerAction::Idle(_) | WorkerAction::Halted(_) => {
                    self.changes.wait(Duration::from_secs(5)).await;
                }
                WorkerAction::Wait { .. } => {
                    let left = cfg.barrier_timeout.saturating_sub(waited);
                    self.changes.wait(left.min(Duration::from_secs(1))).await;
                }
                WorkerAction::Install { version } => {
                    let root = cfg.root.clone();
                    let artifact = req.artifact.clone();
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
                            let release = i.release_id();
                            let running = std::env::var(WORKER_RELEASE_ENV).ok();
                            if let Some(path) = i.plan.worker_to_exec(running.as_deref(), &release)
                            {
                                let path = i.dir.join(path);
                                let e = self.exec_release_worker(&path, &release).await;
                                let message = format!(
                                    "cannot run the release's own worker {}: {e}",
                                    path.display()
                                );
                                tracing::error!(server = cfg.id, %version, %message);
                                self.write_status(&req, failed(&version, 0, message)).await;
                                return Err(e).context("exec of the release's worker");
                            }
                            installed = Some(i);
                        }
                        Err(message) => {
                            tracing::error!(server = cfg.id, %version, %message, "install failed");
                            self.write_status(&req, failed(&version, 0, message)).await;
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
                    self.write_status(&req, status).await;
                }
                WorkerAction::Run { step } => {
                    let Some(inst) = inst.cloned() else { continue };
                    let Some(s) = inst.plan.steps().into_iter().nth(step as usize - 1) else {
                        let message = format!("the plan of {version} has no step {step}");
                        self.write_status(&req, failed(&version, step, message))
                            .await;
                        continue;
                    };
                    self.run_step(&inst, &s, &req, steps).await;
                }
                WorkerAction::Fail { step, message } => {
                    tracing::error!(server = cfg.id, %version, step, %message, "barrier timed out");
                    self.write_status(&req, failed(&version, step, message))
                        .await;
                }
            }
        }
    }

    fn view<'a>(
        &'a self,
        snap: &'a Snapshot,
        inst: Option<&Installed>,
        waited: Duration,
    ) -> WorkerView<'a> {
        WorkerView {
            me: self.cfg.id,
            request: snap.request(),
            statuses: &snap.statuses,
            installed: inst.is_some(),
            steps: inst.map_or(0, |i| i.plan.steps().len() as u32),
            waited,
            barrier_timeout: self.cfg.barrier_timeout,
            untrusted: &snap.untrusted,
        }
    }

    /// Asks the core again whether this server may go on with `step` of `inst`: `Err`
    /// says why not (a stop, a peer's error, another update).
    async fn may_go_on(&self, inst: &Installed, step: u32) -> Result<(), String> {
        let snap = self.read_patiently().await?;
        self.go_on(&snap, inst, step)
    }

    /// The records, read again while the store does not answer for a moment (no reason
    /// to give up a step), at most 30 s.
    async fn read_patiently(&self) -> Result<Snapshot, String> {
        let mut tries = 0;
        loop {
            match records::read(&*self.store).await {
                Ok(s) => return Ok(s),
                Err(e) if tries < 30 => {
                    tries += 1;
                    tracing::warn!(error = %e, "cannot read the cluster's records; retrying before going on");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(format!("cannot read the cluster's records: {e}")),
            }
        }
    }

    /// [`Worker::may_go_on`] on records already read.
    fn go_on(&self, snap: &Snapshot, inst: &Installed, step: u32) -> Result<(), String> {
        self.remember(snap);
        let served = snap.request().filter(|r| inst.serves(r)).map(|_| inst);
        may_go_on(&self.view(snap, served, Duration::ZERO), step).map_err(|a| match a {
            WorkerAction::Halted(h) => format!("{h:?}"),
            other => format!("the update moved on ({other:?})"),
        })
    }

    fn remember(&self, snap: &Snapshot) {
        if let Ok(mut last) = self.last_request.lock() {
            *last = snap.request.clone();
        }
    }

    /// Replaces this process with the release's own worker (same arguments, and
    /// [`WORKER_RELEASE_ENV`] naming the release). Returns only if that fails.
    async fn exec_release_worker(&self, path: &Path, release: &str) -> std::io::Error {
        use std::os::unix::process::CommandExt as _;
        tracing::info!(server = self.cfg.id, worker = %path.display(), "the release ships its own worker: running it for this release's steps");
        // The new process takes the worker lease again at once.
        if let Some(lease) = self.keeper.lease()
            && let Err(e) = self.store.lease_release(&lease).await
        {
            tracing::warn!(error = %e, "releasing the worker lease before exec failed; the new worker waits for it to expire");
        }
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        std::process::Command::new(path)
            .args(args)
            .env(WORKER_RELEASE_ENV, release)
            .exec()
    }

    /// Signs `status` and writes it if the request is still the update it belongs to
    /// (stopped since or not) and this process still holds the worker lease. False when
    /// not written.
    async fn write_status(&self, req: &UpdateRequest, mut status: ServerStatus) -> bool {
        let id = self.cfg.id;
        status.barrier_timeout = Some(self.cfg.barrier_timeout.as_secs());
        let signed = SignedStatus {
            sig: self.cfg.identity.sign(&status_message(id, req, &status)),
            status,
        };
        let Some(lease) = self.keeper.lease() else {
            tracing::warn!(server = id, "the worker lease is lost: not recording");
            return false;
        };
        match self
            .put_for(req, &keys::server_status(id), to_json(&signed), &lease)
            .await
        {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(server = id, %why, "not recording this status");
                false
            }
        }
    }

    /// Puts `key` if the request is still `req`'s update (stopped since or not) and
    /// `lease` is held; retried when another write of the request raced it.
    async fn put_for(
        &self,
        req: &UpdateRequest,
        key: &str,
        value: Vec<u8>,
        lease: &Lease,
    ) -> Result<(), String> {
        // The request as last read, when it is this update: usually still current.
        let mut known = self.last_request.lock().ok().and_then(|l| {
            l.as_ref()
                .filter(|(r, _)| r.same_update(req))
                .map(|(_, rev)| *rev)
        });
        for _ in 0..20 {
            let rev = match known.take() {
                Some(rev) => rev,
                None => {
                    let current = match self.store.get(keys::CURRENT).await {
                        Ok(kv) => kv,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot read the request; will retry");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    let rev = current.and_then(|kv| {
                        serde_json::from_slice::<UpdateRequest>(&kv.value)
                            .ok()
                            .filter(|r| r.same_update(req))
                            .map(|_| kv.mod_revision)
                    });
                    let Some(rev) = rev else {
                        return Err("the update was recovered or replaced meanwhile".into());
                    };
                    rev
                }
            };
            let compares = [
                Compare::mod_revision(keys::CURRENT, rev),
                Compare::lease_held(lease),
            ];
            match self
                .store
                .txn(&compares, &[Op::put(key, value.clone(), None)])
                .await
            {
                Ok(TxnOutcome::Committed { .. }) => return Ok(()),
                Ok(TxnOutcome::Failed { index: 0, .. }) => continue,
                Ok(TxnOutcome::Failed { reason, .. }) => return Err(reason),
                Err(e) => {
                    tracing::warn!(error = %e, key, "cannot write; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        Err("the request kept changing".into())
    }

    /// Runs one step on this server and records its result (for a step under a lock,
    /// before letting the lock go, so the next holder sees a failure).
    async fn run_step(&self, inst: &Installed, step: &Step, req: &UpdateRequest, steps: u32) {
        let cfg = &self.cfg;
        let component = &inst.plan.components[step.component];
        let env = Env {
            version: &inst.version,
            server: cfg.id,
            step: step.number,
            component: &component.name,
            release_dir: &inst.dir,
        };
        let timeout = inst.plan.timeout(step.component);
        let outcome = match step.action {
            Action::StopEverywhere | Action::StartEverywhere | Action::Each => {
                self.run_commands(inst, step, &env, timeout, true, None)
                    .await
            }
            Action::Rolling => {
                let lock = keys::rolling_lock(&component.name);
                match self.acquire(inst, step, req, &lock, None).await {
                    Err(outcome) => outcome,
                    Ok(claim) => {
                        tracing::info!(server = cfg.id, component = %component.name, "holding the rolling lock");
                        let outcome = self
                            .run_commands(inst, step, &env, timeout, true, Some((&claim, &lock)))
                            .await;
                        self.record(req, inst, step, steps, outcome).await;
                        self.let_go(claim, &lock).await;
                        return;
                    }
                }
            }
            Action::LeaderOnly => {
                return self
                    .leader_only(inst, step, &env, timeout, req, steps)
                    .await;
            }
        };
        self.record(req, inst, step, steps, outcome).await;
    }

    /// Records how `step` ended. A server held before any command ran records nothing
    /// (it did nothing); held after some ran, it says what is left stopped.
    async fn record(
        &self,
        req: &UpdateRequest,
        inst: &Installed,
        step: &Step,
        steps: u32,
        outcome: Outcome,
    ) {
        let version = &inst.version;
        let n = step.number;
        let status = match outcome {
            Outcome::Ok => after_run(version, n, steps, Timestamp::now()),
            Outcome::Failed(message) => {
                tracing::error!(server = self.cfg.id, %version, step = n, %message, "step failed");
                failed(version, n, message)
            }
            Outcome::Held { why, ran } if ran.is_empty() => {
                tracing::warn!(server = self.cfg.id, %version, step = n, %why, "held before the step's first command: it did not run here");
                return;
            }
            Outcome::Held { why, ran } => {
                let component = &inst.plan.components[step.component].name;
                let message = format!(
                    "held ({why}) after {} of {component} ran on this server: {component} may be stopped here until `tern-lockstep recover`",
                    ran.join(", ")
                );
                tracing::error!(server = self.cfg.id, %version, step = n, %message);
                failed(version, n, message)
            }
        };
        self.write_status(req, status).await;
    }

    /// Runs the step's commands, asking `may_go_on` before each; before the first only
    /// unless `checked` (the caller decided on records read just before: the decision to
    /// run, or the check right after taking the step's lock). Under a lock (`claim`), a
    /// command runs only while this server's claim is still held.
    async fn run_commands(
        &self,
        inst: &Installed,
        step: &Step,
        env: &Env<'_>,
        timeout: Duration,
        checked: bool,
        claim: Option<(&LeaseKeeper, &str)>,
    ) -> Outcome {
        let mut ran = Vec::new();
        for (i, (what, argv)) in inst.plan.commands(step).into_iter().enumerate() {
            if (i > 0 || !checked)
                && let Err(why) = self.may_go_on(inst, step.number).await
            {
                return Outcome::Held { why, ran };
            }
            if let Some((keeper, lock)) = claim
                && keeper.lease().is_none()
            {
                return Outcome::Failed(format!(
                    "lost this server's claim of lock {lock} (the store was out of reach longer than --lease-ttl) after {}: another server may hold it now",
                    if ran.is_empty() {
                        "nothing ran".to_string()
                    } else {
                        ran.join(", ")
                    }
                ));
            }
            let label = format!("step {} ({} {what})", step.number, env.component);
            if let Err(message) = command::run(&label, argv, env, timeout).await {
                return Outcome::Failed(message);
            }
            ran.push(what);
        }
        Outcome::Ok
    }

    /// Claims `lock` for `step` (with this server's own claim lease, its holder the
    /// signed claim) and waits, at most the barrier timeout, until this claim is the
    /// oldest signed one ([`lock_holder`]), asking each time whether this server may
    /// still go on. For a leader-only component (`results_of`), a result recorded for
    /// this update meanwhile ends the wait with what it says. The claims are read before
    /// the records, so a failure its former holder recorded before letting it go is seen.
    async fn acquire(
        &self,
        inst: &Installed,
        step: &Step,
        req: &UpdateRequest,
        lock: &str,
        results_of: Option<&str>,
    ) -> Result<LeaseKeeper, Outcome> {
        let cfg = &self.cfg;
        let held = |why| Outcome::Held {
            why,
            ran: Vec::new(),
        };
        let deadline = Instant::now() + cfg.barrier_timeout;
        let holder =
            records::claim_holder(lock, &cfg.identity.sign(&claim_message(cfg.id, req, lock)));
        let name = keys::claim_lease(cfg.id);
        let timed_out = |by: Option<ServerId>| {
            Outcome::Failed(format!(
                "timed out after {}s waiting for lock {lock} (held by {})",
                cfg.barrier_timeout.as_secs(),
                by.map_or_else(
                    || "nobody that signed its claim".into(),
                    |s| format!("server {s}")
                )
            ))
        };
        // This server's claim: its own lease, free unless a claim of an earlier process
        // of this server still runs out its TTL.
        let lease = loop {
            self.may_go_on(inst, step.number).await.map_err(held)?;
            match self
                .store
                .lease_acquire(&name, &holder, cfg.lease_ttl)
                .await
            {
                Ok(Some(lease)) => break lease,
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, lease = %name, "cannot claim; retrying"),
            }
            if Instant::now() >= deadline {
                return Err(timed_out(None));
            }
            self.changes.wait(Duration::from_millis(100)).await;
        };
        let claim = LeaseKeeper::spawn(Arc::clone(&self.store), lease);
        let mut holder_now = None;
        let outcome = loop {
            if claim.lease().is_none() {
                break Outcome::Failed(format!(
                    "lost this server's claim of lock {lock} while waiting for it"
                ));
            }
            let snap = match self.read_patiently().await {
                Ok(s) => s,
                Err(why) => break Outcome::Failed(why),
            };
            let claims = records::claims(&*self.store, &snap, req).await;
            let snap = match self.read_patiently().await {
                Ok(s) => s,
                Err(why) => break Outcome::Failed(why),
            };
            if let Err(why) = self.go_on(&snap, inst, step.number) {
                break held(why);
            }
            if let Some(done) = results_of.and_then(|c| self.leader_only_result(&snap, req, c)) {
                break done;
            }
            holder_now = lock_holder(req, &claims, lock);
            if holder_now == Some(cfg.id) {
                return Ok(claim);
            }
            if Instant::now() >= deadline {
                break timed_out(holder_now);
            }
            // Claims are leases, not under lockstep/: poll, waking early on other changes.
            self.changes.wait(Duration::from_millis(100)).await;
        };
        tracing::debug!(server = cfg.id, lock, holder = ?holder_now, "gave up waiting for the lock");
        self.let_go(claim, lock).await;
        Err(outcome)
    }

    /// Gives this server's claim of `lock` up.
    async fn let_go(&self, claim: LeaseKeeper, lock: &str) {
        if let Err(e) = claim.release().await {
            tracing::warn!(error = %e, lock, "releasing this server's claim failed; it expires by itself");
        }
    }

    /// What the signed results of leader-only `component` for `req` say, if any.
    fn leader_only_result(
        &self,
        snap: &Snapshot,
        req: &UpdateRequest,
        component: &str,
    ) -> Option<Outcome> {
        let results = snap.contents.get(component).map_or(&[][..], Vec::as_slice);
        leader_only_outcome(req, results).map(|r| match r {
            Ok(_) => Outcome::Ok,
            Err((server, message)) => Outcome::Failed(format!(
                "leader-only {component} failed for {} on server {server}: {message}",
                req.version
            )),
        })
    }

    /// A leader-only component: the server that holds its lock and finds no result for
    /// this update runs it and writes its signed `{version, success}` under its own key
    /// (while it holds its claim); every other server waits for that result. A recorded
    /// failure fails the step everywhere. A catch-up runs none: its version completed,
    /// leader-only components included.
    async fn leader_only(
        &self,
        inst: &Installed,
        step: &Step,
        env: &Env<'_>,
        timeout: Duration,
        req: &UpdateRequest,
        steps: u32,
    ) {
        let cfg = &self.cfg;
        let name = &inst.plan.components[step.component].name;
        if req.catch_up {
            tracing::info!(server = cfg.id, component = %name, "a catch-up: the completed version ran this leader-only component");
            return self.record(req, inst, step, steps, Outcome::Ok).await;
        }
        let lock = keys::leader_only_lock(name);
        let claim = match self.acquire(inst, step, req, &lock, Some(name)).await {
            Ok(claim) => claim,
            Err(outcome) => return self.record(req, inst, step, steps, outcome).await,
        };
        tracing::info!(server = cfg.id, component = %name, "running the leader-only component");
        let outcome = self
            .run_commands(inst, step, env, timeout, true, Some((&claim, &lock)))
            .await;
        let (success, message) = match &outcome {
            Outcome::Ok => (true, String::new()),
            Outcome::Failed(m) => (false, m.clone()),
            Outcome::Held { ran, .. } if ran.is_empty() => {
                self.let_go(claim, &lock).await;
                return self.record(req, inst, step, steps, outcome).await;
            }
            Outcome::Held { why, ran } => (false, format!("held ({why}) after {}", ran.join(", "))),
        };
        let record = LeaderOnlyRecord {
            version: inst.version.clone(),
            success,
            server: Some(cfg.id),
            message,
        };
        let signed = SignedLeaderOnly {
            sig: cfg
                .identity
                .sign(&leader_only_message(cfg.id, req, name, &record)),
            record,
        };
        let key = keys::contents(cfg.id, name);
        let written = match claim.lease() {
            Some(lease) => self.put_for(req, &key, to_json(&signed), &lease).await,
            None => Err("this server's claim was lost while it ran".to_string()),
        };
        let outcome = match written {
            Ok(()) => outcome,
            Err(why) => Outcome::Failed(format!(
                "leader-only {name} ran but its result was not written: {why}"
            )),
        };
        self.record(req, inst, step, steps, outcome).await;
        self.let_go(claim, &lock).await;
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
        barrier_timeout: None,
    }
}
