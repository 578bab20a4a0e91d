#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ternd start --artifact-url-template`: `new-rollout` looks for the target's tarball
//! and `.sha256` where the hosts will, for every platform the fleet's hosts run, and
//! warns naming what is missing (a real ternd and a real HTTP file server on loopback).

mod common;

use common::{T0, Ternd, ternd_bin, three_groups, version_yaml};
use serde_json::{Value, json};
use tern_e2e::gateway::Gateway;

fn publish(dir: &std::path::Path, version: &str, arch: &str, with_checksum: bool) {
    let name = format!("tern-agent-v{version}-linux-{arch}-bin.tar.gz");
    std::fs::write(dir.join(&name), b"not really a tarball").unwrap();
    if with_checksum {
        std::fs::write(
            dir.join(format!("{name}.sha256")),
            format!("{}  {name}\n", "a".repeat(64)),
        )
        .unwrap();
    }
}

fn new_rollout(t: &Ternd, version: &str) -> Vec<String> {
    let v: Value = t.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(&json!({ "version": version }).to_string()),
    );
    v.get("warnings")
        .and_then(Value::as_array)
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn new_rollout_warns_when_the_hosts_would_find_no_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    std::fs::create_dir_all(&art).unwrap();
    publish(&art, "1.1.0", "amd64", true);
    publish(&art, "1.1.0", "arm64", true);
    publish(&art, "1.2.0", "amd64", true);
    publish(&art, "1.2.0", "arm64", false);
    // Artifacts only: nothing goes upstream in this test.
    let gw = Gateway::start(&art, "127.0.0.1:9".parse().unwrap()).unwrap();
    let template = format!(
        "{}/artifacts/tern-agent-v{{{{.Version}}}}-{{{{.OS}}}}-{{{{.Arch}}}}-bin.tar.gz",
        gw.url
    );
    let t = Ternd::start(
        &tmp.path().join("d"),
        &["--dev-clock", T0, "--artifact-url-template", &template],
    );
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.0.0", "regular"));

    // No host has reported a platform yet: linux/amd64 is looked at.
    assert_eq!(new_rollout(&t, "1.1.0"), Vec::<String>::new());
    let w = new_rollout(&t, "1.3.0");
    assert_eq!(w.len(), 2, "the tarball and its checksum: {w:?}");
    assert!(
        w.iter().all(|w| w.starts_with("artifact missing: ")
            && w.contains("linux/amd64")
            && w.contains("answered 404")
            && w.contains("artifact_missing")),
        "{w:?}"
    );

    // An arm64 host joins: its platform is looked at too.
    let agent = t.new_token("agent");
    t.heartbeat_with(
        &agent,
        "h1",
        "dev",
        "1.0.0",
        json!({"arch": "arm64", "os": "linux"}),
    );
    t.heartbeat_with(
        &agent,
        "h2",
        "dev",
        "1.0.0",
        json!({"arch": "amd64", "os": "linux"}),
    );
    let w = new_rollout(&t, "1.2.0");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("tern-agent-v1.2.0-linux-arm64-bin.tar.gz.sha256")
            && w[0].contains("(linux/arm64)"),
        "{w:?}"
    );
    // The rollout is written all the same (the operator may publish next).
    let version = t.op("GET", "/v1/resources/version", None);
    assert_eq!(
        version["spec"]["agents"]["target_version"], "1.2.0",
        "{version}"
    );
    assert_eq!(new_rollout(&t, "1.1.0"), Vec::<String>::new());
}

#[test]
fn a_template_ternd_cannot_use_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    for (template, says) in [
        (
            "{{.BaseURL}}/tern-agent-v{{.Version}}.tgz",
            "give the whole URL",
        ),
        ("https://r.example/{{.Versoin}}.tgz", "unknown variable"),
    ] {
        let out = std::process::Command::new(ternd_bin())
            .args(["start", "--insecure-http", "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(tmp.path().join("d"))
            .args(["--artifact-url-template", template])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("--artifact-url-template") && stderr.contains(says),
            "{stderr}"
        );
    }
}

/// A CA of its own and a server certificate for `localhost` it signs, in `dir`: (the
/// CA's file, the certificate's, its key's).
fn private_ca(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Artifacts test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let files = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&files.0, ca.pem()).unwrap();
    std::fs::write(&files.1, leaf.pem()).unwrap();
    std::fs::write(&files.2, leaf_key.serialize_pem()).unwrap();
    (files.0, files.1, files.2)
}

/// Artifacts served over HTTPS under a private CA (here by a second ternd's download
/// route, a real TLS server): without the CA ternd cannot check them and says so,
/// never that they are missing; given the CA (`--artifact-ca-cert`, what the hosts get
/// as `--ca-cert`), it checks them, and what is really missing is missing.
#[test]
fn artifacts_under_a_private_ca_are_checked_with_it_and_never_called_missing_without() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, cert, key) = private_ca(tmp.path());
    let downloads = tmp.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    std::fs::write(
        downloads.join("tern-update-linux-amd64"),
        b"an agent release",
    )
    .unwrap();
    let artifacts = Ternd::spawn(
        &tmp.path().join("artifacts"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--downloads-dir",
            downloads.to_str().unwrap(),
        ],
    );
    let port = artifacts.url.rsplit(':').next().unwrap().to_string();
    let template =
        format!("https://localhost:{port}/downloads/tern-update/{{{{.OS}}}}-{{{{.Arch}}}}");
    let ternd = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "--dev-clock",
            T0,
            "--artifact-url-template",
            template.as_str(),
        ];
        args.extend_from_slice(extra);
        let t = Ternd::start(&tmp.path().join(name), &args);
        t.put_resource("config", &three_groups());
        t.put_resource("version", &version_yaml("1.0.0", "1.0.0", "regular"));
        t
    };

    let without = ternd("without-ca", &[]);
    let w = new_rollout(&without, "1.1.0");
    assert_eq!(w.len(), 2, "{w:?}");
    for w in &w {
        assert!(
            w.starts_with("artifact not checked: ")
                && w.contains("could not check")
                && w.contains("UnknownIssuer")
                && w.contains("--artifact-ca-cert")
                && !w.contains("missing"),
            "{w}"
        );
    }
    let log = std::fs::read_to_string(tmp.path().join("without-ca.log")).unwrap();
    assert!(
        log.contains("artifact not checked") && !log.contains("artifact missing"),
        "{log}"
    );

    let with = ternd("with-ca", &["--artifact-ca-cert", ca.to_str().unwrap()]);
    assert_eq!(new_rollout(&with, "1.1.0"), Vec::<String>::new());
    // An arm64 host: its tarball is not there, and that is missing.
    let agent = with.new_token("agent");
    with.heartbeat_with(
        &agent,
        "h1",
        "dev",
        "1.0.0",
        json!({"arch": "arm64", "os": "linux"}),
    );
    let w = new_rollout(&with, "1.2.0");
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w.iter().all(|w| w.starts_with("artifact missing: ")
            && w.contains("(linux/arm64)")
            && w.contains("answered 404")),
        "{w:?}"
    );

    // A CA file that holds no certificate is refused at start, by name.
    let junk = tmp.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let out = std::process::Command::new(ternd_bin())
        .args(["start", "--insecure-http", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(tmp.path().join("junk"))
        .args(["--artifact-url-template", &template, "--artifact-ca-cert"])
        .arg(&junk)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("--artifact-ca-cert")
            && stderr.contains("junk.pem"),
        "{stderr}"
    );
}
