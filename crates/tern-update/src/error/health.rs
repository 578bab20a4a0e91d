//! Why the agent failed its health check, and what it was still waiting for (`health`).

use std::fmt;
use std::time::Duration;

/// Why a version is judged unhealthy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HealthFailure {
    #[error("the agent is not running ({checks} checks in a row)")]
    NotRunning { checks: u32 },
    #[error("crash loop: the agent restarted {restarts} times")]
    CrashLoop { restarts: u32 },
    #[error("not healthy after {:.1}s: {pending}", timeout.as_secs_f64())]
    Timeout { timeout: Duration, pending: Pending },
}

/// What the watch still waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    UrlFailing { failures: u32 },
    Unstable { stable: u32, needed: u32 },
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UrlFailing { failures } => write!(f, "the health URL failed {failures} times"),
            Self::Unstable { stable, needed } => {
                write!(f, "PID stable for {stable} of {needed} checks")
            }
        }
    }
}
