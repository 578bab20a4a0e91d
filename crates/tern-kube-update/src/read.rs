//! Kubernetes objects as `tern-kube-update`'s decision reads them: a Deployment or
//! StatefulSet into a [`Workload`], its pods into [`Pod`]s. Pure; the API server's
//! answers are untrusted, so what cannot be read is a [`ReadError`] naming the object
//! and the field, and the workload is left alone for this pass. (Counts, annotations
//! and names are checked further by the decision itself.)

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use tern_kube_rules::{
    ContainerStatus, Kind, Pod, PodManagement, ReadyCondition, RolloutStatus, Workload,
};

/// Names the agent's container when the pod template has several.
pub const CONTAINER_ANNOTATION: &str = "tern.dev/container";

/// What makes an object unusable this pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {why}")]
pub struct ReadError {
    /// `Deployment ns/name`, `Pod ns/name`.
    pub object: String,
    pub why: String,
}

/// A workload as read: the decision's input, the agent container's name (to set its
/// image, and to read its pods), and the label selector its pods are listed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadWorkload {
    pub workload: Workload,
    pub container: String,
    /// `spec.selector.matchLabels` as a label selector (`a=b,c=d`).
    pub selector: String,
}

fn name_of(kind: &str, m: &ObjectMeta) -> String {
    format!(
        "{kind} {}/{}",
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("?")
    )
}

/// The agent's container among the template's: the one `tern.dev/container` names, or
/// the only one.
fn agent_container<'c>(
    annotations: &BTreeMap<String, String>,
    containers: &'c [core::Container],
) -> Result<&'c core::Container, String> {
    match annotations.get(CONTAINER_ANNOTATION).map(|s| s.trim()) {
        Some(name) if !name.is_empty() => containers
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("{CONTAINER_ANNOTATION}: no container named {name:?}")),
        _ => match containers {
            [only] => Ok(only),
            [] => Err("the pod template has no container".into()),
            _ => Err(format!(
                "the pod template has {} containers: name the agent's with the {CONTAINER_ANNOTATION} annotation",
                containers.len()
            )),
        },
    }
}

/// Only `matchLabels`: a selector with `matchExpressions` is refused rather than
/// half-applied (listing too many pods would count others' failures as ours).
fn selector_of(s: &LabelSelector) -> Result<String, String> {
    if s.match_expressions.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(
            "spec.selector uses matchExpressions, which the controller does not read".into(),
        );
    }
    let labels = s.match_labels.as_ref().filter(|l| !l.is_empty());
    let Some(labels) = labels else {
        return Err("spec.selector has no matchLabels".into());
    };
    Ok(labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(","))
}

struct Common<'a> {
    meta: &'a ObjectMeta,
    template: Option<&'a core::PodSpec>,
    selector: &'a LabelSelector,
}

fn common(kind: Kind, c: Common<'_>, status: RolloutStatus) -> Result<ReadWorkload, String> {
    let uid = c.meta.uid.clone().filter(|u| !u.is_empty());
    let uid = uid.ok_or("metadata.uid is missing")?;
    let annotations = c.meta.annotations.clone().unwrap_or_default();
    let containers = c.template.map_or(&[][..], |s| &s.containers[..]);
    let container = agent_container(&annotations, containers)?;
    let image = container
        .image
        .clone()
        .ok_or_else(|| format!("container {:?} has no image", container.name))?;
    Ok(ReadWorkload {
        workload: Workload {
            kind,
            uid,
            namespace: c.meta.namespace.clone().unwrap_or_default(),
            name: c.meta.name.clone().unwrap_or_default(),
            image,
            annotations,
            status,
        },
        container: container.name.clone(),
        selector: selector_of(c.selector)?,
    })
}

/// A Deployment. `spec.replicas` absent means 1, as Kubernetes defaults it.
pub fn deployment(d: &Deployment) -> Result<ReadWorkload, ReadError> {
    let err = |why: String| ReadError {
        object: name_of("Deployment", &d.metadata),
        why,
    };
    let spec = d
        .spec
        .as_ref()
        .ok_or_else(|| err("it has no spec".into()))?;
    let st = d.status.clone().unwrap_or_default();
    let status = RolloutStatus {
        generation: d.metadata.generation.unwrap_or(0),
        observed_generation: st.observed_generation.unwrap_or(0),
        desired_replicas: spec.replicas.unwrap_or(1).into(),
        replicas: st.replicas.unwrap_or(0).into(),
        updated_replicas: st.updated_replicas.unwrap_or(0).into(),
        ready_replicas: st.ready_replicas.unwrap_or(0).into(),
        available_replicas: st.available_replicas.unwrap_or(0).into(),
        current_revision: String::new(),
        update_revision: String::new(),
    };
    common(
        Kind::Deployment,
        Common {
            meta: &d.metadata,
            template: spec.template.spec.as_ref(),
            selector: &spec.selector,
        },
        status,
    )
    .map_err(err)
}

/// A StatefulSet, with its pod management policy and revisions.
pub fn stateful_set(s: &StatefulSet) -> Result<ReadWorkload, ReadError> {
    let err = |why: String| ReadError {
        object: name_of("StatefulSet", &s.metadata),
        why,
    };
    let spec = s
        .spec
        .as_ref()
        .ok_or_else(|| err("it has no spec".into()))?;
    let pod_management = match spec.pod_management_policy.as_deref() {
        None | Some("OrderedReady") => PodManagement::OrderedReady,
        Some("Parallel") => PodManagement::Parallel,
        Some(other) => {
            return Err(err(format!(
                "spec.podManagementPolicy {:?} is neither OrderedReady nor Parallel",
                tern_core::text::excerpt(other, 64)
            )));
        }
    };
    let st = s.status.clone().unwrap_or_default();
    let status = RolloutStatus {
        generation: s.metadata.generation.unwrap_or(0),
        observed_generation: st.observed_generation.unwrap_or(0),
        desired_replicas: spec.replicas.unwrap_or(1).into(),
        replicas: st.replicas.into(),
        updated_replicas: st.updated_replicas.unwrap_or(0).into(),
        ready_replicas: st.ready_replicas.unwrap_or(0).into(),
        available_replicas: st.available_replicas.unwrap_or(0).into(),
        current_revision: st.current_revision.unwrap_or_default(),
        update_revision: st.update_revision.unwrap_or_default(),
    };
    common(
        Kind::StatefulSet { pod_management },
        Common {
            meta: &s.metadata,
            template: spec.template.spec.as_ref(),
            selector: &spec.selector,
        },
        status,
    )
    .map_err(err)
}

/// One of the workload's pods; `container` is the agent's. A pod without a creation
/// time is refused (the API server always sets it).
pub fn pod(p: &core::Pod, container: &str) -> Result<Pod, ReadError> {
    let err = |why: String| ReadError {
        object: name_of("Pod", &p.metadata),
        why,
    };
    let labels = p.metadata.labels.as_ref();
    let revision = labels.and_then(|l| {
        l.get("controller-revision-hash")
            .or_else(|| l.get("pod-template-hash"))
            .cloned()
    });
    let image = p
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let status = p.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| {
            Some(ReadyCondition {
                ready: c.status == "True",
                since: c.last_transition_time.as_ref()?.0,
            })
        });
    let containers = status
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    restart_count: c.restart_count.into(),
                    waiting: c
                        .state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .and_then(|w| w.reason.clone()),
                })
                .collect()
        })
        .unwrap_or_default();
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .ok_or_else(|| err("metadata.creationTimestamp is missing".into()))?
        .0;
    Ok(Pod {
        name: p.metadata.name.clone().unwrap_or_default(),
        revision,
        image,
        ready,
        created,
        terminating: p.metadata.deletion_timestamp.is_some(),
        containers,
    })
}
