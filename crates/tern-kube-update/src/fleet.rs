//! ternd as the controller talks to it: each workload heartbeats like a host and asks
//! find, over HTTP (blocking `ureq`, run off the async runtime by the caller). Every
//! answer is untrusted: bodies are read up to a bound and parsed into the wire types,
//! errors name the URL and ternd's reason made harmless to print.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_core::host_update::{CriticalAnswer, VersionAnswer};
use tern_core::wire::{AgentSchedule, FindResponse, Heartbeat};

/// A find answer or a schedule is small; a channel's answers are one word.
const FIND_LIMIT: u64 = 64 * 1024;
const CHANNEL_LIMIT: u64 = 1024;
const ERROR_LIMIT: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{url}: {reason}")]
    Request { url: String, reason: String },
    #[error("{url}: ternd answered {status}: {reason}")]
    Refused {
        url: String,
        status: u16,
        reason: String,
    },
    #[error("{url}: the answer is not what was asked for: {reason}")]
    BadAnswer { url: String, reason: String },
}

/// The fleet's control plane, as the controller needs it.
pub trait Fleet: Send + Sync {
    fn heartbeat(&self, hb: &Heartbeat) -> Result<(), FleetError>;
    fn find(&self, group: &str, updater_id: &str) -> Result<FindResponse, FleetError>;
    /// A channel's `version` and `critical` (seed 001: an unreachable `critical` is
    /// not critical; an unreachable `version` is no target).
    fn channel(&self, url: &str) -> (VersionAnswer, CriticalAnswer);
    /// The group's maintenance schedule from ternd (`None`: none usable; the window
    /// then stays closed).
    fn schedule(&self, group: &str) -> Result<AgentSchedule, FleetError>;
}

/// ternd at `server` (`https://…`, or `http://` where it listens in plain HTTP), with
/// the agent token heartbeats carry.
pub struct Ternd {
    server: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// The certificates of a PEM bundle, to trust instead of the public web PKI (a ternd
/// behind a private CA): loaded by tern-client, as every Tern program loads them.
pub fn roots_from_pem(path: &Path) -> Result<ureq::tls::RootCerts, String> {
    tern_client::roots_from_pem(path).map_err(|e| e.to_string())
}

impl Ternd {
    /// `roots`: the certificates to trust for ternd and channels ([`roots_from_pem`]);
    /// `None`: the public web PKI.
    pub fn new(server: &str, token: Option<String>, roots: Option<ureq::tls::RootCerts>) -> Self {
        Self {
            server: server.trim_end_matches('/').to_string(),
            token,
            agent: http_agent(roots),
        }
    }
}

/// The HTTP client for Tern's own endpoints (ternd, channels, signed metadata): 30 s
/// per request, TLS on ring, trusting `roots` (`None`: the public web PKI); plain http
/// where the operator's URL says so (a ternd run with `--insecure-http`).
pub(crate) fn http_agent(roots: Option<ureq::tls::RootCerts>) -> ureq::Agent {
    // ring, named here: the workspace's build enables rustls' aws-lc-rs as well.
    tern_client::Connect::new(
        Arc::new(rustls::crypto::ring::default_provider()),
        Duration::from_secs(30),
    )
    .plain_http(true)
    .roots(roots)
    .agent()
}

fn harmless(s: &str) -> String {
    tern_core::text::excerpt(s, 200)
}

fn reason_of(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    let body = resp
        .body_mut()
        .with_config()
        .limit(ERROR_LIMIT)
        .read_to_string()
        .unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            // ternd's `{"error": {"code", "message"}}`; a bare `{"message"}` elsewhere.
            let m = v["error"]["message"].as_str().or(v["message"].as_str());
            m.map(str::to_string)
        })
        .unwrap_or(body);
    harmless(&message)
}

/// The answer when the request went through and ternd said yes; the error naming
/// `url` otherwise.
fn answered(
    url: &str,
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<ureq::http::Response<ureq::Body>, FleetError> {
    let mut resp = sent.map_err(|e| FleetError::Request {
        url: url.to_string(),
        reason: harmless(&e.to_string()),
    })?;
    if !resp.status().is_success() {
        return Err(FleetError::Refused {
            status: resp.status().as_u16(),
            reason: reason_of(&mut resp),
            url: url.to_string(),
        });
    }
    Ok(resp)
}

impl Fleet for Ternd {
    fn heartbeat(&self, hb: &Heartbeat) -> Result<(), FleetError> {
        let url = format!("{}/v1/agents/heartbeat", self.server);
        let mut req = self.agent.post(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        answered(&url, req.send_json(hb)).map(drop)
    }

    fn find(&self, group: &str, updater_id: &str) -> Result<FindResponse, FleetError> {
        let url = format!("{}/v1/webapi/find", self.server);
        let sent = self
            .agent
            .get(&url)
            .query("group", group)
            .query("updater_id", updater_id)
            .call();
        answered(&url, sent)?
            .body_mut()
            .with_config()
            .limit(FIND_LIMIT)
            .read_json::<FindResponse>()
            .map_err(|e| FleetError::BadAnswer {
                url,
                reason: harmless(&e.to_string()),
            })
    }

    fn channel(&self, url: &str) -> (VersionAnswer, CriticalAnswer) {
        let base = url.trim_end_matches('/');
        let get = |what: &str| -> Result<String, String> {
            let url = format!("{base}/{what}");
            let mut resp =
                answered(&url, self.agent.get(&url).call()).map_err(|e| e.to_string())?;
            resp.body_mut()
                .with_config()
                .limit(CHANNEL_LIMIT)
                .read_to_string()
                .map_err(|e| harmless(&format!("{url}: {e}")))
        };
        let version = match get("version") {
            Ok(body) => VersionAnswer::from_body(&body),
            Err(e) => VersionAnswer::Unreachable(e),
        };
        let critical = match get("critical") {
            Ok(body) => CriticalAnswer::from_body(&body),
            Err(e) => CriticalAnswer::Unreachable(e),
        };
        (version, critical)
    }

    fn schedule(&self, group: &str) -> Result<AgentSchedule, FleetError> {
        let url = format!("{}/v1/agents/schedule", self.server);
        let sent = self.agent.get(&url).query("group", group).call();
        answered(&url, sent)?
            .body_mut()
            .with_config()
            .limit(FIND_LIMIT)
            .read_json::<AgentSchedule>()
            .map_err(|e| FleetError::BadAnswer {
                url,
                reason: harmless(&e.to_string()),
            })
    }
}
