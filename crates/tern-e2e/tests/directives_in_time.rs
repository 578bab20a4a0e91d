//! Directives in time (seed 003's `not_before`, `not_after`, `config_id`), end to end:
//! one ternd (dev clock), a time-based agent rollout whose group `prod` has a window
//! 14:00-15:00 every day, and three real `tern-update` hosts of that group with the
//! `local-script` installer opted in: `p1` and `p2` (env=prod) and `e1` (env=edge). The
//! directive names 10:00 as the earliest start; its `edge` directive is critical (a
//! security fix: it does not wait for windows), its `prod` one keeps to the windows.
//! The installer's script records each version it ran in the host's dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::time_based;
use tern_e2e::directive::{control_config, record_installer};
use tern_e2e::{Fleet, FleetOptions};

const DAY: &str = "2026-11-23";

fn at(hm: &str) -> String {
    format!("{DAY}T{hm}:00Z")
}

fn draft() -> String {
    format!(
        r#"kind: version_directive
version: v1
metadata: {{name: timed}}
spec:
  config_id: change-4711
  not_before: "{}"
  not_after: "2026-11-24T00:00:00Z"
  directives:
    - name: edge
      critical: true
      selectors: [{{labels: {{env: edge}}}}]
      targets: [{{version: "1.2.0"}}]
      installers: [record]
    - name: prod
      selectors: [{{labels: {{env: prod}}}}]
      targets: [{{version: "1.2.0"}}]
      installers: [record]
"#,
        at("10:00")
    )
}

/// The recording installer, the control config and [`draft`], made active.
fn activate(f: &Fleet) {
    tern_e2e::directive::activate(
        f,
        &record_installer(None),
        &control_config("10/m", "1", "12h"),
        "timed",
        &draft(),
    )
    .unwrap();
}

/// The fleet of this file at 09:00 (module doc), the directive active: the hosts
/// installed the rollout's 1.0.0 when they enrolled (a first install).
fn timed_fleet() -> Fleet {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.clock_set(&at("09:00")).unwrap();
    f.apply(&time_based("1h", &[("prod", 14)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let gateway = f.gateway.url.clone();
    for (name, env) in [("p1", "prod"), ("p2", "prod"), ("e1", "edge")] {
        let label = format!("env={env}");
        f.add_host_via(
            name,
            "prod",
            &gateway,
            &["--installer", "local-script", "--label", &label],
        )
        .unwrap();
    }
    activate(&f);
    f
}

fn runs(f: &Fleet, name: &str) -> Vec<String> {
    tern_e2e::directive::recorded(&f.host(name).root.join("script-runs.log"))
}

/// One minute of the fleet: every host's timer runs, then one directive pass; the
/// names of the hosts the pass triggered.
fn tick_to(f: &Fleet, t: &str) -> Vec<String> {
    f.clock_set(t).unwrap();
    for (name, out) in f.update_all() {
        assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
    }
    let v = f.ctl.json(&["dev", "directives"]).unwrap();
    let mut names: Vec<String> = v["triggered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let id = id.as_str().unwrap();
            f.hosts
                .iter()
                .find(|h| h.updater_id().as_deref() == Some(id))
                .unwrap()
                .name
                .clone()
        })
        .collect();
    names.sort();
    // The triggered hosts run their instruction at their next heartbeat.
    for (name, out) in f.update_all() {
        assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
    }
    names
}

fn waiting(f: &Fleet) -> Vec<(String, Vec<String>, Option<String>)> {
    let v = f.ctl.json(&["version-control", "status"]).unwrap();
    let mut w: Vec<_> = v["waiting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let id = w["updater_id"].as_str().unwrap();
            let name = f
                .hosts
                .iter()
                .find(|h| h.updater_id().as_deref() == Some(id))
                .unwrap()
                .name
                .clone();
            let holds = w["holds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect();
            (name, holds, w["starts_at"].as_str().map(str::to_string))
        })
        .collect();
    w.sort();
    w
}

#[test]
fn a_directive_starts_at_its_not_before_keeps_to_the_windows_unless_critical_and_holds_under_a_freeze()
 {
    let f = timed_fleet();
    // A directive whose not_after is not after its not_before is refused, naming it.
    let bad = f.path().join("bad.yaml");
    std::fs::write(
        &bad,
        draft().replace("2026-11-24T00:00:00Z", "2026-11-23T08:00:00Z"),
    )
    .unwrap();
    let err = f
        .ctl
        .run(&["version-control", "draft", "-f", &bad.display().to_string()])
        .unwrap_err();
    assert!(format!("{err:#}").contains("spec.not_after"), "{err:#}");

    // 09:01, 09:02: before not_before nothing starts; status says when each will.
    assert!(tick_to(&f, &at("09:01")).is_empty());
    assert!(tick_to(&f, &at("09:02")).is_empty());
    let w = waiting(&f);
    assert_eq!(
        w,
        vec![
            ("e1".into(), vec!["not_yet".into()], Some(at("10:00"))),
            (
                "p1".into(),
                vec!["outside_window".into(), "not_yet".into()],
                Some(at("14:00"))
            ),
            (
                "p2".into(),
                vec!["outside_window".into(), "not_yet".into()],
                Some(at("14:00"))
            ),
        ],
        "{w:?}"
    );
    let text = f.ctl.run(&["version-control", "status"]).unwrap();
    assert!(
        text.contains("config id: change-4711")
            && text.contains("installs start from")
            && text.contains("keep to the hosts' maintenance windows: prod")
            && text.contains("install outside the hosts' windows: edge"),
        "{text}"
    );
    assert!(["p1", "p2", "e1"].iter().all(|h| runs(&f, h).is_empty()));
    // The host's forecast (its dashboard page, `ternctl inventory show`) says the same.
    let p1 = f.host("p1").updater_id().unwrap();
    let show = f.ctl.json(&["inventory", "show", &p1]).unwrap();
    let d = &show["forecast"]["directed"];
    assert_eq!(
        (
            show["forecast"]["outlook"].as_str(),
            d["directive"].as_str(),
            d["target"].as_str(),
            d["when"].as_str(),
            d["starts_at"].as_str()
        ),
        (
            Some("directive"),
            Some("prod"),
            Some("1.2.0"),
            Some("at"),
            Some(at("14:00").as_str())
        ),
        "{show}"
    );
    let text = f.ctl.run(&["inventory", "show", &p1]).unwrap();
    assert!(
        text.contains(&format!(
            "directive prod moves it to 1.2.0 from {}",
            at("14:00")
        )) && text.contains(&format!("directive prod: to 1.2.0, from {}", at("14:00"))),
        "{text}"
    );

    // 10:01: the critical directive's host installs; prod's wait for their window.
    assert_eq!(tick_to(&f, &at("10:01")), vec!["e1".to_string()]);
    assert_eq!(runs(&f, "e1"), vec!["1.2.0".to_string()]);
    let t = tick_to(&f, &at("13:59"));
    assert!(t.is_empty(), "{t:?} {:?}", f.ctl.run(&["inventory", "ls"]));
    assert!(runs(&f, "p1").is_empty() && runs(&f, "p2").is_empty());

    // 14:01, the window open, but the fleet frozen: a stop holds the directive too.
    f.ctl
        .run(&["agents", "freeze", "--reason", "incident"])
        .unwrap();
    assert!(tick_to(&f, &at("14:01")).is_empty());
    let w = waiting(&f);
    assert!(
        w.iter()
            .all(|(_, holds, starts)| holds.contains(&"frozen".to_string()) && starts.is_none()),
        "{w:?}"
    );
    let show = f.ctl.json(&["inventory", "show", &p1]).unwrap();
    assert_eq!(
        show["forecast"]["directed"]["when"].as_str(),
        Some("held"),
        "{show}"
    );
    f.ctl.run(&["agents", "unfreeze"]).unwrap();
    // A server pin of p2 holds it inside its window too; p1 goes.
    let p2 = f.host("p2").updater_id().unwrap();
    f.ctl
        .run(&["inventory", "pin", &p2, "--until", &at("23:00")])
        .unwrap();
    assert_eq!(tick_to(&f, &at("14:02")), vec!["p1".to_string()]);
    assert_eq!(runs(&f, "p1"), vec!["1.2.0".to_string()]);
    assert!(runs(&f, "p2").is_empty());
    let w = waiting(&f);
    assert!(
        w.iter().any(|(h, holds, starts)| h == "p2"
            && holds.contains(&"pinned".to_string())
            && starts.is_none()),
        "{w:?}"
    );
    let show = f.ctl.json(&["inventory", "show", &p2]).unwrap();
    let d = &show["forecast"]["directed"];
    assert_eq!(
        (d["when"].as_str(), d["holds"][0].as_str()),
        (Some("held"), Some("pinned")),
        "{show}"
    );
    // Unpinned while the window is still open: it installs.
    f.ctl.run(&["inventory", "unpin", &p2]).unwrap();
    assert_eq!(tick_to(&f, &at("14:03")), vec!["p2".to_string()]);
    assert_eq!(runs(&f, "p2"), vec!["1.2.0".to_string()]);
    assert_eq!(runs(&f, "e1"), vec!["1.2.0".to_string()], "never twice");
}

/// Two replicas on one store (the shared dev clock set on both): p1 heartbeats to the
/// first, p2 to the second. Each replica's pass holds its own host to the same time
/// rules; `version-control status` on either lists both waiting with the same start
/// (each replica reports its own), the forecast of each on its replica says the same,
/// and both install once their window opens.
#[test]
fn on_two_replicas_each_holds_its_hosts_to_the_same_time_rules() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.clock_set(&at("09:00")).unwrap();
    f.apply(&time_based("1h", &[("prod", 14)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let r = f.add_replica(&[]).unwrap();
    let gateways = [f.gateway.url.clone(), f.replicas[r].gateway.url.clone()];
    for (name, gateway) in [("p1", &gateways[0]), ("p2", &gateways[1])] {
        f.add_host_via(
            name,
            "prod",
            gateway,
            &["--installer", "local-script", "--label", "env=prod"],
        )
        .unwrap();
    }
    activate(&f);
    let ctls = [&f.ctl, &f.replicas[r].ctl];
    // One minute on both replicas: the clock, the hosts' timers, a pass on each.
    let tick = |t: &str| -> Vec<String> {
        for c in ctls {
            c.json(&["dev", "clock", "set", t]).unwrap();
        }
        for (name, out) in f.update_all() {
            assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
        }
        let mut triggered = Vec::new();
        for c in ctls {
            let v = c.json(&["dev", "directives"]).unwrap();
            for id in v["triggered"].as_array().unwrap() {
                triggered.push(
                    f.host_by_updater_id(id.as_str().unwrap())
                        .unwrap()
                        .name
                        .clone(),
                );
            }
        }
        for (name, out) in f.update_all() {
            assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
        }
        triggered.sort();
        triggered
    };
    assert!(tick(&at("09:01")).is_empty());
    assert!(tick(&at("09:02")).is_empty());
    for c in ctls {
        let v = c.json(&["version-control", "status"]).unwrap();
        let mut w: Vec<(String, String)> = v["waiting"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                let id = w["updater_id"].as_str().unwrap();
                (
                    f.host_by_updater_id(id).unwrap().name.clone(),
                    w["starts_at"].as_str().unwrap_or("none").to_string(),
                )
            })
            .collect();
        w.sort();
        assert_eq!(
            w,
            [
                ("p1".to_string(), at("14:00")),
                ("p2".to_string(), at("14:00"))
            ],
            "{v}"
        );
    }
    for (name, c) in [("p1", ctls[0]), ("p2", ctls[1])] {
        let id = f.host(name).updater_id().unwrap();
        let show = c.json(&["inventory", "show", &id]).unwrap();
        let d = &show["forecast"]["directed"];
        assert_eq!(
            (d["when"].as_str(), d["starts_at"].as_str()),
            (Some("at"), Some(at("14:00").as_str())),
            "{name}: {show}"
        );
    }
    assert!(tick(&at("13:59")).is_empty());
    assert_eq!(tick(&at("14:01")), ["p1".to_string(), "p2".to_string()]);
    assert_eq!(runs(&f, "p1"), ["1.2.0".to_string()]);
    assert_eq!(runs(&f, "p2"), ["1.2.0".to_string()]);
}

/// A directive made active before the release keys revoke its target: the replica with
/// the release root a host heartbeats to holds the host when its window opens (the
/// pass triggers nothing, the script never runs), and the host's forecast says the
/// directive's install is held, revoked. The directive was written through a replica
/// without the root, which checks nothing; the host enrolled after it went active, so
/// find names it no version either (the directive governs it).
#[test]
fn a_directive_whose_target_is_revoked_after_it_went_active_installs_nothing() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.clock_set(&at("09:00")).unwrap();
    f.apply(&time_based("1h", &[("prod", 14)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    activate(&f);
    let root = tern_e2e::sign::sign(&f, &["1.0.0", "1.1.0", "1.2.0"]).unwrap();
    tern_e2e::sign::minimum(&f, "1.2", "1.2.1").unwrap();
    let r = tern_e2e::sign::verifying_replica(&mut f, &root).unwrap();
    let gateway = f.replicas[r].gateway.url.clone();
    f.add_host_via(
        "p1",
        "prod",
        &gateway,
        &["--installer", "local-script", "--label", "env=prod"],
    )
    .unwrap();
    let ctl = &f.replicas[r].ctl;
    for t in ["13:59", "14:01", "14:30"] {
        ctl.json(&["dev", "clock", "set", &at(t)]).unwrap();
        for (name, out) in f.update_all() {
            assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
        }
        let v = ctl.json(&["dev", "directives"]).unwrap();
        assert_eq!(v["triggered"].as_array().map(Vec::len), Some(0), "{t}: {v}");
        for (name, out) in f.update_all() {
            assert!(out.ok(), "{name}: {}\n{}", out.message(), out.stderr);
        }
    }
    assert!(runs(&f, "p1").is_empty(), "{:?}", runs(&f, "p1"));
    let id = f.host("p1").updater_id().unwrap();
    let show = ctl.json(&["inventory", "show", &id]).unwrap();
    let d = &show["forecast"]["directed"];
    assert_eq!(d["when"].as_str(), Some("held"), "{show}");
    assert!(
        d["holds"]
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h == "revoked")),
        "{show}"
    );
    // Governed from its enrolment, it installed nothing by find either.
    assert_eq!(f.host("p1").linked_version(), None, "{}", f.describe());
}

/// The directive's time rules hold across ternd crashes: killed with SIGKILL and
/// started again (same data dir, address and flags) before `not_before` and again
/// between the critical host's install and prod's window, ternd starts nothing early,
/// repeats no install, and still starts prod at its window: what the passes go by is
/// in the store and the hosts' heartbeats, not in the memory of the process that died.
#[test]
fn a_directive_in_time_keeps_its_rules_across_a_ternd_killed_and_started_again() {
    let mut f = timed_fleet();
    assert!(tick_to(&f, &at("09:01")).is_empty());

    // Killed before not_before: after it, nothing starts before 10:00.
    let pid = f.ternd.pid();
    f.ternd.restart().unwrap();
    assert_ne!(f.ternd.pid(), pid, "a new process");
    // The new process knows the hosts only from their heartbeats to it: its first
    // pass lists none of them as waiting; by the next it holds each to the directive's
    // times as before the crash.
    assert!(tick_to(&f, &at("09:30")).is_empty());
    assert!(tick_to(&f, &at("09:31")).is_empty());
    let w = waiting(&f);
    assert_eq!(
        w.iter()
            .map(|(h, _, starts)| (h.as_str(), starts.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("e1", Some(at("10:00"))),
            ("p1", Some(at("14:00"))),
            ("p2", Some(at("14:00")))
        ],
        "{w:?}"
    );

    // 10:01: the critical directive's host installs, once.
    assert_eq!(tick_to(&f, &at("10:01")), vec!["e1".to_string()]);
    assert_eq!(runs(&f, "e1"), vec!["1.2.0".to_string()]);

    // Killed again between e1's install and prod's window: e1 is not triggered again,
    // prod still waits for its window.
    f.ternd.restart().unwrap();
    let t = tick_to(&f, &at("10:30"));
    assert!(t.is_empty(), "{t:?}");
    let t = tick_to(&f, &at("13:59"));
    assert!(t.is_empty(), "{t:?}");
    assert!(runs(&f, "p1").is_empty() && runs(&f, "p2").is_empty());
    assert_eq!(runs(&f, "e1"), vec!["1.2.0".to_string()], "never twice");

    // 14:01: prod's window opens; both install, once.
    assert_eq!(
        tick_to(&f, &at("14:01")),
        vec!["p1".to_string(), "p2".to_string()]
    );
    let _ = tick_to(&f, &at("14:02"));
    for h in ["p1", "p2", "e1"] {
        assert_eq!(runs(&f, h), vec!["1.2.0".to_string()], "{h}");
    }
    f.check_invariant().unwrap();
}
