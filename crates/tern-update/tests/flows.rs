//! End-to-end flows with real processes, real tarballs and a loopback server.

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

#[test]
fn install_upgrade_status_heartbeat_and_keep() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0", "3.0.0"] {
        publish(&server, v, Agent::Good);
    }
    let host = Host::new();
    let svc = host.service_config("");
    let token = host.dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    server.set_target("1.0.0", false);
    let out = host.enable(
        &server,
        &svc,
        &[
            "--group",
            "staging",
            "--join-token-file",
            token.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));
    let id = std::fs::read_to_string(host.ns().join("updater_id")).unwrap();
    assert_eq!(id.trim().len(), 36);

    // The server wants 2.0.0 but the group is outside its window: nothing happens.
    server.set_target("2.0.0", false);
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));

    // Status says what the server says.
    let status: serde_json::Value = serde_json::from_str(
        &String::from_utf8(host.run(&["status", "-o", "json"]).stdout).unwrap(),
    )
    .unwrap();
    assert_eq!(status["server"]["target_version"], "2.0.0");
    assert_eq!(status["server"]["in_window"], false);
    assert_eq!(status["spec"]["group"], "staging");
    assert_eq!(status["status"]["active"], "1.0.0");
    let why = status["server"]["update_now"].as_str().unwrap();
    assert!(
        why.contains("but not now") && why.ends_with("(use `update --now` to update anyway)"),
        "{why}"
    );
    let yaml = String::from_utf8(host.run(&["status"]).stdout).unwrap();
    assert!(yaml.contains("target_version: 2.0.0"), "{yaml}");

    // In the window: update.
    server.set_target("2.0.0", true);
    host.ok(&["update"]);
    let f = host.update_yaml();
    assert_eq!(f.status.active.as_deref(), Some("2.0.0"));
    assert_eq!(f.status.backup.as_deref(), Some("1.0.0"));
    assert!(f.status.last_update.as_ref().unwrap().success);
    assert!(host.wait_running("2.0.0"));
    assert_eq!(host.linked_version().as_deref(), Some("2.0.0"));

    // Active + backup only.
    server.set_target("3.0.0", true);
    host.ok(&["update"]);
    assert_eq!(host.versions(), vec!["2.0.0", "3.0.0"]);
    assert!(host.wait_running("3.0.0"));

    // --keep 1 for small disks.
    host.ok(&[
        "enable",
        "--server",
        &server.url,
        "--base-url",
        &server.base_url(),
        "--service-config",
        svc.to_str().unwrap(),
        "--keep",
        "1",
    ]);
    assert_eq!(host.versions(), vec!["3.0.0"]);

    // Heartbeats after every run, with the join token.
    let hbs = server.heartbeats();
    assert!(hbs.len() >= 4, "{hbs:?}");
    let (auth, last) = hbs.last().unwrap();
    assert_eq!(auth.as_deref(), Some("Bearer s3cret"));
    assert_eq!(last.version, "3.0.0");
    assert_eq!(last.group, "staging");
    assert_eq!(last.updater_id, id.trim());
    assert_eq!(last.healthy, Some(true));
}

/// Returns `status.last_update.error` after the rollback.
fn rollback_case(kind: Agent, extra_cfg: &str, want: &str) -> String {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    publish(&server, "2.0.0", kind);
    let host = Host::new();
    let cfg = extra_cfg
        .replace("STATE", &host.state.display().to_string())
        .replace("URL", &server.url);
    let svc = host.service_config(&cfg);
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert!(host.wait_running("1.0.0"));

    server.set_target("2.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains(want), "{err}");
    assert!(err.contains("update to 2.0.0 failed"), "{err}");
    assert!(
        err.contains("the host runs 1.0.0 and it is healthy"),
        "{err}"
    );
    let f = host.update_yaml();
    assert_eq!(f.status.active.as_deref(), Some("1.0.0"));
    assert_eq!(f.status.skip.as_deref(), Some("2.0.0"));
    assert!(f.status.rollback);
    let last = f.status.last_update.unwrap();
    assert!(!last.success);
    let error = last.error.unwrap();
    assert!(error.contains(want), "{error}");
    if !extra_cfg.contains("log_file") {
        assert!(!error.contains("last output"), "{error}");
    }
    assert!(host.wait_running("1.0.0"));
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));

    // The skipped version is not retried, and says why.
    let out = host.ok(&["update", "--now"]);
    assert!(out.contains("skipped"), "{out}");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    let hb = server.heartbeats().last().unwrap().1.clone();
    assert!(hb.rollback);
    assert_eq!(hb.failed_version.as_deref(), Some("2.0.0"));
    error
}

#[test]
fn broken_version_that_exits_at_once_is_rolled_back() {
    rollback_case(Agent::ExitsAtOnce, "", "not running");
}

/// With `log_file`, the failure says what the agent printed before it died (read
/// before the old version is started again).
#[test]
fn a_version_that_fails_to_start_records_the_agents_last_output() {
    let error = rollback_case(
        Agent::ExitsAtOnce,
        "log_file: STATE/agent.out\n",
        "not running",
    );
    assert!(
        error.ends_with("the agent's last output: fatal: cannot open the agent's database"),
        "{error}"
    );
}

#[test]
fn broken_version_that_crash_loops_is_rolled_back() {
    rollback_case(Agent::CrashLoop, "", "crash loop");
}

#[test]
fn broken_version_that_never_becomes_healthy_is_rolled_back() {
    rollback_case(
        Agent::Good,
        "health_url: \"URL/health?file=STATE/running_version&bad=2.0.0\"\n",
        "not healthy after",
    );
}

#[test]
fn server_unreachable_changes_nothing() {
    let (_server, host, svc) = enabled_on("1.0.0");
    let before = std::fs::read(host.ns().join("update.yaml")).unwrap();
    // Point the host at a port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let mut f = host.update_yaml();
    f.spec.server = dead_url.clone();
    tern_update::test_support::save_update_file(&host.ns().join("update.yaml"), &f).unwrap();
    let before_spec = std::fs::read(host.ns().join("update.yaml")).unwrap();
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("find"), "{err}");
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before_spec
    );
    assert!(host.wait_running("1.0.0"));
    // enable against a dead server changes nothing either.
    let svc_s = svc.to_string_lossy().into_owned();
    host.fails(&["enable", "--server", &dead_url, "--service-config", &svc_s]);
    assert_eq!(
        std::fs::read(host.ns().join("update.yaml")).unwrap(),
        before_spec
    );
    assert_ne!(before, before_spec);
}

/// Before tern-update named versions by tern-core's rule, `v1.2` (not semver) was
/// installed as `1.2`; tern-core's name for it is `v1.2`. An install made that way is
/// still found under its old name: nothing is downloaded or switched again.
#[test]
fn a_version_installed_under_its_old_name_is_found() {
    // The state `pin --force-version v1.2` used to leave: versions/1.2, active 1.2.
    let (server, host, _svc) = enabled_on("1.2");
    assert_eq!(host.versions(), vec!["1.2"]);
    assert!(host.wait_running("1.2"));
    let artifact_requests = || {
        let st = server.state.lock().unwrap();
        st.requests
            .iter()
            .filter(|r| r.contains("/artifacts/"))
            .count()
    };
    let before = artifact_requests();

    server.set_target("v1.2", true);
    let out = host.ok(&["update", "--now"]);
    assert!(out.contains("already on 1.2"), "{out}");
    let out = host.ok(&["pin", "--force-version", "v1.2"]);
    assert!(out.contains("pinned to 1.2"), "{out}");
    assert_eq!(artifact_requests(), before, "nothing downloaded again");
    assert_eq!(host.versions(), vec!["1.2"]);
    let f = host.update_yaml();
    assert_eq!(f.status.active.as_deref(), Some("1.2"));
    assert_eq!(f.spec.pinned_version.as_deref(), Some("1.2"));
    assert!(host.wait_running("1.2"));
}

/// Every stderr line of a run as JSON, each checked for tracing's shape (tern-testing)
/// and for what tern-update's lines carry (docs/cli.md).
fn json_lines(stderr: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8(stderr.to_vec()).unwrap();
    let lines = tern_testing::json_log::json_lines(&text);
    assert!(!lines.is_empty(), "nothing logged");
    for v in &lines {
        let at = v["timestamp"].as_str().unwrap_or_default();
        assert!(at.parse::<jiff::Timestamp>().is_ok(), "timestamp: {v}");
        assert!(["INFO", "WARN", "ERROR"].contains(&v["level"].as_str().unwrap_or_default()));
        assert_eq!(v["target"], "tern_update");
    }
    lines
}

#[test]
fn json_logs_and_nothing_to_do_before_enable() {
    let host = Host::new();
    let out = host.run(&["--log-format", "json", "update"]);
    assert_eq!(out.status.code(), Some(0));
    let lines = json_lines(&out.stderr);
    assert_eq!(lines[0]["level"], "INFO");
    let message = lines[0]["fields"]["message"].as_str().unwrap();
    assert!(message.contains("not enabled"), "{message}");

    // The environment's form, and a failure: its error line is JSON too.
    let out = host
        .cmd(&["heartbeat"])
        .env("TERN_UPDATE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out.stderr);
    assert_eq!(lines.last().unwrap()["level"], "ERROR", "{lines:?}");

    // Text stays the default, byte for byte: `tern-update: LEVEL: MESSAGE`.
    let out = host.run(&["update"]);
    let text = String::from_utf8(out.stderr).unwrap();
    assert_eq!(text, format!("tern-update: info: {message}\n"));
}

#[test]
fn usage_errors_exit_2() {
    let out = std::process::Command::new(support::BIN)
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(support::BIN)
        .args([
            "enable",
            "--base-url",
            "x",
            "--url-template",
            "y",
            "--server",
            "z",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A host enabled with a group the rollout lacks (a typo): ternd's heartbeat answer
/// says so, and `enable` warns, naming the groups and the catch-all that serves it.
/// (The server here is the test stand-in; the real ternd's answer is tested in
/// tern-server.)
#[test]
fn enable_warns_when_the_group_is_unknown() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    server.state.lock().unwrap().heartbeat_answer = Some(
        r#"{"next_heartbeat_seconds":60,"unknown_group":{"group":"prdo","served_by":"prod","groups":["dev","staging","prod"]}}"#.into(),
    );
    let host = Host::new();
    let svc = host.service_config("");
    let out = host.enable(&server, &svc, &["--group", "prdo"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the group may be created later: enable succeeds"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warn: group \"prdo\" is not one of this rollout's groups (dev, staging, prod); this host is updated with the catch-all group \"prod\""),
        "{stderr}"
    );
    // A known group: no warning.
    server.state.lock().unwrap().heartbeat_answer = None;
    let quiet = Host::new();
    let svc = quiet.service_config("");
    let out = quiet.enable(&server, &svc, &["--group", "prod"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not one of"));
}

/// `pin --until`: a time already past is refused and pins nothing; a pin that lifts
/// soon holds the host until then, and the next `update` after it follows the server
/// again with no other command.
#[test]
fn a_pin_with_an_end_lifts_itself() {
    let (server, host, _svc) = enabled_on("1.0.0");
    publish(&server, "1.1.0", Agent::Good);
    let out = host.run(&["pin", "--until", "2020-01-01"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not in the future") && err.contains("nothing was pinned"),
        "{err}"
    );
    assert!(!host.update_yaml().spec.pinned);

    let until = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let until = until.round(jiff::Unit::Second).unwrap();
    let out = host.ok(&["pin", "--until", &until.to_string()]);
    assert!(
        out.contains(&format!("pinned to 1.0.0 until {until}")),
        "{out}"
    );
    assert_eq!(host.update_yaml().spec.pinned_until, Some(until));
    server.set_target("1.1.0", true);
    let out = host.run(&["update", "--now"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("pinned to 1.0.0 until {until}")),
        "{said}"
    );
    assert_eq!(host.update_yaml().status.active.as_deref(), Some("1.0.0"));

    // Past its end (a real wait: tern-update reads the system clock).
    while jiff::Timestamp::now() <= until {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    host.ok(&["update", "--now"]);
    let f = host.update_yaml();
    assert!(
        !f.spec.pinned && f.spec.pinned_until.is_none(),
        "{:?}",
        f.spec
    );
    assert_eq!(f.status.active.as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
}

/// teleport-update's command names and flags (Teleport's RFD 169) run tern-update's
/// commands: `enable --proxy … --template …`, `use-version` (refused without
/// `--disable-automatic-updates` while the host follows its server, then a pin), and
/// `link` (the package's links).
#[test]
fn teleport_updates_commands_and_flags_are_aliases() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    publish(&server, "1.1.0", Agent::Good);
    server.set_target("1.0.0", true);

    // `link`: the package install is linked while no managed version is active.
    let host = Host::new();
    let bin = host.install.join("system/bin");
    std::fs::create_dir_all(&bin).unwrap();
    support::write_exe(
        &bin.join("tern-agent"),
        &support::agent_script("0.9.0-pkg", Agent::Good),
    );
    let out = host.ok(&["link"]);
    assert!(out.contains("linked the package"), "{out}");
    assert_eq!(host.linked_version().as_deref(), Some("0.9.0-pkg"));

    // `--proxy` names the server as teleport-update names its proxy: a bare host:port
    // is https (the stand-in speaks plain http, so that fails, naming the URL tried).
    let svc = host.service_config("");
    let bare = server.url.trim_start_matches("http://").to_string();
    let out = host.run(&[
        "enable",
        "--proxy",
        &bare,
        "--service-config",
        svc.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("https://{bare}")), "{err}");
    assert!(!host.ns().join("update.yaml").exists());

    // `--template`, with Teleport's spaces inside the braces.
    let template = format!(
        "{}/tern-agent-v{{{{ .Version }}}}-{{{{ .OS }}}}-{{{{ .Arch }}}}-bin.tar.gz",
        server.base_url()
    );
    host.ok(&[
        "enable",
        "--proxy",
        &server.url,
        "--template",
        &template,
        "--service-config",
        svc.to_str().unwrap(),
    ]);
    let f = host.update_yaml();
    assert_eq!(f.spec.server, server.url);
    assert_eq!(f.spec.url_template.as_deref(), Some(template.as_str()));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));

    // `use-version` without leaving automatic updates: refused, nothing changes.
    let err = host.fails(&["use-version", "1.1.0"]);
    assert!(
        err.contains("enrolled in automatic updates: add --disable-automatic-updates"),
        "{err}"
    );
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(!host.update_yaml().spec.pinned);
    // With it: installed and kept, whatever the server says.
    let out = host.ok(&["use-version", "v1.1.0", "--disable-automatic-updates"]);
    assert!(out.contains("pinned to 1.1.0"), "{out}");
    let f = host.update_yaml();
    assert!(f.spec.pinned);
    assert_eq!(f.spec.pinned_version.as_deref(), Some("1.1.0"));
    assert_eq!(f.status.active.as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
    // The timer's run keeps it (the server still targets 1.0.0).
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    // Pinned already: another version needs no flag.
    let out = host.ok(&["use-version", "1.0.0"]);
    assert!(out.contains("pinned to 1.0.0"), "{out}");
}
