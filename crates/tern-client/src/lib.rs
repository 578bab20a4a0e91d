//! tern-client: the one client of ternd's wire protocol. Blocking and small (ureq,
//! rustls; no async runtime, nothing of the server), for the programs that talk to
//! ternd: tern-update on every host, the Kubernetes controller, ternctl, tern-lockstep.
//!
//! - [`Connect`]: the one place that builds a connection to ternd (TLS and its crypto
//!   provider, the CA bundle, timeouts, https-only unless insecure), and
//!   [`roots_from_pem`], the one place that loads a CA bundle.
//! - [`Client`]: the calls a host makes (find, long-poll find, schedule, join,
//!   heartbeat, channel files, HEAD, checksum, the bounded streamed download, the
//!   health URL). Every answer is untrusted: bodies are read up to a bound, ETags and
//!   credentials are checked for shape, ternd's reasons are made harmless to print.

mod client;
mod connect;
mod error;

pub use client::{Client, Joined, Polled};
pub use connect::{Connect, Roots, roots_from_pem};
pub use error::{CaBundleError, ChecksumProblem, Error, Reason, Result};
/// The HTTP types in the errors and answers (status codes, methods).
pub use ureq::http::{Method, StatusCode};
