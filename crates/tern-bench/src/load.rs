//! A small HTTP/1.1 load generator over raw keep-alive TCP connections, the same for
//! ternd and for the baselines: closed loop (as fast as the server answers) or open
//! loop at a fixed total rate, where latency is measured from the instant a request was
//! due (wrk2-style, so a stalled server cannot hide its queueing delay).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::RwLock;

/// Where each connection takes its next request from; `None` ends that connection.
pub type Source = Arc<dyn Fn() -> Option<Arc<[u8]>> + Send + Sync>;

#[derive(Clone)]
pub struct Load {
    pub addr: SocketAddr,
    pub connections: usize,
    /// Stop sending after this long (the requests in flight complete).
    pub duration: Duration,
    /// Total requests per second over all connections; `None`: closed loop.
    pub rate: Option<f64>,
    pub source: Source,
    /// A check of each 2xx response's body; the answers that pass are counted, with
    /// the instant each arrived ([`Outcome::passed`], [`Outcome::passed_at`]).
    pub check: Option<fn(&[u8]) -> bool>,
    /// Each request is built (its source called) and answered while holding a read
    /// guard of this lock, so that whoever takes it to write knows that no request built
    /// before is still on its way: the bench changes what a host reports under it.
    pub gate: Option<Arc<RwLock<()>>>,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    pub ok: u64,
    /// Responses that were not 2xx.
    pub bad_status: u64,
    pub elapsed: Duration,
    /// Latency of every 2xx response, in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// 2xx responses whose body passed [`Load::check`] (0 without one).
    pub passed: u64,
    /// When each of those arrived, in no particular order.
    pub passed_at: Vec<Instant>,
}

impl Outcome {
    /// Adds another part's counts and latencies (a connection's, a thread's); the
    /// caller sorts the latencies and sets `elapsed` once every part is in.
    pub fn absorb(&mut self, part: Outcome) {
        self.ok += part.ok;
        self.bad_status += part.bad_status;
        self.latencies_us.extend(part.latencies_us);
        self.passed += part.passed;
        self.passed_at.extend(part.passed_at);
    }

    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency quantile in milliseconds (`q` in 0..=1).
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        f64::from(self.latencies_us[i]) / 1000.0
    }
}

/// Runs the load on a single-threaded runtime (one core for the generator; the server
/// under test gets the rest).
pub fn run(load: &Load) -> anyhow::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(load))
}

async fn run_async(load: &Load) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    let deadline = start + load.duration;
    let per_conn = load
        .rate
        .map(|r| Duration::from_secs_f64(load.connections as f64 / r.max(1e-3)));
    let mut tasks = Vec::new();
    for c in 0..load.connections {
        let addr = load.addr;
        let source = Arc::clone(&load.source);
        let (check, gate) = (load.check, load.gate.clone());
        // Spread the connections' schedules evenly over one interval.
        let first = per_conn.map_or(start, |iv| {
            start + iv.mul_f64(c as f64 / load.connections as f64)
        });
        tasks.push(tokio::spawn(connection(
            addr, source, check, gate, per_conn, first, deadline,
        )));
    }
    let mut out = Outcome::default();
    for t in tasks {
        out.absorb(t.await.context("a load connection panicked")??);
    }
    out.elapsed = start.elapsed();
    out.latencies_us.sort_unstable();
    Ok(out)
}

async fn connection(
    addr: SocketAddr,
    source: Source,
    check: Option<fn(&[u8]) -> bool>,
    gate: Option<Arc<RwLock<()>>>,
    interval: Option<Duration>,
    first: Instant,
    deadline: Instant,
) -> anyhow::Result<Outcome> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut out = Outcome::default();
    let mut due = first;
    loop {
        if Instant::now() >= deadline {
            break;
        }
        // Open loop: the request is built when it is due, not an interval before, so
        // that a source reading changing state (what a host runs) sends it as it is.
        let sent_at = match interval {
            Some(iv) => {
                tokio::time::sleep_until(due.into()).await;
                let t = due;
                due += iv;
                t
            }
            None => Instant::now(),
        };
        let _held = match &gate {
            Some(g) => Some(g.read().await),
            None => None,
        };
        let Some(req) = source() else { break };
        stream.write_all(&req).await?;
        let r = read_into(&mut stream, &mut buf).await?;
        if (200..300).contains(&r.status) {
            let now = Instant::now();
            out.ok += 1;
            let us = now.saturating_duration_since(sent_at).as_micros();
            out.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
            if let Some(check) = check
                && check(&buf[r.head_end..r.head_end + r.len])
            {
                out.passed += 1;
                out.passed_at.push(now);
            }
        } else {
            out.bad_status += 1;
        }
    }
    Ok(out)
}

/// A response [`read_into`] a buffer: the head is `buf[..head_end]`, the body
/// `buf[head_end..head_end + len]`.
pub(crate) struct Read {
    pub(crate) status: u16,
    pub(crate) head_end: usize,
    pub(crate) len: usize,
}

impl Read {
    /// The first header `name` (any case) of the head in `buf`.
    pub(crate) fn header(&self, buf: &[u8], name: &str) -> Option<String> {
        header_of(std::str::from_utf8(&buf[..self.head_end]).ok()?, name)
    }
}

fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Reads one keep-alive response with a `Content-Length` body into `buf` (cleared
/// first).
pub(crate) async fn read_into(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<Read> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).context("response head is not UTF-8")?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status code in the response")?;
    let len: usize = header_of(head, "content-length")
        .and_then(|v| v.parse().ok())
        .context("the response has no Content-Length")?;
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection mid-body");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Read {
        status,
        head_end,
        len,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A GET request with keep-alive.
pub fn get(path: &str) -> Arc<[u8]> {
    format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: application/json\r\n\r\n")
        .into_bytes()
        .into()
}

/// A POST of a JSON body with a bearer token.
pub fn post_json(path: &str, token: &str, body: &[u8]) -> Arc<[u8]> {
    let mut v = format!(
        "POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v.into()
}

/// One blocking request on a fresh connection (setup, not measured): status and body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> anyhow::Result<(u16, Vec<u8>)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: bench\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let head_end = find(&resp, b"\r\n\r\n").context("no response head")? + 4;
    let head = String::from_utf8_lossy(&resp[..head_end]).into_owned();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status code")?;
    let mut body = resp[head_end..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = find(b, b"\r\n") {
        let len = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if len == 0 {
            break;
        }
        let start = i + 2;
        let end = (start + len).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}
