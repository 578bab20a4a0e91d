//! tern-core: the pure domain of Tern. No I/O, no clock, no randomness it is not
//! given: every function takes the instant and the RNG it needs. See ARCHITECTURE.md.
//!
//! - [`resource`]: the four resources and the connected-agent record;
//!   [`validate`] and [`codec`] read them from YAML/JSON with errors naming the field.
//! - [`reconcile`]: one reconcile of the rollout; [`gate`]: the one answer, what a
//!   host may install now on any path and every [`hold`] that stops it;
//!   [`transition`]: manual transitions; [`revocation`]: revoked versions.
//! - [`rollout`]: the vocabulary below them all (groups and the catch-all rule, the
//!   desired spec, windows, rollout state, live reports, events).
//! - [`alert`]: what needs a human, kept in the rollout's status while it holds.
//! - [`invariant`]: the fleet-safety invariant, checked over a trace of what happened,
//!   stated on its own terms (it calls none of the code it judges).
//! - [`forecast`]: when one host will update, from the same rollout and answer.
//! - [`window`], [`canary`], [`backpressure`], [`aggregate`]: the parts they use.
//! - [`wire`]: the updater ↔ server contract, with [`install`] the data of a
//!   directive's install it carries; [`text`]: free text checked or cut down
//!   before it is kept or shown.
//! - `planted` (feature `planted-holes`, tests only): holes of past safety rounds put
//!   back one at a time, to show the invariant's checker convicting each.

pub mod aggregate;
pub mod alert;
pub mod analysis;
pub mod api;
pub mod artifact;
pub mod backoff;
pub mod backpressure;
pub mod canary;
pub mod codec;
pub mod controls;
pub mod directive;
pub mod duration;
pub mod exposure;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod forecast;
pub mod gate;
pub mod history;
pub mod hold;
pub mod host_update;
pub mod ids;
pub mod install;
pub mod invariant;
pub mod inventory;
pub mod lockstep;
#[cfg(feature = "planted-holes")]
pub mod planted;
pub mod product;
pub mod reason;
pub mod reconcile;
pub mod resource;
pub mod revocation;
pub mod rfd169;
pub mod rollout;
pub mod rollout_history;
pub mod text;
pub mod transition;
pub mod validate;
pub mod version;
pub mod views;
pub mod window;
pub mod wire;

/// `planted!(Hole)`: whether the planted hole `Hole` (`planted::Hole`) is open here.
/// Without the feature `planted-holes` it is `false`, and the build carries no trace of
/// any hole.
#[cfg(feature = "planted-holes")]
#[macro_export]
macro_rules! planted {
    ($hole:ident) => {
        $crate::planted::open($crate::planted::Hole::$hole)
    };
}

/// `planted!(Hole)`: `false` in this build (no feature `planted-holes`).
#[cfg(not(feature = "planted-holes"))]
#[macro_export]
macro_rules! planted {
    ($hole:ident) => {
        false
    };
}
