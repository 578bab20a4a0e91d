//! What the directives left pending for one host, kept in its inventory entry: its
//! last install attempt, the instruction still to deliver and a dry run; and which of
//! them a heartbeat's answer carries (`deliver`). Below both the inventory, which
//! holds it, and the directive pass (`directed`), which writes it.

use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::state::{Attempt, AttemptResult};

#[derive(Debug, Default)]
pub(crate) struct Directed {
    /// The last attempt this replica recorded (or found recorded) for the host.
    pub(crate) attempt: Option<Attempt>,
    /// Sent with every heartbeat answer until the host reports a result for it, or
    /// the attempt leaves `InstallTriggered`.
    pub(crate) instruction: Option<Box<InstallInstruction>>,
    /// The dry run sent to the host for a pending plan.
    pub(crate) dry_run: Option<DryRun>,
}

/// A dry run of a pending plan on one host.
#[derive(Debug)]
pub(crate) struct DryRun {
    /// The plan's nonce: a dry run counts only for the plan that sent it.
    pub(crate) nonce: String,
    pub(crate) attempt_id: String,
    /// Resent until the host answers it (`None`: answered, or adopted from the store).
    pub(crate) instruction: Option<Box<InstallInstruction>>,
}

/// The instruction to send with this heartbeat's answer (an install before a dry run);
/// a result for it ends the resending.
pub(super) fn deliver(
    directed: &mut Option<Box<Directed>>,
    result: Option<&AttemptResult>,
) -> Option<Box<InstallInstruction>> {
    let d = directed.as_mut()?;
    let answered = |i: &InstallInstruction| result.is_some_and(|r| r.attempt_id == i.attempt_id);
    if let Some(pending) = &d.instruction {
        if !answered(pending) {
            return Some(pending.clone());
        }
        d.instruction = None;
    }
    let dry = d.dry_run.as_mut()?;
    let pending = dry.instruction.as_ref()?;
    if answered(pending) {
        dry.instruction = None;
        return None;
    }
    Some(pending.clone())
}
