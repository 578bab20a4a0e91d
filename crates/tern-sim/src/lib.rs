//! tern-sim: a fleet simulator over Tern's pure core. Thousands to hundreds of
//! thousands of simulated agents poll `find` (the one answer (`tern_core::gate`)), wait out the
//! jitter, install, fail and roll back with a per-version probability, come and go;
//! simulated ternd replicas keep their inventory and write a report every period; the
//! leader reconciles (`tern_core::reconcile::reconcile`) after its report. No process,
//! no network, no clock: the same seed gives the same timeline.
//!
//! ```no_run
//! # fn demo(config: tern_core::resource::AutoUpdateConfig,
//! #         version: tern_core::resource::AutoUpdateVersion) -> Result<(), tern_sim::SimError> {
//! let params = tern_sim::Params { agents: 10_000, ..tern_sim::Params::default() };
//! let until = params.start + jiff::SignedDuration::from_hours(72);
//! let mut sim = tern_sim::Sim::new(params, Some(config), version)?;
//! let timeline = sim.run_until(until);
//! print!("{}", timeline.render_text());
//! # Ok(()) }
//! ```
//!
//! [`faults`] runs the control plane itself under seeded faults (replica crashes,
//! failed and late reports, store outages, partitions, clock jumps, silent and lying
//! hosts) and checks the fleet-safety invariant on every seed.
//!
//! The model is described in `docs/simulator.md`.

pub mod faults;
pub mod params;
pub mod sim;
pub mod timeline;

pub use params::{ParamError, Params};
pub use sim::{Sim, SimError};
pub use timeline::{Counts, EventKind, GroupSummary, Overall, Timeline, TimelineEvent};
