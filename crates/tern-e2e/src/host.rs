//! One simulated host: its own install dir, link dir, `tern-update` state and agent
//! process, managed by the real `tern-update` with the `command` service manager.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::io::Read;

use anyhow::{Context, bail};

/// The longest a single `tern-update` run may take before the harness kills it.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);
use serde_json::Value;

/// How the agent is started and watched: the `command` manager; `setsid` puts each
/// agent in its own process group, which `stop` (and the harness) kill, only after
/// checking that the group's leader is this host's agent (a stale id may have been
/// reused by anyone's process). `kill` here is the shell's builtin: procps-ng's
/// `/usr/bin/kill -KILL -N` can turn into kill(-1).
pub fn service_yaml(link: &Path, state: &Path) -> String {
    let (l, s) = (link.display(), state.display());
    // The agent also exits when the harness process is gone (a killed test).
    let harness = std::process::id();
    format!(
        "manager: command\n\
         name: tern-demo-agent\n\
         start: \"TERN_DEMO_AGENT_EXIT_WITH={harness} setsid {l}/tern-demo-agent {s} </dev/null >>{s}/agent.out 2>&1 & echo $! > {s}/agent.pgid\"\n\
         stop: \"p=$(cat {s}/agent.pgid 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) grep -qaF {s} /proc/$p/cmdline 2>/dev/null && kill -s KILL -- -$p 2>/dev/null;; esac; rm -f {s}/agent.pid {s}/agent.pgid; true\"\n\
         pid_file: {s}/agent.pid\n\
         log_file: {s}/agent.out\n\
         health_timeout: 10\n\
         health_interval: 0.2\n\
         stable_ticks: 6\n\
         max_restarts: 3\n"
    )
}

/// What one `tern-update` run did.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl RunOutcome {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The last non-empty line of stderr, without the log prefix (what failed, and
    /// what the host runs now).
    pub fn message(&self) -> String {
        let last = |s: &str| {
            s.lines()
                .rfind(|l| !l.trim().is_empty())
                .map(|l| strip_log_prefix(l).to_string())
        };
        last(&self.stderr)
            .or_else(|| last(&self.stdout))
            .unwrap_or_default()
    }
}

/// `tern-update: error: message` → `message`.
fn strip_log_prefix(line: &str) -> &str {
    let line = line.trim();
    let Some(rest) = line.strip_prefix("tern-update: ") else {
        return line;
    };
    for level in ["info: ", "warn: ", "error: "] {
        if let Some(msg) = rest.strip_prefix(level) {
            return msg;
        }
    }
    rest
}

pub struct Host {
    pub name: String,
    pub group: String,
    pub root: PathBuf,
    pub install: PathBuf,
    pub link: PathBuf,
    /// The agent's state dir: pid file, running_version, log, crash-on.
    pub state: PathBuf,
    pub service_config: PathBuf,
    tern_update: PathBuf,
    /// Offline hosts are skipped by the fleet: their timer does not run (their agent
    /// keeps running).
    pub online: bool,
    /// Enrolled to follow a channel (`--channel`), not the rollout.
    pub follows_channel: bool,
    /// The labels it was enrolled with (`--label KEY=VALUE`): where groups'
    /// `match_labels` place it.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Enrolled with a pinned release root (`--trust-root`).
    pub pinned_root: bool,
}

impl Host {
    /// Creates the host's directories under `root` (nothing runs yet).
    pub fn new(root: &Path, name: &str, group: &str, tern_update: &Path) -> anyhow::Result<Self> {
        let state = root.join("agent");
        std::fs::create_dir_all(&state)
            .with_context(|| format!("cannot create {}", state.display()))?;
        let link = root.join("bin");
        let service_config = root.join("agent-service.yaml");
        std::fs::write(&service_config, service_yaml(&link, &state))?;
        Ok(Self {
            name: name.into(),
            group: group.into(),
            root: root.to_path_buf(),
            install: root.join("opt"),
            link,
            state,
            service_config,
            tern_update: tern_update.to_path_buf(),
            online: true,
            follows_channel: false,
            labels: Default::default(),
            pinned_root: false,
        })
    }

    /// Notes what `enable`'s flags say of the host: a channel, labels, a pinned root.
    pub fn note_enable_args(&mut self, args: &[&str]) {
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match *a {
                "--channel" => self.follows_channel = true,
                "--trust-root" => self.pinned_root = true,
                "--label" => {
                    if let Some((k, v)) = it.next().and_then(|l| l.split_once('=')) {
                        self.labels.insert(k.to_string(), v.to_string());
                    }
                }
                _ => {}
            }
        }
    }

    /// The global flags that put this host in its own directories.
    pub fn global_args(&self) -> Vec<String> {
        vec![
            "--install-dir".into(),
            self.install.display().to_string(),
            "--link-dir".into(),
            self.link.display().to_string(),
            "--unit-dir".into(),
            self.root.join("units").display().to_string(),
            "--systemd-dir".into(),
            self.root.join("systemd").display().to_string(),
            "--insecure".into(),
            "--http-timeout".into(),
            "60".into(),
        ]
    }

    /// `tern-update <global flags> ARGS`, as this host's root would run it.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.tern_update);
        c.args(self.global_args())
            .args(args)
            .env_remove("TERN_UPDATE_KILL_AT")
            .stdin(Stdio::null());
        c
    }

    /// The same, as a line an operator can paste.
    pub fn command_line(&self, args: &[&str]) -> String {
        let mut parts = vec![self.tern_update.display().to_string()];
        parts.extend(self.global_args());
        parts.extend(args.iter().map(|s| s.to_string()));
        parts.join(" ")
    }

    /// Runs tern-update; kills it (the one process we started) after [`RUN_TIMEOUT`].
    pub fn run(&self, args: &[&str]) -> anyhow::Result<RunOutcome> {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", self.tern_update.display()))?;
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut s);
                }
                String::from_utf8_lossy(&s).into_owned()
            })
        };
        let out = read(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = read(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{}: tern-update {} did not finish within {}s",
                    self.name,
                    args.join(" "),
                    RUN_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(RunOutcome {
            code: status.code(),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        })
    }

    /// `tern-update enable --server S --group G --base-url A --service-config C
    /// --join-token-file T`: enrolls the host and installs its group's version.
    pub fn enable(
        &self,
        server: &str,
        artifacts: &str,
        token_file: &Path,
    ) -> anyhow::Result<RunOutcome> {
        self.enable_with(server, artifacts, token_file, &[])
    }

    /// [`Host::enable`] with more flags (e.g. `--channel URL`).
    pub fn enable_with(
        &self,
        server: &str,
        artifacts: &str,
        token_file: &Path,
        extra: &[&str],
    ) -> anyhow::Result<RunOutcome> {
        let svc = self.service_config.display().to_string();
        let token = token_file.display().to_string();
        let mut args = vec![
            "enable",
            "--server",
            server,
            "--group",
            &self.group,
            "--base-url",
            artifacts,
            "--service-config",
            &svc,
            "--join-token-file",
            &token,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// `tern-update update`: what the host's timer runs (find, update if told to, heartbeat).
    pub fn update(&self) -> anyhow::Result<RunOutcome> {
        self.run(&["update"])
    }

    /// `tern-update heartbeat`: tell ternd what runs here, without updating.
    pub fn heartbeat(&self) -> anyhow::Result<RunOutcome> {
        self.run(&["heartbeat"])
    }

    /// `tern-update status -o json`.
    pub fn status(&self) -> anyhow::Result<Value> {
        let out = self.run(&["status", "-o", "json"])?;
        serde_json::from_str(&out.stdout)
            .with_context(|| format!("{}: status printed no JSON: {}", self.name, out.stderr))
    }

    /// This host's updater id (created by `enable`).
    pub fn updater_id(&self) -> Option<String> {
        std::fs::read_to_string(self.install.join("default").join("updater_id"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// The version whose directory the link dir points at.
    /// Every version an agent process started with on this host, in order, from the
    /// agent's own log (a broken release logs "V starting: crashing" before it panics;
    /// a good one "V running"): the evidence of what the host ran, rollbacks included.
    pub fn started_versions(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.state.join("agent.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| {
                let rest = l.split_once("] ")?.1;
                let mut words = rest.split_whitespace();
                let v = words.next()?;
                matches!(words.next(), Some("starting:" | "running")).then(|| v.to_string())
            })
            .collect()
    }

    pub fn linked_version(&self) -> Option<String> {
        let target = std::fs::read_link(self.link.join("tern-demo-agent")).ok()?;
        // …/versions/<version>/bin/tern-demo-agent
        let vdir = target.parent()?.parent()?;
        Some(vdir.file_name()?.to_string_lossy().into_owned())
    }

    fn pid(&self, file: &str) -> Option<i32> {
        std::fs::read_to_string(self.state.join(file))
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|p| *p > 1)
    }

    /// The version the live agent process announced, if it is alive (a killed agent
    /// its parent has yet to reap is not: it has no command line).
    pub fn running_version(&self) -> Option<String> {
        let pid = self.pid("agent.pid")?;
        if !self.is_our_agent(pid) {
            return None;
        }
        let v = std::fs::read_to_string(self.state.join("running_version")).ok()?;
        Some(v.trim().to_string())
    }

    /// Waits up to `timeout` for the agent to run `version`.
    pub fn wait_running(&self, version: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.running_version().as_deref() == Some(version) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Makes the agent crash on start on this host for these versions (`*`: every
    /// version), as a host-specific bug or a broken environment would. Versions
    /// already running are not affected until they restart.
    pub fn crash_on(&self, versions: &[&str]) -> anyhow::Result<()> {
        std::fs::write(self.state.join("crash-on"), versions.join(" ") + "\n")?;
        Ok(())
    }

    /// Tells the agent where its control plane is (`HOST:PORT`) and how long it lasts
    /// without reaching it before it exits (the demo agent reads both when it checks).
    pub fn agent_server(&self, addr: &str, give_up_seconds: u64) -> anyhow::Result<()> {
        std::fs::write(self.state.join("server"), format!("{addr}\n"))?;
        std::fs::write(
            self.state.join("give-up-seconds"),
            format!("{give_up_seconds}\n"),
        )?;
        Ok(())
    }

    pub fn clear_crash_on(&self) {
        let _ = std::fs::remove_file(self.state.join("crash-on"));
    }

    /// Whether `pid` is this host's agent (its command line names our state dir).
    fn is_our_agent(&self, pid: i32) -> bool {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let needle = self.state.as_os_str().as_encoded_bytes();
        cmdline.windows(needle.len()).any(|w| w == needle)
    }

    /// Kills the agent's process group (and the agent itself), as a power cut would, and
    /// waits (at most 10 s) until it is gone: a signal is delivered when the process next
    /// runs, and on a busy machine what looks right after the kill could still see the
    /// agent alive and healthy. Only processes whose command line names this host's state
    /// dir are touched.
    pub fn kill_agent(&self) {
        let mut killed = Vec::new();
        for (file, group) in [("agent.pgid", true), ("agent.pid", false)] {
            let Some(raw) = self.pid(file).filter(|p| self.is_our_agent(*p)) else {
                continue;
            };
            let Some(pid) = rustix::process::Pid::from_raw(raw) else {
                continue;
            };
            let _ = if group {
                rustix::process::kill_process_group(pid, rustix::process::Signal::KILL)
            } else {
                rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            };
            killed.push(raw);
        }
        // Gone, or a zombie (no command line) that its parent has yet to reap.
        let deadline = Instant::now() + Duration::from_secs(10);
        while killed.iter().any(|p| self.is_our_agent(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill_agent();
    }
}
