//! ternd's view of the signed release repository (`--trust-root`, `--trust-url`): a
//! `target_version` nobody signed is refused where it is written (a version resource,
//! new-rollout), so an operator learns at once what every pinned host would refuse
//! later, and so is one below the signed minimum of its release line (revoked). The
//! hosts do not depend on it: each verifies for itself.

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::StatusCode;

use crate::error::ApiError;

/// Where the repository is and where ternd keeps what it trusts (`DATA_DIR/trust.json`).
#[derive(Clone, Debug)]
pub struct ReleaseTrust {
    pub(crate) state: PathBuf,
    pub(crate) url: String,
}

/// What the repository says about a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Signed {
    Yes {
        targets_version: u64,
    },
    No {
        targets_version: u64,
    },
    /// Signed, but below the signed minimum of its release line: the release keys
    /// revoked it, and every pinned host refuses it (`why` is tern-trust's sentence).
    Revoked {
        why: String,
    },
}

impl ReleaseTrust {
    /// Pins `root` in `DATA_DIR/trust.json` (keeping what was learned if it is the root
    /// pinned before). `url`: http(s), `file://`, or a directory.
    pub fn pin(
        data_dir: &std::path::Path,
        root: &std::path::Path,
        url: &str,
    ) -> anyhow::Result<Self> {
        let state = data_dir.join("trust.json");
        tern_trust::pin_root(&state, root)?;
        let url = tern_trust::metadata_url(url)?;
        Ok(Self { state, url })
    }

    /// Refreshes the metadata (on the blocking pool) and looks `version` up.
    pub(crate) async fn signed(&self, version: &str) -> Result<Signed, ApiError> {
        let (state, url, version) = (self.state.clone(), self.url.clone(), version.to_string());
        tokio::task::spawn_blocking(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(std::time::Duration::from_secs(30)))
                .http_status_as_error(false)
                .build()
                .into();
            let fetch: Arc<dyn tern_trust::Fetch> = Arc::new(tern_trust::UreqFetch(agent));
            let client = tern_trust::Client::new(&state, &url, Some(fetch))
                .map_err(|e| unverifiable(&e.to_string()))?;
            let v = client.refresh().map_err(|e| unverifiable(&e.to_string()))?;
            Ok(if v.has_version(&version) {
                match v.check_minimum(&version) {
                    Ok(()) => Signed::Yes {
                        targets_version: v.targets_version,
                    },
                    Err(e) => Signed::Revoked { why: e.to_string() },
                }
            } else {
                Signed::No {
                    targets_version: v.targets_version,
                }
            })
        })
        .await
        .map_err(|e| ApiError::internal(format!("the release check failed: {e}")))?
    }

    /// An error unless `version` is signed.
    pub(crate) async fn require(&self, field: &str, version: &str) -> Result<(), ApiError> {
        match self.signed(version).await? {
            Signed::Yes { .. } => Ok(()),
            Signed::No { targets_version } => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_signed",
                format!(
                    "{field} {version} is not signed by the release keys: no target of the signed release repository {} (targets version {targets_version}) has it; sign it with `tern-release add` first (hosts with a pinned root would refuse it)",
                    self.url
                ),
            )),
            Signed::Revoked { why } => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "below_minimum",
                format!(
                    "{field} {version} is revoked: {why}; roll out a version at or above the minimum (hosts with a pinned root would refuse it)"
                ),
            )),
        }
    }
}

fn unverifiable(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "release_unverifiable",
        format!("cannot verify the version against the signed release repository: {why}"),
    )
}
