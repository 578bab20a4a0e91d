//! `ternd` as a child process on a temp data dir and a free port, and `ternctl` against it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// The SQLite file in a ternd's data dir when no `--backend` is given.
pub const DATABASE_FILE: &str = "tern.db";

/// A running `ternd start --insecure-http --dev-clock T`.
pub struct Ternd {
    child: Option<Child>,
    /// The binary and the flags after `start` but `--listen`: what [`Ternd::restart`]
    /// starts again.
    bin: PathBuf,
    args: Vec<String>,
    pub url: String,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The operator token ternd wrote on first start.
    pub token_file: PathBuf,
    /// ternd's stderr (its log).
    pub log: PathBuf,
}

impl Ternd {
    /// Starts ternd on `127.0.0.1:0`, waits for the address it prints, then for `/readyz`.
    pub fn start(
        bin: &Path,
        data_dir: &Path,
        dev_clock: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_serving(bin, data_dir, dev_clock, &["--insecure-http"], extra)
    }

    /// [`Ternd::start`] serving as `serving` says: `--insecure-http`, or `--tls-cert F
    /// --tls-key F` (then `url` is `https://…`, and readiness is the port accepting
    /// connections: the caller's TLS client checks the rest).
    pub fn start_serving(
        bin: &Path,
        data_dir: &Path,
        dev_clock: &str,
        serving: &[&str],
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        let mut args: Vec<String> = serving.iter().map(|a| a.to_string()).collect();
        args.extend(["--data-dir".to_string(), data_dir.display().to_string()]);
        args.extend(["--dev-clock".to_string(), dev_clock.to_string()]);
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::spawn(bin, data_dir, args, "127.0.0.1:0", false)
    }

    /// Kills ternd with SIGKILL (a crash: nothing flushed, no lease given back) and
    /// starts it again on the same data dir, address and flags, as an operator's
    /// service manager would; its log goes on in the same file. Returns once it is
    /// ready again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let listen = self.addr.to_string();
        let again = Self::spawn(&self.bin, &self.data_dir, self.args.clone(), &listen, true)?;
        *self = again;
        Ok(())
    }

    /// Starts `bin start --listen LISTEN ARGS…`, its log in the file beside `data_dir`
    /// (appended to when `append`), and waits until it is ready.
    fn spawn(
        bin: &Path,
        data_dir: &Path,
        args: Vec<String>,
        listen: &str,
        append: bool,
    ) -> anyhow::Result<Self> {
        let log = data_dir.with_extension("log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut child = Command::new(bin)
            .arg("start")
            .args(["--listen", listen])
            .args(&args)
            .env("TERN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let out = child.stdout.take().context("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                // Keep draining after the address so ternd never blocks on a full pipe.
                let _ = tx.send(line);
            }
        });
        let mut t = Self {
            child: Some(child),
            bin: bin.to_path_buf(),
            args,
            url: String::new(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: data_dir.to_path_buf(),
            token_file: data_dir.join("operator.token"),
            log,
        };
        loop {
            let line = match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => l,
                Err(_) => bail!(
                    "ternd did not print its address within 60s; its log ({}):\n{}",
                    t.log.display(),
                    t.log_tail(20)
                ),
            };
            if let Some(url) = line.strip_prefix("ternd listening on ") {
                t.url = url.trim().to_string();
                break;
            }
        }
        let tls = t.url.starts_with("https://");
        t.addr = t
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .parse()
            .with_context(|| format!("ternd printed an odd address: {}", t.url))?;
        for _ in 0..400 {
            let up = if tls {
                std::net::TcpStream::connect_timeout(&t.addr, Duration::from_millis(500)).is_ok()
            } else {
                ready(t.addr)
            };
            if up {
                return Ok(t);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!("ternd never became ready; its log:\n{}", t.log_tail(20))
    }

    /// The last `n` lines of ternd's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The lines of ternd's log at level WARN or above: what a failing test shows of
    /// ternd (lease renewals missed, store errors) without the whole log.
    pub fn log_warnings(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_string)
            .collect()
    }

    /// The replica id ternd keeps in its data dir (`replica.id`), once it has started.
    pub fn replica_id(&self) -> Option<String> {
        std::fs::read_to_string(self.data_dir.join("replica.id"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

fn ready(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 16];
    s.read(&mut buf)
        .is_ok_and(|n| buf[..n].starts_with(b"HTTP/1.1 200"))
}

impl Drop for Ternd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGKILL to the one process we started.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `ternctl --server URL --token-file FILE …`.
#[derive(Clone, Debug)]
pub struct Ctl {
    pub bin: PathBuf,
    pub server: String,
    pub token_file: PathBuf,
}

impl Ctl {
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .arg("--server")
            .arg(&self.server)
            .arg("--token-file")
            .arg(&self.token_file)
            .env_remove("TERN_TOKEN")
            .env_remove("TERN_SERVER")
            .env_remove("TERN_CA_CERT")
            .stdin(Stdio::null());
        c
    }

    /// Runs ternctl; its stdout, or an error with its stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(args)
            .output()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "ternctl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A new `agent` token (trimmed): what a program that heartbeats for many agents
    /// (the Kubernetes controller) is given.
    pub fn agent_token(&self, description: &str) -> anyhow::Result<String> {
        let out = self.run(&[
            "tokens",
            "create",
            "--role",
            "agent",
            "--controller",
            "--description",
            description,
        ])?;
        Ok(out.trim().to_string())
    }

    /// Runs ternctl with `-o json` and parses what it prints.
    pub fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut a = args.to_vec();
        a.extend_from_slice(&["-o", "json"]);
        let text = self.run(&a)?;
        serde_json::from_str(&text)
            .with_context(|| format!("ternctl {} printed no JSON: {text}", args.join(" ")))
    }
}
