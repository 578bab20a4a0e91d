//! The fleet's loopback gateway: serves the release artifacts under `/artifacts/` and
//! passes every other request to ternd unchanged, except one thing: it sets
//! `agent_update_jitter_seconds` to 0 in `find` answers.
//!
//! Why: ternd tells hosts to spread their updates over up to 60 s of random jitter (as
//! it should in production), and `tern-update update` (what the timer runs) honours
//! it. ternd has no setting to change it, so without this a demo step would wait up to
//! a minute of real time for nothing. `update --now` would skip the jitter but also
//! ignore the server's window, which is exactly what the scenarios check.
//!
//! A test may also make it answer 503 for chosen paths ([`Gateway::fail_path`]): a
//! channel's CDN or proxy in trouble, which ternd itself never simulates.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;

pub struct Gateway {
    pub url: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests served, for the curious.
    pub requests: Arc<AtomicU64>,
    failing: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Gateway {
    /// Listens on a free loopback port; artifacts come from `artifacts`, the rest goes to
    /// `upstream` (ternd's `host:port`, plain HTTP).
    pub fn start(artifacts: &Path, upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind the gateway")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop2, req2, art, failing2) = (
            stop.clone(),
            requests.clone(),
            artifacts.to_path_buf(),
            Arc::clone(&failing),
        );
        std::thread::Builder::new()
            .name("tern-e2e-gateway".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    req2.fetch_add(1, Ordering::Relaxed);
                    let art = art.clone();
                    let failing = Arc::clone(&failing2);
                    std::thread::spawn(move || {
                        let _ = handle(conn, &art, upstream, &failing);
                    });
                }
            })?;
        Ok(Self {
            url: format!("http://{addr}"),
            addr,
            stop,
            requests,
            failing,
        })
    }

    /// Requests for exactly `path` are answered `503 Service Unavailable` until
    /// [`Gateway::heal`].
    pub fn fail_path(&self, path: &str) {
        if let Ok(mut f) = self.failing.lock() {
            f.push(path.to_string());
        }
    }

    pub fn heal(&self) {
        if let Ok(mut f) = self.failing.lock() {
            f.clear();
        }
    }

    pub fn artifacts_url(&self) -> String {
        format!("{}/artifacts", self.url)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_head(r: &mut impl BufRead) -> std::io::Result<(String, Vec<(String, String)>)> {
    let mut first = String::new();
    r.read_line(&mut first)?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok((first.trim_end().to_string(), headers))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn read_request(conn: &TcpStream) -> std::io::Result<Request> {
    let mut r = BufReader::new(conn);
    let (line, headers) = read_head(&mut r)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let len: usize = header(&headers, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Request {
        method,
        target,
        headers,
        body,
    })
}

fn respond(
    conn: &mut TcpStream,
    status: &str,
    headers: &[(String, String)],
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    conn.write_all(out.as_bytes())?;
    if !head_only {
        conn.write_all(body)?;
    }
    conn.flush()?;
    let _ = conn.shutdown(Shutdown::Write);
    Ok(())
}

fn handle(
    mut conn: TcpStream,
    artifacts: &Path,
    upstream: SocketAddr,
    failing: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req = read_request(&conn)?;
    let head_only = req.method == "HEAD";
    let (path, _query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    if failing.lock().is_ok_and(|f| f.iter().any(|p| p == path)) {
        return respond(
            &mut conn,
            "503 Service Unavailable",
            &[("Content-Type".into(), "text/plain".into())],
            b"unavailable\n",
            head_only,
        );
    }
    if let Some(name) = path.strip_prefix("/artifacts/") {
        let file: PathBuf = artifacts.join(name);
        // Subdirectories are served (the signed release metadata is at `tuf/metadata/`);
        // no segment may be empty or start with a dot, so nothing leaves the directory.
        let ok_name = !name.is_empty()
            && name
                .split('/')
                .all(|seg| !seg.is_empty() && !seg.starts_with('.'));
        return match std::fs::read(&file) {
            Ok(data) if ok_name => respond(
                &mut conn,
                "200 OK",
                &[("Content-Type".into(), "application/octet-stream".into())],
                &data,
                head_only,
            ),
            _ => respond(&mut conn, "404 Not Found", &[], b"not found\n", head_only),
        };
    }
    match forward(&req, upstream) {
        Ok((status, headers, mut body)) => {
            if path == "/v1/webapi/find" && status.starts_with("200") {
                body = without_jitter(&body);
            }
            respond(&mut conn, &status, &headers, &body, head_only)
        }
        Err(e) => respond(
            &mut conn,
            "502 Bad Gateway",
            &[("Content-Type".into(), "text/plain".into())],
            format!("ternd unreachable: {e}\n").as_bytes(),
            head_only,
        ),
    }
}

fn without_jitter(body: &[u8]) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    if let Some(au) = v.get_mut("auto_update").and_then(|a| a.as_object_mut()) {
        au.insert("agent_update_jitter_seconds".into(), 0.into());
    }
    serde_json::to_vec(&v).unwrap_or_else(|_| body.to_vec())
}

/// An upstream answer: the status line's tail, the end-to-end headers, the body.
type Answer = (String, Vec<(String, String)>, Vec<u8>);

/// Sends `req` to ternd (HTTP/1.1, one request per connection); returns its answer
/// with the body de-chunked.
fn forward(req: &Request, upstream: SocketAddr) -> std::io::Result<Answer> {
    let mut up = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    up.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: {upstream}\r\n",
        req.method, req.target
    );
    for (k, v) in &req.headers {
        let skip = ["host", "connection", "keep-alive", "content-length"]
            .iter()
            .any(|h| k.eq_ignore_ascii_case(h));
        if !skip {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        req.body.len()
    ));
    up.write_all(out.as_bytes())?;
    up.write_all(&req.body)?;
    up.flush()?;
    let mut r = BufReader::new(up);
    let (status_line, headers) = read_head(&mut r)?;
    let status = status_line
        .split_once(' ')
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| "502 Bad Gateway".into());
    let chunked = header(&headers, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length: Option<usize> = header(&headers, "content-length").and_then(|v| v.parse().ok());
    let mut body = Vec::new();
    if req.method == "HEAD" {
        // No body follows a HEAD answer.
    } else if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = String::new();
            r.read_line(&mut crlf)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    let hop: HashMap<&str, ()> = [
        ("connection", ()),
        ("keep-alive", ()),
        ("transfer-encoding", ()),
        ("content-length", ()),
    ]
    .into_iter()
    .collect();
    let headers = headers
        .into_iter()
        .filter(|(k, _)| !hop.contains_key(k.to_ascii_lowercase().as_str()))
        .collect();
    Ok((status, headers, body))
}
