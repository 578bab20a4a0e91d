//! What the store holds and what its watches report: revisions, keys with their values,
//! listings, watch events. Below the errors and the watches that name them.

/// A store revision. 0 means "no revision" (empty store, or "from now" for watches).
pub type Revision = u64;

/// A key and its value, as stored at `mod_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// The revision that created this key (since it was last absent).
    pub create_revision: Revision,
    /// The revision of the last write to this key; the value to pass to CAS.
    pub mod_revision: Revision,
}

/// The result of [`Store::list`](crate::Store::list): the live keys under a prefix, sorted by key (bytewise),
/// and the store revision the snapshot was taken at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub kvs: Vec<KeyValue>,
    pub revision: Revision,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key was created or updated; `mod_revision` is the event's revision.
    Put(KeyValue),
    /// The key was deleted, explicitly or because its TTL expired.
    Delete { key: String, revision: Revision },
}

impl WatchEvent {
    /// The revision of the change.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put(kv) => kv.mod_revision,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }

    /// The key that changed.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }
}
