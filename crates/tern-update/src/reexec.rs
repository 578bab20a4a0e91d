//! Updating the updater: every command first runs the managed updater release (the
//! `updater` namespace, `self_check`), else the `tern-update` shipped in the active
//! version, when it differs from the running binary. It runs as a child with a
//! guard variable (so it never re-executes again); if it cannot start or does not
//! understand the command line (exit 2), the running binary carries on itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::layout::Layout;
use crate::log;
use crate::state;

pub(crate) use crate::self_check::GUARD_ENV;

/// The updater to hand commands to, when it exists and is not this binary: the
/// release the `updater` namespace manages (`self_update`), when the host has one;
/// else the one shipped in the active agent version.
pub fn candidate(layout: &Layout, current_exe: &Path) -> Option<PathBuf> {
    if std::env::var_os(GUARD_ENV).is_some() {
        return None;
    }
    let exe = match crate::self_check::managed_exe(&layout.install_dir) {
        Some(exe) => exe,
        None => {
            let file = state::load(&layout.update_yaml()).ok()??;
            let active = file.status.active?;
            layout.version_dir(&active).join("bin").join("tern-update")
        }
    };
    let exe_real = std::fs::canonicalize(&exe).ok()?;
    let cur_real = std::fs::canonicalize(current_exe).ok()?;
    (exe_real != cur_real && exe_real.is_file()).then_some(exe_real)
}

/// Runs `exe` with our arguments; `Some(code)` when it handled the command.
pub fn delegate(exe: &Path, args: &[std::ffi::OsString]) -> Option<i32> {
    log::info(format!(
        "running the active version's updater {}",
        exe.display()
    ));
    match Command::new(exe).args(args).env(GUARD_ENV, "1").status() {
        Ok(s) => match s.code() {
            Some(2) => {
                log::warn(format!(
                    "{} did not accept the command line; running this updater instead",
                    exe.display()
                ));
                None
            }
            Some(code) => Some(code),
            None => {
                log::warn(format!(
                    "{} was killed by a signal; running this updater instead",
                    exe.display()
                ));
                None
            }
        },
        Err(e) => {
            log::warn(format!(
                "cannot run {}: {e}; running this updater instead",
                exe.display()
            ));
            None
        }
    }
}
