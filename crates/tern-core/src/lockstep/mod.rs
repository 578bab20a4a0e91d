//! Lock-step updates of a small server cluster (seed 004): every listed server reaches
//! each step before any goes on. Pure: which release ([`release`]), which steps
//! ([`plan`]), and what a worker or the updater does next ([`protocol`]). The
//! `tern-lockstep` binary does the I/O.

pub mod plan;
pub mod protocol;
pub mod release;
