//! A small blocking HTTP client for ternd's API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where ternd is and how to authenticate.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

/// A failed API call: the HTTP status and ternd's error body.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (HTTP {} {})", self.message, self.status, self.code)
    }
}

impl std::error::Error for ApiFailure {}

pub fn read_token(token_file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(path) = token_file {
        let t = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?;
        let t = t.trim().to_string();
        if t.is_empty() {
            bail!("the token file {} is empty", path.display());
        }
        return Ok(Some(t));
    }
    Ok(std::env::var("TERN_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

impl Client {
    pub fn new(
        server: &str,
        token: Option<String>,
        ca_cert: Option<&PathBuf>,
    ) -> anyhow::Result<Self> {
        let base = server.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!(
                "--server {server:?} must start with https:// (or http:// for a ternd run with --insecure-http)"
            );
        }
        let roots = ca_cert
            .map(|path| tern_client::roots_from_pem(path))
            .transpose()?;
        let agent = tern_client::Connect::new(
            Arc::new(rustls::crypto::ring::default_provider()),
            Duration::from_secs(60),
        )
        .plain_http(true)
        .roots(roots)
        .agent();
        Ok(Self { agent, base, token })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth(&self) -> anyhow::Result<String> {
        match &self.token {
            Some(t) => Ok(format!("Bearer {t}")),
            None => bail!(
                "no token: give --token-file FILE or set TERN_TOKEN (the first start of ternd writes DATA_DIR/operator.token)"
            ),
        }
    }

    fn finish(
        &self,
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<String> {
        let mut resp = resp.map_err(|e| unreachable(&self.base, &e))?;
        let status = resp.status().as_u16();
        // What ternd tells the writer of a resource without failing the write (a group
        // that updates all at once): `Warning: 299 - "TEXT"`, one header each.
        for w in resp.headers().get_all("warning") {
            let text = w.to_str().unwrap_or_default();
            let text = text
                .strip_prefix("299 - \"")
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            eprintln!("warning: {text}");
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| anyhow!("reading ternd's answer: {e}"))?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let parsed: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let field = |k: &str| {
            parsed
                .as_ref()
                .and_then(|v| v["error"][k].as_str())
                .map(str::to_string)
        };
        match (field("code"), field("message")) {
            (Some(code), Some(message)) => Err(ApiFailure {
                status,
                code,
                message,
            }
            .into()),
            // Every ternd error is `{"error": {"code", "message"}}`: this answer came
            // from something else (another web server, or a proxy in front of ternd).
            _ => bail!(
                "{} answered HTTP {status}{}, not as ternd answers: is {} a ternd server?",
                self.base,
                snippet(&text),
                self.base
            ),
        }
    }

    /// Reads a successful answer as `T`.
    fn decode<T: DeserializeOwned>(&self, text: &str) -> anyhow::Result<T> {
        if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
            bail!(
                "{} answered{}, not JSON: is {} a ternd server?",
                self.base,
                snippet(text),
                self.base
            );
        }
        serde_json::from_str(text).map_err(|e| {
            anyhow!(
                "ternd's answer is not what ternctl expects: {e} (is ternctl as recent as ternd?)"
            )
        })
    }

    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let req = self
            .agent
            .get(self.url(path))
            .header("Authorization", self.auth()?);
        self.finish(req.call())
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.decode(&self.get_text(path)?)
    }

    pub fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> anyhow::Result<T> {
        let req = self
            .agent
            .post(self.url(path))
            .header("Authorization", self.auth()?);
        self.decode(&self.finish(req.send_json(body))?)
    }

    pub fn put<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> anyhow::Result<T> {
        let req = self
            .agent
            .put(self.url(path))
            .header("Authorization", self.auth()?);
        self.decode(&self.finish(req.send_json(body))?)
    }

    /// Sends a resource as YAML/JSON text.
    pub fn send_text<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        text: &str,
    ) -> anyhow::Result<T> {
        let auth = self.auth()?;
        let resp = match method {
            "PUT" => self
                .agent
                .put(self.url(path))
                .header("Authorization", auth)
                .header("Content-Type", "application/yaml")
                .send(text),
            _ => self
                .agent
                .post(self.url(path))
                .header("Authorization", auth)
                .header("Content-Type", "application/yaml")
                .send(text),
        };
        self.decode(&self.finish(resp)?)
    }

    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let req = self
            .agent
            .delete(self.url(path))
            .header("Authorization", self.auth()?);
        self.decode(&self.finish(req.call())?)
    }
}

/// The start of a body for an error message: ` "<html>…"`, or nothing when empty.
fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return String::new();
    }
    let mut cut: String = one_line.chars().take(80).collect();
    if cut.len() < one_line.len() {
        cut.push('…');
    }
    format!(" {cut:?}")
}

/// `host:port` of a `http(s)://host[:port]…` URL, with the scheme's default port.
fn authority(base: &str) -> String {
    let (rest, port) = match base.strip_prefix("https://") {
        Some(rest) => (rest, 443),
        None => (base.strip_prefix("http://").unwrap_or(base), 80),
    };
    let host_port = rest.split('/').next().unwrap_or(rest);
    // A port follows the last ':' unless that ':' is inside an IPv6 literal.
    let has_port = host_port
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if has_port {
        host_port.to_string()
    } else {
        format!("{host_port}:{port}")
    }
}

/// What a server at `addr` speaks, asked with a plain HTTP request: TLS servers answer
/// with a TLS alert record (content type 0x15 or 0x16, version 3.x), HTTP servers with
/// `HTTP/`. `None` when it cannot be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Speaks {
    Tls,
    Http,
}

fn probe(addr: &str) -> Option<Speaks> {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpStream, ToSocketAddrs};

    let timeout = Duration::from_secs(3);
    let sock = addr.to_socket_addrs().ok()?.next()?;
    let mut conn = TcpStream::connect_timeout(&sock, timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut head = [0u8; 5];
    conn.read_exact(&mut head).ok()?;
    if matches!(head[0], 0x15 | 0x16) && head[1] == 0x03 {
        Some(Speaks::Tls)
    } else if head.starts_with(b"HTTP/") {
        Some(Speaks::Http)
    } else {
        None
    }
}

/// Why ternd at `base` could not be reached, with what to try.
fn unreachable(base: &str, err: &ureq::Error) -> anyhow::Error {
    let addr = authority(base);
    let https = base.starts_with("https://");
    let text = err.to_string();
    let hint = match err {
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => format!(
            "connection refused by {addr}: is ternd running and listening there? Check --server (or TERN_SERVER)"
        ),
        ureq::Error::HostNotFound => {
            format!("cannot resolve the host of {addr}: check --server (or TERN_SERVER)")
        }
        _ if text.contains("failed to lookup address") => {
            format!("cannot resolve the host of {addr}: check --server (or TERN_SERVER)")
        }
        ureq::Error::Timeout(_) => format!(
            "no answer from {addr} in time: check --server (or TERN_SERVER) and that no firewall drops the traffic"
        ),
        // ureq reports rustls' certificate errors as I/O errors; their text is all
        // there is to tell them apart without depending on rustls itself.
        _ if text.contains("not valid for name") => format!(
            "{text}: ternd's TLS certificate does not name the host in --server; use a name the certificate holds"
        ),
        _ if text.contains("CaUsedAsEndEntity") => format!(
            "{text}: ternd's own TLS certificate is a CA certificate (basicConstraints CA:TRUE, what a bare `openssl req -x509` makes), and TLS refuses a CA as a server's certificate; make a CA, then a server certificate it signs (CA:FALSE, serverAuth, the server's names), start ternd with that and give the CA with --ca-cert FILE (docs/quickstart.md, 2.2)"
        ),
        _ if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") => {
            format!(
                "{text}: ternd's TLS certificate is not trusted; if a private CA signed it, give that CA with --ca-cert FILE (or TERN_CA_CERT=FILE)"
            )
        }
        _ => match (https, probe(&addr)) {
            (false, Some(Speaks::Tls)) => {
                format!("{text}: the server speaks TLS: use https://{addr}")
            }
            (true, Some(Speaks::Http)) => format!(
                "{text}: the server speaks plain HTTP: use http://{addr} (ternd runs with --insecure-http)"
            ),
            _ => text,
        },
    };
    anyhow!("cannot reach ternd at {base}: {hint}")
}

/// Percent-encodes a path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_adds_the_default_port() {
        assert_eq!(authority("https://tern.example"), "tern.example:443");
        assert_eq!(authority("http://tern.example/x"), "tern.example:80");
        assert_eq!(authority("https://tern.example:3025"), "tern.example:3025");
        assert_eq!(authority("https://[::1]:3025"), "[::1]:3025");
        assert_eq!(authority("https://[::1]"), "[::1]:443");
    }
}
