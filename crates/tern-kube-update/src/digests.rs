//! Where the digest of an image tag comes from: updates are only written pinned by
//! digest (`repository:tag@sha256:…`), so a tag moved in the registry afterwards
//! changes nothing. The source is pluggable ([`DigestSource`]). Two are shipped:
//!
//! - [`SignedDigests`]: the signed release repository (TUF) that hosts verify their
//!   tarballs against; the release owners sign each image's manifest
//!   (`tern-release add-image`), so a digest is pinned only when a threshold of the
//!   targets keys signed it, and a compromised registry or pipeline cannot slip an
//!   image in;
//! - [`DigestFile`]: a file the release pipeline writes, read again at each lookup so a
//!   new release needs no restart (trusted as the file's writer is).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_kube_rules::Digest;

#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error("{image}: not in {path}")]
    Unknown { image: String, path: String },
    #[error("{image}: {why}")]
    Bad { image: String, why: String },
    /// The signed metadata could not be fetched or verified, or does not sign this
    /// image: no digest is trusted.
    #[error("{0}")]
    Unverified(String),
}

pub trait DigestSource: Send + Sync {
    /// The digest of `repository:tag`.
    fn resolve(&self, repository: &str, tag: &str) -> Result<Digest, DigestError>;
}

/// A JSON object `{"repository:tag": "sha256:…", …}` in a file (at most 4 MiB).
pub struct DigestFile {
    pub path: PathBuf,
}

const MAX_FILE: u64 = 4 * 1024 * 1024;

impl DigestSource for DigestFile {
    fn resolve(&self, repository: &str, tag: &str) -> Result<Digest, DigestError> {
        let path = self.path.display().to_string();
        let file_err = |why: String| DigestError::File {
            path: path.clone(),
            why,
        };
        let len = std::fs::metadata(&self.path)
            .map_err(|e| file_err(e.to_string()))?
            .len();
        if len > MAX_FILE {
            return Err(file_err(format!("{len} bytes, more than {MAX_FILE}")));
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| file_err(e.to_string()))?;
        let map: BTreeMap<String, String> = serde_json::from_str(&text)
            .map_err(|e| file_err(format!("not a JSON object of image to digest: {e}")))?;
        let image = format!("{repository}:{tag}");
        let digest = map.get(&image).ok_or_else(|| DigestError::Unknown {
            image: image.clone(),
            path: path.clone(),
        })?;
        Digest::parse(digest).map_err(|e| DigestError::Bad {
            image,
            why: e.to_string(),
        })
    }
}

/// Digests the release keys signed: each lookup refreshes the TUF metadata (root chain,
/// timestamp, snapshot, targets, with TUF's checks of signatures, thresholds, expiry and
/// rollback) from the trusted state, and answers the sha256 of the manifest signed as
/// `repository:tag`.
#[derive(Clone)]
pub struct SignedDigests {
    client: Arc<tern_trust::Client>,
    url: String,
}

impl SignedDigests {
    /// `state`: the trust state file (created from `root` when missing; a root pinned
    /// before is kept with what was learned since, so rollback protection survives
    /// restarts when the file does). `url`: the metadata directory (http(s), `file://`
    /// or a path). `roots`: as for ternd.
    pub fn pin(
        state: &Path,
        root: &Path,
        url: &str,
        roots: Option<tern_client::Roots>,
    ) -> Result<Self, DigestError> {
        let err = |e: tern_trust::Error| DigestError::Unverified(e.to_string());
        tern_trust::pin_root(state, root).map_err(err)?;
        let url = tern_trust::metadata_url(url).map_err(err)?;
        let fetch: Arc<dyn tern_trust::Fetch> =
            Arc::new(tern_trust::UreqFetch(crate::fleet::connect(roots).agent()));
        let client = tern_trust::Client::new(state, &url, Some(fetch)).map_err(err)?;
        Ok(Self {
            client: Arc::new(client),
            url,
        })
    }

    /// Refreshes the metadata now: how many images it signs.
    pub fn check(&self) -> Result<usize, DigestError> {
        let verified = self
            .client
            .refresh()
            .map_err(|e| DigestError::Unverified(e.to_string()))?;
        Ok(verified
            .targets
            .iter()
            .filter(|t| t.image.is_some())
            .count())
    }
}

impl DigestSource for SignedDigests {
    fn resolve(&self, repository: &str, tag: &str) -> Result<Digest, DigestError> {
        let image = format!("{repository}:{tag}");
        let verified = self
            .client
            .refresh()
            .map_err(|e| DigestError::Unverified(format!("{image}: {e}")))?;
        let target = verified
            .image(&image)
            .map_err(|e| DigestError::Unverified(format!("{e} (metadata at {})", self.url)))?;
        Digest::parse(&format!("sha256:{}", target.sha256)).map_err(|e| DigestError::Bad {
            image,
            why: e.to_string(),
        })
    }
}
