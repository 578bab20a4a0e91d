//! Test support: a loopback stand-in for ternd (find, artifacts, heartbeat, health), release
//! tarballs with shell-script agents, and a host sandbox that runs the real binary.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::state::AttemptResult;
use tern_core::wire::{AutoUpdateSettings, FindResponse, Heartbeat, HeartbeatResponse};
use tern_testing::http::{HttpServer, Request, Response};

pub const BIN: &str = env!("CARGO_BIN_EXE_tern-update");

#[derive(Default)]
pub struct ServerState {
    pub find: FindResponse,
    pub find_count: usize,
    pub heartbeats: Vec<(Option<String>, Heartbeat)>,
    pub requests: Vec<String>,
    /// Answer heartbeats with a 500, as a broken or overloaded ternd would.
    pub fail_heartbeats: bool,
    /// The JSON body heartbeats are answered with (default: the next heartbeat only).
    pub heartbeat_answer: Option<String>,
    /// The Content-Length HEAD requests for artifacts are answered with (default: the
    /// artifact's size), as a hostile or broken server could send.
    pub head_content_length: Option<String>,
    /// /health fails for every version, as when the host's network or disk is broken.
    pub health_down: bool,
    /// The agent token heartbeats must carry; others get ternd's 401.
    pub heartbeat_token: Option<String>,
    /// `/chan/version` and `/chan/critical` (seed 001's channel): status and body;
    /// `None` is a 404.
    pub channel_version: Option<(u16, String)>,
    pub channel_critical: Option<(u16, String)>,
    /// The body of `/v1/agents/schedule`; `None` is a 404.
    pub schedule: Option<String>,
    /// Install instructions (version directives) for the next heartbeat answers: each
    /// answer (when `heartbeat_answer` is unset) carries the first, taken off the queue.
    pub install_queue: std::collections::VecDeque<InstallInstruction>,
    /// Long-poll find as ternd does it (`wait` and `seen`, an ETag on every answer);
    /// off, find answers at once without an ETag, as an older ternd.
    pub long_poll: bool,
    /// Finds being held now.
    pub held: usize,
    /// The query of every find, in order.
    pub find_queries: Vec<String>,
}

/// The stand-in for ternd and the release server, on tern-testing's loopback server:
/// find, heartbeats, the channel, the schedule, /health and the artifacts.
pub struct Server {
    pub url: String,
    pub artifacts: PathBuf,
    pub state: Arc<Mutex<ServerState>>,
    _http: HttpServer,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let artifacts = dir.path().join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let state = Arc::new(Mutex::new(ServerState::default()));
        let (st, art) = (state.clone(), artifacts.clone());
        let http = HttpServer::start(move |req: &Request| handle(req, &st, &art));
        Self {
            url: http.url().to_string(),
            artifacts,
            state,
            _http: http,
            _dir: dir,
        }
    }

    pub fn set_target(&self, version: &str, auto_update: bool) {
        self.state.lock().unwrap().find = FindResponse {
            edition: "oss".into(),
            server_version: "0.1.0".into(),
            auto_update: AutoUpdateSettings {
                agent_version: version.into(),
                agent_auto_update: auto_update,
                agent_update_jitter_seconds: 0,
                ..Default::default()
            },
            ..Default::default()
        };
    }

    /// What the channel at `{url}/chan` answers: `(status, body)` for `version` and
    /// `critical`.
    pub fn set_channel(&self, version: (u16, &str), critical: (u16, &str)) {
        let mut s = self.state.lock().unwrap();
        s.channel_version = Some((version.0, version.1.into()));
        s.channel_critical = Some((critical.0, critical.1.into()));
    }

    pub fn channel_url(&self) -> String {
        format!("{}/chan", self.url)
    }

    /// The maintenance schedule ternd would send: every day from `start_hour` UTC for
    /// `hours`.
    pub fn set_schedule(&self, start_hour: u8, hours: u64) {
        let body = serde_json::json!({
            "group": "default",
            "days": ["*"],
            "start_hour": start_hour,
            "duration_seconds": hours * 3600,
            "on_calendar": format!("*-*-* {start_hour:02}:00:00 UTC"),
            "windows": [],
        });
        self.state.lock().unwrap().schedule = Some(body.to_string());
    }

    /// The upper bound of the jitter find answers with.
    pub fn set_jitter(&self, seconds: u64) {
        self.state
            .lock()
            .unwrap()
            .find
            .auto_update
            .agent_update_jitter_seconds = seconds;
    }

    pub fn heartbeats(&self) -> Vec<(Option<String>, Heartbeat)> {
        self.state.lock().unwrap().heartbeats.clone()
    }

    /// Queues an install instruction for the next heartbeat answer.
    pub fn queue_install(&self, instruction: InstallInstruction) {
        self.state
            .lock()
            .unwrap()
            .install_queue
            .push_back(instruction);
    }

    /// The install_result of every heartbeat so far, in order.
    pub fn install_results(&self) -> Vec<Option<AttemptResult>> {
        self.heartbeats()
            .into_iter()
            .map(|(_, hb)| hb.install_result)
            .collect()
    }

    pub fn artifact_name(version: &str) -> String {
        let arch = tern_update::test_support::go_arch(std::env::consts::ARCH);
        format!("tern-agent-v{version}-linux-{arch}-bin.tar.gz")
    }

    pub fn base_url(&self) -> String {
        format!("{}/artifacts", self.url)
    }

    /// Publishes a tarball and its `.sha256`.
    pub fn publish(&self, version: &str, tarball: &[u8]) {
        let path = self.artifacts.join(Self::artifact_name(version));
        std::fs::write(&path, tarball).unwrap();
        let sum = hex(&Sha256::digest(tarball));
        std::fs::write(
            path.with_extension("gz.sha256"),
            format!("{sum}  x.tar.gz\n"),
        )
        .unwrap();
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn respond(code: u16, ctype: &str, body: &[u8]) -> Response {
    Response::new(code, body).header("Content-Type", ctype)
}

/// A find as ternd answers it with `wait` and `seen`: held while the answer's ETag
/// is `seen`, for at most `wait` seconds.
fn long_poll_find(st: &Mutex<ServerState>, query: &str, mut body: Vec<u8>) -> Response {
    let etag = |b: &[u8]| format!("\"{}\"", &hex(&Sha256::digest(b))[..16]);
    let params: HashMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%22", "\"")))
        .collect();
    let wait: Option<u64> = params.get("wait").and_then(|w| w.parse().ok());
    let seen = params.get("seen").cloned().unwrap_or_default();
    let mut how = "immediate";
    if let Some(wait) = wait
        && seen == etag(&body)
    {
        st.lock().unwrap().held += 1;
        let deadline = Instant::now() + Duration::from_secs(wait);
        how = "expired";
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            let now = serde_json::to_vec(&st.lock().unwrap().find).unwrap();
            if etag(&now) != seen {
                body = now;
                how = "changed";
                break;
            }
        }
        st.lock().unwrap().held -= 1;
    }
    let tag = etag(&body);
    respond(200, "application/json", &body)
        .header("ETag", tag)
        .header("Tern-Long-Poll", how)
}

fn handle(req: &Request, st: &Mutex<ServerState>, art: &Path) -> Response {
    let (method, path, query) = (req.method.as_str(), req.path(), req.query());
    st.lock().unwrap().requests.push(format!("{method} {path}"));
    let head = method == "HEAD";
    if path == "/v1/webapi/find" {
        let (body, long_poll) = {
            let mut s = st.lock().unwrap();
            s.find_count += 1;
            s.find_queries.push(query.to_string());
            (serde_json::to_vec(&s.find).unwrap(), s.long_poll)
        };
        if !long_poll {
            return respond(200, "application/json", &body);
        }
        return long_poll_find(st, query, body);
    }
    if path == "/v1/agents/heartbeat" && method == "POST" {
        let hb: Heartbeat = serde_json::from_slice(&req.body).unwrap_or_default();
        let auth = req.header("authorization").map(str::to_string);
        let (fail, answer, token) = {
            let mut s = st.lock().unwrap();
            s.heartbeats.push((auth.clone(), hb));
            let answer = s.heartbeat_answer.clone().or_else(|| {
                let install = s.install_queue.pop_front()?;
                let answer = HeartbeatResponse {
                    next_heartbeat_seconds: 60,
                    install: Some(Box::new(install)),
                    ..Default::default()
                };
                Some(serde_json::to_string(&answer).unwrap())
            });
            (s.fail_heartbeats, answer, s.heartbeat_token.clone())
        };
        if let Some(t) = token
            && auth.as_deref() != Some(format!("Bearer {t}").as_str())
        {
            let body =
                br#"{"error":{"code":"unauthenticated","message":"invalid or revoked token"}}"#;
            return respond(401, "application/json", body);
        }
        if fail {
            return respond(500, "text/plain", b"boom");
        }
        let answer = answer.unwrap_or_else(|| r#"{"next_heartbeat_seconds":60}"#.into());
        return respond(200, "application/json", answer.as_bytes());
    }
    if let Some(what) = path.strip_prefix("/chan/") {
        let answer = {
            let s = st.lock().unwrap();
            match what {
                "version" => s.channel_version.clone(),
                "critical" => s.channel_critical.clone(),
                _ => None,
            }
        };
        let (code, body) = answer.unwrap_or((404, "not found".into()));
        return respond(code, "text/plain", body.as_bytes());
    }
    if path == "/v1/agents/schedule" {
        let schedule = st.lock().unwrap().schedule.clone();
        return match schedule {
            Some(body) => respond(200, "application/json", body.as_bytes()),
            None => respond(404, "text/plain", b"not found"),
        };
    }
    if path == "/health" {
        // /health?file=<running_version file>&bad=<version>
        let q: HashMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let running =
            std::fs::read_to_string(q.get("file").copied().unwrap_or("")).unwrap_or_default();
        let ok = running.trim() != q.get("bad").copied().unwrap_or("")
            && !st.lock().unwrap().health_down;
        return respond(if ok { 200 } else { 503 }, "text/plain", b"");
    }
    if let Some(name) = path.strip_prefix("/artifacts/") {
        if let (true, Some(len)) = (head, st.lock().unwrap().head_content_length.clone()) {
            // The length as given, whatever it is: tern-testing's server sends it as it is.
            return Response::new(200, Vec::new()).header("Content-Length", len);
        }
        return match std::fs::read(art.join(name)) {
            Ok(data) => respond(200, "application/octet-stream", &data),
            Err(_) => respond(404, "text/plain", b"not found"),
        };
    }
    respond(404, "text/plain", b"not found")
}

/// How a test agent behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    Good,
    ExitsAtOnce,
    CrashLoop,
}

pub fn agent_script(version: &str, kind: Agent) -> String {
    let head =
        format!("#!/bin/sh\n# test agent {version}\necho {version} > \"$1/running_version\"\n");
    head + match kind {
        Agent::Good => "echo $$ > \"$1/agent.pid\"\nexec sleep 1000\n",
        Agent::ExitsAtOnce => {
            "echo $$ > \"$1/agent.pid\"\necho \"fatal: cannot open the agent's database\" >&2\nexit 1\n"
        }
        Agent::CrashLoop => {
            "while true; do sh -c 'echo $$ > \"$1/agent.pid\"; sleep 0.25' sh \"$1\"; done\n"
        }
    }
}

/// Entries for a tarball: (path, content, mode).
pub type Files = Vec<(String, Vec<u8>, u32)>;

pub fn release_files(version: &str, kind: Agent) -> Files {
    vec![
        (
            format!("agent-{version}/bin/tern-agent"),
            agent_script(version, kind).into_bytes(),
            0o755,
        ),
        (
            format!("agent-{version}/README"),
            b"test agent\n".to_vec(),
            0o644,
        ),
    ]
}

pub fn tarball(files: &Files) -> Vec<u8> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(enc);
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// A tarball with one raw header (name written byte for byte), for hostile entries.
pub fn raw_tarball(
    good: &Files,
    name: &str,
    kind: tar::EntryType,
    mode: u32,
    link: Option<&str>,
    data: &[u8],
) -> Vec<u8> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(enc);
    for (path, d, m) in good {
        let mut h = tar::Header::new_gnu();
        h.set_size(d.len() as u64);
        h.set_mode(*m);
        b.append_data(&mut h, path, d.as_slice()).unwrap();
    }
    let mut h = tar::Header::new_old();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            old.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
    }
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// A sandboxed host: install, link, unit and systemd dirs, and the agent's state dir.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub install: PathBuf,
    pub link: PathBuf,
    pub units: PathBuf,
    pub systemd: PathBuf,
    pub state: PathBuf,
    pub suffix: String,
    pub env: Vec<(String, String)>,
    /// Pass `--insecure` (plain http and unverified certificates); on by default.
    pub insecure: bool,
    /// Run tern-update under this umask (through `sh -c 'umask …; exec …'`).
    pub umask: Option<u32>,
}

impl Host {
    pub fn new() -> Self {
        Self::with_suffix("default")
    }

    pub fn with_suffix(suffix: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::in_dir(dir, suffix)
    }

    pub fn in_dir(dir: tempfile::TempDir, suffix: &str) -> Self {
        let p = dir.path().to_path_buf();
        let state = p.join(format!("state-{suffix}"));
        std::fs::create_dir_all(&state).unwrap();
        Self {
            install: p.join("opt"),
            link: p.join(format!("bin-{suffix}")),
            units: p.join("units"),
            systemd: p.join("systemd"),
            state,
            suffix: suffix.into(),
            env: Vec::new(),
            insecure: true,
            umask: None,
            dir,
        }
    }

    /// Writes a command-manager service config and returns its path.
    pub fn service_config(&self, extra: &str) -> PathBuf {
        let s = self.state.display();
        let l = self.link.display();
        let yaml = format!(
            "manager: command\nname: tern-agent\n\
             start: \"setsid {l}/tern-agent {s} </dev/null >>{s}/agent.out 2>&1 & echo $! > {s}/agent.pgid\"\n\
             stop: \"p=$(cat {s}/agent.pgid 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) kill -s KILL -- -$p 2>/dev/null;; esac; rm -f {s}/agent.pid; true\"\n\
             pid_file: {s}/agent.pid\nhealth_timeout: 3\nhealth_interval: 0.1\nstable_ticks: 4\nmax_restarts: 3\n{extra}"
        );
        let path = self
            .dir
            .path()
            .join(format!("service-{}.yaml", self.suffix));
        std::fs::write(&path, yaml).unwrap();
        path
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.bare_cmd(&[]);
        c.arg("--link-dir")
            .arg(&self.link)
            .arg("--unit-dir")
            .arg(&self.units)
            .arg("--systemd-dir")
            .arg(&self.systemd)
            .args(self.insecure.then_some("--insecure"))
            .args(args);
        c
    }

    /// tern-update with only `--install-dir` and `--install-suffix` (what locates
    /// update.yaml): every other setting comes from what `enable` saved.
    pub fn bare_cmd(&self, args: &[&str]) -> Command {
        let mut c = match self.umask {
            Some(mask) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        c.arg("--install-dir")
            .arg(&self.install)
            .arg("--install-suffix")
            .arg(&self.suffix)
            .args(args)
            .env_remove("TERN_UPDATE_KILL_AT")
            .stdin(std::process::Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Runs [`Host::bare_cmd`] and logs it like [`Host::run`].
    pub fn run_bare(&self, args: &[&str]) -> Output {
        let out = self.bare_cmd(args).output().unwrap();
        eprintln!(
            "$ tern-update (bare) {} -> {:?}\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().unwrap();
        eprintln!(
            "$ tern-update {} -> {:?}\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(0), "tern-update {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "tern-update {args:?} should fail with 1"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn enable(&self, server: &Server, service: &Path, extra: &[&str]) -> Output {
        let svc = service.to_string_lossy().into_owned();
        let base = server.base_url();
        let mut args = vec![
            "enable",
            "--server",
            server.url.as_str(),
            "--base-url",
            base.as_str(),
            "--service-config",
            svc.as_str(),
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    pub fn ns(&self) -> PathBuf {
        self.install.join(&self.suffix)
    }

    pub fn update_yaml(&self) -> tern_update::UpdateFile {
        let text = std::fs::read_to_string(self.ns().join("update.yaml")).unwrap();
        tern_update::parse_update_file(&text).unwrap()
    }

    pub fn active(&self) -> Option<String> {
        self.update_yaml().status.active
    }

    /// The version the running agent process announced, if it is alive.
    pub fn running_version(&self) -> Option<String> {
        let pid: u32 = std::fs::read_to_string(self.state.join("agent.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if pid <= 1 || !tern_update::test_support::pid_alive(pid) {
            return None;
        }
        Some(
            std::fs::read_to_string(self.state.join("running_version"))
                .ok()?
                .trim()
                .to_string(),
        )
    }

    /// The version the linked agent binary belongs to (by following the link).
    pub fn linked_version(&self) -> Option<String> {
        let target = std::fs::read_link(self.link.join("tern-agent")).ok()?;
        let text = std::fs::read_to_string(&target).ok()?;
        let v = text
            .lines()
            .nth(1)?
            .strip_prefix("# test agent ")?
            .to_string();
        // The version dir must be complete.
        let vdir = target.parent()?.parent()?;
        if vdir.ends_with("system") || vdir.join("sha256").is_file() {
            Some(v)
        } else {
            None
        }
    }

    pub fn versions(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.ns().join("versions"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Kills the agent's process group. Never via /usr/bin/kill: procps-ng 4.0.2 turns
    /// `kill -KILL -N` into kill(-1), which kills every process of the machine.
    pub fn stop_agent(&self) {
        let pgid = std::fs::read_to_string(self.state.join("agent.pgid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|p| *p > 1)
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pgid) = pgid {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        // The signal is delivered when the agent next runs: on a busy machine a check
        // right after this could still see it alive. Wait (briefly) until it is gone.
        let pid = std::fs::read_to_string(self.state.join("agent.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid.is_some_and(tern_update::test_support::pid_alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the running agent reports `version`.
    pub fn wait_running(&self, version: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.running_version().as_deref() == Some(version) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// A tern-update run in the background, its stderr read line by line.
pub struct Background {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("(background) {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line (from now) containing `pat`, within `timeout`.
    pub fn wait_for(&mut self, pat: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.lines.recv_timeout(left).ok()?;
            self.seen.push(line.clone());
            if line.contains(pat) {
                return Some(line);
            }
        }
    }

    /// Waits for the exit (at most `timeout`); the code and everything it said.
    pub fn finish(&mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + timeout;
        let code = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st.code();
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        (code, self.seen.join("\n"))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The one process this test started, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_agent();
    }
}

pub fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The marker row of a test agent's SQLite DB (which version's data it holds).
pub fn db_marker(db: &std::path::Path) -> String {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("SELECT v FROM marker", [], |r| r.get(0))
        .unwrap()
}

pub fn set_marker(db: &std::path::Path, v: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS marker(v TEXT); DELETE FROM marker;",
    )
    .unwrap();
    c.execute("INSERT INTO marker VALUES (?1)", [v]).unwrap();
}
