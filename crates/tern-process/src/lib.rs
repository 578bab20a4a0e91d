//! One way to run a child process with a deadline, for every Tern program that runs
//! one (a package manager, an operator's install script, an updater release's
//! self-check, a lock-step plan command).
//!
//! The child runs in a process group of its own, stdin closed, stdout and stderr read
//! into bounded [`Captured`] buffers (the start and the end of each stream; what lies
//! between is counted and dropped). At its deadline, or when [`Cancel`]led, the whole
//! group is killed: a stuck child or the grandchildren it started never hold the caller.
//! Once the child ended, its output is read a short while longer ([`DRAIN`]); a process
//! that left the group and still holds a pipe is not waited for. The caller gets a typed
//! [`End`] with the output, or an [`Error`] naming the program that could not be run.
//!
//! What the callers differ in is an [`Options`] each: whether what the child left in its
//! group dies with it, whether the output is read only after the end (so that a child
//! that fills a pipe blocks, and counts as hung), how much is kept, and a callback for
//! each line as it comes.
//!
//! It is blocking on purpose: one implementation of the kill-before-reap order, no
//! runtime. An async caller runs it in `spawn_blocking` with a [`Cancel`] it sets when
//! its future is dropped.

mod capture;
mod error;
mod options;
mod run;

pub use capture::{Captured, MAX_LINE};
pub use error::Error;
pub use options::{Cancel, LineSink, Options, Stream};
pub use run::{DRAIN, End, Finished, Running, run, spawn};
