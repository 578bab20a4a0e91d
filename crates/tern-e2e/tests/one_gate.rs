//! The one gate (DESIGN.md: no shortcut goes around a hold), on a real local fleet:
//! ternd with a dev clock and hosts running the real `tern-update` and a real agent.
//! A host whose agent is down, or which is two majors behind its target, may act before
//! its turn only where find's hold allows it; a freeze, a pin, a mode that is not
//! enabled or a group that has not started holds it, whatever it sees of its agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::{group, halt_on_error, halt_on_error_config, version};
use tern_e2e::channel::closed_window_fleet;
use tern_e2e::release::{self, Release};
use tern_e2e::{Fleet, FleetOptions};

const MON: &str = "2026-11-23";

fn at(hm: &str) -> String {
    format!("{MON}T{hm}:00Z")
}

/// dev (10:00, no canary) and prod (14:00), two hosts each on 1.0.0, settled; the
/// releases include a 3.0.0 two majors ahead.
fn fleet() -> Fleet {
    let mut releases = release::standard();
    releases.push(Release::good("3.0.0"));
    let mut f = Fleet::start(FleetOptions {
        releases,
        ..FleetOptions::default()
    })
    .unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]))
        .unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    f.add_hosts("prod", 2).unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    f
}

/// Every host still links `version` (nothing was installed over it).
fn all_linked(f: &Fleet, version: &str) {
    let off: Vec<_> = f
        .hosts
        .iter()
        .filter(|h| h.linked_version().as_deref() != Some(version))
        .map(|h| (h.name.clone(), h.linked_version()))
        .collect();
    assert!(
        off.is_empty(),
        "expected every host on {version}: {off:?}\n{}",
        f.describe()
    );
}

/// Kills every host's agent: each one's next `tern-update update` sees it unhealthy.
fn kill_all_agents(f: &Fleet) {
    for h in &f.hosts {
        h.kill_agent();
    }
}

/// What a host's `status` says the server answered and what it does about it.
fn update_now(f: &Fleet, name: &str) -> String {
    let st = f.host(name).status().unwrap();
    st["server"]["update_now"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_freeze_holds_hosts_whose_agent_is_down() {
    let f = fleet();
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    // dev starts in its window (find now names 1.1.0 to its hosts), and before any
    // host has run, the fleet is frozen and every agent goes down: nobody installs
    // 1.1.0, though find still names it.
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    assert_eq!(f.status().unwrap().state_of("dev"), "active");
    f.agents(&["freeze", "--reason", "incident 42: agents crash on start"])
        .unwrap();
    kill_all_agents(&f);
    for _ in 0..3 {
        let step = f.tick("5m").unwrap();
        assert!(step.failures().is_empty(), "{:?}", step.failures());
    }
    all_linked(&f, "1.0.0");
    let why = update_now(&f, "dev-1");
    assert!(why.contains("frozen"), "{why}");
    assert!(
        why.contains("unhealthy"),
        "the host says what it saw: {why}"
    );

    // Lifted: dev moves in its window, prod does not (not started).
    f.agents(&["unfreeze"]).unwrap();
    f.tick("2m").unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    for h in ["dev-1", "dev-2"] {
        assert_eq!(f.host(h).linked_version().as_deref(), Some("1.1.0"), "{h}");
    }
    for h in ["prod-1", "prod-2"] {
        assert_eq!(f.host(h).linked_version().as_deref(), Some("1.0.0"), "{h}");
    }
}

#[test]
fn a_server_pin_a_suspended_mode_and_an_unstarted_group_hold_hosts_whose_agent_is_down() {
    let f = fleet();
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    assert_eq!(f.status().unwrap().state_of("dev"), "active");
    // dev is active (find names 1.1.0) but, before any host ran, dev-1 is pinned from
    // the server, the rollout suspended, and every agent goes down.
    let id = f.host("dev-1").updater_id().unwrap();
    f.ctl
        .run(&[
            "inventory",
            "pin",
            &id,
            "--until",
            &at("23:00"),
            "--reason",
            "db migration",
        ])
        .unwrap();
    f.agents(&["suspend"]).unwrap();
    kill_all_agents(&f);
    f.tick("5m").unwrap();
    f.tick("5m").unwrap();
    all_linked(&f, "1.0.0");
    let why = update_now(&f, "dev-2");
    assert!(
        why.contains("mode_suspended") && why.contains("unhealthy"),
        "{why}"
    );

    // Resumed: dev-2 goes; the pinned dev-1 holds with its agent down, and the
    // unstarted prod stays on its group's version.
    f.agents(&["resume"]).unwrap();
    kill_all_agents(&f);
    f.tick("2m").unwrap();
    f.tick("2m").unwrap();
    assert_eq!(f.host("dev-2").linked_version().as_deref(), Some("1.1.0"));
    for h in ["dev-1", "prod-1", "prod-2"] {
        assert_eq!(f.host(h).linked_version().as_deref(), Some("1.0.0"), "{h}");
    }
    let why = update_now(&f, "dev-1");
    assert!(why.contains("pinned") && why.contains("unhealthy"), "{why}");
}

/// Seed 000's "too far behind, update at once" never moves a host the server holds:
/// with the mode disabled (and under a freeze), healthy 1.x hosts stay put instead of
/// jumping to 3.0.0 with no canary, window or group order.
#[test]
fn hosts_two_majors_behind_wait_for_their_group_under_a_hold() {
    let f = fleet();
    f.clock_set(&at("09:30")).unwrap();
    f.apply(&halt_on_error_config(
        "disabled",
        &[group("dev", 10), group("prod", 14)],
    ))
    .unwrap();
    f.apply(&version("1.0.0", "3.0.0", "regular")).unwrap();
    f.clock_set(&at("10:05")).unwrap();
    for _ in 0..2 {
        let step = f.tick("5m").unwrap();
        assert!(step.failures().is_empty(), "{:?}", step.failures());
    }
    all_linked(&f, "1.0.0");
    // Under the stop the server names the last known-good version, which the host
    // runs: it holds there and says why.
    let why = update_now(&f, "dev-1");
    assert!(
        why.contains("mode_disabled") && why.contains("holds this host"),
        "{why}"
    );

    // Enabled again but frozen: still nobody.
    f.agents(&["freeze", "--reason", "3.0.0 under review"])
        .unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]))
        .unwrap();
    f.tick("5m").unwrap();
    all_linked(&f, "1.0.0");
    // Unfrozen: the group order decides, dev first; prod stays until its turn.
    f.agents(&["unfreeze"]).unwrap();
    f.tick("2m").unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_eq!(f.host("dev-1").linked_version().as_deref(), Some("3.0.0"));
    assert_eq!(f.host("prod-1").linked_version().as_deref(), Some("1.0.0"));
}

/// Hosts following a channel get the cluster's maintenance window from ternd's config
/// alone, before any version or rollout exists, and hold a non-critical version
/// outside it (seed 001). Hosts check their window on the real clock: the window is
/// placed two hours after the current hour.
#[test]
fn channel_hosts_follow_the_configs_window_before_any_rollout_exists() {
    // No version: no rollout.
    let releases = ["1.0.0", "1.1.0", "1.1.1"].map(Release::good).to_vec();
    let (f, names) = closed_window_fleet(releases, None, 2).unwrap();

    f.ctl.run(&["channels", "set", "stable", "1.1.0"]).unwrap();
    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    for n in &names {
        assert_eq!(f.host(n).linked_version().as_deref(), Some("1.0.0"), "{n}");
    }
    let st = f.host(&names[0]).status().unwrap();
    assert_eq!(st["status"]["schedule"]["group"], "prod", "{st}");
    let why = st["server"]["update_now"].as_str().unwrap();
    assert!(why.contains("outside the maintenance window"), "{why}");

    // Critical: at once, window or not.
    f.ctl
        .run(&["channels", "set", "stable", "1.1.1", "--critical"])
        .unwrap();
    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    assert!(
        f.wait_running(&names, "1.1.1").is_empty(),
        "{}",
        f.describe()
    );
}

/// A canary that cannot install the target (its artifact is not published: 404) is a
/// failed canary, not a canary "pending" for hours: ternd says why, in the group, the
/// host's inventory entry and an `install_refused` alert, and the next group never
/// starts.
#[test]
fn a_canary_that_cannot_install_the_target_fails_and_ternd_says_why() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 1, 0), ("prod", 11, 0, 0)]))
        .unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    f.add_hosts("prod", 2).unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    // The canary tenure (ten minutes by default) passes before the window.
    f.clock_set(&at("09:30")).unwrap();
    // 1.3.0 was never published: its .sha256 and tarball answer 404.
    f.new_rollout("1.3.0").unwrap();
    let mut step = f.step_at(&at("10:05")).unwrap();
    for _ in 0..3 {
        if step.status.group("dev").canaries.iter().any(|c| c.failed) {
            break;
        }
        step = f.tick("5m").unwrap();
    }
    let dev = step.status.group("dev");
    assert!(
        dev.canaries.iter().any(|c| c.failed),
        "the canary failed: {}",
        f.describe()
    );
    assert_eq!(dev.last_update_reason, "canary_failed");
    assert_eq!(dev.refused.get("artifact_missing"), Some(&1), "{dev:?}");
    let alerts = &step.status.rollout.as_ref().unwrap().status.alerts;
    let refused = alerts
        .iter()
        .find(|a| a.kind == "install_refused")
        .unwrap_or_else(|| panic!("no install_refused alert: {alerts:?}"));
    assert!(
        refused.message.contains("artifact_missing"),
        "{}",
        refused.message
    );
    let canary = &dev.canaries[0].updater_id;
    let name = f.host_by_updater_id(canary).unwrap().name.clone();
    let entry = f.inventory_of(&name).unwrap().unwrap();
    let failure = entry
        .install_failure
        .expect("the inventory shows the failure");
    assert_eq!(
        (failure.version.as_str(), failure.kind.as_str()),
        ("1.3.0", "artifact_missing")
    );
    // `agents status` says it in the group's row.
    let text = f.agents(&["status"]).unwrap();
    assert!(
        text.contains("could not install: 1 artifact_missing"),
        "{text}"
    );

    // prod's window comes and goes: it never starts, and nobody runs 1.3.0.
    let step = f.step_at(&at("11:05")).unwrap();
    assert_eq!(step.status.state_of("prod"), "unstarted");
    all_linked(&f, "1.0.0");
}

/// Hosts following a channel with `--group prod` (for prod's window) are not counted
/// in the rollout's prod: an unhealthy one neither fails prod nor raises an alert, and
/// the inventory says which way each host follows.
#[test]
fn channel_hosts_are_not_counted_in_the_rollout_group_they_name() {
    let mut f = fleet();
    f.ctl.run(&["channels", "set", "stable", "1.0.0"]).unwrap();
    let channel = f.add_channel_hosts("prod", 1, "stable").unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    f.host(&channel[0]).kill_agent();
    f.heartbeat_all();
    let step = f.tick("2m").unwrap();
    let prod = step.status.group("prod");
    assert_eq!((prod.present, prod.failed), (2, 0), "{prod:?}");
    let entry = f.inventory_of(&channel[0]).unwrap().unwrap();
    assert_eq!(entry.model.as_str(), "channel");
    assert_eq!(entry.healthy, Some(false));
    assert!(!entry.counted);
    let out = f.new_rollout("1.1.0").unwrap();
    assert!(!out.contains("failed"), "{out}");
    let step = f.tick("2m").unwrap();
    let alerts = &step.status.rollout.as_ref().unwrap().status.alerts;
    assert!(alerts.is_empty(), "{alerts:?}");
}
