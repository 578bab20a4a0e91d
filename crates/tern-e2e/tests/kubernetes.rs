//! A fleet of VM hosts and Kubernetes workloads as one fleet: a real ternd (dev clock),
//! real hosts running tern-update and the demo agent, and two Deployments managed by
//! the Kubernetes controller (`tern-kube-update`, its real code and client).
//!
//! The Kubernetes API server is a stand-in (`tern_kube_update::fake_apiserver`):
//! none can run on these machines. It serves the REST subset the controller uses with
//! resourceVersion conflicts, and plays the cluster's controllers and kubelet. Its
//! kubelet runs each pod's container as a real process: the demo agent release its
//! image's tag names, pulled only when its digest is the one pinned (the registry is a
//! stand-in too: image `REPO:VERSION` is that release's program, its digest the
//! program's sha256). So 1.0.0 and 1.1.0 become Ready, and 1.2.0, which panics on
//! start, crash-loops, as on the VM hosts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use tern_core::fixtures::halt_on_error;
use tern_e2e::release;
use tern_e2e::{Fleet, FleetOptions, Step};
use tern_kube_rules::Decision;
use tern_kube_update::fake_apiserver::{FakeApiServer, Kind};
use tern_kube_update::{Controller, DigestFile, Elector, LeaseSettings, Outcome, Ternd, Written};

const REPO: &str = "registry.example/tern/agent";
const NS: &str = "edge";

/// The digest of `REPO:version`: its program's sha256.
fn digest(version: &str) -> String {
    let r = release::standard()
        .into_iter()
        .find(|r| r.version == version)
        .unwrap();
    release::sha256_digest(&release::agent_program(&r).unwrap()).unwrap()
}

struct Kube {
    rt: tokio::runtime::Runtime,
    server: FakeApiServer,
    controllers: Vec<(Controller, Elector)>,
    /// Per controller: writes made, and decisions that would write (updates,
    /// completions, rollbacks).
    writes: Vec<usize>,
    acting: Vec<usize>,
}

impl Kube {
    fn start(f: &Fleet, controllers: usize) -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = rt.block_on(FakeApiServer::start());
        server.run_images(f.releases.iter().map(|r| {
            (
                format!("{REPO}:{}", r.version),
                release::agent_program(r).unwrap(),
            )
        }));
        let digests = f.path().join("digests.json");
        std::fs::write(
            &digests,
            json!({
                format!("{REPO}:1.1.0"): digest("1.1.0"),
                format!("{REPO}:1.2.0"): digest("1.2.0"),
            })
            .to_string(),
        )
        .unwrap();
        // The controller heartbeats for many workloads: a shared agent token.
        let token = f.ctl.agent_token("kubernetes controller").unwrap();
        let controllers: Vec<(Controller, Elector)> = (0..controllers)
            .map(|i| {
                let _guard = rt.enter();
                let controller = Controller {
                    client: server.client(),
                    namespaces: vec![NS.into()],
                    fleet: Arc::new(Ternd::new(&f.ternd.url, Some(token.clone()), None)),
                    digests: Arc::new(DigestFile {
                        path: digests.clone(),
                    }),
                    policy: tern_kube_rules::Policy::default(),
                    version: "0.1.0".into(),
                };
                let elector = Elector::new(
                    server.client(),
                    LeaseSettings {
                        namespace: "tern-system".into(),
                        name: "tern-kube-update".into(),
                        identity: format!("controller-{i}"),
                        duration: std::time::Duration::from_secs(60),
                    },
                );
                (controller, elector)
            })
            .collect();
        let n = controllers.len();
        Self {
            rt,
            server,
            controllers,
            writes: vec![0; n],
            acting: vec![0; n],
        }
    }

    fn deployment(&self, name: &str, group: &str, version: &str) {
        self.server.create(
            Kind::Deployment,
            NS,
            json!({
                "metadata": {"name": name, "annotations": {"tern.dev/update": "true", "tern.dev/group": group}},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "agent", "image": format!("{REPO}:{version}")}]}
                    }
                }
            }),
        );
    }

    /// The cluster settles, then every controller runs one pass (each asks the Lease
    /// first), then the cluster settles again: the outcomes per controller.
    fn pass(&mut self, now: &str) -> Vec<Vec<Outcome>> {
        let now: jiff::Timestamp = now.parse().unwrap();
        self.server.settle(now);
        let mut all = Vec::new();
        for (i, (controller, elector)) in self.controllers.iter_mut().enumerate() {
            let outcomes = self.rt.block_on(async {
                let _ = elector.round().await;
                let leader = || elector.is_leader();
                controller.pass(now, &leader).await
            });
            for o in &outcomes {
                if o.written.is_some() {
                    self.writes[i] += 1;
                }
                if matches!(
                    o.decision,
                    Ok(Decision::Update(_) | Decision::Completed { .. } | Decision::Rollback(_))
                ) {
                    self.acting[i] += 1;
                }
                assert!(o.decision.is_ok(), "{o:?}");
                assert!(o.write_error.is_none(), "{o:?}");
                assert!(o.heartbeat_error.is_none(), "{o:?}");
            }
            all.push(outcomes);
        }
        self.server.settle(now);
        all
    }

    fn image(&self, name: &str) -> String {
        let d = self.server.get(Kind::Deployment, NS, name).unwrap();
        d["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Each of the Deployment's two pods runs the `version` program, as a process.
    fn assert_pods_run(&self, name: &str, version: &str) {
        let pods = self.server.pods_of(NS, name);
        assert_eq!(pods.len(), 2, "{pods:?}");
        for pod in pods {
            let running = self.server.running_versions(NS, &pod);
            assert_eq!(
                running.get("agent").map(String::as_str),
                Some(version),
                "{pod}"
            );
        }
    }

    fn annotation(&self, name: &str, key: &str) -> Option<String> {
        let d = self.server.get(Kind::Deployment, NS, name).unwrap();
        d["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    }
}

/// One round: the clock moves, the hosts heartbeat, the controllers pass (heartbeats,
/// find, writes), the fleet steps (reconcile, hosts update, reconcile), and the
/// controllers pass again to act on what the reconcile decided.
fn round(f: &Fleet, k: &mut Kube, d: &str) -> Step {
    let now = f.clock_advance(d).unwrap();
    f.heartbeat_all();
    k.pass(&now);
    let step = f.step().unwrap();
    k.pass(&step.now);
    step
}

/// Brings the clock to `t` with every host and workload heartbeating on the way, as
/// they would all along: a dev clock that jumps makes ternd forget agents silent for
/// three heartbeat intervals, and a group whose agents all just came back has no
/// settled canary candidates.
fn arrive(f: &Fleet, k: &mut Kube, t: &str) -> Step {
    let t: jiff::Timestamp = t.parse().unwrap();
    let before = t - jiff::SignedDuration::from_mins(3);
    f.clock_set(&before.to_string()).unwrap();
    let mut step = round(f, k, "1m");
    for _ in 0..2 {
        step = round(f, k, "1m");
    }
    assert_eq!(step.now.parse::<jiff::Timestamp>().unwrap(), t);
    step
}

fn until(f: &Fleet, k: &mut Kube, group: &str, state: &str, n: usize) -> Step {
    let mut step = round(f, k, "1m");
    for _ in 0..n {
        if step.status.state_of(group) == state {
            break;
        }
        step = round(f, k, "10m");
    }
    assert_eq!(
        step.status.state_of(group),
        state,
        "{:?}\n{}",
        step.status.group(group),
        f.describe()
    );
    step
}

/// The workload whose uid (its updater id) is `uid`.
fn uid_name(k: &Kube, uid: &str) -> Option<&'static str> {
    ["agent-a", "agent-b"]
        .into_iter()
        .find(|n| k.server.get(Kind::Deployment, NS, n).unwrap()["metadata"]["uid"] == json!(uid))
}

#[test]
fn workloads_update_with_the_fleet_and_a_crashing_canary_is_reverted_and_halts_it() {
    let mut f = Fleet::start(FleetOptions {
        releases: release::standard(),
        ..FleetOptions::default()
    })
    .unwrap();
    // The workloads' group goes first, with one canary: on 1.2.0 that canary is a
    // workload.
    f.apply(&halt_on_error(&[
        ("kube", 10, 1, 0),
        ("dev", 12, 0, 0),
        ("prod", 14, 0, 0),
    ]))
    .unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    f.add_hosts("prod", 2).unwrap();
    let mut k = Kube::start(&f, 2);
    k.deployment("agent-a", "kube", "1.0.0");
    k.deployment("agent-b", "kube", "1.0.0");
    let step = round(&f, &mut k, "2m");
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    // Settled: the report counts the workloads in their group, like hosts, on the
    // target (1.0.0 so far).
    let step = round(&f, &mut k, "2m");
    let kube = step.status.group("kube");
    assert_eq!((kube.present, kube.up_to_date), (2, 2), "{kube:?}");

    // 1.0.0 → 1.1.0: the workloads' group first, its canary a workload.
    arrive(&f, &mut k, "2026-11-23T09:30:00Z");
    f.new_rollout("1.1.0").unwrap();
    let step = arrive(&f, &mut k, "2026-11-23T10:00:00Z");
    let kube = step.status.group("kube");
    assert_eq!(kube.state.as_str(), "canary", "{kube:?}");
    assert_eq!(kube.canaries.len(), 1, "{kube:?}");
    assert!(
        uid_name(&k, &kube.canaries[0].updater_id).is_some(),
        "{kube:?}"
    );
    until(&f, &mut k, "kube", "done", 8);
    for name in ["agent-a", "agent-b"] {
        assert_eq!(k.image(name), format!("{REPO}:1.1.0@{}", digest("1.1.0")));
        k.assert_pods_run(name, "1.1.0");
        assert_eq!(
            k.annotation(name, "tern.dev/previous-image"),
            Some(format!("{REPO}:1.0.0"))
        );
        assert_eq!(
            k.annotation(name, "tern.dev/updating-to"),
            None,
            "completed"
        );
    }
    arrive(&f, &mut k, "2026-11-23T12:00:00Z");
    until(&f, &mut k, "dev", "done", 4);
    arrive(&f, &mut k, "2026-11-23T14:00:00Z");
    let step = until(&f, &mut k, "prod", "done", 4);
    let kube = step.status.group("kube");
    assert_eq!((kube.present, kube.up_to_date), (2, 2), "{kube:?}");

    // Only the Lease holder wrote: the other controller decided alike and wrote
    // nothing.
    let writers: Vec<usize> = (0..2).filter(|&i| k.controllers[i].1.is_leader()).collect();
    assert_eq!(writers.len(), 1);

    // 1.1.0 → 1.2.0: the canary workload's pods crash; it is reverted, the version
    // skipped, and the rollout halts before dev and prod.
    arrive(&f, &mut k, "2026-11-24T09:30:00Z");
    f.new_rollout("1.2.0").unwrap();
    let mut step = arrive(&f, &mut k, "2026-11-24T10:00:00Z");
    let mut reverted = None;
    for _ in 0..8 {
        let canary = step.status.group("kube").canaries.first().cloned();
        if let Some(c) = canary
            && c.failed
        {
            reverted = Some(c.updater_id);
            break;
        }
        step = round(&f, &mut k, "10m");
    }
    let canary = reverted.unwrap_or_else(|| panic!("no failed canary: {}", f.describe()));
    let name = uid_name(&k, &canary).expect("the canary is one of the workloads");
    assert_eq!(
        k.image(name),
        format!("{REPO}:1.1.0@{}", digest("1.1.0")),
        "rolled back"
    );
    assert!(
        k.annotation(name, "tern.dev/skip-versions")
            .unwrap()
            .contains("1.2.0")
    );
    // Its pods run the 1.1.0 program again.
    k.assert_pods_run(name, "1.1.0");
    // Halted: later groups never start, their hosts stay on 1.1.0.
    let step = round(&f, &mut k, "4h");
    assert_eq!(step.status.state_of("dev"), "unstarted", "{}", f.describe());
    assert_eq!(step.status.state_of("prod"), "unstarted");
    let kube = step.status.group("kube");
    assert_eq!(
        (kube.state.as_str(), kube.last_update_reason.as_str()),
        ("canary", "canary_failed"),
        "{kube:?}"
    );
    let vms: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    let bad = f.wait_running(&vms, "1.1.0");
    assert!(bad.is_empty(), "{bad:?}\n{}", f.describe());
    let other = if name == "agent-a" {
        "agent-b"
    } else {
        "agent-a"
    };
    assert_eq!(
        k.annotation(other, "tern.dev/skip-versions"),
        None,
        "never tried"
    );
    assert_eq!(
        k.image(other),
        format!("{REPO}:1.1.0@{}", digest("1.1.0")),
        "not the canary: untouched"
    );
    let _ = (
        Written::DeletedPods(vec![]),
        Decision::Completed {
            version: String::new(),
        },
    );
}
