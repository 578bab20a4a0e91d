use crate::kv::Revision;

/// Errors of every [`Store`](crate::Store) operation. Messages name the key or lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A compare-and-swap or conditional delete found another revision.
    #[error("revision conflict on key {key:?}: expected revision {expected}, found {actual}")]
    Conflict {
        key: String,
        expected: Revision,
        actual: Revision,
    },
    /// `create` on a key that already exists.
    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },
    /// CAS or delete on an absent (or expired) key.
    #[error("key {key:?} not found")]
    NotFound { key: String },
    /// The lease expired or was taken by another holder.
    #[error("lease {name:?} is no longer held by {holder:?}")]
    LeaseLost { name: String, holder: String },
    /// A watch asked for history the store no longer keeps; list again and re-watch.
    #[error(
        "cannot watch {prefix:?} from revision {requested}: history up to revision {compacted} has been compacted"
    )]
    Compacted {
        prefix: String,
        requested: Revision,
        compacted: Revision,
    },
    /// A caller error (empty key, zero TTL, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store cannot be reached or stayed busy; retry later (HTTP 503).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Anything else the backend reported.
    #[error("store backend error: {0}")]
    Backend(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
