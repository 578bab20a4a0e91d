//! TUF for Tern, the one crate that names `tough`.
//!
//! - [`Client`]: what a host (and ternd) trusts. It starts from a pinned root, refreshes
//!   root, timestamp, snapshot and targets through any [`Fetch`] (tern-update's own HTTP
//!   client, or `file://`), refuses whatever TUF refuses (threshold signatures, expiry,
//!   version rollback, snapshot/targets mismatch, metadata larger than declared), and keeps
//!   what it trusts in one state file written atomically, so rollback protection survives
//!   restarts and kills.
//! - [`release`]: the release side, over tough's editor: keys, init, add targets,
//!   refresh timestamp/snapshot, rotate keys (root included).
//!
//! tough is async; everything here is blocking and runs tough on a current-thread tokio
//! runtime made for the call, so callers stay synchronous and pull in no executor of their own.

mod client;
mod digest;
mod error;
mod minimum;
pub mod release;
mod transport;

pub use client::{Client, RootInfo, SignedTarget, Verified, pin_root, pinned_root_info};
pub use error::{Error, Result};
pub use minimum::{Minimum, ReleaseLine, minimum};
#[cfg(feature = "ureq")]
pub use transport::UreqFetch;
pub use transport::{Fetch, Opened, metadata_url};

/// Runs a tough future to completion on a runtime made for it.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|source| Error::Runtime { source })?;
    Ok(rt.block_on(f))
}
