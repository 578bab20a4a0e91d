//! Every module of tern-core, private to the crate. Their files are `src/`'s own
//! (this file is loaded by `#[path]`, so rustc looks for its modules beside it); the
//! crate root re-exports the surface the other crates use, namespace by namespace.

pub(crate) mod aggregate;
pub(crate) mod alert;
pub(crate) mod analysis;
pub(crate) mod api;
pub(crate) mod artifact;
pub(crate) mod backoff;
pub(crate) mod backpressure;
pub(crate) mod canary;
pub(crate) mod codec;
pub(crate) mod controls;
pub(crate) mod directive;
pub(crate) mod duration;
pub(crate) mod exposure;
pub(crate) mod forecast;
pub(crate) mod gate;
pub(crate) mod history;
pub(crate) mod hold;
pub(crate) mod host_update;
pub(crate) mod ids;
pub(crate) mod install;
pub(crate) mod invariant;
pub(crate) mod inventory;
pub(crate) mod lockstep;
pub(crate) mod product;
pub(crate) mod reason;
pub(crate) mod reconcile;
pub(crate) mod resource;
pub(crate) mod revocation;
pub(crate) mod rfd169;
pub(crate) mod rollout;
pub(crate) mod rollout_history;
pub(crate) mod text;
pub(crate) mod transition;
pub(crate) mod validate;
pub(crate) mod version;
pub(crate) mod views;
pub(crate) mod window;
pub(crate) mod wire;
