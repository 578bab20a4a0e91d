//! Planted holes (feature `planted-holes`, for the suite that shows the fleet-safety
//! checker convicting; never in a shipped build): each [`Hole`] puts back, on purpose,
//! one hole a safety round closed, at the one line that closed it. A site reads
//! `crate::planted!(Name)`, which is `false` without the feature (no trace of it in the
//! build) and, with it, whether that hole is open in this thread or process:
//!
//! - a process opens the holes `TERN_PLANTED_HOLE` names (comma-separated), read once,
//!   so that real ternd and tern-update processes can be started with one;
//! - a test opens holes for one thread while it runs a closure ([`with`]), which wins
//!   over the variable there (the simulator plays one hole after another in a process).
//!
//! docs/simulator.md ("Planted holes") has the table of each hole and what catches it.

use std::cell::Cell;
use std::sync::OnceLock;

/// The environment variable naming the holes a process opens.
pub const ENV: &str = "TERN_PLANTED_HOLE";

/// One hole a safety round closed, put back on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hole {
    // Issue 47 (one answer for every product and path).
    /// find lists only its first hold: a stop behind a mode or no rollout is hidden
    /// from the updater that asks whether the agents' ternd stops the host.
    FirstHoldOnly,
    /// A directive's local-script instruction for the updater's own releases does not
    /// wait for the agents' stop (only the native installer did).
    ScriptSkipsAgentsStop,
    /// Under a stop find names the target, not the last known-good version: a host
    /// enrolled during a freeze installs the frozen target.
    FirstInstallTakesTarget,
    /// The last known-good version (the start version) is named under a stop even when
    /// it is revoked.
    RevokedStart,
    /// A channel set to a revoked version is served.
    RevokedChannel,
    /// A directive's revoked target is handed out.
    RevokedDirective,
    /// ternd with `--trust-root` accepts a revoked version where one is written (a
    /// start version, a channel, a directive's target), not only the target.
    RevokedWrites,
    /// A server pin does not hold a channel host.
    PinSkipsChannel,
    /// A server pin does not hold a directive's install.
    PinSkipsDirective,
    /// A freeze does not withhold a directive's install instruction.
    FreezeSkipsDirective,
    // Issues 32 and 33 (one gate; fail closed).
    /// An unhealthy agent is "repaired" through a stop (freeze, pin, mode, …).
    RepairThroughStop,
    /// `update --now` jumps a stop, not only a schedule hold.
    NowThroughStop,
    /// A replica cut off from its store keeps answering as if it were not.
    CutOffIgnored,
    /// find places a host by what the replica remembers of it (else the group it
    /// presents), not by the labels it sends.
    PlacedByMemory,
    /// No live evidence counts as zero hosts: a group whose hosts are silent or whose
    /// reports are missing skips its canaries and completes.
    NoEvidenceIsZeroHosts,
    /// A halt-on-error group starts before the groups before it are done.
    GroupOrder,
    // Issue 11 (rollout safety).
    /// A canary that runs the target unhealthy passes.
    UnhealthyCanaryPasses,
}

impl Hole {
    pub const ALL: [Hole; 17] = [
        Hole::FirstHoldOnly,
        Hole::ScriptSkipsAgentsStop,
        Hole::FirstInstallTakesTarget,
        Hole::RevokedStart,
        Hole::RevokedChannel,
        Hole::RevokedDirective,
        Hole::RevokedWrites,
        Hole::PinSkipsChannel,
        Hole::PinSkipsDirective,
        Hole::FreezeSkipsDirective,
        Hole::RepairThroughStop,
        Hole::NowThroughStop,
        Hole::CutOffIgnored,
        Hole::PlacedByMemory,
        Hole::NoEvidenceIsZeroHosts,
        Hole::GroupOrder,
        Hole::UnhealthyCanaryPasses,
    ];

    /// Its name in `TERN_PLANTED_HOLE` and in docs/simulator.md's table.
    pub fn name(self) -> &'static str {
        match self {
            Hole::FirstHoldOnly => "first-hold-only",
            Hole::ScriptSkipsAgentsStop => "script-skips-agents-stop",
            Hole::FirstInstallTakesTarget => "first-install-takes-target",
            Hole::RevokedStart => "revoked-start",
            Hole::RevokedChannel => "revoked-channel",
            Hole::RevokedDirective => "revoked-directive",
            Hole::RevokedWrites => "revoked-writes",
            Hole::PinSkipsChannel => "pin-skips-channel",
            Hole::PinSkipsDirective => "pin-skips-directive",
            Hole::FreezeSkipsDirective => "freeze-skips-directive",
            Hole::RepairThroughStop => "repair-through-stop",
            Hole::NowThroughStop => "now-through-stop",
            Hole::CutOffIgnored => "cut-off-ignored",
            Hole::PlacedByMemory => "placed-by-memory",
            Hole::NoEvidenceIsZeroHosts => "no-evidence-is-zero-hosts",
            Hole::GroupOrder => "group-order",
            Hole::UnhealthyCanaryPasses => "unhealthy-canary-passes",
        }
    }

    pub fn from_name(name: &str) -> Option<Hole> {
        Hole::ALL.into_iter().find(|h| h.name() == name.trim())
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The holes `TERN_PLANTED_HOLE` names, as a set. A name that is no hole stops the
/// process: a test that meant to plant one must not pass with none planted.
fn from_env() -> u32 {
    static OPEN: OnceLock<u32> = OnceLock::new();
    *OPEN.get_or_init(|| {
        let Ok(text) = std::env::var(ENV) else {
            return 0;
        };
        let mut set = 0;
        for name in text.split(',').filter(|n| !n.trim().is_empty()) {
            match Hole::from_name(name) {
                Some(h) => set |= h.bit(),
                None => panic!(
                    "{ENV}={text}: {name:?} is no planted hole (known: {})",
                    Hole::ALL.map(Hole::name).join(", ")
                ),
            }
        }
        if set != 0 {
            eprintln!("planted holes open in this process ({ENV}): {text}");
        }
        set
    })
}

thread_local! {
    static HERE: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Whether `hole` is open in this thread (see [`with`]), else in this process.
pub fn open(hole: Hole) -> bool {
    HERE.get().unwrap_or_else(from_env) & hole.bit() != 0
}

/// Runs `f` with exactly `holes` open in this thread (none: every hole closed, whatever
/// the environment says), then restores what was open before.
pub fn with<R>(holes: &[Hole], f: impl FnOnce() -> R) -> R {
    struct Restore(Option<u32>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HERE.set(self.0);
        }
    }
    let set = holes.iter().fold(0, |s, h| s | h.bit());
    let _restore = Restore(HERE.replace(Some(set)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_a_thread_opens_only_what_it_asks() {
        assert!(Hole::ALL.len() <= 32);
        for h in Hole::ALL {
            assert_eq!(Hole::from_name(h.name()), Some(h));
        }
        assert_eq!(Hole::from_name("no-such-hole"), None);
        with(&[Hole::GroupOrder], || {
            assert!(open(Hole::GroupOrder));
            assert!(!open(Hole::CutOffIgnored));
            with(&[], || assert!(!open(Hole::GroupOrder)));
            assert!(open(Hole::GroupOrder));
        });
    }
}
