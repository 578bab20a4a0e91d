//! ternd, Tern's control plane: stores the resources, reconciles the rollout every
//! report period (holding the leader lease), answers `find` from memory, takes
//! heartbeats into an in-memory inventory and serves the admin API and metrics.
//!
//! - [`server::serve`]: start everything (used by the `ternd` binary).
//! - [`routes`]: the HTTP API (see `docs/api.md`); `listen`: the accept loop and its
//!   bounds (connection caps, header and idle timeouts).
//! - [`reconciler`]: reports and reconciles; [`snapshot`]: what find answers from;
//!   [`longpoll`]: find held until the host's answer changes.
//! - [`auth`], [`inventory`], [`ratelimit`], [`metrics`], [`clock`]: the parts;
//!   alert notices and release sources are tern-outbound's (`notify`,
//!   `release_source`, re-exported here for ternd's modules).

pub mod analysis;
pub mod artifacts;
pub(crate) mod audit;
pub mod auth;
pub mod clock;
pub(crate) mod conns;
pub(crate) mod controllers;
pub(crate) mod dashboard;
pub(crate) mod directive_loop;
pub(crate) mod directive_store;
pub(crate) mod directives;
pub mod downloads;
pub mod error;
pub(crate) mod freeze;
pub(crate) mod heap;
pub(crate) mod history;
pub(crate) mod history_queue;
pub mod inventory;
pub(crate) mod keys;
pub(crate) mod listen;
pub mod longpoll;
pub(crate) mod metrics;
pub(crate) mod pins;
pub(crate) mod ratelimit;
pub mod reconciler;
pub mod resources;
pub mod routes;
pub mod server;
pub(crate) mod snapshot;
pub mod state;
pub mod trust;

pub(crate) use tern_outbound::{notify, release_source};

/// Entry points for the fuzzers of `fuzz/` (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::routes::public::fuzz_find_query;
}
