//! The operator's commands: register and remove servers, set the environment, show the
//! update, stop it, recover from a stop. They write the store directly (as `neco` does
//! etcd), each write a compare-and-swap or a transaction.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use jiff::Timestamp;
use tern_core::lockstep::protocol::{ServerId, UpdateRequest};
use tern_core::lockstep::release::Environment;
use tern_store::{Compare, Op, Store, TxnOutcome};

use crate::identity::{self, Identity};
use crate::keys;
use crate::records::{self, Registration, Snapshot, to_json};

/// The etcd administration `servers add`, `servers rm --revoke`, `auth enable` and `auth
/// refresh` need (the `etcd` feature); absent on SQLite.
#[cfg(feature = "etcd")]
pub(crate) struct EtcdAdmin(pub(crate) tern_store::EtcdStore);

#[cfg(not(feature = "etcd"))]
pub(crate) enum EtcdAdmin {}

/// Server `id`'s etcd grants: read everything under `lockstep/` and the leases; write
/// only its own keys: its registration, its status, its leader-only results, its worker
/// lease and its claim lease. Nothing every worker shares: no server can take, release
/// or overwrite what another wrote.
#[cfg(feature = "etcd")]
fn server_grants(id: ServerId) -> Vec<tern_store::EtcdGrant> {
    use tern_store::{EtcdGrant as G, EtcdRange as R};
    vec![
        G::read(R::Prefix(keys::ROOT.into())),
        G::read(R::LeasePrefix(String::new())),
        G::read_write(R::Key(keys::server(id))),
        G::read_write(R::Key(keys::server_status(id))),
        G::read_write(R::Prefix(keys::contents_of(id))),
        G::read_write(R::Lease(keys::worker_lease(id))),
        G::read_write(R::Lease(keys::claim_lease(id))),
    ]
}

#[cfg(feature = "etcd")]
impl EtcdAdmin {
    /// Creates server `id`'s etcd user with [`server_grants`].
    pub(crate) async fn set_server_user(
        &self,
        id: ServerId,
        user: &str,
        password: &str,
    ) -> anyhow::Result<()> {
        self.0
            .set_user(user, password, &server_grants(id))
            .await
            .with_context(|| format!("creating etcd user {user} (this needs etcd's root role)"))
    }

    /// Gives server `id`'s etcd user (kept, with its password) exactly this release's
    /// grants; false when it has no such user.
    pub(crate) async fn refresh_server_user(&self, id: ServerId) -> anyhow::Result<bool> {
        let user = identity::etcd_user(id);
        match self.0.set_role(&user, &server_grants(id)).await {
            Ok(()) => Ok(true),
            Err(e) if e.to_string().contains("not found") => Ok(false),
            Err(e) => Err(e).with_context(|| format!("granting etcd user {user} its keys")),
        }
    }

    pub(crate) async fn remove_server_user(&self, id: ServerId) -> anyhow::Result<bool> {
        let user = identity::etcd_user(id);
        self.0
            .remove_user(&user)
            .await
            .with_context(|| format!("removing etcd user {user}"))
    }

    pub(crate) async fn enable_auth(&self, root_password: &str) -> anyhow::Result<()> {
        self.0
            .enable_auth(root_password)
            .await
            .context("enabling etcd's authentication")
    }
}

#[cfg(not(feature = "etcd"))]
impl EtcdAdmin {
    pub(crate) async fn set_server_user(
        &self,
        _: ServerId,
        _: &str,
        _: &str,
    ) -> anyhow::Result<()> {
        match *self {}
    }

    pub(crate) async fn refresh_server_user(&self, _: ServerId) -> anyhow::Result<bool> {
        match *self {}
    }

    pub(crate) async fn remove_server_user(&self, _: ServerId) -> anyhow::Result<bool> {
        match *self {}
    }

    pub(crate) async fn enable_auth(&self, _: &str) -> anyhow::Result<()> {
        match *self {}
    }
}

/// Registers server `id`. With `credentials_out`, also gives it its identity: a new
/// signing key (its public half in the registration) and, on etcd, its own etcd user
/// whose role may write this server's keys only; both go into that file (created, mode
/// 0600) for the operator to copy to the server.
pub(crate) async fn server_add(
    store: &dyn Store,
    etcd: Option<&EtcdAdmin>,
    id: ServerId,
    name: &str,
    credentials_out: Option<&Path>,
) -> anyhow::Result<String> {
    if store.get(&keys::server(id)).await?.is_some() {
        bail!("server {id} is already registered");
    }
    let mut reg = Registration {
        id,
        name: name.to_string(),
        registered_at: Timestamp::now(),
        key: None,
    };
    let mut out = format!("registered server {id}");
    if let Some(path) = credentials_out {
        let etcd_login = match etcd {
            Some(_) => Some((identity::etcd_user(id), identity::random_secret()?)),
            None => None,
        };
        let (ident, creds) = Identity::generate(id, etcd_login.clone())?;
        identity::write_credentials(path, &creds)?;
        if let (Some(admin), Some((user, password))) = (etcd, &etcd_login) {
            admin.set_server_user(id, user, password).await?;
            let _ = write!(out, " with etcd user {user}");
        }
        reg.key = Some(ident.public_hex());
        let _ = write!(
            out,
            "; its credentials are in {} (copy it to the server, readable by the worker only, and start `tern-lockstep worker --id {id} --credentials FILE`)",
            path.display()
        );
    } else {
        out.push_str("; the first worker that starts as this server records its signing key");
    }
    match store.create(&keys::server(id), to_json(&reg), None).await {
        Ok(_) => Ok(out),
        Err(tern_store::Error::AlreadyExists { .. }) => bail!("server {id} is already registered"),
        Err(e) => Err(e).context("registering the server"),
    }
}

pub(crate) async fn server_rm(
    store: &dyn Store,
    etcd: Option<&EtcdAdmin>,
    id: ServerId,
    revoke: bool,
) -> anyhow::Result<String> {
    let snap = records::read(store).await?;
    if !snap.servers.contains_key(&id) {
        bail!(
            "server {id} is not registered (registered: {})",
            list(&snap.registered())
        );
    }
    store.delete(&keys::server(id), None).await?;
    let mut out = format!("removed server {id}");
    if revoke {
        match etcd {
            Some(admin) => {
                if admin.remove_server_user(id).await? {
                    let _ = write!(out, "; revoked etcd user {}", identity::etcd_user(id));
                }
            }
            None => out.push_str("; no etcd user to revoke on this store"),
        }
    } else {
        let _ = write!(
            out,
            "; if it comes back, its worker registers it again with the same credentials and it catches up"
        );
    }
    if snap.request().is_some_and(|r| r.servers.contains(&id)) {
        out.push_str(
            "; the current update still lists it: run `tern-lockstep recover` to retry the update on the remaining servers",
        );
    }
    Ok(out)
}

/// `auth refresh`: gives every registered server's etcd user exactly this release's
/// grants (an earlier release's users may write what every worker shared).
pub(crate) async fn auth_refresh(store: &dyn Store, etcd: &EtcdAdmin) -> anyhow::Result<String> {
    let snap = records::read(store).await?;
    let mut done = Vec::new();
    let mut none = Vec::new();
    for id in snap.registered() {
        if etcd.refresh_server_user(id).await? {
            done.push(id);
        } else {
            none.push(id);
        }
    }
    let mut out = format!(
        "the etcd users of server(s) {} may now write only their own keys",
        list(&done)
    );
    if !none.is_empty() {
        let _ = write!(
            out,
            "; server(s) {} have no etcd user (`servers add ID --credentials-out FILE` makes one)",
            list(&none)
        );
    }
    Ok(out)
}

pub(crate) async fn env_set(store: &dyn Store, env: Environment) -> anyhow::Result<String> {
    store
        .put(keys::ENV, env.as_str().as_bytes().to_vec(), None)
        .await?;
    Ok(format!("environment set to {env}"))
}

/// Sets `stop` on the current update (an operator's emergency brake).
pub(crate) async fn stop(store: &dyn Store, reason: &str) -> anyhow::Result<String> {
    let snap = records::read(store).await?;
    let Some((req, rev)) = &snap.request else {
        bail!("no update is in progress");
    };
    if req.stop {
        return Ok(format!("the update to {} is already stopped", req.version));
    }
    let mut req = req.clone();
    req.stop = true;
    req.reason = Some(format!("stopped by an operator: {reason}"));
    store
        .compare_and_swap(keys::CURRENT, *rev, to_json(&req), None)
        .await
        .context("the update changed meanwhile; look again with `tern-lockstep status`")?;
    Ok(format!("stopped the update to {}", req.version))
}

/// Removes the status and contents records: the leader then starts the update again with
/// the servers registered now.
pub(crate) async fn recover(store: &dyn Store) -> anyhow::Result<String> {
    let snap = records::read(store).await?;
    let Some((req, rev)) = &snap.request else {
        return Ok("nothing to recover: no update is recorded".into());
    };
    let completed = snap
        .completed
        .as_ref()
        .is_some_and(|(c, _)| c.version == req.version);
    let finished = !req.stop
        && completed
        && req.servers.iter().all(|id| {
            snap.statuses
                .get(id)
                .is_some_and(|s| s.version == req.version && s.finished)
        });
    if finished {
        let behind: Vec<ServerId> = snap
            .registered()
            .into_iter()
            .filter(|id| {
                snap.completed_servers()
                    .is_some_and(|done| !done.contains(id))
            })
            .collect();
        let mut out = format!(
            "nothing to recover: the update to {} completed on servers {}",
            req.version,
            list(snap.completed_servers().unwrap_or(&req.servers))
        );
        if !behind.is_empty() {
            let _ = write!(
                out,
                "; server(s) {} did not finish it: each is caught up while its worker runs (see `tern-lockstep status`)",
                list(&behind)
            );
        }
        return Ok(out);
    }
    let outcome = store
        .txn(
            &[Compare::mod_revision(keys::CURRENT, *rev)],
            &[
                Op::delete_prefix(keys::STATUS),
                Op::delete_prefix(keys::CONTENTS),
            ],
        )
        .await?;
    if let TxnOutcome::Failed { .. } = outcome {
        bail!("the update changed meanwhile; look again with `tern-lockstep status`");
    }
    let gone: Vec<ServerId> = req
        .servers
        .iter()
        .copied()
        .filter(|id| !snap.servers.contains_key(id))
        .collect();
    let what = if req.catch_up { "catch-up" } else { "update" };
    let mut out = format!("removed the records of the {what} to {}", req.version);
    if !gone.is_empty() {
        let _ = write!(out, " (no longer registered: {})", list(&gone));
    }
    let _ = write!(out, "; {}", next_after_recover(store, &snap, req).await);
    Ok(out)
}

/// What the leading updater runs once the records are gone, as `updater_next` decides
/// it from the records left, the servers registered now and the workers running,
/// taking the recovered version as the newest release its source offers (the leader
/// asks its source again: a newer release is started instead, on every registered
/// server).
async fn next_after_recover(store: &dyn Store, snap: &Snapshot, req: &UpdateRequest) -> String {
    use tern_core::lockstep::protocol::{UpdaterAction, UpdaterIdle, UpdaterView, updater_next};
    use tern_core::lockstep::release::{Candidate, ReleaseVersion};
    let registered = snap.registered();
    let running = crate::updater::running_workers(store, snap).await;
    let completed = snap.completed_version();
    let latest = ReleaseVersion::parse(&req.version)
        .ok()
        .map(|version| Candidate {
            index: 0,
            tag: req.version.clone(),
            version,
            prerelease: false,
        });
    let action = updater_next(&UpdaterView {
        request: None,
        statuses: &std::collections::BTreeMap::new(),
        untrusted: &[],
        registered: &registered,
        running: &running,
        completed: completed.as_ref(),
        completed_servers: snap.completed_servers(),
        latest: latest.as_ref(),
        alert: None,
        now: Timestamp::now(),
        stall_timeout: std::time::Duration::MAX,
        stalled_after: 1.0,
    });
    let unless = format!(
        "if its source still offers {} as the newest release (a newer one is started instead, on every registered server)",
        req.version
    );
    match action {
        UpdaterAction::Start {
            version,
            servers,
            catch_up: false,
        } => format!(
            "the leading updater starts the update to {version} from step 1 on servers {} (those registered now), {unless}",
            list(&servers)
        ),
        UpdaterAction::Start {
            version,
            servers,
            catch_up: true,
        } => format!(
            "the leading updater catches up servers {} to {version} (registered, running, and not among those that finished it), {unless}",
            list(&servers)
        ),
        UpdaterAction::Idle(UpdaterIdle::NoServers) => {
            "no server is registered: the leading updater starts nothing until one is (`tern-lockstep servers add`, or a worker starting)".to_string()
        }
        UpdaterAction::Idle(UpdaterIdle::UpToDate) => format!(
            "every registered server that runs finished {}: the leading updater has nothing to run {unless}",
            req.version
        ),
        _ => "the leading updater starts the newest release its source offers, if it is newer than the completed version".to_string(),
    }
}

fn list(ids: &[ServerId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `tern-lockstep status`: the environment, the update and where each server is.
pub(crate) fn render_status(snap: &Snapshot, leader: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "environment: {}", snap.env);
    let _ = writeln!(out, "leading updater: {}", leader.unwrap_or("none"));
    let _ = writeln!(
        out,
        "completed: {}",
        snap.completed
            .as_ref()
            .map_or("none".to_string(), |(c, _)| match &c.servers {
                Some(s) => format!("{} at {} by servers {}", c.version, c.at, list(s)),
                None => format!("{} at {}", c.version, c.at),
            })
    );
    if let Some((a, _)) = &snap.alert {
        let _ = writeln!(out, "alert: {} since {}: {}", a.kind, a.since, a.message);
    }
    match snap.request() {
        None => {
            let _ = writeln!(out, "update: none");
        }
        Some(r) => {
            let finished = r.servers.iter().all(|id| {
                snap.statuses
                    .get(id)
                    .is_some_and(|s| s.version == r.version && s.finished)
            });
            let state = match (r.stop, finished) {
                (true, _) => "STOPPED",
                (false, true) => "finished",
                (false, false) => "running",
            };
            let what = if r.catch_up { "catch-up" } else { "update" };
            let _ = writeln!(
                out,
                "{what}: {} ({state}), servers {}",
                r.version,
                list(&r.servers)
            );
            if let Some(reason) = &r.reason {
                let _ = writeln!(out, "  reason: {reason}");
                let _ = writeln!(
                    out,
                    "  to go on: fix the cause (remove a dead server with `tern-lockstep servers rm ID`), then `tern-lockstep recover`"
                );
            }
            for id in &r.servers {
                if snap.untrusted.contains(id) {
                    let why = if snap.servers.contains_key(id) {
                        format!("not signed by server {id}'s registered key")
                    } else {
                        format!("server {id} is no longer registered")
                    };
                    let _ = writeln!(out, "  server {id}: status IGNORED: {why}");
                    continue;
                }
                let line = match snap.statuses.get(id).filter(|s| s.version == r.version) {
                    None => "not started".to_string(),
                    Some(s) if s.error => format!("FAILED at step {}: {}", s.step, s.message),
                    Some(s) if s.finished => "finished".to_string(),
                    Some(s) => format!("step {}", s.step),
                };
                let _ = writeln!(out, "  server {id}: {line}");
            }
        }
    }
    let waiting: Vec<ServerId> = snap
        .servers
        .keys()
        .copied()
        .filter(|id| snap.request().is_none_or(|r| !r.servers.contains(id)))
        .collect();
    let _ = writeln!(out, "registered: {}", list(&snap.registered()));
    if snap.request().is_some_and(|r| !r.catch_up) && !waiting.is_empty() {
        let _ = writeln!(
            out,
            "  not in this update (registered after it began, or returning): {} (each is caught up once it completes, while its worker runs)",
            list(&waiting)
        );
    }
    for (name, results) in &snap.contents {
        for r in results {
            let line = if r.signed {
                format!(
                    "{} {} on server {}",
                    r.record.version,
                    if r.record.success {
                        "succeeded"
                    } else {
                        "FAILED"
                    },
                    r.server
                )
            } else {
                format!(
                    "a record under server {}'s key IGNORED: not signed by server {} for this update",
                    r.server, r.server
                )
            };
            let _ = writeln!(out, "leader-only {name}: {line}");
        }
    }
    for (key, why) in &snap.unreadable {
        let _ = writeln!(out, "unreadable record {key}: {why}");
    }
    out
}
