//! The controller's timings, given to every decision.

use jiff::SignedDuration;

/// The controller's timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long a rollout may take to become available before it is rolled back.
    pub health_timeout: SignedDuration,
    /// How long no pod may be Ready before the agent counts as unhealthy and may update
    /// outside its window (seed 001: an agent that cannot reach its control plane for
    /// five minutes exits).
    pub unhealthy_after: SignedDuration,
    /// How long an old-revision pod may stay not Ready before it counts as blocking a
    /// StatefulSet rollout, and how long a new pod may fail to pull its image.
    pub stuck_after: SignedDuration,
    /// Restarts of a new-version container that count as a crash loop.
    pub crash_restarts: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            health_timeout: SignedDuration::from_mins(10),
            unhealthy_after: SignedDuration::from_mins(5),
            stuck_after: SignedDuration::from_mins(5),
            crash_restarts: 3,
        }
    }
}
