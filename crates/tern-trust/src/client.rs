//! The host's (and ternd's) side: a pinned root, refreshed metadata, signed targets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tough::schema::{Root, Signed};
use tough::{ExpirationEnforcement, RepositoryLoader};
use url::Url;

use crate::digest::{file_digest, hex, sha256_hex};
use crate::error::{Error, Result};
use crate::transport::{Fetch, FetchTransport};

/// The files of tough's datastore that carry trust from one refresh to the next.
const CARRIED: [&str; 3] = ["timestamp.json", "snapshot.json", "latest_known_time.json"];

/// The trust state, one file: the newest trusted root and the timestamp and snapshot
/// last trusted (their versions are the floor below which nothing is accepted again).
/// Raw JSON text, exactly as tough wrote it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    /// sha256 of the root pinned with `enable --trust-root`: pinning the same root again
    /// keeps the state, pinning another starts over from it.
    pinned_sha256: String,
    root: String,
    #[serde(default)]
    files: std::collections::BTreeMap<String, String>,
}

fn read_saved(path: &Path) -> Result<Saved> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotPinned {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(Error::io("cannot read", path)(e)),
    };
    serde_json::from_slice(&text).map_err(|e| Error::BadState {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

/// A root that signs itself with its own threshold, or why not.
fn check_root(path: &Path, bytes: &[u8]) -> Result<Signed<Root>> {
    let bad = |detail: String| Error::BadRoot {
        path: path.to_path_buf(),
        detail,
    };
    let root: Signed<Root> = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    root.signed.verify_role(&root).map_err(|e| {
        bad(format!(
            "its signatures do not meet its own threshold: {}",
            crate::error::chain(&e)
        ))
    })?;
    Ok(root)
}

const SCRATCH_PREFIX: &str = ".tuf-refresh-";

/// Scratch directories a killed refresh left behind. Only those an hour old: another
/// refresh (ternd serves several requests at once) may be using a recent one.
fn remove_stale_scratch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for e in entries.flatten() {
        let stale = e.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX)
            && e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < hour_ago);
        if stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// What `pin_root` pinned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootInfo {
    pub version: u64,
    pub sha256: String,
    /// False when the same root was pinned before and the trust state was kept.
    pub replaced: bool,
}

/// Pins `root_file` as the trust anchor in `state` (created atomically). Pinning the
/// root already pinned keeps what was learned since (newer roots, version floors).
pub fn pin_root(state: &Path, root_file: &Path) -> Result<RootInfo> {
    let bytes = std::fs::read(root_file).map_err(Error::io("cannot read", root_file))?;
    let root = check_root(root_file, &bytes)?;
    let sha = sha256_hex(&bytes);
    if let Ok(old) = read_saved(state)
        && old.pinned_sha256 == sha
    {
        return Ok(RootInfo {
            version: root.signed.version.get(),
            sha256: sha,
            replaced: false,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| Error::BadRoot {
        path: root_file.to_path_buf(),
        detail: e.to_string(),
    })?;
    let saved = Saved {
        pinned_sha256: sha.clone(),
        root: text,
        files: Default::default(),
    };
    write_saved(state, &saved)?;
    Ok(RootInfo {
        version: root.signed.version.get(),
        sha256: sha,
        replaced: true,
    })
}

/// The version of the newest root `state` trusts (for `status`).
pub fn pinned_root_info(state: &Path) -> Result<u64> {
    let saved = read_saved(state)?;
    let root = check_root(state, saved.root.as_bytes())?;
    Ok(root.signed.version.get())
}

fn write_saved(path: &Path, saved: &Saved) -> Result<()> {
    let bytes = serde_json::to_vec(saved).map_err(|e| Error::BadState {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    Ok(tern_fs::write_atomic(path, &bytes, 0o600)?)
}

/// One artifact the targets role signed, with Tern's custom metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedTarget {
    pub name: String,
    pub length: u64,
    /// Lowercase hex.
    pub sha256: String,
    pub version: Option<String>,
    pub os: Option<String>,
    pub arch: Option<String>,
    pub edition: Option<String>,
    /// For a container image's manifest: its reference `repository:tag` (the sha256 is
    /// then the image's digest).
    pub image: Option<String>,
}

/// What a refresh verified.
#[derive(Clone, Debug)]
pub struct Verified {
    pub root_version: u64,
    pub timestamp_version: u64,
    pub snapshot_version: u64,
    pub targets_version: u64,
    pub targets: Vec<SignedTarget>,
    /// The signed minimum version of each release line that has one (by line).
    pub minimums: Vec<crate::minimum::Minimum>,
}

impl Verified {
    /// An error when the release keys revoked `version`: it is below the signed minimum
    /// of its release line ([`Error::BelowMinimum`]).
    pub fn check_minimum(&self, version: &str) -> Result<()> {
        crate::minimum::check(&self.minimums, version, self.targets_version)
    }

    /// The artifact signed for `version` on `os`/`arch` (Go names: `linux`, `amd64`) and
    /// `edition` (what find says; "" and "oss" are no edition). A target without an `os`
    /// matches any OS; one without an `edition` is for every edition, used when no target
    /// names this edition exactly. A version below its line's signed minimum is refused
    /// even though its target is still signed ([`Verified::check_minimum`]).
    pub fn find(
        &self,
        version: &str,
        os: &str,
        arch: &str,
        edition: &str,
    ) -> Result<&SignedTarget> {
        self.check_minimum(version)?;
        let candidates = || {
            self.targets.iter().filter(|t| {
                t.version.as_deref() == Some(version)
                    && t.arch.as_deref() == Some(arch)
                    && t.os.as_deref().is_none_or(|o| o == os)
            })
        };
        let exact: Vec<&SignedTarget> = candidates()
            .filter(|t| {
                t.edition
                    .as_deref()
                    .is_some_and(|e| norm(e) == norm(edition))
            })
            .collect();
        let matches = if exact.is_empty() {
            candidates()
                .filter(|t| t.edition.as_deref().is_none_or(|e| norm(e).is_empty()))
                .collect()
        } else {
            exact
        };
        match matches.as_slice() {
            [one] => Ok(one),
            [] => Err(Error::NotSigned {
                version: version.into(),
                os: os.into(),
                arch: arch.into(),
                edition: edition.into(),
                targets_version: self.targets_version,
            }),
            many => Err(Error::Ambiguous {
                version: version.into(),
                os: os.into(),
                arch: arch.into(),
                count: many.len(),
            }),
        }
    }

    /// The target signed under `file`'s name, when the file is exactly what it signs
    /// (length and sha256): how a downloaded release file is checked.
    pub fn check_file(&self, file: &Path) -> Result<&SignedTarget> {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = self
            .targets
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::FileNotSigned {
                path: file.to_path_buf(),
                name: name.clone(),
                targets_version: self.targets_version,
            })?;
        let (length, sha256) = file_digest(file)?;
        if length != target.length || sha256 != target.sha256 {
            return Err(Error::FileMismatch {
                path: file.to_path_buf(),
                length,
                sha256,
                signed_length: target.length,
                signed_sha256: target.sha256.clone(),
            });
        }
        Ok(target)
    }

    /// The image manifest signed for `image` (`repository:tag`): its sha256 is the
    /// digest to pin. An image of a version below its line's signed minimum is refused
    /// as a host artifact is ([`Verified::find`]); so is one that names no version
    /// once any minimum is signed (its line cannot be told).
    pub fn image(&self, image: &str) -> Result<&SignedTarget> {
        let target = self
            .targets
            .iter()
            .find(|t| t.image.as_deref() == Some(image))
            .ok_or_else(|| Error::ImageNotSigned {
                image: image.into(),
                targets_version: self.targets_version,
            })?;
        match target.version.as_deref() {
            Some(version) => self.check_minimum(version)?,
            None if !self.minimums.is_empty() => {
                return Err(Error::NoLine {
                    version: String::new(),
                    detail: format!("the signed image {image} names no version"),
                });
            }
            None => {}
        }
        Ok(target)
    }

    /// True when some host artifact is signed for `version` (any OS, arch or edition;
    /// an image alone does not count: hosts cannot install it). Says nothing of the
    /// signed minimums: see [`Verified::check_minimum`].
    pub fn has_version(&self, version: &str) -> bool {
        self.targets
            .iter()
            .any(|t| t.image.is_none() && t.version.as_deref() == Some(version))
    }
}

/// "oss" is the artifact URLs' name for no edition.
fn norm(edition: &str) -> &str {
    if edition == "oss" { "" } else { edition }
}

fn custom(t: &tough::schema::Target, key: &str) -> Option<String> {
    t.custom
        .get(key)
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// Every target of a loaded repository, with Tern's custom metadata.
pub(crate) fn signed_targets(repo: &tough::Repository) -> Vec<SignedTarget> {
    repo.all_targets()
        .map(|(name, t)| SignedTarget {
            name: name.raw().to_string(),
            length: t.length,
            sha256: hex(&t.hashes.sha256),
            version: custom(t, "version"),
            os: custom(t, "os"),
            arch: custom(t, "arch"),
            edition: custom(t, "edition"),
            image: custom(t, "image"),
        })
        .collect()
}

/// A TUF client over one trust state file and one repository.
pub struct Client {
    state: PathBuf,
    metadata_url: Url,
    fetch: Option<Arc<dyn Fetch>>,
}

impl Client {
    /// `metadata_url`: where `timestamp.json` and `N.root.json` are (http(s) through
    /// `fetch`, or `file://`). `state`: the file [`pin_root`] wrote.
    pub fn new(state: &Path, metadata_url: &str, fetch: Option<Arc<dyn Fetch>>) -> Result<Self> {
        let mut text = metadata_url.to_string();
        if !text.ends_with('/') {
            text.push('/');
        }
        let metadata_url = Url::parse(&text).map_err(|e| Error::BadUrl {
            url: metadata_url.into(),
            detail: e.to_string(),
        })?;
        Ok(Self {
            state: state.to_path_buf(),
            metadata_url,
            fetch,
        })
    }

    /// Runs TUF's client workflow (root chain, timestamp, snapshot, targets) from the
    /// trusted state; on success the new state replaces the old one atomically. On any
    /// refusal the state is left as it was.
    pub fn refresh(&self) -> Result<Verified> {
        let saved = read_saved(&self.state)?;
        let parent = tern_fs::parent_of(&self.state);
        // tough's datastore writes its files in place; it works on a scratch copy so a
        // kill mid-refresh never leaves a half-written state behind.
        remove_stale_scratch(parent);
        let scratch = tempfile::Builder::new()
            .prefix(SCRATCH_PREFIX)
            .tempdir_in(parent)
            .map_err(Error::io("cannot create a scratch directory in", parent))?;
        for name in CARRIED {
            if let Some(text) = saved.files.get(name) {
                let p = scratch.path().join(name);
                std::fs::write(&p, text).map_err(Error::io("cannot write", &p))?;
            }
        }
        let transport = FetchTransport(self.fetch.clone());
        let url = self.metadata_url.clone();
        let loaded = crate::block_on(
            RepositoryLoader::new(&saved.root.as_bytes(), url.clone(), url.clone())
                .transport(transport)
                .datastore(scratch.path())
                .expiration_enforcement(ExpirationEnforcement::Safe)
                .load(),
        )?;
        let repo = loaded.map_err(|e| Error::Refused {
            url: self.metadata_url.to_string(),
            detail: crate::error::chain(&e),
        })?;

        // Read before the state is saved: a targets file whose minimums cannot be read
        // is refused like any other, and trust.json stays as it was.
        let minimums =
            crate::minimum::read(&repo.targets().signed._extra).map_err(|e| Error::Refused {
                url: self.metadata_url.to_string(),
                detail: e.to_string(),
            })?;
        let mut next = Saved {
            pinned_sha256: saved.pinned_sha256.clone(),
            root: serde_json::to_string(repo.root()).map_err(|e| Error::BadState {
                path: self.state.clone(),
                detail: e.to_string(),
            })?,
            files: Default::default(),
        };
        for name in CARRIED {
            let p = scratch.path().join(name);
            match std::fs::read_to_string(&p) {
                Ok(text) => {
                    next.files.insert(name.to_string(), text);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("cannot read", p)(e)),
            }
        }
        write_saved(&self.state, &next)?;

        let targets = signed_targets(&repo);
        Ok(Verified {
            root_version: repo.root().signed.version.get(),
            timestamp_version: repo.timestamp().signed.version.get(),
            snapshot_version: repo.snapshot().signed.version.get(),
            targets_version: repo.targets().signed.version.get(),
            targets,
            minimums,
        })
    }
}
