//! Tern's benchmarks, run by `cargo xtask bench
//! [find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale]
//! [--quick]` (see
//! `docs/benchmarks.md`). Every figure is a ratio to, or sits beside, a baseline measured
//! in the same run; each benchmark prints one JSON object with its figures as its last
//! line.

pub mod alloc;
pub mod apply;
pub mod attack;
pub mod converge;
pub mod directives;
pub mod etcd;
pub mod find;
pub mod fleet;
pub mod groups;
pub mod heartbeat;
pub mod load;
pub mod lockstep;
pub mod procs;
pub mod profile;
pub mod reconcile;
pub mod scale;
pub mod ternd;

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

/// The benchmarks, in the order `all` runs them.
pub const BENCHES: &[&str] = &[
    "find",
    "attack",
    "heartbeat",
    "reconcile",
    "apply",
    "converge",
    "lockstep",
    "directives",
    "coverage",
    "topology",
    "scale",
];

/// Runs one benchmark; returns its figures.
pub fn run(name: &str, opts: &Opts) -> anyhow::Result<serde_json::Value> {
    match name {
        "find" => find::run(opts),
        "attack" => attack::run(opts),
        "heartbeat" => heartbeat::run(opts),
        "reconcile" => reconcile::run(opts),
        "apply" => apply::run(opts),
        "converge" => converge::run(opts),
        "lockstep" => lockstep::run(opts),
        "directives" => directives::run(opts),
        "coverage" => groups::coverage(opts),
        "topology" => groups::topology(opts),
        "profile" => profile::run(opts),
        "scale" => scale::run(opts),
        other => anyhow::bail!("no benchmark named {other:?} (one of {BENCHES:?})"),
    }
}

/// The median (upper middle for an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `q` quantile (0..=1) at the nearest rank, as `load` reports latencies; NaN when
/// empty.
pub fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    v[i]
}
