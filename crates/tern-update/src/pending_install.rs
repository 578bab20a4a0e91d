//! The install instruction a heartbeat answer brought, kept in `install_pending.json`
//! for the next step that holds `update.lock` (`directive::run_pending`): heartbeats
//! also run without the lock, so they only keep it. Below `heartbeat`, which sends the
//! heartbeats, and `directive`, which runs what is kept.

use tern_core::directive::instruct::InstallInstruction;

use crate::error::Error;
use crate::fsutil;
use crate::layout::Layout;
use crate::log;

/// Keeps an instruction from a heartbeat answer for the next step holding the lock.
/// Best effort: a lost instruction shows on ternd as an attempt without a result.
pub(crate) fn keep(layout: &Layout, instruction: &InstallInstruction) {
    let path = layout.install_pending_file();
    let written = serde_json::to_vec(instruction)
        .map_err(|e| Error::io("serialize the install instruction", e.into()))
        .and_then(|bytes| fsutil::write_atomic(&path, &bytes, 0o600));
    match written {
        Ok(()) => log::info(format!(
            "ternd asks for install attempt {} (installer {}, target {}): it runs under update.lock",
            log::printable(&instruction.attempt_id),
            log::printable(&instruction.installer_name),
            log::printable(&instruction.target.version)
        )),
        Err(e) => log::warn(format!("could not keep ternd's install instruction: {e}")),
    }
}

pub(crate) fn load_pending(layout: &Layout) -> Option<InstallInstruction> {
    let path = layout.install_pending_file();
    let bytes = std::fs::read(&path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(i) => Some(i),
        Err(e) => {
            log::warn(format!(
                "{}: not an install instruction ({e}): dropped",
                path.display()
            ));
            let _ = fsutil::remove_file_durable(&path);
            None
        }
    }
}

/// Removes the kept instruction, unless a heartbeat without the lock replaced it with
/// another meanwhile.
pub(crate) fn drop_pending(layout: &Layout, done: &InstallInstruction) {
    if load_pending(layout).as_ref() == Some(done) {
        let _ = fsutil::remove_file_durable(&layout.install_pending_file());
    }
}
