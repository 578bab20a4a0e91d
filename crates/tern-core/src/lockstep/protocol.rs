//! The coordination protocol of seed 004, as decisions: what a worker does next and what
//! the updater (the leader) does next, from the records in the store.
//!
//! Records (JSON under the cluster's prefix; the key layout is the binary's):
//! - the update request `{version, servers, stop}` (one, written by the leader),
//! - each listed server's status `{version, step, finished, error, message}` (written by
//!   that server's worker only),
//! - a leader-only component's `{version, success}` record.
//!
//! A worker records step *k* before it runs it and then waits until every listed server
//! recorded step *k* or later (the barrier); step *k + 1* is recorded only after step *k*
//! ran, so when anyone runs step *k + 1* every listed server has finished step *k*.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::release::{Candidate, ReleaseVersion, is_newer};

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
}

/// `<prefix>/contents/<component>`: a leader-only component's result for a version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderOnlyRecord {
    pub version: String,
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerId>,
    #[serde(default)]
    pub message: String,
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

/// What a worker records once it ran `step` of a plan of `steps` steps.
pub fn after_run(version: &str, step: u32, steps: u32, at: Timestamp) -> ServerStatus {
    ServerStatus {
        version: version.to_string(),
        step: if step >= steps { step } else { step + 1 },
        finished: step >= steps,
        error: false,
        message: String::new(),
        at: Some(at),
    }
}

/// What the updater knows when it decides.
#[derive(Clone, Debug)]
pub struct UpdaterView<'a> {
    pub request: Option<&'a UpdateRequest>,
    pub statuses: &'a BTreeMap<ServerId, ServerStatus>,
    /// The servers registered now.
    pub registered: &'a [ServerId],
    /// The last version the whole cluster finished.
    pub completed: Option<&'a ReleaseVersion>,
    /// The newest release the environment takes, if the source answered.
    pub latest: Option<&'a Candidate>,
    pub now: Timestamp,
    /// Stop an update when no listed server's status changed for this long.
    pub stall_timeout: Duration,
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
    /// Write a new request for `version` listing `servers` (the registered ones, now).
    Start {
        version: String,
        servers: Vec<ServerId>,
    },
    /// Set `stop` with `reason`, and alert.
    Stop {
        reason: String,
    },
    /// Every listed server finished `version`: remember it, clear the alert.
    Complete {
        version: String,
    },
}

/// The updater's next move. Pure: the runtime does it (fenced by the leader lease) and asks again.
pub fn updater_next(v: &UpdaterView<'_>) -> UpdaterAction {
    if let Some(req) = v.request {
        if req.stop {
            return UpdaterAction::Idle(UpdaterIdle::Halted);
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
            return UpdaterAction::Idle(UpdaterIdle::InProgress);
        }
        let current = ReleaseVersion::parse(&req.version).ok();
        let completed_here = current.as_ref().is_some_and(|c| Some(c) == v.completed);
        if !completed_here {
            return UpdaterAction::Complete {
                version: req.version.clone(),
            };
        }
    }
    let Some(latest) = v.latest else {
        return UpdaterAction::Idle(UpdaterIdle::NoRelease);
    };
    if !is_newer(&latest.version, v.completed) {
        return UpdaterAction::Idle(UpdaterIdle::UpToDate);
    }
    if v.registered.is_empty() {
        return UpdaterAction::Idle(UpdaterIdle::NoServers);
    }
    let mut servers = v.registered.to_vec();
    servers.sort_unstable();
    servers.dedup();
    UpdaterAction::Start {
        version: latest.version.to_string(),
        servers,
    }
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
