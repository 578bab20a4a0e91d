//! The client's errors. Every message names the URL (or file) and includes its source,
//! because messages are also shown alone (logs, `update.yaml`, `status`).

use std::path::PathBuf;

use ureq::http::{Method, StatusCode};

/// Why a CA bundle cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    #[error("cannot read the CA bundle {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a PEM certificate bundle: {source}", path.display())]
    NotPem {
        path: PathBuf,
        #[source]
        source: ureq::Error,
    },
    #[error(
        "the CA bundle {} holds no certificate: it holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        path.display()
    )]
    Empty { path: PathBuf },
}

/// Why an artifact's `.sha256` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ChecksumProblem {
    #[error(transparent)]
    Fetch(ureq::Error),
    #[error("status {0}")]
    Status(StatusCode),
    #[error("does not start with 64 hex characters")]
    NotAChecksum,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// ternd's reason for refusing a request, from its error answer
/// (`{"error": {"code", "message"}}`). From the network: both are stripped of control
/// characters and cut (code 64, message 200 characters), so they are harmless to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// ternd's machine-readable code (`unauthenticated`, `not_found`, …); may be empty.
    pub code: String,
    /// ternd's words for it; never empty.
    pub message: String,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// `: reason`, or nothing when ternd gave none.
fn with_reason(reason: &Option<Reason>) -> String {
    reason
        .as_ref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing plain http URL {url} (use https, or --insecure for tests)")]
    PlainHttp { url: String },
    #[error("not an http(s) URL: {url:?}")]
    NotHttpUrl { url: String },
    #[error("http: {url}: {source}")]
    HttpRequest {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("http: {url}: {method} status {status}{}", with_reason(reason))]
    HttpStatus {
        method: Method,
        url: String,
        status: StatusCode,
        /// ternd's reason, when its answer has one (find, the schedule); artifacts,
        /// channels and metadata are not ternd's API and are not read for one.
        reason: Option<Reason>,
    },
    #[error("http: {url}: POST status {status}{}", with_reason(reason))]
    HeartbeatRejected {
        url: String,
        status: StatusCode,
        /// ternd's reason, when its answer has one.
        reason: Option<Reason>,
    },
    #[error("http: {url}: bad find response: {source}")]
    BadFindResponse {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("http: {url}: bad maintenance schedule: {source}")]
    BadSchedule {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("http: {url}: {problem}")]
    BadAnswer { url: String, problem: String },
    #[error("http: {url}: reading body: {source}")]
    HttpBody {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checksum file {url} is missing or unreadable: {problem}")]
    MissingChecksum {
        url: String,
        #[source]
        problem: ChecksumProblem,
    },
    #[error(
        "{url} sent more than the {declared} bytes the signed release metadata declares for it; nothing was installed"
    )]
    LargerThanSigned { url: String, declared: u64 },
    #[error("not enough free space in {}: need {needed} bytes, {available} available", path.display())]
    NoSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },
}

impl Error {
    pub(crate) fn io(what: &str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            context: format!("{what} {}", path.display()),
            source,
        }
    }

    /// What kind of install failure this is, as heartbeats report it
    /// (`tern_core::wire::INSTALL_FAILURE_KINDS`).
    pub fn install_failure_kind(&self) -> &'static str {
        match self {
            Self::LargerThanSigned { .. } => "not_signed",
            Self::MissingChecksum { .. } => "artifact_missing",
            Self::HttpStatus { status, .. } if status.as_u16() == 404 || status.as_u16() == 410 => {
                "artifact_missing"
            }
            Self::HttpRequest { .. } | Self::HttpStatus { .. } | Self::HttpBody { .. } => {
                "download"
            }
            Self::NoSpace { .. } | Self::Io { .. } => "disk",
            _ => "other",
        }
    }
}
