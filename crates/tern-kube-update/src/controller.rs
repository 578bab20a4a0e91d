//! One pass of the controller over the opted-in workloads: read each Deployment and
//! StatefulSet and its pods, heartbeat it to ternd and ask find, take
//! `tern-kube-update`'s decision, and write it, only while this replica leads.
//!
//! Writes are replaces of the object as read, so they carry its `resourceVersion`: a
//! workload changed meanwhile (an operator's edit, another writer) is a 409, nothing is
//! written, and the next pass decides again from what is there. Pods are deleted with
//! their uid as a precondition, so a pod recreated under the same name is not.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1 as core;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use tern_kube_rules::{AnnotationChange, Decision, Inputs, Policy, Resolved, Source, decide};

use crate::digests::DigestSource;
use crate::fleet::Fleet;
use crate::read::{self, ReadWorkload};

/// What the controller needs besides the cluster.
pub struct Controller {
    pub client: kube::Client,
    /// The namespaces watched; empty: all.
    pub namespaces: Vec<String>,
    pub fleet: Arc<dyn Fleet>,
    pub digests: Arc<dyn DigestSource>,
    pub policy: Policy,
    /// This controller's version, in heartbeats (`updater_version`).
    pub version: String,
}

/// What a pass did with one workload.
#[derive(Debug)]
pub struct Outcome {
    /// `Deployment ns/name`.
    pub workload: String,
    /// The decision, or why there is none (an input refused, ternd unreachable…).
    pub decision: Result<Decision, String>,
    /// What was written (`None`: nothing, as a follower, for a decision that writes
    /// nothing, or after a conflict, said in `write_error`).
    pub written: Option<Written>,
    pub write_error: Option<String>,
    /// The heartbeat could not be sent (the decision still stands).
    pub heartbeat_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The agent container's image (if changed) and annotations.
    Workload {
        image: Option<String>,
    },
    DeletedPods(Vec<String>),
}

/// A workload as listed, with the typed object to write back.
enum Object {
    Deployment(Box<Deployment>),
    StatefulSet(Box<StatefulSet>),
}

impl Controller {
    /// One pass at `now`; `leader` says, at the moment of each write, whether this
    /// replica holds the Lease.
    pub async fn pass(&self, now: Timestamp, leader: &(dyn Fn() -> bool + Sync)) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        let namespaces: Vec<Option<&str>> = if self.namespaces.is_empty() {
            vec![None]
        } else {
            self.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        for ns in namespaces {
            for object in self.list(ns, &mut outcomes).await {
                if let Some(o) = self.workload(object, now, leader).await {
                    outcomes.push(o);
                }
            }
        }
        outcomes
    }

    async fn list(&self, ns: Option<&str>, outcomes: &mut Vec<Outcome>) -> Vec<Object> {
        let mut objects = Vec::new();
        let scope = ns.unwrap_or("all namespaces");
        let failed = |kind: &str, e: kube::Error| Outcome {
            workload: format!("{kind}s in {scope}"),
            decision: Err(format!("listing them failed: {e}")),
            written: None,
            write_error: None,
            heartbeat_error: None,
        };
        match api::<Deployment>(&self.client, ns)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => objects.extend(
                list.items
                    .into_iter()
                    .map(|d| Object::Deployment(Box::new(d))),
            ),
            Err(e) => outcomes.push(failed("Deployment", e)),
        }
        match api::<StatefulSet>(&self.client, ns)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => objects.extend(
                list.items
                    .into_iter()
                    .map(|s| Object::StatefulSet(Box::new(s))),
            ),
            Err(e) => outcomes.push(failed("StatefulSet", e)),
        }
        objects
    }

    async fn workload(
        &self,
        object: Object,
        now: Timestamp,
        leader: &(dyn Fn() -> bool + Sync),
    ) -> Option<Outcome> {
        let read = match &object {
            Object::Deployment(d) => read::deployment(d),
            Object::StatefulSet(s) => read::stateful_set(s),
        };
        let (meta, kind) = match &object {
            Object::Deployment(d) => (&d.metadata, "Deployment"),
            Object::StatefulSet(s) => (&s.metadata, "StatefulSet"),
        };
        // Not opted in (absent, `false`, anything else): not looked at, not heartbeated.
        meta.annotations
            .as_ref()
            .and_then(tern_kube_rules::Mode::of)?;
        let name = format!(
            "{kind} {}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("?")
        );
        let mut outcome = Outcome {
            workload: name,
            decision: Err(String::new()),
            written: None,
            write_error: None,
            heartbeat_error: None,
        };
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                outcome.decision = Err(e.to_string());
                return Some(outcome);
            }
        };
        let pods = match self.pods(&read).await {
            Ok(p) => p,
            Err(e) => {
                outcome.decision = Err(e);
                return Some(outcome);
            }
        };
        let w = &read.workload;
        let fleet = Arc::clone(&self.fleet);
        let hb = tern_kube_rules::heartbeat(w, &self.version);
        let group = w.settings().map(|s| s.group).unwrap_or_default();
        let id = w.uid.clone();
        let channel = match channel_of(w) {
            Ok(c) => c,
            Err(e) => {
                outcome.decision = Err(e);
                return Some(outcome);
            }
        };
        let (heartbeat, source) = match tokio::task::spawn_blocking(move || {
            let sent = match hb {
                Ok(hb) => fleet.heartbeat(&hb).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let source = match channel {
                // Seed 001: the channel's answers; the window is the group's schedule.
                Some(url) => {
                    let (version, critical) = fleet.channel(&url);
                    Ok(Source::Channel {
                        version,
                        critical,
                        schedule: fleet.schedule(&group).ok(),
                    })
                }
                None => fleet
                    .find(&group, &id)
                    .map(Source::Find)
                    .map_err(|e| format!("find: {e}")),
            };
            (sent, source)
        })
        .await
        {
            Ok(r) => r,
            Err(e) => (Err(e.to_string()), Err(e.to_string())),
        };
        outcome.heartbeat_error = heartbeat.err();
        let source = match source {
            Ok(s) => s,
            Err(e) => {
                outcome.decision = Err(e);
                return Some(outcome);
            }
        };
        let decision = match self.decide(&read, &pods, &source, now).await {
            Ok(d) => d,
            Err(e) => {
                outcome.decision = Err(e);
                return Some(outcome);
            }
        };
        if leader() {
            match self.write(&object, &read, &decision, now).await {
                Ok(w) => outcome.written = w,
                Err(e) => outcome.write_error = Some(e),
            }
        }
        outcome.decision = Ok(decision);
        Some(outcome)
    }

    async fn pods(&self, r: &ReadWorkload) -> Result<Vec<tern_kube_rules::Pod>, String> {
        let ns = r.workload.namespace.as_str();
        let list = api::<core::Pod>(&self.client, Some(ns))
            .list(&ListParams::default().labels(&r.selector))
            .await
            .map_err(|e| format!("listing its pods ({}) failed: {e}", r.selector))?;
        list.items
            .iter()
            .map(|p| read::pod(p, &r.container).map_err(|e| e.to_string()))
            .collect()
    }

    /// The decision, asking the digest source once when it says to.
    async fn decide(
        &self,
        r: &ReadWorkload,
        pods: &[tern_kube_rules::Pod],
        source: &Source,
        now: Timestamp,
    ) -> Result<Decision, String> {
        let inputs = |resolved| Inputs {
            workload: &r.workload,
            pods,
            source,
            resolved,
            policy: &self.policy,
            now,
        };
        let first = decide(&inputs(None)).map_err(|e| e.to_string())?;
        let (repository, tag) = match &first {
            Decision::ResolveDigest {
                repository, tag, ..
            } => (repository.clone(), tag.clone()),
            Decision::ReportOnly(inner) => match inner.as_ref() {
                Decision::ResolveDigest {
                    repository, tag, ..
                } => (repository.clone(), tag.clone()),
                _ => return Ok(first),
            },
            _ => return Ok(first),
        };
        let digests = Arc::clone(&self.digests);
        let (repo, t) = (repository.clone(), tag.clone());
        let digest = tokio::task::spawn_blocking(move || digests.resolve(&repo, &t))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("resolving the digest: {e}"))?;
        let resolved = Resolved {
            repository,
            tag,
            digest,
        };
        decide(&inputs(Some(&resolved))).map_err(|e| e.to_string())
    }

    /// Writes what `decision` says; `Ok(None)` when it writes nothing.
    async fn write(
        &self,
        object: &Object,
        r: &ReadWorkload,
        decision: &Decision,
        now: Timestamp,
    ) -> Result<Option<Written>, String> {
        let image = match decision {
            Decision::Update(u) => Some(u.image.to_string()),
            Decision::Rollback(rb) => Some(rb.to.to_string()),
            Decision::Completed { .. } | Decision::MarkFailed { .. } => None,
            Decision::DeletePods(pods) => return self.delete_pods(r, pods).await.map(Some),
            _ => return Ok(None),
        };
        let changes = decision
            .annotation_changes(&r.workload, now)
            .map_err(|e| e.to_string())?;
        let ns = r.workload.namespace.as_str();
        let name = r.workload.name.as_str();
        let result = match object {
            Object::Deployment(d) => {
                let mut d = d.as_ref().clone();
                edit(&mut d.metadata.annotations, &changes);
                if let (Some(image), Some(spec)) = (&image, d.spec.as_mut()) {
                    set_image(spec.template.spec.as_mut(), &r.container, image);
                }
                api::<Deployment>(&self.client, Some(ns))
                    .replace(name, &PostParams::default(), &d)
                    .await
                    .map(drop)
            }
            Object::StatefulSet(s) => {
                let mut s = s.as_ref().clone();
                edit(&mut s.metadata.annotations, &changes);
                if let (Some(image), Some(spec)) = (&image, s.spec.as_mut()) {
                    set_image(spec.template.spec.as_mut(), &r.container, image);
                }
                api::<StatefulSet>(&self.client, Some(ns))
                    .replace(name, &PostParams::default(), &s)
                    .await
                    .map(drop)
            }
        };
        match result {
            Ok(()) => Ok(Some(Written::Workload { image })),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Err("changed since it was read (409): decided again next pass".into())
            }
            Err(e) => Err(format!("writing it failed: {e}")),
        }
    }

    async fn delete_pods(
        &self,
        r: &ReadWorkload,
        stuck: &[tern_kube_rules::StuckPod],
    ) -> Result<Written, String> {
        let pods = api::<core::Pod>(&self.client, Some(&r.workload.namespace));
        let mut deleted = Vec::new();
        for p in stuck {
            // The uid as read, so that a pod recreated under this name is left alone.
            let uid = match pods.get_opt(&p.name).await {
                Ok(Some(pod)) => pod.metadata.uid,
                Ok(None) => continue,
                Err(e) => return Err(format!("reading pod {} failed: {e}", p.name)),
            };
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match pods.delete(&p.name, &params).await {
                Ok(_) => deleted.push(p.name.clone()),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(format!("deleting pod {} failed: {e}", p.name)),
            }
        }
        Ok(Written::DeletedPods(deleted))
    }
}

/// The channel a workload follows (`tern.dev/channel`), checked: an http(s) URL of at
/// most 512 bytes without spaces or control characters. Whoever may annotate the
/// workload chooses it, so the version it names is still installed only with a digest
/// from the digests file.
fn channel_of(w: &tern_kube_rules::Workload) -> Result<Option<String>, String> {
    let Some(url) = w
        .annotations
        .get(tern_kube_rules::annotation::CHANNEL)
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 512
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(format!(
            "annotation {}: {:?} is not an http(s) URL of a channel",
            tern_kube_rules::annotation::CHANNEL,
            tern_core::text::excerpt(url, 80)
        ));
    }
    Ok(Some(url.to_string()))
}

fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn edit(annotations: &mut Option<BTreeMap<String, String>>, changes: &[AnnotationChange]) {
    let map = annotations.get_or_insert_with(BTreeMap::new);
    for (key, value) in changes {
        match value {
            Some(v) => map.insert((*key).to_string(), v.clone()),
            None => map.remove(*key),
        };
    }
}

fn set_image(spec: Option<&mut core::PodSpec>, container: &str, image: &str) {
    if let Some(c) = spec.and_then(|s| s.containers.iter_mut().find(|c| c.name == container)) {
        c.image = Some(image.to_string());
    }
}
