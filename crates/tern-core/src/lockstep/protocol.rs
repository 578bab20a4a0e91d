//! The coordination protocol of seed 004, as decisions: what a worker does next and what
//! the updater (the leader) does next, from the records in the store.
//!
//! Records (JSON under the cluster's prefix; the key layout is the binary's):
//! - the update request `{version, servers, stop}` (one, written by the leader),
//! - each listed server's status `{version, step, finished, error, message}` (written by
//!   that server's worker only, and signed by it: [`status_message`] is what it signs,
//!   [`trusted`] what counts),
//! - a leader-only component's `{version, success}` result, written by the server that
//!   ran it under its own key and signed by it for the update it answers
//!   ([`leader_only_message`], [`leader_only_outcome`]),
//! - each server's claim of a lock (a rolling or leader-only component), signed the same
//!   way ([`claim_message`]); the oldest signed claim holds it ([`lock_holder`]).
//!
//! A worker records step *k* before it runs it and then waits until every listed server
//! recorded step *k* or later (the barrier); step *k + 1* is recorded only after step *k*
//! ran, so when anyone runs step *k + 1* every listed server has finished step *k*.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::release::{Candidate, ReleaseVersion, is_newer};
use crate::domain::alert::kind;

/// A server of the cluster (the seed's LRN).
pub type ServerId = u32;

/// The artifact every worker installs, with the digest the leader read once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub url: String,
    /// Hex SHA-256 of the tarball.
    pub sha256: String,
}

/// `<prefix>/status/current`: the update in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRequest {
    pub version: String,
    /// The servers registered when the update began; servers added later wait for the
    /// next update.
    pub servers: Vec<ServerId>,
    /// Set on any failure; cleared only by `recover` (which removes the record).
    pub stop: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// Why `stop` was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The updater that last wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// A catch-up: the version the cluster already completed, run on the listed servers
    /// only (registered since, or returning after they were removed).
    #[serde(default, skip_serializing_if = "is_false")]
    pub catch_up: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl UpdateRequest {
    /// The same update as `other`: the same request, perhaps stopped since (not a later
    /// request for the same version, as `recover` and a catch-up write). A worker's
    /// result is recorded against the update it ran for, even after `stop` was set, and
    /// never against a later one.
    pub fn same_update(&self, other: &UpdateRequest) -> bool {
        self.version == other.version
            && self.started_at == other.started_at
            && self.servers == other.servers
            && self.catch_up == other.catch_up
    }
}

/// `<prefix>/status/servers/<id>`: where one server is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub version: String,
    pub step: u32,
    pub finished: bool,
    pub error: bool,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    /// The writer's barrier timeout in seconds: how long it waits for the others before it
    /// fails the step (the updater alerts at a fraction of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier_timeout: Option<u64>,
}

/// What a worker signs for its status: the server, the update it belongs to (so a
/// status cannot be replayed into a later update of the same version) and every field.
/// The message comes last, so the fixed-format lines before it cannot be forged by it.
pub fn status_message(server: ServerId, request: &UpdateRequest, status: &ServerStatus) -> Vec<u8> {
    let at = |t: Option<Timestamp>| t.map_or_else(|| "-".to_string(), |t| t.to_string());
    format!(
        "tern-lockstep status v1\nserver {server}\n{}\nversion {}\nstep {}\nfinished {}\nerror {}\nat {}\nbarrier-timeout {}\nmessage {}",
        update_line(request),
        status.version,
        status.step,
        status.finished,
        status.error,
        at(status.at),
        status.barrier_timeout.map_or_else(|| "-".to_string(), |t| t.to_string()),
        status.message,
    )
    .into_bytes()
}

/// A status as read from the store, with whose key verified its signature (none: no
/// signature, a bad one, or no key registered for its server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusRecord {
    pub status: ServerStatus,
    pub signed_by: Option<ServerId>,
}

/// The statuses that count: each signed by the server whose status it is. Any other (a
/// second worker claiming a server's id, a raw write to the store, a status of an earlier
/// update replayed) never moves a barrier nor completes an update: its server is returned
/// apart, and a listed server's untrusted status holds every worker and stops the update.
pub fn trusted(
    records: &BTreeMap<ServerId, StatusRecord>,
) -> (BTreeMap<ServerId, ServerStatus>, Vec<ServerId>) {
    let mut good = BTreeMap::new();
    let mut ignored = Vec::new();
    for (&id, r) in records {
        if r.signed_by == Some(id) {
            good.insert(id, r.status.clone());
        } else {
            ignored.push(id);
        }
    }
    (good, ignored)
}

/// `<prefix>/contents/<server>/<component>`: a leader-only component's result, written
/// by the server that ran it under its own key and signed by it
/// ([`leader_only_message`]): it counts only for the update it answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderOnlyRecord {
    pub version: String,
    pub success: bool,
    /// Informational: who ran it is the server whose key signed it (its key path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerId>,
    #[serde(default)]
    pub message: String,
}

/// The update a record answers, as its signature binds it: the version, the instant
/// the request was written and whether it is a catch-up (a request written again for
/// the same version, after a recover or as a catch-up, is another update).
fn update_line(request: &UpdateRequest) -> String {
    let at = request
        .started_at
        .map_or_else(|| "-".to_string(), |t| t.to_string());
    format!("update {} {at} {}", request.version, request.catch_up)
}

/// What a server signs for its result of a leader-only component: the server, the
/// update it answers ([`update_line`]), the component and every field, the message
/// last. A result copied from another update, another component or another server,
/// or planted before the update began, does not verify.
pub fn leader_only_message(
    server: ServerId,
    request: &UpdateRequest,
    component: &str,
    record: &LeaderOnlyRecord,
) -> Vec<u8> {
    format!(
        "tern-lockstep leader-only v1\nserver {server}\n{}\ncomponent {component}\nversion {}\nsuccess {}\nmessage {}",
        update_line(request),
        record.version,
        record.success,
        record.message,
    )
    .into_bytes()
}

/// A leader-only result as read, with whether its server's registered key signed it
/// for the current update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderOnlyResult {
    /// The server under whose key it was written.
    pub server: ServerId,
    pub record: LeaderOnlyRecord,
    pub signed: bool,
}

/// What the signed results of a leader-only component say for `request`: `None` while
/// nobody has recorded one; `Some(Err((server, message)))` when a listed server
/// recorded a failure (a failure wins: it is what stops the update); `Some(Ok(server))`
/// when one recorded a success. A record that is not signed by its server for this
/// update, or not of its version, or of a server the update does not list, counts for
/// nothing: it was planted or left over, and never stands for a run.
pub fn leader_only_outcome(
    request: &UpdateRequest,
    results: &[LeaderOnlyResult],
) -> Option<Result<ServerId, (ServerId, String)>> {
    let counted = || {
        results.iter().filter(|r| {
            r.signed && r.record.version == request.version && request.servers.contains(&r.server)
        })
    };
    if let Some(f) = counted().find(|r| !r.record.success) {
        return Some(Err((f.server, f.record.message.clone())));
    }
    counted().find(|r| r.record.success).map(|r| Ok(r.server))
}

/// What a server signs to claim a lock (`rolling-<component>`, `leader-only-<component>`)
/// for an update: the claim is the holder of the server's own claim lease, so that no
/// server can take, release or forge another's.
pub fn claim_message(server: ServerId, request: &UpdateRequest, lock: &str) -> Vec<u8> {
    format!(
        "tern-lockstep claim v1\nserver {server}\n{}\nlock {lock}",
        update_line(request)
    )
    .into_bytes()
}

/// A claim of a lock as read: whose claim lease holds it, its fencing token (the
/// store's, growing with every acquisition), and whether that server's registered key
/// signed it for the current update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub server: ServerId,
    pub lock: String,
    pub token: u64,
    pub signed: bool,
}

/// Who holds `lock` for the update: of the signed claims of it by servers the update
/// lists, the oldest (lowest token). A server runs a locked step only while it holds
/// the lock: claims are only ever added behind the holder, so the holder stays the
/// holder until its claim goes (released, or expired with its process).
pub fn lock_holder(request: &UpdateRequest, claims: &[Claim], lock: &str) -> Option<ServerId> {
    claims
        .iter()
        .filter(|c| c.signed && c.lock == lock && request.servers.contains(&c.server))
        .min_by_key(|c| c.token)
        .map(|c| c.server)
}

/// What a worker knows when it decides.
#[derive(Clone, Debug)]
pub struct WorkerView<'a> {
    pub me: ServerId,
    pub request: Option<&'a UpdateRequest>,
    pub statuses: &'a BTreeMap<ServerId, ServerStatus>,
    /// The request's version is installed here (its plan read).
    pub installed: bool,
    /// How many steps its plan has (meaningful when `installed`).
    pub steps: u32,
    /// How long this worker has been waiting at its current barrier.
    pub waited: Duration,
    pub barrier_timeout: Duration,
    /// Servers whose status record is not signed by them ([`trusted`] dropped it).
    pub untrusted: &'a [ServerId],
}

/// Why a worker has nothing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Idle {
    NoUpdate,
    /// The update began before this server registered.
    NotListed,
    /// This server finished the update.
    Finished,
}

/// Why a worker holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Halt {
    /// The request says stop: nothing moves until `recover`.
    Stopped,
    /// This server recorded an error; the leader will set stop.
    OwnError,
    /// Another listed server recorded an error.
    OtherFailed(ServerId),
    /// A listed server's status record is not signed by that server.
    Untrusted(ServerId),
}

/// A worker's next move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerAction {
    Idle(Idle),
    Halted(Halt),
    /// Download, verify and unpack the request's version, then read its plan.
    Install {
        version: String,
    },
    /// Record `step` (not finished) for the request's version.
    Record {
        step: u32,
    },
    /// Every listed server recorded `step` or later: run it, then record `step + 1` (or
    /// `finished` after the last).
    Run {
        step: u32,
    },
    /// Wait for these servers to record `step`.
    Wait {
        step: u32,
        missing: Vec<ServerId>,
    },
    /// The barrier timed out: record an error with this message.
    Fail {
        step: u32,
        message: String,
    },
}

/// True when `status` shows `version` at `step` or later (finished counts as past every step).
fn reached(status: Option<&ServerStatus>, version: &str, step: u32) -> bool {
    status.is_some_and(|s| s.version == version && !s.error && (s.finished || s.step >= step))
}

/// A worker's next move. Pure: the runtime does it and asks again.
pub fn worker_next(v: &WorkerView<'_>) -> WorkerAction {
    let Some(req) = v.request else {
        return WorkerAction::Idle(Idle::NoUpdate);
    };
    if !req.servers.contains(&v.me) {
        return WorkerAction::Idle(Idle::NotListed);
    }
    if req.stop {
        return WorkerAction::Halted(Halt::Stopped);
    }
    // A listed server's status that its server did not sign may hide anything (a
    // failure overwritten, a step never reached): nobody goes on; the updater stops.
    if let Some(&id) = v.untrusted.iter().find(|id| req.servers.contains(id)) {
        return WorkerAction::Halted(Halt::Untrusted(id));
    }
    let mine = v.statuses.get(&v.me).filter(|s| s.version == req.version);
    if let Some(s) = mine {
        if s.error {
            return WorkerAction::Halted(Halt::OwnError);
        }
        if s.finished {
            return WorkerAction::Idle(Idle::Finished);
        }
    }
    if let Some((&id, _)) = v
        .statuses
        .iter()
        .find(|(id, s)| req.servers.contains(id) && s.version == req.version && s.error)
    {
        return WorkerAction::Halted(Halt::OtherFailed(id));
    }
    if !v.installed {
        return WorkerAction::Install {
            version: req.version.clone(),
        };
    }
    let Some(s) = mine else {
        return WorkerAction::Record { step: 1 };
    };
    let step = s.step.max(1);
    if s.step == 0 {
        return WorkerAction::Record { step };
    }
    let missing: Vec<ServerId> = req
        .servers
        .iter()
        .copied()
        .filter(|id| !reached(v.statuses.get(id), &req.version, step))
        .collect();
    if missing.is_empty() {
        return WorkerAction::Run { step };
    }
    if v.waited >= v.barrier_timeout {
        let list: Vec<String> = missing.iter().map(ToString::to_string).collect();
        return WorkerAction::Fail {
            step,
            message: format!(
                "timed out after {}s waiting for server(s) {} to reach step {step} of {}",
                v.barrier_timeout.as_secs(),
                list.join(", "),
                req.version
            ),
        };
    }
    WorkerAction::Wait { step, missing }
}

/// Whether a worker that decided to run `step` may still go on: asked again before it
/// takes a step's lease, while it waits for one, once it holds it, and before each
/// further command. Anything but
/// the same `Run` (a stop, a peer's error, a new update) holds it, so one failure never
/// lets another server start the step.
pub fn may_go_on(v: &WorkerView<'_>, step: u32) -> Result<(), WorkerAction> {
    match worker_next(v) {
        WorkerAction::Run { step: s } if s == step => Ok(()),
        other => Err(other),
    }
}

/// What a worker records once it ran `step` of a plan of `steps` steps.
pub fn after_run(version: &str, step: u32, steps: u32, at: Timestamp) -> ServerStatus {
    ServerStatus {
        version: version.to_string(),
        step: if step >= steps { step } else { step + 1 },
        finished: step >= steps,
        error: false,
        message: String::new(),
        at: Some(at),
        barrier_timeout: None,
    }
}

/// What the updater knows when it decides.
#[derive(Clone, Debug)]
pub struct UpdaterView<'a> {
    pub request: Option<&'a UpdateRequest>,
    /// The trusted statuses ([`trusted`]).
    pub statuses: &'a BTreeMap<ServerId, ServerStatus>,
    /// Servers whose status record is not signed by them.
    pub untrusted: &'a [ServerId],
    /// The servers registered now.
    pub registered: &'a [ServerId],
    /// The registered servers whose worker runs (holds its worker lease): only those are
    /// caught up, so a server registered ahead of its machine is not waited for.
    pub running: &'a [ServerId],
    /// The last version the whole cluster finished.
    pub completed: Option<&'a ReleaseVersion>,
    /// The servers that finished `completed` (`None`: not known, as in records written
    /// before catch-ups existed; nobody is caught up then).
    pub completed_servers: Option<&'a [ServerId]>,
    /// The newest release the environment takes, if the source answered.
    pub latest: Option<&'a Candidate>,
    /// The kind of the alert raised now, if any.
    pub alert: Option<&'a str>,
    pub now: Timestamp,
    /// Stop an update when no listed server's status changed for this long.
    pub stall_timeout: Duration,
    /// Alert `lockstep_stalled` when servers have waited at a barrier this fraction of
    /// their barrier timeout (0 < f ≤ 1).
    pub stalled_after: f64,
}

/// Why the updater has nothing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdaterIdle {
    UpToDate,
    NoRelease,
    NoServers,
    InProgress,
    /// `stop` is set: waiting for `recover`.
    Halted,
}

/// The updater's next move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdaterAction {
    Idle(UpdaterIdle),
    /// Write a new request for `version` listing `servers`: every server registered now,
    /// or (a catch-up) the registered servers that did not finish the completed version.
    Start {
        version: String,
        servers: Vec<ServerId>,
        catch_up: bool,
    },
    /// Set `stop` with `reason`, and alert.
    Stop {
        reason: String,
    },
    /// Every listed server finished `version`: remember it and who finished it (`servers`,
    /// with those of an earlier run of the same version), clear the alert.
    Complete {
        version: String,
        servers: Vec<ServerId>,
    },
    /// Servers have waited at a barrier long enough to worry: raise `lockstep_stalled`
    /// (nothing stops; the workers' barrier timeout still decides).
    AlertStalled {
        message: String,
    },
    /// The stalled barrier passed: clear `lockstep_stalled`.
    ClearStalled,
    /// Remove a catch-up none of whose servers still needs it (they were unregistered).
    Withdraw {
        reason: String,
    },
}

fn sorted(mut ids: Vec<ServerId>) -> Vec<ServerId> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The registered servers that did not finish the completed version and whose worker
/// runs.
fn behind_completed(v: &UpdaterView<'_>) -> Vec<ServerId> {
    match (v.completed, v.completed_servers) {
        (Some(_), Some(done)) => sorted(
            v.registered
                .iter()
                .copied()
                .filter(|id| !done.contains(id) && v.running.contains(id))
                .collect(),
        ),
        _ => Vec::new(),
    }
}

/// The updater's next move. Pure: the runtime does it (fenced by the leader lease) and asks again.
pub fn updater_next(v: &UpdaterView<'_>) -> UpdaterAction {
    let stalled_alert = v.alert == Some(kind::LOCKSTEP_STALLED);
    let newer = v
        .latest
        .filter(|l| is_newer(&l.version, v.completed) && !v.registered.is_empty());
    if let Some(req) = v.request {
        if req.stop {
            return UpdaterAction::Idle(UpdaterIdle::Halted);
        }
        if let Some(id) = v.untrusted.iter().find(|id| req.servers.contains(id)) {
            let reason = if v.registered.contains(id) {
                format!(
                    "the status of server {id} is not signed by server {id}'s registered key: another identity wrote it (a second worker claiming id {id}, or a write by hand); find out who before `tern-lockstep recover`"
                )
            } else {
                format!(
                    "server {id} was unregistered during the update to {}: `tern-lockstep recover` runs it again without it",
                    req.version
                )
            };
            return UpdaterAction::Stop { reason };
        }
        let of = |id: &ServerId| v.statuses.get(id).filter(|s| s.version == req.version);
        if let Some((id, s)) = req
            .servers
            .iter()
            .find_map(|id| of(id).filter(|s| s.error).map(|s| (id, s)))
        {
            return UpdaterAction::Stop {
                reason: format!(
                    "server {id} failed step {} of {}: {}",
                    s.step, req.version, s.message
                ),
            };
        }
        if req.catch_up {
            // A catch-up never holds back a newer release: that update lists every
            // registered server, the caught-up ones too.
            if let Some(latest) = newer {
                return UpdaterAction::Start {
                    version: latest.version.to_string(),
                    servers: sorted(v.registered.to_vec()),
                    catch_up: false,
                };
            }
            if req.servers.iter().any(|id| !v.registered.contains(id)) {
                let behind = behind_completed(v);
                return match v.completed {
                    Some(c) if !behind.is_empty() => UpdaterAction::Start {
                        version: c.to_string(),
                        servers: behind,
                        catch_up: true,
                    },
                    _ => UpdaterAction::Withdraw {
                        reason: format!(
                            "the catch-up of server(s) {} to {}: no longer registered",
                            list(&req.servers),
                            req.version
                        ),
                    },
                };
            }
        }
        let done = req
            .servers
            .iter()
            .all(|id| of(id).is_some_and(|s| s.finished));
        if !done {
            let last = req
                .servers
                .iter()
                .filter_map(|id| of(id).and_then(|s| s.at))
                .chain(req.started_at)
                .max();
            if let Some(last) = last {
                let quiet = v.now.duration_since(last);
                if quiet.as_secs() >= 0 && quiet.unsigned_abs() >= v.stall_timeout {
                    let behind = slowest(req, v.statuses);
                    return UpdaterAction::Stop {
                        reason: format!(
                            "no progress for {}s in the update to {}: {behind}",
                            v.stall_timeout.as_secs(),
                            req.version
                        ),
                    };
                }
            }
            match barrier_stall(req, v.statuses, v.now, v.stalled_after) {
                Some(message) if !stalled_alert => {
                    return UpdaterAction::AlertStalled { message };
                }
                None if stalled_alert => return UpdaterAction::ClearStalled,
                _ => return UpdaterAction::Idle(UpdaterIdle::InProgress),
            }
        }
        let current = ReleaseVersion::parse(&req.version).ok();
        let same = current.as_ref().is_some_and(|c| Some(c) == v.completed);
        let recorded = v
            .completed_servers
            .is_some_and(|done| req.servers.iter().all(|id| done.contains(id)));
        if !(same && (recorded || (v.completed_servers.is_none() && !req.catch_up))) {
            let mut servers = req.servers.clone();
            if same {
                servers.extend(v.completed_servers.unwrap_or_default());
            }
            return UpdaterAction::Complete {
                version: req.version.clone(),
                servers: sorted(servers),
            };
        }
    }
    if stalled_alert {
        return UpdaterAction::ClearStalled;
    }
    if let Some(latest) = newer {
        return UpdaterAction::Start {
            version: latest.version.to_string(),
            servers: sorted(v.registered.to_vec()),
            catch_up: false,
        };
    }
    if v.latest.is_some_and(|l| is_newer(&l.version, v.completed)) {
        return UpdaterAction::Idle(UpdaterIdle::NoServers);
    }
    let behind = behind_completed(v);
    if let (Some(c), false) = (v.completed, behind.is_empty()) {
        return UpdaterAction::Start {
            version: c.to_string(),
            servers: behind,
            catch_up: true,
        };
    }
    if v.latest.is_none() {
        return UpdaterAction::Idle(UpdaterIdle::NoRelease);
    }
    UpdaterAction::Idle(UpdaterIdle::UpToDate)
}

/// Servers waiting at a barrier for at least `fraction` of their barrier timeout, and
/// the servers they wait for: the message of a `lockstep_stalled` alert.
fn barrier_stall(
    req: &UpdateRequest,
    statuses: &BTreeMap<ServerId, ServerStatus>,
    now: Timestamp,
    fraction: f64,
) -> Option<String> {
    let of = |id: &ServerId| {
        statuses
            .get(id)
            .filter(|s| s.version == req.version && !s.error)
    };
    // The furthest barrier anyone waits at: a server that recorded step k waits until
    // every listed server recorded k.
    let top = req
        .servers
        .iter()
        .filter_map(of)
        .filter(|s| !s.finished)
        .map(|s| s.step)
        .max()?;
    let missing: Vec<ServerId> = req
        .servers
        .iter()
        .copied()
        .filter(|id| !reached(statuses.get(id), &req.version, top))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let waiting: Vec<(ServerId, &ServerStatus)> = req
        .servers
        .iter()
        .filter_map(|id| {
            of(id)
                .filter(|s| !s.finished && s.step == top)
                .map(|s| (*id, s))
        })
        .collect();
    let since = waiting.iter().filter_map(|(_, s)| s.at).min()?;
    let timeout = waiting
        .iter()
        .filter_map(|(_, s)| s.barrier_timeout)
        .min()?;
    let waited = now.duration_since(since);
    if waited.as_secs() < 0 {
        return None;
    }
    let waited = waited.unsigned_abs();
    let limit = Duration::from_secs_f64(timeout as f64 * fraction.clamp(0.0, 1.0));
    if waited < limit {
        return None;
    }
    let ids: Vec<ServerId> = waiting.iter().map(|(id, _)| *id).collect();
    Some(format!(
        "server(s) {} have not reached step {top} of {}: server(s) {} have waited {}s of their {timeout}s barrier timeout there",
        list(&missing),
        req.version,
        list(&ids),
        waited.as_secs()
    ))
}

fn list(ids: &[ServerId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which listed servers are furthest behind, for a stall message.
fn slowest(req: &UpdateRequest, statuses: &BTreeMap<ServerId, ServerStatus>) -> String {
    let at = |id: &ServerId| {
        statuses
            .get(id)
            .filter(|s| s.version == req.version)
            .map(|s| if s.finished { u32::MAX } else { s.step })
    };
    let least = req
        .servers
        .iter()
        .map(|id| at(id).unwrap_or(0))
        .min()
        .unwrap_or(0);
    let ids: Vec<String> = req
        .servers
        .iter()
        .filter(|id| at(id).unwrap_or(0) == least)
        .map(ToString::to_string)
        .collect();
    if least == 0 {
        format!("server(s) {} never started it", ids.join(", "))
    } else {
        format!("server(s) {} are still at step {least}", ids.join(", "))
    }
}
