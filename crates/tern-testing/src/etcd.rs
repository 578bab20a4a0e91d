//! Real etcd servers for tests: `EtcdCluster::start(n)` runs `n` members of Debian's
//! `etcd-server` on free loopback ports in a temp dir and kills them on drop.
//!
//! The binary is `$TERN_ETCD_BIN`, else `etcd` on `PATH`. If it is missing the tests fail
//! (never pass silently) with a message saying to install `etcd-server`.
//!
//! A member is ready when its `/health` endpoint says so: etcd answers it only with a
//! leader and after a quorum read, so a store connecting next finds the cluster usable.
//! The waits are `async` (the tests run on tokio) but need no runtime of their own: each
//! probe and pause runs on a thread of its own that wakes the waiting task, so a wait
//! never stalls the other tasks of the test's runtime (lease keepers, watches).

// Test support only: a cluster that cannot start is the test's failure, and a panic,
// with the member's log, is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tempfile::TempDir;

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

    /// Waits until member `i` says it is healthy: it has a leader and answered a quorum
    /// read.
    pub async fn wait_ready(&mut self, i: usize) {
        let endpoint = self.endpoint(i);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port));
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            if off_thread(move || healthy(addr)).await {
                return;
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
            if Instant::now() > deadline {
                panic!(
                    "etcd member {i} did not answer at {endpoint} within {START_PATIENCE:?}; its log:\n{}",
                    tail(&self.log_path(i))
                );
            }
            off_thread(|| std::thread::sleep(Duration::from_millis(100))).await;
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

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
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

/// Whether the member at `addr` says `{"health":"true"}` (etcd answers 503 without a
/// leader or when its quorum read fails).
fn healthy(addr: SocketAddr) -> bool {
    match crate::http::get(addr, "/health", Duration::from_secs(1)) {
        Ok((200, body)) => String::from_utf8_lossy(&body)
            .replace(' ', "")
            .contains("\"health\":\"true\""),
        _ => false,
    }
}

/// `f` run on a thread of its own; the future is ready with its result.
fn off_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> OffThread<T> {
    let shared: Arc<Mutex<Shared<T>>> = Arc::new(Mutex::new(Shared {
        value: None,
        waker: None,
    }));
    let theirs = Arc::clone(&shared);
    std::thread::spawn(move || {
        let value = f();
        let mut s = theirs.lock().unwrap_or_else(|e| e.into_inner());
        s.value = Some(value);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    });
    OffThread { shared }
}

struct Shared<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

struct OffThread<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

impl<T> Future for OffThread<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    /// Runs `f` to completion on this thread (the tests of this crate have no runtime).
    fn block_on<T>(f: impl Future<Output = T>) -> T {
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }

    #[test]
    fn a_member_is_healthy_once_started_and_again_after_a_restart() {
        let mut cluster = block_on(EtcdCluster::start(1));
        let addr = SocketAddr::from(([127, 0, 0, 1], cluster.members[0].client_port));
        assert!(healthy(addr));
        assert_eq!(cluster.endpoints(), vec![cluster.endpoint(0)]);
        cluster.kill(0);
        assert!(!healthy(addr), "a killed member answered");
        block_on(cluster.restart(0));
        assert!(healthy(addr));
    }
}
