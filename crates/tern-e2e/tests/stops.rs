//! Stops hold every path, on real processes (docs/rollouts.md, "Stops hold every
//! path"): a real ternd with a dev clock and hosts running the real `tern-update` and
//! a real agent. A host enrolled during a freeze installs the last known-good version,
//! never the frozen target; with the release root, ternd refuses a revoked version
//! wherever one is written; a pinned host whose new version fails never rolls back
//! onto a revoked one. Each run ends with the fleet-safety checker over every install.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::halt_on_error;
use tern_e2e::channel::closed_window_fleet;
use tern_e2e::{Fleet, FleetOptions};

const MON: &str = "2026-11-23";

fn at(hm: &str) -> String {
    format!("{MON}T{hm}:00Z")
}

/// dev on 1.1.0 starts a rollout to 1.2.0, which crashes on start; the fleet is frozen
/// for exactly that reason while dev is still active. A host enrolled now must install
/// 1.1.0 (find names it: the start version) and run it, never the frozen 1.2.0 (which
/// would leave it with no agent at all, retrying 1.2.0).
#[test]
fn a_host_enrolled_during_a_freeze_installs_the_start_version_not_the_frozen_target() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]))
        .unwrap();
    f.set_version("1.1.0", "1.1.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.2.0").unwrap();
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    assert_eq!(f.status().unwrap().state_of("dev"), "active");
    f.agents(&["freeze", "--reason", "1.2.0 crashes on start"])
        .unwrap();
    let host = f.add_host("dev-new", "dev").unwrap();
    assert_eq!(host.linked_version().as_deref(), Some("1.1.0"));
    assert!(
        f.wait_running(&["dev-new".to_string()], "1.1.0").is_empty(),
        "{}",
        f.describe()
    );
    // Its later runs hold, saying why: the freeze.
    let step = f.tick("5m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let status = f.host("dev-new").status().unwrap();
    let why = status["server"]["update_now"].as_str().unwrap_or_default();
    assert!(why.contains("frozen"), "{why}");
    assert_eq!(f.host("dev-new").linked_version().as_deref(), Some("1.1.0"));
    f.check_invariant().unwrap();
}

/// The fleet's last known-good version is itself revoked (the scenario of
/// `tern_e2e::crossing`, which `planted.rs` plays with the hole open): a frozen fleet
/// whose start version 1.0.0 the release keys revoked, and a host enrolled through a
/// replica with the release root. It has nothing it may install (the target is frozen,
/// the known-good version revoked): it enrolls, installs nothing, and says both. The
/// fleet's trace carries the signed minimum, so the checker would convict an install
/// of 1.0.0 on its own.
#[test]
fn a_host_enrolled_under_a_freeze_installs_nothing_when_the_known_good_version_is_revoked() {
    let f = tern_e2e::crossing::enrolled_while_known_good_revoked().unwrap();
    let h = f.host("dev-new");
    assert_eq!(h.linked_version(), None, "{}", f.describe());
    assert!(
        h.started_versions().is_empty(),
        "{:?}",
        h.started_versions()
    );
    let status = h.status().unwrap();
    let why = status["server"]["update_now"].as_str().unwrap_or_default();
    assert!(
        why.contains("frozen") && why.contains("revoked"),
        "the host must say what holds it: {status}"
    );
    // Its later runs hold too.
    let step = f.tick("5m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_eq!(f.host("dev-new").linked_version(), None);
    f.check_invariant().unwrap();
}

/// With `--trust-root`, a revoked version is refused wherever a version is written,
/// naming the minimum: a version resource's start version (a rollback would send
/// hosts to it), a channel (also served on Teleport's channel path), a directive
/// draft. The target's own check was there before.
#[test]
fn ternd_with_the_release_root_refuses_a_revoked_version_wherever_one_is_written() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.0.0", "1.1.0"]).unwrap();
    f.set_version("1.1.0", "1.1.0", "regular").unwrap();
    let i = tern_e2e::sign::verifying_replica(&mut f, &root).unwrap();
    // The release keys revoke 1.0.0: line 1's signed minimum becomes 1.1.0.
    tern_e2e::sign::minimum(&f, "1", "1.1.0").unwrap();
    let ctl = &f.replicas[i].ctl;

    // A version resource whose start version is revoked.
    let file = f.path().join("revoked-start.yaml");
    std::fs::write(
        &file,
        tern_core::fixtures::version("1.0.0", "1.1.0", "regular"),
    )
    .unwrap();
    let err = ctl
        .run(&["create", "--force", "-f", file.to_str().unwrap()])
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("spec.agents.start_version 1.0.0 is revoked")
            && err.contains("below the signed minimum 1.1.0 of release line 1"),
        "{err}"
    );
    // new-rollout naming the revoked version as where hosts start from.
    let err = ctl
        .run(&[
            "agents",
            "new-rollout",
            "1.1.0",
            "--current-version",
            "1.0.0",
        ])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("current_version 1.0.0 is revoked"),
        "{err:#}"
    );
    // A channel set to it.
    let err = ctl
        .run(&["channels", "set", "stable", "1.0.0"])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("version 1.0.0 is revoked"),
        "{err:#}"
    );
    let listed = ctl.run(&["channels", "ls"]).unwrap();
    assert!(!listed.contains("stable"), "{listed}");
    // A directive draft naming it.
    let draft = f.path().join("draft.yaml");
    std::fs::write(
        &draft,
        "kind: version_directive\nversion: v1\nmetadata: {name: pinned-old}\nspec:\n  directives:\n    - name: all\n      selectors: [{labels: {env: prod}}]\n      targets: [{version: \"1.0.0\"}]\n      installers: [record]\n",
    )
    .unwrap();
    let err = ctl
        .run(&["version-control", "draft", "-f", draft.to_str().unwrap()])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("spec.directives[0].targets[0].version 1.0.0 is revoked"),
        "{err:#}"
    );
    // A signed, allowed version goes through everywhere.
    ctl.run(&["channels", "set", "stable", "1.1.0"]).unwrap();
}

/// A pinned host whose new version crashes never rolls back onto a version the release
/// keys revoked since it was installed: with nothing allowed on disk it stays on the
/// failing version, does not retry it, and says so (its status, ternd's inventory).
#[test]
fn a_pinned_host_never_rolls_back_onto_a_revoked_version() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.1.0", "1.2.0"]).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0)])).unwrap();
    f.set_version("1.1.0", "1.1.0", "regular").unwrap();
    let server = f.gateway.url.clone();
    let root_arg = root.display().to_string();
    f.add_host_via("signed-1", "dev", &server, &["--trust-root", &root_arg])
        .unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_eq!(
        f.host("signed-1").linked_version().as_deref(),
        Some("1.1.0")
    );
    // 1.1.0 is revoked (line 1.1's minimum 1.1.1), and 1.2.0, signed, crashes on start.
    tern_e2e::sign::minimum(&f, "1.1", "1.1.1").unwrap();
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.2.0").unwrap();
    let step = f.step_at(&at("10:05")).unwrap();
    let failed = step
        .failures()
        .into_iter()
        .find(|(h, _)| h == "signed-1")
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("the update did not fail\n{}", f.describe()));
    assert!(
        failed.contains("1.1.0 is revoked") || failed.contains("not rolled back"),
        "{failed}"
    );
    let h = f.host("signed-1");
    assert_eq!(h.linked_version().as_deref(), Some("1.2.0"), "{failed}");
    let status = h.status().unwrap();
    let error = status["status"]["last_update"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("not rolled back") && error.contains("revoked"),
        "{status}"
    );
    assert_eq!(status["status"]["skip"], "1.2.0", "{status}");
    // It does not retry 1.2.0, and never installs 1.1.0 again.
    let step = f.tick("10m").unwrap();
    assert!(
        step.failures().iter().all(|(h, _)| h != "signed-1"),
        "{:?}",
        step.failures()
    );
    assert_eq!(
        f.host("signed-1").linked_version().as_deref(),
        Some("1.2.0")
    );
    let entry = f.inventory_of("signed-1").unwrap().unwrap();
    assert_eq!(entry.failed_version.as_deref(), Some("1.2.0"), "{entry:?}");
}

/// A `local-script` directive of the updater's ternd while the agents' ternd is
/// frozen (`tern_e2e::crossing`): the host's updater namespace refuses the
/// instruction, saying the agents' ternd holds every update of the host; the script
/// never runs; the updater's ternd records no successful install; the checker finds
/// nothing over the trace.
#[test]
fn a_local_script_updater_directive_holds_while_the_agents_ternd_is_frozen() {
    let s = tern_e2e::crossing::script_directive_while_agents_frozen().unwrap();
    assert!(s.ran.is_empty(), "the script ran: {:?}", s.ran);
    assert!(
        s.runs
            .iter()
            .any(|o| o.stderr.contains("holds every update of this host")),
        "no run said why it held: {:?}",
        s.runs.iter().map(|o| &o.stderr).collect::<Vec<_>>()
    );
    let id = s.host.updater_id().unwrap();
    let show = s.upd.ctl.json(&["inventory", "show", &id]).unwrap();
    let result = &show["agent"]["install_result"];
    assert!(
        !result.is_null() && result["success"] == false,
        "the updater's ternd must hear of the refused attempt, not a success: {show}"
    );
    s.agents.check_invariant().unwrap();
}

/// A server pin holds a host following a channel, even for a critical version outside
/// its window (which moves every other host of the channel): the pinned host stays on
/// the channel's old version and says why; its peer moves. The fleet's checker runs
/// over both hosts' installs (channel installs, the pin recorded).
#[test]
fn a_server_pin_holds_a_channel_host_even_for_a_critical_version() {
    // Channel hosts check their window by the real clock: closed throughout, so only
    // `critical` could move them.
    let (f, names) = closed_window_fleet(tern_e2e::release::standard(), Some("1.0.0"), 2).unwrap();
    // A step records the hosts' first installs before the pin exists.
    let step = f.step().unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let pinned = f.host(&names[0]).updater_id().unwrap();
    f.ctl
        .run(&["inventory", "pin", &pinned, "--until", "2099-01-01"])
        .unwrap();
    f.ctl
        .run(&["channels", "set", "stable", "1.1.0", "--critical"])
        .unwrap();
    let step = f.step().unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert!(
        f.wait_running(&names[1..], "1.1.0").is_empty(),
        "the unpinned host follows the critical version: {}",
        f.describe()
    );
    assert_eq!(
        f.host(&names[0]).linked_version().as_deref(),
        Some("1.0.0"),
        "{}",
        f.describe()
    );
    let status = f.host(&names[0]).status().unwrap();
    let why = status["server"]["update_now"].as_str().unwrap_or_default();
    assert!(why.contains("pinned"), "{status}");
    f.check_invariant().unwrap();
}

/// A channel set to a version the release keys revoke afterwards (set through a
/// replica without the root, which checks nothing): a replica with the release root
/// serves the channel as held, on the channel path and on Teleport's; a host enrolling
/// on the channel through it installs nothing and says why; once the channel names an
/// allowed version, the host enrolls on it.
#[test]
fn a_channel_naming_a_version_revoked_since_is_held_for_new_hosts() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(&halt_on_error(&[("prod", 10, 0, 0)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.ctl.run(&["channels", "set", "stable", "1.0.0"]).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.0.0", "1.1.0"]).unwrap();
    tern_e2e::sign::minimum(&f, "1", "1.1.0").unwrap();
    let i = tern_e2e::sign::verifying_replica(&mut f, &root).unwrap();
    let gateway = f.replicas[i].gateway.url.clone();
    let channel = format!("{gateway}/v1/channels/stable");
    let addr = f.replicas[i].ternd.addr;
    let get = |path: &str| {
        let (code, body) =
            tern_testing::http::get(addr, path, std::time::Duration::from_secs(5)).unwrap();
        (code, String::from_utf8_lossy(&body).trim().to_string())
    };
    let (code, body) = get("/v1/channels/stable/version");
    assert!(code != 200 && body.contains("revoked"), "{code} {body}");
    // Teleport's path answers as Teleport's version server does when there is nothing
    // to move to.
    assert_eq!(
        get("/v1/webapi/automaticupgrades/channel/stable/version"),
        (200, "none".to_string())
    );
    let err = match f.add_host_via("prod-1", "prod", &gateway, &["--channel", &channel]) {
        Ok(h) => panic!(
            "the host enrolled on the revoked channel version, running {:?}",
            h.linked_version()
        ),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("revoked"), "{err}");
    assert!(
        !f.path().join("hosts/prod-1/agent/agent.log").exists(),
        "{err}"
    );
    // The operator moves the channel to an allowed version: the next host takes it.
    f.replicas[i]
        .ctl
        .run(&["channels", "set", "stable", "1.1.0"])
        .unwrap();
    let h = f
        .add_host_via("prod-2", "prod", &gateway, &["--channel", &channel])
        .unwrap();
    assert_eq!(h.linked_version().as_deref(), Some("1.1.0"));
    f.check_invariant().unwrap();
}

/// A replica with the release root that is already running hears of a revocation
/// signed after it started with nothing written to it (no check of a written version
/// brings the minimums): its refresh (`--trust-refresh`, 1 s here) holds the revoked
/// target on find, and a host that pins no root, so that only ternd's answer protects
/// it, installs nothing through that replica. Ends with the checker over every install.
#[test]
fn a_running_replica_holds_a_version_revoked_after_it_started_with_nothing_written() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.0.0", "1.1.0"]).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let meta = f.artifacts.join("tuf/metadata").display().to_string();
    let root_arg = root.display().to_string();
    let i = f
        .add_replica(&[
            "--trust-root",
            &root_arg,
            "--trust-url",
            &meta,
            "--trust-refresh",
            "1s",
        ])
        .unwrap();
    let gateway = f.replicas[i].gateway.url.clone();
    let addr = f.replicas[i].ternd.addr;
    f.add_host_via("dev-1", "dev", &gateway, &[]).unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_eq!(f.host("dev-1").linked_version().as_deref(), Some("1.0.0"));

    // dev starts a rollout to 1.1.0, signed and allowed: the replica names it.
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    let find = || {
        let (code, body) = tern_testing::http::get(
            addr,
            "/v1/webapi/find?group=dev&updater_id=dev-1",
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(code, 200, "{body}");
        body
    };
    // Waits (at most 30 s) for the replica's answer to satisfy `fact`.
    let find_until = |fact: &dyn Fn(&serde_json::Value) -> bool, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let body = find();
            if fact(&body) {
                return body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the replica's find did not come to {what} in 30 s: {body}"
            );
            // The dev clock moves only when told: reconciles bring dev's start to the
            // store, which the replica watches.
            f.reconcile().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let before = find_until(
        &|b| b["auto_update"]["agent_auto_update"] == true,
        "name 1.1.0 now",
    );
    assert_eq!(before["auto_update"]["agent_version"], "1.1.0", "{before}");

    // The release keys revoke 1.1.0 (line 1.1's minimum 1.1.1). Nothing is written to
    // the replica: only its refresh can bring the minimum.
    tern_e2e::sign::minimum(&f, "1.1", "1.1.1").unwrap();
    let held = find_until(
        &|b| {
            b["auto_update"]["agent_holds"]
                .as_array()
                .is_some_and(|h| h.iter().any(|c| c == "revoked"))
        },
        "hold 1.1.0 as revoked",
    );
    assert_eq!(held["auto_update"]["agent_auto_update"], false, "{held}");
    assert_ne!(held["auto_update"]["agent_version"], "1.1.0", "{held}");

    // The host runs: it installs nothing and stays on 1.0.0.
    let step = f.tick("5m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let h = f.host("dev-1");
    assert_eq!(
        h.linked_version().as_deref(),
        Some("1.0.0"),
        "{}",
        f.describe()
    );
    assert!(
        !h.started_versions().iter().any(|v| v == "1.1.0"),
        "{:?}",
        h.started_versions()
    );
    f.check_invariant().unwrap();
}

/// Hosts on 1.0.0 while the fleet's known-good version is already 1.1.0 (the version
/// resource says start 1.1.0, target 1.2.0), dev active, the fleet frozen: find names
/// them 1.1.0 with the freeze. The fleet and its two dev hosts.
fn behind_the_known_good_and_frozen() -> (Fleet, Vec<String>) {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let names = f.add_hosts("dev", 2).unwrap();
    f.tick("2m").unwrap();
    f.set_version("1.1.0", "1.2.0", "regular").unwrap();
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    f.agents(&["freeze", "--reason", "incident"]).unwrap();
    (f, names)
}

/// `tern-update update --now` (a person on the host asking not to wait for the
/// window) does not jump a stop ([`behind_the_known_good_and_frozen`]): `--now`
/// installs nothing; each host stays on the version it runs and says the freeze holds
/// it.
#[test]
fn update_now_does_not_jump_a_freeze() {
    let (f, names) = behind_the_known_good_and_frozen();
    for name in &names {
        let out = f.host(name).run(&["update", "--now"]).unwrap();
        assert!(out.ok(), "{name}: {}", out.stderr);
        assert!(out.stderr.contains("frozen"), "{name}: {}", out.stderr);
    }
    let step = f.tick("1m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    still_on(&f, &names, "1.0.0");
    f.check_invariant().unwrap();
}

/// Asserts that every host of `names` still links `version`.
fn still_on(f: &Fleet, names: &[String], version: &str) {
    for name in names {
        assert_eq!(
            f.host(name).linked_version().as_deref(),
            Some(version),
            "{name}: {}",
            f.describe()
        );
    }
}

/// An agent that is down is not repaired through a stop
/// ([`behind_the_known_good_and_frozen`]): its updater sees it unhealthy, but installs
/// nothing while the freeze holds, though find names a version other than the one it
/// runs; it says both. (one_gate.rs's hosts already run the version the stop names, so
/// a repair there has nothing to install.)
#[test]
fn an_agent_that_is_down_is_not_repaired_through_a_freeze() {
    let (f, names) = behind_the_known_good_and_frozen();
    for name in &names {
        f.host(name).kill_agent();
    }
    for _ in 0..3 {
        let step = f.tick("5m").unwrap();
        assert!(step.failures().is_empty(), "{:?}", step.failures());
    }
    still_on(&f, &names, "1.0.0");
    for name in &names {
        let status = f.host(name).status().unwrap();
        let why = status["server"]["update_now"].as_str().unwrap_or_default();
        assert!(why.contains("frozen"), "{name}: {status}");
    }
    f.check_invariant().unwrap();
}
