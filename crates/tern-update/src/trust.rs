//! The host's side of TUF. A host enrolled with `enable --trust-root` installs only
//! artifacts the release keys signed: before each install the release metadata is
//! refreshed from the TUF repository (through this host's own HTTP client), and the
//! version find (or a directive) named is looked up among the signed targets by version,
//! OS, arch and edition, and refused when it is below the signed minimum of its
//! release line (a downgrade to a build the release keys revoked). The download is then
//! held to the signed length and sha256.
//! Hosts without a pinned root install as before (the artifact server's `.sha256`) and
//! `status` calls them unverified.

use std::path::PathBuf;
use std::sync::Arc;

use crate::artifact;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::log;
use crate::state::Spec;
use tern_client::Client;

/// One file next to update.yaml: the newest trusted root and the version floors.
pub(crate) fn state_file(layout: &Layout) -> PathBuf {
    layout.ns_dir().join("trust.json")
}

/// Where the TUF metadata is when `--trust-url` is not given: beside the artifacts.
pub(crate) fn default_url(spec: &Spec) -> String {
    let base = spec.base_url.as_deref().unwrap_or(&spec.server);
    format!("{}/tuf/metadata/", base.trim_end_matches('/'))
}

struct HttpFetch(Client);

impl tern_trust::Fetch for HttpFetch {
    fn open(&self, url: &str) -> std::result::Result<tern_trust::Opened, String> {
        match self.0.open(url) {
            Ok(Some(body)) => Ok(tern_trust::Opened::Body(Box::new(body))),
            Ok(None) => Ok(tern_trust::Opened::NotFound),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What the targets role signed for an artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SignedArtifact {
    pub(crate) size: u64,
    pub(crate) sha256: String,
}

fn trust_err(source: tern_trust::Error) -> Error {
    Error::Trust { source }
}

/// With a pinned root: refreshes the metadata and returns what was signed for `version`
/// (an error when it is not signed). Without one: `None`.
pub(crate) fn signed_artifact(
    http: &Client,
    layout: &Layout,
    spec: &Spec,
    version: &str,
    edition: &str,
) -> Result<Option<SignedArtifact>> {
    let Some(url) = &spec.trust_url else {
        return Ok(None);
    };
    let client = tern_trust::Client::new(
        &state_file(layout),
        url,
        Some(Arc::new(HttpFetch(http.clone()))),
    )
    .map_err(trust_err)?;
    let verified = client.refresh().map_err(trust_err)?;
    // ternd's version is untrusted: a revoked build is refused before its target is
    // looked up (`find` checks too, so no caller can skip it).
    verified.check_minimum(version).map_err(trust_err)?;
    let target = verified
        .find(
            version,
            std::env::consts::OS,
            artifact::go_arch(std::env::consts::ARCH),
            edition,
        )
        .map_err(trust_err)?;
    log::info(format!(
        "{version} is signed by the release keys: {} ({} bytes, sha256 {}; root v{}, targets v{})",
        target.name, target.length, target.sha256, verified.root_version, verified.targets_version
    ));
    Ok(Some(SignedArtifact {
        size: target.length,
        sha256: target.sha256.clone(),
    }))
}

/// With a pinned root, why `version` is revoked (below the signed minimum of its
/// release line), if it is: the metadata refreshed now. `None` without a pinned root,
/// when it is allowed, and when the repository cannot be read (the caller then does
/// what it would have done without the check, and says so).
pub(crate) fn revoked(
    http: &Client,
    layout: &Layout,
    spec: &Spec,
    version: &str,
) -> Option<String> {
    let url = spec.trust_url.as_ref()?;
    let client = tern_trust::Client::new(
        &state_file(layout),
        url,
        Some(Arc::new(HttpFetch(http.clone()))),
    )
    .ok()?;
    match client.refresh() {
        Ok(verified) => verified.check_minimum(version).err().map(|e| e.to_string()),
        Err(e) => {
            log::warn(format!(
                "cannot refresh the release metadata to check {version} ({e}); the minimums were not checked"
            ));
            None
        }
    }
}

/// The version of the root this host pins, if it pins one and its trust state is
/// usable (what heartbeats and find report; an unusable state refuses installs, so it
/// is not reported as pinned).
pub(crate) fn pinned_root(layout: &Layout, spec: &Spec) -> Option<u64> {
    spec.trust_url.as_ref()?;
    tern_trust::pinned_root_info(&state_file(layout)).ok()
}

/// `status`'s line about trust.
pub(crate) fn describe(layout: &Layout, spec: &Spec) -> String {
    match &spec.trust_url {
        None => "unverified: no release root is pinned (enable --trust-root); artifacts are checked only against the artifact server's .sha256".into(),
        Some(url) => match tern_trust::pinned_root_info(&state_file(layout)) {
            Ok(v) => format!("verified: installs only what the release keys signed (root v{v}, metadata {url})"),
            Err(e) => format!("verified, but the trust state is unusable: {e} (installs are refused)"),
        },
    }
}
