//! A real Prometheus server (Debian's `prometheus` package) for the canary-analysis
//! tests and the demo: started on a loopback port picked at run time, with its own
//! config and storage in a temp dir, scraping the demo agents' `/metrics` every
//! second. Dropping it kills it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// The Prometheus binary: `TERN_PROMETHEUS` if set, else `/usr/bin/prometheus` (the
/// Debian package); `None` when neither is there.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("TERN_PROMETHEUS")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/prometheus")))
        .filter(|p| p.is_file())
}

/// A loopback port free now (taken again by whoever binds it next).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(l.local_addr()?.port())
}

/// One scrape target: `127.0.0.1:port`, with the labels its series get.
#[derive(Clone, Debug)]
pub struct Target {
    pub port: u16,
    pub labels: BTreeMap<String, String>,
}

pub struct Prometheus {
    child: Child,
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl Prometheus {
    /// Starts Prometheus on `port` scraping `targets` every second, and waits until it
    /// is ready.
    pub fn start(port: u16, targets: &[Target]) -> anyhow::Result<Self> {
        let bin = binary().context(
            "no Prometheus: install Debian's prometheus package (or set TERN_PROMETHEUS)",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("tern-prometheus-")
            .tempdir()?;
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: agents\n  scrape_timeout: 1s\n  static_configs:\n",
        );
        for t in targets {
            config.push_str(&format!("  - targets: ['127.0.0.1:{}']\n", t.port));
            if !t.labels.is_empty() {
                config.push_str("    labels:\n");
                for (k, v) in &t.labels {
                    config.push_str(&format!("      {k}: {}\n", yaml_str(v)));
                }
            }
        }
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config)?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut p = Self {
            child,
            port,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = p.child.try_wait() {
                bail!("prometheus exited ({status}):\n{}", p.log_tail());
            }
            if get(port, "/-/ready").is_ok_and(|(code, _)| code == 200) {
                return Ok(p);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("prometheus not ready after 30s:\n{}", p.log_tail())
    }

    pub fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The one number `promql` gives now, if it gives one.
    pub fn value(&self, promql: &str) -> Option<f64> {
        let (code, body) = get(
            self.port,
            &format!("/api/v1/query?query={}", encode(promql)),
        )
        .ok()?;
        if code != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }

    /// Waits (at most `timeout`) until every series `selector` picks holds at least `n`
    /// samples in the last `range` (`15s`): a rate over that range then reads that many
    /// scrapes, not the first two. False if it never does.
    pub fn wait_samples(&self, selector: &str, range: &str, n: usize, timeout: Duration) -> bool {
        let samples = format!("min(count_over_time({selector}[{range}]))");
        let deadline = Instant::now() + timeout;
        loop {
            if self.value(&samples).is_some_and(|c| c >= n as f64) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (at most `timeout`) until Prometheus has scraped the series `selector`
    /// picks `n` more times (its newest sample changed `n` times); false if it did not.
    /// A scrape between two looks counts once: it may wait for a few more.
    pub fn wait_scrapes(&self, selector: &str, n: usize, timeout: Duration) -> bool {
        let newest = format!("max(timestamp({selector}))");
        let deadline = Instant::now() + timeout;
        let mut last = self.value(&newest);
        let mut seen = 0;
        while seen < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
            let now = self.value(&newest);
            if now.is_some() && now != last {
                seen += 1;
                last = now;
            }
        }
        true
    }

    /// Waits (at most `timeout`) until `promql` gives a finite number; returns it.
    pub fn wait_value(&self, promql: &str, timeout: Duration) -> Option<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.value(promql).filter(|v| v.is_finite()) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` on `127.0.0.1:port` (HTTP/1.0): the status code and body.
fn get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        conn,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut text = String::new();
    conn.read_to_string(&mut text)?;
    let code = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .context("not an HTTP answer")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}
