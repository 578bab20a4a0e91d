use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the runtime TUF runs on: {source}")]
    Runtime { source: std::io::Error },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a TUF root: {detail}", path.display())]
    BadRoot { path: PathBuf, detail: String },
    #[error("the trust state {} is unreadable ({detail}); re-pin the root with `enable --trust-root`", path.display())]
    BadState { path: PathBuf, detail: String },
    #[error("no root is pinned ({} is missing)", path.display())]
    NotPinned { path: PathBuf },
    #[error("bad TUF repository URL {url:?}: {detail}")]
    BadUrl { url: String, detail: String },
    /// TUF refused the repository's metadata: nothing from it is trusted.
    #[error("the signed release metadata at {url} was refused: {detail}")]
    Refused { url: String, detail: String },
    #[error(
        "version {version} ({os}/{arch}{}) is not signed by the release keys: no target of the signed repository (targets version {targets_version}) has it",
        edition_note(edition)
    )]
    NotSigned {
        version: String,
        os: String,
        arch: String,
        edition: String,
        targets_version: u64,
    },
    #[error(
        "version {version} ({os}/{arch}) matches {count} signed targets: the repository must name one artifact per version, OS, arch and edition"
    )]
    Ambiguous {
        version: String,
        os: String,
        arch: String,
        count: usize,
    },
    #[error(
        "image {image} is not signed by the release keys: no target of the signed repository (targets version {targets_version}) is its manifest"
    )]
    ImageNotSigned { image: String, targets_version: u64 },
    #[error(
        "{} is not signed: no target of the signed repository (targets version {targets_version}) is named {name:?}",
        path.display()
    )]
    FileNotSigned {
        path: PathBuf,
        name: String,
        targets_version: u64,
    },
    #[error(
        "{} is not what was signed under its name: {length} bytes, sha256 {sha256}; signed: {signed_length} bytes, sha256 {signed_sha256}",
        path.display()
    )]
    FileMismatch {
        path: PathBuf,
        length: u64,
        sha256: String,
        signed_length: u64,
        signed_sha256: String,
    },
    /// The release keys revoked this version: it is below the signed minimum of its line.
    #[error(
        "version {version} is below the signed minimum {minimum} of release line {line} (targets version {targets_version}): the release keys revoked it"
    )]
    BelowMinimum {
        version: String,
        line: String,
        minimum: String,
        targets_version: u64,
    },
    #[error(
        "version {version:?} belongs to no release line, so the signed minimum versions cannot be checked: {detail}"
    )]
    NoLine { version: String, detail: String },
    #[error("{line:?} is not a release line: give MAJOR (e.g. 1) or MAJOR.MINOR (e.g. 1.4)")]
    BadLine { line: String },
    #[error("bad minimum version for release line {line}: {detail}")]
    BadMinimum { line: String, detail: String },
    #[error("{what}: {detail}")]
    Release { what: String, detail: String },
}

fn edition_note(edition: &str) -> String {
    if edition.is_empty() {
        String::new()
    } else {
        format!(", edition {edition}")
    }
}

impl Error {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { what, path, source }
    }

    pub(crate) fn release<E: std::error::Error + 'static>(
        what: impl Into<String>,
    ) -> impl FnOnce(E) -> Error {
        let what = what.into();
        move |e| Error::Release {
            what,
            detail: chain(&e),
        }
    }
}

/// tern-fs names the operation and the path, as [`Error::Io`] does.
impl From<tern_fs::Error> for Error {
    fn from(e: tern_fs::Error) -> Self {
        Error::Io {
            what: e.what,
            path: e.path,
            source: e.source,
        }
    }
}

/// A tough error with its causes, on one line (tough nests the reason in its sources).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}
