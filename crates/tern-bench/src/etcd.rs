//! A real etcd cluster for the benchmarks: N members on free loopback ports, their data
//! under one directory, killed (by PID) on drop. `lockstep` runs one member, `scale`
//! three.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The etcd server binary: `$TERN_ETCD_BIN`, else `etcd` on PATH.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TERN_ETCD_BIN") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("etcd"))
        .find(|p| p.is_file())
}

pub struct Cluster {
    children: Vec<Child>,
    /// Each member's client address.
    pub clients: Vec<SocketAddr>,
    /// Each member's client URL (`http://ADDR`).
    pub urls: Vec<String>,
}

impl Cluster {
    /// Starts `n` members and waits until the cluster has a leader. `need` names the
    /// benchmark, for the error when no etcd is installed.
    pub fn start(dir: &Path, n: usize, need: &str) -> anyhow::Result<Self> {
        let bin = binary().with_context(|| {
            format!(
                "{need} needs an etcd server: install it (Debian: apt-get install etcd-server) or set TERN_ETCD_BIN"
            )
        })?;
        std::fs::create_dir_all(dir)?;
        // Every port held together while picking, so they differ.
        let held: Vec<TcpListener> = (0..2 * n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()?;
        let addrs: Vec<SocketAddr> = held
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<_>>()?;
        drop(held);
        let (clients, peers) = addrs.split_at(n);
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://{p}"))
            .collect();
        let mut cluster = Cluster {
            children: Vec::new(),
            clients: clients.to_vec(),
            urls: clients.iter().map(|c| format!("http://{c}")).collect(),
        };
        for (i, peer) in peers.iter().enumerate() {
            let url = &cluster.urls[i];
            let peer_url = format!("http://{peer}");
            let log = std::fs::File::create(dir.join(format!("etcd-{i}.log")))?;
            let child = Command::new(&bin)
                .arg("--name")
                .arg(format!("m{i}"))
                .arg("--data-dir")
                .arg(dir.join(format!("data-{i}")))
                .args(["--listen-client-urls", url, "--advertise-client-urls", url])
                .args([
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                ])
                .arg("--initial-cluster")
                .arg(initial.join(","))
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "tern-bench"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("cannot run {}", bin.display()))?;
            cluster.children.push(child);
        }
        // /health answers `"health":"true"` once the member sees a leader.
        let deadline = Instant::now() + Duration::from_secs(60);
        for i in 0..n {
            loop {
                if let Some(status) = cluster.children[i].try_wait()? {
                    let log = std::fs::read_to_string(dir.join(format!("etcd-{i}.log")))
                        .unwrap_or_default();
                    let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                    bail!("etcd member {i} exited ({status}) while starting:\n{tail}");
                }
                if let Ok((200, body)) =
                    crate::load::request(cluster.clients[i], "GET", "/health", None, b"")
                    && String::from_utf8_lossy(&body).contains("\"true\"")
                {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("etcd member {i} did not become healthy within 60 s");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(cluster)
    }

    /// The sum over `member`'s `/metrics` lines of `name` (all label sets).
    pub fn metric(&self, member: usize, name: &str) -> anyhow::Result<f64> {
        let (_, body) = crate::load::request(self.clients[member], "GET", "/metrics", None, b"")?;
        Ok(sum_metric(&String::from_utf8_lossy(&body), name))
    }

    /// How many keys start with `prefix` (etcd's JSON gateway, a count-only range).
    pub fn count(&self, prefix: &str) -> anyhow::Result<u64> {
        let mut end = prefix.as_bytes().to_vec();
        // The prefix's end: its last byte + 1 (the prefixes here end in '/').
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let body = serde_json::json!({
            "key": base64(prefix.as_bytes()),
            "range_end": base64(&end),
            "count_only": true,
        });
        let (status, resp) = crate::load::request(
            self.clients[0],
            "POST",
            "/v3/kv/range",
            None,
            body.to_string().as_bytes(),
        )?;
        if status != 200 {
            bail!(
                "etcd range count of {prefix:?}: {status} {}",
                String::from_utf8_lossy(&resp)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&resp)?;
        // int64 fields come as strings in etcd's JSON; absent when 0.
        Ok(v["count"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with(' ') || rest.starts_with('{')) {
                return None;
            }
            l.rsplit(' ').next()?.parse::<f64>().ok()
        })
        .sum()
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"/tern/kv/"), "L3Rlcm4va3Yv");
    }

    #[test]
    fn metrics_sum_over_labels_and_skip_longer_names() {
        let text =
            "# HELP x\nx_total{a=\"1\"} 2\nx_total{a=\"2\"} 3\nx_total_more 7\nx_total 1e1\n";
        assert_eq!(sum_metric(text, "x_total"), 15.0);
    }
}
