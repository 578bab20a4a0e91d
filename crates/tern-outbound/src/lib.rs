//! What Tern's servers send to and fetch from services of their own choosing, with
//! everything those services answer treated as untrusted:
//!
//! - [`notify`]: alert notices to generic JSON webhooks and Slack-compatible incoming
//!   webhooks (ternd's leader, tern-lockstep's updater; see `docs/alerts.md`).
//! - [`release_source`]: releases listed by a GitHub-compatible API or a JSON index
//!   (ternd's `releases` version controller, tern-lockstep's updater).
//! - [`metrics_text`]: the Prometheus text format that ternd's scrapers read, the one
//!   writer of it (ternd's `/metrics`, the notifiers' counters).
//!
//! Its own crate so that tern-lockstep links neither ternd's HTTP server nor its state.

pub mod metrics_text;
pub mod notify;
pub mod release_source;
