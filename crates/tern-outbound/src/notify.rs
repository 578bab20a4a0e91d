//! Alert notices, delivered to the configured receivers: generic JSON webhooks
//! (`--notify-webhook`) and Slack-compatible incoming webhooks (`--notify-slack`).
//!
//! One job: deliver. Which alerts are active is decided elsewhere (the rollout's status);
//! [`diff_alerts`] turns two lists of active alerts into `raised`/`cleared` notices and
//! [`Notifiers::send`] hands them over.
//!
//! - [`Notifiers::send`] is plain (not async) and never blocks: each receiver has a
//!   bounded queue, filled with `try_send`; when it is full the notice is dropped,
//!   counted (`tern_notify_dropped_total`) and logged.
//! - One background task per receiver delivers its queue in order, each request with a
//!   timeout, retrying network errors, 5xx, 408 and 429 with exponential backoff
//!   (1s, 2s, 4s … at most 60s, 10 attempts). ureq is blocking, so each request runs
//!   in `spawn_blocking`; a hanging receiver holds one blocking thread for at most the
//!   timeout and fills only its own queue.
//! - **Only the leader notifies.** Every replica has the same receivers, but only the
//!   caller holding the leader lease (the reconciler, right after it wrote the rollout)
//!   may call [`Notifiers::send`]; this module does not check.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::metrics_text;

/// An active alert, as the rollout's status keeps it.
pub use tern_core::resource::Alert as AlertView;

/// Whether a notice announces an alert or its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeEvent {
    Raised,
    Cleared,
}

impl NoticeEvent {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NoticeEvent::Raised => "raised",
            NoticeEvent::Cleared => "cleared",
        }
    }
}

/// The rollout an alert belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RolloutVersions {
    pub start_version: String,
    pub target_version: String,
    /// The product rolled out, when it is not the agent (ternd serves several).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
}

/// What a receiver is told: the JSON body of the generic webhook (see `docs/alerts.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub event: NoticeEvent,
    pub alert: AlertView,
    /// `null` when there is no rollout.
    pub rollout: Option<RolloutVersions>,
    /// Which ternd installation speaks (`--notify-server-name`, default the host name).
    pub server: String,
    /// When the change was seen.
    pub at: Timestamp,
    /// The program that speaks, in the Slack line (`ternd`, `tern-lockstep`); not in the
    /// webhook body, whose `server` names the installation.
    #[serde(skip)]
    pub program: &'static str,
}

impl Notice {
    /// The one line a Slack-compatible receiver shows, e.g.
    /// `:rotating_light: ternd prod-cp: group staging: 1 of 1 canaries failed (raised; rollout 1.0.0 → 1.1.0)`.
    pub(crate) fn slack_text(&self) -> String {
        let icon = match self.event {
            NoticeEvent::Raised => ":rotating_light:",
            NoticeEvent::Cleared => ":white_check_mark:",
        };
        let mut line = format!("{icon} {} {}: ", self.program, self.server);
        if let Some(g) = &self.alert.group {
            let _ = write!(line, "group {g}: ");
        }
        line.push_str(&self.alert.message);
        let _ = write!(line, " ({}", self.event.as_str());
        if let Some(r) = &self.rollout {
            let of = r
                .product
                .as_deref()
                .map(|p| format!(" of {p}"))
                .unwrap_or_default();
            let _ = write!(
                line,
                "; rollout{of} {} → {}",
                r.start_version, r.target_version
            );
        }
        line.push(')');
        slack_escape(&line)
    }
}

/// Slack's three control characters in message text.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The notices between two lists of active alerts, keyed by (kind, group): `cleared`
/// for each alert of `before` no longer in `after` (first, in `before`'s order), then
/// `raised` for each alert of `after` not in `before`. An alert whose `since` changed
/// was cleared and raised again (both are sent); one whose message alone changed (a
/// count going up) sends nothing. A key repeated in one list counts once (its first).
pub fn diff_alerts(
    before: &[AlertView],
    after: &[AlertView],
    rollout: Option<&RolloutVersions>,
    server: &str,
    at: Timestamp,
) -> Vec<Notice> {
    let key = |a: &AlertView| (a.kind.clone(), a.group.clone());
    let first = |list: &[AlertView]| {
        let mut seen = std::collections::HashMap::new();
        for a in list {
            seen.entry(key(a)).or_insert_with(|| a.clone());
        }
        seen
    };
    let (old, new) = (first(before), first(after));
    let notice = |event, alert: &AlertView| Notice {
        event,
        alert: alert.clone(),
        rollout: rollout.cloned(),
        server: server.to_string(),
        at,
        program: "ternd",
    };
    let mut out = Vec::new();
    let mut done = std::collections::HashSet::new();
    for a in before {
        let k = key(a);
        if !done.insert(k.clone()) {
            continue;
        }
        if new.get(&k).is_none_or(|n| n.since != a.since) {
            out.push(notice(NoticeEvent::Cleared, a));
        }
    }
    done.clear();
    for a in after {
        let k = key(a);
        if !done.insert(k.clone()) {
            continue;
        }
        if old.get(&k).is_none_or(|o| o.since != a.since) {
            out.push(notice(NoticeEvent::Raised, a));
        }
    }
    out
}

/// A `--notify-webhook` or `--notify-slack` value that is not an http(s) URL; the
/// message names the problem (clap adds the flag).
pub fn parse_notify_url(s: &str) -> Result<String, String> {
    let Some((scheme, _)) = s.split_once("://") else {
        return Err(format!(
            "{s:?} is not an absolute URL: give http:// or https:// with a host, e.g. https://alerts.example.com/hook"
        ));
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err(format!(
            "{s:?} has the scheme {scheme:?}: only http:// and https:// URLs are supported"
        ));
    }
    let uri: ureq::http::Uri = s.parse().map_err(|e| {
        format!("{s:?} is not a URL ({e}); give e.g. https://alerts.example.com/hook")
    })?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{s:?} has no host"));
    }
    Ok(s.to_string())
}

/// Why the notification flags were refused at startup.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    #[error("{flag} {url:?}: {why}")]
    BadUrl {
        flag: &'static str,
        url: String,
        why: String,
    },
    /// The I/O error is in the message (not a `source`), so that it is shown once.
    #[error("--notify-token-file {}: cannot read it: {error}", path.display())]
    TokenFile {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("--notify-token-file {}: the file is empty", path.display())]
    EmptyToken { path: PathBuf },
    #[error(
        "--notify-token-file is the bearer token of --notify-webhook receivers: give --notify-webhook URL too"
    )]
    TokenWithoutWebhook,
}

/// Where a receiver sends, and how.
#[derive(Clone)]
enum Target {
    /// The [`Notice`] as JSON, with an optional bearer token.
    Webhook { token: Option<String> },
    /// `{"text": "<one line>"}`.
    Slack,
}

#[derive(Clone)]
struct ReceiverConfig {
    /// `webhook-1`, `slack-1`, …: the `receiver` label of the metrics.
    name: String,
    url: String,
    target: Target,
}

impl ReceiverConfig {
    /// The URL's host, for logs (a Slack URL's path is a secret, never logged).
    fn host(&self) -> String {
        self.url
            .parse::<ureq::http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .unwrap_or_default()
    }

    fn body(&self, notice: &Notice) -> Result<Vec<u8>, serde_json::Error> {
        match self.target {
            Target::Webhook { .. } => serde_json::to_vec(notice),
            Target::Slack => {
                serde_json::to_vec(&serde_json::json!({ "text": notice.slack_text() }))
            }
        }
    }

    fn token(&self) -> Option<&str> {
        match &self.target {
            Target::Webhook { token } => token.as_deref(),
            Target::Slack => None,
        }
    }
}

/// The receivers of this ternd, validated (`ternd start --notify-…`). Its `Debug` shows
/// receiver names and hosts only: URLs and tokens may be secrets.
#[derive(Clone, Default)]
pub struct NotifySettings {
    receivers: Vec<ReceiverConfig>,
    server: String,
}

impl fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let receivers: Vec<String> = self
            .receivers
            .iter()
            .map(|r| format!("{} ({})", r.name, r.host()))
            .collect();
        f.debug_struct("NotifySettings")
            .field("receivers", &receivers)
            .field("server", &self.server)
            .finish()
    }
}

impl NotifySettings {
    /// From the flags: checks every URL and reads the token file (trimmed, not empty).
    /// `server_name` defaults to the host name.
    pub fn from_flags(
        webhooks: &[String],
        slack: &[String],
        token_file: Option<&Path>,
        server_name: Option<String>,
    ) -> Result<Self, NotifyConfigError> {
        let check = |flag: &'static str, url: &String| {
            parse_notify_url(url).map_err(|why| NotifyConfigError::BadUrl {
                flag,
                url: url.clone(),
                why,
            })
        };
        let token = match token_file {
            None => None,
            Some(_) if webhooks.is_empty() => return Err(NotifyConfigError::TokenWithoutWebhook),
            Some(path) => Some(read_token(path)?),
        };
        let mut receivers = Vec::new();
        for (i, url) in webhooks.iter().enumerate() {
            receivers.push(ReceiverConfig {
                name: format!("webhook-{}", i + 1),
                url: check("--notify-webhook", url)?,
                target: Target::Webhook {
                    token: token.clone(),
                },
            });
        }
        for (i, url) in slack.iter().enumerate() {
            receivers.push(ReceiverConfig {
                name: format!("slack-{}", i + 1),
                url: check("--notify-slack", url)?,
                target: Target::Slack,
            });
        }
        Ok(Self {
            receivers,
            server: server_name
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(host_name),
        })
    }

    /// True when no receiver is configured.
    pub fn is_empty(&self) -> bool {
        self.receivers.is_empty()
    }
}

fn read_token(path: &Path) -> Result<String, NotifyConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| NotifyConfigError::TokenFile {
        path: path.to_path_buf(),
        error,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(NotifyConfigError::EmptyToken {
            path: path.to_path_buf(),
        });
    }
    Ok(token.to_string())
}

/// This machine's host name (Linux), or `ternd`.
fn host_name() -> String {
    tern_cli::host_name("ternd")
}

/// How deliveries are paced; tests shorten it.
#[derive(Clone, Debug)]
pub(crate) struct DeliveryConfig {
    /// Notices waiting per receiver; beyond, new ones are dropped.
    pub(crate) queue: usize,
    /// Attempts per notice, the first included.
    pub(crate) attempts: u32,
    /// Wait after the first failed attempt; doubled after each, up to `max_backoff`.
    pub(crate) first_backoff: Duration,
    pub(crate) max_backoff: Duration,
    /// Whole request (connect, send, answer), per attempt.
    pub(crate) timeout: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            queue: 256,
            attempts: 10,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

impl DeliveryConfig {
    /// The wait after failed attempt number `attempt` (1-based).
    fn backoff(&self, attempt: u32) -> Duration {
        tern_core::backoff::Backoff::new(self.first_backoff, self.max_backoff).after(attempt)
    }
}

/// One receiver's counters.
#[derive(Debug, Default)]
struct Stats {
    sent: AtomicU64,
    /// Given up (attempts exhausted, or refused with a status retrying cannot change).
    failed: AtomicU64,
    /// Attempts that failed and were retried.
    retries: AtomicU64,
    /// Not queued: the queue was full (or the delivery task gone).
    dropped: AtomicU64,
}

struct Handle {
    name: String,
    host: String,
    tx: mpsc::Sender<Arc<Notice>>,
    stats: Arc<Stats>,
}

/// The running receivers of this replica. Empty (and then `send` does nothing) without
/// `--notify-…` flags.
pub struct Notifiers {
    server: String,
    receivers: Vec<Handle>,
}

impl Notifiers {
    /// No receivers.
    pub const fn none() -> Self {
        Self {
            server: String::new(),
            receivers: Vec::new(),
        }
    }

    /// Starts one delivery task per receiver (call inside the tokio runtime).
    pub fn start(settings: &NotifySettings) -> Self {
        Self::start_with(settings, DeliveryConfig::default())
    }

    pub(crate) fn start_with(settings: &NotifySettings, config: DeliveryConfig) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(config.timeout))
            .user_agent(concat!("ternd/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let receivers = settings
            .receivers
            .iter()
            .map(|r| {
                let (tx, rx) = mpsc::channel(config.queue.max(1));
                let stats = Arc::new(Stats::default());
                tokio::spawn(deliver(
                    Arc::new(r.clone()),
                    rx,
                    Arc::clone(&stats),
                    config.clone(),
                    agent.clone(),
                ));
                tracing::info!(receiver = %r.name, host = %r.host(), "alert notices go to this receiver");
                Handle {
                    name: r.name.clone(),
                    host: r.host(),
                    tx,
                    stats,
                }
            })
            .collect();
        Self {
            server: settings.server.clone(),
            receivers,
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.receivers.is_empty()
    }

    /// The name notices from this installation carry (`--notify-server-name`).
    pub fn server_name(&self) -> &str {
        &self.server
    }

    /// Queues `notice` for every receiver and returns at once; a receiver whose queue
    /// is full drops it (counted, logged). Only the leader may call this.
    pub fn send(&self, notice: Notice) {
        if self.receivers.is_empty() {
            return;
        }
        let notice = Arc::new(notice);
        for r in &self.receivers {
            if let Err(e) = r.tx.try_send(Arc::clone(&notice)) {
                r.stats.dropped.fetch_add(1, Ordering::Relaxed);
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "its queue is full",
                    mpsc::error::TrySendError::Closed(_) => "its delivery task stopped",
                };
                tracing::warn!(
                    receiver = %r.name, host = %r.host, kind = %notice.alert.kind,
                    event = notice.event.as_str(),
                    "alert notice dropped: {why}"
                );
            }
        }
    }

    /// The notices between `before` and `after` ([`diff_alerts`], named after this
    /// installation), sent; returns how many. The one call a leader's reconcile makes.
    pub fn notify_changes(
        &self,
        before: &[AlertView],
        after: &[AlertView],
        rollout: Option<&RolloutVersions>,
        at: Timestamp,
    ) -> usize {
        if self.receivers.is_empty() {
            return 0;
        }
        let notices = diff_alerts(before, after, rollout, &self.server, at);
        let n = notices.len();
        for notice in notices {
            self.send(notice);
        }
        n
    }

    /// The `tern_notify_*` counters, one line per receiver (Prometheus text).
    pub fn render_metrics(&self, out: &mut String) {
        type Counter = fn(&Stats) -> &AtomicU64;
        let families: [(&str, &str, Counter); 4] = [
            (
                "tern_notify_sent_total",
                "alert notices delivered, by receiver",
                |s| &s.sent,
            ),
            (
                "tern_notify_failed_total",
                "alert notices given up after retries or refused by the receiver",
                |s| &s.failed,
            ),
            (
                "tern_notify_retries_total",
                "failed delivery attempts that were retried",
                |s| &s.retries,
            ),
            (
                "tern_notify_dropped_total",
                "alert notices dropped because the receiver's queue was full",
                |s| &s.dropped,
            ),
        ];
        for (name, help, get) in families {
            metrics_text::family(out, name, metrics_text::Kind::Counter, help);
            for r in &self.receivers {
                metrics_text::sample(
                    out,
                    name,
                    &[("receiver", &r.name)],
                    get(&r.stats).load(Ordering::Relaxed),
                );
            }
        }
    }

    /// (sent, failed, retries, dropped) of a receiver.
    #[cfg(test)]
    fn counts(&self, name: &str) -> Option<[u64; 4]> {
        self.receivers.iter().find(|r| r.name == name).map(|r| {
            let s = &r.stats;
            [&s.sent, &s.failed, &s.retries, &s.dropped].map(|c| c.load(Ordering::Relaxed))
        })
    }
}

/// Why one delivery attempt failed.
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error("{0}")]
    Transport(#[from] ureq::Error),
    #[error("the receiver answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the request thread failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl DeliveryError {
    /// Worth another attempt: the network, a timeout, 5xx, 408, 429. Other answers
    /// (4xx, 3xx) would be the same next time.
    fn retryable(&self) -> bool {
        match self {
            DeliveryError::Transport(_) => true,
            DeliveryError::Status { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            DeliveryError::Join(_) => false,
        }
    }
}

/// One receiver's delivery task: its queue in order, each notice retried with backoff.
async fn deliver(
    receiver: Arc<ReceiverConfig>,
    mut rx: mpsc::Receiver<Arc<Notice>>,
    stats: Arc<Stats>,
    config: DeliveryConfig,
    agent: ureq::Agent,
) {
    let host = receiver.host();
    while let Some(notice) = rx.recv().await {
        let body: Arc<[u8]> = match receiver.body(&notice) {
            Ok(b) => b.into(),
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(receiver = %receiver.name, error = %e, "encoding an alert notice failed");
                continue;
            }
        };
        let mut attempt = 1;
        loop {
            let (r, a, b) = (Arc::clone(&receiver), agent.clone(), Arc::clone(&body));
            let result = match tokio::task::spawn_blocking(move || post(&a, &r, &b)).await {
                Ok(r) => r,
                Err(e) => Err(e.into()),
            };
            match result {
                Ok(()) => {
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(receiver = %receiver.name, %host, kind = %notice.alert.kind, event = notice.event.as_str(), attempt, "alert notice delivered");
                    break;
                }
                Err(e) if e.retryable() && attempt < config.attempts => {
                    stats.retries.fetch_add(1, Ordering::Relaxed);
                    let wait = config.backoff(attempt);
                    tracing::warn!(receiver = %receiver.name, %host, attempt, error = %e, retry_in = ?wait, "delivering an alert notice failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(receiver = %receiver.name, %host, attempt, error = %e, kind = %notice.alert.kind, event = notice.event.as_str(), "giving up delivering an alert notice");
                    break;
                }
            }
        }
    }
}

/// One POST (blocking; bounded by the agent's timeout). 2xx is success.
fn post(agent: &ureq::Agent, receiver: &ReceiverConfig, body: &[u8]) -> Result<(), DeliveryError> {
    let mut req = agent
        .post(&receiver.url)
        .header("Content-Type", "application/json");
    if let Some(token) = receiver.token() {
        req = req.header("Authorization", format!("Bearer {token}"));
    }
    let mut resp = req.send(body)?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    Err(DeliveryError::Status {
        status,
        body: text.chars().take(200).collect(),
    })
}

#[cfg(test)]
mod tests;
