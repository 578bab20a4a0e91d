//! The attacks TUF names, each against a repository built here with tern-release's
//! functions (tough's editor) and, for the forged parts, tough's own signing types. The
//! client fetches through a [`Fetch`] that reads the repository's files as a server
//! would serve them (and can serve what an attacker would instead).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::Read;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jiff::SignedDuration;
use tern_trust::release::{self, InitSpec, Lifetimes, NewTarget, RoleSpec, Rotation};
use tern_trust::{Client, Error, Fetch, Opened};
use tough::editor::signed::SignedRole;
use tough::key_source::{KeySource, LocalKeySource};
use tough::schema::{
    Hashes, KeyHolder, Metafile, Role, RoleKeys, RoleType, Root, Snapshot, Target, Targets,
    Timestamp,
};

const URL: &str = "http://repo.test/metadata/";

/// What the fake server answers for one file instead of the repository's copy.
#[derive(Clone)]
enum Answer {
    Bytes(Vec<u8>),
    Endless,
}

/// Serves `<repo>/metadata/<file>` for `URL<file>`; 404 when missing.
struct Server {
    dir: PathBuf,
    overrides: Mutex<HashMap<String, Answer>>,
}

impl Server {
    fn set(&self, file: &str, a: Answer) {
        self.overrides.lock().unwrap().insert(file.into(), a);
    }
    fn clear(&self) {
        self.overrides.lock().unwrap().clear();
    }
}

/// Spaces without end.
struct Endless;
impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(b' ');
        Ok(buf.len())
    }
}

impl Fetch for Server {
    fn open(&self, url: &str) -> Result<Opened, String> {
        let file = url.strip_prefix(URL).ok_or("wrong host")?.to_string();
        if let Some(a) = self.overrides.lock().unwrap().get(&file) {
            return Ok(match a.clone() {
                Answer::Bytes(b) => Opened::Body(Box::new(std::io::Cursor::new(b))),
                Answer::Endless => Opened::Body(Box::new(Endless)),
            });
        }
        match std::fs::read(self.dir.join(&file)) {
            Ok(b) => Ok(Opened::Body(Box::new(std::io::Cursor::new(b)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Opened::NotFound),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct Keys {
    root: Vec<PathBuf>,
    targets: Vec<PathBuf>,
    snapshot: PathBuf,
    timestamp: PathBuf,
}

struct Fx {
    dir: tempfile::TempDir,
    repo: PathBuf,
    keys: Keys,
    server: Arc<Server>,
    state: PathBuf,
}

fn key(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(format!("{name}.pk8"));
    release::generate_key(&p).unwrap();
    p
}

/// A repository with two root keys (threshold 2), `targets_threshold` of two targets
/// keys, one snapshot and one timestamp key; a host that pinned its root.
fn fixture(targets_threshold: u64) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&keys_dir).unwrap();
    let keys = Keys {
        root: vec![key(&keys_dir, "root1"), key(&keys_dir, "root2")],
        targets: vec![key(&keys_dir, "targets1"), key(&keys_dir, "targets2")],
        snapshot: key(&keys_dir, "snapshot"),
        timestamp: key(&keys_dir, "timestamp"),
    };
    let repo = dir.path().join("repo");
    release::init(
        &repo,
        &InitSpec {
            root: RoleSpec {
                keys: keys.root.clone(),
                threshold: 2,
            },
            targets: RoleSpec {
                keys: keys.targets.clone(),
                threshold: targets_threshold,
            },
            snapshot: RoleSpec {
                keys: vec![keys.snapshot.clone()],
                threshold: 1,
            },
            timestamp: RoleSpec {
                keys: vec![keys.timestamp.clone()],
                threshold: 1,
            },
            lifetimes: Lifetimes::default(),
        },
    )
    .unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let state = host.join("trust.json");
    tern_trust::pin_root(&state, &repo.join("metadata/1.root.json")).unwrap();
    let server = Arc::new(Server {
        dir: repo.join("metadata"),
        overrides: Mutex::new(HashMap::new()),
    });
    Fx {
        dir,
        repo,
        keys,
        server,
        state,
    }
}

impl Fx {
    fn all_keys(&self) -> Vec<PathBuf> {
        let mut k = self.keys.targets.clone();
        k.push(self.keys.snapshot.clone());
        k.push(self.keys.timestamp.clone());
        k
    }
    fn online_keys(&self) -> Vec<PathBuf> {
        vec![self.keys.snapshot.clone(), self.keys.timestamp.clone()]
    }
    fn tarball(&self, name: &str, body: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
    fn add(&self, version: &str) -> PathBuf {
        let file = self.tarball(
            &format!("tern-agent-v{version}-linux-amd64-bin.tar.gz"),
            format!("agent {version}").as_bytes(),
        );
        release::add_targets(
            &self.repo,
            &[NewTarget {
                file: file.clone(),
                version: version.into(),
                os: "linux".into(),
                arch: "amd64".into(),
                edition: None,
            }],
            &self.all_keys(),
            &Lifetimes::default(),
        )
        .unwrap();
        file
    }
    fn client(&self) -> Client {
        Client::new(
            &self.state,
            URL,
            Some(self.server.clone() as Arc<dyn Fetch>),
        )
        .unwrap()
    }
    fn meta(&self, name: &str) -> PathBuf {
        self.repo.join("metadata").join(name)
    }
    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.meta(name)).unwrap()
    }
}

fn refused(r: Result<tern_trust::Verified, Error>) -> String {
    match r {
        Err(e @ Error::Refused { .. }) => e.to_string(),
        Err(e) => panic!("expected a refusal, got another error: {e}"),
        Ok(v) => panic!("expected a refusal, got a verified repository: {v:?}"),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn sources(keys: &[PathBuf]) -> Vec<Box<dyn KeySource>> {
    keys.iter()
        .map(|p| Box::new(LocalKeySource { path: p.clone() }) as Box<dyn KeySource>)
        .collect()
}

/// A root that says `keys` (threshold 1) hold `role`: how an attacker's signature is
/// made with tough's own types (the real root is untouched).
fn attacker_holder(real: &Root, role: RoleType, keys: &[PathBuf]) -> Root {
    let mut fake = real.clone();
    let mut ids = Vec::new();
    for k in keys {
        let key = release::public_key(k).unwrap();
        let id = key.key_id().unwrap();
        fake.keys.insert(id.clone(), key);
        ids.push(id);
    }
    fake.roles.insert(
        role,
        RoleKeys {
            keyids: ids,
            threshold: NonZeroU64::MIN,
            _extra: HashMap::new(),
        },
    );
    fake
}

fn sign<T: Role + serde::Serialize + Clone>(
    role: T,
    holder: &Root,
    keys: &[PathBuf],
) -> SignedRole<T> {
    let rng = aws_lc_rs::rand::SystemRandom::new();
    block_on(SignedRole::new(
        role,
        &KeyHolder::Root(holder.clone()),
        &sources(keys),
        &rng,
    ))
    .unwrap()
}

fn meta_of<T: Role>(r: &SignedRole<T>) -> Metafile {
    Metafile {
        hashes: Some(Hashes {
            sha256: r.sha256().to_vec().into(),
            _extra: HashMap::new(),
        }),
        length: Some(*r.length()),
        version: r.signed().signed.version(),
        _extra: HashMap::new(),
    }
}

/// Publishes `targets` with a snapshot and timestamp over it signed by the real online
/// keys (an attacker who holds them, or the real ones).
fn publish(fx: &Fx, targets: &SignedRole<Targets>, snapshot_v: u64, timestamp_v: u64) {
    // The first root: these tests publish before any rotation (and may have broken the
    // repository for a loader already).
    let root = release::read_root(&fx.meta("1.root.json")).unwrap().signed;
    let mut snap = Snapshot::new(
        "1.0.0".into(),
        NonZeroU64::new(snapshot_v).unwrap(),
        in_days(7),
    );
    snap.meta.insert("targets.json".into(), meta_of(targets));
    let snap = sign(snap, &root, std::slice::from_ref(&fx.keys.snapshot));
    let mut ts = Timestamp::new(
        "1.0.0".into(),
        NonZeroU64::new(timestamp_v).unwrap(),
        in_days(1),
    );
    ts.meta.insert("snapshot.json".into(), meta_of(&snap));
    let ts = sign(ts, &root, std::slice::from_ref(&fx.keys.timestamp));
    let dir = fx.repo.join("metadata");
    block_on(async {
        targets.write(&dir, true).await.unwrap();
        snap.write(&dir, true).await.unwrap();
        ts.write(&dir, true).await.unwrap();
    });
}

fn in_days(d: i64) -> jiff::Timestamp {
    jiff::Timestamp::now() + SignedDuration::from_hours(24 * d)
}

/// The current targets plus an evil one, at the next version.
fn evil_targets(fx: &Fx) -> Targets {
    let repo = release::load(&fx.repo).unwrap();
    let mut t = repo.targets().signed.clone();
    t.version = t.version.checked_add(1).unwrap();
    let evil = fx.tarball("evil.tar.gz", b"evil");
    let mut target = block_on(Target::from_path(&evil)).unwrap();
    target.custom.insert("version".into(), "6.6.6".into());
    target.custom.insert("arch".into(), "amd64".into());
    target.custom.insert("os".into(), "linux".into());
    t.targets
        .insert(tough::TargetName::new("evil.tar.gz").unwrap(), target);
    t
}

#[test]
fn a_signed_release_verifies_and_the_target_is_found_by_version_and_arch() {
    let fx = fixture(1);
    fx.add("1.0.0");
    let v = fx.client().refresh().unwrap();
    let t = v.find("1.0.0", "linux", "amd64", "").unwrap();
    assert_eq!(t.name, "tern-agent-v1.0.0-linux-amd64-bin.tar.gz");
    assert_eq!(t.length, "agent 1.0.0".len() as u64);
    assert!(matches!(
        v.find("1.0.0", "linux", "arm64", ""),
        Err(Error::NotSigned { .. })
    ));
    // A target without an edition is for every edition ("oss" is the artifact URLs'
    // name for none; ternd's default edition is "community").
    for e in ["oss", "community", "ent"] {
        assert_eq!(
            v.find("1.0.0", "linux", "amd64", e).unwrap().name,
            t.name,
            "{e}"
        );
    }
    assert_eq!((v.root_version, v.targets_version), (1, 2));
    // A target for one edition: chosen for it over the generic one, and only for it.
    let ent = |version: &str| {
        let file = fx.tarball(&format!("ent-{version}.tar.gz"), version.as_bytes());
        release::add_targets(
            &fx.repo,
            &[NewTarget {
                file,
                version: version.into(),
                os: "linux".into(),
                arch: "amd64".into(),
                edition: Some("ent".into()),
            }],
            &fx.all_keys(),
            &Lifetimes::default(),
        )
        .unwrap();
    };
    ent("1.0.0");
    ent("2.0.0");
    let v = fx.client().refresh().unwrap();
    assert_eq!(
        v.find("1.0.0", "linux", "amd64", "ent").unwrap().name,
        "ent-1.0.0.tar.gz"
    );
    assert_eq!(v.find("1.0.0", "linux", "amd64", "").unwrap().name, t.name);
    assert!(matches!(
        v.find("2.0.0", "linux", "amd64", "community"),
        Err(Error::NotSigned { .. })
    ));
}

#[test]
fn arbitrary_software_a_version_the_targets_role_did_not_sign_is_not_found() {
    let fx = fixture(1);
    fx.add("1.0.0");
    let v = fx.client().refresh().unwrap();
    let e = v.find("9.9.9", "linux", "amd64", "").unwrap_err();
    assert!(matches!(e, Error::NotSigned { .. }), "{e}");
    assert!(
        e.to_string().contains("not signed by the release keys"),
        "{e}"
    );
}

#[test]
fn arbitrary_software_targets_signed_by_a_key_the_root_does_not_name_are_refused() {
    // The attacker holds the online keys (snapshot, timestamp) but not a targets key.
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    let attacker = key(fx.dir.path(), "attacker");
    let root = release::load(&fx.repo).unwrap().root().signed.clone();
    let holder = attacker_holder(&root, RoleType::Targets, std::slice::from_ref(&attacker));
    let targets = sign(evil_targets(&fx), &holder, &[attacker]);
    publish(&fx, &targets, 10, 10);
    let msg = refused(fx.client().refresh());
    assert!(msg.contains("targets"), "{msg}");
}

#[test]
fn threshold_not_met_one_of_two_targets_signatures_is_refused() {
    let fx = fixture(2);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    // One real targets key of the two the root requires.
    let root = release::load(&fx.repo).unwrap().root().signed.clone();
    let evil = evil_targets(&fx);
    let one = vec![fx.keys.targets[0].clone()];
    let holder = attacker_holder(&root, RoleType::Targets, &one);
    let targets = sign(evil.clone(), &holder, &one);
    publish(&fx, &targets, 10, 10);
    let msg = refused(fx.client().refresh());
    assert!(msg.contains("targets"), "{msg}");
    // Both keys: accepted.
    let both = fx.keys.targets.clone();
    let holder = attacker_holder(&root, RoleType::Targets, &both);
    let targets = sign(evil, &holder, &both);
    publish(&fx, &targets, 11, 11);
    let v = fx.client().refresh().unwrap();
    assert!(v.find("6.6.6", "linux", "amd64", "").is_ok());
}

#[test]
fn threshold_not_met_a_new_root_signed_by_one_of_two_old_root_keys_is_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    let attacker = key(fx.dir.path(), "attacker-root");
    // Signed by the new root key and one old root key: the old threshold is 2.
    let err = release::rotate(
        &fx.repo,
        &Rotation {
            root: Some(RoleSpec {
                keys: vec![attacker.clone()],
                threshold: 1,
            }),
            ..Default::default()
        },
        &[attacker.clone(), fx.keys.root[0].clone()],
        &Lifetimes::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("previous root"), "{err}");
    // Forged anyway and served as 2.root.json: the host refuses the chain.
    let root = release::load(&fx.repo).unwrap().root().signed.clone();
    let mut evil = root.clone();
    evil.version = NonZeroU64::new(2).unwrap();
    let holder = attacker_holder(
        &root,
        RoleType::Root,
        &[attacker.clone(), fx.keys.root[0].clone()],
    );
    let mut evil_roles = evil.clone();
    evil_roles.roles = holder.roles.clone();
    evil_roles.keys = holder.keys.clone();
    let signed = sign(evil_roles, &holder, &[attacker, fx.keys.root[0].clone()]);
    fx.server
        .set("2.root.json", Answer::Bytes(signed.buffer().clone()));
    let msg = refused(fx.client().refresh());
    assert!(msg.contains("root"), "{msg}");
}

#[test]
fn rollback_older_timestamp_and_snapshot_are_refused_even_after_a_restart() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    let old_ts = fx.read("timestamp.json");
    fx.add("1.1.0");
    let v = fx.client().refresh().unwrap();
    assert!(v.find("1.1.0", "linux", "amd64", "").is_ok());
    // The server goes back to the older (validly signed, unexpired) timestamp. A new
    // Client is a restart: all it has is the state file.
    fx.server.set("timestamp.json", Answer::Bytes(old_ts));
    let before = std::fs::read(&fx.state).unwrap();
    let msg = refused(fx.client().refresh());
    assert!(msg.to_lowercase().contains("version"), "{msg}");
    assert_eq!(
        std::fs::read(&fx.state).unwrap(),
        before,
        "a refusal leaves the state as it was"
    );
}

#[test]
fn rollback_a_newer_timestamp_over_an_older_snapshot_is_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.add("1.1.0");
    fx.client().refresh().unwrap();
    // A timestamp signed with the real key (version up) naming the older snapshot 2.
    let repo = release::load(&fx.repo).unwrap();
    let root = repo.root().signed.clone();
    let old_snap = fx.read("2.snapshot.json");
    let snap: tough::schema::Signed<Snapshot> = serde_json::from_slice(&old_snap).unwrap();
    let mut ts = Timestamp::new("1.0.0".into(), NonZeroU64::new(50).unwrap(), in_days(1));
    let sha = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &old_snap);
    ts.meta.insert(
        "snapshot.json".into(),
        Metafile {
            hashes: Some(Hashes {
                sha256: sha.as_ref().to_vec().into(),
                _extra: HashMap::new(),
            }),
            length: Some(old_snap.len() as u64),
            version: snap.signed.version,
            _extra: HashMap::new(),
        },
    );
    let ts = sign(ts, &root, std::slice::from_ref(&fx.keys.timestamp));
    fx.server
        .set("timestamp.json", Answer::Bytes(ts.buffer().clone()));
    let msg = refused(fx.client().refresh());
    assert!(msg.to_lowercase().contains("snapshot"), "{msg}");
}

#[test]
fn indefinite_freeze_an_expired_timestamp_is_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    // The repository stops being refreshed: its timestamp is past its expiry.
    let expired = Lifetimes {
        timestamp: SignedDuration::from_hours(-1),
        ..Lifetimes::default()
    };
    release::refresh(&fx.repo, &fx.online_keys(), &expired).unwrap();
    let msg = refused(fx.client().refresh());
    assert!(msg.to_lowercase().contains("expired"), "{msg}");
    // Refreshed again by the online keys: accepted.
    release::refresh(&fx.repo, &fx.online_keys(), &Lifetimes::default()).unwrap();
    fx.client().refresh().unwrap();
}

#[test]
fn mix_and_match_targets_other_than_the_snapshot_names_are_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    let v1_targets = fx.read("2.targets.json");
    fx.add("1.1.0");
    // The snapshot names targets version 3; the server answers with version 2's file.
    fx.server.set("3.targets.json", Answer::Bytes(v1_targets));
    let msg = refused(fx.client().refresh());
    assert!(msg.contains("targets"), "{msg}");
}

#[test]
fn endless_data_metadata_larger_than_declared_or_allowed_is_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    // timestamp.json has no declared size: tough's limit (1 MiB) stops an endless answer.
    fx.server.set("timestamp.json", Answer::Endless);
    let msg = refused(fx.client().refresh());
    assert!(
        msg.to_lowercase().contains("size") || msg.contains("max"),
        "{msg}"
    );
    fx.server.clear();
    // targets.json is declared in the snapshot: one byte more is refused.
    let mut padded = fx.read("2.targets.json");
    padded.extend_from_slice(&[b' '; 4096]);
    fx.server.set("2.targets.json", Answer::Bytes(padded));
    let msg = refused(fx.client().refresh());
    assert!(msg.contains("targets"), "{msg}");
    fx.server.clear();
    fx.client().refresh().unwrap();
}

#[test]
fn malicious_mirror_a_whole_repository_made_with_other_keys_is_refused() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    // Another repository, complete and valid under its own root, signing an evil build.
    let other = fixture(1);
    other.add("6.6.6");
    let mirror = Arc::new(Server {
        dir: other.repo.join("metadata"),
        overrides: Mutex::new(HashMap::new()),
    });
    let client = Client::new(&fx.state, URL, Some(mirror as Arc<dyn Fetch>)).unwrap();
    let msg = refused(client.refresh());
    // The mirror's own keys sign nothing the pinned root accepts.
    assert!(
        msg.contains("timestamp") && msg.contains("threshold"),
        "{msg}"
    );
}

#[test]
fn fast_forward_after_a_timestamp_key_compromise_is_recovered_by_rotating_the_key() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    // The attacker, holding the timestamp key, makes the host trust timestamp v1000.
    let repo = release::load(&fx.repo).unwrap();
    let root = repo.root().signed.clone();
    let snap = fx.read(&format!("{}.snapshot.json", repo.snapshot().signed.version));
    let snap_v = repo.snapshot().signed.version;
    let mut ts = Timestamp::new("1.0.0".into(), NonZeroU64::new(1000).unwrap(), in_days(1));
    let sha = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &snap);
    ts.meta.insert(
        "snapshot.json".into(),
        Metafile {
            hashes: Some(Hashes {
                sha256: sha.as_ref().to_vec().into(),
                _extra: HashMap::new(),
            }),
            length: Some(snap.len() as u64),
            version: snap_v,
            _extra: HashMap::new(),
        },
    );
    let ts = sign(ts, &root, std::slice::from_ref(&fx.keys.timestamp));
    fx.server
        .set("timestamp.json", Answer::Bytes(ts.buffer().clone()));
    assert_eq!(fx.client().refresh().unwrap().timestamp_version, 1000);
    fx.server.clear();
    // The real repository moves on; its timestamps are now "older" than 1000.
    fx.add("1.1.0");
    let msg = refused(fx.client().refresh());
    assert!(msg.to_lowercase().contains("version"), "{msg}");
    // Recovery: the root keys replace the timestamp key (root v2). The host drops the
    // fast-forwarded timestamp and follows the repository again.
    let new_ts = key(fx.dir.path(), "timestamp2");
    let mut signing = fx.keys.root.clone();
    signing.extend(fx.keys.targets.clone());
    signing.push(fx.keys.snapshot.clone());
    signing.push(new_ts.clone());
    let r = release::rotate(
        &fx.repo,
        &Rotation {
            timestamp: Some(RoleSpec {
                keys: vec![new_ts],
                threshold: 1,
            }),
            ..Default::default()
        },
        &signing,
        &Lifetimes::default(),
    )
    .unwrap();
    assert_eq!(r.root_version, 2);
    let v = fx.client().refresh().unwrap();
    assert_eq!(v.root_version, 2);
    assert!(v.timestamp_version < 1000);
    assert!(v.find("1.1.0", "linux", "amd64", "").is_ok());
    // And the compromised key signs nothing the host accepts any more.
    let ts = sign(
        Timestamp::new("1.0.0".into(), NonZeroU64::new(5000).unwrap(), in_days(1)),
        &root,
        std::slice::from_ref(&fx.keys.timestamp),
    );
    fx.server
        .set("timestamp.json", Answer::Bytes(ts.buffer().clone()));
    refused(fx.client().refresh());
}

#[test]
fn root_rotation_the_host_follows_new_root_keys_and_refuses_the_old_ones() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    let new_roots = vec![key(fx.dir.path(), "nroot1"), key(fx.dir.path(), "nroot2")];
    let mut signing = fx.keys.root.clone();
    signing.extend(new_roots.clone());
    release::rotate(
        &fx.repo,
        &Rotation {
            root: Some(RoleSpec {
                keys: new_roots.clone(),
                threshold: 2,
            }),
            ..Default::default()
        },
        &signing,
        &Lifetimes::default(),
    )
    .unwrap();
    let v = fx.client().refresh().unwrap();
    assert_eq!(v.root_version, 2);
    assert_eq!(tern_trust::pinned_root_info(&fx.state).unwrap(), 2);
    // The old root keys (say, stolen) sign a root v3: refused, they no longer count.
    let root2 = release::load(&fx.repo).unwrap().root().signed.clone();
    let mut evil = root2.clone();
    evil.version = NonZeroU64::new(3).unwrap();
    let holder = attacker_holder(&root2, RoleType::Root, &fx.keys.root);
    let mut evil_signed_by = evil.clone();
    evil_signed_by
        .roles
        .insert(RoleType::Root, holder.roles[&RoleType::Root].clone());
    evil_signed_by.keys = holder.keys.clone();
    let signed = sign(evil_signed_by, &holder, &fx.keys.root);
    fx.server
        .set("3.root.json", Answer::Bytes(signed.buffer().clone()));
    refused(fx.client().refresh());
}

#[test]
fn pinning_a_root_that_does_not_sign_itself_is_refused_and_pinning_the_same_root_keeps_the_state() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.client().refresh().unwrap();
    let before = std::fs::read(&fx.state).unwrap();
    let again = tern_trust::pin_root(&fx.state, &fx.meta("1.root.json")).unwrap();
    assert!(!again.replaced);
    assert_eq!(std::fs::read(&fx.state).unwrap(), before);
    // A root with a signature removed (threshold 2 of 2 root keys) is not a root.
    let mut root: serde_json::Value = serde_json::from_slice(&fx.read("1.root.json")).unwrap();
    root["signatures"].as_array_mut().unwrap().pop();
    let bad = fx.dir.path().join("bad-root.json");
    std::fs::write(&bad, serde_json::to_vec(&root).unwrap()).unwrap();
    let e = tern_trust::pin_root(&fx.dir.path().join("host2.json"), &bad).unwrap_err();
    assert!(matches!(e, Error::BadRoot { .. }), "{e}");
    assert!(!fx.dir.path().join("host2.json").exists());
}

#[test]
fn a_repository_made_by_the_release_cli_functions_lists_its_targets() {
    let fx = fixture(1);
    fx.add("1.0.0");
    fx.add("1.1.0");
    let list = release::list(&fx.repo).unwrap();
    let versions: Vec<_> = list.iter().map(|t| t.version.clone().unwrap()).collect();
    assert_eq!(versions, ["1.0.0", "1.1.0"]);
    // Removing a target signs a targets role without it.
    release::remove_target(
        &fx.repo,
        "tern-agent-v1.0.0-linux-amd64-bin.tar.gz",
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    let v = fx.client().refresh().unwrap();
    assert!(matches!(
        v.find("1.0.0", "linux", "amd64", ""),
        Err(Error::NotSigned { .. })
    ));
    assert!(v.has_version("1.1.0"));
}

/// A container image is signed as its manifest: the host (tern-kube-update) finds it by
/// its reference, and its sha256 is the digest to pin. An image not signed is refused
/// by name; a reference that is not `REPOSITORY:TAG` is refused at signing; the image
/// never answers a tarball lookup.
#[test]
fn an_image_manifest_is_signed_under_its_reference_with_its_digest() {
    let fx = fixture(1);
    fx.add("1.0.0");
    let manifest = fx.tarball("manifest.json", br#"{"schemaVersion":2,"layers":[]}"#);
    release::add_images(
        &fx.repo,
        &[release::NewImage {
            manifest: manifest.clone(),
            image: "registry.example:5000/tern/agent:1.1.0".into(),
            version: "1.1.0".into(),
        }],
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    let v = fx.client().refresh().unwrap();
    let t = v.image("registry.example:5000/tern/agent:1.1.0").unwrap();
    // sha256 of the manifest bytes above, computed independently (sha256sum).
    let bytes = std::fs::read(&manifest).unwrap();
    assert_eq!(t.length, bytes.len() as u64);
    assert_eq!(t.sha256, sha256_hex(&bytes));
    assert_eq!(t.name, "images/registry.example:5000/tern/agent:1.1.0");
    assert_eq!(t.version.as_deref(), Some("1.1.0"));
    let e = v
        .image("registry.example:5000/tern/agent:1.2.0")
        .unwrap_err();
    assert!(matches!(e, Error::ImageNotSigned { .. }), "{e}");
    assert!(e.to_string().contains("agent:1.2.0 is not signed"), "{e}");
    assert!(matches!(
        v.find("1.1.0", "linux", "amd64", ""),
        Err(Error::NotSigned { .. })
    ));
    assert!(!v.has_version("1.1.0"), "no host can install an image");
    assert!(v.has_version("1.0.0"));
    for bad in [
        "registry.example/tern/agent",
        "registry.example:5000/tern/agent",
        "agent:",
        "agent:1.1.0@sha256:00",
        "agent:1.1 .0",
    ] {
        let e = release::add_images(
            &fx.repo,
            &[release::NewImage {
                manifest: manifest.clone(),
                image: bad.into(),
                version: "1.1.0".into(),
            }],
            &fx.all_keys(),
            &Lifetimes::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("bad image reference"), "{bad}: {e}");
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The sha256 and length of raw metadata bytes, as a snapshot or timestamp names them.
fn meta_of_bytes(bytes: &[u8], version: NonZeroU64) -> Metafile {
    let sha = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    Metafile {
        hashes: Some(Hashes {
            sha256: sha.as_ref().to_vec().into(),
            _extra: HashMap::new(),
        }),
        length: Some(bytes.len() as u64),
        version,
        _extra: HashMap::new(),
    }
}

/// A compromised ternd names an old signed build (a downgrade): the release keys' signed
/// minimum for its line refuses it, names both versions, and an attacker holding the
/// online keys cannot serve the targets from before the minimum was signed.
#[test]
fn downgrade_a_version_below_its_lines_signed_minimum_is_refused() {
    let fx = fixture(1);
    fx.add("1.3.0");
    fx.add("1.5.0");
    fx.add("2.0.0");
    let v = fx.client().refresh().unwrap();
    assert!(v.minimums.is_empty());
    v.find("1.3.0", "linux", "amd64", "").unwrap();
    let before_minimum = fx.read("4.targets.json");

    let tv = release::set_minimum(
        &fx.repo,
        "1",
        Some("1.4.2"),
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    assert_eq!(tv, 5);
    let v = fx.client().refresh().unwrap();
    assert_eq!(v.minimums, vec![tern_trust::minimum("1", "1.4.2").unwrap()]);
    match v.find("1.3.0", "linux", "amd64", "") {
        Err(e @ Error::BelowMinimum { .. }) => assert_eq!(
            e.to_string(),
            "version 1.3.0 is below the signed minimum 1.4.2 of release line 1 (targets version 5): the release keys revoked it"
        ),
        other => panic!("expected BelowMinimum, got {other:?}"),
    }
    // Still signed (an old host may be on it), but no longer installable.
    assert!(v.has_version("1.3.0"));
    v.find("1.5.0", "linux", "amd64", "").unwrap();
    v.find("2.0.0", "linux", "amd64", "").unwrap();

    // An attacker with the snapshot and timestamp keys serves the targets of before the
    // minimum under a newer snapshot and timestamp: the targets version went back.
    let root = release::read_root(&fx.meta("1.root.json")).unwrap().signed;
    let mut snap = Snapshot::new("1.0.0".into(), NonZeroU64::new(50).unwrap(), in_days(7));
    snap.meta.insert(
        "targets.json".into(),
        meta_of_bytes(&before_minimum, NonZeroU64::new(4).unwrap()),
    );
    let snap = sign(snap, &root, std::slice::from_ref(&fx.keys.snapshot));
    let mut ts = Timestamp::new("1.0.0".into(), NonZeroU64::new(50).unwrap(), in_days(1));
    ts.meta.insert("snapshot.json".into(), meta_of(&snap));
    let ts = sign(ts, &root, std::slice::from_ref(&fx.keys.timestamp));
    fx.server
        .set("50.snapshot.json", Answer::Bytes(snap.buffer().clone()));
    fx.server
        .set("timestamp.json", Answer::Bytes(ts.buffer().clone()));
    let before = std::fs::read(&fx.state).unwrap();
    let msg = refused(fx.client().refresh());
    assert!(msg.to_lowercase().contains("targets"), "{msg}");
    assert_eq!(std::fs::read(&fx.state).unwrap(), before);
    fx.server.clear();

    // Cleared by the release keys: installable again.
    release::set_minimum(&fx.repo, "1", None, &fx.all_keys(), &Lifetimes::default()).unwrap();
    let v = fx.client().refresh().unwrap();
    assert!(v.minimums.is_empty());
    v.find("1.3.0", "linux", "amd64", "").unwrap();
}

/// The same minimum holds for container images (tern-kube-update pins the digest it
/// gets from `image`): an image of a revoked version is refused, one above it is not.
#[test]
fn an_image_below_its_lines_signed_minimum_is_refused() {
    let fx = fixture(1);
    let manifest = fx.tarball("manifest.json", br#"{"schemaVersion":2,"layers":[]}"#);
    let image = |v: &str| release::NewImage {
        manifest: manifest.clone(),
        image: format!("registry.example:5000/tern/agent:{v}"),
        version: v.into(),
    };
    release::add_images(
        &fx.repo,
        &[image("1.3.0"), image("1.5.0")],
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    let v = fx.client().refresh().unwrap();
    v.image("registry.example:5000/tern/agent:1.3.0").unwrap();
    release::set_minimum(
        &fx.repo,
        "1",
        Some("1.4.2"),
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    let v = fx.client().refresh().unwrap();
    let e = v
        .image("registry.example:5000/tern/agent:1.3.0")
        .unwrap_err();
    assert!(matches!(e, Error::BelowMinimum { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("version 1.3.0 is below the signed minimum 1.4.2 of release line 1"),
        "{e}"
    );
    let t = v.image("registry.example:5000/tern/agent:1.5.0").unwrap();
    assert_eq!(t.version.as_deref(), Some("1.5.0"));
}

/// The minimums are part of the signed targets: an attacker holding the online keys
/// who strips them (same targets version, a snapshot and timestamp naming the edited
/// file) breaks the targets signature.
#[test]
fn a_minimum_stripped_from_the_signed_targets_by_the_online_keys_is_refused() {
    let fx = fixture(1);
    fx.add("1.3.0");
    release::set_minimum(
        &fx.repo,
        "1",
        Some("1.4.0"),
        &fx.all_keys(),
        &Lifetimes::default(),
    )
    .unwrap();
    fx.client().refresh().unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&fx.read("3.targets.json")).unwrap();
    assert_eq!(doc["signed"]["tern_minimum_versions"]["1"], "1.4.0");
    doc["signed"]
        .as_object_mut()
        .unwrap()
        .remove("tern_minimum_versions");
    let stripped = serde_json::to_vec(&doc).unwrap();
    let root = release::read_root(&fx.meta("1.root.json")).unwrap().signed;
    let mut snap = Snapshot::new("1.0.0".into(), NonZeroU64::new(50).unwrap(), in_days(7));
    snap.meta.insert(
        "targets.json".into(),
        meta_of_bytes(&stripped, NonZeroU64::new(3).unwrap()),
    );
    let snap = sign(snap, &root, std::slice::from_ref(&fx.keys.snapshot));
    let mut ts = Timestamp::new("1.0.0".into(), NonZeroU64::new(50).unwrap(), in_days(1));
    ts.meta.insert("snapshot.json".into(), meta_of(&snap));
    let ts = sign(ts, &root, std::slice::from_ref(&fx.keys.timestamp));
    fx.server.set("3.targets.json", Answer::Bytes(stripped));
    fx.server
        .set("50.snapshot.json", Answer::Bytes(snap.buffer().clone()));
    fx.server
        .set("timestamp.json", Answer::Bytes(ts.buffer().clone()));
    let msg = refused(fx.client().refresh());
    assert!(
        msg.to_lowercase().contains("signature") || msg.contains("threshold"),
        "{msg}"
    );
}
