//! What the directive loop (`directives`) keeps between its passes on this replica. A
//! leaf: `AppState` holds it, the loop above the state works on it.

use std::collections::BTreeMap;

use tern_core::directive::pass::RateBucket;
use tern_core::directive::state::InstallState;

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
