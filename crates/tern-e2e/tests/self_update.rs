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

use tern_core::fixtures::{halt_on_error, halt_on_error_config};
use tern_core::invariant::{InstallKind, Trace, TraceEvent};
use tern_e2e::sign;
use tern_e2e::updater::{self, UpdaterHost};
use tern_e2e::{Fleet, FleetOptions, RunOutcome, Status};

const MON: &str = "2026-11-23";
const TUE: &str = "2026-11-24";
const WED: &str = "2026-11-25";

fn at(day: &str, hm: &str) -> String {
    format!("{day}T{hm}:00Z")
}

struct Lab {
    f: Fleet,
    hosts: Vec<UpdaterHost>,
    trace: Trace,
    /// Every `(host, version)` a host's run started installing (its `updating A -> B`).
    tried: Vec<(String, String)>,
    /// The hosts pin the release root: an attempt enters the trace as an install only
    /// when the release was unpacked, with whether the host's log says it was signed.
    pinned: bool,
    /// Every command is run by the binary the host was given (its package's, its
    /// timer's), which hands it to the managed release and watches it; else by the
    /// release the host's link names.
    via_bootstrap: bool,
}

impl Lab {
    /// Runs `args` on `h` as its timer would.
    fn run_on(&self, h: &UpdaterHost, args: &[&str]) -> RunOutcome {
        if self.via_bootstrap {
            h.run_program(&h.bootstrap, args).unwrap()
        } else {
            h.run(args).unwrap()
        }
    }

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
        self.trace
            .events
            .push(status.trace_state(tern_core::gate::AGENT, BTreeMap::new()));
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
                .map(|h| (h.name.clone(), s.spawn(|| self.run_on(h, &["update"]))))
                .collect();
            handles
                .into_iter()
                .map(|(n, h)| (n, h.join().unwrap()))
                .collect()
        });
        let mut started = Vec::new();
        let mut tried = Vec::new();
        for (name, out) in &runs {
            let h = self.host(name);
            for line in out.stderr.lines() {
                let Some((_, rest)) = line.split_once("updating ") else {
                    continue;
                };
                let Some((from, to)) = rest.split_once(" -> ") else {
                    continue;
                };
                let to = to.trim();
                tried.push((name.clone(), to.to_string()));
                if self.pinned && !h.has_version_dir(to) {
                    // Refused before anything was unpacked: nothing was installed.
                    continue;
                }
                let signed = self.pinned.then(|| {
                    out.stderr
                        .contains(&format!("{to} is signed by the release keys"))
                });
                let event = TraceEvent::Install {
                    at: status.now,
                    product: tern_core::gate::AGENT.into(),
                    via: tern_core::invariant::Via::Find,
                    host: h.updater_id().unwrap(),
                    group: h.group.clone(),
                    labels: BTreeMap::new(),
                    from: Some(from.trim().to_string()),
                    to: to.trim().to_string(),
                    kind: InstallKind::Scheduled,
                    signed,
                    pinned_root: self.pinned,
                };
                started.push(event);
            }
        }
        self.trace.events.extend(started);
        self.tried.extend(tried);
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
                s.spawn(|| self.run_on(h, &["heartbeat"]));
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
    lab_with(|f| {
        let real = std::fs::read(&f.bins.tern_update).unwrap();
        for v in ["1.0.0", "1.1.0"] {
            updater::publish(&f.artifacts, v, &real).unwrap();
        }
        updater::publish(&f.artifacts, "1.2.0", &updater::broken_program()).unwrap();
        Vec::new()
    })
}

/// [`lab`] with the releases `publish` puts on the artifact server; it returns more
/// `enable` flags for every host (a non-empty list: the hosts pin a release root).
fn lab_with(publish: impl FnOnce(&Fleet) -> Vec<String>) -> Lab {
    let f = Fleet::start(FleetOptions {
        releases: Vec::new(),
        ..FleetOptions::default()
    })
    .unwrap();
    let extra = publish(&f);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
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
                .enable_with(
                    &f.gateway.url,
                    &f.gateway.artifacts_url(),
                    &f.agent_token_file,
                    &extra,
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
        tried: Vec::new(),
        pinned: !extra.is_empty(),
        via_bootstrap: false,
    };
    lab.all_linked("1.0.0");
    // A release is healthy once it has proven itself: two rounds in which it
    // heartbeat and asked find for every namespace of its host.
    for _ in 0..2 {
        let (runs, _) = lab.tick("2m");
        assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    }
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
        out.stderr.contains("running the updater release 1.1.0")
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
    tern_e2e::fleet::check_trace(&lab.trace, lab.f.path()).unwrap();
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
    // Every host's updater holds while the agents' ternd stops the host, whatever
    // other hold comes first in its answer (the first hold once hid the rest).
    let held = |why: &str| {
        for _ in 0..2 {
            upd.reconcile().unwrap();
            for h in &hosts {
                let out = h.run(&["update"]).unwrap();
                assert!(out.ok(), "{}: {}", h.name, out.stderr);
                assert!(
                    out.stderr.contains("holds every update of this host")
                        && out.stderr.contains(why),
                    "{}: {}\n{}",
                    h.name,
                    out.stderr,
                    upd.ctl.run(&["agents", "status"]).unwrap_or_default()
                );
                assert_eq!(h.linked_version().as_deref(), Some("1.0.0"), "{}", h.name);
            }
        }
    };
    held("frozen");
    assert_eq!(upd.status().unwrap().state_of("staging"), "active");
    // A freeze under a disabled mode (find names mode_disabled first).
    agents
        .apply(&halt_on_error_config(
            "disabled",
            &[tern_core::fixtures::group("staging", 10)],
        ))
        .unwrap();
    held("frozen");
    agents
        .apply(&halt_on_error(&[("staging", 10, 0, 0)]))
        .unwrap();
    // A freeze with no rollout (no_rollout first).
    agents.ctl.run(&["rm", "version"]).unwrap();
    agents.reconcile().unwrap();
    held("frozen");
    agents.set_version("1.0.0", "1.0.0", "regular").unwrap();
    // Unfrozen, but the agents' rollout suspended and each host pinned there.
    agents.agents(&["unfreeze"]).unwrap();
    agents.agents(&["suspend"]).unwrap();
    for h in &agents.hosts {
        let id = h.updater_id().unwrap();
        agents
            .ctl
            .run(&["inventory", "pin", &id, "--until", &at(MON, "23:00")])
            .unwrap();
    }
    held("pinned");
    for h in &agents.hosts {
        agents
            .ctl
            .run(&["inventory", "unpin", &h.updater_id().unwrap()])
            .unwrap();
    }
    agents.agents(&["resume"]).unwrap();
    agents
        .agents(&["freeze", "--reason", "incident 7"])
        .unwrap();
    held("frozen");

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

/// The updater's releases signed like the agent's: every host's `updater` namespace
/// pins the release root (`enable --self-update --trust-root`), and the repository is
/// made by the real `tern-release` over the updater's own tarballs. 1.0.0, 1.1.0 and
/// 1.3.0 are signed (all this build's real tern-update); 1.2.0, the same binary, is
/// published with its `.sha256` but never signed; 1.3.0's tarball is replaced on the
/// artifact server after signing (its `.sha256` rewritten to match). A signed 1.1.0
/// rolls out as any release; 1.2.0 and the tampered 1.3.0 are each refused by the one
/// canary before anything is unpacked, which fails it and holds staging: prod never
/// starts, and no other host even tries them.
#[test]
fn a_pinned_updater_installs_only_signed_releases_and_an_unsigned_or_tampered_one_stops_at_the_canary()
 {
    let mut lab = lab_with(|f| {
        let real = std::fs::read(&f.bins.tern_update).unwrap();
        for v in ["1.0.0", "1.1.0", "1.2.0", "1.3.0"] {
            updater::publish(&f.artifacts, v, &real).unwrap();
        }
        let root = sign::sign_updater(f, &["1.0.0", "1.1.0", "1.3.0"]).unwrap();
        // With --url-template there is no --base-url to find the metadata beside, so
        // it is named (without it the host would look on the server).
        vec![
            "--trust-root".into(),
            root.display().to_string(),
            "--trust-url".into(),
            format!("{}/tuf/metadata/", f.gateway.artifacts_url()),
        ]
    });
    let out = lab.host("prod-1").run(&["status"]).unwrap();
    assert!(
        out.stdout
            .contains("verified: installs only what the release keys signed"),
        "{}",
        out.stdout
    );

    // 1.1.0, signed: canary first, then staging, then prod in its window; every
    // install checked against the signed metadata and self-checked before its link.
    lab.clock_set(&at(MON, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.1.0"]);
    let (runs, status) = lab.step_at(&at(MON, "10:00"));
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    let canary = sole_canary(&lab, &status);
    let (_, out) = runs.iter().find(|(n, _)| *n == canary).unwrap();
    assert!(
        out.stderr.contains("1.1.0 is signed by the release keys")
            && out.stderr.contains("the updater now runs 1.1.0"),
        "{}",
        out.stderr
    );
    assert_eq!(lab.host(&canary).linked_version().as_deref(), Some("1.1.0"));
    let mut status = status;
    for t in [
        "10:10", "10:20", "10:30", "14:00", "14:10", "14:20", "14:30",
    ] {
        let (runs, s) = lab.step_at(&at(MON, t));
        assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
        status = s;
        if status.rollout_state() == "done" {
            break;
        }
    }
    assert_eq!(status.rollout_state(), "done");
    lab.all_linked("1.1.0");
    let out = lab.host("prod-2").run(&["self-check"]).unwrap();
    assert!(
        out.ok() && out.stdout.contains("self-check ok"),
        "{}",
        out.stderr
    );

    // 1.2.0, never signed: the canary refuses it, naming why; nothing is unpacked.
    lab.clock_set(&at(TUE, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.2.0"]);
    refused_at_the_canary(
        &mut lab,
        TUE,
        "1.2.0",
        &["is not signed by the release keys"],
    );

    // 1.3.0, signed, but its tarball was replaced on the artifact server afterwards.
    let tampered = sign::tamper_updater(&lab.f, "1.3.0").unwrap();
    lab.clock_set(&at(WED, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.3.0"]);
    refused_at_the_canary(
        &mut lab,
        WED,
        "1.3.0",
        &["does not match the signed release metadata", "sha256"],
    );
    tampered.undo().unwrap();

    // The fleet-safety invariant (a pinned host never installs what was not signed,
    // among the rest) over the run; no host but a canary ever tried 1.2.0 or 1.3.0.
    tern_e2e::fleet::check_trace(&lab.trace, lab.f.path()).unwrap();
    let installs = lab
        .trace
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                TraceEvent::Install {
                    signed: Some(true),
                    pinned_root: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        installs, 5,
        "every host installed the signed 1.1.0 once: {:?}",
        lab.trace
    );
}

fn sole_canary(lab: &Lab, status: &Status) -> String {
    let canaries: Vec<String> = status
        .group("staging")
        .canaries
        .iter()
        .map(|c| lab.name_of(&c.updater_id))
        .collect();
    assert_eq!(canaries.len(), 1, "{canaries:?}");
    canaries[0].clone()
}

/// `version`, just rolled out, reaches staging's canary on `day` at 10:00, which
/// refuses it with an error holding each of `reason`: nothing of it unpacked, the link
/// still on 1.1.0, the canary failed; through prod's window staging holds and prod
/// never starts, and no other host tries it.
fn refused_at_the_canary(lab: &mut Lab, day: &str, version: &str, reason: &[&str]) {
    let (runs, status) = lab.step_at(&at(day, "10:00"));
    let canary = sole_canary(lab, &status);
    let failed = failures(&runs);
    assert_eq!(
        failed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        vec![canary.clone()],
        "exactly the canary tried {version}: {failed:?}"
    );
    let msg = &failed[0].1;
    assert!(
        msg.contains(version)
            && reason.iter().all(|r| msg.contains(r))
            && msg.contains("nothing was installed"),
        "{msg}"
    );
    assert!(
        !msg.contains("self-check"),
        "refused before any self-check: {msg}"
    );
    let mut status = status;
    for t in ["10:30", "12:00", "14:00", "14:30", "16:00"] {
        let (runs, s) = lab.step_at(&at(day, t));
        let (mine, others): (Vec<_>, Vec<_>) =
            failures(&runs).into_iter().partition(|(n, _)| *n == canary);
        assert!(others.is_empty(), "{others:?}");
        // A refusal is not a skip: the canary refuses the release again on each run.
        assert!(
            mine.len() == 1 && reason.iter().all(|r| mine[0].1.contains(r)),
            "{mine:?}"
        );
        status = s;
    }
    assert_eq!(status.state_of("staging"), "canary");
    assert_eq!(status.group("staging").last_update_reason, "canary_failed");
    assert_eq!(status.state_of("prod"), "unstarted");
    lab.all_linked("1.1.0");
    for h in &lab.hosts {
        assert!(!h.has_version_dir(version), "{} unpacked {version}", h.name);
    }
    let id = lab.host(&canary).updater_id().unwrap();
    let inv = lab.f.inventory().unwrap();
    let entry = inv.iter().find(|e| e.updater_id == id).unwrap();
    assert_eq!(entry.version, "1.1.0");
    assert_eq!(entry.healthy, Some(true));
    let failure = entry
        .install_failure
        .as_ref()
        .expect("ternd shows the refusal");
    assert_eq!(
        (failure.version.as_str(), failure.kind.as_str()),
        (version, "not_signed")
    );
    let tried: BTreeSet<&str> = lab
        .tried
        .iter()
        .filter(|(_, v)| v == version)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(tried, BTreeSet::from([canary.as_str()]));
}

/// The watch of a new updater release (docs/updater.md, "The watch"): `bad`, rolled
/// out as 1.3.0, passes its self-check and so is installed and linked on staging's
/// canary. From then on the binary the host's timer runs hands every command to it and
/// watches: on the next run the release does not do its job (`why`), and the host goes
/// back to 1.0.0 by itself, heartbeating, with 1.3.0 skipped. ternd sees the rollback,
/// the canary fails, staging holds and prod never starts; no other host tries 1.3.0,
/// and the canary never tries it again. A rollback from the server then leaves every
/// host on 1.0.0, heartbeating.
fn a_release_that_does_not_do_its_job_is_taken_back(bad: Vec<u8>, flags: &[&str], why: &str) {
    let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    let mut lab = lab_with(|f| {
        let real = std::fs::read(&f.bins.tern_update).unwrap();
        updater::publish(&f.artifacts, "1.0.0", &real).unwrap();
        updater::publish(&f.artifacts, "1.3.0", &bad).unwrap();
        flags
    });
    // The flags pin no release root.
    lab.pinned = false;
    lab.via_bootstrap = true;

    lab.clock_set(&at(MON, "09:30"));
    lab.updater_ctl(&["new-rollout", "1.3.0"]);
    let (runs, status) = lab.step_at(&at(MON, "10:00"));
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    let canary = sole_canary(&lab, &status);
    assert_eq!(
        lab.host(&canary).linked_version().as_deref(),
        Some("1.3.0"),
        "the release passed its self-check and was switched in"
    );

    // The next run of the canary's timer: the watch takes 1.3.0 back.
    let out = lab.run_on(lab.host(&canary), &["heartbeat"]);
    assert!(out.ok(), "the command was still done: {}", out.stderr);
    assert!(
        out.stderr.contains("the updater release 1.3.0 is broken") && out.stderr.contains(why),
        "{}",
        out.stderr
    );
    assert_eq!(
        lab.host(&canary).linked_version().as_deref(),
        Some("1.0.0"),
        "back on the previous release by itself"
    );
    let status_text = lab.run_on(lab.host(&canary), &["status"]).stdout;
    assert!(status_text.contains("1.3.0"), "{status_text}");

    let mut status = status;
    for t in ["10:30", "12:00", "14:00", "14:30", "16:00"] {
        let (runs, s) = lab.step_at(&at(MON, t));
        assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
        status = s;
    }
    assert_eq!(status.state_of("staging"), "canary");
    assert_eq!(status.group("staging").last_update_reason, "canary_failed");
    assert_eq!(status.state_of("prod"), "unstarted");
    lab.all_linked("1.0.0");
    for h in &lab.hosts {
        if h.name != canary {
            assert!(!h.has_version_dir("1.3.0"), "{} unpacked 1.3.0", h.name);
        }
    }
    let tried: Vec<&str> = lab
        .tried
        .iter()
        .filter(|(_, v)| v == "1.3.0")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        tried,
        vec![canary.as_str()],
        "tried once, by the canary alone"
    );
    let id = lab.host(&canary).updater_id().unwrap();
    let inv = lab.f.inventory().unwrap();
    let entry = inv.iter().find(|e| e.updater_id == id).unwrap();
    assert_eq!(entry.version, "1.0.0");
    assert!(entry.rollback, "{entry:?}");
    assert_eq!(entry.failed_version.as_deref(), Some("1.3.0"));

    // The server's recovery: a rollback of the updater's rollout. Every host stays on
    // (or comes back to) 1.0.0 and keeps heartbeating.
    lab.updater_ctl(&["rollback", "staging"]);
    let (runs, _) = lab.tick("10m");
    assert!(failures(&runs).is_empty(), "{:?}", failures(&runs));
    lab.all_linked("1.0.0");
    let inv = lab.f.inventory().unwrap();
    assert_eq!(inv.len(), lab.hosts.len(), "every host heartbeats: {inv:?}");
    assert!(inv.iter().all(|e| e.version == "1.0.0"), "{inv:?}");

    tern_e2e::fleet::check_trace(&lab.trace, lab.f.path()).unwrap();
}

#[test]
fn a_hollow_updater_release_is_taken_back_by_the_host_and_stops_at_the_canary() {
    a_release_that_does_not_do_its_job_is_taken_back(
        updater::hollow_program("1.3.0"),
        &[],
        "it exited without sending a heartbeat",
    );
}

#[test]
fn an_updater_release_that_fails_on_update_is_taken_back_and_stops_at_the_canary() {
    a_release_that_does_not_do_its_job_is_taken_back(
        updater::failing_program("1.3.0"),
        &[],
        "it exited without sending a heartbeat",
    );
}

#[test]
fn an_updater_release_that_hangs_is_taken_back_after_its_bound_and_stops_at_the_canary() {
    a_release_that_does_not_do_its_job_is_taken_back(
        updater::hanging_program("1.3.0"),
        &["--release-timeout", "3s"],
        "did not finish within 3s",
    );
}
