//! What is wrong with a URL template (`artifact`): tern-core's, shared with ternd.

pub use tern_core::artifact::TemplateProblem;
