//! The `tern-kube-update` binary as an operator runs it: a child process with a
//! kubeconfig, a token file and a digests file, against a real ternd (dev clock) and
//! the stand-in API server (`fake_apiserver`: no real Kubernetes API server can run
//! here). It takes the Lease, updates an opted-in Deployment when find says so
//! (pinned by digest), leaves one that did not opt in alone, and stops on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use serde_json::json;
use support::{Env, REPO, digest};
use tern_kube_update::fake_apiserver::{FakeApiServer, Kind};

mod support;

fn deployment(name: &str, opted_in: bool) -> serde_json::Value {
    let annotations = if opted_in {
        json!({"tern.dev/update": "true"})
    } else {
        json!({})
    };
    json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "agent", "image": format!("{REPO}:1.0.0")}]}
            }
        }
    })
}

use tern_testing::eventually;

#[test]
fn the_binary_updates_an_opted_in_deployment_and_stops_on_sigterm() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(FakeApiServer::start());
    server.create(Kind::Deployment, "edge", deployment("agent", true));
    server.create(Kind::Deployment, "edge", deployment("other", false));
    server.settle(jiff::Timestamp::now());

    let env = Env::start();
    let digests = env.digests.to_str().unwrap();
    let mut child = spawn(&env, &server, &["--digests", digests]);
    let (ctl, digest) = (&env.ctl, digest());
    let image = |name: &str| image(&server, name);
    eventually("the Lease taken", || {
        server
            .lease("tern-system", "tern-kube-update")
            .is_some_and(|l| l["spec"]["holderIdentity"] == "controller-0")
    });
    eventually("the opted-in Deployment updated", || {
        image("agent") == format!("{REPO}:1.1.0@{digest}")
    });
    assert_eq!(image("other"), format!("{REPO}:1.0.0"), "not opted in");
    // ternd counts it: its heartbeats carry the workload's uid.
    let uid = server.get(Kind::Deployment, "edge", "agent").unwrap()["metadata"]["uid"].clone();
    let inventory = ctl.run(&["inventory", "ls", "-o", "json"]).unwrap();
    assert!(inventory.contains(uid.as_str().unwrap()), "{inventory}");

    terminate(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM ends it cleanly: {status}");
}

/// The binary, against ternd and `server` (through a kubeconfig), with `extra` flags
/// for the digests.
fn spawn(env: &Env, server: &FakeApiServer, extra: &[&str]) -> std::process::Child {
    let kubeconfig = env.tmp.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            server.addr
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_tern-kube-update"))
        .args([
            "run",
            "--server",
            &env.ternd.url,
            "--period",
            "1s",
            "--lease-duration",
            "3s",
        ])
        .arg("--token-file")
        .arg(&env.token_file)
        .args(extra)
        .args(["--identity", "controller-0", "--namespace", "edge"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn image(server: &FakeApiServer, name: &str) -> String {
    server.get(Kind::Deployment, "edge", name).unwrap()["spec"]["template"]["spec"]["containers"][0]
        ["image"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The signed path as release owners and operators run it: `tern-release` signs the
/// 1.1.0 image's manifest, the metadata is served over HTTP, and the controller,
/// started with `--trust-root` and `--trust-url`, pins the digest `tern-release`
/// printed, keeping what it trusted in `--trust-state`.
#[test]
fn the_binary_pins_the_digest_tern_release_signed_served_over_http() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(FakeApiServer::start());
    server.create(Kind::Deployment, "edge", deployment("agent", true));
    server.settle(jiff::Timestamp::now());
    let env = Env::start();
    let d = env.tmp.path();
    let release = tern_e2e::bins::Bins::locate()
        .unwrap()
        .tern_release()
        .unwrap();
    let tern_release = |args: &[&str]| {
        let out = Command::new(&release).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "tern-release {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let key = d.join("release.pk8");
    let key = key.to_str().unwrap();
    tern_release(&["keygen", key]);
    let repo = d.join("artifacts/tuf");
    let repo = repo.to_str().unwrap();
    tern_release(&[
        "init",
        "--repo",
        repo,
        "--root-key",
        key,
        "--targets-key",
        key,
        "--snapshot-key",
        key,
        "--timestamp-key",
        key,
    ]);
    let manifest = d.join("agent-1.1.0.manifest.json");
    std::fs::write(
        &manifest,
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#,
    )
    .unwrap();
    let out = tern_release(&[
        "add-image",
        "--repo",
        repo,
        "--image",
        &format!("{REPO}:1.1.0"),
        "--manifest-file",
        manifest.to_str().unwrap(),
        "--version",
        "1.1.0",
        "--key",
        key,
    ]);
    let signed = out
        .split_once("digest ")
        .and_then(|(_, rest)| rest.split(')').next())
        .unwrap()
        .to_string();
    assert!(signed.starts_with("sha256:") && signed.len() == 71, "{out}");
    let gateway = tern_e2e::gateway::Gateway::start(&d.join("artifacts"), env.ternd.addr).unwrap();
    let state = d.join("state/trust.json");
    let root = format!("{repo}/metadata/1.root.json");
    let url = format!("{}/artifacts/tuf/metadata/", gateway.url);
    let mut child = spawn(
        &env,
        &server,
        &[
            "--trust-root",
            &root,
            "--trust-url",
            &url,
            "--trust-state",
            state.to_str().unwrap(),
        ],
    );
    eventually("the Deployment pinned at the signed digest", || {
        image(&server, "agent") == format!("{REPO}:1.1.0@{signed}")
    });
    assert!(state.is_file(), "what was trusted is kept");
    terminate(&child);
    assert!(child.wait().unwrap().success());
}

fn terminate(child: &std::process::Child) {
    // SIGTERM, as Kubernetes stops a pod.
    let pid = child.id();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
}

/// Where image digests come from is a choice the operator must make, once; a root that
/// cannot be pinned stops the controller at start, naming the file.
#[test]
fn the_digest_source_is_required_once_and_a_bad_trust_root_stops_it_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join("token");
    std::fs::write(&token, "t0ken").unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tern-kube-update"))
            .args(["run", "--server", "http://127.0.0.1:9", "--token-file"])
            .arg(&token)
            .args(extra)
            .env("KUBECONFIG", tmp.path().join("no-kubeconfig"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[]);
    assert!(
        err.contains("--digests") && err.contains("--trust-root"),
        "{err}"
    );
    let err = run(&[
        "--digests",
        "d.json",
        "--trust-root",
        "r.json",
        "--trust-url",
        "u",
    ]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = run(&["--trust-root", "r.json"]);
    assert!(err.contains("--trust-url"), "{err}");
    let root = tmp.path().join("root.json");
    std::fs::write(&root, "{\"not\": \"a root\"}").unwrap();
    let state = tmp.path().join("state/trust.json");
    let err = run(&[
        "--trust-root",
        root.to_str().unwrap(),
        "--trust-url",
        tmp.path().to_str().unwrap(),
        "--trust-state",
        state.to_str().unwrap(),
    ]);
    assert!(
        err.contains("pinning the TUF root") && err.contains("root.json"),
        "{err}"
    );
}
