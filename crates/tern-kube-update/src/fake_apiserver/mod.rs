//! A stand-in for the Kubernetes API server, for tests only (feature `fake-apiserver`):
//! no real one can run on the machines Tern's tests run on (none is packaged for the
//! registries they reach). It serves, on a loopback port, the REST subset the
//! controller uses, with the semantics the controller relies on:
//!
//! - objects carry a `resourceVersion` from one counter; a create of an existing
//!   object is 409 AlreadyExists; a replace whose `resourceVersion` is not the stored
//!   one is 409 Conflict; a replace keeps the stored `status` and bumps
//!   `metadata.generation` when the `spec` changed; errors are `Status` objects;
//! - Leases (get, create, replace); Deployments and StatefulSets (list, in a namespace
//!   or all; get; replace); pods (list by `labelSelector` of `a=b` terms; get; delete,
//!   with a uid precondition).
//!
//! [`FakeApiServer::settle`] plays the cluster's own controllers and kubelet, in
//! process: a workload whose template changed gets new pods (all at once) running its
//! image, and the workload's status counts them. Given a registry of images
//! ([`FakeApiServer::run_images`]), its kubelet runs each container as a real process,
//! the program of its image, and the pod is Ready when it runs, crash-loops when it
//! exits, and cannot start when its image or pinned digest is not in the registry
//! ([`kubelet`]). Without one, every container counts as running and Ready (for tests
//! about other things). Times are the test's (`now`), so they agree with a ternd on a
//! dev clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kubelet;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jiff::Timestamp;
use serde_json::{Value, json};

use kubelet::{Kubelet, Seen};

/// A resource type the stand-in serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Lease,
    Deployment,
    StatefulSet,
    Pod,
}

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::Lease => "leases.coordination.k8s.io",
            Kind::Deployment => "deployments.apps",
            Kind::StatefulSet => "statefulsets.apps",
            Kind::Pod => "pods",
        }
    }
    fn api_version(self) -> &'static str {
        match self {
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::Deployment | Kind::StatefulSet => "apps/v1",
            Kind::Pod => "v1",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Lease => "Lease",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::Pod => "Pod",
        }
    }
}

/// (kind, namespace, name).
pub type Key = (Kind, String, String);

#[derive(Default)]
pub struct Objects {
    pub stored: BTreeMap<Key, Value>,
    pub version: u64,
    /// Accepted writes in order: (kind, name, object) — what the controller changed.
    pub writes: Vec<(Kind, String, Value)>,
    /// Answer the next replace with 409, whatever its resourceVersion (another writer
    /// won a race a test cannot time).
    pub conflict_next_replace: bool,
    /// Writes answered 409.
    pub conflicts: u32,
    /// The kubelet of real processes ([`FakeApiServer::run_images`]); without one,
    /// every container counts as running and Ready.
    kubelet: Option<Kubelet>,
    /// When set, each read of one object waits here before it is answered: the test
    /// makes several clients read the same state before any of them writes (a race
    /// it could not time otherwise).
    pub gate_reads: Option<Arc<tokio::sync::Barrier>>,
}

pub struct FakeApiServer {
    pub addr: SocketAddr,
    pub objects: Arc<Mutex<Objects>>,
}

type Shared = Arc<Mutex<Objects>>;

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    (
        code,
        Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16(),
        })),
    )
        .into_response()
}

fn not_found(kind: Kind, name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{} \"{name}\" not found", kind.plural()),
    )
}

impl Objects {
    fn bump(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    /// Stores `obj` as created now.
    pub fn create(&mut self, kind: Kind, ns: &str, mut obj: Value) -> Result<Value, Box<Response>> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let key = (kind, ns.to_string(), name.clone());
        if self.stored.contains_key(&key) {
            self.conflicts += 1;
            return Err(Box::new(status(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", kind.plural()),
            )));
        }
        let rv = self.bump();
        obj["apiVersion"] = json!(kind.api_version());
        obj["kind"] = json!(kind.name());
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(rv);
        meta["uid"] = json!(format!("{}-uid-{rv}", kind.name().to_lowercase()));
        meta["namespace"] = json!(ns);
        if meta["generation"].is_null() && kind != Kind::Pod {
            meta["generation"] = json!(1);
        }
        self.stored.insert(key, obj.clone());
        Ok(obj)
    }

    fn replace(
        &mut self,
        kind: Kind,
        ns: &str,
        name: &str,
        mut obj: Value,
    ) -> Result<Value, Box<Response>> {
        let key = (kind, ns.to_string(), name.to_string());
        let Some(stored) = self.stored.get(&key).cloned() else {
            return Err(Box::new(not_found(kind, name)));
        };
        let conflict = std::mem::take(&mut self.conflict_next_replace);
        if conflict || obj["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
            self.conflicts += 1;
            return Err(Box::new(status(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    kind.plural()
                ),
            )));
        }
        let rv = self.bump();
        let generation = stored["metadata"]["generation"].as_i64().unwrap_or(1);
        let generation = if kind != Kind::Lease && obj["spec"] != stored["spec"] {
            generation + 1
        } else {
            generation
        };
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(rv);
        meta["uid"] = stored["metadata"]["uid"].clone();
        meta["namespace"] = json!(ns);
        if kind != Kind::Lease {
            meta["generation"] = json!(generation);
            // The main resource does not write status (a subresource does).
            obj["status"] = stored["status"].clone();
        }
        obj["apiVersion"] = json!(kind.api_version());
        obj["kind"] = json!(kind.name());
        self.stored.insert(key, obj.clone());
        self.writes.push((kind, name.to_string(), obj.clone()));
        Ok(obj)
    }

    fn list(&self, kind: Kind, ns: Option<&str>, selector: Option<&str>) -> Value {
        let terms: Vec<(&str, &str)> = selector
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
            .filter_map(|t| t.split_once('='))
            .collect();
        let items: Vec<Value> = self
            .stored
            .iter()
            .filter(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| ns == n))
            .filter(|(_, v)| {
                terms
                    .iter()
                    .all(|(k, want)| v["metadata"]["labels"][*k].as_str() == Some(*want))
            })
            .map(|(_, v)| v.clone())
            .collect();
        json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.name()),
            "metadata": {"resourceVersion": self.version.to_string()},
            "items": items,
        })
    }

    /// The cluster's controllers and kubelet, once, at `now`: see the module's doc.
    pub fn settle(&mut self, now: Timestamp) {
        let workloads: Vec<Key> = self
            .stored
            .keys()
            .filter(|(k, _, _)| matches!(k, Kind::Deployment | Kind::StatefulSet))
            .cloned()
            .collect();
        for key in workloads {
            self.settle_workload(&key, now);
        }
        // Processes of pods deleted meanwhile (by the controller, or above) go.
        let live: Vec<(String, String, String)> = self
            .stored
            .iter()
            .filter(|(k, _)| k.0 == Kind::Pod)
            .flat_map(|(k, pod)| {
                let containers = pod["spec"]["containers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                containers.into_iter().map(move |c| {
                    (
                        k.1.clone(),
                        k.2.clone(),
                        c["name"].as_str().unwrap_or("").to_string(),
                    )
                })
            })
            .collect();
        if let Some(kubelet) = &mut self.kubelet {
            kubelet.keep_only(&live);
        }
    }

    fn settle_workload(&mut self, key: &Key, now: Timestamp) {
        let (kind, ns, name) = key.clone();
        let w = self.stored[key].clone();
        let generation = w["metadata"]["generation"].as_i64().unwrap_or(1);
        let replicas = w["spec"]["replicas"].as_i64().unwrap_or(1);
        let labels = w["spec"]["selector"]["matchLabels"].clone();
        let template = w["spec"]["template"].clone();
        let revision = format!("{name}-{generation}");
        let revision_label = if kind == Kind::StatefulSet {
            "controller-revision-hash"
        } else {
            "pod-template-hash"
        };
        let mine = |v: &Value| {
            labels.as_object().is_some_and(|l| {
                l.iter()
                    .all(|(k, want)| &v["metadata"]["labels"][k] == want)
            })
        };
        // Pods of older revisions go; the missing ones of this revision come.
        let old: Vec<Key> = self
            .stored
            .iter()
            .filter(|((k, n, _), v)| *k == Kind::Pod && *n == ns && mine(v))
            .filter(|(_, v)| v["metadata"]["labels"][revision_label] != json!(revision))
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            self.stored.remove(&k);
        }
        for i in 0..replicas {
            let pod_name = match kind {
                Kind::StatefulSet => format!("{name}-{i}"),
                _ => format!("{name}-{generation}-{i}"),
            };
            if self
                .stored
                .contains_key(&(Kind::Pod, ns.clone(), pod_name.clone()))
            {
                continue;
            }
            let mut pod_labels = template["metadata"]["labels"].clone();
            if !pod_labels.is_object() {
                pod_labels = labels.clone();
            }
            pod_labels[revision_label] = json!(revision);
            let pod = json!({
                "metadata": {"name": pod_name, "labels": pod_labels, "creationTimestamp": now.to_string()},
                "spec": template["spec"].clone(),
                "status": {},
            });
            let _ = self.create(Kind::Pod, &ns, pod);
        }
        // The kubelet: each container runs (a real process, when the test gave a
        // registry), or crash-loops, or cannot be pulled.
        let mut ready = 0;
        let pods: Vec<Key> = self
            .stored
            .iter()
            .filter(|(k, v)| k.0 == Kind::Pod && k.1 == ns && mine(v))
            .map(|(k, _)| k.clone())
            .collect();
        for k in pods {
            let pod = &self.stored[&k];
            let containers = pod["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let seen: Vec<Seen> = containers
                .iter()
                .map(|c| match &mut self.kubelet {
                    Some(kubelet) => kubelet.sync(
                        (
                            ns.clone(),
                            k.2.clone(),
                            c["name"].as_str().unwrap_or("").to_string(),
                        ),
                        c["image"].as_str().unwrap_or(""),
                    ),
                    None => Seen::Up,
                })
                .collect();
            let pod = self.stored.get_mut(&k).unwrap();
            let created: Timestamp = pod["metadata"]["creationTimestamp"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(now);
            let up = seen.iter().all(|s| matches!(s, Seen::Up));
            let was = pod["status"]["conditions"][0]["status"].as_str()
                == Some(if up { "True" } else { "False" });
            let since = if was {
                pod["status"]["conditions"][0]["lastTransitionTime"].clone()
            } else {
                json!(now.to_string())
            };
            let statuses: Vec<Value> = containers
                .iter()
                .zip(&seen)
                .map(|(c, seen)| {
                    let mut st = json!({
                        "name": c["name"], "image": c["image"], "imageID": "",
                        "ready": matches!(seen, Seen::Up), "restartCount": 0,
                        "state": {"running": {"startedAt": created.to_string()}},
                    });
                    match seen {
                        Seen::Up => {}
                        Seen::Crashing { restarts, exit } => {
                            st["restartCount"] = json!(restarts);
                            st["state"] = json!({"waiting": {"reason": "CrashLoopBackOff"}});
                            st["lastState"] = json!({"terminated": {"exitCode": exit}});
                        }
                        Seen::PullFailed { why } => {
                            st["state"] =
                                json!({"waiting": {"reason": "ErrImagePull", "message": why}});
                        }
                    }
                    st
                })
                .collect();
            pod["status"] = json!({
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": if up { "True" } else { "False" }, "lastTransitionTime": since}],
                "containerStatuses": statuses,
            });
            if up {
                ready += 1;
            }
        }
        let w = self.stored.get_mut(key).unwrap();
        let mut st = json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
        });
        if kind == Kind::StatefulSet {
            st["currentRevision"] = json!(revision);
            st["updateRevision"] = json!(revision);
        }
        w["status"] = st;
    }
}

#[derive(serde::Deserialize)]
struct ListQuery {
    #[serde(rename = "labelSelector")]
    label_selector: Option<String>,
}

async fn get_one(
    State((o, kind)): State<(Shared, Kind)>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    // Read first, then wait at the gate: every gated reader answers with the state
    // before any of them could write.
    let (found, gate) = {
        let o = o.lock().unwrap();
        let found = o.stored.get(&(kind, ns, name.clone())).cloned();
        (found, o.gate_reads.clone())
    };
    if let Some(gate) = gate {
        gate.wait().await;
    }
    match found {
        Some(v) => Json(v).into_response(),
        None => not_found(kind, &name),
    }
}

async fn list_ns(
    State((o, kind)): State<(Shared, Kind)>,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    Json(
        o.lock()
            .unwrap()
            .list(kind, Some(&ns), q.label_selector.as_deref()),
    )
    .into_response()
}

async fn list_all(State((o, kind)): State<(Shared, Kind)>, Query(q): Query<ListQuery>) -> Response {
    Json(
        o.lock()
            .unwrap()
            .list(kind, None, q.label_selector.as_deref()),
    )
    .into_response()
}

async fn create(
    State((o, kind)): State<(Shared, Kind)>,
    Path(ns): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let mut o = o.lock().unwrap();
    match o.create(kind, &ns, body) {
        Ok(v) => {
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            o.writes.push((kind, name, v.clone()));
            (StatusCode::CREATED, Json(v)).into_response()
        }
        Err(r) => *r,
    }
}

async fn replace(
    State((o, kind)): State<(Shared, Kind)>,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    match o.lock().unwrap().replace(kind, &ns, &name, body) {
        Ok(v) => Json(v).into_response(),
        Err(r) => *r,
    }
}

async fn delete_pod(
    State((o, kind)): State<(Shared, Kind)>,
    Path((ns, name)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    let mut o = o.lock().unwrap();
    let key = (kind, ns, name.clone());
    let Some(stored) = o.stored.get(&key).cloned() else {
        return not_found(kind, &name);
    };
    let want = body
        .as_ref()
        .map(|b| b["preconditions"]["uid"].clone())
        .unwrap_or(Value::Null);
    if !want.is_null() && want != stored["metadata"]["uid"] {
        o.conflicts += 1;
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Precondition failed: UID in precondition: {want}, UID in object meta: {}",
                stored["metadata"]["uid"]
            ),
        );
    }
    o.stored.remove(&key);
    o.writes.push((kind, name, json!({"deleted": true})));
    Json(stored).into_response()
}

impl FakeApiServer {
    pub async fn start() -> Self {
        let objects: Shared = Arc::default();
        let one = |kind: Kind| (Arc::clone(&objects), kind);
        let app = Router::new()
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_one).put(replace).with_state(one(Kind::Lease)),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                axum::routing::post(create).with_state(one(Kind::Lease)),
            )
            .route(
                "/apis/apps/v1/deployments",
                get(list_all).with_state(one(Kind::Deployment)),
            )
            .route(
                "/apis/apps/v1/namespaces/{ns}/deployments",
                get(list_ns).with_state(one(Kind::Deployment)),
            )
            .route(
                "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
                get(get_one).put(replace).with_state(one(Kind::Deployment)),
            )
            .route(
                "/apis/apps/v1/statefulsets",
                get(list_all).with_state(one(Kind::StatefulSet)),
            )
            .route(
                "/apis/apps/v1/namespaces/{ns}/statefulsets",
                get(list_ns).with_state(one(Kind::StatefulSet)),
            )
            .route(
                "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
                get(get_one).put(replace).with_state(one(Kind::StatefulSet)),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods",
                get(list_ns).with_state(one(Kind::Pod)),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(get_one).delete(delete_pod).with_state(one(Kind::Pod)),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, objects }
    }

    /// A client of this server, as the controller makes one from a kubeconfig.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        crate::client(config).unwrap()
    }

    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .unwrap()
            .stored
            .get(&(kind, ns.into(), name.into()))
            .cloned()
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.get(Kind::Lease, ns, name)
    }

    /// Creates an object as an operator's `kubectl create` would.
    pub fn create(&self, kind: Kind, ns: &str, obj: Value) -> Value {
        self.objects
            .lock()
            .unwrap()
            .create(kind, ns, obj)
            .ok()
            .unwrap()
    }

    /// The cluster settles at `now` (see [`Objects::settle`]).
    pub fn settle(&self, now: Timestamp) {
        self.objects.lock().unwrap().settle(now);
    }

    /// What the programs of `pod`'s containers say they run (`running_version` in
    /// their state directories), by container name; empty without a registry.
    pub fn running_versions(&self, ns: &str, pod: &str) -> BTreeMap<String, String> {
        let o = self.objects.lock().unwrap();
        let (Some(kubelet), Some(p)) = (
            &o.kubelet,
            o.stored.get(&(Kind::Pod, ns.into(), pod.into())),
        ) else {
            return BTreeMap::new();
        };
        let containers = p["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        containers
            .iter()
            .filter_map(|c| {
                let name = c["name"].as_str()?;
                let dir = kubelet.state_dir(ns, pod, name);
                let v = std::fs::read_to_string(dir.join("running_version")).ok()?;
                Some((name.to_string(), v.trim().to_string()))
            })
            .collect()
    }

    /// The pods of namespace `ns` whose labels include `app=name`.
    pub fn pods_of(&self, ns: &str, app: &str) -> Vec<String> {
        let o = self.objects.lock().unwrap();
        o.stored
            .iter()
            .filter(|((k, n, _), v)| {
                *k == Kind::Pod && n == ns && v["metadata"]["labels"]["app"] == json!(app)
            })
            .map(|((_, _, name), _)| name.clone())
            .collect()
    }

    /// From now on, the kubelet runs each container as a real process: `images` is the
    /// registry, `repository:tag` → the program its image runs (see [`kubelet`]).
    pub fn run_images(&self, images: impl IntoIterator<Item = (String, PathBuf)>) {
        self.objects.lock().unwrap().kubelet = Some(Kubelet::new(images.into_iter().collect()));
    }
}
