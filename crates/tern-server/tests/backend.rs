//! `ternd start --backend`: SQLite at a given path, several replicas on one SQLite file
//! (one initialises the store, the dev clock is shared), and clear errors for a bad
//! backend or an etcd backend in a build without etcd support.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{T0, Ternd, eventually, ternd_bin, version_yaml};
use serde_json::json;

#[test]
fn replicas_with_their_own_data_dirs_share_one_sqlite_file() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("shared").join("tern.db");
    let backend = format!("sqlite:{}", db.display());
    let args = |id: &'static str| {
        [
            "--backend",
            Box::leak(backend.clone().into_boxed_str()),
            "--replica-id",
            id,
            "--dev-clock",
            T0,
            "--leader-ttl",
            "2s",
        ]
    };
    let a = Ternd::start(&tmp.path().join("a"), &args("a"));
    let mut b = Ternd::start(&tmp.path().join("b"), &args("b"));
    assert!(db.exists());
    assert!(!tmp.path().join("a").join("tern.db").exists());
    // The first replica initialised the store; the second did not mint another token.
    assert!(a.token.starts_with("tern_"));
    assert!(
        b.token.is_empty(),
        "only the initialising replica writes the token"
    );
    b.token = a.token.clone();
    let tokens = b.op("GET", "/v1/tokens", None);
    assert_eq!(tokens.as_array().unwrap().len(), 1, "{tokens}");

    // The dev clock is shared: moved on one replica, every replica runs at that time.
    let now = a.advance("61m");
    eventually("b at the shared time", || {
        b.op("GET", "/v1/dev/clock", None)["now"] == now.as_str()
    });
    b.op(
        "POST",
        "/v1/dev/clock",
        Some(&json!({"set": "2026-11-23T12:00:00Z"}).to_string()),
    );
    eventually("a at the time b set", || {
        a.op("GET", "/v1/dev/clock", None)["now"] == "2026-11-23T12:00:00Z"
    });

    // dev reconcile on the replica that does not lead says who does.
    b.put_resource("version", &version_yaml("1.0.0", "1.1.0", "immediate"));
    let (ra, rb) = (a.reconcile(), b.reconcile());
    let (leader, follower) = if ra["leader"] == true {
        (ra, rb)
    } else {
        (rb, ra)
    };
    assert_eq!(leader["leader"], true, "{leader}");
    assert_eq!(follower["leader"], false, "{follower}");
    assert!(
        follower["message"]
            .as_str()
            .unwrap()
            .contains("holds the leader lease"),
        "{follower}"
    );
    assert!(follower["leader_replica"].is_string(), "{follower}");
}

#[test]
fn a_replica_restarted_with_another_dev_clock_keeps_the_shared_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::dev(&dir);
    let now = t.advance("3h");
    t.stop();
    let t = Ternd::start(&dir, &["--dev-clock", "2030-01-01T00:00:00Z"]);
    assert_eq!(t.op("GET", "/v1/dev/clock", None)["now"], now.as_str());
}

#[test]
fn bad_backends_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |backend: &str| {
        let out = Command::new(ternd_bin())
            .args(["start", "--insecure-http", "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(tmp.path().join("data"))
            .args(["--backend", backend])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{backend} accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("postgres://x");
    assert!(
        err.contains("sqlite:PATH") && err.contains("etcd:URL"),
        "{err}"
    );
    let err = run("etcd:");
    assert!(err.contains("at least one endpoint"), "{err}");
    #[cfg(not(feature = "etcd"))]
    {
        let err = run("etcd:http://127.0.0.1:2379");
        assert!(err.contains("built without etcd support"), "{err}");
    }
}
