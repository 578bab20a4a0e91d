//! The modular upgrade system (Teleport's RFD 90): the server decides which hosts run
//! which target and how each installs it, from declarative directives. Pure, like the
//! rest of the core.
//!
//! - [`resource`]: `version_directive`, `version_control_config`, `installer`;
//!   [`validate`](mod@validate) reads them with errors naming the field.
//! - [`select`]: which directive, target and installer a host gets (the RFD's
//!   compatibility rules).
//! - [`state`]: the RFD's install states, from a host's version, its last install
//!   attempt and its result.
//! - [`pass`]: one pass of the install loop, and the plan.
//! - [`report`]: what replicas report of their passes, and the plan an operator reads.
//! - [`instruct`]: the install instruction a host gets, and what it checks of it.
//! - `env`: what a local script's environment may hold, for `validate` and `instruct`.
//! - [`releases`]: the `releases` controller's draft from a release listing;
//!   [`notice`]: the notification controller's flags (outdated, insecure, end of life).

mod env;
pub mod instruct;
pub mod notice;
pub mod pass;
pub mod releases;
pub mod report;
pub mod resource;
pub mod select;
pub mod state;
pub mod validate;
