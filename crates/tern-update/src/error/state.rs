//! Why `update.yaml` cannot be read (`state`), and the markers it is checked against.

/// Why `update.yaml` cannot be trusted. Every file tern-update writes has `kind`, the
/// whole `spec` and `status.rollback`, so a file without them was cut or edited, and
/// reading it with defaults would lose the active version or the journal.
#[derive(Debug, thiserror::Error)]
pub enum StateProblem {
    #[error("the file is empty")]
    Empty,
    #[error("the file is not text")]
    NotText,
    #[error("the file is cut short: its last line is not {FOOTER:?}")]
    Truncated,
    #[error("not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("not a YAML mapping of spec and status")]
    NotAMapping,
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("kind is {0:?}, expected {KIND:?}")]
    WrongKind(String),
}

/// `update.yaml`'s `kind`.
pub(crate) const KIND: &str = "update_config";

/// The first line of every file this version writes: it promises the last line.
pub(crate) const HEADER: &str = "# tern-update state. Written whole; its last line is \"# end\".";
/// The last line. A file that starts with [`HEADER`] and lacks it was cut short.
pub(crate) const FOOTER: &str = "# end";
