//! The updater rolled out by Tern (docs/updater.md, "The updater's own rollout"), on
//! real processes: a ternd (dev clock) serving the updater's rollout, the artifact
//! gateway over loopback, and hosts whose `updater` namespace manages tern-update
//! itself, each run by the tern-update its own link names, as its timer would.
//!
//! The releases: 1.0.0 and 1.1.0 are this build's real `tern-update` binary, packed
//! under two version numbers (they stand in for two builds: the switch, the
//! self-check and the hand-over to the linked release are the real ones). 1.2.0 is a
//! program that exits at start ([`updater::broken_program`]), standing in for a
//! broken build. It must be caught on the canary and reach no other host; the
//! fleet-safety invariant checker (`tern_core::invariant`) is run over what ternd said
//! and what every host started installing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use tern_core::fixtures::halt_on_error;
use tern_core::invariant::{InstallKind, Trace, TraceEvent};
use tern_e2e::updater::{self, UpdaterHost};
use tern_e2e::{Fleet, FleetOptions, RunOutcome, Status};

const MON: &str = "2026-11-23";
const TUE: &str = "2026-11-24";

fn at(day: &str, hm: &str) -> String {
    format!("{day}T{hm}:00Z")
}

struct Lab {
    f: Fleet,
    hosts: Vec<UpdaterHost>,
    trace: Trace,
}

impl Lab {
    fn host(&self, name: &str) -> &UpdaterHost {
        self.hosts.iter().find(|h| h.name == name).unwrap()
    }

    fn name_of(&self, updater_id: &str) -> String {
        self.hosts
            .iter()
            .find(|h| h.updater_id().as_deref() == Some(updater_id))
            .map(|h| h.name.clone())
            .unwrap_or_else(|| panic!("no host has updater id {updater_id}"))
    }

    /// What ternd serves now, for the trace (the mode in force, a freeze).
    fn record_state(&mut self) -> Status {
        let status = self.f.status().unwrap();
        let frozen = status.modes.frozen.is_some();
        let mode = tern_core::rollout::frozen_mode(status.modes.mode, frozen);
        let rollout = status.0.rollout.clone().map(|mut r| {
            r.spec.autoupdate_mode = mode;
            Box::new(r)
        });
        self.trace.events.push(TraceEvent::State {
            at: status.now,
            rollout,
            frozen,
            pins: BTreeMap::new(),
        });
        status
    }

    /// One round at the current instant: reconcile, every host's timer runs `update`
    /// (recording each install it starts, from its log line `updating A -> B`),
    /// reconcile, status.
    fn step(&mut self) -> (Vec<(String, RunOutcome)>, Status) {
        self.f.reconcile().unwrap();
        let status = self.record_state();
        let runs: Vec<(String, RunOutcome)> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .hosts
                .iter()
                .map(|h| (h.name.clone(), s.spawn(|| h.run(&["update"]).unwrap())))
                .collect();
            handles
                .into_iter()
                .map(|(n, h)| (n, h.join().unwrap()))
                .collect()
        });
        let mut started = Vec::new();
        for (name, out) in &runs {
            let h = self.host(name);
            for line in out.stderr.lines() {
                let Some((_, rest)) = line.split_once("updating ") else {
                    continue;
                };
                let Some((from, to)) = rest.split_once(" -> ") else {
                    continue;
                };
                let event = TraceEvent::Install {
                    at: status.now,
                    host: h.updater_id().unwrap(),
                    group: h.group.clone(),
                    labels: BTreeMap::new(),
                    from: Some(from.trim().to_string()),
                    to: to.trim().to_string(),
                    kind: InstallKind::Scheduled,
                    signed: None,
                    pinned_root: false,
                };
                started.push(event);
            }
        }
        self.trace.events.extend(started);
        self.f.reconcile().unwrap();
        let status = self.f.status().unwrap();
        (runs, status)
    }

    /// Moves ternd's clock; every host heartbeats then, as real hosts would have all
    /// along (ternd forgets a host silent for three minutes of its clock).
    fn clock_set(&self, t: &str) {
        self.f.clock_set(t).unwrap();
        self.heartbeat_all();
    }

    fn heartbeat_all(&self) {
        std::thread::scope(|s| {
            for h in &self.hosts {
                s.spawn(|| h.run(&["heartbeat"]).unwrap());
            }
        });
    }

    fn step_at(&mut self, t: &str) -> (Vec<(String, RunOutcome)>, Status) {
        self.clock_set(t);
        self.step()
    }

    fn tick(&mut self, d: &str) -> (Vec<(String, RunOutcome)>, Status) {
        self.f.clock_advance(d).unwrap();
        self.heartbeat_all();
        self.step()
    }

    /// `ternctl updater --updater-server URL ARGS…` (the operator's commands for the
    /// updater's rollout), then a reconcile.
    fn updater_ctl(&self, args: &[&str]) -> String {
        let mut a = vec!["updater", "--updater-server", self.f.ternd.url.as_str()];
        a.extend_from_slice(args);
        let out = self.f.ctl.run(&a).unwrap();
        self.f.reconcile().unwrap();
        out
    }

    fn linked(&self) -> BTreeMap<String, Option<String>> {
        self.hosts
            .iter()
            .map(|h| (h.name.clone(), h.linked_version()))
            .collect()
    }

    fn all_linked(&self, version: &str) {
        let off: Vec<_> = self
            .linked()
            .into_iter()
            .filter(|(_, v)| v.as_deref() != Some(version))
            .collect();
        assert!(
            off.is_empty(),
            "expected every updater on {version}: {off:?}"
        );
    }
}

fn failures(runs: &[(String, RunOutcome)]) -> Vec<(String, String)> {
    runs.iter()
        .filter(|(_, o)| !o.ok())
        .map(|(n, o)| (n.clone(), format!("{}\n{}", o.message(), o.stderr)))
        .collect()
}

/// staging (10:00, one canary) and prod (14:00): three and two hosts, each enrolled
/// with `enable --self-update` and running the updater release 1.0.0.
fn lab() -> Lab {
    let f = Fleet::start(FleetOptions {
        releases: Vec::new(),
        ..FleetOptions::default()
    })
    .unwrap();
    let real = std::fs::read(&f.bins.tern_update).unwrap();
    for v in ["1.0.0", "1.1.0"] {
        updater::publish(&f.artifacts, v, &real).unwrap();
    }
    updater::publish(&f.artifacts, "1.2.0", &updater::broken_program()).unwrap();
    f.apply(&halt_on_error(&[("staging", 10, 1, 0), ("prod", 14, 0, 0)]))
        .unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let root = f.path().join("updater-hosts");
    let mut hosts = Vec::new();
    for (group, n) in [("staging", 3), ("prod", 2)] {
        for i in 1..=n {
            let h = UpdaterHost::new(&root, &format!("{group}-{i}"), group, &f.bins.tern_update)
                .unwrap();
            let out = h
                .enable(
                    &f.gateway.url,
                    &f.gateway.artifacts_url(),
                    &f.agent_token_file,
                )
                .unwrap();
            assert!(out.ok(), "{}: enable failed:\n{}", h.name, out.stderr);
            hosts.push(h);
        }
    }
    let mut lab = Lab {
        f,
        hosts,
        trace: Trace::default(),
    };
    lab.all_linked("1.0.0");
    let (runs, _) = lab.tick("2m");
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    lab
}

#[test]
fn an_updater_release_rolls_out_by_groups_and_a_broken_one_stops_at_the_canary() {
    let mut lab = lab();
    // The linked release answers its self-check, and every command is handed to it.
    let h = lab.host("prod-1");
    let out = h.run(&["self-check"]).unwrap();
    assert!(out.ok(), "{}", out.stderr);
    assert!(out.stdout.contains("self-check ok"), "{}", out.stdout);
    let inv = lab.f.inventory().unwrap();
    assert_eq!(inv.len(), 5, "every updater namespace heartbeats: {inv:?}");
    assert!(
        inv.iter()
            .all(|e| e.version == "1.0.0" && e.healthy == Some(true)),
        "{inv:?}"
    );

    // 1.1.0 (good): staging's canary first, then staging, then prod in its window.
    lab.clock_set(&at(MON, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.1.0"]);
    let (runs, status) = lab.step_at(&at(MON, "10:00"));
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    let canaries: Vec<String> = status
        .group("staging")
        .canaries
        .iter()
        .map(|c| lab.name_of(&c.updater_id))
        .collect();
    assert_eq!(canaries.len(), 1);
    let moved: Vec<_> = lab
        .linked()
        .into_iter()
        .filter(|(_, v)| v.as_deref() == Some("1.1.0"))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(moved, canaries, "only the canary moves first");
    for _ in 0..4 {
        let (runs, status) = lab.tick("10m");
        assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
        if status.state_of("staging") == "done" {
            break;
        }
    }
    for name in ["staging-1", "staging-2", "staging-3"] {
        assert_eq!(
            lab.host(name).linked_version().as_deref(),
            Some("1.1.0"),
            "{name}"
        );
    }
    for name in ["prod-1", "prod-2"] {
        assert_eq!(
            lab.host(name).linked_version().as_deref(),
            Some("1.0.0"),
            "{name}"
        );
    }
    let (runs, _) = lab.step_at(&at(MON, "14:00"));
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    let mut status = lab.tick("10m").1;
    for _ in 0..3 {
        if status.rollout_state() == "done" {
            break;
        }
        status = lab.tick("10m").1;
    }
    assert_eq!(status.rollout_state(), "done");
    lab.all_linked("1.1.0");
    // The binary a host started with (its package's, its timer's) hands every command
    // to the managed release.
    let h = lab.host("prod-2");
    let out = h.run_program(&h.bootstrap, &["heartbeat"]).unwrap();
    assert!(out.ok(), "{}", out.stderr);
    let managed = h.install.join("updater/versions/1.1.0/bin/tern-update");
    assert!(
        out.stderr.contains("running the active version's updater")
            && out.stderr.contains(&managed.display().to_string()),
        "{}",
        out.stderr
    );

    // 1.2.0 exits at start. Tuesday 10:00: staging's canary downloads it, its
    // self-check fails, its link stays on 1.1.0, and the canary fails.
    lab.clock_set(&at(TUE, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.2.0"]);
    let (runs, status) = lab.step_at(&at(TUE, "10:00"));
    let canaries: Vec<String> = status
        .group("staging")
        .canaries
        .iter()
        .map(|c| lab.name_of(&c.updater_id))
        .collect();
    assert_eq!(canaries.len(), 1);
    let failed: Vec<_> = failures(&runs);
    assert_eq!(
        failed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        canaries,
        "exactly the canary tried 1.2.0: {failed:?}"
    );
    let msg = &failed[0].1;
    assert!(
        msg.contains("1.2.0") && msg.contains("self-check") && msg.contains("exited with 101"),
        "{msg}"
    );
    assert!(
        msg.contains("the updater 1.1.0 stays linked and passes its self-check"),
        "{msg}"
    );
    lab.all_linked("1.1.0");

    // Later steps, into prod's window: staging holds in canary, prod never starts.
    let mut status = status;
    for t in ["10:30", "12:00", "14:00", "14:30", "16:00"] {
        let (runs, s) = lab.step_at(&at(TUE, t));
        assert!(
            failures(&runs).is_empty(),
            "the canary does not retry: {:?}",
            failures(&runs)
        );
        status = s;
    }
    assert_eq!(status.state_of("staging"), "canary");
    assert_eq!(status.group("staging").last_update_reason, "canary_failed");
    assert_eq!(status.state_of("prod"), "unstarted");
    lab.all_linked("1.1.0");
    let text = lab.updater_ctl(&["status"]);
    assert!(text.contains("1.2.0") && text.contains("canary"), "{text}");
    let canary = &canaries[0];
    let id = lab.host(canary).updater_id().unwrap();
    let inv = lab.f.inventory().unwrap();
    let inv = inv.iter().find(|e| e.updater_id == id).unwrap();
    assert!(inv.rollback, "{inv:?}");
    assert_eq!(inv.failed_version.as_deref(), Some("1.2.0"));
    assert_eq!(inv.version, "1.1.0");
    assert_eq!(inv.healthy, Some(true));

    // The fleet-safety invariant over everything ternd said and every install a host
    // started; and no host but the canary ever started installing 1.2.0.
    let tried: BTreeSet<String> = lab
        .trace
        .events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Install { host, to, .. } if to == "1.2.0" => Some(lab.name_of(host)),
            _ => None,
        })
        .collect();
    assert_eq!(tried, canaries.iter().cloned().collect::<BTreeSet<_>>());
    for h in &lab.hosts {
        if !canaries.contains(&h.name) {
            assert!(!h.has_version_dir("1.2.0"), "{} unpacked 1.2.0", h.name);
        }
    }
    if let Err(v) = tern_core::invariant::check(&lab.trace) {
        panic!(
            "{v}\n{}",
            serde_json::to_string_pretty(&lab.trace.events[v.index]).unwrap()
        );
    }
}

/// A freeze on the agent's ternd holds the updater's releases too: each host's
/// `updater` namespace asks the agent's ternd (with its `default` namespace's group and
/// id) before installing, and a stop of the whole host there holds it. Two ternds, as
/// in production: one with the agents' rollout, one with the updater's.
#[test]
fn a_freeze_of_the_agents_ternd_holds_the_updater() {
    let mut agents = Fleet::start(FleetOptions::default()).unwrap();
    agents
        .apply(&halt_on_error(&[("staging", 10, 0, 0)]))
        .unwrap();
    agents.set_version("1.0.0", "1.0.0", "regular").unwrap();
    agents.add_hosts("staging", 2).unwrap();

    let upd = Fleet::start(FleetOptions {
        releases: Vec::new(),
        ..FleetOptions::default()
    })
    .unwrap();
    let real = std::fs::read(&upd.bins.tern_update).unwrap();
    for v in ["1.0.0", "1.1.0"] {
        updater::publish(&upd.artifacts, v, &real).unwrap();
    }
    upd.apply(&halt_on_error(&[("staging", 10, 0, 0)])).unwrap();
    upd.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let hosts: Vec<UpdaterHost> = agents
        .hosts
        .iter()
        .map(|h| UpdaterHost::beside(h, &upd.bins.tern_update))
        .collect();
    for h in &hosts {
        let out = h
            .enable(
                &upd.gateway.url,
                &upd.gateway.artifacts_url(),
                &upd.agent_token_file,
            )
            .unwrap();
        assert!(out.ok(), "{}: {}", h.name, out.stderr);
        assert_eq!(h.linked_version().as_deref(), Some("1.0.0"));
    }

    agents
        .agents(&["freeze", "--reason", "incident 7"])
        .unwrap();
    upd.clock_set(&at(MON, "09:30")).unwrap();
    upd.ctl.run(&["agents", "new-rollout", "1.1.0"]).unwrap();
    upd.reconcile().unwrap();
    upd.clock_set(&at(MON, "10:05")).unwrap();
    // The hosts heartbeat after the clock moved, as they would have all along: the
    // group starts only with its hosts counted.
    let heartbeat = || {
        for h in &hosts {
            let out = h.run(&["heartbeat"]).unwrap();
            assert!(out.ok(), "{}: {}", h.name, out.stderr);
        }
        upd.reconcile().unwrap();
    };
    heartbeat();
    upd.clock_advance("2m").unwrap();
    heartbeat();
    for _ in 0..2 {
        upd.reconcile().unwrap();
        for h in &hosts {
            let out = h.run(&["update"]).unwrap();
            assert!(out.ok(), "{}: {}", h.name, out.stderr);
            assert!(
                out.stderr
                    .contains("holds every update of this host (frozen)"),
                "{}: {}\n{}",
                h.name,
                out.stderr,
                upd.ctl.run(&["agents", "status"]).unwrap_or_default()
            );
            assert_eq!(h.linked_version().as_deref(), Some("1.0.0"), "{}", h.name);
        }
    }
    assert_eq!(upd.status().unwrap().state_of("staging"), "active");

    // Lifted on the agents' ternd: the updater's rollout goes on.
    agents.agents(&["unfreeze"]).unwrap();
    upd.reconcile().unwrap();
    for h in &hosts {
        let out = h.run(&["update"]).unwrap();
        assert!(out.ok(), "{}: {}", h.name, out.stderr);
        assert_eq!(
            h.linked_version().as_deref(),
            Some("1.1.0"),
            "{}: {}",
            h.name,
            out.stderr
        );
    }
}
