//! The controller's writes, in process, against a real ternd and the stand-in API
//! server (`fake_apiserver`: no real Kubernetes API server can run here): a StatefulSet
//! stuck behind a crash-looping pod of its old revision has that pod deleted; a
//! workload edited between the read and the write is not written (409), and the next
//! pass decides again; a follower writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use support::{Env, REPO, digest};
use tern_kube_rules::Decision;
use tern_kube_update::fake_apiserver::{FakeApiServer, Kind};
use tern_kube_update::{Controller, DigestFile, Ternd, Written};

mod support;

fn controller(server: &FakeApiServer, env: &Env) -> Controller {
    Controller {
        client: server.client(),
        namespaces: vec!["db".into()],
        fleet: Arc::new(Ternd::new(&env.ternd.url, Some(env.token.clone()), None)),
        digests: Arc::new(DigestFile {
            path: env.digests.clone(),
        }),
        policy: tern_kube_rules::Policy::default(),
        version: "0.1.0".into(),
    }
}

/// The Deployment `agent` (one replica) on 1.0.0, with these annotations.
fn deployment_on_1_0_0(annotations: serde_json::Value) -> serde_json::Value {
    named_deployment_on_1_0_0("agent", annotations)
}

/// The same, named `name` (and selecting pods labelled `app: name`).
fn named_deployment_on_1_0_0(name: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "agent", "image": format!("{REPO}:1.0.0")}]}}
        }
    })
}

fn stateful_set(image: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": "agent", "annotations": {"tern.dev/update": "true"}},
        "spec": {
            "serviceName": "agent",
            "replicas": 2,
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": image}]}
            }
        },
        "status": {
            "observedGeneration": 1, "replicas": 2, "readyReplicas": 1, "updatedReplicas": 1,
            "currentRevision": "agent-old", "updateRevision": "agent-new"
        }
    })
}

fn pod(name: &str, revision: &str, image: &str, ready: bool) -> serde_json::Value {
    let state = if ready {
        json!({"running": {}})
    } else {
        json!({"waiting": {"reason": "CrashLoopBackOff"}})
    };
    json!({
        "metadata": {"name": name, "labels": {"app": "agent", "controller-revision-hash": revision},
                     "creationTimestamp": "2026-11-23T08:00:00Z"},
        "spec": {"containers": [{"name": "agent", "image": image}]},
        "status": {
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                            "lastTransitionTime": "2026-11-23T08:01:00Z"}],
            "containerStatuses": [{"name": "agent", "image": image, "imageID": "", "ready": ready,
                                   "restartCount": if ready { 0 } else { 12 }, "state": state}]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stateful_set_pod_of_the_old_revision_is_deleted() {
    let env = tokio::task::spawn_blocking(Env::start).await.unwrap();
    let server = FakeApiServer::start().await;
    let current = format!("{REPO}:1.1.0@{}", digest());
    server.create(Kind::StatefulSet, "db", stateful_set(&current));
    // agent-0 runs the old revision and crash-loops: an ordered rollout waits for it
    // forever. agent-1 runs the update revision, Ready.
    server.create(
        Kind::Pod,
        "db",
        pod("agent-0", "agent-old", &format!("{REPO}:1.0.0"), false),
    );
    server.create(Kind::Pod, "db", pod("agent-1", "agent-new", &current, true));
    let c = controller(&server, &env);
    let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();

    // A follower decides alike and deletes nothing.
    let outcomes = c.pass(now, &|| false).await;
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::DeletePods(ref p)) if p[0].name == "agent-0"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[0].written, None);
    assert!(server.get(Kind::Pod, "db", "agent-0").is_some());

    let outcomes = c.pass(now, &|| true).await;
    assert_eq!(
        outcomes[0].written,
        Some(Written::DeletedPods(vec!["agent-0".into()])),
        "{outcomes:?}"
    );
    assert!(server.get(Kind::Pod, "db", "agent-0").is_none());
    assert!(
        server.get(Kind::Pod, "db", "agent-1").is_some(),
        "the update revision's pod stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_edited_meanwhile_is_not_written_and_decided_again() {
    let env = tokio::task::spawn_blocking(Env::start).await.unwrap();
    let server = FakeApiServer::start().await;
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true"})),
    );
    // Opted out in words: neither looked at nor heartbeated.
    let mut opted_out = deployment_on_1_0_0(json!({"tern.dev/update": "false"}));
    opted_out["metadata"]["name"] = json!("opted-out");
    server.create(Kind::Deployment, "db", opted_out);
    let now = jiff::Timestamp::now();
    server.settle(now);
    let c = controller(&server, &env);
    // Another writer wins the race for this replace.
    server.objects.lock().unwrap().conflict_next_replace = true;
    let outcomes = c.pass(now, &|| true).await;
    assert_eq!(
        outcomes.len(),
        1,
        "only the opted-in workload: {outcomes:?}"
    );
    let uid = server.get(Kind::Deployment, "db", "opted-out").unwrap()["metadata"]["uid"].clone();
    let ctl = env.ctl.clone();
    let inventory =
        tokio::task::spawn_blocking(move || ctl.run(&["inventory", "ls", "-o", "json"]).unwrap())
            .await
            .unwrap();
    assert!(
        !inventory.contains(uid.as_str().unwrap()),
        "never heartbeated: {inventory}"
    );
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::Update(_))),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[0].written, None);
    assert!(
        outcomes[0].write_error.as_deref().unwrap().contains("409"),
        "{outcomes:?}"
    );
    let image = |s: &FakeApiServer| {
        s.get(Kind::Deployment, "db", "agent").unwrap()["spec"]["template"]["spec"]["containers"][0]
            ["image"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(image(&server), format!("{REPO}:1.0.0"));
    // The next pass reads again and writes.
    let outcomes = c.pass(now, &|| true).await;
    assert!(
        matches!(outcomes[0].written, Some(Written::Workload { .. })),
        "{outcomes:?}"
    );
    assert_eq!(image(&server), format!("{REPO}:1.1.0@{}", digest()));
}

/// A workload annotated `tern.dev/channel` follows the channel (seed 001), not find:
/// outside its group's window a new version waits, a critical one goes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_following_a_channel_takes_a_critical_version_outside_its_window() {
    let env = tokio::task::spawn_blocking(Env::start).await.unwrap();
    let ctl = env.ctl.clone();
    let set = move |args: &'static [&'static str]| {
        let ctl = ctl.clone();
        async move {
            tokio::task::spawn_blocking(move || ctl.run(args).unwrap())
                .await
                .unwrap()
        }
    };
    set(&["channels", "set", "edge", "1.1.0"]).await;
    let server = FakeApiServer::start().await;
    let channel = format!("{}/v1/channels/edge", env.ternd.url);
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true", "tern.dev/channel": channel})),
    );
    // Sunday 03:00 UTC: outside every default window.
    let now: jiff::Timestamp = "2026-11-29T03:00:00Z".parse().unwrap();
    server.settle(now);
    let c = controller(&server, &env);
    let outcomes = c.pass(now, &|| true).await;
    assert!(
        matches!(
            outcomes[0].decision,
            Ok(Decision::Nothing {
                why: tern_kube_rules::Why::NotNow,
                ..
            })
        ),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[0].written, None);
    set(&["channels", "set", "edge", "1.1.0", "--critical"]).await;
    let outcomes = c.pass(now, &|| true).await;
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::Update(_))),
        "{outcomes:?}"
    );
    let d = server.get(Kind::Deployment, "db", "agent").unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(format!("{REPO}:1.1.0@{}", digest()))
    );

    // A channel annotation that is no URL is refused, and nothing is written.
    let mut bad = d.clone();
    bad["metadata"]["annotations"]["tern.dev/channel"] = json!("file:///etc/passwd");
    bad["metadata"]["name"] = json!("odd");
    bad["metadata"]["resourceVersion"] = serde_json::Value::Null;
    server.create(Kind::Deployment, "db", bad);
    let outcomes = c.pass(now, &|| true).await;
    let odd = outcomes
        .iter()
        .find(|o| o.workload.ends_with("/odd"))
        .unwrap();
    assert!(
        odd.decision
            .as_ref()
            .unwrap_err()
            .contains("tern.dev/channel"),
        "{odd:?}"
    );
}

/// A find ternd refuses is shown with ternd's own reason (its JSON error's message,
/// through tern-client), and nothing is written: here a ternd that serves only hosts
/// pinning the release root (`--require-trust`), which a workload does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_find_is_shown_with_ternds_reason() {
    let env = tokio::task::spawn_blocking(|| Env::start_with(&["--require-trust"]))
        .await
        .unwrap();
    let server = FakeApiServer::start().await;
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true"})),
    );
    let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
    server.settle(now);
    let outcomes = controller(&server, &env).pass(now, &|| true).await;
    let err = outcomes[0].decision.as_ref().unwrap_err();
    let find_url = format!("{}/v1/webapi/find", env.ternd.url);
    assert!(
        err.starts_with("find: ")
            && err.contains(&find_url)
            && err.contains("403")
            && err.contains("serves only hosts that pin the release root"),
        "{err}"
    );
    let hb = outcomes[0].heartbeat_error.as_deref().unwrap();
    assert!(
        hb.contains("403") && hb.contains("pin the release root"),
        "{hb}"
    );
    assert_eq!(outcomes[0].written, None);
}

/// A ternd with a certificate no public CA signed: refused, with the reason, until the
/// controller is given the CA (`--ca-cert`); then it heartbeats and updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ternd_behind_a_private_ca_is_trusted_only_with_its_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (tmp.path().join("tls.crt"), tmp.path().join("tls.key"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    let (c, k) = (cert_file.clone(), key_file.clone());
    let dir = tmp.path().join("ternd");
    let (ternd, token) = tokio::task::spawn_blocking(move || {
        let bins = tern_e2e::bins::Bins::locate().unwrap();
        let ternd = tern_e2e::ternd::Ternd::start_serving(
            &bins.ternd,
            &dir,
            "2026-11-23T09:00:00Z",
            &[
                "--tls-cert",
                c.to_str().unwrap(),
                "--tls-key",
                k.to_str().unwrap(),
            ],
            &[],
        )
        .unwrap();
        let ctl = tern_e2e::ternd::Ctl {
            bin: bins.ternctl,
            server: ternd.url.replace("127.0.0.1", "localhost"),
            token_file: ternd.token_file.clone(),
        };
        let run = |args: &[&str]| {
            let out = ctl.command(args).env("TERN_CA_CERT", &c).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let version = dir.with_extension("version.yaml");
        std::fs::write(
            &version,
            tern_core::fixtures::enabled_version("1.0.0", "1.1.0", "immediate"),
        )
        .unwrap();
        run(&["create", "--force", "-f", version.to_str().unwrap()]);
        run(&["dev", "reconcile"]);
        let token = run(&["tokens", "create", "--role", "agent", "--controller"]);
        (ternd, token)
    })
    .await
    .unwrap();
    let url = ternd.url.replace("127.0.0.1", "localhost");
    let server = FakeApiServer::start().await;
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true"})),
    );
    let now = jiff::Timestamp::now();
    server.settle(now);
    let digests = tmp.path().join("digests.json");
    std::fs::write(
        &digests,
        json!({format!("{REPO}:1.1.0"): digest()}).to_string(),
    )
    .unwrap();
    let with_roots = |roots| Controller {
        client: server.client(),
        namespaces: vec!["db".into()],
        fleet: Arc::new(Ternd::new(&url, Some(token.clone()), roots)),
        digests: Arc::new(DigestFile {
            path: digests.clone(),
        }),
        policy: tern_kube_rules::Policy::default(),
        version: "0.1.0".into(),
    };
    let outcomes = with_roots(None).pass(now, &|| true).await;
    let err = outcomes[0].decision.as_ref().unwrap_err();
    assert!(
        err.contains(&url) && err.to_lowercase().contains("certificate"),
        "{err}"
    );
    assert!(outcomes[0].heartbeat_error.is_some());
    assert_eq!(outcomes[0].written, None);

    let roots = tern_kube_update::roots_from_pem(&cert_file).unwrap();
    let outcomes = with_roots(Some(roots)).pass(now, &|| true).await;
    assert!(outcomes[0].heartbeat_error.is_none(), "{outcomes:?}");
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::Update(_))),
        "{outcomes:?}"
    );
    // A file that holds no certificate is refused by name.
    let err = tern_kube_update::roots_from_pem(&key_file).err().unwrap();
    assert!(err.contains("holds no certificate"), "{err}");
}

/// With a kubelet of real processes (the demo agent releases as images): the digest
/// the controller pins is one the registry's image does not have (the tag was pushed
/// again, or the digests source is wrong), so no pod ever runs it. It cannot be pulled,
/// and after `stuck_after` the update is rolled back to the previous image, whose
/// program runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_whose_digest_is_not_the_pinned_one_never_runs_and_is_rolled_back() {
    let env = tokio::task::spawn_blocking(Env::start).await.unwrap();
    let server = FakeApiServer::start().await;
    let programs = tokio::task::spawn_blocking(|| {
        ["1.0.0", "1.1.0"].map(|v| {
            let r = tern_e2e::release::Release::good(v);
            (
                format!("{REPO}:{v}"),
                tern_e2e::release::agent_program(&r).unwrap(),
            )
        })
    })
    .await
    .unwrap();
    let real = tern_e2e::release::sha256_digest(&programs[1].1).unwrap();
    assert_ne!(real, digest(), "the digests file pins another digest");
    server.run_images(programs);
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true"})),
    );
    let t0: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
    server.settle(t0);
    let running = |server: &FakeApiServer| {
        let pods = server.pods_of("db", "agent");
        assert_eq!(pods.len(), 1, "{pods:?}");
        server
            .running_versions("db", &pods[0])
            .get("agent")
            .cloned()
    };
    assert_eq!(running(&server).as_deref(), Some("1.0.0"));
    let c = controller(&server, &env);
    let outcomes = c.pass(t0, &|| true).await;
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::Update(_))),
        "{outcomes:?}"
    );
    server.settle(t0);
    let pod = server.pods_of("db", "agent").pop().unwrap();
    let status = &server.get(Kind::Pod, "db", &pod).unwrap()["status"]["containerStatuses"][0];
    assert_eq!(status["state"]["waiting"]["reason"], json!("ErrImagePull"));
    assert!(
        status["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains(&real),
        "{status}"
    );
    assert_eq!(running(&server), None, "nothing runs");

    // Within stuck_after a pull error may be the registry's hiccup: wait.
    let t1 = t0 + jiff::SignedDuration::from_mins(2);
    server.settle(t1);
    let outcomes = c.pass(t1, &|| true).await;
    assert!(
        matches!(outcomes[0].decision, Ok(Decision::Wait { .. })),
        "{outcomes:?}"
    );
    let t2 = t0 + jiff::SignedDuration::from_mins(6);
    server.settle(t2);
    let outcomes = c.pass(t2, &|| true).await;
    assert!(
        matches!(
            &outcomes[0].decision,
            Ok(Decision::Rollback(r)) if r.failure == tern_kube_rules::Failure::ImagePull
        ),
        "{outcomes:?}"
    );
    server.settle(t2);
    let d = server.get(Kind::Deployment, "db", "agent").unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(format!("{REPO}:1.0.0"))
    );
    assert_eq!(running(&server).as_deref(), Some("1.0.0"));
}

/// With `SignedDigests`, an image is pinned only at the digest the release keys signed
/// for it (TUF, `tern-release add-image`): the signed image updates and its program
/// runs; an image of a repository nobody signed, or signed metadata altered after
/// signing, is refused with the reason, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_digests_the_release_keys_signed_are_pinned() {
    let env = tokio::task::spawn_blocking(Env::start).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let programs = tokio::task::spawn_blocking(|| {
        ["1.0.0", "1.1.0"].map(|v| {
            let r = tern_e2e::release::Release::good(v);
            tern_e2e::release::agent_program(&r).unwrap()
        })
    })
    .await
    .unwrap();
    // The release owners sign the 1.1.0 image: its manifest is, in this stand-in
    // registry, the program itself (the kubelet checks the program's sha256).
    let (dir, manifest) = (tmp.path().to_path_buf(), programs[1].clone());
    let repo = tokio::task::spawn_blocking(move || signed_repository(&dir, &manifest))
        .await
        .unwrap();
    let metadata = repo.join("metadata");
    let signed = tern_kube_update::SignedDigests::pin(
        &tmp.path().join("state/trust.json"),
        &metadata.join("1.root.json"),
        metadata.to_str().unwrap(),
        None,
    )
    .err()
    .map(|e| e.to_string());
    assert!(
        signed.as_deref().is_some_and(|e| e.contains("trust.json")),
        "the state's directory must exist: {signed:?}"
    );
    std::fs::create_dir(tmp.path().join("state")).unwrap();
    let signed = tern_kube_update::SignedDigests::pin(
        &tmp.path().join("state/trust.json"),
        &metadata.join("1.root.json"),
        metadata.to_str().unwrap(),
        None,
    )
    .unwrap();

    let server = FakeApiServer::start().await;
    server.run_images([
        (format!("{REPO}:1.0.0"), programs[0].clone()),
        (format!("{REPO}:1.1.0"), programs[1].clone()),
    ]);
    server.create(
        Kind::Deployment,
        "db",
        deployment_on_1_0_0(json!({"tern.dev/update": "true"})),
    );
    // A workload of another repository: nobody signed its images.
    let mut other = named_deployment_on_1_0_0("other", json!({"tern.dev/update": "true"}));
    other["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.example/someone/else:1.0.0");
    server.create(Kind::Deployment, "db", other);
    let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
    server.settle(now);
    let mut c = controller(&server, &env);
    c.digests = Arc::new(signed);
    let outcomes = c.pass(now, &|| true).await;
    let of = |name: &str| {
        outcomes
            .iter()
            .find(|o| o.workload.ends_with(&format!("/{name}")))
            .unwrap()
    };
    assert!(
        matches!(of("agent").decision, Ok(Decision::Update(_))),
        "{outcomes:?}"
    );
    let pinned = tern_e2e::release::sha256_digest(&programs[1]).unwrap();
    let d = server.get(Kind::Deployment, "db", "agent").unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(format!("{REPO}:1.1.0@{pinned}"))
    );
    let err = of("other").decision.as_ref().unwrap_err();
    assert!(
        err.contains("registry.example/someone/else:1.1.0 is not signed"),
        "{err}"
    );
    assert_eq!(of("other").written, None);
    server.settle(now);
    let pod = server.pods_of("db", "agent").pop().unwrap();
    assert_eq!(
        server
            .running_versions("db", &pod)
            .get("agent")
            .map(String::as_str),
        Some("1.1.0")
    );

    // An attacker with write access to the metadata (not the keys) points the image
    // at another digest: the targets' signature no longer verifies; nothing is pinned.
    let targets = std::fs::read_dir(&metadata)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".targets.json"))
        .max()
        .unwrap();
    let text = std::fs::read_to_string(&targets).unwrap();
    let sha = pinned.trim_start_matches("sha256:");
    assert!(text.contains(sha));
    std::fs::write(&targets, text.replace(sha, &"e".repeat(64))).unwrap();
    server.create(
        Kind::Deployment,
        "db",
        named_deployment_on_1_0_0("again", json!({"tern.dev/update": "true"})),
    );
    let outcomes = c.pass(now, &|| true).await;
    let again = outcomes
        .iter()
        .find(|o| o.workload.ends_with("/again"))
        .unwrap();
    let err = again.decision.as_ref().unwrap_err();
    assert!(err.contains("refused"), "{err}");
    assert_eq!(again.written, None);
}

/// A TUF repository (one key for every role) signing `manifest` as `REPO:1.1.0`.
fn signed_repository(dir: &std::path::Path, manifest: &std::path::Path) -> std::path::PathBuf {
    use tern_trust::release::{self, InitSpec, Lifetimes, NewImage, RoleSpec};
    let key = dir.join("key.pk8");
    release::generate_key(&key).unwrap();
    let repo = dir.join("tuf");
    let one = || RoleSpec {
        keys: vec![key.clone()],
        threshold: 1,
    };
    release::init(
        &repo,
        &InitSpec {
            root: one(),
            targets: one(),
            snapshot: one(),
            timestamp: one(),
            lifetimes: Lifetimes::default(),
        },
    )
    .unwrap();
    release::add_images(
        &repo,
        &[NewImage {
            manifest: manifest.to_path_buf(),
            image: format!("{REPO}:1.1.0"),
            version: "1.1.0".into(),
        }],
        std::slice::from_ref(&key),
        &Lifetimes::default(),
    )
    .unwrap();
    repo
}
