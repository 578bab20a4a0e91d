//! RFD 90's install states: where a host stands with respect to its directive, worked out
//! from its version, its last install attempt (written by the server right before it
//! triggered it) and the result the host reported.
//!
//! While an attempt is recent (younger than `recent`), its outcome is the state, in this
//! order: the host went offline → `ChurnedDuringInstall`; it reported an error →
//! `ExplicitInstallFault`; it runs the attempt's target → `RecentInstall`; the attempt is
//! younger than `trigger_timeout` → `InstallTriggered`; otherwise → `ImplicitInstallFault`
//! (online, no error, not on the target). Without a recent attempt: on its target, or
//! governed by no directive → `VersionParity`; else `NeedsInstall`. Only `NeedsInstall`
//! hosts connected for at least `settle` may be triggered: a fault or a churn waits out
//! the recent window before the host is tried again.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::domain::install::AttemptResult;

/// The states, with the RFD's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum InstallState {
    VersionParity,
    NeedsInstall,
    InstallTriggered,
    RecentInstall,
    ChurnedDuringInstall,
    ImplicitInstallFault,
    ExplicitInstallFault,
}

impl InstallState {
    pub const ALL: [InstallState; 7] = [
        InstallState::VersionParity,
        InstallState::NeedsInstall,
        InstallState::InstallTriggered,
        InstallState::RecentInstall,
        InstallState::ChurnedDuringInstall,
        InstallState::ImplicitInstallFault,
        InstallState::ExplicitInstallFault,
    ];

    /// snake_case, for metrics labels and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            InstallState::VersionParity => "version_parity",
            InstallState::NeedsInstall => "needs_install",
            InstallState::InstallTriggered => "install_triggered",
            InstallState::RecentInstall => "recent_install",
            InstallState::ChurnedDuringInstall => "churned_during_install",
            InstallState::ImplicitInstallFault => "implicit_install_fault",
            InstallState::ExplicitInstallFault => "explicit_install_fault",
        }
    }

    /// Counts against the fault limit.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            InstallState::ImplicitInstallFault | InstallState::ExplicitInstallFault
        )
    }
}

/// The RFD's name, as the API's JSON and the docs spell it (`as_str` is the metrics
/// label): what ternctl prints, so that a state reads the same in the docs, the CLI and
/// the dashboard.
impl fmt::Display for InstallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The server's record of an install it triggered (written by compare-and-swap right
/// before the trigger).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Unique per attempt: the host's result names it.
    pub id: String,
    pub at: Timestamp,
    pub installer: String,
    pub from_version: String,
    pub target_version: String,
}

/// The time edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTimings {
    pub trigger_timeout: Duration,
    pub recent: Duration,
    pub offline_after: Duration,
    pub settle: Duration,
}

/// One host, as the state needs it.
#[derive(Clone, Debug)]
pub struct HostRecord<'a> {
    pub version: &'a str,
    pub last_seen: Timestamp,
    pub connected_since: Timestamp,
    /// The version its directive wants; `None` when no directive governs it (or none fits).
    pub target: Option<&'a str>,
    pub attempt: Option<&'a Attempt>,
    pub result: Option<&'a AttemptResult>,
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let d = now.duration_since(since);
    if d.is_negative() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

/// The host's install state at `now`.
pub fn install_state(h: &HostRecord<'_>, now: Timestamp, t: &StateTimings) -> InstallState {
    if let Some(a) = h.attempt {
        let age = elapsed(a.at, now);
        if age < t.recent {
            if elapsed(h.last_seen, now) >= t.offline_after {
                return InstallState::ChurnedDuringInstall;
            }
            if let Some(r) = h.result
                && r.attempt_id == a.id
                && !r.success
            {
                return InstallState::ExplicitInstallFault;
            }
            if crate::domain::version::same_version(h.version, &a.target_version) {
                return InstallState::RecentInstall;
            }
            if age < t.trigger_timeout {
                return InstallState::InstallTriggered;
            }
            return InstallState::ImplicitInstallFault;
        }
    }
    match h.target {
        Some(target) if !crate::domain::version::same_version(target, h.version) => {
            InstallState::NeedsInstall
        }
        _ => InstallState::VersionParity,
    }
}

/// Whether the loop may trigger an install on the host now: it needs one and has been
/// connected long enough to be trusted to stay.
pub fn may_trigger(
    state: InstallState,
    h: &HostRecord<'_>,
    now: Timestamp,
    t: &StateTimings,
) -> bool {
    state == InstallState::NeedsInstall && elapsed(h.connected_since, now) >= t.settle
}
