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
mod opts;
pub mod procs;
pub mod profile;
pub mod reconcile;
pub mod scale;
mod stats;
pub mod ternd;

pub use opts::Opts;
pub use stats::{median, quantile};

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
