//! tern-core: the pure domain of Tern. See ARCHITECTURE.md.

pub mod wire;
