//! tern-unpack: release tarballs are hostile input until checked. Two passes over the
//! archive: [`scan`] reads only headers and [`Entries::plan`] (pure) validates every
//! entry and the total size before anything is written; [`extract`] then writes exactly
//! what was planned, with fsync, into a fresh directory. [`unpack_checked`] does it all
//! and renames the result into place, for programs that install Tern-shaped releases
//! (tern-update, tern-lockstep).

mod error;
mod extract;
mod fs;
mod hostile;

pub use error::{Error, Result};
pub use extract::{Entries, Plan, extract, scan, unpack_checked};
pub use hostile::{BadPath, HostileReason};

/// Entry points for the fuzzers of `fuzz/` (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::extract::fuzz_plan;
}
