//! Bad artifacts change nothing: hostile tarball entries, checksum mismatch, missing
//! checksum, a disk too small.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Agent, Host, Server, raw_tarball, release_files, tarball};

/// Installs 1.0.0, then offers `bad` as 2.0.0 and checks that the update fails with
/// `want` in the message and the host is untouched.
fn refused(bad: Vec<u8>, want: &str, sha_override: Option<&str>) -> Host {
    let server = Server::start();
    server.publish("1.0.0", &tarball(&release_files("1.0.0", Agent::Good)));
    server.publish("2.0.0", &bad);
    let sum = server
        .artifacts
        .join(format!("{}.sha256", Server::artifact_name("2.0.0")));
    match sha_override {
        Some("") => std::fs::remove_file(&sum).unwrap(),
        Some(s) => std::fs::write(&sum, s).unwrap(),
        None => {}
    }
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains(want), "wanted {want:?} in: {err}");
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before,
        "state unchanged"
    );
    assert_eq!(host.versions(), vec!["1.0.0"], "nothing left behind");
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    host
}

fn good() -> support::Files {
    release_files("2.0.0", Agent::Good)
}

#[test]
fn hostile_entries_are_refused_by_name() {
    use tar::EntryType as T;
    let host_dir_escape = "agent-2.0.0/bin/../../../escaped";
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            raw_tarball(
                &good(),
                "/tmp/tern-absolute-evil",
                T::Regular,
                0o644,
                None,
                b"x",
            ),
            "\"/tmp/tern-absolute-evil\": absolute path",
        ),
        (
            raw_tarball(&good(), host_dir_escape, T::Regular, 0o644, None, b"x"),
            "contains `..`",
        ),
        (
            raw_tarball(
                &good(),
                "agent-2.0.0/bin/evil",
                T::Symlink,
                0o777,
                Some("/etc/shadow"),
                b"",
            ),
            "\"agent-2.0.0/bin/evil\": symlink to absolute path",
        ),
        (
            raw_tarball(
                &good(),
                "agent-2.0.0/bin/evil",
                T::Symlink,
                0o777,
                Some("../../../../etc"),
                b"",
            ),
            "leaves the version directory",
        ),
        (
            raw_tarball(
                &good(),
                "agent-2.0.0/bin/evil",
                T::Link,
                0o644,
                Some("/etc/passwd"),
                b"",
            ),
            "hardlink target: absolute path",
        ),
        (
            raw_tarball(&good(), "agent-2.0.0/dev/null", T::Char, 0o666, None, b""),
            "character device entries are not allowed",
        ),
        (
            raw_tarball(&good(), "agent-2.0.0/dev/sda", T::Block, 0o666, None, b""),
            "block device entries are not allowed",
        ),
        (
            raw_tarball(&good(), "agent-2.0.0/pipe", T::Fifo, 0o644, None, b""),
            "fifo entries are not allowed",
        ),
        (
            raw_tarball(
                &good(),
                "agent-2.0.0/bin/suid",
                T::Regular,
                0o4755,
                None,
                b"x",
            ),
            "setuid/setgid",
        ),
        (
            raw_tarball(
                &good(),
                "agent-2.0.0/bin/sgid",
                T::Regular,
                0o2755,
                None,
                b"x",
            ),
            "setuid/setgid",
        ),
    ];
    for (bad, want) in cases {
        refused(bad, want, None);
    }
    assert!(!std::path::Path::new("/tmp/tern-absolute-evil").exists());
}

#[test]
fn checksum_mismatch_and_missing_checksum() {
    refused(tarball(&good()), "checksum mismatch", Some(&"0".repeat(64)));
    refused(tarball(&good()), "checksum file", Some(""));
    refused(
        tarball(&good()),
        "does not start with 64 hex",
        Some("not a checksum"),
    );
}

#[test]
fn archive_without_files_is_refused() {
    refused(tarball(&vec![]), "no files", None);
}

/// Mounts a 2 MiB tmpfs as the install dir (needs root: CI runs as root).
#[test]
fn disk_too_small() {
    let is_root = rustix::process::geteuid().is_root();
    if !tern_testing::runs_here("disk_too_small", is_root, "it needs root to mount a tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("opt");
    std::fs::create_dir_all(&mnt).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&mnt)
        .status();
    let mounted = matches!(status, Ok(s) if s.success());
    if !tern_testing::runs_here(
        "disk_too_small",
        mounted,
        &format!("mount -t tmpfs failed ({status:?})"),
    ) {
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let run = || {
        let server = Server::start();
        server.publish("1.0.0", &tarball(&release_files("1.0.0", Agent::Good)));
        let host = Host::in_dir(tempfile::tempdir().unwrap(), "default");
        (server, host)
    };
    // 1. The download itself does not fit (HEAD content-length vs statvfs).
    let (server, mut host) = run();
    host.install = mnt.clone();
    let mut noise = vec![0u8; 3 << 20];
    getrandom::fill(&mut noise).unwrap();
    let mut files = good();
    files.push(("agent-2.0.0/big".into(), noise, 0o644));
    server.publish("1.0.0", &tarball(&release_files("1.0.0", Agent::Good)));
    server.publish("2.0.0", &tarball(&files));
    let svc = host.service_config("");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("not enough free space"), "{err}");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));

    // 2. The download fits but the unpacked files do not (zeros compress well).
    let mut files = release_files("3.0.0", Agent::Good);
    files.push(("agent-3.0.0/zeros".into(), vec![0u8; 8 << 20], 0o644));
    server.publish("3.0.0", &tarball(&files));
    server.set_target("3.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("\"agent-3.0.0/zeros\"") && err.contains("free"),
        "{err}"
    );
    assert_eq!(host.versions(), vec!["1.0.0"]);
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));
    host.stop_agent();
}
