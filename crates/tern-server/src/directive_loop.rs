//! What the directive loop (`directives`) keeps between its passes on this replica. A
//! leaf: `AppState` holds it, the loop above the state works on it.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use tern_core::directive::pass::RateBucket;
use tern_core::directive::state::InstallState;

/// What `AppState` holds for the directive loop.
#[derive(Debug)]
pub(crate) struct DirectiveState {
    /// The loop's state between passes.
    pub(crate) pass: tokio::sync::Mutex<LoopState>,
    /// An active directive existed at the last pass: find then asks the inventory
    /// whether a host is governed by it.
    pub(crate) active: AtomicBool,
    /// The directive alerts record held alerts at this replica's last look.
    pub(crate) alerts_raised: AtomicBool,
}

impl Default for DirectiveState {
    fn default() -> Self {
        Self {
            pass: tokio::sync::Mutex::default(),
            active: AtomicBool::new(false),
            // Unknown after a start: the first pass reads the record once.
            alerts_raised: AtomicBool::new(true),
        }
    }
}

/// A replica's loop state, kept between passes.
#[derive(Debug, Default)]
pub(crate) struct LoopState {
    pub(crate) bucket: RateBucket,
    /// Dry runs go at the same rate as installs, from their own bucket.
    pub(crate) dry_bucket: RateBucket,
    /// Governed hosts of the pending plan in the last pass.
    pub(crate) plan_governed: u64,
    /// Governed hosts in the last pass (what a share in the rate is of).
    pub(crate) governed: u64,
    /// Per state, this replica's hosts after the last pass (for `/metrics`).
    pub(crate) states: BTreeMap<InstallState, u64>,
    pub(crate) triggered_total: u64,
}
