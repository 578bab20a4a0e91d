//! Attacks on the updater and what it must do instead: a damaged update.yaml, settings
//! `enable` was given, modes under a permissive umask, numbers from the server, a
//! broken environment during an update, a refused token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use support::{Agent, Host, Server, release_files, tarball};

fn publish(server: &Server, version: &str, kind: Agent) {
    server.publish(version, &tarball(&release_files(version, kind)));
}

/// A host enabled against a new server that serves `version` and targets it; with the
/// host's service config.
fn enabled_on(version: &str) -> (Server, Host, PathBuf) {
    let server = Server::start();
    publish(&server, version, Agent::Good);
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target(version, true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    (server, host, svc)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// --- 10. A damaged update.yaml ------------------------------------------------------

/// An empty, cut or garbled update.yaml is named as damaged, with the way to repair
/// it, and every command exits 1: never "not an http(s) URL", never "disabled", exit 0.
#[test]
fn a_damaged_update_yaml_is_reported_with_its_path_and_the_repair() {
    let (server, host, svc) = enabled_on("1.0.0");
    assert!(host.wait_running("1.0.0"));
    let yaml = host.ns().join("update.yaml");
    let good = std::fs::read_to_string(&yaml).unwrap();
    let cut_in_server = {
        let at = good.find("server: ").unwrap() + "server: ht".len();
        good[..at].to_string()
    };
    let cut_before_status = good[..good.find("status:").unwrap()].to_string();
    let damages = [
        ("empty", String::new()),
        ("blank", "\n  \n".to_string()),
        ("cut in the server URL", cut_in_server),
        ("cut before the status", cut_before_status),
        ("half", good[..good.len() / 2].to_string()),
        ("garbage", "\u{0}\u{1}not yaml: [".to_string()),
    ];
    for (what, text) in damages {
        std::fs::write(&yaml, &text).unwrap();
        for args in [
            &["update"][..],
            &["update", "--now"],
            &["status"],
            &["pin"],
            &["heartbeat"],
            &["disable"],
        ] {
            let out = host.run(args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{what}: {args:?}: {err}");
            assert!(
                err.contains(&yaml.display().to_string()) && err.contains("damaged"),
                "{what}: {args:?} should name the damaged file: {err}"
            );
            assert!(
                err.contains("tern-update enable"),
                "{what}: {args:?} should say how to repair it: {err}"
            );
            assert!(!err.contains("not an http(s) URL"), "{what}: {err}");
            assert_eq!(
                std::fs::read_to_string(&yaml).unwrap(),
                text,
                "{what}: {args:?} must leave the damaged file for the operator"
            );
        }
    }
    // The repair the message names: enable rewrites the file and finds the installed
    // version again (nothing downloaded).
    let out = host.enable(&server, &svc, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("damaged"),
        "enable says what it replaced"
    );
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    host.ok(&["update"]);
}

/// Every cut of a file this version writes is detected, at any byte; a file written by
/// an older tern-update (no end line) and one without the newer fields still load.
#[test]
fn every_truncation_of_update_yaml_is_detected_and_old_files_still_load() {
    let (_server, host, _svc) = enabled_on("1.0.0");
    let good = std::fs::read_to_string(host.ns().join("update.yaml")).unwrap();
    tern_update::parse_update_file(&good).unwrap();
    for cut in 0..good.trim_end().len() {
        let text = &good[..cut];
        assert!(
            tern_update::parse_update_file(text).is_err(),
            "a file cut at byte {cut} of {} was taken as whole:\n{text}",
            good.len()
        );
    }
    let older = "version: v1\nkind: update_config\nspec:\n  server: https://t.example\n  group: g\n  enabled: true\n  pinned: false\n  keep: 2\nstatus:\n  active: 1.0.0\n  rollback: false\n";
    let f = tern_update::parse_update_file(older).unwrap();
    assert_eq!(f.status.active.as_deref(), Some("1.0.0"));
    assert!(f.spec.enabled);
}

// --- 9. Settings given to enable are kept -------------------------------------------

fn spec_value(host: &Host) -> serde_yaml_ng::Value {
    let text = std::fs::read_to_string(host.ns().join("update.yaml")).unwrap();
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    v["spec"].clone()
}

/// `enable --link-dir … --unit-dir … --hostname … --host-id … --ca-cert …` is
/// remembered: later commands given only the install dir use the same links, names and
/// transport. A later flag wins for its run, except a different link or unit dir,
/// which is refused (the links live there); enable with a new one moves the links.
#[test]
fn settings_given_to_enable_are_kept_for_later_commands() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0", "3.0.0"] {
        publish(&server, v, Agent::Good);
    }
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    let ca = host.dir.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let ca_s = ca.display().to_string();
    let out = host.enable(
        &server,
        &svc,
        &[
            "--hostname",
            "web-1",
            "--host-id",
            "host-42",
            "--ca-cert",
            &ca_s,
            "--http-timeout",
            "77",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spec = spec_value(&host);
    let s = |k: &str| spec_value(&host)[k].as_str().map(str::to_string);
    assert_eq!(
        s("link_dir"),
        Some(host.link.display().to_string()),
        "{spec:?}"
    );
    assert_eq!(s("unit_dir"), Some(host.units.display().to_string()));
    assert_eq!(s("systemd_dir"), Some(host.systemd.display().to_string()));
    assert_eq!(s("hostname").as_deref(), Some("web-1"));
    assert_eq!(s("host_id").as_deref(), Some("host-42"));
    assert_eq!(s("ca_cert"), Some(ca_s.clone()));
    assert_eq!(spec["insecure"].as_bool(), Some(true));
    assert_eq!(spec["http_timeout"].as_u64(), Some(77));

    // Later commands with nothing but the install dir: same links, names, transport.
    server.set_target("2.0.0", true);
    let out = host.run_bare(&["update"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert_eq!(host.linked_version().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(
        (hb.hostname.as_str(), hb.host_id.as_str()),
        ("web-1", "host-42")
    );
    let out = host.run_bare(&["status", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["server"]["reachable"], true, "{status}");
    assert_eq!(status["spec"]["link_dir"], host.link.display().to_string());

    // A flag given again wins for its run, and is not saved.
    let out = host.run_bare(&["--hostname", "web-1-once", "heartbeat"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.heartbeats().last().unwrap().1.hostname, "web-1-once");
    assert_eq!(s("hostname").as_deref(), Some("web-1"));

    // A different link dir on a later command is refused: the links are elsewhere.
    let elsewhere = host.dir.path().join("elsewhere");
    let elsewhere_s = elsewhere.display().to_string();
    let out = host.run_bare(&["--link-dir", &elsewhere_s, "update", "--now"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&elsewhere_s)
            && err.contains(&host.link.display().to_string())
            && err.contains("enable"),
        "{err}"
    );
    assert!(!elsewhere.exists());

    // enable with a new link dir moves the links there.
    let out = host.run_bare(&[
        "--link-dir",
        &elsewhere_s,
        "enable",
        "--server",
        &server.url,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let target = std::fs::read_link(elsewhere.join("tern-agent")).unwrap();
    assert!(
        target.ends_with("versions/2.0.0/bin/tern-agent"),
        "{target:?}"
    );
    assert!(host.link.join("tern-agent").symlink_metadata().is_err());
    assert_eq!(s("link_dir"), Some(elsewhere_s.clone()));
    // Settings not repeated were kept by this enable.
    assert_eq!(s("hostname").as_deref(), Some("web-1"));
    assert_eq!(s("ca_cert"), Some(ca_s));
    let out = host.run_bare(&["pin"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(host.wait_running("2.0.0"));
}

// --- 5. Modes whatever the umask ----------------------------------------------------

/// Every directory and file under `root` that tern-update made: (path, mode & 0o7777).
fn modes_under(root: &std::path::Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.file_type().is_symlink() {
            continue;
        }
        out.push((p.clone(), m.permissions().mode() & 0o7777));
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A release whose entries ask for world-writable modes: a 0777 executable, a 0666
/// file, a 0777 directory and a 0666 unit file.
fn permissive_release(version: &str) -> Vec<u8> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(enc);
    let top = format!("agent-{version}");
    let script = support::agent_script(version, Agent::Good);
    let entries: [(String, tar::EntryType, u32, &[u8]); 5] = [
        (
            format!("{top}/share/"),
            tar::EntryType::Directory,
            0o777,
            b"",
        ),
        (
            format!("{top}/bin/tern-agent"),
            tar::EntryType::Regular,
            0o777,
            script.as_bytes(),
        ),
        (
            format!("{top}/README"),
            tar::EntryType::Regular,
            0o666,
            b"x\n",
        ),
        (
            format!("{top}/share/data"),
            tar::EntryType::Regular,
            0o666,
            b"x\n",
        ),
        (
            format!("{top}/lib/systemd/system/tern-agent.service"),
            tar::EntryType::Regular,
            0o666,
            b"[Service]\n",
        ),
    ];
    for (path, kind, mode, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// tern-update runs as root under whatever umask it inherits. Under `umask 000` (and
/// `077`) every directory it makes is 0755 (a DB backup 0700), files from the tarball
/// keep at most 0755, its own files have fixed modes, and nothing is group- or
/// world-writable: install, versions, backups, state, lock, links, units, setup's files.
#[test]
fn modes_do_not_depend_on_the_umask() {
    for umask in [0o000, 0o077] {
        let server = Server::start();
        for v in ["1.0.0", "2.0.0"] {
            server.publish(v, &permissive_release(v));
        }
        let mut host = Host::new();
        host.umask = Some(umask);
        host.env.push(("TERN_SYSTEMCTL".into(), "true".into()));
        let db = host.state.join("agent.db");
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch("CREATE TABLE t(x);")
            .unwrap();
        std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let svc = host.service_config(&format!("db_path: {}\n", db.display()));
        server.set_target("1.0.0", true);
        let out = host.enable(&server, &svc, &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        server.set_target("2.0.0", true);
        host.ok(&["update", "--now"]);
        // A downgrade restores 1.0.0's DB backup over the live DB.
        server.set_target("1.0.0", true);
        host.ok(&["update", "--now"]);
        assert!(host.wait_running("1.0.0"));
        host.ok(&["setup", "--agent-unit", "tern-agent"]);

        let v1 = host.ns().join("versions/1.0.0");
        let v2 = host.ns().join("versions/2.0.0");
        let want = [
            (host.install.clone(), 0o755),
            (host.ns(), 0o755),
            (host.ns().join("versions"), 0o755),
            (v1.clone(), 0o755),
            (v1.join("bin"), 0o755),
            (v1.join("share"), 0o755),
            (v1.join("lib/systemd/system"), 0o755),
            (v1.join("bin/tern-agent"), 0o755),
            (v1.join("README"), 0o644),
            (v1.join("share/data"), 0o644),
            (v1.join("lib/systemd/system/tern-agent.service"), 0o644),
            (v1.join("sha256"), 0o644),
            (v2.join("backup"), 0o700),
            (v2.join("backup/backup.yaml"), 0o600),
            (v2.join("backup/sqlite.db"), 0o600),
            (host.ns().join("update.yaml"), 0o644),
            (host.ns().join("update.lock"), 0o600),
            (host.ns().join("updater_id"), 0o644),
            (host.link.clone(), 0o755),
            (host.units.clone(), 0o755),
            (host.systemd.clone(), 0o755),
            (host.systemd.join("tern-update.service"), 0o644),
            (host.systemd.join("tern-update.timer"), 0o644),
            (host.systemd.join("tern-agent.service.d"), 0o755),
            (
                host.systemd.join("tern-agent.service.d/tern-update.conf"),
                0o644,
            ),
            // The live DB keeps its mode when a backup is restored over it.
            (db.clone(), 0o600),
        ];
        for (path, mode) in want {
            assert_eq!(
                mode_of(&path),
                mode,
                "umask {umask:03o}: {} is {:o}, want {mode:o}",
                path.display(),
                mode_of(&path)
            );
        }
        for root in [&host.install, &host.link, &host.units, &host.systemd] {
            for (path, mode) in modes_under(root) {
                assert_eq!(
                    mode & 0o7022,
                    0,
                    "umask {umask:03o}: {} is {mode:o}",
                    path.display()
                );
            }
        }
    }
}

// --- 6. Numbers from the server -----------------------------------------------------

/// A host on 1.0.0 whose server offers 2.0.0 with the given jitter.
fn offered_with_jitter(jitter: u64) -> (Server, Host, PathBuf) {
    let (server, host, svc) = enabled_on("1.0.0");
    publish(&server, "2.0.0", Agent::Good);
    server.set_target("2.0.0", true);
    server.set_jitter(jitter);
    (server, host, svc)
}

/// `agent_update_jitter_seconds: u64::MAX` used to panic (`% 0` after a wrap); it is
/// capped at an hour.
#[test]
fn a_huge_jitter_is_capped_not_a_panic() {
    let (_server, host, _svc) = offered_with_jitter(u64::MAX);
    assert!(host.wait_running("1.0.0"));
    let mut run = support::Background::spawn(host.cmd(&["update"]));
    let line = run.wait_for("jitter", std::time::Duration::from_secs(20));
    let said = run.seen.join("\n");
    assert!(
        line.as_deref().is_some_and(|l| l.contains("up to 3600s")),
        "the wait is capped at an hour: {said}"
    );
    assert_eq!(run.child.try_wait().unwrap(), None, "still waiting: {said}");
}

/// A jitter of years used to be slept holding update.lock, so `pin` gave up after 60 s.
/// The wait holds no lock, and what it waited for is checked again afterwards: here
/// the operator pinned the host meanwhile, so nothing is updated.
#[cfg(feature = "test-hooks")]
#[test]
fn the_jitter_wait_holds_no_lock_and_is_checked_again() {
    let (server, host, _svc) = offered_with_jitter(100_000_000);
    assert!(host.wait_running("1.0.0"));
    let mut cmd = host.cmd(&["update"]);
    cmd.env("TERN_UPDATE_TEST_JITTER_WAIT", "4");
    let mut run = support::Background::spawn(cmd);
    let line = run.wait_for("jitter", std::time::Duration::from_secs(20));
    assert!(line.is_some(), "{}", run.seen.join("\n"));

    let started = std::time::Instant::now();
    let out = host.run(&["pin"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let (code, said) = run.finish(std::time::Duration::from_secs(30));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("pinned to 1.0.0"), "{said}");
    let f = host.update_yaml();
    assert_eq!(f.status.active.as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    // Its heartbeats say what it runs.
    assert_eq!(server.heartbeats().last().unwrap().1.version, "1.0.0");
}

/// A HEAD answer with a Content-Length of u64::MAX used to overflow (a panic in a
/// debug build) when the error was made; it is refused as not fitting.
#[test]
fn a_huge_content_length_is_refused_not_a_panic() {
    let (server, host, _svc) = offered_with_jitter(0);
    server.state.lock().unwrap().head_content_length = Some(u64::MAX.to_string());
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("not enough free space"), "{err}");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
}

// --- 7. A broken environment is not a broken version --------------------------------

fn environment_failure(host: &Host) -> serde_yaml_ng::Value {
    let text = std::fs::read_to_string(host.ns().join("update.yaml")).unwrap();
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    v["status"]["environment_failure"].clone()
}

fn backoff_of(failure: &serde_yaml_ng::Value) -> jiff::SignedDuration {
    let at = |k: &str| -> jiff::Timestamp { failure[k].as_str().unwrap().parse().unwrap() };
    at("retry_after").duration_since(at("time"))
}

/// When the new version fails its health check and the old one, reverted, fails the
/// same check, the host is broken (network, disk), not the version: it is not skipped;
/// the failure is recorded as the environment's, retried with a growing backoff that
/// the timer's runs respect, reported as such, and cleared when an update succeeds.
#[test]
fn a_broken_environment_is_not_blamed_on_the_new_version() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0"] {
        publish(&server, v, Agent::Good);
    }
    let host = Host::new();
    let svc = host.service_config(&format!(
        "health_url: \"{}/health?file={}/running_version&bad=none\"\n",
        server.url,
        host.state.display()
    ));
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert!(host.wait_running("1.0.0"));

    server.state.lock().unwrap().health_down = true;
    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("update to 2.0.0 failed"), "{err}");
    assert!(
        err.contains("environment"),
        "says whose failure it is: {err}"
    );
    let f = host.update_yaml();
    assert_eq!(f.status.skip, None, "2.0.0 is not blamed");
    assert!(!f.status.rollback);
    assert_eq!(f.status.active.as_deref(), Some("1.0.0"));
    let failure = environment_failure(&host);
    assert_eq!(failure["target"].as_str(), Some("2.0.0"), "{failure:?}");
    assert_eq!(failure["attempts"].as_u64(), Some(1));
    let first = backoff_of(&failure);
    assert!(first >= jiff::SignedDuration::from_secs(60), "{first:?}");
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.failed_version, None);
    assert!(!hb.rollback);
    assert!(
        hb.healthy == Some(false),
        "the host is not healthy: its health check fails"
    );

    // The timer's runs wait for the backoff: nothing is downloaded or restarted.
    let artifact_requests = || {
        let st = server.state.lock().unwrap();
        st.requests
            .iter()
            .filter(|r| r.contains("/artifacts/"))
            .count()
    };
    let before = artifact_requests();
    let out = host.ok(&["update"]);
    assert!(
        out.contains("backing off") && out.contains("--now"),
        "{out}"
    );
    assert_eq!(artifact_requests(), before);
    let status: serde_json::Value = serde_json::from_str(
        &String::from_utf8(host.run(&["status", "-o", "json"]).stdout).unwrap(),
    )
    .unwrap();
    assert_eq!(status["status"]["environment_failure"]["target"], "2.0.0");
    assert!(
        status["server"]["update_now"]
            .as_str()
            .unwrap()
            .contains("backing off"),
        "{status}"
    );

    // Failing again doubles the backoff.
    host.fails(&["update", "--now"]);
    let failure = environment_failure(&host);
    assert_eq!(failure["attempts"].as_u64(), Some(2));
    assert_eq!(backoff_of(&failure), first * 2);
    assert_eq!(host.update_yaml().status.skip, None);

    // The environment is back: the update goes through and the failure is forgotten.
    server.state.lock().unwrap().health_down = false;
    host.ok(&["update", "--now"]);
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(environment_failure(&host).is_null());
    assert!(host.wait_running("2.0.0"));
    assert_eq!(server.heartbeats().last().unwrap().1.healthy, Some(true));
}

// --- 8. A refused token, and the last heartbeat -------------------------------------

/// `enable` with a token ternd refuses used to exit 0 with a warning, leaving a host
/// that looked enrolled but was never heard. It fails, names the problem, and leaves
/// nothing enabled or installed; on an enrolled host, the saved settings stay as they were.
#[test]
fn enable_fails_clearly_when_ternd_refuses_the_token() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    server.state.lock().unwrap().heartbeat_token = Some("good".into());
    let host = Host::new();
    let svc = host.service_config("");
    let token = host.dir.path().join("token");
    let token_s = token.display().to_string();
    std::fs::write(&token, "wrong\n").unwrap();

    let out = host.enable(&server, &svc, &["--join-token-file", &token_s]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused the token") && err.contains("401"),
        "{err}"
    );
    assert!(
        err.contains("invalid or revoked token"),
        "ternd's reason: {err}"
    );
    assert!(err.contains(&token_s), "names the token file: {err}");
    assert!(!host.ns().join("update.yaml").exists(), "nothing enabled");
    assert_eq!(host.versions(), Vec::<String>::new(), "nothing installed");
    assert_eq!(host.linked_version(), None);

    // No token at all, and a token file that cannot be read, fail as clearly.
    let out = host.enable(&server, &svc, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--join-token-file"), "{err}");
    let missing = host.dir.path().join("no-such-token");
    let out = host.enable(
        &server,
        &svc,
        &["--join-token-file", missing.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-token"), "{}", stderr(&out));
    assert!(!host.ns().join("update.yaml").exists());

    // The right token enrolls; once revoked, a re-enable fails and changes nothing.
    std::fs::write(&token, "good\n").unwrap();
    let out = host.enable(&server, &svc, &["--join-token-file", &token_s]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(host.wait_running("1.0.0"));
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    server.state.lock().unwrap().heartbeat_token = Some("rotated".into());
    let out = host.enable(&server, &svc, &["--group", "prod"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refused the token"), "{err}");
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before
    );
    assert!(host.wait_running("1.0.0"));
}

/// `status` says when the last heartbeat was sent and whether ternd took it.
#[test]
fn status_shows_the_last_heartbeat() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    server.state.lock().unwrap().heartbeat_token = Some("good".into());
    let host = Host::new();
    let svc = host.service_config("");
    let token = host.dir.path().join("token");
    std::fs::write(&token, "good\n").unwrap();
    let out = host.enable(
        &server,
        &svc,
        &["--join-token-file", token.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status = || -> serde_json::Value {
        let out = host.run(&["status", "-o", "json"]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let st = status();
    let hb = &st["last_heartbeat"];
    assert_eq!(hb["accepted"], true, "{st}");
    let time: jiff::Timestamp = hb["time"].as_str().unwrap().parse().unwrap();
    assert!(jiff::Timestamp::now().duration_since(time) < jiff::SignedDuration::from_secs(60));

    // Revoked: the timer's run still succeeds, and status says why ternd is not told.
    server.state.lock().unwrap().heartbeat_token = Some("rotated".into());
    host.ok(&["update"]);
    let st = status();
    let hb = &st["last_heartbeat"];
    assert_eq!(hb["accepted"], false, "{st}");
    let error = hb["error"].as_str().unwrap();
    assert!(
        error.contains("401") && error.contains("invalid or revoked token"),
        "{error}"
    );
}
