//! tern-update: the host updater. Installs agent versions side by side under
//! `<install-dir>/<namespace>/versions`, switches symlinks atomically, restarts the agent,
//! watches its health, rolls back on failure and reports to ternd.
//!
//! Modules do one job each; decisions without I/O are pure functions with table tests
//! (`decide`, `artifact`, `extract::plan`, `links::decide`, `health::Watch`,
//! `backup::validate`, `setup::units`).

pub mod artifact;
mod backup;
mod channel;
pub mod commands;
mod decide;
pub mod directive;
pub mod error;
mod extract;
mod fsutil;
mod health;
mod hooks;
pub mod http;
mod installers;
pub mod layout;
mod links;
pub mod lock;
pub mod log;
pub mod package;
mod pending_install;
pub mod reexec;
mod run;
mod schedule;
pub mod script;
pub mod self_check;
mod self_update;
pub mod service;
pub mod settings;
pub mod setup;
pub mod state;
mod trust;
pub mod update;
pub mod watch;

pub use error::{Error, Result};
pub use extract::unpack_checked;

/// Entry points for the fuzzers of `fuzz/` (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::extract::fuzz_plan;
}
