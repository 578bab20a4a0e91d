//! tern-update: the host updater. Installs agent versions side by side under
//! `<install-dir>/<namespace>/versions`, switches symlinks atomically, restarts the agent,
//! watches its health, rolls back on failure and reports to ternd.
//!
//! Modules do one job each; decisions without I/O are pure functions with table tests
//! (`decide`, `artifact`, `links::decide`, `health::Watch`,
//! `backup::validate`, `setup::units`). ternd's wire protocol and the artifact download
//! are tern-client's; the hostile-input unpacking of tarballs is tern-unpack's.

pub mod artifact;
mod backup;
mod channel;
pub mod commands;
mod decide;
pub mod directive;
pub mod error;
mod fsutil;
mod health;
mod hooks;
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
/// The client of ternd and of artifact servers this updater uses.
pub use tern_client::Client;
