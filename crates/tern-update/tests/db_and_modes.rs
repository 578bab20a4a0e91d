//! Downgrades with the agent's DB, pin/unpin, disable, uninstall, package links,
//! namespaces side by side, concurrent runs, the updater re-exec, systemd and setup.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Agent, Host, Server, db_marker, release_files, set_marker, tarball, write_exe};

fn publish(server: &Server, version: &str, kind: Agent) {
    server.publish(version, &tarball(&release_files(version, kind)));
}

#[test]
fn downgrade_restores_the_db_backup_and_roll_forward_follows_seed_rules() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0", "3.0.0"] {
        publish(&server, v, Agent::Good);
    }
    let host = Host::new();
    let db = host.state.join("agent.db");
    let svc = host.service_config(&format!("db_path: {}\n", db.display()));
    set_marker(&db, "data-of-1");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));

    // v1 -> v2: v1's DB is backed up, the live DB migrates forward.
    server.set_target("2.0.0", true);
    host.ok(&["update", "--now"]);
    let b = host.ns().join("versions/1.0.0/backup");
    assert!(b.join("backup.yaml").is_file() && b.join("sqlite.db").is_file());
    let meta = std::fs::read_to_string(b.join("backup.yaml")).unwrap();
    assert!(
        meta.contains("version: 1.0.0") && meta.contains(&server.url),
        "{meta}"
    );
    set_marker(&db, "data-of-2");

    // v2 -> v1 (downgrade): the agent is stopped, v1's backup restored, v2's DB kept.
    server.set_target("1.0.0", true);
    host.ok(&["update", "--now"]);
    assert_eq!(db_marker(&db), "data-of-1");
    assert!(host.wait_running("1.0.0"));
    assert_eq!(
        db_marker(&host.ns().join("versions/2.0.0/backup/sqlite.db")),
        "data-of-2"
    );

    // v1 -> v2 again: the exact roll-forward version gets its own DB back.
    server.set_target("2.0.0", true);
    host.ok(&["update", "--now"]);
    assert_eq!(db_marker(&db), "data-of-2");

    // v2 -> v3: no backup of v3, the live DB migrates forward.
    set_marker(&db, "data-of-2b");
    server.set_target("3.0.0", true);
    host.ok(&["update", "--now"]);
    assert_eq!(db_marker(&db), "data-of-2b");
    assert!(host.wait_running("3.0.0"));
}

#[test]
fn downgrade_without_a_valid_backup_is_refused() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    publish(&server, "2.0.0", Agent::Good);
    let host = Host::new();
    let db = host.state.join("agent.db");
    let svc = host.service_config(&format!("db_path: {}\n", db.display()));
    set_marker(&db, "data-of-2");
    server.set_target("2.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    server.set_target("1.0.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains("refusing to downgrade 2.0.0 -> 1.0.0"),
        "{err}"
    );
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
    assert_eq!(db_marker(&db), "data-of-2");
    assert_eq!(
        host.update_yaml().status.skip,
        None,
        "a refusal is not a broken version"
    );
}

#[test]
fn pin_unpin_and_disable() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0", "3.0.0"] {
        publish(&server, v, Agent::Good);
    }
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("2.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));

    // use-version --disable-automatic-updates == pin --force-version
    host.ok(&["pin", "--force-version", "1.0.0"]);
    assert!(host.wait_running("1.0.0"));
    let f = host.update_yaml();
    assert!(f.spec.pinned);
    assert_eq!(f.spec.pinned_version.as_deref(), Some("1.0.0"));
    let out = host.ok(&["update"]);
    assert!(
        out.contains("pinned to 1.0.0") && out.contains("tern-update unpin"),
        "{out}"
    );
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("unpin"), "{err}");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert_eq!(
        server.heartbeats().last().unwrap().1.updater_status,
        tern_core::wire::UpdaterStatus::Pinned
    );

    host.ok(&["unpin"]);
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("2.0.0"));

    host.ok(&["disable"]);
    server.set_target("3.0.0", true);
    let out = host.ok(&["update"]);
    assert!(out.contains("disabled") && out.contains("enable"), "{out}");
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    host.fails(&["update", "--now"]);

    // pin without a version keeps the current one.
    assert_eq!(
        host.enable(&server, &svc, &["--force-version", "2.0.0"])
            .status
            .code(),
        Some(0)
    );
    host.ok(&["pin"]);
    assert_eq!(
        host.update_yaml().spec.pinned_version.as_deref(),
        Some("2.0.0")
    );
    assert!(host.wait_running("2.0.0"));
}

fn package(host: &Host, version: &str) {
    let bin = host.install.join("system/bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_exe(
        &bin.join("tern-agent"),
        &support::agent_script(version, Agent::Good),
    );
}

#[test]
fn uninstall_back_to_the_package_and_forced() {
    let server = Server::start();
    publish(&server, "2.0.0", Agent::Good);
    server.set_target("2.0.0", true);

    // With a package: the package is linked, the agent restarted from it.
    let host = Host::new();
    package(&host, "0.9.0-pkg");
    host.ok(&["link-package"]);
    assert_eq!(host.linked_version().as_deref(), Some("0.9.0-pkg"));
    let svc = host.service_config("");
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert_eq!(host.linked_version().as_deref(), Some("2.0.0"));
    let out = host.ok(&["link-package"]);
    assert!(out.contains("stays unlinked"), "{out}");
    assert!(host.wait_running("2.0.0"));
    host.ok(&["uninstall"]);
    assert_eq!(host.linked_version().as_deref(), Some("0.9.0-pkg"));
    assert!(host.wait_running("0.9.0-pkg"));
    assert!(!host.ns().join("update.yaml").exists());
    assert!(!host.ns().join("versions").exists());
    host.ok(&["unlink-package"]);
    assert!(!host.link.join("tern-agent").exists());

    // Without a package: refused unless --force.
    let bare = Host::new();
    let svc = bare.service_config("");
    assert_eq!(bare.enable(&server, &svc, &[]).status.code(), Some(0));
    let err = bare.fails(&["uninstall"]);
    assert!(
        err.contains("without an agent") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(bare.linked_version().as_deref(), Some("2.0.0"));
    bare.ok(&["uninstall", "--force"]);
    assert!(bare.link.join("tern-agent").symlink_metadata().is_err());
    assert_eq!(bare.running_version(), None);
}

#[test]
fn link_package_skips_while_an_update_holds_the_lock() {
    let host = Host::new();
    package(&host, "0.9.0-pkg");
    std::fs::create_dir_all(host.ns()).unwrap();
    let lock = tern_update::test_support::acquire_lock(
        &host.ns().join("update.lock"),
        tern_update::test_support::LockWait::Try,
    )
    .unwrap()
    .unwrap();
    let out = host.ok(&["link-package"]);
    assert!(out.contains("an update is running"), "{out}");
    assert!(host.link.join("tern-agent").symlink_metadata().is_err());
    drop(lock);
    host.ok(&["link-package"]);
    assert_eq!(host.linked_version().as_deref(), Some("0.9.0-pkg"));
}

#[test]
fn two_namespaces_side_by_side() {
    let server_a = Server::start();
    let server_b = Server::start();
    publish(&server_a, "1.0.0", Agent::Good);
    publish(&server_b, "5.0.0", Agent::Good);
    server_a.set_target("1.0.0", true);
    server_b.set_target("5.0.0", true);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let a = Host::in_dir(dir, "default");
    let mut b = Host::in_dir(tempfile::TempDir::new_in(&root).unwrap(), "blue");
    // Both namespaces under one install dir.
    b.install = a.install.clone();
    let (sa, sb) = (a.service_config(""), b.service_config(""));
    assert_eq!(a.enable(&server_a, &sa, &[]).status.code(), Some(0));
    assert_eq!(b.enable(&server_b, &sb, &[]).status.code(), Some(0));
    assert!(a.wait_running("1.0.0"));
    assert!(b.wait_running("5.0.0"));
    assert_eq!(a.linked_version().as_deref(), Some("1.0.0"));
    assert_eq!(b.linked_version().as_deref(), Some("5.0.0"));
    assert_ne!(
        std::fs::read_to_string(a.ns().join("updater_id")).unwrap(),
        std::fs::read_to_string(b.ns().join("updater_id")).unwrap()
    );
    b.ok(&["uninstall", "--force"]);
    assert_eq!(a.active().as_deref(), Some("1.0.0"));
    assert!(a.wait_running("1.0.0"));
}

#[test]
fn concurrent_invocations_serialize_on_the_lock() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    publish(&server, "2.0.0", Agent::Good);
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    server.set_target("2.0.0", true);
    let children: Vec<_> = (0..4)
        .map(|i| {
            let args: &[&str] = if i % 2 == 0 {
                &["update"]
            } else {
                &["update", "--now"]
            };
            host.cmd(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut updated = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        if err.contains("updated 1.0.0 -> 2.0.0") {
            updated += 1;
        }
    }
    assert_eq!(
        updated, 1,
        "exactly one run updates, the others find nothing to do"
    );
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
}

#[test]
fn reexecs_into_the_active_versions_updater() {
    let server = Server::start();
    let host = Host::new();
    let marker = host.dir.path().join("reexec-marker");
    let mut files = release_files("1.0.0", Agent::Good);
    let wrapper = format!(
        "#!/bin/sh\necho \"$*\" >> {}\nexec {} \"$@\"\n",
        marker.display(),
        support::BIN
    );
    files.push((
        "agent-1.0.0/bin/tern-update".into(),
        wrapper.into_bytes(),
        0o755,
    ));
    server.publish("1.0.0", &tarball(&files));
    let svc = host.service_config("");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert!(
        !marker.exists(),
        "nothing to re-exec into before the first install"
    );
    assert!(
        host.link.join("tern-update").symlink_metadata().is_ok(),
        "the updater is linked too"
    );
    host.ok(&["update"]);
    let calls = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(
        calls.lines().count(),
        1,
        "re-exec happens once, never in a loop: {calls}"
    );
    assert!(calls.contains("update"));
}

/// The seed's simple mode under the watch: the agent's release 2.0.0 ships a
/// `bin/tern-update` that is hollow (it exits 0 and does nothing). The first command
/// handed to it leaves no heartbeat of its own, so the host's updater refuses that
/// shipped updater for good (`updater-refused`), does the command itself, and never
/// hands it another; an updater shipped by a later version is used again.
#[test]
fn a_hollow_updater_shipped_in_the_agents_release_is_refused_and_the_host_keeps_reporting() {
    let server = Server::start();
    let host = Host::new();
    let marker = host.dir.path().join("shipped-calls");
    let hollow = format!("#!/bin/sh\necho \"$*\" >> {}\nexit 0\n", marker.display());
    let mut files = release_files("2.0.0", Agent::Good);
    files.push((
        "agent-2.0.0/bin/tern-update".into(),
        hollow.into_bytes(),
        0o755,
    ));
    server.publish("2.0.0", &tarball(&files));
    publish(&server, "3.0.0", Agent::Good);
    let svc = host.service_config("");
    server.set_target("2.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert!(host.wait_running("2.0.0"));

    let before = server.heartbeats().len();
    let err = String::from_utf8_lossy(&host.run(&["update"]).stderr).into_owned();
    assert!(
        err.contains("the updater release 2.0.0 is broken")
            && err.contains("without sending a heartbeat"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap().lines().count(), 1);
    assert!(
        server.heartbeats().len() > before,
        "the host's own updater did the command: it heartbeat"
    );
    assert_eq!(
        std::fs::read_to_string(host.ns().join("updater-refused"))
            .unwrap()
            .trim(),
        "2.0.0"
    );
    host.ok(&["heartbeat"]);
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        1,
        "a refused updater is never handed a command again"
    );

    // 3.0.0 ships none: the host's own updater goes on; the agent moves.
    server.set_target("3.0.0", true);
    host.ok(&["update", "--now"]);
    assert!(host.wait_running("3.0.0"));
}

#[test]
fn systemd_manager_with_a_fake_systemctl_and_setup() {
    let server = Server::start();
    let host = Host::new();
    let fake = host.dir.path().join("fake-systemd");
    std::fs::create_dir_all(&fake).unwrap();
    let systemctl = host.dir.path().join("systemctl");
    write_exe(
        &systemctl,
        &format!(
            r#"#!/bin/sh
D={d}; U={u}
echo "$*" >> "$D/calls"
unitpid() {{ cat "$D/$1.pid" 2>/dev/null; }}
alive() {{ p=$(unitpid "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$p/stat; }}
case "$1" in
  daemon-reload) exit 0 ;;
  enable) [ "$2" = --now ] && shift; touch "$D/$2.enabled" ;;
  is-enabled) [ -f "$D/$3.enabled" ] ;;
  is-active) alive "$3" ;;
  show) if alive "$5"; then unitpid "$5"; else echo 0; fi ;;
  start) cmd=$(sed -n 's/^ExecStart=//p' "$U/$2"); setsid sh -c "exec $cmd" </dev/null >/dev/null 2>&1 & echo $! > "$D/$2.pid" ;;
  stop) p=$(unitpid "$2"); case "$p" in ""|*[!0-9]*|0|1) ;; *) kill -s KILL -- -"$p" 2>/dev/null;; esac; rm -f "$D/$2.pid"; true ;;
  reload-or-restart) "$0" stop "$2"; "$0" start "$2" ;;
  *) exit 1 ;;
esac
"#,
            d = fake.display(),
            u = host.units.display()
        ),
    );
    let mut host = host;
    host.env
        .push(("TERN_SYSTEMCTL".into(), systemctl.display().to_string()));
    for v in ["1.0.0", "2.0.0"] {
        let mut files = release_files(v, Agent::Good);
        let unit = format!(
            "[Service]\nExecStart={}/tern-agent {}\n",
            host.link.display(),
            host.state.display()
        );
        files.push((
            format!("agent-{v}/lib/systemd/system/tern-agent.service"),
            unit.into_bytes(),
            0o644,
        ));
        server.publish(v, &tarball(&files));
    }
    let cfg = host.dir.path().join("systemd.yaml");
    std::fs::write(&cfg, "manager: systemd\nname: tern-agent\nhealth_timeout: 3\nhealth_interval: 0.1\nstable_ticks: 4\n").unwrap();
    std::fs::write(fake.join("tern-agent.service.enabled"), "").unwrap();
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &cfg, &[]).status.code(), Some(0));
    assert!(host.wait_running("1.0.0"));
    let unit_link = std::fs::read_link(host.units.join("tern-agent.service")).unwrap();
    assert!(unit_link.ends_with("versions/1.0.0/lib/systemd/system/tern-agent.service"));
    server.set_target("2.0.0", true);
    host.ok(&["update", "--now"]);
    assert!(host.wait_running("2.0.0"));
    let calls = std::fs::read_to_string(fake.join("calls")).unwrap();
    assert!(
        calls.contains("daemon-reload") && calls.contains("reload-or-restart tern-agent.service"),
        "{calls}"
    );

    // setup: dry run prints, the real run writes under --systemd-dir and enables the timer.
    let out = String::from_utf8(
        host.run(&["setup", "--dry-run", "--agent-unit", "tern-agent"])
            .stdout,
    )
    .unwrap();
    assert!(
        out.contains("would write") && out.contains("OnUnitActiveSec=60s"),
        "{out}"
    );
    assert!(!host.systemd.exists());
    // A host without systemd (a container, OpenRC): setup says what to do instead of
    // systemctl's "System has not been booted with systemd", and writes nothing.
    let missing = host.dir.path().join("no-run-systemd");
    host.env.push((
        "TERN_SYSTEMD_RUNTIME_DIR".into(),
        missing.display().to_string(),
    ));
    let out = host.run(&["setup", "--agent-unit", "tern-agent"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("does not run systemd")
            && err.contains("cron")
            && err.contains("manager: command"),
        "{err}"
    );
    // The cron line it suggests runs updates as the timer would: with this host's
    // install dir and the other flags it was given, not the defaults.
    let cron = err
        .split('`')
        .find(|s| s.starts_with("* * * * * root "))
        .unwrap_or_else(|| panic!("no cron line: {err}"));
    for flag in [
        format!("--install-dir {}", host.install.display()),
        format!("--install-suffix {}", host.suffix),
    ] {
        assert!(cron.contains(&flag), "{flag} missing from {cron:?}");
    }
    assert!(
        cron.contains(" update >> /var/log/tern-update.log"),
        "{cron}"
    );
    assert!(!host.systemd.exists());
    // The stand-in systemctl answers for systemd again.
    host.env.pop();
    host.ok(&["setup", "--agent-unit", "tern-agent"]);
    assert!(host.systemd.join("tern-update.service").is_file());
    assert!(host.systemd.join("tern-update.timer").is_file());
    assert!(
        host.systemd
            .join("tern-agent.service.d/tern-update.conf")
            .is_file()
    );
    let calls = std::fs::read_to_string(fake.join("calls")).unwrap();
    assert!(calls.contains("enable --now tern-update.timer"), "{calls}");
    host.stop_agent();
    let _ = std::process::Command::new(&systemctl)
        .args(["stop", "tern-agent.service"])
        .status();
}
