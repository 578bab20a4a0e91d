//! Deployments, StatefulSets and pods as the API server sends them (JSON), read into
//! the decision's inputs; what cannot be read names the object and the field.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tern_kube_rules::{Kind, PodManagement};
use tern_kube_update::read;

fn deployment(extra: serde_json::Value) -> Deployment {
    let mut d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "agent", "namespace": "edge", "uid": "0b5c-uid", "generation": 4,
            "annotations": {"tern.dev/update": "true", "tern.dev/group": "staging"}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "agent", "tier": "edge"}},
            "template": {
                "metadata": {"labels": {"app": "agent", "tier": "edge"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1.0.0"}]}
            }
        },
        "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
    });
    merge(&mut d, extra);
    serde_json::from_value(d).unwrap()
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn a_deployment_is_read_with_its_container_and_selector() {
    let r = read::deployment(&deployment(json!({}))).unwrap();
    let w = &r.workload;
    assert_eq!(w.kind, Kind::Deployment);
    assert_eq!(
        (w.uid.as_str(), w.namespace.as_str(), w.name.as_str()),
        ("0b5c-uid", "edge", "agent")
    );
    assert_eq!(w.image, "registry.example/agent:1.0.0");
    assert_eq!(w.annotations["tern.dev/group"], "staging");
    assert_eq!(
        (
            w.status.generation,
            w.status.observed_generation,
            w.status.desired_replicas
        ),
        (4, 4, 3)
    );
    assert_eq!(
        (w.status.ready_replicas, w.status.available_replicas),
        (2, 2)
    );
    assert_eq!(r.container, "agent");
    assert_eq!(r.selector, "app=agent,tier=edge");
    // Settings the decision reads come through.
    assert_eq!(w.settings().unwrap().group, "staging");
}

#[test]
fn replicas_default_to_one_and_a_missing_status_to_zero() {
    let mut d = deployment(json!({}));
    d.spec.as_mut().unwrap().replicas = None;
    d.status = None;
    let w = read::deployment(&d).unwrap().workload;
    assert_eq!(w.status.desired_replicas, 1);
    assert_eq!((w.status.replicas, w.status.observed_generation), (0, 0));
}

#[test]
fn the_agent_container_is_the_only_one_or_the_named_one() {
    let two = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "proxy", "image": "envoy:1"},
        {"name": "tern-agent", "image": "registry.example/agent:1.0.0"}
    ]}}}});
    let err = read::deployment(&deployment(two.clone())).unwrap_err();
    assert_eq!(err.object, "Deployment edge/agent");
    assert!(
        err.why.contains("2 containers") && err.why.contains("tern.dev/container"),
        "{err}"
    );
    let named =
        deployment(json!({"metadata": {"annotations": {"tern.dev/container": "tern-agent"}}}));
    let mut named_two = serde_json::to_value(named).unwrap();
    merge(&mut named_two, two);
    let r = read::deployment(&serde_json::from_value(named_two.clone()).unwrap()).unwrap();
    assert_eq!(
        (r.container.as_str(), r.workload.image.as_str()),
        ("tern-agent", "registry.example/agent:1.0.0")
    );
    merge(
        &mut named_two,
        json!({"metadata": {"annotations": {"tern.dev/container": "nope"}}}),
    );
    let err = read::deployment(&serde_json::from_value(named_two).unwrap()).unwrap_err();
    assert!(err.why.contains("no container named \"nope\""), "{err}");
}

#[test]
fn what_cannot_be_read_is_named() {
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (json!({"metadata": {"uid": ""}}), "metadata.uid is missing"),
        (
            json!({"spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}}),
            "matchExpressions",
        ),
        (
            json!({"spec": {"selector": {"matchLabels": {}}}}),
            "no matchLabels",
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": [{"name": "agent"}]}}}}),
            "has no image",
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": []}}}}),
            "no container",
        ),
    ];
    for (extra, want) in cases {
        let mut d = serde_json::to_value(deployment(json!({}))).unwrap();
        merge(&mut d, extra.clone());
        if extra["spec"]["selector"]["matchLabels"] == json!({}) {
            d["spec"]["selector"]["matchLabels"] = json!({});
        }
        let err = read::deployment(&serde_json::from_value(d).unwrap()).unwrap_err();
        assert!(
            err.to_string().starts_with("Deployment edge/agent: "),
            "{err}"
        );
        assert!(err.why.contains(want), "{extra}: {err}");
    }
}

#[test]
fn a_stateful_set_carries_its_policy_and_revisions() {
    let s: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": "db", "uid": "ss-uid", "generation": 2,
                     "annotations": {"tern.dev/update": "report-only"}},
        "spec": {
            "serviceName": "agent",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1.0.0"}]}}
        },
        "status": {"replicas": 2, "currentRevision": "agent-6d4f", "updateRevision": "agent-7c9a", "observedGeneration": 2}
    }))
    .unwrap();
    let w = read::stateful_set(&s).unwrap().workload;
    assert_eq!(
        w.kind,
        Kind::StatefulSet {
            pod_management: PodManagement::Parallel
        }
    );
    assert_eq!(
        (
            w.status.current_revision.as_str(),
            w.status.update_revision.as_str()
        ),
        ("agent-6d4f", "agent-7c9a")
    );
    assert_eq!((w.status.desired_replicas, w.status.replicas), (1, 2));
    let mut bad = s.clone();
    bad.spec.as_mut().unwrap().pod_management_policy = Some("Whenever".into());
    let err = read::stateful_set(&bad).unwrap_err();
    assert_eq!(err.object, "StatefulSet db/agent");
    assert!(err.why.contains("podManagementPolicy"), "{err}");
    bad.spec.as_mut().unwrap().pod_management_policy = None;
    assert_eq!(
        read::stateful_set(&bad).unwrap().workload.kind,
        Kind::StatefulSet {
            pod_management: PodManagement::OrderedReady
        },
        "the default policy"
    );
}

#[test]
fn a_pod_is_read_with_readiness_restarts_and_waiting_reasons() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent-0", "namespace": "db", "creationTimestamp": "2026-11-24T10:00:00Z",
                     "labels": {"controller-revision-hash": "agent-7c9a"},
                     "deletionTimestamp": "2026-11-24T10:05:00Z"},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1"},
            {"name": "agent", "image": "registry.example/agent:1.1.0@sha256:aaaa"}
        ]},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-24T10:00:01Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-24T10:00:30Z"}
            ],
            "containerStatuses": [
                {"name": "agent", "restartCount": 4, "image": "x", "imageID": "", "ready": false,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]
        }
    }))
    .unwrap();
    let pod = read::pod(&p, "agent").unwrap();
    assert_eq!(pod.name, "agent-0");
    assert_eq!(pod.revision.as_deref(), Some("agent-7c9a"));
    assert_eq!(pod.image, "registry.example/agent:1.1.0@sha256:aaaa");
    let ready = pod.ready.unwrap();
    assert!(!ready.ready);
    assert_eq!(ready.since.to_string(), "2026-11-24T10:00:30Z");
    assert!(pod.terminating);
    assert_eq!(pod.containers.len(), 1);
    assert_eq!(pod.containers[0].restart_count, 4);
    assert_eq!(
        pod.containers[0].waiting.as_deref(),
        Some("CrashLoopBackOff")
    );
    // A pod the API server sent without a creation time.
    let mut bare = p.clone();
    bare.metadata.creation_timestamp = None;
    let err = read::pod(&bare, "agent").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Pod db/agent-0: metadata.creationTimestamp is missing"
    );
}
