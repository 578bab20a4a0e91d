//! The lock-step cluster's test bench: a fake GitHub releases API and a webhook
//! receiver on loopback (GitHub itself cannot be reached from the test machines: the
//! fake speaks the same paths, JSON fields and `Link` pagination), release tarballs with
//! three demo components, and real `tern-lockstep` worker and updater processes.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tern_testing::http::{self, HttpServer, Request, Response};

/// One release on the fake GitHub.
#[derive(Clone)]
pub struct FakeRelease {
    pub tag: String,
    pub prerelease: bool,
    pub draft: bool,
    pub assets: Vec<String>,
}

/// GitHub's releases API for repository `o/r`, two releases per page, newest first, and
/// the assets' downloads.
pub struct FakeGitHub {
    pub server: HttpServer,
    releases: Arc<Mutex<Vec<FakeRelease>>>,
    pub assets: PathBuf,
    pub pages_served: Arc<Mutex<u32>>,
}

impl FakeGitHub {
    pub fn start(assets: &Path) -> Self {
        let releases: Arc<Mutex<Vec<FakeRelease>>> = Arc::default();
        let pages: Arc<Mutex<u32>> = Arc::default();
        let (rel, dir, pg) = (
            Arc::clone(&releases),
            assets.to_path_buf(),
            Arc::clone(&pages),
        );
        let base: Arc<Mutex<String>> = Arc::default();
        let base2 = Arc::clone(&base);
        let server = HttpServer::start(move |req: &Request| {
            let base = base2.lock().unwrap().clone();
            let (path, query) = (req.path(), req.query());
            let json = |r: &FakeRelease| {
                serde_json::json!({
                    "tag_name": r.tag, "draft": r.draft, "prerelease": r.prerelease,
                    "assets": r.assets.iter().map(|a| serde_json::json!({
                        "name": a, "browser_download_url": format!("{base}/download/{a}")
                    })).collect::<Vec<_>>(),
                })
            };
            let all: Vec<FakeRelease> = rel.lock().unwrap().iter().rev().cloned().collect();
            match path {
                "/repos/o/r/releases" => {
                    *pg.lock().unwrap() += 1;
                    let page: usize = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("page="))
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(1);
                    let per = 2;
                    let items: Vec<_> = all
                        .iter()
                        .skip((page - 1) * per)
                        .take(per)
                        .map(json)
                        .collect();
                    let mut headers = Vec::new();
                    if page * per < all.len() {
                        headers.push((
                            "Link".to_string(),
                            format!(
                                "<{base}/repos/o/r/releases?per_page=100&page={}>; rel=\"next\", <{base}/repos/o/r/releases?page=99>; rel=\"last\"",
                                page + 1
                            ),
                        ));
                    }
                    let mut resp = Response::new(200, serde_json::to_vec(&items).unwrap());
                    resp.headers = headers;
                    resp
                }
                "/repos/o/r/releases/latest" => {
                    match all.iter().find(|r| !r.draft && !r.prerelease) {
                        Some(r) => Response::new(200, serde_json::to_vec(&json(r)).unwrap()),
                        None => Response::new(404, &b"{\"message\":\"Not Found\"}"[..]),
                    }
                }
                p if p.starts_with("/download/") => http::file(&dir, &p["/download/".len()..]),
                _ => Response::not_found(),
            }
        });
        *base.lock().unwrap() = server.url().to_string();
        FakeGitHub {
            server,
            releases,
            assets: assets.to_path_buf(),
            pages_served: pages,
        }
    }

    /// Publishes a release (newest last).
    pub fn publish(&self, r: FakeRelease) {
        self.releases.lock().unwrap().push(r);
    }
}

/// A plain JSON release index at `/index.json`, whose text the test sets.
pub struct IndexServer {
    pub server: HttpServer,
    text: Arc<Mutex<String>>,
}

impl IndexServer {
    pub fn start() -> Self {
        let text: Arc<Mutex<String>> = Arc::new(Mutex::new("{\"releases\": []}".into()));
        let t = Arc::clone(&text);
        let server = HttpServer::start(move |req: &Request| {
            if req.target == "/index.json" {
                Response::new(200, t.lock().unwrap().clone())
            } else {
                Response::not_found()
            }
        });
        IndexServer { server, text }
    }

    pub fn set(&self, index: serde_json::Value) {
        *self.text.lock().unwrap() = index.to_string();
    }

    pub fn url(&self) -> String {
        format!("{}/index.json", self.server.url())
    }
}

/// Receives alert notices.
pub struct Webhook {
    pub server: HttpServer,
    pub bodies: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Webhook {
    pub fn start() -> Self {
        let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let b = Arc::clone(&bodies);
        let server = HttpServer::start(move |req: &Request| {
            if req.method == "POST"
                && let Ok(v) = serde_json::from_slice(&req.body)
            {
                b.lock().unwrap().push(v);
            }
            Response::new(204, Vec::new())
        });
        Webhook { server, bodies }
    }

    pub fn events(&self) -> Vec<(String, String)> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["event"].as_str().unwrap_or("").to_string(),
                    v["alert"]["kind"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

/// The plan every demo release ships: A stops everywhere then starts, B rolls, D runs once.
pub const PLAN: &str = r#"components:
  - name: a
    kind: stop-everywhere
    stop: [bin/component, a, stop]
    start: [bin/component, a, start]
  - name: b
    kind: rolling
    stop: [bin/component, b, stop]
    start: [bin/component, b, start]
    check: [bin/component, b, check]
    timeout: 20s
  - name: d
    kind: leader-only
    start: [bin/component, d, start]
"#;

/// One script for the three components; each logs what it does to `$LOCKSTEP_TEST_LOG`
/// (one `echo >>` is one append, whole). Switches, files in `$LOCKSTEP_TEST_DIR`:
/// - `fail-b-<server>`: `b check` fails there;
/// - `fail-b-first`: the first server to run `b check` fails it (it marks
///   `b-checking-<server>`, and while `hold-b-check` exists it waits before failing);
/// - `hang-a-<server>`: `a stop` there hangs until the file is removed (at most a minute).
///
/// `a start` also leaves `worker-release-<server>-<version>` holding the worker's
/// `TERN_LOCKSTEP_WORKER_RELEASE`, when set: which release's worker ran the step.
pub const COMPONENT: &str = r#"#!/bin/sh
set -e
log="$LOCKSTEP_TEST_LOG"
d="$LOCKSTEP_TEST_DIR"
s="$TERN_LOCKSTEP_SERVER"
v="$TERN_LOCKSTEP_VERSION"
case "$1 $2" in
  "a stop")
    echo "a stop $s" >> "$log"
    n=0
    while [ -e "$d/hang-a-$s" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done ;;
  "a start")
    echo "a start $s $v" >> "$log"
    if [ -n "$TERN_LOCKSTEP_WORKER_RELEASE" ]; then echo "$TERN_LOCKSTEP_WORKER_RELEASE" > "$d/worker-release-$s-$v"; fi ;;
  "b stop")  echo "b begin $s $v" >> "$log"; sleep 0.3 ;;
  "b start") sleep 0.2; echo "b end $s $v" >> "$log" ;;
  "b check")
    if [ -e "$d/fail-b-$s" ]; then echo "b is unhealthy on $s" >&2; exit 3; fi
    if [ -e "$d/fail-b-first" ] && mkdir "$d/fail-b-first.taken" 2>/dev/null; then
      touch "$d/b-checking-$s"
      n=0
      while [ -e "$d/hold-b-check" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
      echo "b is unhealthy on $s, the first to check" >&2; exit 3
    fi ;;
  "d start") echo "d run $s $v" >> "$log" ;;
  *) echo "unknown: $*" >&2; exit 2 ;;
esac
"#;

/// Writes `app-<version>.tar.gz` and its `.sha256` into `dir`; returns the asset names.
pub fn build_release(dir: &Path, version: &str) -> Vec<String> {
    build_release_with(dir, version, PLAN)
}

/// [`build_release`] with another plan.
pub fn build_release_with(dir: &Path, version: &str, plan: &str) -> Vec<String> {
    build_release_files(dir, version, plan, &[])
}

/// [`build_release_with`] plus more files (path, mode, bytes).
pub fn build_release_files(
    dir: &Path,
    version: &str,
    plan: &str,
    extra: &[(&str, u32, &[u8])],
) -> Vec<String> {
    let name = format!("app-{version}.tar.gz");
    let path = dir.join(&name);
    let file = std::fs::File::create(&path).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut add = |p: &str, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        tar.append_data(&mut h, p, data).unwrap();
    };
    add("lockstep.yaml", 0o644, plan.as_bytes());
    add("bin/component", 0o755, COMPONENT.as_bytes());
    for (p, mode, data) in extra {
        add(p, *mode, data);
    }
    tar.into_inner().unwrap().finish().unwrap();
    let digest = Sha256::digest(std::fs::read(&path).unwrap());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(
        dir.join(format!("{name}.sha256")),
        format!("{hex}  {name}\n"),
    )
    .unwrap();
    vec![name.clone(), format!("{name}.sha256")]
}

/// A running `tern-lockstep` process, killed on drop.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig} {}", self.name);
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// How much the process has logged so far: a mark for [`Proc::logged_since`].
    pub fn log_mark(&self) -> usize {
        std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize)
    }

    /// The lines the process logged after `mark`.
    pub fn logged_since(&self, mark: usize) -> Vec<String> {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(bytes.get(mark..).unwrap_or_default())
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits until the process logs, after `mark`, a line holding `needle`; panics with
    /// its log after `within`.
    pub fn wait_logged(&self, mark: usize, needle: &str, within: Duration) {
        let start = Instant::now();
        while !self.logged_since(mark).iter().any(|l| l.contains(needle)) {
            assert!(
                start.elapsed() < within,
                "{} never logged {needle:?} within {within:?}:\n{}",
                self.name,
                self.logged_since(mark).join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The log marks of `procs`, for [`wait_halted`].
pub fn log_marks(procs: &[&Proc]) -> Vec<usize> {
    procs.iter().map(|p| p.log_mark()).collect()
}

/// Waits until each worker of `workers` has logged, after its mark, that it is halted:
/// it saw the stop or a failure, and left any step it was in (a worker decides its next
/// move only once a step's run returned). Whatever a test asserts did not happen after
/// a stop (a step begun, a server gone on) would have happened by then.
pub fn wait_halted(workers: &[&Proc], marks: &[usize], within: Duration) {
    for (w, mark) in workers.iter().zip(marks) {
        w.wait_logged(*mark, "action=Halted(", within);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.pid().to_string()])
            .status();
        self.kill();
    }
}

/// The bench: a store, the fake GitHub, a webhook and the processes.
pub struct Bench {
    pub dir: tempfile::TempDir,
    pub store: String,
    pub github: FakeGitHub,
    pub webhook: Webhook,
    pub log: PathBuf,
    /// etcd's root password file, once [`Bench::enable_etcd_auth`] turned authentication
    /// on: the updaters and the operator's commands log in as root, each worker as its
    /// own server (credentials from `servers add --credentials-out`).
    pub root_login: Option<PathBuf>,
}

impl Bench {
    pub fn new(store: Option<String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let assets = dir.path().join("assets");
        std::fs::create_dir_all(&assets).unwrap();
        let store =
            store.unwrap_or_else(|| format!("sqlite:{}", dir.path().join("store.db").display()));
        let github = FakeGitHub::start(&assets);
        let log = dir.path().join("components.log");
        std::fs::write(&log, "").unwrap();
        Bench {
            dir,
            store,
            github,
            webhook: Webhook::start(),
            log,
            root_login: None,
        }
    }

    /// Turns etcd's authentication on (`tern-lockstep auth enable`).
    pub fn enable_etcd_auth(&mut self) {
        let file = self.dir.path().join("root-password");
        std::fs::write(&file, "root-secret-for-tests\n").unwrap();
        let (ok, out) = self.ctl(&[
            "auth",
            "enable",
            "--root-password-file",
            file.to_str().unwrap(),
        ]);
        assert!(ok, "{out}");
        self.root_login = Some(file);
        // Without credentials, etcd now refuses.
        let out = Command::new(env!("CARGO_BIN_EXE_tern-lockstep"))
            .arg("status")
            .env("TERN_LOCKSTEP_STORE", &self.store)
            .env("TERN_LOCKSTEP_LOG", "warn")
            .output()
            .unwrap();
        assert!(!out.status.success(), "etcd answered without credentials");
    }

    /// Server `id`'s credentials file (`servers add --credentials-out`).
    pub fn credentials(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("server-{id}.credentials"))
    }

    /// Registers server `id` with its own identity (and, with etcd's authentication on,
    /// its own etcd user); its workers then start with `--credentials`.
    pub fn add_server(&self, id: u32) {
        let file = self.credentials(id);
        let (ok, out) = self.ctl(&[
            "servers",
            "add",
            &id.to_string(),
            "--name",
            &format!("s{id}"),
            "--credentials-out",
            file.to_str().unwrap(),
        ]);
        assert!(ok, "{out}");
    }

    fn login_env(&self, cmd: &mut Command) {
        if let Some(f) = &self.root_login {
            cmd.env("TERN_LOCKSTEP_ETCD_USER", "root")
                .env("TERN_LOCKSTEP_ETCD_PASSWORD_FILE", f);
        }
    }

    pub fn release(&self, tag: &str, version: &str, prerelease: bool) {
        let assets = build_release(&self.github.assets, version);
        self.github.publish(FakeRelease {
            tag: tag.into(),
            prerelease,
            draft: false,
            assets,
        });
    }

    /// Starts `tern-lockstep ARGS` named `name` (its output in `<name>.log`), logged in as
    /// etcd's root when `as_root` and authentication is on.
    pub fn spawn(&self, name: &str, args: &[String], as_root: bool) -> Proc {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-lockstep"));
        if as_root {
            self.login_env(&mut cmd);
        }
        let child = cmd
            .args(args)
            .env("TERN_LOCKSTEP_STORE", &self.store)
            .env("TERN_LOCKSTEP_LOG", "info,tern_lockstep=debug")
            .env("LOCKSTEP_TEST_LOG", &self.log)
            .env("LOCKSTEP_TEST_DIR", self.dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    /// The worker of server `id`. With etcd's authentication on, the server is added
    /// first (once) and its worker runs with its credentials; otherwise it registers
    /// itself, keeping its key in its root.
    pub fn worker(&self, id: u32, barrier_timeout: &str) -> Proc {
        let creds = self.credentials(id);
        if self.root_login.is_some() && !creds.exists() {
            self.add_server(id);
        }
        self.worker_as(&format!("worker-{id}"), id, barrier_timeout, &[])
    }

    /// A worker process named `name` claiming id `id`, with more flags (`--root` among
    /// them replaces the default). Runs with server `id`'s credentials when they exist
    /// and no `--credentials` is given.
    pub fn worker_as(&self, name: &str, id: u32, barrier_timeout: &str, more: &[String]) -> Proc {
        let root = self.dir.path().join(format!("server-{id}"));
        let mut args: Vec<String> = vec![
            "worker".into(),
            "--id".into(),
            id.to_string(),
            "--barrier-timeout".into(),
            barrier_timeout.into(),
            "--lease-ttl".into(),
            "3s".into(),
            "--insecure-http".into(),
        ];
        if !more.iter().any(|a| a == "--root") {
            args.extend(["--root".into(), root.display().to_string()]);
        }
        let creds = self.credentials(id);
        if creds.exists() && !more.iter().any(|a| a == "--credentials") {
            args.extend(["--credentials".into(), creds.display().to_string()]);
        }
        args.extend_from_slice(more);
        self.spawn(name, &args, false)
    }

    pub fn updater(&self, name: &str) -> Proc {
        self.updater_with(name, &[])
    }

    /// An updater following the fake GitHub, with more flags.
    pub fn updater_with(&self, name: &str, more: &[&str]) -> Proc {
        let mut source: Vec<String> = [
            "--github",
            self.github.server.url(),
            "--repo",
            "o/r",
            "--asset",
            "app-{version}.tar.gz",
        ]
        .map(String::from)
        .to_vec();
        source.extend(more.iter().map(|s| s.to_string()));
        self.updater_from(name, &source)
    }

    /// An updater reading releases from `source` (its flags).
    pub fn updater_from(&self, name: &str, source: &[String]) -> Proc {
        let mut args = vec!["updater".to_string()];
        args.extend_from_slice(source);
        let hook = format!("{}/hook", self.webhook.server.url());
        args.extend(
            [
                "--poll",
                "1s",
                "--lease-ttl",
                "2s",
                "--holder",
                name,
                "--insecure-http",
                "--notify-webhook",
                &hook,
                "--notify-server-name",
                "lab",
            ]
            .map(String::from),
        );
        self.spawn(name, &args, true)
    }

    /// Runs an operator command; returns (success, stdout + stderr).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-lockstep"));
        self.login_env(&mut cmd);
        let out = cmd
            .args(args)
            .env("TERN_LOCKSTEP_STORE", &self.store)
            .env("TERN_LOCKSTEP_LOG", "warn")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// `status`'s stdout: the records. Its stderr (a store's warning as the process
    /// exits, say) is not part of them.
    pub fn status(&self) -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-lockstep"));
        self.login_env(&mut cmd);
        let out = cmd
            .arg("status")
            .env("TERN_LOCKSTEP_STORE", &self.store)
            .env("TERN_LOCKSTEP_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Waits until `status` contains `needle`; panics with the status and logs.
    pub fn wait_status(&self, needle: &str, within: Duration, procs: &[&Proc]) -> String {
        let start = Instant::now();
        loop {
            let s = self.status();
            if s.contains(needle) {
                return s;
            }
            if start.elapsed() > within {
                let mut logs = String::new();
                for p in procs {
                    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(25).collect();
                    logs.push_str(&format!(
                        "--- {} ---\n{}\n",
                        p.name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    ));
                }
                panic!("status never showed {needle:?} within {within:?}:\n{s}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn component_log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Replays the components' log: A never runs two versions at once, at most one B
/// restarts at a time. Returns how many times D ran per version.
pub fn check_log(lines: &[String]) -> BTreeMap<String, usize> {
    let mut a_running: BTreeMap<String, String> = BTreeMap::new();
    let mut b_in_flight: Option<String> = None;
    let mut d_runs: BTreeMap<String, usize> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["a", "stop", s] => {
                a_running.remove(*s);
            }
            ["a", "start", s, v] => {
                a_running.insert(s.to_string(), v.to_string());
                let versions: std::collections::BTreeSet<&String> = a_running.values().collect();
                assert!(
                    versions.len() <= 1,
                    "line {n} ({line}): A runs {versions:?} at once; log:\n{}",
                    lines.join("\n")
                );
            }
            ["b", "begin", s, _] => {
                assert!(
                    b_in_flight.is_none(),
                    "line {n} ({line}): B restarts on {s} while {b_in_flight:?} restarts; log:\n{}",
                    lines.join("\n")
                );
                b_in_flight = Some(s.to_string());
            }
            ["b", "end", s, _] => {
                assert_eq!(b_in_flight.as_deref(), Some(*s), "line {n}: {line}");
                b_in_flight = None;
            }
            ["d", "run", _, v] => *d_runs.entry(v.to_string()).or_default() += 1,
            _ => panic!("line {n}: unexpected {line:?}"),
        }
    }
    d_runs
}

/// Polls `f` until it holds; panics after `within`.
pub fn wait_for(within: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < within,
            "a condition did not hold within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
