//! tern-update: the host updater. Installs agent versions side by side under
//! `<install-dir>/<namespace>/versions`, switches symlinks atomically, restarts the agent,
//! watches its health, rolls back on failure and reports to ternd.
//!
//! Modules do one job each; decisions without I/O are pure functions with table tests
//! (`decide`, `artifact`, `links::decide`, `health::Watch`,
//! `backup::validate`, `setup::units`). ternd's wire protocol and the artifact download
//! are tern-client's; the hostile-input unpacking of tarballs is tern-unpack's.

mod agent;
mod artifact;
mod backup;
mod channel;
mod cleanup;
mod commands;
mod ctx;
mod decide;
mod directive;
mod download;
mod error;
mod fsutil;
mod health;
mod heartbeat;
mod hooks;
mod host_facts;
mod identity;
mod installers;
mod join;
mod layout;
mod link_switch;
mod links;
mod lock;
mod log;
mod package;
mod pending_install;
mod random;
mod reexec;
mod run;
mod schedule;
mod script;
mod self_check;
mod self_update;
mod service;
mod settings;
mod setup;
mod state;
mod switch;
mod trust;
mod update;
mod watch;

// What the binary (src/main.rs) uses; everything else stays inside the crate, but for
// the few hooks the integration tests need (`test_support`).

/// The subcommands, one function each, over the [`Ctx`] the binary builds.
pub use commands::{
    EnableArgs, Report, ScheduleAction, disable, enable, heartbeat, link_package, pin, schedule,
    status, uninstall, unlink_package, unpin, update,
};
pub use ctx::Ctx;
pub use error::{Error, Result};
pub use layout::{Layout, update_yaml_in, validate_suffix};
/// The updater's log lines on stderr; the binary's own messages go through them too.
pub use log::{
    Format as LogFormat, error as log_error, info as log_info, init as init_log, warn as log_warn,
};
pub use package::{Manager, PackageSpec};
pub use reexec::{
    Duty as ReexecDuty, Release as ReexecRelease, candidate as reexec_candidate,
    delegate as reexec_delegate,
};
pub use self_check::{identify_release, self_check};
pub use settings::{Settings, resolve as resolve_settings};
pub use setup::run as setup;
pub use state::{UpdateFile, parse as parse_update_file, saved_settings};
/// The client of ternd and of artifact servers this updater uses.
pub use tern_client::Client;
pub use watch::{MAX_HOLD_SECONDS, WatchArgs, run as watch};

/// What only the integration tests reach for (feature `test-support`, which this
/// crate's own dev-dependency on itself turns on; no build of the binary has it).
#[cfg(feature = "test-support")]
pub mod test_support {
    /// Go's name of an architecture, as artifact names spell it (the tests name their
    /// tarballs with it).
    pub use crate::artifact::go_arch;
    /// The namespace lock (the tests hold it to see a run refused).
    pub use crate::lock::{Wait as LockWait, acquire as acquire_lock};
    /// Whether a process lives (the tests watch the agent's).
    pub use crate::service::pid_alive;
    /// Writes `update.yaml` as tern-update does (the tests damage or age it).
    pub use crate::state::save as save_update_file;
}
