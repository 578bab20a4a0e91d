//! docs/lockstep.md's "On etcd, step by step", run as written: the block's lines, read
//! from the document itself, against a real three-member etcd. The operator's lines run
//! one after the other in one environment (their `export`s kept); each worker and the
//! updater runs in an environment of its own, as on its own server, and goes on in the
//! background; the last line, `status`, is asked until the update completed.
//!
//! Stand-ins, and why: the paths the document names (`/root`, `/etc/tern-lockstep`, each
//! server's `/var/lib/tern-lockstep`) are a temporary directory's, the etcd endpoints
//! are the test cluster's, and the release index and its tarball are served over plain
//! http on loopback (the test's server has no TLS), so the worker and updater lines get
//! `--insecure-http`.
#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{build_release_with, wait_for};

const DOCS: &str = include_str!("../../../docs/lockstep.md");
const ENDPOINTS: &str = "etcd:http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379";
const INDEX: &str = "https://releases.example/index.json";

/// The lines of the section's `sh` block, comments and blank lines left out.
fn story() -> Vec<&'static str> {
    let section = &DOCS[DOCS
        .find("## On etcd, step by step")
        .expect("docs/lockstep.md has its etcd story")..];
    let open = section.find("```sh\n").expect("the story's sh block") + "```sh\n".len();
    let close = open + section[open..].find("```").expect("the block ends");
    section[open..close]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// A server's process (a worker or the updater), killed when the test ends.
struct Service {
    child: Child,
    log: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tern-lockstep"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `sh -c LINE` with only PATH (tern-lockstep first on it) and `env`.
fn shell(line: &str, env: &BTreeMap<String, String>) -> Command {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .env_clear()
        .env("PATH", path)
        .env("TERN_LOCKSTEP_LOG", "info")
        .envs(env)
        .stdin(Stdio::null());
    cmd
}

#[test]
fn the_docs_etcd_story_runs_as_written() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(tern_testing::etcd::EtcdCluster::start(3));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for d in ["root", "etc/tern-lockstep", "releases"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }

    // The release the updater finds: one component stopped everywhere, then started.
    let releases = dir.join("releases");
    build_release_with(
        &releases,
        "1.0.0",
        "components:\n  - name: app\n    kind: stop-everywhere\n    stop: [\"true\"]\n    start: [\"true\"]\n",
    );
    let sums = std::fs::read_to_string(releases.join("app-1.0.0.tar.gz.sha256")).unwrap();
    let server = tern_testing::http::HttpServer::serve_dir(&releases);
    let index = serde_json::json!({"releases": [{
        "tag": "release-1.0.0", "prerelease": false,
        "url": format!("{}/app-1.0.0.tar.gz", server.url()),
        "sha256": sums.split_whitespace().next().unwrap(),
    }]});
    std::fs::write(releases.join("index.json"), index.to_string()).unwrap();

    let lines = story();
    let text = lines.join("\n");
    for placeholder in [
        ENDPOINTS,
        INDEX,
        "/root/etcd-root",
        "/etc/tern-lockstep/",
        "/var/lib/tern-lockstep",
    ] {
        assert!(
            text.contains(placeholder),
            "the story no longer names {placeholder}:\n{text}"
        );
    }
    let endpoints = format!("etcd:{}", cluster.endpoints().join(","));
    let substituted = |line: &str| {
        let mut line = line
            .replace(ENDPOINTS, &endpoints)
            .replace(INDEX, &format!("{}/index.json", server.url()))
            .replace(
                "/root/etcd-root",
                &dir.join("root/etcd-root").display().to_string(),
            )
            .replace(
                "/etc/tern-lockstep/",
                &format!("{}/", dir.join("etc/tern-lockstep").display()),
            );
        if let Some(id) = line
            .split_once(" worker --id ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
        {
            let root = dir.join(format!("server-{id}"));
            line = line.replace("/var/lib/tern-lockstep", &root.display().to_string());
        }
        line
    };

    let mut operator: BTreeMap<String, String> = BTreeMap::new();
    let mut services = Vec::new();
    let mut status = None;
    for line in &lines {
        let line = substituted(line);
        if let Some(vars) = line.strip_prefix("export ") {
            for pair in vars.split_whitespace() {
                let (k, v) = pair.split_once('=').unwrap();
                operator.insert(k.to_string(), v.to_string());
            }
        } else if line.contains(" worker ") || line.contains(" updater ") {
            // A server's own shell: none of the operator's variables.
            let log = dir.join(format!("service-{}.log", services.len()));
            let out = std::fs::File::create(&log).unwrap();
            let child = shell(&format!("exec {line} --insecure-http"), &BTreeMap::new())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap();
            services.push(Service { child, log });
        } else if line == "tern-lockstep status" {
            status = Some(line);
        } else {
            let out = shell(&line, &operator).output().unwrap();
            assert!(
                out.status.success(),
                "`{line}` failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(services.len(), 3, "two workers and an updater: {lines:#?}");
    let status = status.expect("the story ends with `tern-lockstep status`");

    // Authentication is on: etcd refuses a client without credentials.
    let out = shell(
        &status,
        &BTreeMap::from([("TERN_LOCKSTEP_STORE".to_string(), endpoints.clone())]),
    )
    .output()
    .unwrap();
    assert!(!out.status.success(), "etcd answered without credentials");
    // Each server has its own etcd user, named in its credentials.
    for id in [1, 2] {
        let creds =
            std::fs::read_to_string(dir.join(format!("etc/tern-lockstep/server-{id}.json")))
                .unwrap();
        assert!(creds.contains(&format!("lockstep-server-{id}")), "{creds}");
    }

    // The operator's `status`, until the update completed on both servers.
    let mut last = String::new();
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(Duration::from_secs(120), || {
            let out = shell(&status, &operator).output().unwrap();
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            last.contains("completed: 1.0.0 at ") && last.contains(" by servers 1, 2\n")
        })
    }));
    if done.is_err() {
        let logs: Vec<String> = services
            .iter()
            .map(|s| std::fs::read_to_string(&s.log).unwrap_or_default())
            .collect();
        panic!(
            "the update did not complete; status:\n{last}\nlogs:\n{}",
            logs.join("\n---\n")
        );
    }
    assert!(last.contains("environment: production"), "{last}");
    assert!(last.contains("registered: 1, 2"), "{last}");
    for id in [1, 2] {
        assert!(
            dir.join(format!("server-{id}/versions/1.0.0")).is_dir(),
            "server {id} did not install 1.0.0 under its root"
        );
    }
}
