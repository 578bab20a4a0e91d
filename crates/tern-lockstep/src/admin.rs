//! The operator's commands: register and remove servers, set the environment, show the
//! update, stop it, recover from a stop. They write the store directly (as `neco` does
//! etcd), each write a compare-and-swap or a transaction.

use std::fmt::Write as _;

use anyhow::{Context as _, bail};
use jiff::Timestamp;
use tern_core::lockstep::protocol::ServerId;
use tern_core::lockstep::release::Environment;
use tern_store::{Compare, Op, Store, TxnOutcome};

use crate::keys;
use crate::records::{self, Registration, Snapshot, to_json};

pub(crate) async fn server_add(
    store: &dyn Store,
    id: ServerId,
    name: &str,
) -> anyhow::Result<String> {
    let reg = Registration {
        id,
        name: name.to_string(),
        registered_at: Timestamp::now(),
    };
    match store.create(&keys::server(id), to_json(&reg), None).await {
        Ok(_) => Ok(format!("registered server {id}")),
        Err(tern_store::Error::AlreadyExists { .. }) => bail!("server {id} is already registered"),
        Err(e) => Err(e).context("registering the server"),
    }
}

pub(crate) async fn server_rm(store: &dyn Store, id: ServerId) -> anyhow::Result<String> {
    let snap = records::read(store).await?;
    if !snap.servers.contains_key(&id) {
        bail!(
            "server {id} is not registered (registered: {})",
            list(&snap.registered())
        );
    }
    store.delete(&keys::server(id), None).await?;
    let mut out = format!("removed server {id}");
    if snap.request().is_some_and(|r| r.servers.contains(&id)) {
        out.push_str(
            "; the current update still lists it: run `tern-lockstep recover` to retry the update on the remaining servers",
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
    let mut out = format!(
        "removed the records of the update to {}; the leading updater starts it again with servers {}",
        req.version,
        list(&snap.registered())
    );
    if !gone.is_empty() {
        let _ = write!(out, " (no longer registered: {})", list(&gone));
    }
    Ok(out)
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
            .map_or("none".to_string(), |(c, _)| format!(
                "{} at {}",
                c.version, c.at
            ))
    );
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
            let _ = writeln!(
                out,
                "update: {} ({state}), servers {}",
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
    if snap.request().is_some() && !waiting.is_empty() {
        let _ = writeln!(
            out,
            "  not in this update (registered after it began): {}",
            list(&waiting)
        );
    }
    for (name, rec) in &snap.contents {
        let _ = writeln!(
            out,
            "leader-only {name}: {} {}",
            rec.version,
            if rec.success { "succeeded" } else { "FAILED" }
        );
    }
    for (key, why) in &snap.unreadable {
        let _ = writeln!(out, "unreadable record {key}: {why}");
    }
    out
}
