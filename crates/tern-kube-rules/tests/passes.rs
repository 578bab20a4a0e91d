//! Several passes in a row: each decision's image and annotation changes applied to the
//! workload (as the controller will write them), the pods moved on by a tiny stand-in
//! for the Kubernetes controllers (no API server here: the real one comes with the
//! client), time advanced a minute, and the next decision taken from what was written.
//! Shows that an update completes, that a broken version is rolled back once and never
//! retried, and what the heartbeat says after each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use tern_core::wire::{AutoUpdateSettings, FindResponse};
use tern_kube_rules::{
    ContainerStatus, Decision, Digest, Failure, Inputs, Kind, MAX_SKIP_VERSIONS, Pod, Policy,
    ReadyCondition, Resolved, RolloutStatus, Skip, Source, Workload, annotation, decide, heartbeat,
};

const REPO: &str = "registry.example/tern/agent";

fn digest_of(version: &str) -> Digest {
    // A distinct digest per version, as a registry would give.
    let c = match version {
        "1.1.0" => 'a',
        "1.2.0" => 'b',
        _ => 'c',
    };
    Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap()
}

struct Cluster {
    w: Workload,
    pods: Vec<Pod>,
    now: Timestamp,
    /// Versions whose agent crashes on start (as the demo's 1.2.0 would).
    broken: &'static [&'static str],
}

impl Cluster {
    fn new(broken: &'static [&'static str]) -> Self {
        let now: Timestamp = "2026-11-23T12:00:00Z".parse().unwrap();
        let image = format!("{REPO}:1.1.0@{}", digest_of("1.1.0"));
        let mut c = Cluster {
            w: Workload {
                kind: Kind::Deployment,
                uid: "9f0c8f5e-8f4c-4b8e-9f39-7d2f5b1e0c11".into(),
                namespace: "agents".into(),
                name: "agent".into(),
                image,
                annotations: [
                    (annotation::UPDATE.to_string(), "true".to_string()),
                    (annotation::GROUP.to_string(), "dev".to_string()),
                ]
                .into(),
                status: RolloutStatus {
                    generation: 1,
                    ..Default::default()
                },
            },
            pods: Vec::new(),
            now,
            broken,
        };
        c.settle();
        c
    }

    fn version(&self) -> String {
        let tag = self.w.image.split('@').next().unwrap();
        tag.rsplit(':').next().unwrap().to_string()
    }

    /// The Deployment controller and kubelet, reduced to their outcome: three pods of
    /// the spec's image, Ready unless the version is broken (then one new pod
    /// crash-loops and the rollout stops there, the old pods kept).
    fn settle(&mut self) {
        let image = self.w.image.clone();
        let broken = self.broken.contains(&self.version().as_str());
        let old: Vec<Pod> = self
            .pods
            .iter()
            .filter(|p| p.image != image)
            .cloned()
            .collect();
        let (version, now) = (self.version(), self.now);
        let new_pod = |n: usize, ready: bool| Pod {
            name: format!("agent-{version}-{n}"),
            revision: None,
            image: image.clone(),
            ready: Some(ReadyCondition { ready, since: now }),
            created: now,
            terminating: false,
            containers: vec![ContainerStatus {
                name: "agent".into(),
                restart_count: if ready { 0 } else { 4 },
                waiting: (!ready).then(|| "CrashLoopBackOff".to_string()),
            }],
        };
        let s = &mut self.w.status;
        s.observed_generation = s.generation;
        s.desired_replicas = 3;
        if broken && !old.is_empty() {
            self.pods = old.into_iter().take(2).collect();
            self.pods.push(new_pod(0, false));
            (
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas,
            ) = (3, 1, 2, 2);
        } else {
            self.pods = (0..3).map(|n| new_pod(n, !broken)).collect();
            let ready = if broken { 0 } else { 3 };
            (
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas,
            ) = (3, 3, ready, ready);
        }
    }

    fn decide(&self, find_version: &str, resolved: Option<&Resolved>) -> Decision {
        let source = Source::Find(FindResponse {
            auto_update: AutoUpdateSettings {
                agent_version: find_version.into(),
                agent_auto_update: true,
                ..Default::default()
            },
            ..Default::default()
        });
        decide(&Inputs {
            workload: &self.w,
            pods: &self.pods,
            source: &source,
            resolved,
            policy: &Policy::default(),
            now: self.now,
        })
        .unwrap()
    }

    /// Writes what the decision says, as the controller will, then lets a minute pass.
    fn apply(&mut self, d: &Decision) {
        for (k, v) in d.annotation_changes(&self.w, self.now).unwrap() {
            match v {
                Some(v) => self.w.annotations.insert(k.to_string(), v),
                None => self.w.annotations.remove(k),
            };
        }
        let image = match d {
            Decision::Update(u) => Some(u.image.to_string()),
            Decision::Rollback(r) => Some(r.to.to_string()),
            _ => None,
        };
        self.now += SignedDuration::from_mins(1);
        if let Some(image) = image {
            self.w.image = image;
            self.w.status.generation += 1;
            // The new pods start: not Ready yet for one pass.
            for p in &mut self.pods {
                p.ready = Some(ReadyCondition {
                    ready: p.ready.is_some_and(|r| r.ready),
                    since: p.ready.map_or(self.now, |r| r.since),
                });
            }
            self.w.status.observed_generation = self.w.status.generation - 1;
        } else {
            self.settle();
        }
    }

    /// One pass with a digest lookup when asked for: the decision taken.
    fn pass(&mut self, find_version: &str) -> Decision {
        let mut d = self.decide(find_version, None);
        if let Decision::ResolveDigest {
            repository, tag, ..
        } = &d
        {
            let r = Resolved {
                repository: repository.clone(),
                tag: tag.clone(),
                digest: digest_of(tag),
            };
            d = self.decide(find_version, Some(&r));
        }
        self.apply(&d);
        d
    }
}

#[test]
fn a_good_version_rolls_out_and_completes() {
    let mut c = Cluster::new(&[]);
    let d = c.pass("1.2.0");
    let Decision::Update(u) = &d else {
        panic!("expected an update, got {d:?}")
    };
    assert_eq!(
        u.image.to_string(),
        format!("{REPO}:1.2.0@{}", digest_of("1.2.0"))
    );
    assert_eq!(
        c.w.annotations[annotation::PREVIOUS_IMAGE],
        format!("{REPO}:1.1.0@{}", digest_of("1.1.0"))
    );
    assert_eq!(
        heartbeat(&c.w, "0.1.0").unwrap().healthy,
        Some(false),
        "mid-rollout"
    );

    assert!(matches!(c.pass("1.2.0"), Decision::Wait { .. }));
    assert!(matches!(c.pass("1.2.0"), Decision::Completed { .. }));
    assert!(!c.w.annotations.contains_key(annotation::UPDATING_TO));
    assert!(matches!(c.pass("1.2.0"), Decision::Nothing { .. }));

    let hb = heartbeat(&c.w, "0.1.0").unwrap();
    assert_eq!(
        (hb.version.as_str(), hb.healthy, hb.rollback),
        ("1.2.0", Some(true), false)
    );
}

#[test]
fn a_broken_version_is_rolled_back_once_and_never_retried() {
    let mut c = Cluster::new(&["1.2.0"]);
    assert!(matches!(c.pass("1.2.0"), Decision::Update(_)));
    assert!(matches!(c.pass("1.2.0"), Decision::Wait { .. }));
    let d = c.pass("1.2.0");
    let Decision::Rollback(r) = &d else {
        panic!("expected a rollback, got {d:?}")
    };
    assert_eq!(r.failure, Failure::CrashLoop);
    assert_eq!(c.version(), "1.1.0");
    assert_eq!(c.w.annotations[annotation::SKIP_VERSIONS], "1.2.0");

    // ternd keeps saying 1.2.0, now: an hour of passes, not one write.
    for _ in 0..60 {
        let d = c.pass("1.2.0");
        assert!(
            matches!(&d, Decision::Skip(Skip::Version { version, last_failure: Some(f) })
                if version == "1.2.0" && f.reason == "crash-loop"),
            "{d:?}"
        );
    }
    let hb = heartbeat(&c.w, "0.1.0").unwrap();
    assert_eq!(hb.version, "1.1.0");
    assert!(hb.healthy == Some(true) && hb.rollback);
    assert_eq!(hb.failed_version.as_deref(), Some("1.2.0"));

    // A fixed release goes through, and the workload is no longer reported rolled back.
    assert!(matches!(c.pass("1.3.0"), Decision::Update(_)));
    assert!(matches!(c.pass("1.3.0"), Decision::Wait { .. }));
    assert!(matches!(c.pass("1.3.0"), Decision::Completed { .. }));
    let hb = heartbeat(&c.w, "0.1.0").unwrap();
    assert_eq!((hb.version.as_str(), hb.rollback), ("1.3.0", false));
}

#[test]
fn a_full_skip_list_still_records_the_failure() {
    let mut c = Cluster::new(&["1.2.0"]);
    let full: Vec<String> = (0..MAX_SKIP_VERSIONS).map(|n| format!("0.9.{n}")).collect();
    c.w.annotations
        .insert(annotation::SKIP_VERSIONS.into(), full.join(","));
    c.pass("1.2.0");
    c.pass("1.2.0");
    assert!(matches!(c.pass("1.2.0"), Decision::Rollback(_)));
    let list = &c.w.annotations[annotation::SKIP_VERSIONS];
    assert_eq!(list.split(',').count(), MAX_SKIP_VERSIONS);
    assert!(list.ends_with(",1.2.0") && !list.starts_with("0.9.0,"));
    assert!(matches!(
        c.pass("1.2.0"),
        Decision::Skip(Skip::Version { .. })
    ));
}
