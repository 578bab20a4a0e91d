//! Why a published checksum could not be used (`http`).

use ureq::http::StatusCode;

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
