//! ternd, Tern's control plane: stores the resources, reconciles the rollout every
//! report period (holding the leader lease), answers `find` from memory, takes
//! heartbeats into an in-memory inventory and serves the admin API and metrics.
//!
//! Every module is private; the public surface is what the `ternd` binary, the
//! benchmarks, the fuzzers and this crate's own integration tests use:
//!
//! - Starting a replica: [`serve`] with [`ServeOptions`] (a [`Settings`] with its
//!   [`SecuritySettings`], [`LongPollSettings`], [`ReleaseTrust`], [`Prometheus`]; a
//!   [`Backend`], a [`Transport`] from [`transport`], [`Limits`], [`NotifySettings`],
//!   [`Downloads`]), and the helpers `ternd start` calls first: [`create_data_dir`],
//!   [`replica_id`], [`descriptor_budget`], [`check_template`], [`parse_notify_url`].
//! - A replica in process without a listener: [`AppState`] on a [`Clock`] (a
//!   [`DevClock`] in tests and benchmarks), its [`Inventory`].
//! - The route table with each route's [`Access`] level: [`route_table`].
//! - [`bench`]: internals tern-bench drives in process (reconcile, report, the
//!   directive pass), not an API; `fuzzing` (cargo feature `fuzzing`): the fuzzers'
//!   entry points.
//!
//! Inside: `routes` is the HTTP API (see `docs/api.md`), `listen` the accept loop and
//! its bounds; `reconciler` reports and reconciles; `snapshot` is what find answers
//! from and `longpoll` holds find until the host's answer changes; `state` is the
//! replica's shared state, split by concern into parts owned by the modules that keep
//! them. Alert notices, release sources and the Prometheus text writer are
//! tern-outbound's (`notify`, `release_source`, `metrics_text`, re-exported here for
//! ternd's modules).

mod analysis;
mod artifacts;
mod audit;
mod auth;
mod clock;
mod conns;
mod controllers;
mod dashboard;
mod directive_loop;
mod directive_store;
mod directives;
mod downloads;
mod error;
mod freeze;
mod group_fallback;
mod heap;
mod history;
mod history_queue;
mod inventory;
mod keys;
mod listen;
mod longpoll;
mod metrics;
mod metrics_page;
mod pins;
mod products;
mod ratelimit;
mod reconciler;
mod release_check;
mod resources;
mod rollout_history;
mod routes;
mod server;
mod snapshot;
mod state;
mod trust;

pub(crate) use tern_outbound::{metrics_text, notify, release_source};

// Starting a replica: what the `ternd` binary builds from its flags and hands to
// [`serve`].
pub use analysis::Prometheus;
pub use artifacts::{ArtifactCheck, ArtifactCheckError, TemplateError, check_template};
pub use downloads::{Downloads, DownloadsError};
pub use listen::{Limits, descriptor_budget};
pub use longpoll::LongPollSettings;
pub use notify::{NotifyConfigError, NotifySettings, parse_notify_url};
pub use server::{
    DATABASE_FILE, ServeOptions, Transport, create_data_dir, replica_id, serve, transport,
};
pub use state::{SecuritySettings, Settings, SharedAgentToken};
/// Where the shared state lives (`ternd start --backend`): tern-store parses and
/// opens it, as for tern-lockstep.
pub use tern_store::Backend;
pub use trust::ReleaseTrust;

// A replica's state in process, without a listener: tern-bench measures ternd's own
// report, reconcile and inventory paths over it, and the tests build one to list the
// routes.
pub use clock::{Clock, DevClock};
pub use inventory::{AgentRef, Inventory, Recorded, Refused};
pub use state::AppState;

/// Who may call what: the access level of every route, as the router sets it
/// (`tests/access.rs` checks this table against a running ternd).
pub use auth::{Access, Role};
pub use routes::{RouteAccess, routes as route_table};

/// ternd's internals that tern-bench drives in process (`cargo xtask bench reconcile`,
/// `… directives`; cargo feature `bench`, which only tern-bench turns on): public only
/// so that the benchmarks measure the code ternd runs, not a copy; not an API.
#[cfg(feature = "bench")]
pub mod bench {
    pub use crate::error::{ApiError, ApiResult};
    pub use crate::inventory::directed::{ChosenInstall, PassInput, PassSummary, ReleaseTo};
    pub use crate::reconciler::{Reconciler, Reporter, reconcile_once, write_report};
    pub use crate::resources::{Resource, Stored, load, reports, write};
}

/// Entry points for the fuzzers of `fuzz/` (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::routes::public::fuzz_find_query;
}
