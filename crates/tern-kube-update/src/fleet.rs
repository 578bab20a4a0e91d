//! ternd as the controller talks to it: each workload heartbeats like a host and asks
//! find (or its channel and the group's schedule), through tern-client's `Client`, the
//! one client of ternd's wire protocol. Blocking: the caller runs it off the async
//! runtime. Every answer is untrusted; tern-client bounds it, and its errors name the
//! URL and ternd's reason made harmless to print.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_client::{Client, Connect, Roots};
use tern_core::host_update::{CriticalAnswer, VersionAnswer};
use tern_core::wire::{AgentSchedule, FindResponse, Heartbeat};

/// Why a request to ternd failed: tern-client's error (the URL, the status, ternd's
/// reason), kept as the controller's own type so that the [`Fleet`] seam does not
/// change with the client behind it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct FleetError(#[from] tern_client::Error);

impl FleetError {
    /// tern-client's error, for callers that branch on its status or ternd's code.
    pub fn client_error(&self) -> &tern_client::Error {
        &self.0
    }
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
    client: Client,
}

/// The certificates of a PEM bundle, to trust instead of the public web PKI (a ternd
/// behind a private CA): loaded by tern-client, as every Tern program loads them.
pub fn roots_from_pem(path: &Path) -> Result<Roots, String> {
    tern_client::roots_from_pem(path).map_err(|e| e.to_string())
}

impl Ternd {
    /// `roots`: the certificates to trust for ternd and channels ([`roots_from_pem`]);
    /// `None`: the public web PKI.
    pub fn new(server: &str, token: Option<String>, roots: Option<Roots>) -> Self {
        Self {
            server: server.trim_end_matches('/').to_string(),
            token,
            client: Client::new(&connect(roots)),
        }
    }
}

/// How the controller connects to Tern's own endpoints (ternd, channels, signed
/// metadata): 30 s per request, TLS on ring, trusting `roots` (`None`: the public web
/// PKI); plain http where the operator's URL says so (a ternd run with
/// `--insecure-http`).
pub(crate) fn connect(roots: Option<Roots>) -> Connect {
    // ring, named here: the workspace's build enables rustls' aws-lc-rs as well.
    Connect::new(
        Arc::new(rustls::crypto::ring::default_provider()),
        Duration::from_secs(30),
    )
    .plain_http(true)
    .roots(roots)
}

impl Fleet for Ternd {
    fn heartbeat(&self, hb: &Heartbeat) -> Result<(), FleetError> {
        // ternd's answer to a workload's heartbeat carries nothing the controller acts
        // on (its instructions are for hosts).
        self.client
            .heartbeat(&self.server, hb, self.token.as_deref())
            .map(drop)
            .map_err(FleetError)
    }

    fn find(&self, group: &str, updater_id: &str) -> Result<FindResponse, FleetError> {
        Ok(self
            .client
            .find_without_facts(&self.server, group, updater_id)?)
    }

    fn channel(&self, url: &str) -> (VersionAnswer, CriticalAnswer) {
        let version = match self.client.channel_value(url, "version") {
            Ok(body) => VersionAnswer::from_body(&body),
            Err(e) => VersionAnswer::Unreachable(e),
        };
        let critical = match self.client.channel_value(url, "critical") {
            Ok(body) => CriticalAnswer::from_body(&body),
            Err(e) => CriticalAnswer::Unreachable(e),
        };
        (version, critical)
    }

    fn schedule(&self, group: &str) -> Result<AgentSchedule, FleetError> {
        Ok(self.client.schedule(&self.server, group)?)
    }
}
