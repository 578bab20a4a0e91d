//! Hosts following a channel (seed 001) on a real local fleet: ternd serves the channel
//! and the group's maintenance schedule, each host runs the real `tern-update` and a
//! real `tern-demo-agent`. Hosts check their window against the real clock, so the
//! tests place the group's window two hours after the current hour (closed
//! throughout the test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_e2e::Fleet;
use tern_e2e::channel::closed_window_fleet;
use tern_e2e::release::Release;

/// A fleet whose `prod` window is closed now, and `n` hosts in `prod` following the
/// channel `stable` at 1.0.0.
fn channel_fleet(n: usize) -> (Fleet, Vec<String>) {
    let releases = ["1.0.0", "1.1.0", "1.2.0", "2.0.0"]
        .map(Release::good)
        .to_vec();
    closed_window_fleet(releases, Some("1.0.0"), n).unwrap()
}

fn versions(f: &Fleet, names: &[String]) -> Vec<Option<String>> {
    names.iter().map(|n| f.host(n).running_version()).collect()
}

#[test]
fn a_critical_channel_update_reaches_every_host_outside_its_window() {
    let (f, names) = channel_fleet(3);

    // A new version, not critical: every host holds outside its window.
    f.ctl.run(&["channels", "set", "stable", "1.1.0"]).unwrap();
    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    assert_eq!(versions(&f, &names), vec![Some("1.0.0".into()); 3]);
    let st = f.host(&names[0]).status().unwrap();
    let why = st["server"]["update_now"].as_str().unwrap();
    assert!(why.contains("outside the maintenance window"), "{why}");
    assert_eq!(st["status"]["schedule"]["group"], "prod", "{st}");

    // The channel's CDN answers 503: nobody moves, even when critical.
    f.ctl
        .run(&["channels", "set", "stable", "1.1.0", "--critical"])
        .unwrap();
    f.gateway.fail_path("/v1/channels/stable/version");
    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    assert_eq!(versions(&f, &names), vec![Some("1.0.0".into()); 3]);
    let st = f.host(&names[0]).status().unwrap();
    assert!(
        st["status"]["channel"]["version"]
            .as_str()
            .unwrap()
            .contains("503"),
        "{st}"
    );

    // Healed, critical: one timer run moves every host, window or not.
    f.gateway.heal();
    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    assert!(
        f.wait_running(&names, "1.1.0").is_empty(),
        "{}",
        f.describe()
    );
    // ternd sees them there.
    let inv = f.inventory().unwrap();
    assert!(
        inv.iter()
            .filter(|e| e.group == "prod")
            .all(|e| e.version == "1.1.0" && e.healthy == Some(true)),
        "{inv:?}"
    );

    // Up a major (critical), then the channel points back at the older major: refused.
    f.ctl
        .run(&["channels", "set", "stable", "2.0.0", "--critical"])
        .unwrap();
    f.update_all();
    assert!(
        f.wait_running(&names, "2.0.0").is_empty(),
        "{}",
        f.describe()
    );
    f.ctl
        .run(&["channels", "set", "stable", "1.2.0", "--critical"])
        .unwrap();
    for (host, run) in f.update_all() {
        assert!(
            run.stderr.contains("major-version downgrade"),
            "{host}: {}",
            run.stderr
        );
    }
    assert_eq!(versions(&f, &names), vec![Some("2.0.0".into()); 3]);
}

#[test]
fn a_crash_looping_host_and_one_cut_off_from_ternd_move_outside_their_window() {
    let (f, names) = channel_fleet(3);
    let (sick, cut, well) = (&names[0], &names[1], &names[2]);
    f.ctl.run(&["channels", "set", "stable", "1.1.0"]).unwrap();

    // `sick`: its 1.0.0 crashes on this host at every start.
    f.host(sick).crash_on(&["1.0.0"]).unwrap();
    f.host(sick).kill_agent();
    // `cut`: its agent cannot reach ternd (a dead port) and gives up after a second,
    // as an agent cut off from its server for five minutes would.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    f.host(cut).agent_server(&dead_addr, 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while f.host(cut).running_version().is_some() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(
        f.host(cut).running_version(),
        None,
        "the cut-off agent exited"
    );
    let log = std::fs::read_to_string(f.host(cut).state.join("agent.log")).unwrap();
    assert!(log.contains("has not answered"), "{log}");
    // ternd hears that it is down.
    f.host(cut).heartbeat().unwrap();
    let entry = f.inventory_of(cut).unwrap().unwrap();
    assert_eq!(entry.healthy, Some(false), "{entry:?}");
    // The new version reaches its server (the host's network was fixed, or the release
    // fixes what cut it off).
    f.host(cut)
        .agent_server(&f.ternd.addr.to_string(), 300)
        .unwrap();

    for (host, run) in f.update_all() {
        assert!(run.ok(), "{host}: {}", run.message());
    }
    // The two unhealthy hosts moved, outside their window; the healthy one waits.
    assert!(
        f.wait_running(&[sick.clone(), cut.clone()], "1.1.0")
            .is_empty(),
        "{}",
        f.describe()
    );
    assert_eq!(f.host(well).running_version().as_deref(), Some("1.0.0"));
    let st = f.host(sick).status().unwrap();
    assert!(st["status"]["last_forced_attempt"].is_string(), "{st}");

    // Unhealthy again at once: no second forced attempt within half an hour.
    f.ctl.run(&["channels", "set", "stable", "1.2.0"]).unwrap();
    f.host(sick).crash_on(&["1.1.0"]).unwrap();
    f.host(sick).kill_agent();
    let run = f.host(sick).update().unwrap();
    assert!(
        run.stderr.contains("the next try is after"),
        "{}",
        run.stderr
    );
    assert_eq!(f.host(sick).linked_version().as_deref(), Some("1.1.0"));
}
