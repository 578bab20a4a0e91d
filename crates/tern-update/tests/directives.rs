//! Install instructions from version directives, end to end: the loopback server
//! answers heartbeats with an instruction, the real binary runs it (real shells, real
//! tarballs, real HTTP) and reports the result in its heartbeats.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::{Agent, Host, Server, hex, release_files, tarball};
use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::resource::{InstallerSpec, InstallerType, LocalScript, Target};
use tern_core::directive::state::AttemptResult;

const LOCAL_SCRIPT_REFUSED: &str =
    "this host does not accept local-script installers: enable --installer local-script";

/// A host running 1.0.0 (what the server targets), enabled with `extra` flags.
fn enabled(extra: &[&str]) -> (Server, Host) {
    let server = Server::start();
    server.publish("1.0.0", &tarball(&release_files("1.0.0", Agent::Good)));
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    assert_eq!(host.enable(&server, &svc, extra).status.code(), Some(0));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    (server, host)
}

fn target(version: &str) -> Target {
    Target {
        version: version.into(),
        arch: None,
        fips: None,
        size: None,
        sha256: None,
    }
}

fn script_instruction(id: &str, script: &str, env: &[(&str, &str)]) -> InstallInstruction {
    InstallInstruction {
        attempt_id: id.into(),
        installer_name: "site-script".into(),
        installer: InstallerSpec {
            installer_type: InstallerType::LocalScript,
            enabled: true,
            local_script: Some(LocalScript {
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                shell: "/bin/sh".into(),
                script: script.into(),
                timeout: None,
            }),
            package: None,
        },
        target: target("1.1.0"),
        dry_run: false,
        directive: String::new(),
    }
}

/// Publishes `version` and returns the tern-update instruction for it, with the
/// artifact's true size and sha256.
fn native_instruction(server: &Server, id: &str, version: &str) -> InstallInstruction {
    native_instruction_of(server, id, version, Agent::Good)
}

fn native_instruction_of(
    server: &Server,
    id: &str,
    version: &str,
    kind: Agent,
) -> InstallInstruction {
    let bytes = tarball(&release_files(version, kind));
    server.publish(version, &bytes);
    InstallInstruction {
        attempt_id: id.into(),
        installer_name: "tern-update".into(),
        installer: InstallerSpec {
            installer_type: InstallerType::TernUpdate,
            enabled: true,
            local_script: None,
            package: None,
        },
        target: Target {
            size: Some(bytes.len() as u64),
            sha256: Some(hex(&Sha256::digest(&bytes))),
            ..target(version)
        },
        dry_run: false,
        directive: String::new(),
    }
}

/// The install_result of the last heartbeat.
fn last_result(server: &Server) -> AttemptResult {
    server
        .install_results()
        .last()
        .cloned()
        .flatten()
        .expect("the last heartbeat carries an install_result")
}

/// A path quoted for a script's text (the test's own text, not a server's).
fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// The private script files left in the namespace's dir.
fn script_files(host: &Host) -> Vec<String> {
    std::fs::read_dir(host.ns())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("install-script"))
        .collect()
}

#[test]
fn a_local_script_gets_only_the_rendered_env_and_its_success_is_reported() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.installers, ["tern-update", "local-script"]);
    assert_eq!(hb.install_result, None);

    let out = host.dir.path().join("env.txt");
    let perms = host.dir.path().join("perms.txt");
    let sha = "ab".repeat(32);
    let mut instr = script_instruction(
        "attempt-env-1",
        &format!(
            "tr '\\0' '\\n' < /proc/$$/environ > {}\nstat -c %a \"$0\" > {}\necho installing \"$TERN_TARGET_VERSION\"\n",
            q(&out),
            q(&perms)
        ),
        &[
            ("AGENT_VERSION", "{target.version}"),
            ("AGENT_SUM", "{target.sha256}"),
            ("FLAVOUR", "v-{target.version}_x"),
        ],
    );
    instr.target.sha256 = Some(sha.clone());
    server.queue_install(instr);
    let log = host.ok(&["update", "--now"]);
    assert!(
        log.contains("installing 1.1.0"),
        "the script's output is logged:\n{log}"
    );

    let env: BTreeSet<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = [
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "LANG=C".into(),
        "AGENT_VERSION=1.1.0".into(),
        format!("AGENT_SUM={sha}"),
        "FLAVOUR=v-1.1.0_x".into(),
        "TERN_TARGET_VERSION=1.1.0".into(),
    ]
    .into();
    assert_eq!(env, want);
    assert_eq!(std::fs::read_to_string(&perms).unwrap().trim(), "700");
    assert!(script_files(&host).is_empty(), "{:?}", script_files(&host));

    let ok = AttemptResult {
        attempt_id: "attempt-env-1".into(),
        success: true,
        error: String::new(),
    };
    assert_eq!(last_result(&server), ok);
    assert_eq!(host.update_yaml().status.install_result, Some(ok.clone()));
    // Every heartbeat from then on carries it (this one is sent without the lock).
    host.ok(&["heartbeat"]);
    assert_eq!(last_result(&server), ok);

    // The opt-in is kept by an enable that leaves the flag out, dropped by `none`.
    let svc = host.service_config("");
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert_eq!(host.update_yaml().spec.installers, ["local-script"]);
    let out = host.enable(&server, &svc, &["--installer", "none"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(host.update_yaml().spec.installers.is_empty());
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.installers, ["tern-update"]);
    assert_eq!(hb.install_result, Some(ok), "enable keeps the result too");
}

#[test]
fn a_failing_script_reports_its_exit_code_and_stderr_tail() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    server.queue_install(script_instruction(
        "attempt-fail",
        "echo starting\necho 'warming up' >&2\necho 'disk full' >&2\nexit 1\n",
        &[],
    ));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert_eq!(r.attempt_id, "attempt-fail");
    assert!(!r.success);
    assert_eq!(r.error, "script exited with 1: warming up / disk full");
}

#[test]
fn a_hostile_target_or_env_never_reaches_a_shell() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let marker = host.dir.path().join("ran");
    let script = format!("touch {}\n", q(&marker));

    let mut bad_version = script_instruction("attempt-v", &script, &[("V", "{target.version}")]);
    bad_version.target.version = "1.1.0;rm -rf /".into();
    let bad_value = script_instruction(
        "attempt-e",
        &script,
        &[("V", "{target.version};touch /tmp/x")],
    );
    let bad_name = script_instruction("attempt-n", &script, &[("LD_PRELOAD", "x")]);
    for (instr, names) in [
        (bad_version, "target.version"),
        (bad_value, "env.V"),
        (bad_name, "env.LD_PRELOAD"),
    ] {
        let id = instr.attempt_id.clone();
        server.queue_install(instr);
        host.ok(&["update", "--now"]);
        let r = last_result(&server);
        assert_eq!(r.attempt_id, id);
        assert!(!r.success);
        assert!(r.error.contains(names), "{names}: {}", r.error);
        assert!(r.error.contains("nothing was run"), "{}", r.error);
        assert!(!marker.exists(), "{id}: a process ran");
    }
    assert!(script_files(&host).is_empty());
}

#[test]
fn a_script_past_its_timeout_is_killed_with_its_children() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let pidfile = host.dir.path().join("child.pid");
    let mut instr = script_instruction(
        "attempt-slow",
        &format!(
            "sleep 100 &\necho $! > {}\necho 'still going' >&2\nsleep 100\n",
            q(&pidfile)
        ),
        &[],
    );
    instr.installer.local_script.as_mut().unwrap().timeout = Some("1s".into());
    server.queue_install(instr);
    let started = Instant::now();
    host.ok(&["update", "--now"]);
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = last_result(&server);
    assert!(!r.success);
    assert_eq!(
        r.error,
        "script timed out after 1s: killed with its process group: still going"
    );
    let child: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while tern_update::test_support::pid_alive(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !tern_update::test_support::pid_alive(child),
        "the script's background child {child} survived"
    );
}

#[test]
fn a_local_script_without_the_opt_in_is_refused() {
    let (server, host) = enabled(&[]);
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.installers, ["tern-update"]);
    let marker = host.dir.path().join("ran");
    server.queue_install(script_instruction(
        "attempt-no",
        &format!("touch {}\n", q(&marker)),
        &[],
    ));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert_eq!(r.attempt_id, "attempt-no");
    assert!(!r.success);
    assert_eq!(r.error, LOCAL_SCRIPT_REFUSED);
    assert!(!marker.exists());
}

#[test]
fn the_native_installer_switches_when_size_and_sha256_match() {
    let (server, host) = enabled(&[]);
    assert!(host.wait_running("1.0.0"));
    server.queue_install(native_instruction(&server, "attempt-native", "1.1.0"));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert_eq!(
        r,
        AttemptResult {
            attempt_id: "attempt-native".into(),
            success: true,
            error: String::new()
        }
    );
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
    assert_eq!(host.linked_version().as_deref(), Some("1.1.0"));
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.version, "1.1.0");
}

#[test]
fn a_native_install_that_fails_its_health_check_reports_the_rollback() {
    let (server, host) = enabled(&[]);
    assert!(host.wait_running("1.0.0"));
    server.queue_install(native_instruction_of(
        &server,
        "attempt-broken",
        "1.1.0",
        Agent::ExitsAtOnce,
    ));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert_eq!(r.attempt_id, "attempt-broken");
    assert!(!r.success);
    assert!(r.error.starts_with("update to 1.1.0 failed"), "{}", r.error);
    assert!(
        r.error
            .contains("rolled back: the host runs 1.0.0 and it is healthy"),
        "{}",
        r.error
    );
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
}

#[test]
fn the_native_installer_refuses_a_wrong_sha256_or_size_and_switches_nothing() {
    let (server, host) = enabled(&[]);
    let mut instr = native_instruction(&server, "attempt-sha", "1.1.0");
    let real = instr.target.sha256.clone().unwrap();
    let wrong = "0".repeat(64);
    instr.target.sha256 = Some(wrong.clone());
    server.queue_install(instr.clone());
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(!r.success);
    assert!(
        r.error
            .contains(&format!("sha256 expected {wrong}, got {real}")),
        "{}",
        r.error
    );
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert_eq!(host.versions(), ["1.0.0"]);
    assert!(host.wait_running("1.0.0"));

    let size = instr.target.size.unwrap();
    instr.attempt_id = "attempt-size".into();
    instr.target.sha256 = Some(real);
    instr.target.size = Some(size + 1);
    server.queue_install(instr);
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(!r.success);
    assert!(
        r.error
            .contains(&format!("size expected {}, got {size}", size + 1)),
        "{}",
        r.error
    );
    assert_eq!(host.versions(), ["1.0.0"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
}

#[test]
fn dry_runs_change_nothing() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let before = std::fs::read_to_string(host.ns().join("update.yaml")).unwrap();
    let mut native = native_instruction(&server, "attempt-dry-native", "1.1.0");
    native.dry_run = true;
    server.queue_install(native);
    host.ok(&["update", "--now"]);
    assert!(last_result(&server).success, "{:?}", last_result(&server));
    assert_eq!(host.versions(), ["1.0.0"], "nothing unpacked, nothing left");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert_eq!(host.linked_version().as_deref(), Some("1.0.0"));
    let mut file = host.update_yaml();
    let mut old = tern_update::parse_update_file(&before).unwrap();
    // Only the attempt's bookkeeping differs.
    file.status.install_result = None;
    file.status.install_attempts.clear();
    old.status.install_attempts.clear();
    assert_eq!(file, old);

    // A wrong sha256 fails the dry run as it would fail the install.
    let mut native = native_instruction(&server, "attempt-dry-bad", "1.1.0");
    native.dry_run = true;
    native.target.sha256 = Some("1".repeat(64));
    server.queue_install(native);
    host.ok(&["update", "--now"]);
    assert!(!last_result(&server).success);
    assert_eq!(host.versions(), ["1.0.0"]);

    let marker = host.dir.path().join("ran");
    let mut script = script_instruction(
        "attempt-dry-script",
        &format!("touch {}\n", q(&marker)),
        &[],
    );
    script.dry_run = true;
    server.queue_install(script);
    host.ok(&["update", "--now"]);
    assert!(last_result(&server).success);
    assert!(!marker.exists(), "a dry run executed the script");

    let mut broken = script_instruction("attempt-dry-syntax", "if then (\n", &[]);
    broken.dry_run = true;
    server.queue_install(broken);
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert!(!r.success);
    assert!(
        r.error
            .starts_with("script syntax check failed (/bin/sh -n exited with 2)"),
        "{}",
        r.error
    );
}

#[test]
fn the_same_attempt_delivered_twice_runs_once() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let count = host.dir.path().join("count");
    let instr = script_instruction("attempt-once", &format!("echo ran >> {}\n", q(&count)), &[]);
    // The answer to the result's heartbeat brings it again, then a later run's.
    server.queue_install(instr.clone());
    server.queue_install(instr.clone());
    host.ok(&["update", "--now"]);
    server.queue_install(instr);
    host.ok(&["update", "--now"]);
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
    assert!(last_result(&server).success);
    assert_eq!(host.update_yaml().status.install_attempts, ["attempt-once"]);
}

#[test]
fn a_heartbeat_without_the_lock_keeps_the_instruction_for_the_next_locked_run() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let marker = host.dir.path().join("ran");
    server.queue_install(script_instruction(
        "attempt-later",
        &format!("touch {}\n", q(&marker)),
        &[],
    ));
    host.ok(&["heartbeat"]);
    assert!(!marker.exists(), "`heartbeat` ran an installer");
    assert!(host.ns().join("install_pending.json").is_file());
    host.ok(&["update", "--now"]);
    assert!(marker.exists());
    assert!(!host.ns().join("install_pending.json").exists());
    assert_eq!(last_result(&server).attempt_id, "attempt-later");
    assert!(last_result(&server).success);
}

#[test]
fn an_interrupted_attempt_is_reported_failed_and_not_run_again() {
    let (server, host) = enabled(&["--installer", "local-script"]);
    let count = host.dir.path().join("count");
    // A kill while the script runs: the journal names the attempt, its script file
    // is left behind.
    let leftover = host.ns().join(".install-script.tmp-1-0");
    std::fs::write(&leftover, "echo left\n").unwrap();
    let mut file = host.update_yaml();
    file.status.install_running = Some("attempt-killed".into());
    tern_update::test_support::save_update_file(&host.ns().join("update.yaml"), &file).unwrap();
    server.queue_install(script_instruction(
        "attempt-killed",
        &format!("echo ran >> {}\n", q(&count)),
        &[],
    ));
    host.ok(&["update", "--now"]);
    let r = last_result(&server);
    assert_eq!(r.attempt_id, "attempt-killed");
    assert!(!r.success);
    assert!(r.error.starts_with("interrupted"), "{}", r.error);
    assert!(!count.exists());
    assert!(!leftover.exists());
}
