//! Starting the real `ternd` binary on a temp dir and a free loopback port, and talking
//! to it over HTTP.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_testing::http::{HttpServer, Request, Response};

/// A Monday, 09:00 UTC.
pub const T0: &str = "2026-11-23T09:00:00Z";

pub struct Ternd {
    child: Option<Child>,
    pub url: String,
    pub dir: PathBuf,
    pub token: String,
    /// What ternd printed before it listened (the operator token appears only once).
    pub stdout: Vec<String>,
}

pub fn ternd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ternd"))
}

impl Ternd {
    /// `ternd start --insecure-http --listen 127.0.0.1:0 --data-dir DIR --dev-clock T0`
    pub fn dev(dir: &Path) -> Self {
        Self::start(dir, &["--dev-clock", T0])
    }

    /// [`Ternd::dev`] with [`three_groups`] and a version resource from 1.0.0 to 1.1.0,
    /// reconciled, its clock at 10:05 on 2026-11-23: inside dev's window, before the
    /// reconcile that starts it.
    pub fn in_devs_window(dir: &Path) -> Self {
        let t = Self::dev(dir);
        t.put_resource("config", &three_groups());
        t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
        t.reconcile();
        t.set_clock("2026-11-23T10:05:00Z");
        t
    }

    pub fn start(dir: &Path, extra: &[&str]) -> Self {
        let mut args = vec!["--insecure-http"];
        args.extend_from_slice(extra);
        Self::spawn(dir, &args)
    }

    /// `ternd start --listen 127.0.0.1:0 --data-dir DIR ARGS…`; waits for readiness over
    /// plain HTTP only. Unless `extra` says otherwise, with `--shared-agent-token
    /// allow`: most tests drive many hosts with one agent token, which a new data dir
    /// refuses by default (`spawn_as_is` starts ternd with its defaults).
    pub fn spawn(dir: &Path, extra: &[&str]) -> Self {
        Self::spawn_via(&[], dir, extra)
    }

    /// [`Ternd::spawn`] with ternd's own defaults (no `--shared-agent-token`).
    pub fn spawn_as_is(dir: &Path, extra: &[&str]) -> Self {
        Self::spawn_inner(&[], dir, extra)
    }

    /// As [`Ternd::spawn`], run through `wrapper` (e.g. `sh -c 'ulimit -n 1024; exec "$0" "$@"'`).
    pub fn spawn_via(wrapper: &[&str], dir: &Path, extra: &[&str]) -> Self {
        let mut args = extra.to_vec();
        if !extra.contains(&"--shared-agent-token") {
            args.extend_from_slice(&["--shared-agent-token", "allow"]);
        }
        Self::spawn_inner(wrapper, dir, &args)
    }

    fn spawn_inner(wrapper: &[&str], dir: &Path, extra: &[&str]) -> Self {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_extension("log"))
            .unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(ternd_bin());
                c
            }
            None => Command::new(ternd_bin()),
        };
        let mut child = command
            .args(["start", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .env("TERN_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start ternd");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stdout = Vec::new();
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("ternd did not print its address");
            stdout.push(line.clone());
            if let Some(addr) = line.strip_prefix("ternd listening on ") {
                break addr.trim().to_string();
            }
        };
        // Only the replica that initialised the store has the token file (HA tests then
        // set `token` from it).
        let token = std::fs::read_to_string(dir.join("operator.token"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let t = Ternd {
            child: Some(child),
            url,
            dir: dir.to_path_buf(),
            token,
            stdout,
        };
        if t.url.starts_with("https://") {
            return t;
        }
        for _ in 0..200 {
            if t.call("GET", "/readyz", None, None).0 == 200 {
                return t;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("ternd never became ready");
    }

    /// A handle on the ternd at `url` that owns no process (to call it from another
    /// thread).
    pub fn probe(url: &str) -> Self {
        Ternd {
            child: None,
            url: url.to_string(),
            dir: PathBuf::new(),
            token: String::new(),
            stdout: Vec::new(),
        }
    }

    /// Stops ternd with SIGTERM (it releases the leader lease) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..200 {
                if child.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The process id of the running ternd.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to this ternd (its own pid only).
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("ternd is not running");
        let status = Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -s {signal} {pid} failed");
    }

    /// A raw request: (status, JSON body, or the text as a JSON string).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let (status, _, text) = self.raw(method, path, token, body);
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// (status, headers, body text).
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, ureq::http::HeaderMap, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let req = req.body(body.unwrap_or("").to_string()).unwrap();
        let mut resp = agent.run(req).expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, headers, text)
    }

    /// As the operator; panics unless 2xx.
    /// The value of the unlabelled series `name` in `/metrics`.
    pub fn metric(&self, name: &str) -> u64 {
        let (_, _, text) = self.raw("GET", "/metrics", None, None);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .trim()
            .parse()
            .unwrap()
    }

    pub fn op(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let (s, v) = self.call(method, path, Some(&self.token), body);
        assert!((200..300).contains(&s), "{method} {path}: {s} {v}");
        v
    }

    pub fn new_token(&self, role: &str) -> String {
        let v = self.op(
            "POST",
            "/v1/tokens",
            Some(&json!({ "role": role }).to_string()),
        );
        v["token"].as_str().unwrap().to_string()
    }

    pub fn advance(&self, d: &str) -> String {
        let v = self.op(
            "POST",
            "/v1/dev/clock",
            Some(&json!({ "advance": d }).to_string()),
        );
        v["now"].as_str().unwrap().to_string()
    }

    pub fn set_clock(&self, t: &str) {
        self.op(
            "POST",
            "/v1/dev/clock",
            Some(&json!({ "set": t }).to_string()),
        );
    }

    pub fn reconcile(&self) -> Value {
        self.op("POST", "/v1/dev/reconcile", None)
    }

    pub fn heartbeat(&self, token: &str, id: &str, group: &str, version: &str) {
        self.heartbeat_with(token, id, group, version, json!({}));
    }

    /// A heartbeat as tern-update sends it for a host whose agent runs and passes its
    /// health check (`"healthy": true`), with `extra` fields (`healthy`, `rollback`,
    /// `failed_version`, …) replacing or adding to it; `"healthy": null` leaves it out.
    pub fn heartbeat_with(
        &self,
        token: &str,
        id: &str,
        group: &str,
        version: &str,
        extra: serde_json::Value,
    ) {
        let mut body = json!({
            "updater_id": id, "host_id": format!("host-{id}"), "hostname": format!("{id}.example"),
            "group": group, "version": version, "healthy": true,
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
            b.retain(|_, v| !v.is_null());
        }
        let (s, v) = self.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(token),
            Some(&body.to_string()),
        );
        assert_eq!(s, 200, "heartbeat {id}: {v}");
    }

    /// (agent_version, agent_auto_update) for a host.
    pub fn find(&self, group: &str, id: &str) -> (String, bool) {
        let (s, v) = self.call(
            "GET",
            &format!("/v1/webapi/find?group={group}&updater_id={id}"),
            None,
            None,
        );
        assert_eq!(s, 200, "find: {v}");
        (
            v["auto_update"]["agent_version"]
                .as_str()
                .unwrap()
                .to_string(),
            v["auto_update"]["agent_auto_update"].as_bool().unwrap(),
        )
    }

    /// Creates or overwrites a resource from YAML.
    pub fn put_resource(&self, kind: &str, yaml: &str) -> Value {
        self.op(
            "POST",
            &format!("/v1/resources/{kind}?force=true"),
            Some(yaml),
        )
    }

    /// Group name → state, from the stored rollout.
    pub fn group_states(&self) -> Vec<(String, String)> {
        let v = self.op("GET", "/v1/resources/rollout", None);
        v["status"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["name"].as_str().unwrap().to_string(),
                    g["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    pub fn state_of(&self, group: &str) -> String {
        self.group_states()
            .into_iter()
            .find(|(n, _)| n == group)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("no group {group}"))
    }
}

impl Drop for Ternd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[allow(unused_imports)] // each test binary uses its own share of the helpers
pub use tern_core::fixtures::{enabled_version, version as version_yaml};

/// halt-on-error over dev (10h), staging (12h), prod (14h), every day.
pub fn three_groups() -> String {
    tern_core::fixtures::dev_staging_prod(0)
}

#[allow(unused_imports)] // each test binary uses its own share of the helpers
pub use tern_testing::eventually;

/// A tiny HTTP receiver on loopback: every POST body it gets, in order.
pub fn receiver() -> (String, std::sync::mpsc::Receiver<serde_json::Value>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = HttpServer::start(move |req: &Request| {
        // Parsed before the lock is taken: a body that is not JSON fails its request
        // (a 500 naming it), not every later one through a poisoned lock.
        let body: serde_json::Value = serde_json::from_slice(&req.body)
            .unwrap_or_else(|e| panic!("the receiver got a body that is not JSON: {e}"));
        // Queued before the answer: a sender that waits for it sees its bodies in order.
        let _ = tx.lock().unwrap().send(body);
        Response::new(200, Vec::new())
    });
    (format!("{}/hook", server.url()), rx)
}
