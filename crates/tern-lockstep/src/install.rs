//! A worker installs the request's version before the first step: the tarball is
//! downloaded (size-capped), its SHA-256 compared with the one the leader pinned in the
//! request, and unpacked with tern-unpack's checks (tern-update's too) into
//! `<root>/versions/<version>`; a marker written last says the directory is whole. The release's `lockstep.yaml` is
//! then read and validated.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_core::lockstep::plan::{PLAN_FILE, Plan};
use tern_core::lockstep::protocol::{Artifact, UpdateRequest};
use tern_core::lockstep::release::ReleaseVersion;

/// Written last into a version's directory: the digest it was unpacked from.
const MARKER: &str = ".tern-lockstep-sha256";
/// At most this large a release tarball.
const MAX_TARBALL: u64 = 4 * 1024 * 1024 * 1024;
/// Free space kept beside an unpacked release.
const RESERVE: u64 = 64 * 1024 * 1024;

/// An installed release: its directory and plan.
#[derive(Clone, Debug)]
pub(crate) struct Installed {
    pub(crate) version: String,
    /// The digest it was unpacked from: a version re-published with another digest is
    /// installed again.
    pub(crate) sha256: String,
    pub(crate) dir: PathBuf,
    pub(crate) plan: Plan,
}

impl Installed {
    /// It is what `req` asks for: its version, from its artifact's digest.
    pub(crate) fn serves(&self, req: &UpdateRequest) -> bool {
        req.version == self.version
            && req
                .artifact
                .as_ref()
                .is_some_and(|a| a.sha256.eq_ignore_ascii_case(&self.sha256))
    }

    /// `<version>@<sha256>`: names this release to a worker exec'd for it.
    pub(crate) fn release_id(&self) -> String {
        format!("{}@{}", self.version, self.sha256)
    }
}

pub(crate) fn version_dir(root: &Path, version: &str) -> Result<PathBuf, String> {
    // The version comes from the store: only a well-formed version names a directory.
    ReleaseVersion::parse(version).map_err(|e| format!("the update's version: {e}"))?;
    if version.contains('/') || version.starts_with('.') {
        return Err(format!(
            "the update's version {version:?} cannot name a directory"
        ));
    }
    Ok(root.join("versions").join(version))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Installs `version` from `artifact` under `root` (nothing when already whole), then
/// reads its plan. Blocking: run it in `spawn_blocking`.
pub(crate) fn install(
    root: &Path,
    version: &str,
    artifact: Option<&Artifact>,
    insecure: bool,
) -> Result<Installed, String> {
    let dir = version_dir(root, version)?;
    let Some(artifact) = artifact else {
        return Err(format!(
            "the update to {version} names no artifact to install"
        ));
    };
    let want = artifact.sha256.to_ascii_lowercase();
    if !is_sha256(&want) {
        return Err(format!(
            "the update's sha256 {:?} is not a SHA-256 digest",
            artifact.sha256
        ));
    }
    let whole = std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|have| have.trim() == want);
    if !whole {
        let downloads = root.join("downloads");
        let versions = root.join("versions");
        for d in [&downloads, &versions] {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let tarball = downloads.join(format!("{version}.tar.gz"));
        let _ = std::fs::remove_file(&tarball);
        let client = crate::updater::client(insecure, Duration::from_secs(600));
        let (bytes, got) = client
            .download(&artifact.url, &tarball, MAX_TARBALL, None)
            .map_err(|e| format!("downloading {}: {e}", artifact.url))?;
        if got != want {
            let _ = std::fs::remove_file(&tarball);
            return Err(format!(
                "{} ({bytes} bytes) has SHA-256 {got}, but the update pins {want}: refusing to install it",
                artifact.url
            ));
        }
        if dir.exists() {
            // No marker: an unpack that was cut short. Never used, safe to drop.
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
        tern_unpack::unpack_checked(&tarball, &dir, RESERVE)
            .map_err(|e| format!("unpacking {}: {e}", artifact.url))?;
        std::fs::write(dir.join(MARKER), format!("{want}\n"))
            .map_err(|e| format!("writing {}: {e}", dir.join(MARKER).display()))?;
        let _ = std::fs::remove_file(&tarball);
    }
    let plan_path = dir.join(PLAN_FILE);
    let text = std::fs::read_to_string(&plan_path)
        .map_err(|e| format!("the release {version} has no readable {PLAN_FILE}: {e}"))?;
    let plan = Plan::from_text(&text).map_err(|e| format!("{}: {e}", plan_path.display()))?;
    Ok(Installed {
        version: version.to_string(),
        sha256: want,
        dir,
        plan,
    })
}
