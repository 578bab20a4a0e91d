//! A stand-in for the Kubernetes API server: no real one can run on the machines these
//! tests run on (none is packaged for the registries they reach), so this serves, on a
//! loopback port, the REST subset the controller uses, with the semantics it relies on:
//! objects carry a `resourceVersion` from one counter; a create of an existing object
//! is 409 AlreadyExists; a replace whose `resourceVersion` is not the stored one is 409
//! Conflict; errors are `Status` objects as the real server sends them.
//!
//! Served: `coordination.k8s.io/v1` Leases (get, create, replace).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

#[derive(Default)]
pub struct Objects {
    /// (kind, namespace, name) → object.
    pub stored: BTreeMap<(String, String, String), Value>,
    pub version: u64,
    /// Writes accepted, per kind, in order: (name, object).
    pub writes: Vec<(String, Value)>,
    /// Answer the next replace with 409, whatever its resourceVersion (another writer
    /// won a race this test cannot time).
    pub conflict_next_replace: bool,
    /// Writes answered 409.
    pub conflicts: u32,
}

pub struct FakeApiServer {
    pub addr: SocketAddr,
    pub objects: Arc<Mutex<Objects>>,
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    (
        code,
        Json(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        })),
    )
        .into_response()
}

type Shared = Arc<Mutex<Objects>>;

async fn get_lease(State(o): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let o = o.lock().unwrap();
    match o.stored.get(&("Lease".into(), ns, name.clone())) {
        Some(v) => Json(v.clone()).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("leases.coordination.k8s.io \"{name}\" not found"),
        ),
    }
}

async fn create_lease(
    State(o): State<Shared>,
    Path(ns): Path<String>,
    Json(mut body): Json<Value>,
) -> Response {
    let mut o = o.lock().unwrap();
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    let key = ("Lease".to_string(), ns.clone(), name.clone());
    if o.stored.contains_key(&key) {
        o.conflicts += 1;
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("leases.coordination.k8s.io \"{name}\" already exists"),
        );
    }
    o.version += 1;
    body["metadata"]["resourceVersion"] = json!(o.version.to_string());
    body["metadata"]["uid"] = json!(format!("uid-{}", o.version));
    body["metadata"]["namespace"] = json!(ns);
    o.stored.insert(key, body.clone());
    o.writes.push((name, body.clone()));
    (StatusCode::CREATED, Json(body)).into_response()
}

async fn replace_lease(
    State(o): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    Json(mut body): Json<Value>,
) -> Response {
    let mut guard = o.lock().unwrap();
    let o = &mut *guard;
    let key = ("Lease".to_string(), ns, name.clone());
    let Some(stored) = o.stored.get(&key).cloned() else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("leases.coordination.k8s.io \"{name}\" not found"),
        );
    };
    let conflict = std::mem::take(&mut o.conflict_next_replace);
    if conflict || body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
        o.conflicts += 1;
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    o.version += 1;
    body["metadata"]["resourceVersion"] = json!(o.version.to_string());
    body["metadata"]["uid"] = stored["metadata"]["uid"].clone();
    o.stored.insert(key, body.clone());
    o.writes.push((name, body.clone()));
    Json(body).into_response()
}

impl FakeApiServer {
    pub async fn start() -> Self {
        let objects: Shared = Arc::default();
        let app = Router::new()
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(replace_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                axum::routing::post(create_lease),
            )
            .with_state(Arc::clone(&objects));
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
        kube::Client::try_from(config).unwrap()
    }

    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .unwrap()
            .stored
            .get(&("Lease".into(), ns.into(), name.into()))
            .cloned()
    }
}
