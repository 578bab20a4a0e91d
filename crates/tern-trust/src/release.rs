//! The release side: keys, a repository's metadata, and its changes, over tough's editor.
//!
//! A repository is a directory whose `metadata/` is what hosts fetch (`N.root.json`,
//! `timestamp.json`, `N.snapshot.json`, `N.targets.json`; consistent snapshots). Artifacts
//! are not copied in: targets name them by file name with their length, sha256 and Tern's
//! custom metadata, and hosts download them from the artifact server as before.
//!
//! Keys are ed25519, one PKCS#8 (DER) file each, written 0600. Every function takes the
//! key files it signs with; nothing is cached, so keys can stay on removable media.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use jiff::{SignedDuration, Timestamp};
use tough::editor::RepositoryEditor;
use tough::editor::signed::SignedRole;
use tough::key_source::{KeySource, LocalKeySource};
use tough::schema::decoded::{Decoded, Hex};
use tough::schema::key::Key;
use tough::schema::{KeyHolder, RoleKeys, RoleType, Root, Signed, Snapshot, Timestamp as TsRole};
use tough::{ExpirationEnforcement, Repository, RepositoryLoader, TargetName};

use crate::digest::hex;
use crate::error::{Error, Result};

const SPEC_VERSION: &str = "1.0.0";

fn rerr(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Release {
        what: what.to_string(),
        detail: detail.to_string(),
    }
}

/// Writes a new ed25519 key to `path` (0600, refused if the file exists) and returns its
/// TUF key id.
pub fn generate_key(path: &Path) -> Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let rng = SystemRandom::new();
    let doc = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|e| rerr("cannot generate a key", e))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(Error::io("cannot create the key file", path))?;
    f.write_all(doc.as_ref())
        .and_then(|()| f.sync_all())
        .map_err(Error::io("cannot write", path))?;
    key_id(path)
}

/// The public half of a key file, as TUF names it.
pub fn public_key(path: &Path) -> Result<Key> {
    let bytes = std::fs::read(path).map_err(Error::io("cannot read the key file", path))?;
    let pair = Ed25519KeyPair::from_pkcs8(&bytes).map_err(|e| {
        rerr(
            &format!("{} is not an ed25519 PKCS#8 key", path.display()),
            e,
        )
    })?;
    let public = pair.public_key().as_ref().to_vec();
    Ok(Key::Ed25519 {
        keyval: tough::schema::key::Ed25519Key {
            public: Decoded::from(public),
            _extra: HashMap::new(),
        },
        scheme: tough::schema::key::Ed25519Scheme::Ed25519,
        _extra: HashMap::new(),
    })
}

/// The hex key id of a key file.
pub fn key_id(path: &Path) -> Result<String> {
    let key = public_key(path)?;
    let id = key
        .key_id()
        .map_err(Error::release("cannot compute a key id"))?;
    Ok(hex(&id))
}

/// The keys of one role and how many of them must sign.
#[derive(Clone, Debug)]
pub struct RoleSpec {
    pub keys: Vec<PathBuf>,
    pub threshold: u64,
}

/// How long each role's metadata stays valid once signed.
#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    pub root: SignedDuration,
    pub targets: SignedDuration,
    pub snapshot: SignedDuration,
    pub timestamp: SignedDuration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        let days = |d: i64| SignedDuration::from_hours(24 * d);
        Self {
            root: days(365),
            targets: days(90),
            snapshot: days(7),
            timestamp: days(1),
        }
    }
}

fn expires_in(d: SignedDuration) -> Result<Timestamp> {
    Timestamp::now()
        .checked_add(d)
        .map_err(|e| rerr("bad lifetime", e))
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)
}

fn sources(keys: &[PathBuf]) -> Vec<Box<dyn KeySource>> {
    keys.iter()
        .map(|p| Box::new(LocalKeySource { path: p.clone() }) as Box<dyn KeySource>)
        .collect()
}

fn metadata_dir(repo: &Path) -> PathBuf {
    repo.join("metadata")
}

/// A directory beside `metadata/` (same file system) where a change is written in full
/// before any of it is published, so a failed signature leaves the repository as it was.
fn staging(repo: &Path) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(repo)
        .map_err(Error::io("cannot create a staging directory in", repo))
}

/// Moves every staged file into `metadata/`, each by an atomic write: versioned files
/// first (the root before the others), `timestamp.json` last. A host that fetches in the
/// middle sees the old timestamp, which names only files that still exist.
fn publish(staged: &Path, repo: &Path) -> Result<()> {
    let dir = metadata_dir(repo);
    let mut names: Vec<String> = std::fs::read_dir(staged)
        .map_err(Error::io("cannot read", staged))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let rank = |n: &str| match n {
        n if n.ends_with(".root.json") => 0,
        "timestamp.json" => 2,
        _ => 1,
    };
    names.sort_by_key(|n| (rank(n), n.clone()));
    for name in names {
        let from = staged.join(&name);
        let bytes = std::fs::read(&from).map_err(Error::io("cannot read", &from))?;
        tern_fs::write_atomic(&dir.join(&name), &bytes, 0o644)?;
    }
    Ok(())
}

/// Signs the editor's metadata with `keys` and writes it into the staging directory.
async fn sign_into(
    editor: RepositoryEditor,
    keys: &[PathBuf],
    stage: &Path,
    refused: &str,
) -> Result<()> {
    let signed = editor
        .sign(&sources(keys))
        .await
        .map_err(Error::release(refused))?;
    signed
        .write(stage)
        .await
        .map_err(Error::release("cannot write the metadata"))
}

/// The change every editing command ends with: new targets, snapshot and timestamp
/// versions (one past `r`'s), signed with `keys`, staged, then published.
fn sign_next(
    repo: &Path,
    r: Repository,
    root_path: &Path,
    keys: &[PathBuf],
    l: &Lifetimes,
    edit: impl FnOnce(&mut RepositoryEditor) -> Result<()>,
) -> Result<u64> {
    let (tv, sv, ts) = versions(&r);
    let stage = staging(repo)?;
    crate::block_on(async {
        let mut editor = RepositoryEditor::from_repo(root_path, r)
            .await
            .map_err(Error::release("cannot edit the repository"))?;
        edit(&mut editor)?;
        set_versions(&mut editor, tv + 1, sv + 1, ts + 1, l)?;
        sign_into(
            editor,
            keys,
            stage.path(),
            "cannot sign (give a threshold of the targets, snapshot and timestamp keys)",
        )
        .await
    })??;
    publish(stage.path(), repo)?;
    Ok(tv + 1)
}

/// Sets `role`'s keys in `root`, adding the public keys to the key list.
fn set_role(root: &mut Root, role: RoleType, spec: &RoleSpec) -> Result<()> {
    if spec.threshold == 0 || spec.threshold > spec.keys.len() as u64 {
        return Err(rerr(
            &format!("the {role} role"),
            format!(
                "a threshold of {} needs at least that many keys ({} given)",
                spec.threshold,
                spec.keys.len()
            ),
        ));
    }
    let mut ids = Vec::new();
    for path in &spec.keys {
        let key = public_key(path)?;
        let id = key
            .key_id()
            .map_err(Error::release("cannot compute a key id"))?;
        root.keys.insert(id.clone(), key);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    root.roles.insert(
        role,
        RoleKeys {
            keyids: ids,
            threshold: nz(spec.threshold),
            _extra: HashMap::new(),
        },
    );
    Ok(())
}

/// Drops keys no role uses any more.
fn prune_keys(root: &mut Root) {
    let used: Vec<Decoded<Hex>> = root
        .roles
        .values()
        .flat_map(|r| r.keyids.iter().cloned())
        .collect();
    root.keys.retain(|id, _| used.contains(id));
}

/// The key ids of a role, as text (for the report of what was signed).
fn role_ids(root: &Root, role: RoleType) -> Vec<String> {
    root.roles
        .get(&role)
        .map(|r| r.keyids.iter().map(|id| hex(id)).collect())
        .unwrap_or_default()
}

/// The keys for a new repository.
#[derive(Clone, Debug)]
pub struct InitSpec {
    pub root: RoleSpec,
    pub targets: RoleSpec,
    pub snapshot: RoleSpec,
    pub timestamp: RoleSpec,
    pub lifetimes: Lifetimes,
}

/// Creates `repo/metadata` with root version 1 (signed by the root keys) and empty,
/// signed targets, snapshot and timestamp. Refuses a directory that already has metadata.
pub fn init(repo: &Path, spec: &InitSpec) -> Result<PathBuf> {
    let dir = metadata_dir(repo);
    if dir.join("1.root.json").exists() {
        return Err(rerr(
            &format!("cannot init {}", repo.display()),
            "it already has a root (use rotate to change keys)",
        ));
    }
    std::fs::create_dir_all(&dir).map_err(Error::io("cannot create", &dir))?;
    let mut root = Root {
        spec_version: SPEC_VERSION.into(),
        consistent_snapshot: true,
        version: NonZeroU64::MIN,
        expires: expires_in(spec.lifetimes.root)?,
        keys: HashMap::new(),
        roles: HashMap::new(),
        _extra: HashMap::new(),
    };
    set_role(&mut root, RoleType::Root, &spec.root)?;
    set_role(&mut root, RoleType::Targets, &spec.targets)?;
    set_role(&mut root, RoleType::Snapshot, &spec.snapshot)?;
    set_role(&mut root, RoleType::Timestamp, &spec.timestamp)?;
    let signed = sign_root(root, &spec.root.keys, None)?;
    let stage = staging(repo)?;
    let staged_root = stage.path().join("1.root.json");
    tern_fs::write_atomic(&staged_root, signed.buffer(), 0o644)?;

    let mut keys = spec.targets.keys.clone();
    keys.extend(spec.snapshot.keys.iter().cloned());
    keys.extend(spec.timestamp.keys.iter().cloned());
    crate::block_on(async {
        let mut editor = RepositoryEditor::new(&staged_root)
            .await
            .map_err(Error::release("cannot read the new root"))?;
        set_versions(&mut editor, 1, 1, 1, &spec.lifetimes)?;
        sign_into(
            editor,
            &keys,
            stage.path(),
            "cannot sign the first metadata",
        )
        .await
    })??;
    publish(stage.path(), repo)?;
    let root_path = dir.join("1.root.json");
    Ok(root_path)
}

fn set_versions(
    editor: &mut RepositoryEditor,
    targets: u64,
    snapshot: u64,
    timestamp: u64,
    l: &Lifetimes,
) -> Result<()> {
    editor
        .targets_version(nz(targets))
        .map_err(Error::release("targets version"))?
        .targets_expires(expires_in(l.targets)?)
        .map_err(Error::release("targets expiry"))?;
    editor
        .snapshot_version(nz(snapshot))
        .snapshot_expires(expires_in(l.snapshot)?)
        .timestamp_version(nz(timestamp))
        .timestamp_expires(expires_in(l.timestamp)?);
    Ok(())
}

/// Signs a root with the given key files. `previous`: the root it replaces, whose keys
/// the new root must also satisfy (a client checks both thresholds).
fn sign_root(root: Root, keys: &[PathBuf], previous: Option<&Root>) -> Result<SignedRole<Root>> {
    let rng = SystemRandom::new();
    let new_holder = KeyHolder::Root(root.clone());
    let signed = crate::block_on(async {
        let mut signed = SignedRole::new(root.clone(), &new_holder, &sources(keys), &rng)
            .await
            .map_err(Error::release("cannot sign the root"))?;
        if let Some(prev) = previous {
            // Keys of the old root that are not in the new one sign too.
            let old_holder = KeyHolder::Root(prev.clone());
            let by_old = SignedRole::new(root.clone(), &old_holder, &sources(keys), &rng)
                .await
                .map_err(Error::release(
                    "cannot sign the root with the old root keys",
                ))?;
            let mut extra = Vec::new();
            for s in &by_old.signed().signatures {
                if !signed
                    .signed()
                    .signatures
                    .iter()
                    .any(|x| x.keyid == s.keyid)
                {
                    extra.push(s.clone());
                }
            }
            signed = signed
                .add_old_signatures(extra)
                .map_err(Error::release("cannot combine the root signatures"))?;
        }
        Ok::<_, Error>(signed)
    })??;
    let s = signed.signed();
    s.signed.verify_role(s).map_err(|e| {
        rerr(
            "the new root is not signed by its own threshold of root keys",
            crate::error::chain(&e),
        )
    })?;
    if let Some(prev) = previous {
        prev.verify_role(s).map_err(|e| {
            rerr(
                "the new root is not signed by a threshold of the previous root's keys",
                crate::error::chain(&e),
            )
        })?;
    }
    Ok(signed)
}

/// The repository as it stands (the release machine trusts its own first root and walks
/// the chain; expiry is not enforced, so expired metadata can be refreshed).
pub fn load(repo: &Path) -> Result<Repository> {
    let dir = metadata_dir(repo);
    let first = dir.join("1.root.json");
    let root = std::fs::read(&first).map_err(Error::io("cannot read", &first))?;
    let url = url::Url::from_directory_path(
        std::fs::canonicalize(&dir).map_err(Error::io("cannot resolve", &dir))?,
    )
    .map_err(|()| rerr("bad repository path", dir.display()))?;
    let scratch =
        tempfile::tempdir().map_err(Error::io("cannot create a temporary directory", "/tmp"))?;
    crate::block_on(
        RepositoryLoader::new(&root, url.clone(), url)
            .transport(crate::transport::FetchTransport(None))
            .datastore(scratch.path())
            .expiration_enforcement(ExpirationEnforcement::Unsafe)
            .load(),
    )?
    .map_err(|e| Error::Release {
        what: format!("cannot load the repository {}", repo.display()),
        detail: crate::error::chain(&e),
    })
}

fn latest_root_path(repo: &Path, r: &Repository) -> PathBuf {
    metadata_dir(repo).join(format!("{}.root.json", r.root().signed.version))
}

/// One artifact to sign, with Tern's custom metadata.
#[derive(Clone, Debug)]
pub struct NewTarget {
    pub file: PathBuf,
    pub version: String,
    pub os: String,
    pub arch: String,
    pub edition: Option<String>,
}

/// Adds (or replaces) targets and signs new targets, snapshot and timestamp with `keys`
/// (a threshold of each role's keys). Returns the new targets version.
pub fn add_targets(
    repo: &Path,
    targets: &[NewTarget],
    keys: &[PathBuf],
    l: &Lifetimes,
) -> Result<u64> {
    let mut built = Vec::with_capacity(targets.len());
    for t in targets {
        let mut custom = vec![
            ("version", t.version.clone()),
            ("os", t.os.clone()),
            ("arch", t.arch.clone()),
        ];
        if let Some(e) = &t.edition {
            custom.push(("edition", e.clone()));
        }
        built.push(build_target(&t.file, None, &custom)?);
    }
    sign_targets(repo, built, keys, l)
}

/// A target for `file` (its length and sha256), named `name` (default: the file's
/// name), with Tern's custom metadata.
fn build_target(
    file: &Path,
    name: Option<String>,
    custom: &[(&str, String)],
) -> Result<(TargetName, tough::schema::Target)> {
    let (file_name, mut target) = crate::block_on(RepositoryEditor::build_target(file))?
        .map_err(Error::release(format!("cannot read {}", file.display())))?;
    target.custom = custom
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone().into()))
        .collect();
    let name = match name {
        Some(n) => TargetName::new(n.clone())
            .map_err(Error::release(format!("{n}: not a valid target name")))?,
        None => file_name,
    };
    Ok((name, target))
}

/// Adds `built` to the targets and signs as [`add_targets`].
fn sign_targets(
    repo: &Path,
    built: Vec<(TargetName, tough::schema::Target)>,
    keys: &[PathBuf],
    l: &Lifetimes,
) -> Result<u64> {
    let r = load(repo)?;
    let root_path = latest_root_path(repo, &r);
    sign_next(repo, r, &root_path, keys, l, |editor| {
        for (name, target) in built {
            editor
                .add_target(name, target)
                .map_err(Error::release("cannot add the target"))?;
        }
        Ok(())
    })
}

/// A container image to sign: its manifest (the bytes whose sha256 is the image's
/// digest, as `crane manifest` or `docker buildx imagetools inspect --raw` print them)
/// under its reference `repository:tag`.
#[derive(Clone, Debug)]
pub struct NewImage {
    pub manifest: PathBuf,
    pub image: String,
    pub version: String,
}

/// The target name an image is signed under: `images/REPOSITORY:TAG`.
pub fn image_target_name(image: &str) -> String {
    format!("images/{image}")
}

/// Checks that `image` is `repository:tag`, no digest, no blanks.
fn check_image_ref(image: &str) -> Result<()> {
    let tag = image
        .rsplit_once('/')
        .map_or(image, |(_, last)| last)
        .split_once(':')
        .map(|(_, t)| t);
    let ok = tag.is_some_and(|t| !t.is_empty())
        && !image.starts_with(':')
        && !image.contains('@')
        && !image.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(rerr(
            "bad image reference",
            format!(
                "{image:?}: expected REPOSITORY:TAG (no digest: it is computed from the manifest)"
            ),
        ))
    }
}

/// Adds (or replaces) image targets: each image's manifest length and sha256 (its
/// digest) under [`image_target_name`], with custom `image` and `version`. Signs as
/// [`add_targets`]; returns the new targets version.
pub fn add_images(
    repo: &Path,
    images: &[NewImage],
    keys: &[PathBuf],
    l: &Lifetimes,
) -> Result<u64> {
    let mut built = Vec::with_capacity(images.len());
    for i in images {
        check_image_ref(&i.image)?;
        let custom = [("version", i.version.clone()), ("image", i.image.clone())];
        built.push(build_target(
            &i.manifest,
            Some(image_target_name(&i.image)),
            &custom,
        )?);
    }
    sign_targets(repo, built, keys, l)
}

/// Removes a target by name (and signs as [`add_targets`]).
pub fn remove_target(repo: &Path, name: &str, keys: &[PathBuf], l: &Lifetimes) -> Result<u64> {
    let name = TargetName::new(name).map_err(Error::release("bad target name"))?;
    let r = load(repo)?;
    let root_path = latest_root_path(repo, &r);
    sign_next(repo, r, &root_path, keys, l, |editor| {
        editor
            .remove_target(&name)
            .map_err(Error::release("cannot remove the target"))?;
        Ok(())
    })
}

/// Sets (`Some`) or clears (`None`) the signed minimum version of a release line, in the
/// targets metadata, and signs as [`add_targets`] (the targets, snapshot and timestamp
/// keys). Hosts with a pinned root then refuse every version of the line below it.
/// Clearing a line that has no minimum is an error (nothing would be signed).
pub fn set_minimum(
    repo: &Path,
    line: &str,
    version: Option<&str>,
    keys: &[PathBuf],
    l: &Lifetimes,
) -> Result<u64> {
    let r = load(repo)?;
    let root_path = latest_root_path(repo, &r);
    let mut targets = r.targets().clone();
    let mut minimums = crate::minimum::read(&targets.signed._extra)?;
    let line = crate::minimum::line(line)?;
    let before = minimums.len();
    minimums.retain(|m| m.line != line);
    match version {
        Some(v) => minimums.push(crate::minimum::minimum(&line.to_string(), v)?),
        None if minimums.len() == before => {
            return Err(rerr(
                &format!("cannot clear the minimum of release line {line}"),
                "it has none (tern-release list shows the minimums)",
            ));
        }
        None => {}
    }
    if minimums.is_empty() {
        targets.signed._extra.remove(crate::minimum::FIELD);
    } else {
        targets.signed._extra.insert(
            crate::minimum::FIELD.into(),
            crate::minimum::to_value(&minimums),
        );
    }
    sign_next(repo, r, &root_path, keys, l, |editor| {
        // The whole targets metadata, minimums changed; its signatures are redone.
        editor
            .targets(targets)
            .map_err(Error::release("cannot edit the targets"))?;
        Ok(())
    })
}

/// The signed minimum versions of a repository, by line.
pub fn minimums(repo: &Path) -> Result<Vec<crate::minimum::Minimum>> {
    let r = load(repo)?;
    crate::minimum::read(&r.targets().signed._extra)
}

fn versions(r: &Repository) -> (u64, u64, u64) {
    (
        r.targets().signed.version.get(),
        r.snapshot().signed.version.get(),
        r.timestamp().signed.version.get(),
    )
}

/// Re-signs snapshot and timestamp with new versions and expiry, targets untouched: the
/// routine job of the online keys. `keys`: the snapshot and timestamp keys.
pub fn refresh(repo: &Path, keys: &[PathBuf], l: &Lifetimes) -> Result<u64> {
    let r = load(repo)?;
    let root = r.root().signed.clone();
    let mut snapshot: Snapshot = r.snapshot().signed.clone();
    snapshot.version = nz(snapshot.version.get() + 1);
    snapshot.expires = expires_in(l.snapshot)?;
    let ts_version = r.timestamp().signed.version.get() + 1;
    let stage = staging(repo)?;
    let rng = SystemRandom::new();
    let holder = KeyHolder::Root(root.clone());
    crate::block_on(async {
        let keys = sources(keys);
        let snap = SignedRole::new(snapshot, &holder, &keys, &rng)
            .await
            .map_err(Error::release(
                "cannot sign the snapshot (give the snapshot keys)",
            ))?;
        let mut ts = TsRole::new(
            SPEC_VERSION.into(),
            nz(ts_version),
            expires_in(l.timestamp)?,
        );
        ts.meta.insert(
            "snapshot.json".into(),
            tough::schema::Metafile {
                hashes: Some(tough::schema::Hashes {
                    sha256: snap.sha256().to_vec().into(),
                    _extra: HashMap::new(),
                }),
                length: Some(*snap.length()),
                version: snap.signed().signed.version,
                _extra: HashMap::new(),
            },
        );
        let ts = SignedRole::new(ts, &holder, &keys, &rng)
            .await
            .map_err(Error::release(
                "cannot sign the timestamp (give the timestamp keys)",
            ))?;
        snap.write(stage.path(), root.consistent_snapshot)
            .await
            .map_err(Error::release("cannot write the snapshot"))?;
        ts.write(stage.path(), root.consistent_snapshot)
            .await
            .map_err(Error::release("cannot write the timestamp"))
    })??;
    publish(stage.path(), repo)?;
    Ok(ts_version)
}

/// What a rotation changes; `None` keeps a role's keys.
#[derive(Clone, Debug, Default)]
pub struct Rotation {
    pub root: Option<RoleSpec>,
    pub targets: Option<RoleSpec>,
    pub snapshot: Option<RoleSpec>,
    pub timestamp: Option<RoleSpec>,
}

/// What a rotation did.
#[derive(Clone, Debug)]
pub struct Rotated {
    pub root_version: u64,
    pub root_keys: Vec<String>,
}

/// Writes root version N+1 with the new keys, signed by `signing` (a threshold of the
/// old root keys and of the new ones). When a non-root role changed, the other metadata
/// is re-signed by its new keys, also from `signing` — so `signing` holds every key the
/// new metadata needs.
pub fn rotate(
    repo: &Path,
    rotation: &Rotation,
    signing: &[PathBuf],
    l: &Lifetimes,
) -> Result<Rotated> {
    let r = load(repo)?;
    let old = r.root().signed.clone();
    let mut root = old.clone();
    root.version = nz(old.version.get() + 1);
    root.expires = expires_in(l.root)?;
    for (role, spec) in [
        (RoleType::Root, &rotation.root),
        (RoleType::Targets, &rotation.targets),
        (RoleType::Snapshot, &rotation.snapshot),
        (RoleType::Timestamp, &rotation.timestamp),
    ] {
        if let Some(spec) = spec {
            set_role(&mut root, role, spec)?;
        }
    }
    prune_keys(&mut root);
    let root_keys = role_ids(&root, RoleType::Root);
    let signed = sign_root(root.clone(), signing, Some(&old))?;
    let stage = staging(repo)?;
    let path = stage.path().join(format!("{}.root.json", root.version));
    tern_fs::write_atomic(&path, signed.buffer(), 0o644)?;

    let others_changed =
        rotation.targets.is_some() || rotation.snapshot.is_some() || rotation.timestamp.is_some();
    if others_changed {
        // Re-signed from the staged root; the new root is published with them or not
        // at all, so a refused key leaves hosts on the old, still valid, chain.
        sign_next(repo, r, &path, signing, l, |_| Ok(()))
            .map_err(|e| rerr("cannot re-sign with the new keys", e))?;
    } else {
        publish(stage.path(), repo)?;
    }
    Ok(Rotated {
        root_version: root.version.get(),
        root_keys,
    })
}

/// Parses a signed role file (for tools and tests that inspect a repository).
pub fn read_root(path: &Path) -> Result<Signed<Root>> {
    let bytes = std::fs::read(path).map_err(Error::io("cannot read", path))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| rerr(&format!("{} is not a root", path.display()), e))
}

/// The signed targets of a repository.
pub fn list(repo: &Path) -> Result<Vec<crate::SignedTarget>> {
    let r = load(repo)?;
    let mut t = crate::client::signed_targets(&r);
    t.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(t)
}
