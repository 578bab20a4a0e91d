//! The one-line installer against a real ternd over HTTPS on loopback: the real `curl`
//! fetches `/install.sh` and pipes it into the real `sh`, which downloads the real
//! tern-update binary from ternd, checks it, installs it under a temporary root, pins
//! the CA, and enrolls the host with `tern-update enable`; then the installed
//! tern-update's `status` works against that root and ternd lists the host.
//!
//! One stand-in: `TERN_SYSTEMCTL` points `tern-update setup` at a script that logs its
//! arguments instead of this machine's systemctl (tests never touch the machine's
//! systemd). The units setup writes are real files under the temporary root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Ternd;
use sha2::{Digest, Sha256};

/// Go's name of this machine's architecture, as the script maps `uname -m`.
fn arch() -> &'static str {
    tern_e2e::release::go_arch()
}

fn sha256_hex(bytes: &[u8]) -> String {
    tern_e2e::release::hex(&Sha256::digest(bytes))
}

struct Setup {
    tmp: tempfile::TempDir,
    ternd: Ternd,
    /// `https://127.0.0.1:PORT` (the certificate's name).
    base: String,
    ca: PathBuf,
    /// The binary ternd serves.
    served: Vec<u8>,
}

impl Setup {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        // The name ternd is reached by: its loopback address (no resolver in between).
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let ca = tmp.path().join("ca.pem");
        let key = tmp.path().join("key.pem");
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
        let downloads = tmp.path().join("downloads");
        std::fs::create_dir_all(&downloads).unwrap();
        let bins = tern_e2e::bins::Bins::locate().unwrap();
        let served = std::fs::read(&bins.tern_update).unwrap();
        let file = downloads.join(format!("tern-update-linux-{}", arch()));
        std::fs::write(&file, &served).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ternd = Ternd::spawn(
            &tmp.path().join("data"),
            &[
                "--tls-cert",
                ca.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
                "--downloads-dir",
                downloads.to_str().unwrap(),
            ],
        );
        let s = Self {
            base: ternd.url.clone(),
            tmp,
            ternd,
            ca,
            served,
        };
        let mut ready = false;
        for _ in 0..200 {
            if s.curl(&["-o", "/dev/null", &format!("{}/readyz", s.base)])
                .status
                .success()
            {
                ready = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(ready, "ternd answers over HTTPS");
        s
    }

    /// The real curl, trusting only the test's CA.
    fn curl(&self, args: &[&str]) -> Output {
        Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(&self.ca)
            .args(args)
            .output()
            .expect("curl (the test command installs it)")
    }

    fn admin(&self, method: &str, path: &str, body: Option<&str>) -> serde_json::Value {
        let auth = format!("Authorization: Bearer {}", self.ternd.token);
        let url = format!("{}{path}", self.base);
        let mut args = vec!["-f", "-X", method, "-H", &auth, &url];
        if let Some(b) = body {
            args.extend(["-H", "Content-Type: application/json", "-d", b]);
        }
        let out = self.curl(&args);
        assert!(out.status.success(), "{method} {path}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn join_token(&self) -> String {
        let v = self.admin("POST", "/v1/tokens", Some(r#"{"role":"join","uses":5}"#));
        v["token"].as_str().unwrap().to_string()
    }

    /// A fresh temporary root and a systemctl stand-in logging its arguments there.
    fn root(&self, name: &str) -> (PathBuf, PathBuf) {
        let root = self.tmp.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        let log = self.tmp.path().join(format!("{name}-systemctl.log"));
        let stand_in = self.tmp.path().join(format!("{name}-systemctl"));
        std::fs::write(
            &stand_in,
            format!(
                "#!/bin/sh\n# Stand-in for systemctl: logs, changes nothing.\nprintf '%s\\n' \"$*\" >> '{}'\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        (root, stand_in)
    }

    /// `curl -fsSL URL/install.sh | sh -s -- ARGS…`, as an operator types it.
    fn one_liner(&self, systemctl: &Path, args: &[&str]) -> Output {
        let quoted: Vec<String> = args
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "curl --cacert '{}' -fsSL '{}/install.sh' | sh -s -- {}",
                self.ca.display(),
                self.base,
                quoted.join(" ")
            ))
            .env("TERN_SYSTEMCTL", systemctl)
            .env("TERN_UPDATE_HOSTNAME", "installed-host")
            .env("TERN_UPDATE_HOST_ID", "installed-host-id")
            .output()
            .unwrap()
    }

    fn script(&self) -> String {
        let out = self.curl(&["-f", &format!("{}/install.sh", self.base)]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// `tern-update update` as the timer runs it, from what the one-liner installed under
/// `root` (systemctl the stand-in).
fn installed_update(root: &Path, systemctl: &Path) -> Output {
    Command::new(root.join("usr/local/bin/tern-update"))
        .arg("--install-dir")
        .arg(root.join("opt/tern"))
        .arg("update")
        .env("TERN_SYSTEMCTL", systemctl)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                found.extend(files_under(&p));
            } else {
                found.push(p);
            }
        }
    }
    found
}

#[test]
fn the_one_liner_installs_pins_the_ca_and_enrolls_the_host() {
    let s = Setup::new();
    let token = s.join_token();
    let token_file = s.tmp.path().join("join.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (root, systemctl) = s.root("host");
    // An /etc/tern that exists (on a ternd host it may hold the TLS key) keeps its mode.
    let etc = root.join("etc/tern");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o750)).unwrap();
    let out = s.one_liner(
        &systemctl,
        &[
            "--group",
            "dev",
            "--join-token-file",
            token_file.to_str().unwrap(),
            "--ca-cert",
            s.ca.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "the one-liner failed: {}",
        stderr(&out)
    );
    let log = stderr(&out);
    assert!(log.contains("pinned ternd's CA"), "{log}");

    // The binary: exactly what ternd served, executable, under the root's prefix.
    let exe = root.join("usr/local/bin/tern-update");
    assert_eq!(
        sha256_hex(&std::fs::read(&exe).unwrap()),
        sha256_hex(&s.served)
    );
    assert_eq!(
        std::fs::metadata(&exe).unwrap().permissions().mode() & 0o777,
        0o755
    );
    // The CA, pinned where the saved settings point.
    let pinned = root.join("etc/tern/ca.pem");
    assert_eq!(
        std::fs::read(&pinned).unwrap(),
        std::fs::read(&s.ca).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&etc).unwrap().permissions().mode() & 0o777,
        0o750
    );
    let ns = root.join("opt/tern/default");
    let spec = std::fs::read_to_string(ns.join("update.yaml")).unwrap();
    assert!(spec.contains(&s.base), "{spec}");
    assert!(spec.contains("group: dev"), "{spec}");
    assert!(spec.contains(pinned.to_str().unwrap()), "{spec}");
    // The host's own credential; the join token is nowhere under the root.
    let credential = ns.join("host.token");
    assert_eq!(
        std::fs::metadata(&credential).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for f in files_under(&root) {
        let text = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&text).contains(&token),
            "the join token was left in {}",
            f.display()
        );
    }
    // setup wrote the timer under the root and asked (the stand-in) systemctl for it.
    let timer = root.join("etc/systemd/system/tern-update.timer");
    assert!(timer.is_file(), "{log}");
    let calls = std::fs::read_to_string(s.tmp.path().join("host-systemctl.log")).unwrap();
    assert!(calls.contains("enable --now tern-update.timer"), "{calls}");

    // The installed tern-update is usable: status against the root, through the
    // pinned CA (saved by enable, not given again).
    let status = Command::new(&exe)
        .arg("--install-dir")
        .arg(root.join("opt/tern"))
        .args(["status", "-o", "json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "status: {status:?}");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("\"dev\""), "{text}");
    let update = installed_update(&root, &systemctl);
    assert!(update.status.success(), "a later update run: {update:?}");

    // ternd knows the host, in its group.
    let inventory = s.admin("GET", "/v1/inventory", None);
    let text = inventory.to_string();
    assert!(
        text.contains("installed-host") && text.contains("\"dev\""),
        "{text}"
    );
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let s = Setup::new();
    let token = s.join_token();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--group", "prod;rm -rf /", "--join-token", &token],
            "--group 'prod;rm -rf /' is not a group name",
        ),
        (
            &["--group", "$(id)", "--join-token", &token],
            "is not a group name",
        ),
        (
            &["--group", "dev", "--join-token", "tern_x$(reboot)"],
            "the join token holds characters no Tern token has",
        ),
        (&["--group", "dev"], "a join token is needed"),
        (
            &[
                "--group",
                "dev",
                "--join-token",
                &token,
                "--server",
                "http://x",
            ],
            "is plain http",
        ),
        (
            &["--group", "dev", "--join-token", &token, "--prefix", "usr"],
            "is not an absolute path",
        ),
        (
            &[
                "--group",
                "dev",
                "--join-token",
                &token,
                "--ca-cert",
                "/nonexistent",
            ],
            "--ca-cert '/nonexistent' cannot be read",
        ),
        (
            &["--channel", "stable;reboot", "--join-token", &token],
            "--channel 'stable;reboot' is not a channel name",
        ),
        (
            &[
                "--channel",
                "http://x/v1/channels/stable",
                "--join-token",
                &token,
            ],
            "--channel 'http://x/v1/channels/stable' is plain http",
        ),
        (&["--group"], "--group needs a value"),
        (&["--bogus"], "unknown argument '--bogus'"),
    ];
    for (i, (args, expected)) in cases.iter().enumerate() {
        let (root, systemctl) = s.root(&format!("bad{i}"));
        let mut args = args.to_vec();
        let r = root.to_str().unwrap().to_string();
        args.extend(["--root", &r]);
        let out = s.one_liner(&systemctl, &args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} was accepted: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(err.starts_with("tern install: error: "), "{err}");
        assert!(
            files_under(&root).is_empty(),
            "{args:?} wrote {:?}",
            files_under(&root)
        );
    }
}

#[test]
fn a_checksum_mismatch_installs_nothing() {
    let s = Setup::new();
    let token = s.join_token();
    let script = s.script();
    let good = sha256_hex(&s.served);
    assert!(script.contains(&format!("{} {} {good}\n", arch(), s.served.len())));
    // The script as a tampered or stale copy would be: another checksum.
    let tampered = script.replace(&good, &"0".repeat(64));
    let file = s.tmp.path().join("tampered.sh");
    std::fs::write(&file, tampered).unwrap();
    let (root, systemctl) = s.root("tampered");
    let out = Command::new("sh")
        .arg(&file)
        .args(["--group", "dev", "--join-token", &token, "--ca-cert"])
        .arg(&s.ca)
        .arg("--root")
        .arg(&root)
        .env("TERN_SYSTEMCTL", &systemctl)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("checksum mismatch for tern-update") && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(files_under(&root).is_empty(), "{:?}", files_under(&root));
}

#[test]
fn the_served_script_passes_shellcheck() {
    let s = Setup::new();
    let file = s.tmp.path().join("install.sh");
    std::fs::write(&file, s.script()).unwrap();
    let out = Command::new("shellcheck")
        .args(["--shell=sh", "--severity=style"])
        .arg(&file)
        .output()
        .expect("shellcheck (the test command installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn downloads_serve_named_architectures_only() {
    let s = Setup::new();
    let url = |p: &str| format!("{}{p}", s.base);
    let bin = s.tmp.path().join("got");
    let out = s.curl(&[
        "-f",
        "-D",
        "-",
        "-o",
        bin.to_str().unwrap(),
        &url(&format!("/downloads/tern-update/linux-{}", arch())),
    ]);
    assert!(out.status.success(), "{out:?}");
    let headers = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let sha = sha256_hex(&s.served);
    assert!(
        headers.contains(&format!("content-length: {}", s.served.len())),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("x-checksum-sha256: {sha}")),
        "{headers}"
    );
    assert_eq!(std::fs::read(&bin).unwrap(), s.served);
    let out = s.curl(&[
        "-f",
        &url(&format!("/downloads/tern-update/linux-{}.sha256", arch())),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{sha}  tern-update-linux-{}\n", arch())
    );
    for path in [
        "/downloads/tern-update/..%2F..%2Fdata%2Foperator.token",
        "/downloads/tern-update/linux-..%2F..%2Fetc%2Fpasswd",
        "/downloads/tern-update/tern-update-linux-amd64",
        "/downloads/tern-update/linux-mips",
        "/downloads/tern-update/",
        "/downloads/ternd/linux-amd64",
    ] {
        let out = s.curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--path-as-is",
            &url(path),
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "404", "{path}");
    }
    // A Host header that is not a plain host never reaches the script, over HTTP/2
    // (where curl sends it as the request's authority) and HTTP/1.1 (a Host header).
    for version in ["--http2", "--http1.1"] {
        let out = s.curl(&[
            version,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "Host: x'$(id)'",
            &url("/install.sh"),
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "400", "{version}");
    }
    // Over HTTP/1.1 the script is written for the Host the request named.
    let out = s.curl(&["--http1.1", "-f", &url("/install.sh")]);
    assert!(out.status.success(), "{out:?}");
    let host = s.base.trim_start_matches("https://");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("https://{host}")),
        "the script names the address it was fetched from"
    );

    // A ternd without --downloads-dir serves no installer, and says why.
    let plain = Ternd::dev(&s.tmp.path().join("plain"));
    let (status, body) = plain.call("GET", "/install.sh", None, None);
    assert_eq!(status, 404);
    assert!(body.to_string().contains("--downloads-dir"), "{body}");
}

/// The agent release `version` as tern-update installs it (a shell agent that records
/// its pid and sleeps), packed into `dir` under the default template's name.
fn publish_agent(dir: &Path, version: &str) {
    let script = format!(
        "#!/bin/sh\necho {version} > \"$1/running_version\"\necho $$ > \"$1/agent.pid\"\nexec sleep 1000\n"
    );
    tern_e2e::release::pack(
        dir,
        &tern_e2e::release::artifact_name(version),
        &[(
            format!("agent-{version}/bin/tern-agent"),
            script.as_bytes(),
            0o755,
        )],
    )
    .unwrap();
}

/// Kills the agent a test started (its process group) when the test ends.
struct Agent(PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "p=$(cat '{}' 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) kill -s KILL -- -$p ;; esac",
                self.0.display()
            ))
            .status();
    }
}

/// `--channel` as `--group`: the one-liner enrolls a host that follows a channel of
/// this ternd (by its name), installs the channel's version from `--base-url`, and
/// the installed tern-update follows the channel afterwards (a critical version is
/// installed at the next run). The artifacts are on tern-testing's plain-HTTP server
/// (it has no TLS), hence `--insecure`; the first test shows the pinned-CA path.
#[test]
fn the_one_liner_enrolls_a_host_that_follows_a_channel() {
    let s = Setup::new();
    let token = s.join_token();
    s.admin(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version": "1.4.0", "critical": false}"#),
    );
    let artifacts = s.tmp.path().join("artifacts");
    publish_agent(&artifacts, "1.4.0");
    let server = tern_testing::http::HttpServer::serve_dir(&artifacts);
    let (root, systemctl) = s.root("channel-host");
    let state = s.tmp.path().join("agent-state");
    std::fs::create_dir_all(&state).unwrap();
    let _agent = Agent(state.join("agent.pgid"));
    let (st, link) = (state.display(), root.join("usr/local/bin"));
    let service = s.tmp.path().join("service.yaml");
    std::fs::write(
        &service,
        format!(
            "manager: command\nname: tern-agent\n\
             start: \"setsid {link}/tern-agent {st} </dev/null >>{st}/agent.out 2>&1 & echo $! > {st}/agent.pgid\"\n\
             stop: \"p=$(cat {st}/agent.pgid 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) kill -s KILL -- -$p 2>/dev/null;; esac; rm -f {st}/agent.pid; true\"\n\
             pid_file: {st}/agent.pid\nhealth_timeout: 5\nhealth_interval: 0.1\nstable_ticks: 4\nmax_restarts: 3\n",
            link = link.display()
        ),
    )
    .unwrap();
    let out = s.one_liner(
        &systemctl,
        &[
            "--channel",
            "stable",
            "--group",
            "dev",
            "--join-token",
            &token,
            "--ca-cert",
            s.ca.to_str().unwrap(),
            "--base-url",
            server.url(),
            "--service-config",
            service.to_str().unwrap(),
            "--insecure",
            "--root",
            root.to_str().unwrap(),
        ],
    );
    let log = stderr(&out);
    assert!(out.status.success(), "the one-liner failed: {log}");
    let channel = format!("{}/v1/channels/stable", s.base);
    assert!(
        log.contains(&format!("in group dev, following the channel {channel}")),
        "{log}"
    );
    let ns = root.join("opt/tern/default");
    let spec = std::fs::read_to_string(ns.join("update.yaml")).unwrap();
    assert!(spec.contains(&format!("channel: {channel}")), "{spec}");
    assert!(spec.contains("group: dev"), "{spec}");
    assert!(spec.contains("active: 1.4.0"), "{spec}");
    assert_eq!(
        std::fs::read_to_string(state.join("running_version"))
            .unwrap()
            .trim(),
        "1.4.0"
    );

    // The channel moves on, critical: the installed updater's next run takes it.
    publish_agent(&artifacts, "1.5.0");
    s.admin(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version": "1.5.0", "critical": true}"#),
    );
    let update = installed_update(&root, &systemctl);
    assert!(update.status.success(), "update: {}", stderr(&update));
    let spec = std::fs::read_to_string(ns.join("update.yaml")).unwrap();
    assert!(
        spec.contains("active: 1.5.0"),
        "{}\n{spec}",
        stderr(&update)
    );

    // ternd lists the host on the channel's version.
    let text = s.admin("GET", "/v1/inventory", None).to_string();
    assert!(
        text.contains("installed-host") && text.contains("1.5.0"),
        "{text}"
    );
}
