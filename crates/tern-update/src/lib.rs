//! tern-update: the host updater. Installs agent versions side by side under
//! `<install-dir>/<namespace>/versions`, switches symlinks atomically, restarts the agent,
//! watches its health, rolls back on failure and reports to ternd.
//!
//! Modules do one job each; decisions without I/O are pure functions with table tests
//! (`decide`, `artifact`, `extract::plan`, `links::decide`, `health::Watch`,
//! `backup::validate`, `setup::units`).

pub mod artifact;
pub mod backup;
pub mod commands;
pub mod decide;
pub mod error;
pub mod extract;
pub mod fsutil;
pub mod health;
pub mod hooks;
pub mod http;
pub mod layout;
pub mod links;
pub mod lock;
pub mod log;
pub mod reexec;
pub mod service;
pub mod setup;
pub mod state;
pub mod update;

pub use error::{Error, Result};
