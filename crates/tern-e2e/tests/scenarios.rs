//! Rollouts on a real local fleet: ternd with a dev clock, and hosts that each run the
//! real `tern-update` (command service manager) and a real `tern-demo-agent` process,
//! downloading real tarballs over loopback. Times are UTC; the clock starts on
//! Monday 2026-11-23 09:00.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::{halt_on_error, time_based, version};
use tern_e2e::release::{self, Release};
use tern_e2e::{Fleet, FleetOptions, Step, render};

const MON: &str = "2026-11-23";
const TUE: &str = "2026-11-24";

fn at(day: &str, hm: &str) -> String {
    format!("{day}T{hm}:00Z")
}

/// A fleet with `config` applied, every host enrolled on 1.0.0 and settled (counted
/// in ternd's report).
fn fleet_with(config: &str, hosts: &[(&str, usize)], releases: Vec<Release>) -> Fleet {
    let mut f = Fleet::start(FleetOptions {
        releases,
        ..FleetOptions::default()
    })
    .unwrap();
    f.apply(config).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    for (group, n) in hosts {
        f.add_hosts(group, *n).unwrap();
    }
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(
        &f,
        &f.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
        "1.0.0",
    );
    f
}

fn fleet(config: &str, hosts: &[(&str, usize)]) -> Fleet {
    fleet_with(config, hosts, release::standard())
}

/// Every host in `names` runs `version` (a live agent process that says so).
fn assert_on(f: &Fleet, names: &[String], version: &str) {
    let bad = f.wait_running(names, version);
    assert!(
        bad.is_empty(),
        "expected {version} on {names:?}; not there: {bad:?}\n{}",
        f.describe()
    );
}

fn names(f: &Fleet, group: &str) -> Vec<String> {
    f.group_hosts(group)
}

fn show(f: &Fleet, step: &Step) {
    eprint!(
        "{}{}",
        render::table(f, &step.status),
        render::actions(step)
    );
}

/// Steps every 10 minutes until `group` is in `state` (at most `n` steps).
fn until(f: &Fleet, group: &str, state: &str, n: usize) -> Step {
    let mut step = f.step().unwrap();
    show(f, &step);
    for _ in 0..n {
        if step.status.state_of(group) == state {
            break;
        }
        step = f.tick("10m").unwrap();
        show(f, &step);
    }
    assert_eq!(step.status.state_of(group), state, "{}", f.describe());
    step
}

/// The hosts that are canaries of `group` now.
fn canaries(f: &Fleet, step: &Step, group: &str) -> Vec<String> {
    let mut v: Vec<String> = step
        .status
        .group(group)
        .canaries
        .iter()
        .map(|c| f.host_by_updater_id(&c.updater_id).unwrap().name.clone())
        .collect();
    v.sort();
    v
}

/// A rollout to `version` started at 09:30; at 10:00 dev starts and picks its one
/// canary: its name.
fn dev_canary_of_rollout(f: &Fleet, version: &str) -> String {
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout(version).unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    f.reconcile().unwrap();
    let status = f.status().unwrap();
    f.host_by_updater_id(&status.group("dev").canaries[0].updater_id)
        .unwrap()
        .name
        .clone()
}

fn failed_hosts(step: &Step) -> Vec<String> {
    let mut v: Vec<String> = step.failures().into_iter().map(|(h, _)| h).collect();
    v.sort();
    v
}

#[test]
fn happy_path_over_three_groups_with_wait_hours() {
    let f = fleet(
        &halt_on_error(&[
            ("dev", 10, 0, 0),
            ("staging", 12, 1, 0),
            ("prod", 14, 0, 24),
        ]),
        &[("dev", 2), ("staging", 2), ("prod", 2)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();

    // 10:00 dev opens: it updates; nobody else moves.
    f.clock_set(&at(MON, "10:00")).unwrap();
    let step = until(&f, "dev", "done", 3);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &names(&f, "dev"), "1.1.0");
    assert_on(&f, &names(&f, "staging"), "1.0.0");
    assert_eq!(step.status.state_of("staging"), "unstarted");

    // 12:00 staging: one canary first, then the rest.
    let step = f.step_at(&at(MON, "12:00")).unwrap();
    show(&f, &step);
    let c = canaries(&f, &step, "staging");
    assert_eq!(c.len(), 1);
    assert_on(&f, &c, "1.1.0");
    assert_ne!(step.status.state_of("staging"), "unstarted");
    let step = until(&f, "staging", "done", 4);
    assert_on(&f, &names(&f, "staging"), "1.1.0");
    assert_eq!(step.status.state_of("prod"), "unstarted");

    // 14:00 the same day: prod's window is open but 24h have not passed.
    let step = f.step_at(&at(MON, "14:00")).unwrap();
    show(&f, &step);
    let prod = step.status.group("prod");
    assert_eq!(prod.state.as_str(), "unstarted");
    assert_eq!(prod.last_update_reason, "wait_hours_not_elapsed");
    assert_on(&f, &names(&f, "prod"), "1.0.0");

    // Tuesday 14:00: prod goes.
    f.clock_set(&at(TUE, "14:00")).unwrap();
    let step = until(&f, "prod", "done", 3);
    assert_on(&f, &names(&f, "prod"), "1.1.0");
    assert_eq!(step.status.rollout_state(), "done");
    assert_eq!(step.status.up_to_date, 6);
    assert_eq!(step.status.failed, 0);
}

/// Failure mode 1: the new version crashes on the canaries.
#[test]
fn failure_mode_1_broken_version_stops_at_the_canaries() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 2, 0), ("prod", 14, 0, 0)]),
        &[("dev", 4), ("prod", 2)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.2.0").unwrap();

    let step = f.step_at(&at(MON, "10:00")).unwrap();
    show(&f, &step);
    let c = canaries(&f, &step, "dev");
    assert_eq!(c.len(), 2);
    // Exactly the canaries tried 1.2.0, crashed, and rolled back.
    assert_eq!(failed_hosts(&step), c, "{:?}", step.failures());
    for (_, msg) in step.failures() {
        assert!(
            msg.contains("1.2.0") && msg.contains("rolled back"),
            "{msg}"
        );
        assert!(msg.contains("runs 1.0.0 and it is healthy"), "{msg}");
    }
    assert_on(&f, &names(&f, "dev"), "1.0.0");
    let dev = step.status.group("dev");
    assert_eq!(dev.state.as_str(), "canary");
    assert_eq!(dev.failed, 2);
    assert!(dev.canaries.iter().all(|x| !x.success));

    // Later steps: the canaries do not retry (1.2.0 is skipped there), the group stays
    // in canary, prod does not start even in its window.
    let step = f.tick("10m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let step = f.step_at(&at(MON, "14:00")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("dev"), "canary");
    assert_eq!(step.status.group("dev").last_update_reason, "canary_failed");
    assert!(step.status.group("dev").canaries.iter().all(|c| c.failed));
    assert_eq!(step.status.state_of("prod"), "unstarted");
    assert_eq!(
        step.status.group("prod").last_update_reason,
        "previous_groups_not_done"
    );
    assert_on(&f, &names(&f, "prod"), "1.0.0");

    // `agents status` names the failed canaries; the inventory says they rolled back.
    for name in &c {
        let inv = f.inventory_of(name).unwrap().unwrap();
        assert!(inv.rollback, "{name}: {inv:?}");
        assert_eq!(inv.failed_version.as_deref(), Some("1.2.0"));
        assert_eq!(inv.healthy, Some(true));
        assert_eq!(inv.version, "1.0.0");
    }
    let text = f.agents(&["status"]).unwrap();
    eprintln!("{text}");
    for name in &c {
        let id = f.host(name).updater_id().unwrap();
        assert!(
            text.contains(&id),
            "status should name canary {id}:\n{text}"
        );
    }
    // Why they failed, at the server: the health check's verdict and the agent's panic,
    // in `agents status` (each failed canary's reason) and in the inventory's JSON.
    let why: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("why: "))
        .collect();
    assert_eq!(why.len(), c.len(), "{text}");
    for line in &why {
        assert_says_why_it_failed(line);
    }
    let inv = f.ctl.json(&["inventory", "ls"]).unwrap();
    for name in &c {
        let id = f.host(name).updater_id().unwrap();
        let agent = inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["updater_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not in {inv}"));
        let failure = &agent["update_failure"];
        assert_eq!(failure["version"], "1.2.0", "{agent}");
        let error = failure["error"].as_str().unwrap();
        let output = failure["agent_output"].as_str().unwrap();
        assert_says_why_it_failed(&format!("{error} {output}"));
        assert!(
            !output.contains('\n') && output.contains("panicked"),
            "{output}"
        );
    }
    // The history says it too: the canaries failing and why.
    let history = f.ctl.run(&["agents", "history"]).unwrap();
    assert!(history.contains("→ 1.2.0"), "{history}");
    let failed: Vec<&str> = history
        .lines()
        .filter(|l| l.contains(" canary ") && l.contains("failed 1.2.0: "))
        .collect();
    assert_eq!(failed.len(), c.len(), "{history}");
    for line in failed {
        assert_says_why_it_failed(line);
    }
}

/// The demo agent's 1.2.0 panics at start, so the updater's health check finds it not
/// running several checks in a row: both are said.
fn assert_says_why_it_failed(text: &str) {
    assert!(
        text.contains("the agent is not running (") && text.contains(" checks in a row)"),
        "the health check's verdict is missing: {text}"
    );
    assert!(
        text.contains("panicked")
            && text.contains("tern-demo-agent 1.2.0: cannot read its configuration"),
        "the agent's panic is missing: {text}"
    );
}

/// Failure mode 1 bis: the new version crashes only on some hosts, not the canary.
#[test]
fn failure_mode_1_bis_crash_on_some_non_canary_hosts() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 1, 0), ("prod", 14, 0, 0)]),
        &[("dev", 5), ("prod", 1)],
    );
    // 10:00: the group starts and picks its canary; two other hosts have the bug.
    let canary = dev_canary_of_rollout(&f, "1.1.0");
    let mut affected: Vec<String> = names(&f, "dev")
        .into_iter()
        .filter(|n| *n != canary)
        .take(2)
        .collect();
    affected.sort();
    for n in &affected {
        f.host(n).crash_on(&["1.1.0"]).unwrap();
    }
    let step = f.step().unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "only the canary updates first");
    assert_on(&f, std::slice::from_ref(&canary), "1.1.0");

    // The rest update; the two affected hosts crash and roll back.
    let step = f.tick("10m").unwrap();
    show(&f, &step);
    assert_eq!(failed_hosts(&step), affected);
    assert_on(&f, &affected, "1.0.0");
    let healthy: Vec<String> = names(&f, "dev")
        .into_iter()
        .filter(|n| !affected.contains(n))
        .collect();
    assert_on(&f, &healthy, "1.1.0");

    // The group never becomes done, prod never starts.
    let step = f.tick("10m").unwrap();
    let step2 = f.step_at(&at(MON, "14:05")).unwrap();
    show(&f, &step2);
    for s in [&step, &step2] {
        let dev = s.status.group("dev");
        assert_eq!(dev.state.as_str(), "active", "{dev:?}");
        assert_eq!(dev.failed, 2);
        assert_eq!(dev.up_to_date, 3);
        assert_eq!(s.status.state_of("prod"), "unstarted");
    }
    assert_on(&f, &names(&f, "prod"), "1.0.0");
}

/// Failure mode 2: the new version crashes and the old one cannot start either.
#[test]
fn failure_mode_2_old_version_cannot_start_either() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 1, 0), ("prod", 14, 0, 0)]),
        &[("dev", 3), ("prod", 1)],
    );
    let canary = dev_canary_of_rollout(&f, "1.2.0");
    // The canary's environment breaks (full disk, …): no version can start there now;
    // the 1.0.0 already running keeps running until it is restarted.
    f.host(&canary).crash_on(&["*"]).unwrap();

    let step = f.step().unwrap();
    show(&f, &step);
    assert_eq!(failed_hosts(&step), vec![canary.clone()]);
    let msg = &step.failures()[0].1;
    assert!(msg.contains("not healthy"), "{msg}");
    assert_eq!(f.host(&canary).running_version(), None, "no agent runs");

    let inv = f.inventory_of(&canary).unwrap().unwrap();
    assert_eq!(inv.healthy, Some(false), "{inv:?}");
    let step = f.tick("10m").unwrap();
    let step2 = f.step_at(&at(MON, "14:05")).unwrap();
    show(&f, &step2);
    for s in [&step, &step2] {
        let dev = s.status.group("dev");
        assert_eq!(dev.state.as_str(), "canary");
        assert!(dev.failed >= 1, "{dev:?}");
        assert_eq!(s.status.state_of("prod"), "unstarted");
    }
}

/// Failure mode 3: a shadow failure; the operator suspends, rolls back, resumes.
#[test]
fn failure_mode_3_shadow_failure_suspend_rollback_resume() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("staging", 12, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 2), ("staging", 2), ("prod", 2)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    until(&f, "dev", "done", 3);
    f.clock_set(&at(MON, "12:00")).unwrap();
    f.step().unwrap();
    assert_on(&f, &names(&f, "staging"), "1.1.0");

    // 12:30: users report a problem on updated hosts.
    f.clock_set(&at(MON, "12:30")).unwrap();
    f.agents(&["suspend"]).unwrap();
    let out = f.agents(&["rollback"]).unwrap();
    assert!(out.contains("dev") && out.contains("staging"), "{out}");
    // Suspended: nobody moves yet, not even back.
    let step = f.step().unwrap();
    show(&f, &step);
    assert_on(&f, &names(&f, "dev"), "1.1.0");
    assert_eq!(step.status.state_of("dev"), "rolledback");
    assert_eq!(step.status.state_of("staging"), "rolledback");
    assert_eq!(step.status.state_of("prod"), "unstarted");

    f.agents(&["resume"]).unwrap();
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert_on(&f, &all, "1.0.0");
    // prod's window later that day changes nothing.
    let step = f.step_at(&at(MON, "14:05")).unwrap();
    assert_eq!(step.status.state_of("prod"), "unstarted");
    assert_on(&f, &all, "1.0.0");
}

/// The kill switch on real hosts: frozen before dev's window, nobody moves through it,
/// not even with the immediate schedule; lifted, the rollout goes on.
#[test]
fn a_freeze_holds_every_host_until_it_is_lifted() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 2), ("prod", 2)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    let out = f
        .agents(&["freeze", "--reason", "incident 42: agents crash on start"])
        .unwrap();
    assert!(out.contains("frozen since"), "{out}");
    f.clock_set(&at(MON, "10:00")).unwrap();
    let step = f.tick("10m").unwrap();
    show(&f, &step);
    let step = f.tick("10m").unwrap();
    assert_eq!(step.status.state_of("dev"), "unstarted", "{}", f.describe());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert_on(&f, &all, "1.0.0");
    // Not even the immediate schedule moves a frozen fleet.
    f.apply(&version("1.0.0", "1.1.0", "immediate")).unwrap();
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert_on(&f, &all, "1.0.0");
    let status = f.agents(&["status"]).unwrap();
    assert!(status.contains("incident 42"), "{status}");

    let out = f.agents(&["unfreeze"]).unwrap();
    assert!(out.contains("lifted"), "{out}");
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &all, "1.1.0");
}

/// A server-side pin on a real host: its group updates around it, and when the pin
/// lifts the host follows by itself, with no other command.
#[test]
fn a_pinned_host_waits_then_rejoins_its_group() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 3), ("prod", 1)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    let dev = names(&f, "dev");
    let pinned = &dev[0];
    let id = f.host(pinned).updater_id().unwrap();
    let out = f
        .ctl
        .run(&[
            "inventory",
            "pin",
            &id,
            "--until",
            &at(MON, "11:00"),
            "--reason",
            "demo",
        ])
        .unwrap();
    assert!(out.contains("pinned until 2026-11-23T11:00:00Z"), "{out}");
    f.clock_set(&at(MON, "10:00")).unwrap();
    let step = f.tick("10m").unwrap();
    show(&f, &step);
    let step = f.tick("10m").unwrap();
    show(&f, &step);
    assert_on(&f, &dev[1..], "1.1.0");
    assert_on(&f, std::slice::from_ref(pinned), "1.0.0");
    assert_eq!(step.status.state_of("dev"), "active", "{}", f.describe());

    f.clock_set(&at(MON, "11:00")).unwrap();
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &dev, "1.1.0");
    let pins = f.ctl.run(&["inventory", "pins"]).unwrap();
    assert!(
        pins.contains("No host is pinned"),
        "the leader removed the lifted pin: {pins}"
    );
}

/// Groups assigned by labels on real hosts: hosts enrolled with labels and no group
/// update in the window of the group their labels match, the others with the
/// catch-all.
#[test]
fn hosts_with_labels_update_with_the_group_that_matches_them() {
    let config = halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]).replace(
        "      - name: dev\n",
        "      - name: dev\n        match_labels: {env: dev}\n",
    );
    assert!(config.contains("match_labels"), "{config}");
    let mut f = fleet(&config, &[("prod", 1)]);
    let labelled = f.add_labelled_hosts("web", 2, &["env=dev"]).unwrap();
    let plain = f.add_labelled_hosts("db", 1, &["env=qa"]).unwrap();
    f.tick("2m").unwrap();
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    let step = until(&f, "dev", "done", 3);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &labelled, "1.1.0");
    assert_on(&f, &plain, "1.0.0");
    assert_on(&f, &names(&f, "prod"), "1.0.0");
    assert_eq!(step.status.group("dev").present, 2, "{}", f.describe());
    f.clock_set(&at(MON, "14:00")).unwrap();
    let step = until(&f, "prod", "done", 3);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &plain, "1.1.0");
}

/// Topology-aware backpressure on real hosts: six hosts in two zones, at most one
/// host per zone updating at once. Each round updates at most one host of each zone
/// (the next is admitted once the leader hears the previous one run the target), the
/// limit is used in both zones at once, and every host ends on the target.
#[test]
fn a_topology_limit_updates_one_host_per_zone_at_a_time() {
    let config = halt_on_error(&[("dev", 10, 0, 0)]).replace(
        "      - name: dev\n",
        "      - name: dev\n        topology: [{key: zone, max_in_flight: 1}]\n",
    );
    assert!(config.contains("topology"), "{config}");
    let mut f = fleet(&config, &[]);
    let zone_a = f.add_labelled_hosts("a", 3, &["zone=a"]).unwrap();
    let zone_b = f.add_labelled_hosts("b", 3, &["zone=b"]).unwrap();
    f.tick("2m").unwrap();
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    let on_target = |names: &[String]| {
        names
            .iter()
            .filter(|n| f.host(n).linked_version().as_deref() == Some("1.1.0"))
            .count()
    };
    let mut both_at_once = false;
    for _ in 0..10 {
        let before = (on_target(&zone_a), on_target(&zone_b));
        let step = f.tick("1m").unwrap();
        show(&f, &step);
        assert!(step.failures().is_empty(), "{:?}", step.failures());
        let after = (on_target(&zone_a), on_target(&zone_b));
        assert!(
            after.0 - before.0 <= 1 && after.1 - before.1 <= 1,
            "more than one host of a zone updated in one round: {before:?} -> {after:?}\n{}",
            f.describe()
        );
        both_at_once |= after.0 > before.0 && after.1 > before.1;
        if after == (3, 3) {
            break;
        }
    }
    assert!(both_at_once, "the two zones never updated together");
    assert_on(&f, &zone_a, "1.1.0");
    assert_on(&f, &zone_b, "1.1.0");
    let status = f.agents(&["status"]).unwrap();
    assert!(
        status.contains("Topology limits of dev") && status.contains("zone, at most 1 at once"),
        "{status}"
    );
}

/// Canaries chosen for coverage on real hosts: web's two canaries cover both zones,
/// although one zone holds a single host of five (a random pick would miss it three
/// times in five); the status names what they cover, and web completes.
#[test]
fn canaries_cover_every_zone_of_their_group() {
    let config = halt_on_error(&[("dev", 10, 0, 0), ("web", 14, 2, 0)]).replace(
        "        canary_count: 2\n",
        "        canary_count: 2\n        canary_cover: [labels.zone]\n",
    );
    assert!(config.contains("canary_cover"), "{config}");
    let mut f = fleet(&config, &[("dev", 1)]);
    let mut web = f.add_labelled_hosts("a", 4, &["zone=a"]).unwrap();
    web.extend(f.add_labelled_hosts("b", 1, &["zone=b"]).unwrap());
    f.tick("2m").unwrap();
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    until(&f, "dev", "done", 3);
    // The reports offer web's candidates, with their zones, before its window.
    f.tick("2m").unwrap();
    let step = f.step_at(&at(MON, "14:00")).unwrap();
    show(&f, &step);
    let c = canaries(&f, &step, "web");
    assert_eq!(c.len(), 2, "{}", f.describe());
    assert!(c.contains(&"b-1".to_string()), "zone b uncovered: {c:?}");
    let coverage = &step.status.group("web").canary_coverage;
    assert_eq!(coverage.len(), 1, "{coverage:?}");
    assert_eq!(coverage[0].covered, ["a", "b"], "{coverage:?}");
    assert!(coverage[0].missed.is_empty(), "{coverage:?}");
    let status = f.agents(&["status"]).unwrap();
    assert!(status.contains("labels.zone: covers a, b"), "{status}");
    let step = until(&f, "web", "done", 4);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &web, "1.1.0");
}

#[test]
fn immediate_schedule_updates_everyone_at_once() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 2), ("prod", 2)],
    );
    // 09:10, outside every window.
    f.apply(&version("1.0.0", "1.1.0", "immediate")).unwrap();
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert_on(&f, &all, "1.1.0");
    let step = f.tick("5m").unwrap();
    assert_eq!(step.status.up_to_date, 4);
}

/// time-based: groups never wait for each other; a host offline through its group's
/// window waits for the next one.
#[test]
fn time_based_groups_are_independent_and_late_hosts_wait_for_the_next_window() {
    // "late" comes first in the list but opens later: order does not matter.
    let mut f = fleet(
        &time_based("1h", &[("late", 14), ("early", 10)]),
        &[("late", 2), ("early", 2)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.set_online("early-2", false);

    let step = f.step_at(&at(MON, "10:05")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("early"), "active");
    assert_eq!(step.status.state_of("late"), "unstarted");
    assert_on(&f, &["early-1".to_string()], "1.1.0");
    assert_on(&f, &names(&f, "late"), "1.0.0");

    // 11:30: early's window closed; early-2 comes back and does not update.
    f.set_online("early-2", true);
    let step = f.step_at(&at(MON, "11:30")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("early"), "done");
    assert_on(&f, &["early-2".to_string()], "1.0.0");

    // 14:05: late updates on its own window; early-2 still waits.
    let step = f.step_at(&at(MON, "14:05")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("late"), "active");
    assert_on(&f, &names(&f, "late"), "1.1.0");
    assert_on(&f, &["early-2".to_string()], "1.0.0");

    // Tuesday 10:05: early's next window: early-2 catches up.
    let step = f.step_at(&at(TUE, "10:05")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("early"), "active");
    assert_on(&f, &["early-2".to_string()], "1.1.0");
}

/// halt-on-error: a host offline through its window updates as soon as it is back.
#[test]
fn halt_on_error_offline_host_updates_when_it_returns() {
    let mut f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 3), ("prod", 1)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.set_online("dev-3", false);
    let step = f.step_at(&at(MON, "10:00")).unwrap();
    show(&f, &step);
    f.tick("10m").unwrap();
    assert_on(&f, &["dev-1".to_string(), "dev-2".to_string()], "1.1.0");
    assert_on(&f, &["dev-3".to_string()], "1.0.0");

    // 11:30, after the window: dev-3 is back, and updates at once.
    f.set_online("dev-3", true);
    let step = f.step_at(&at(MON, "11:30")).unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &["dev-3".to_string()], "1.1.0");
    let step = f.tick("10m").unwrap();
    assert_eq!(step.status.state_of("dev"), "done");
    // And the rollout carries on.
    f.clock_set(&at(MON, "14:00")).unwrap();
    until(&f, "prod", "done", 3);
    assert_on(&f, &names(&f, "prod"), "1.1.0");
}

/// A host that joins mid-rollout installs what its group runs now.
#[test]
fn host_joining_mid_rollout_installs_its_groups_version() {
    let mut f = fleet(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 2), ("prod", 1)],
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    until(&f, "dev", "done", 3);

    // 11:00: new hosts join dev (done: the target), prod (unstarted: the start
    // version), and an unknown group (served by the catch-all, prod).
    f.clock_set(&at(MON, "11:00")).unwrap();
    f.add_host("dev-3", "dev").unwrap();
    f.add_host("prod-2", "prod").unwrap();
    f.add_host("qa-1", "qa").unwrap();
    assert_on(&f, &["dev-3".to_string()], "1.1.0");
    assert_on(&f, &["prod-2".to_string(), "qa-1".to_string()], "1.0.0");
    let step = f.tick("5m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    assert_on(&f, &["prod-2".to_string(), "qa-1".to_string()], "1.0.0");

    f.clock_set(&at(MON, "14:00")).unwrap();
    let step = until(&f, "prod", "done", 3);
    assert_on(
        &f,
        &[
            "prod-1".to_string(),
            "prod-2".to_string(),
            "qa-1".to_string(),
        ],
        "1.1.0",
    );
    assert_eq!(step.status.group("prod").present, 3, "qa-1 counts in prod");
}

/// `tern-update pin` holds one host while the rest of its group moves.
#[test]
fn pinned_host_holds_while_the_rest_move() {
    let f = fleet(&halt_on_error(&[("dev", 10, 0, 0)]), &[("dev", 3)]);
    let pin = f.host("dev-2").run(&["pin"]).unwrap();
    assert!(pin.ok(), "{}", pin.stderr);
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.clock_set(&at(MON, "10:00")).unwrap();
    let step = until(&f, "dev", "done", 3);
    assert_on(&f, &["dev-1".to_string(), "dev-3".to_string()], "1.1.0");
    assert_on(&f, &["dev-2".to_string()], "1.0.0");
    let (_, run) = step.runs.iter().find(|(h, _)| h == "dev-2").unwrap();
    assert!(
        run.ok() && run.message().contains("pinned"),
        "{}",
        run.message()
    );
    let inv = f.inventory_of("dev-2").unwrap().unwrap();
    assert_eq!(inv.updater_status.as_str(), "pinned");

    // Unpinned, it follows the server again (the group is done: it updates).
    assert!(f.host("dev-2").run(&["unpin"]).unwrap().ok());
    f.tick("10m").unwrap();
    assert_on(&f, &["dev-2".to_string()], "1.1.0");
}

/// `new-rollout` while a group is mid-update: the group stops where it is and starts
/// the new rollout at its next window.
#[test]
fn new_rollout_while_a_group_is_mid_update() {
    let mut releases = release::standard();
    releases.push(Release::good("1.3.0"));
    let mut f = fleet_with(
        &halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]),
        &[("dev", 4), ("prod", 1)],
        releases,
    );
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.set_online("dev-3", false);
    f.set_online("dev-4", false);
    let step = f.step_at(&at(MON, "10:00")).unwrap();
    show(&f, &step);
    assert_eq!(step.status.state_of("dev"), "active");
    assert_on(&f, &["dev-1".to_string(), "dev-2".to_string()], "1.1.0");

    // 10:10: a fix is out; roll it instead.
    f.clock_set(&at(MON, "10:10")).unwrap();
    let out = f.new_rollout("1.3.0").unwrap();
    assert!(out.contains("1.1.0") && out.contains("1.3.0"), "{out}");
    f.set_online("dev-3", true);
    f.set_online("dev-4", true);
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert_eq!(step.status.start_version(), "1.1.0");
    assert_eq!(step.status.target_version(), "1.3.0");
    let dev = step.status.group("dev");
    assert_eq!(dev.state.as_str(), "unstarted");
    assert_eq!(dev.last_update_reason, "rollout_changed_during_window");
    // Nobody moves in this window.
    for (h, o) in &step.runs {
        assert!(o.ok() && !o.stderr.contains(" -> "), "{h}: {}", o.stderr);
    }
    assert_on(&f, &["dev-1".to_string(), "dev-2".to_string()], "1.1.0");
    assert_on(&f, &["dev-3".to_string(), "dev-4".to_string()], "1.0.0");

    // Tuesday 10:00: the whole group goes to 1.3.0, from wherever it was.
    f.clock_set(&at(TUE, "10:00")).unwrap();
    until(&f, "dev", "done", 3);
    assert_on(&f, &names(&f, "dev"), "1.3.0");
}

/// The demo's story itself, on a small fleet.
#[test]
fn demo_story_runs_green() {
    let mut out = Vec::new();
    let (fleet, summary) = tern_e2e::demo::run(
        tern_e2e::demo::DemoOptions {
            hosts: 5,
            ..Default::default()
        },
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&out);
    eprintln!("{text}");
    // The 5 rollout hosts and the 2 that follow a channel in chapter 4.
    assert_eq!(summary.hosts, 7);
    assert!(summary.line.starts_with("demo: OK"), "{}", summary.line);
    assert!(
        text.contains("prod-4: updated 1.0.0 -> 1.1.0"),
        "the critical channel update: {text}"
    );
    drop(fleet);
}

/// Every host exchanges its join token for a credential of its own at `enable`; a
/// single-use join token enrolls one host only; a revoked host is refused until it is
/// enabled again with a fresh join token.
#[test]
fn hosts_join_with_their_own_credential_and_a_revoked_one_is_refused() {
    let f = fleet(&halt_on_error(&[("dev", 10, 0, 0)]), &[("dev", 2)]);
    let join_token = std::fs::read_to_string(&f.agent_token_file).unwrap();
    let credential = |h: &tern_e2e::host::Host| {
        let found = walk(&h.install, "host.token");
        let path = found.unwrap_or_else(|| panic!("{} has no host.token", h.name));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        std::fs::read_to_string(&path).unwrap().trim().to_string()
    };
    let creds: Vec<String> = f.hosts.iter().map(credential).collect();
    assert_ne!(creds[0], creds[1]);
    assert!(creds.iter().all(|c| *c != join_token.trim()));
    let listed = f
        .ctl
        .run(&["tokens", "ls", "--hosts", "-o", "json"])
        .unwrap();
    for h in &f.hosts {
        let id = h.updater_id().unwrap();
        assert!(listed.contains(&id), "{id} has a credential: {listed}");
    }

    // A single-use join token: one host joins, the next is told why it cannot.
    let once = f.ctl.run(&["tokens", "create", "--role", "join"]).unwrap();
    let once_file = f.path().join("once.token");
    std::fs::write(&once_file, once.trim()).unwrap();
    let (_h3, out) = f.enroll_with("dev-3", "dev", &once_file).unwrap();
    assert!(out.ok(), "{}", out.stderr);
    let (_h4, out) = f.enroll_with("dev-4", "dev", &once_file).unwrap();
    assert!(!out.ok(), "a used-up join token enrolls nobody");
    assert!(out.stderr.contains("used up"), "{}", out.stderr);

    // Revoked: the host's heartbeats are refused; enabling again with a fresh join
    // token gives it a new credential.
    let h1 = &f.hosts[0];
    let id = h1.updater_id().unwrap();
    f.ctl.run(&["inventory", "revoke", &id]).unwrap();
    let out = h1.heartbeat().unwrap();
    assert!(!out.ok(), "a revoked host is refused: {}", out.stderr);
    let fresh = f.ctl.run(&["tokens", "create", "--role", "join"]).unwrap();
    let fresh_file = f.path().join("fresh.token");
    std::fs::write(&fresh_file, fresh.trim()).unwrap();
    let out = h1
        .enable(&f.gateway.url, &f.gateway.artifacts_url(), &fresh_file)
        .unwrap();
    assert!(out.ok(), "{}", out.stderr);
    assert_ne!(credential(h1), creds[0]);
    assert!(h1.heartbeat().unwrap().ok());
}

fn walk(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = walk(&path, name)
        {
            return Some(found);
        }
    }
    None
}

/// `GET /metrics` of the fleet's ternd: the value of the series `name`.
fn metric(f: &Fleet, name: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(f.ternd.addr).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: ternd\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn watching_hosts_update_in_the_window_without_a_timer_run() {
    let f = fleet(&halt_on_error(&[("dev", 10, 0, 0)]), &[("dev", 3)]);
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.new_rollout("1.1.0").unwrap();
    f.reconcile().unwrap();
    // Each host runs the watcher (`setup --watch`'s service); no timer runs from now on.
    let mut watchers: Vec<std::process::Child> = f
        .hosts
        .iter()
        .map(|h| {
            let log = std::fs::File::create(h.root.join("watch.log")).unwrap();
            h.command(&["watch", "--hold", "30"])
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while metric(&f, "tern_find_long_poll_held") != Some(3) {
        assert!(
            std::time::Instant::now() < deadline,
            "the watchers' finds were never all held"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_on(&f, &names(&f, "dev"), "1.0.0");

    // 10:00 dev's window opens: one reconcile, and the held finds answer.
    f.clock_set(&at(MON, "10:00")).unwrap();
    f.reconcile().unwrap();
    let late: Vec<String> = f
        .hosts
        .iter()
        .filter(|h| !h.wait_running("1.1.0", std::time::Duration::from_secs(60)))
        .map(|h| {
            format!(
                "{}: {}",
                h.name,
                std::fs::read_to_string(h.root.join("watch.log")).unwrap_or_default()
            )
        })
        .collect();
    assert!(late.is_empty(), "{late:?}\n{}", f.describe());
    assert!(metric(&f, "tern_find_long_poll_changed_total").unwrap() >= 3);
    // Each update ends with its heartbeat (after the health watch).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f
        .inventory()
        .unwrap()
        .iter()
        .all(|e| e.version == "1.1.0" && e.healthy == Some(true))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "ternd never heard 1.1.0 from every host: {:?}",
            f.inventory().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for w in &mut watchers {
        // The processes this test started, by their handles.
        let _ = w.kill();
        let _ = w.wait();
    }
    // The updates' own heartbeats told ternd: dev completes at a later reconcile,
    // still with no timer run.
    for _ in 0..3 {
        if f.status().unwrap().state_of("dev") == "done" {
            break;
        }
        f.clock_advance("1m").unwrap();
        f.reconcile().unwrap();
    }
    let status = f.status().unwrap();
    assert_eq!(
        status.state_of("dev"),
        "done",
        "{:?}\n{}",
        status.group("dev"),
        f.describe()
    );
}

/// A canary that comes up healthy on the target and goes down before ternd judges it
/// fails, and its group goes no further: it holds in canary, its other hosts stay on
/// 1.0.0, and the fleet's checker, which reads the canary's own reports, agrees.
/// planted.rs plays the same fleet (`tern_e2e::crossing`) with the hole
/// `unhealthy-canary-passes` open.
#[test]
fn a_canary_that_goes_down_before_it_is_judged_fails_and_its_group_goes_no_further() {
    let s = tern_e2e::crossing::canary_down_before_it_is_judged().unwrap();
    let f = &s.fleet;
    for _ in 0..3 {
        let step = f.tick("2m").unwrap();
        show(f, &step);
        let dev = step.status.group("dev");
        assert_eq!(dev.state.as_str(), "canary", "{}", f.describe());
        let c = &dev.canaries[0];
        assert!(c.failed && !c.success, "{c:?}");
        assert_eq!(f.host_by_updater_id(&c.updater_id).unwrap().name, s.canary);
        assert_eq!(step.status.state_of("prod"), "unstarted");
    }
    assert_on(f, &s.others, "1.0.0");
}

/// A canary whose agent dies after the new version passed its health check: the
/// update itself succeeded, so nothing rolled back on the host, and its next heartbeat
/// reports the target unhealthy before ternd ever saw it healthy. The canary fails and
/// the fleet holds: no other host of dev updates, prod never starts, and the canary's
/// updater does not go on reinstalling (it is on the target; keeping the agent running
/// is the service manager's job). The operator rolls dev back: the canary returns to
/// 1.0.0 and runs it; nothing else moved. Ends with the checker over every install.
#[test]
fn a_canary_whose_agent_dies_after_its_health_check_fails_and_holds_the_fleet() {
    let f = fleet(
        &halt_on_error(&[("dev", 10, 1, 0), ("prod", 14, 0, 0)]),
        &[("dev", 3), ("prod", 1)],
    );
    let canary = dev_canary_of_rollout(&f, "1.1.0");
    let out = f.host(&canary).update().unwrap();
    assert!(out.ok(), "{}", out.message());
    assert_on(&f, std::slice::from_ref(&canary), "1.1.0");
    f.host(&canary).kill_agent();
    let out = f.host(&canary).heartbeat().unwrap();
    assert!(out.ok(), "{}", out.message());
    f.reconcile().unwrap();
    let dev = f.status().unwrap().group("dev").clone();
    assert_eq!(dev.state.as_str(), "canary", "{dev:?}");
    assert_eq!(dev.last_update_reason, "canary_failed", "{dev:?}");
    assert!(
        dev.canaries[0].failed && !dev.canaries[0].success,
        "{dev:?}"
    );

    let others: Vec<String> = names(&f, "dev")
        .into_iter()
        .filter(|n| *n != canary)
        .collect();
    for _ in 0..3 {
        let step = f.tick("10m").unwrap();
        show(&f, &step);
        assert!(step.failures().is_empty(), "{:?}", step.failures());
        assert_eq!(step.status.group("dev").last_update_reason, "canary_failed");
        assert_eq!(step.status.state_of("prod"), "unstarted");
    }
    assert_on(&f, &others, "1.0.0");
    assert_on(&f, &names(&f, "prod"), "1.0.0");
    assert_eq!(
        f.host(&canary).running_version(),
        None,
        "nothing restarted it"
    );
    assert_eq!(
        f.host(&canary).started_versions(),
        vec!["1.0.0".to_string(), "1.1.0".to_string()],
        "1.1.0 was installed once"
    );
    let step = f.step_at(&at(MON, "14:05")).unwrap();
    assert_eq!(step.status.state_of("prod"), "unstarted");

    // The operator rolls dev back: the canary goes back to 1.0.0 and runs it.
    let out = f.agents(&["rollback", "dev"]).unwrap();
    assert!(out.contains("dev"), "{out}");
    let step = f.tick("5m").unwrap();
    show(&f, &step);
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert_on(&f, &all, "1.0.0");
    f.check_invariant().unwrap();
}
