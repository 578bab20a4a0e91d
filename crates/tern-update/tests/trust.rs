//! A host with a pinned release root (TUF) installs only what the release keys signed,
//! whatever ternd (find) names and whatever the artifact server sends. The repository is
//! built here with tern-release's functions and served beside the artifacts, as in
//! production (`<base-url>/tuf/metadata/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use support::{Agent, Host, Server, release_files, tarball};
use tern_trust::release::{self, InitSpec, Lifetimes, NewTarget, RoleSpec};

struct Release {
    _keys: tempfile::TempDir,
    repo: PathBuf,
    sign: Vec<PathBuf>,
}

/// A repository inside the server's artifact dir, one key per role.
fn release_repo(server: &Server) -> Release {
    let keys = tempfile::tempdir().unwrap();
    let k = |n: &str| {
        let p = keys.path().join(format!("{n}.pk8"));
        release::generate_key(&p).unwrap();
        p
    };
    let (root, targets, snapshot, timestamp) =
        (k("root"), k("targets"), k("snapshot"), k("timestamp"));
    let one = |p: &PathBuf| RoleSpec {
        keys: vec![p.clone()],
        threshold: 1,
    };
    let repo = server.artifacts.join("tuf");
    release::init(
        &repo,
        &InitSpec {
            root: one(&root),
            targets: one(&targets),
            snapshot: one(&snapshot),
            timestamp: one(&timestamp),
            lifetimes: Lifetimes::default(),
        },
    )
    .unwrap();
    Release {
        _keys: keys,
        repo,
        sign: vec![targets, snapshot, timestamp],
    }
}

impl Release {
    fn root(&self) -> PathBuf {
        self.repo.join("metadata/1.root.json")
    }
    /// Signs the artifact the server publishes for `version`.
    fn sign(&self, server: &Server, version: &str) {
        let file = server.artifacts.join(Server::artifact_name(version));
        release::add_targets(
            &self.repo,
            &[NewTarget {
                file,
                version: version.into(),
                os: "linux".into(),
                arch: tern_update::test_support::go_arch(std::env::consts::ARCH).into(),
                edition: None,
            }],
            &self.sign,
            &Lifetimes::default(),
        )
        .unwrap();
    }
}

fn publish(server: &Server, version: &str) {
    server.publish(version, &tarball(&release_files(version, Agent::Good)));
}

/// Rewrites an artifact and its `.sha256` to match: what whoever controls the artifact
/// server can do.
fn tamper(server: &Server, version: &str, bytes: &[u8]) {
    server.publish(version, bytes);
}

fn enabled(server: &Server, rel: &Release) -> Host {
    let host = Host::new();
    let svc = host.service_config("");
    let root = rel.root().to_string_lossy().into_owned();
    let out = host.enable(server, &svc, &["--trust-root", &root]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    host
}

fn assert_untouched(host: &Host, before: &[u8]) {
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before,
        "update.yaml unchanged"
    );
    assert_eq!(host.versions(), vec!["1.0.0"], "nothing left behind");
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
}

#[test]
fn a_pinned_host_installs_signed_versions_and_status_says_verified() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "2.0.0");
    rel.sign(&server, "1.0.0");
    rel.sign(&server, "2.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    assert!(host.ns().join("trust.json").is_file());
    let status = host.ok(&["status"]);
    assert!(
        status.contains("verified: installs only what the release keys signed (root v1"),
        "{status}"
    );
    server.set_target("2.0.0", true);
    host.ok(&["update", "--now"]);
    assert!(host.wait_running("2.0.0"));
    // The metadata was fetched from beside the artifacts.
    let requests = server.state.lock().unwrap().requests.clone();
    assert!(
        requests
            .iter()
            .any(|r| r == "GET /artifacts/tuf/metadata/timestamp.json"),
        "{requests:?}"
    );
}

#[test]
fn a_host_without_a_pinned_root_works_as_before_and_status_says_unverified() {
    let server = Server::start();
    publish(&server, "1.0.0");
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert!(host.wait_running("1.0.0"));
    let status = host.ok(&["status"]);
    assert!(
        status.contains("unverified: no release root is pinned"),
        "{status}"
    );
    assert!(!host.ns().join("trust.json").exists());
}

#[test]
fn ternd_naming_a_version_the_release_keys_did_not_sign_changes_nothing() {
    // What a compromised ternd can do: name any version; the artifact and its .sha256
    // are on the server too. Without a signature the host stays where it is.
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "6.6.6");
    rel.sign(&server, "1.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    server.set_target("6.6.6", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("version 6.6.6") && err.contains("is not signed by the release keys"),
        "{err}"
    );
    assert_untouched(&host, &before);
    // No artifact was even fetched.
    let requests = server.state.lock().unwrap().requests.clone();
    assert!(
        !requests.iter().any(|r| r.contains("6.6.6")),
        "{requests:?}"
    );
}

#[test]
fn malicious_mirror_an_artifact_other_than_the_signed_one_is_refused() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "2.0.0");
    rel.sign(&server, "1.0.0");
    rel.sign(&server, "2.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    // Same length, other bytes (a .sha256 to match): the signed sha256 refuses it.
    let mut evil = tarball(&release_files("2.0.0", Agent::Good));
    let n = evil.len();
    evil[n - 1] ^= 0xff;
    tamper(&server, "2.0.0", &evil);
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("does not match the signed release metadata: sha256"),
        "{err}"
    );
    assert_untouched(&host, &before);
}

#[test]
fn endless_data_an_artifact_longer_than_signed_is_cut_off() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "2.0.0");
    rel.sign(&server, "1.0.0");
    rel.sign(&server, "2.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    let mut long = tarball(&release_files("2.0.0", Agent::Good));
    let declared = long.len();
    long.extend(std::iter::repeat_n(0u8, 1 << 20));
    tamper(&server, "2.0.0", &long);
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains(&format!(
            "more than the {declared} bytes the signed release metadata declares"
        )),
        "{err}"
    );
    assert_untouched(&host, &before);
}

#[test]
fn rollback_protection_survives_restarts_an_older_repository_is_refused() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "2.0.0");
    rel.sign(&server, "1.0.0");
    let meta = rel.repo.join("metadata");
    let old_timestamp = std::fs::read(meta.join("timestamp.json")).unwrap();
    rel.sign(&server, "2.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    // Each tern-update run is a new process: what it trusts is in trust.json. The
    // server now serves the older timestamp (valid signature, not expired).
    std::fs::write(meta.join("timestamp.json"), old_timestamp).unwrap();
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    let trust_before = std::fs::read(host.ns().join("trust.json")).unwrap();
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("the signed release metadata at") && err.contains("was refused"),
        "{err}"
    );
    assert_untouched(&host, &before);
    assert_eq!(
        std::fs::read(host.ns().join("trust.json")).unwrap(),
        trust_before
    );
}

#[test]
fn enabling_with_a_root_that_is_not_one_is_refused_and_nothing_is_saved() {
    let server = Server::start();
    publish(&server, "1.0.0");
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    let elsewhere = tempfile::tempdir().unwrap();
    let bogus = elsewhere.path().join("root.json");
    std::fs::write(&bogus, b"{\"signed\": {}}").unwrap();
    let out = host.enable(&server, &svc, &["--trust-root", bogus.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a TUF root"), "{err}");
    assert!(!host.ns().join("update.yaml").exists());
    assert!(!Path::new(&host.ns().join("trust.json")).exists());
}

/// A SIGKILL after the metadata refresh (trust.json replaced) or after the download, on a
/// pinned host: the rerun installs the signed version, and trust.json stays usable.
#[cfg(feature = "test-hooks")]
#[test]
fn a_pinned_host_killed_after_the_refresh_or_the_download_recovers() {
    for point in ["trust_refreshed", "downloaded"] {
        let server = Server::start();
        let rel = release_repo(&server);
        publish(&server, "1.0.0");
        publish(&server, "2.0.0");
        rel.sign(&server, "1.0.0");
        rel.sign(&server, "2.0.0");
        server.set_target("1.0.0", true);
        let host = enabled(&server, &rel);
        assert!(host.wait_running("1.0.0"));
        server.set_target("2.0.0", true);
        let out = host
            .cmd(&["update", "--now"])
            .env("TERN_UPDATE_KILL_AT", point)
            .output()
            .unwrap();
        assert!(
            out.status.code().is_none(),
            "{point}: not killed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(host.linked_version().as_deref(), Some("1.0.0"), "{point}");
        tern_trust::pinned_root_info(&host.ns().join("trust.json")).unwrap();
        host.ok(&["update", "--now"]);
        assert!(host.wait_running("2.0.0"), "{point}");
        assert!(
            host.ok(&["status"]).contains("verified: installs only"),
            "{point}"
        );
    }
}

fn native(
    id: &str,
    version: &str,
    bytes: &[u8],
) -> tern_core::directive::instruct::InstallInstruction {
    use sha2::{Digest, Sha256};
    use tern_core::directive::resource::{InstallerSpec, InstallerType, Target};
    tern_core::directive::instruct::InstallInstruction {
        attempt_id: id.into(),
        installer_name: "tern-update".into(),
        installer: InstallerSpec {
            installer_type: InstallerType::TernUpdate,
            enabled: true,
            local_script: None,
            package: None,
        },
        target: Target {
            version: version.into(),
            arch: None,
            fips: None,
            size: Some(bytes.len() as u64),
            sha256: Some(support::hex(&Sha256::digest(bytes))),
        },
        dry_run: false,
        directive: String::new(),
    }
}

fn last_result(server: &Server) -> tern_core::directive::state::AttemptResult {
    server
        .install_results()
        .last()
        .cloned()
        .flatten()
        .expect("the last heartbeat carries an install_result")
}

/// Version directives come from ternd too: on a pinned host they install only what is
/// signed, with the signed bytes, and never a script.
#[test]
fn directives_on_a_pinned_host_install_only_signed_artifacts() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    publish(&server, "2.0.0");
    publish(&server, "6.6.6");
    rel.sign(&server, "1.0.0");
    rel.sign(&server, "2.0.0");
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    let read = |v: &str| std::fs::read(server.artifacts.join(Server::artifact_name(v))).unwrap();

    // An unsigned version, with its true size and sha256.
    server.queue_install(native("a-unsigned", "6.6.6", &read("6.6.6")));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(
        !r.success && r.error.contains("is not signed by the release keys"),
        "{r:?}"
    );

    // A signed version, but ternd names other bytes (and the server serves them).
    let mut evil = read("2.0.0");
    let n = evil.len();
    evil[n - 1] ^= 0xff;
    tamper(&server, "2.0.0", &evil);
    server.queue_install(native("a-evil", "2.0.0", &evil));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(
        !r.success
            && r.error
                .contains("the install instruction does not match the signed release metadata"),
        "{r:?}"
    );
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));

    // The signed bytes again: installed.
    publish(&server, "2.0.0");
    server.queue_install(native("a-good", "2.0.0", &read("2.0.0")));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(r.success, "{r:?}");
    assert!(host.wait_running("2.0.0"));

    // And a pinned host cannot opt in to ternd's scripts.
    let svc = host.service_config("");
    let out = host.enable(&server, &svc, &["--installer", "local-script"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot be used on a host with a pinned release root")
    );
}

fn assert_ok(out: &std::process::Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The metadata URL a host uses, as `status` prints it.
fn metadata_url(host: &Host) -> String {
    let status = host.ok(&["status"]);
    let line = status
        .lines()
        .find(|l| l.contains("metadata "))
        .unwrap_or_else(|| panic!("no metadata URL in status: {status}"));
    let url = line.split("metadata ").nth(1).unwrap();
    url.trim_end_matches(['\'', '"', ')']).to_string()
}

#[test]
fn a_custom_metadata_url_survives_re_enabling_and_a_default_one_follows_the_base_url() {
    let server = Server::start();
    let rel = release_repo(&server);
    publish(&server, "1.0.0");
    rel.sign(&server, "1.0.0");
    server.set_target("1.0.0", true);
    let root = rel.root().to_string_lossy().into_owned();
    // The same server under another name stands for a separate metadata mirror.
    let mirror = format!(
        "{}/tuf/metadata/",
        server.base_url().replace("127.0.0.1", "localhost")
    );
    let host = Host::new();
    let svc = host.service_config("");
    let out = host.enable(
        &server,
        &svc,
        &["--trust-root", &root, "--trust-url", &mirror],
    );
    assert_ok(&out);
    assert_eq!(metadata_url(&host), mirror);
    // Pinning the root again, or enabling with no trust flag, keeps the custom URL.
    let out = host.enable(&server, &svc, &["--trust-root", &root]);
    assert_ok(&out);
    assert_eq!(metadata_url(&host), mirror);
    let out = host.enable(&server, &svc, &[]);
    assert_ok(&out);
    assert_eq!(metadata_url(&host), mirror);

    // A host on the default URL: a new --base-url moves the metadata with the artifacts.
    let host = enabled(&server, &rel);
    assert_eq!(
        metadata_url(&host),
        format!("{}/tuf/metadata/", server.base_url())
    );
    let moved = server.base_url().replace("127.0.0.1", "localhost");
    let out = host.run(&[
        "enable",
        "--server",
        server.url.as_str(),
        "--base-url",
        &moved,
        "--service-config",
        &svc.to_string_lossy(),
    ]);
    assert_ok(&out);
    assert_eq!(metadata_url(&host), format!("{moved}/tuf/metadata/"));

    // Unpinning is uninstall, then enable without a root.
    host.ok(&["uninstall", "--force"]);
    assert!(!host.ns().join("trust.json").exists());
    let out = host.enable(&server, &svc, &[]);
    assert_ok(&out);
    let status = host.ok(&["status"]);
    assert!(
        status.contains("unverified: no release root is pinned"),
        "{status}"
    );
}

/// A compromised ternd downgrading a pinned host to an old build the release keys still
/// sign but revoked with a minimum for its line (`tern-release minimum`): refused with
/// both versions named, by find and by a directive, and nothing is fetched or installed.
#[test]
fn ternd_naming_a_version_below_its_lines_signed_minimum_installs_nothing() {
    let server = Server::start();
    let rel = release_repo(&server);
    for v in ["1.0.0", "1.3.0", "1.5.0"] {
        publish(&server, v);
        rel.sign(&server, v);
    }
    server.set_target("1.0.0", true);
    let host = enabled(&server, &rel);
    assert!(host.wait_running("1.0.0"));
    server.set_target("1.5.0", true);
    host.ok(&["update", "--now"]);
    assert!(host.wait_running("1.5.0"));
    release::set_minimum(
        &rel.repo,
        "1",
        Some("1.4.2"),
        &rel.sign,
        &Lifetimes::default(),
    )
    .unwrap();
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    let versions = host.versions();
    assert!(!versions.contains(&"1.3.0".to_string()), "{versions:?}");
    server.state.lock().unwrap().requests.clear();

    server.set_target("1.3.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("version 1.3.0 is below the signed minimum 1.4.2 of release line 1")
            && err.contains("nothing was installed"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before,
        "update.yaml unchanged"
    );
    // The same through a version directive (find names the current version).
    server.set_target("1.5.0", true);
    let read = |v: &str| std::fs::read(server.artifacts.join(Server::artifact_name(v))).unwrap();
    server.queue_install(native("a-downgrade", "1.3.0", &read("1.3.0")));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(
        !r.success
            && r.error
                .contains("below the signed minimum 1.4.2 of release line 1"),
        "{r:?}"
    );

    assert_eq!(host.versions(), versions, "nothing unpacked");
    assert_eq!(host.linked_version().as_deref(), Some("1.5.0"));
    assert!(host.wait_running("1.5.0"));
    let requests = server.state.lock().unwrap().requests.clone();
    assert!(
        !requests.iter().any(|r| r.contains("1.3.0")),
        "the revoked artifact was not even fetched: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.ends_with("/tuf/metadata/timestamp.json")),
        "{requests:?}"
    );
}
