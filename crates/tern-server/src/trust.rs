//! ternd's view of the signed release repository (`--trust-root`, `--trust-url`): a
//! `target_version` nobody signed is refused where it is written (a version resource,
//! new-rollout, a channel), so an operator learns at once what every pinned host would
//! refuse later, and a version below the signed minimum of its release line (revoked)
//! is refused wherever a version is written (start and target, a channel, a directive
//! draft, a promotion). The signed minimums are also kept in memory (refreshed every
//! minute and at each check) for the one answer, which holds a revoked version on
//! every path. The hosts do not depend on it: each verifies for itself.

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::StatusCode;

use tern_core::revocation::Revocation;

use crate::error::ApiError;

/// Where the repository is and where ternd keeps what it trusts (`DATA_DIR/trust.json`).
#[derive(Clone, Debug)]
pub struct ReleaseTrust {
    pub(crate) state: PathBuf,
    pub(crate) url: String,
    /// How often a running replica reads the metadata again for the signed minimums
    /// (`--trust-refresh`), whatever else it checks meanwhile.
    pub(crate) refresh: std::time::Duration,
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
        Ok(Self {
            state,
            url,
            refresh: std::time::Duration::from_secs(60),
        })
    }

    /// Reads the signed minimums again every `period` (at least a second) rather than
    /// every minute: a revocation holds every path of this replica within it.
    pub fn refreshed_every(mut self, period: std::time::Duration) -> Self {
        self.refresh = period.max(std::time::Duration::from_secs(1));
        self
    }

    /// Refreshes the metadata (on the blocking pool) and looks `version` up; the
    /// signed minimums come with the answer.
    pub(crate) async fn signed(&self, version: &str) -> Result<(Signed, Revocation), ApiError> {
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
            let revocation = Revocation::new(v.minimums.clone());
            let signed = if v.has_version(&version) {
                match v.check_minimum(&version) {
                    Ok(()) => Signed::Yes {
                        targets_version: v.targets_version,
                    },
                    Err(e) => Signed::Revoked { why: e.to_string() },
                }
            } else if let Err(e) = v.check_minimum(&version) {
                Signed::Revoked { why: e.to_string() }
            } else {
                Signed::No {
                    targets_version: v.targets_version,
                }
            };
            Ok((signed, revocation))
        })
        .await
        .map_err(|e| ApiError::internal(format!("the release check failed: {e}")))?
    }
}

fn unverifiable(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "release_unverifiable",
        format!("cannot verify the version against the signed release repository: {why}"),
    )
}
