//! One ternd for every product of a host (docs/updater.md, "Moving to one ternd"), on
//! real processes: one ternd (dev clock) serves the agents' rollout and the updater's
//! (the built-in `updater` product); two hosts each run their agent (the `default`
//! namespace) and tern-update's own releases (the `updater` namespace, enabled against
//! the same ternd, so it names the `updater` product and speaks with the host's
//! identity). Each product moves on its own rollout; a freeze of the fleet holds both;
//! the fleet-safety checker runs over each product's installs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use tern_core::fixtures::halt_on_error;
use tern_core::invariant::{InstallKind, Trace, TraceEvent, Via};
use tern_e2e::updater::{self, UpdaterHost};
use tern_e2e::{Fleet, FleetOptions, RunOutcome, Status};

const MON: &str = "2026-11-23";
const TUE: &str = "2026-11-24";

fn at(day: &str, hm: &str) -> String {
    format!("{day}T{hm}:00Z")
}

struct World {
    f: Fleet,
    updaters: Vec<UpdaterHost>,
    /// The updater product's trace: what ternd said of it, every release a host's
    /// updater namespace started installing.
    trace: Trace,
}

impl World {
    fn updater_status(&self) -> Status {
        let v = self
            .f
            .ctl
            .json(&["--product", "updater", "agents", "status"])
            .unwrap();
        serde_json::from_value(v).unwrap()
    }

    /// One round: ternd reconciles, every host's agent timer runs, then every host's
    /// updater timer (through the binary the host was given, which watches the
    /// release), each of its installs recorded.
    fn round(&mut self) -> Vec<(String, RunOutcome)> {
        self.f.reconcile().unwrap();
        let status = self.updater_status();
        self.trace
            .events
            .push(status.trace_state(tern_core::product::UPDATER, BTreeMap::new()));
        for (name, out) in self.f.update_all() {
            assert!(
                out.ok(),
                "{name} (agent): {}\n{}",
                out.message(),
                out.stderr
            );
        }
        let mut runs = Vec::new();
        for u in &self.updaters {
            let out = u.run_program(&u.bootstrap, &["update"]).unwrap();
            for line in out.stderr.lines() {
                let Some((_, rest)) = line.split_once("updating ") else {
                    continue;
                };
                let Some((from, to)) = rest.split_once(" -> ") else {
                    continue;
                };
                self.trace.events.push(TraceEvent::Install {
                    at: status.now,
                    product: tern_core::product::UPDATER.into(),
                    via: Via::Find,
                    host: u.updater_id().unwrap(),
                    group: u.group.clone(),
                    labels: BTreeMap::new(),
                    from: Some(from.trim().to_string()),
                    to: to.trim().to_string(),
                    kind: InstallKind::Scheduled,
                    signed: None,
                    pinned_root: false,
                });
            }
            runs.push((u.name.clone(), out));
        }
        self.f.reconcile().unwrap();
        runs
    }

    fn updaters_on(&self) -> Vec<Option<String>> {
        self.updaters
            .iter()
            .map(UpdaterHost::linked_version)
            .collect()
    }

    fn agents_on(&self) -> Vec<Option<String>> {
        self.f.running().into_iter().map(|(_, v)| v).collect()
    }
}

#[test]
fn one_ternd_serves_a_hosts_agent_and_updater_and_a_freeze_holds_both() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    // dev's window is 10:00-11:00; rollouts are made before it (one made inside a
    // window waits for the next).
    f.clock_set(&at(MON, "09:30")).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    let real = std::fs::read(&f.bins.tern_update).unwrap();
    for v in ["1.0.0", "1.1.0", "1.2.0"] {
        updater::publish(&f.artifacts, v, &real).unwrap();
    }
    // The updater product's rollout, on the agents' ternd.
    f.ctl
        .run(&[
            "updater",
            "new-rollout",
            "1.0.0",
            "--current-version",
            "1.0.0",
        ])
        .unwrap();
    f.reconcile().unwrap();

    // Each host's updater namespace, in the agent's install dir, against the same
    // ternd: it names the updater product and speaks as the host.
    let server = f.gateway.url.clone();
    let mut updaters = Vec::new();
    for h in &f.hosts {
        let u = UpdaterHost {
            name: h.name.clone(),
            group: h.group.clone(),
            install: h.install.clone(),
            link: h.root.join("updater-bin"),
            bootstrap: f.bins.tern_update.clone(),
        };
        let out = u
            .enable(&server, &f.gateway.artifacts_url(), &f.agent_token_file)
            .unwrap();
        assert!(out.ok(), "{}: {}", u.name, out.stderr);
        assert!(
            out.stderr.contains("installs the product updater"),
            "{}",
            out.stderr
        );
        assert_eq!(u.updater_id(), h.updater_id(), "one identity per host");
        updaters.push(u);
    }
    let mut w = World {
        f,
        updaters,
        trace: Trace::default(),
    };
    w.round();
    assert_eq!(w.updaters_on(), vec![Some("1.0.0".to_string()); 2]);

    // ternd keeps one row per product for each host.
    let agents = w.f.ctl.json(&["inventory", "ls"]).unwrap();
    let upd =
        w.f.ctl
            .json(&["--product", "updater", "inventory", "ls"])
            .unwrap();
    let ids = |v: &serde_json::Value| {
        let mut ids: Vec<String> = v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["updater_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&agents).len(), 2, "{agents}");
    assert_eq!(ids(&agents), ids(&upd), "{agents}\n{upd}");
    assert!(
        upd["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["version"] == "1.0.0"),
        "{upd}"
    );

    // The updater moves on its own rollout; the agents stay.
    w.f.ctl.run(&["updater", "new-rollout", "1.1.0"]).unwrap();
    w.f.clock_set(&at(MON, "10:05")).unwrap();
    let mut last = Vec::new();
    for _ in 0..3 {
        last = w.round();
    }
    assert_eq!(
        w.updaters_on(),
        vec![Some("1.1.0".to_string()); 2],
        "{}\n{last:?}",
        w.f.ctl.run(&["updater", "status"]).unwrap()
    );
    assert_eq!(w.agents_on(), vec![Some("1.0.0".to_string()); 2]);

    // A freeze of the fleet (every product): neither the agents' 1.1.0 nor the
    // updater's 1.2.0, both rolled out after dev's window, moves through rounds in
    // Tuesday's window.
    w.f.agents(&["freeze", "--reason", "incident"]).unwrap();
    w.f.clock_set(&at(MON, "12:00")).unwrap();
    w.f.agents(&["new-rollout", "1.1.0"]).unwrap();
    w.f.ctl.run(&["updater", "new-rollout", "1.2.0"]).unwrap();
    for t in ["10:05", "10:15"] {
        w.f.clock_set(&at(TUE, t)).unwrap();
        for (name, out) in w.round() {
            assert!(out.ok(), "{name}: {}", out.stderr);
        }
    }
    assert_eq!(w.updaters_on(), vec![Some("1.1.0".to_string()); 2]);
    assert_eq!(w.agents_on(), vec![Some("1.0.0".to_string()); 2]);
    let text = w.f.ctl.run(&["updater", "status"]).unwrap();
    assert!(text.contains("frozen") || text.contains("freeze"), "{text}");

    // Lifted: both move.
    w.f.agents(&["unfreeze"]).unwrap();
    w.f.clock_set(&at(TUE, "10:20")).unwrap();
    for _ in 0..3 {
        w.round();
    }
    assert_eq!(w.updaters_on(), vec![Some("1.2.0".to_string()); 2]);
    assert_eq!(w.agents_on(), vec![Some("1.1.0".to_string()); 2]);

    w.f.check_invariant().unwrap();
    tern_e2e::fleet::check_trace(&w.trace, w.f.path()).unwrap();
}
