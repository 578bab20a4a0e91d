//! Real etcd servers for tests: `EtcdCluster::start(n)` runs `n` members of Debian's
//! `etcd-server` on free loopback ports in a temp dir and kills them on drop.
//!
//! The binary is `$TERN_ETCD_BIN`, else `etcd` on `PATH`. If it is missing the tests fail
//! (never pass silently) with a message saying to install `etcd-server`.

#![allow(dead_code)] // each test file uses a different part

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tern_store::{EtcdOptions, EtcdStore, Store};

/// How long a member may take to start answering.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// The etcd binary, or a panic telling how to get it.
pub fn etcd_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("TERN_ETCD_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "TERN_ETCD_BIN={} is not a file: point it at an etcd server binary, or unset it \
             and install etcd with `apt-get install -y etcd-server`",
            bin.display()
        );
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("etcd");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "the etcd tests need an `etcd` server binary, and none is on PATH: install it with \
         `apt-get install -y etcd-server` (Debian/Ubuntu), or set TERN_ETCD_BIN to its path"
    );
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// A running etcd cluster of one or more members, killed (SIGKILL) on drop.
pub struct EtcdCluster {
    bin: PathBuf,
    dir: TempDir,
    token: String,
    members: Vec<Member>,
}

/// `n` distinct free loopback ports (held together while picking so they differ).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl EtcdCluster {
    /// Starts an `n`-member cluster and waits until every member answers.
    pub async fn start(n: usize) -> Self {
        let bin = etcd_binary();
        let dir = tempfile::Builder::new()
            .prefix("tern-etcd-")
            .tempdir()
            .unwrap();
        let ports = free_ports(2 * n);
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                child: None,
            })
            .collect();
        let token = format!(
            "tern-test-{}-{}",
            std::process::id(),
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let mut cluster = EtcdCluster {
            bin,
            dir,
            token,
            members,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        for i in 0..n {
            cluster.wait_ready(i).await;
        }
        cluster
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} already runs");
        let initial_cluster = self.initial_cluster();
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .unwrap();
        let child = Command::new(&self.bin)
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("{}.etcd", m.name)))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.members[i].child = Some(child);
    }

    /// Waits until member `i` answers a linearizable read (so it has a leader).
    pub async fn wait_ready(&mut self, i: usize) {
        let endpoint = self.endpoint(i);
        let deadline = tokio::time::Instant::now() + START_PATIENCE;
        loop {
            let opts = EtcdOptions {
                request_timeout: Duration::from_secs(1),
                connect_timeout: Duration::from_millis(500),
                ..EtcdOptions::default()
            };
            match EtcdStore::connect(std::slice::from_ref(&endpoint), "/ready/", opts).await {
                Ok(s) if s.revision().await.is_ok() => return,
                _ => {}
            }
            if let Some(child) = self.members[i].child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.members[i].child = None;
                panic!(
                    "etcd member {i} exited ({status}) while starting; its log:\n{}",
                    tail(&self.log_path(i))
                );
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "etcd member {i} did not answer at {endpoint} within {START_PATIENCE:?}; its log:\n{}",
                    tail(&self.log_path(i))
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Kills member `i` with SIGKILL (no graceful shutdown) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to member `i`, a process this cluster started.
    pub fn signal(&self, i: usize, signal: &str) {
        let child = self.members[i]
            .child
            .as_ref()
            .expect("member is not running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Starts member `i` again on its data dir and ports, and waits until it answers.
    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_ready(i).await;
    }

    /// Starts member `i` again without waiting (e.g. when it cannot have a quorum alone).
    pub fn restart_no_wait(&mut self, i: usize) {
        self.spawn(i);
    }

    /// A store on this cluster under `prefix`, talking to every member.
    pub async fn store(&self, prefix: &str) -> EtcdStore {
        EtcdStore::connect(&self.endpoints(), prefix, EtcdOptions::default())
            .await
            .unwrap()
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// The last few KiB of a log file, for failure messages.
fn tail(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let start = s.len().saturating_sub(4000);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_owned()
}
