//! End-to-end harness for Tern: real `ternd`, real `tern-update` and real agent
//! processes on one machine, each host in its own directories.
//!
//! A [`Fleet`] owns everything it starts (ternd, the artifact gateway, every host's
//! agent) and kills it on drop, also when a test panics. Every port and directory is
//! picked at run time, so fleets run side by side.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use tern_e2e::{Fleet, FleetOptions};
//! let mut fleet = Fleet::start(FleetOptions::default())?;
//! fleet.apply(&tern_core::fixtures::halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]))?;
//! fleet.set_version("1.0.0", "1.0.0", "regular")?;
//! fleet.add_hosts("dev", 2)?;
//! fleet.new_rollout("1.1.0")?;
//! fleet.clock_set("2026-11-23T10:00:00Z")?;
//! let step = fleet.step()?;
//! println!("{}", tern_e2e::render::table(&fleet, &step.status));
//! # Ok(()) }
//! ```

pub mod bins;
pub mod channel;
pub mod crossing;
pub mod demo;
pub mod directive;
pub mod fleet;
pub mod gateway;
pub mod host;
pub mod netns;
pub mod prometheus;
pub mod release;
pub mod render;
pub mod sign;
pub mod status;
pub mod ternd;
pub mod updater;

pub use fleet::{Fleet, FleetOptions, Step};
pub use host::{Host, RunOutcome};
pub use status::{GroupStatus, InventoryEntry, Status};

/// A Monday, 09:00 UTC: where every fleet's dev clock starts unless told otherwise.
pub const T0: &str = "2026-11-23T09:00:00Z";
