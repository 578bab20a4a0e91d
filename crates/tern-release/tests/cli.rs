//! The release owners' commands, as a child process: keys, a repository with a 2-of-2
//! root, a signed tarball, a timestamp refresh, a root rotation, and `verify` (the
//! host's refresh) following all of it from the first root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use tern_testing::http::HttpServer;

const BIN: &str = env!("CARGO_BIN_EXE_tern-release");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "tern-release {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn init_add_refresh_rotate_and_verify_from_the_first_root() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let k = |n: &str| p(&d.join(format!("{n}.pk8")));
    let out = ok(&[
        "keygen",
        &k("root1"),
        &k("root2"),
        &k("targets"),
        &k("snapshot"),
        &k("timestamp"),
    ]);
    assert_eq!(out.lines().count(), 5, "{out}");
    // A key file is never overwritten.
    let again = run(&["keygen", &k("root1")]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("root1.pk8"), "{err}");
    let repo = p(&d.join("repo"));
    ok(&[
        "init",
        "--repo",
        &repo,
        "--root-key",
        &k("root1"),
        "--root-key",
        &k("root2"),
        "--root-threshold",
        "2",
        "--targets-key",
        &k("targets"),
        "--snapshot-key",
        &k("snapshot"),
        "--timestamp-key",
        &k("timestamp"),
    ]);
    let tarball = d.join("tern-agent-v1.0.0-linux-amd64-bin.tar.gz");
    std::fs::write(&tarball, b"not really a tarball").unwrap();
    ok(&[
        "add",
        "--repo",
        &repo,
        "--file",
        &p(&tarball),
        "--version",
        "1.0.0",
        "--arch",
        "amd64",
        "--key",
        &k("targets"),
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ]);
    let list = ok(&["list", "--repo", &repo]);
    assert!(
        list.contains("tern-agent-v1.0.0-linux-amd64-bin.tar.gz\t1.0.0\tlinux/amd64"),
        "{list}"
    );
    // An image, signed as its manifest: `list` shows its digest.
    let manifest = d.join("agent.manifest.json");
    std::fs::write(&manifest, br#"{"schemaVersion":2}"#).unwrap();
    let out = ok(&[
        "add-image",
        "--repo",
        &repo,
        "--image",
        "registry.example/tern/agent:1.0.0",
        "--manifest-file",
        &p(&manifest),
        "--version",
        "1.0.0",
        "--key",
        &k("targets"),
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ]);
    // sha256 of `{"schemaVersion":2}`, computed with sha256sum.
    let digest = "sha256:".to_string() + &sha256sum(&manifest);
    assert!(out.contains(&digest), "{out}");
    let list = ok(&["list", "--repo", &repo]);
    assert!(
        list.contains(&format!(
            "images/registry.example/tern/agent:1.0.0\t1.0.0\timage registry.example/tern/agent:1.0.0\t19 bytes\tdigest {digest}"
        )),
        "{list}"
    );
    // Without the targets key, nothing is signed.
    let out = run(&[
        "add",
        "--repo",
        &repo,
        "--file",
        &p(&tarball),
        "--version",
        "1.0.1",
        "--arch",
        "amd64",
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot sign"), "{err}");
    assert!(!d.join("repo/metadata/4.targets.json").exists());
    ok(&[
        "refresh",
        "--repo",
        &repo,
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ]);
    // Rotation signed by one old root key of two: refused, nothing written.
    ok(&["keygen", &k("new1")]);
    let out = run(&[
        "rotate",
        "--repo",
        &repo,
        "--root-key",
        &k("new1"),
        "--sign-key",
        &k("root1"),
        "--sign-key",
        &k("new1"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("previous root"), "{err}");
    assert!(!d.join("repo/metadata/2.root.json").exists());
    // A new targets key whose file is not among the signing keys: the root would be
    // signed, the targets cannot be. Nothing is published, not even the root, so hosts
    // stay on a chain whose every role still verifies.
    ok(&["keygen", &k("targets2")]);
    let before = listing(&d.join("repo/metadata"));
    let out = run(&[
        "rotate",
        "--repo",
        &repo,
        "--targets-key",
        &k("targets2"),
        "--sign-key",
        &k("root1"),
        "--sign-key",
        &k("root2"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("re-sign"), "{err}");
    assert_eq!(listing(&d.join("repo/metadata")), before);
    assert_eq!(listing(&d.join("repo")), vec!["metadata".to_string()]);
    let out = ok(&[
        "rotate",
        "--repo",
        &repo,
        "--root-key",
        &k("new1"),
        "--sign-key",
        &k("root1"),
        "--sign-key",
        &k("root2"),
        "--sign-key",
        &k("new1"),
    ]);
    assert!(out.contains("root version 2"), "{out}");
    let state = p(&d.join("host-trust.json"));
    let out = ok(&[
        "verify",
        "--root",
        &p(&d.join("repo/metadata/1.root.json")),
        "--metadata",
        &p(&d.join("repo/metadata")),
        "--state",
        &state,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["root_version"], 2, "{out}");
    assert_eq!(v["targets"], 2, "the tarball and the image: {out}");

    // Over HTTP, as the help and docs promise (it failed: "unsupported URL scheme"),
    // from a static file server of the metadata.
    let server = HttpServer::serve_dir(&d.join("repo/metadata"));
    let url = format!("{}/", server.url());
    let out = ok(&[
        "verify",
        "--root",
        &p(&d.join("repo/metadata/1.root.json")),
        "--metadata",
        &url,
        "--state",
        &p(&d.join("http-trust.json")),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["root_version"], 2, "over http: {out}");
    assert_eq!(v["targets"], 2, "over http: {out}");

    // Relative paths, as an operator types them in the repository's directory.
    let out = Command::new(BIN)
        .current_dir(d)
        .args([
            "verify",
            "--root",
            "repo/metadata/1.root.json",
            "--metadata",
            "repo/metadata",
            "--state",
            "here.json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.join("here.json").is_file());

    // A downloaded file checked against what was signed under its name.
    let check = |file: &Path| {
        run(&[
            "verify",
            "--root",
            &p(&d.join("repo/metadata/1.root.json")),
            "--metadata",
            &p(&d.join("repo/metadata")),
            "--state",
            &state,
            "--file",
            &p(file),
        ])
    };
    let out = check(&tarball);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("signed as tern-agent-v1.0.0-linux-amd64-bin.tar.gz (20 bytes)"),
        "{said}"
    );
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let tampered = elsewhere.join("tern-agent-v1.0.0-linux-amd64-bin.tar.gz");
    std::fs::write(&tampered, b"not really a tarbalL").unwrap();
    let out = check(&tampered);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not what was signed under its name"),
        "{err}"
    );
    let unsigned = d.join("host-trust.json");
    let out = check(&unsigned);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not signed: no target") && err.contains("\"host-trust.json\""),
        "{err}"
    );
}

fn sha256sum(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// A signed minimum per release line: set, listed, seen by a host's refresh (`verify`),
/// refused when it is not of its line or unsigned, and cleared.
#[test]
fn minimum_sets_and_clears_the_signed_minimum_of_a_release_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let k = |n: &str| p(&d.join(format!("{n}.pk8")));
    ok(&[
        "keygen",
        &k("root"),
        &k("targets"),
        &k("snapshot"),
        &k("timestamp"),
    ]);
    let repo = p(&d.join("repo"));
    ok(&[
        "init",
        "--repo",
        &repo,
        "--root-key",
        &k("root"),
        "--targets-key",
        &k("targets"),
        "--snapshot-key",
        &k("snapshot"),
        "--timestamp-key",
        &k("timestamp"),
    ]);
    let keys = [
        "--key",
        &k("targets"),
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ];
    let minimum = |extra: &[&str]| {
        let mut args = vec!["minimum", "--repo", &repo];
        args.extend_from_slice(extra);
        args.extend_from_slice(&keys);
        run(&args)
    };
    let verify = || {
        ok(&[
            "verify",
            "--root",
            &p(&d.join("repo/metadata/1.root.json")),
            "--metadata",
            &p(&d.join("repo/metadata")),
            "--state",
            &p(&d.join("host-trust.json")),
        ])
    };

    let out = minimum(&["--line", "1", "--version", "1.4.2"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("release line 1: minimum 1.4.2"), "{said}");
    assert!(said.contains("targets version 2"), "{said}");
    let out = minimum(&["--line", "2.1", "--version", "v2.1.5"]);
    assert!(out.status.success(), "{out:?}");
    let list = ok(&["list", "--repo", &repo]);
    assert!(list.contains("minimum\tline 1\t1.4.2"), "{list}");
    assert!(list.contains("minimum\tline 2.1\t2.1.5"), "{list}");
    let host = verify();
    assert!(
        host.contains("release line 1: versions below 1.4.2 are refused")
            && host.contains("release line 2.1: versions below 2.1.5 are refused"),
        "{host}"
    );
    let json = ok(&[
        "verify",
        "--root",
        &p(&d.join("repo/metadata/1.root.json")),
        "--metadata",
        &p(&d.join("repo/metadata")),
        "--state",
        &p(&d.join("host-trust.json")),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        v["minimums"],
        serde_json::json!({"1": "1.4.2", "2.1": "2.1.5"}),
        "{json}"
    );
    // Raising it replaces it.
    let out = minimum(&["--line", "1", "--version", "1.5.0"]);
    assert!(out.status.success(), "{out:?}");
    assert!(ok(&["list", "--repo", &repo]).contains("minimum\tline 1\t1.5.0"));

    // Refused, and nothing signed: a version of another line, a line that is not one,
    // no targets key, clearing a line without a minimum, neither --version nor --clear.
    let before = listing(&d.join("repo/metadata"));
    for (args, says) in [
        (
            vec!["--line", "1", "--version", "2.0.0"],
            "2.0.0 is not a version of release line 1",
        ),
        (
            vec!["--line", "1.x", "--version", "1.0.0"],
            "\"1.x\" is not a release line",
        ),
        (
            vec!["--line", "3", "--clear"],
            "cannot clear the minimum of release line 3",
        ),
    ] {
        let out = minimum(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = run(&[
        "minimum",
        "--repo",
        &repo,
        "--line",
        "1",
        "--version",
        "1.6.0",
        "--key",
        &k("snapshot"),
        "--key",
        &k("timestamp"),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot sign"));
    let out = minimum(&["--line", "1"]);
    assert_eq!(out.status.code(), Some(2), "a usage error: {out:?}");
    assert_eq!(listing(&d.join("repo/metadata")), before);
    assert!(ok(&["list", "--repo", &repo]).contains("minimum\tline 1\t1.5.0"));

    // Cleared: gone from the list and from what a host sees; the other line stays.
    let out = minimum(&["--line", "1", "--clear"]);
    assert!(out.status.success(), "{out:?}");
    let list = ok(&["list", "--repo", &repo]);
    assert!(!list.contains("line 1\t"), "{list}");
    assert!(list.contains("minimum\tline 2.1\t2.1.5"), "{list}");
    let host = verify();
    assert!(!host.contains("release line 1:"), "{host}");
    assert!(host.contains("release line 2.1:"), "{host}");
}
