//! Where the cluster's records live in the store (all under `lockstep/`), and the names
//! of its leases.

use tern_core::lockstep::protocol::ServerId;

pub(crate) const ROOT: &str = "lockstep/";
pub(crate) const ENV: &str = "lockstep/config/env";
pub(crate) const SERVERS: &str = "lockstep/servers/";
/// What `recover` removes, with [`CONTENTS`].
pub(crate) const STATUS: &str = "lockstep/status/";
pub(crate) const CURRENT: &str = "lockstep/status/current";
pub(crate) const SERVER_STATUS: &str = "lockstep/status/servers/";
pub(crate) const CONTENTS: &str = "lockstep/contents/";
/// The last version every listed server finished (kept by `recover`).
pub(crate) const COMPLETED: &str = "lockstep/completed";
/// The alert raised when the update stopped, until it completes (kept by `recover`).
pub(crate) const ALERT: &str = "lockstep/alert";

pub(crate) const UPDATER_LEASE: &str = "lockstep-updater";

pub(crate) fn server(id: ServerId) -> String {
    format!("{SERVERS}{id}")
}

pub(crate) fn server_status(id: ServerId) -> String {
    format!("{SERVER_STATUS}{id}")
}

/// Server `id`'s leader-only results: only it writes under this prefix.
pub(crate) fn contents_of(id: ServerId) -> String {
    format!("{CONTENTS}{id}/")
}

/// Server `id`'s result of leader-only `component`.
pub(crate) fn contents(id: ServerId, component: &str) -> String {
    format!("{}{component}", contents_of(id))
}

/// Server `id`'s claim of a lock: a lease of its own, whose holder is the signed claim.
pub(crate) fn claim_lease(id: ServerId) -> String {
    format!("lockstep-claim-{id}")
}

/// The lock of a rolling component: one server at a time runs it.
pub(crate) fn rolling_lock(component: &str) -> String {
    format!("rolling-{component}")
}

/// The lock of a leader-only component: one server at a time tries it.
pub(crate) fn leader_only_lock(component: &str) -> String {
    format!("leader-only-{component}")
}

/// Held by the one worker acting as server `id`.
pub(crate) fn worker_lease(id: ServerId) -> String {
    format!("lockstep-worker-{id}")
}
