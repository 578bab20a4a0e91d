//! The options every benchmark reads.

use std::path::PathBuf;

/// What every benchmark may need.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Seconds, not minutes: a smoke test of the benchmark, not a measurement.
    pub quick: bool,
    /// The `ternd` binary (release build for real figures).
    pub ternd: PathBuf,
    /// The `tern-update` binary.
    pub tern_update: PathBuf,
    /// Concurrent keep-alive connections of the load generator.
    pub connections: usize,
    /// The `tern-lockstep` binary (built with the `etcd` feature for real figures).
    pub tern_lockstep: PathBuf,
    /// `lockstep`'s store: `etcd` or `sqlite` (default: etcd; `--quick` falls back to
    /// SQLite when no etcd is installed).
    pub store: Option<String>,
}
