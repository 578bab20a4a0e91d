//! A small blocking HTTP client for ternd's API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

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
        let mut tls = TlsConfig::builder();
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read the CA certificate {}", path.display()))?;
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                if let ureq::tls::PemItem::Certificate(c) =
                    item.map_err(|e| anyhow!("{}: {e}", path.display()))?
                {
                    certs.push(c);
                }
            }
            if certs.is_empty() {
                bail!("{}: no PEM certificate in it", path.display());
            }
            let certs: Vec<Certificate<'static>> = certs;
            tls = tls.root_certs(RootCerts::Specific(Arc::new(certs)));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .tls_config(tls.build())
            .build()
            .into();
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
        let mut resp = resp.map_err(|e| anyhow!("cannot reach ternd at {}: {e}", self.base))?;
        let status = resp.status().as_u16();
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
        Err(ApiFailure {
            status,
            code: field("code").unwrap_or_else(|| "error".to_string()),
            message: field("message").unwrap_or_else(|| {
                if text.trim().is_empty() {
                    format!("ternd answered HTTP {status}")
                } else {
                    text.trim().to_string()
                }
            }),
        }
        .into())
    }

    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let req = self
            .agent
            .get(self.url(path))
            .header("Authorization", self.auth()?);
        self.finish(req.call())
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        decode(&self.get_text(path)?)
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
        decode(&self.finish(req.send_json(body))?)
    }

    pub fn put<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> anyhow::Result<T> {
        let req = self
            .agent
            .put(self.url(path))
            .header("Authorization", self.auth()?);
        decode(&self.finish(req.send_json(body))?)
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
        decode(&self.finish(resp)?)
    }

    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let req = self
            .agent
            .delete(self.url(path))
            .header("Authorization", self.auth()?);
        decode(&self.finish(req.call())?)
    }
}

fn decode<T: DeserializeOwned>(text: &str) -> anyhow::Result<T> {
    serde_json::from_str(text)
        .map_err(|e| anyhow!("ternd's answer is not what ternctl expects: {e}"))
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
