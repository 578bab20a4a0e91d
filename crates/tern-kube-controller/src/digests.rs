//! Where the digest of an image tag comes from: updates are only written pinned by
//! digest (`repository:tag@sha256:…`), so a tag moved in the registry afterwards
//! changes nothing. The source is pluggable ([`DigestSource`]); the one shipped is a
//! file the release pipeline writes ([`DigestFile`]), read again at each lookup so a
//! new release needs no restart. Verification against signed metadata (the TUF
//! targets of `tern-release`) plugs in here too.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tern_kube_update::Digest;

#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error("{image}: not in {path}")]
    Unknown { image: String, path: String },
    #[error("{image}: {why}")]
    Bad { image: String, why: String },
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
