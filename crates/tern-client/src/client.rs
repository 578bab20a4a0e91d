//! ternd's wire protocol as a host speaks it (blocking, ureq): find, long-poll find,
//! the maintenance schedule, join and heartbeat; the channel files, checksums and the
//! streamed, bounded download of artifacts; the health URL. Every answer is untrusted:
//! read up to a bound, parsed into the wire types, ternd's reasons made harmless.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tern_core::api::{JoinBody, JoinResponse};
use tern_core::wire::{AgentSchedule, FindResponse, Heartbeat, HeartbeatResponse};
use ureq::http::{Method, StatusCode};

use crate::connect::{Connect, Roots};
use crate::error::{ChecksumProblem, Error, Reason, Result};

/// The largest heartbeat answer read: a local script of up to 64 KiB, JSON-escaped (a
/// control character takes six bytes), and the rest of the instruction.
const HEARTBEAT_ANSWER_LIMIT: u64 = 512 * 1024;

/// ternd's reason in an error answer (`{"error":{"code":…,"message":…}}`), made
/// harmless to print: it comes from the network. `None`: not ternd's error shape, or
/// nothing said.
fn api_reason(body: &str) -> Option<Reason> {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Detail,
    }
    // Any JSON for each field: a proxy's `"code": 403` must not hide its message.
    #[derive(serde::Deserialize)]
    struct Detail {
        #[serde(default)]
        code: serde_json::Value,
        #[serde(default)]
        message: serde_json::Value,
    }
    let body: Body = serde_json::from_str(body).ok()?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let harmless = |s: &str, max: usize| -> String {
        s.chars().filter(|c| !c.is_control()).take(max).collect()
    };
    let code = harmless(&text(&body.error.code), 64);
    let message = harmless(&text(&body.error.message), 200);
    // A code alone still says why; shown as the message then.
    let message = if message.is_empty() {
        code.clone()
    } else {
        message
    };
    (!message.is_empty()).then_some(Reason { code, message })
}

/// A long-poll find's answer.
#[derive(Clone, Debug)]
pub struct Polled {
    pub find: FindResponse,
    /// The answer's ETag; `None` from a ternd that does not long-poll.
    pub etag: Option<String>,
    /// ternd held the request and answered because this host's answer changed (it
    /// then spread the hosts it released: `--long-poll-jitter`).
    pub released: bool,
    /// ternd held the request for its whole hold (which it may cap below ours).
    pub expired: bool,
}

#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    insecure: bool,
}

impl Client {
    /// A client on the connections `connect` allows.
    pub fn new(connect: &Connect) -> Self {
        Self {
            agent: connect.agent(),
            insecure: connect.allows_plain_http(),
        }
    }

    /// tern-update's client (and tern-lockstep's downloads): `insecure` allows plain
    /// http and unverified certificates (tests, labs); `roots` replaces the public web
    /// PKI; a connection is opened within 10 s (or `timeout`, when shorter).
    pub fn for_host(
        provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
        insecure: bool,
        timeout: Duration,
        roots: Option<Roots>,
    ) -> Self {
        Self::new(
            &Connect::new(provider, timeout)
                .insecure(insecure)
                .roots(roots)
                .connect_timeout(Duration::from_secs(10)),
        )
    }

    fn check_url(&self, url: &str) -> Result<()> {
        if url.starts_with("https://") || (self.insecure && url.starts_with("http://")) {
            Ok(())
        } else if url.starts_with("http://") {
            Err(Error::PlainHttp { url: url.into() })
        } else {
            Err(Error::NotHttpUrl { url: url.into() })
        }
    }

    fn request_err(url: &str) -> impl FnOnce(ureq::Error) -> Error {
        move |source| Error::HttpRequest {
            url: url.to_string(),
            source,
        }
    }

    /// Refuses any answer but 2xx.
    fn expect_success(method: Method, url: &str, status: StatusCode) -> Result<()> {
        if status.is_success() {
            Ok(())
        } else {
            Err(Error::HttpStatus {
                method,
                url: url.to_string(),
                status,
                reason: None,
            })
        }
    }

    /// Refuses any answer but 2xx, with ternd's reason when its answer gives one.
    fn expect_ternd_success(
        method: Method,
        url: &str,
        resp: &mut ureq::http::Response<ureq::Body>,
    ) -> Result<()> {
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        Err(Error::HttpStatus {
            method,
            url: url.to_string(),
            status,
            reason: error_reason(resp),
        })
    }

    /// `GET {server}/v1/webapi/find?group=G&updater_id=U`.
    pub fn find(
        &self,
        server: &str,
        group: &str,
        updater_id: &str,
        facts: &tern_core::wire::FindFacts,
    ) -> Result<FindResponse> {
        let url = format!("{}/v1/webapi/find", server.trim_end_matches('/'));
        let facts = facts.query();
        let mut query = vec![("group", group), ("updater_id", updater_id)];
        query.extend(facts.iter().map(|(k, v)| (*k, v.as_str())));
        self.get_json(url, &query, |url, source| Error::BadFindResponse {
            url,
            source,
        })
    }

    /// `GET {server}/v1/webapi/find?group=G&updater_id=U` saying nothing of the host
    /// (the Kubernetes controller: a workload's facts go in its heartbeats, and ternd
    /// answers a find without facts as it always did).
    pub fn find_without_facts(
        &self,
        server: &str,
        group: &str,
        updater_id: &str,
    ) -> Result<FindResponse> {
        let url = format!("{}/v1/webapi/find", server.trim_end_matches('/'));
        let query = [("group", group), ("updater_id", updater_id)];
        self.get_json(url, &query, |url, source| Error::BadFindResponse {
            url,
            source,
        })
    }

    /// `GET {server}/v1/webapi/find?…&wait=HOLD&seen=ETAG`: find held by ternd until
    /// this host's answer differs from the one whose ETag is `seen`, or for `hold`.
    /// This one request may take `hold` plus `grace` (ternd's release jitter); past
    /// that it fails, whatever the server does.
    #[allow(clippy::too_many_arguments)]
    pub fn find_long_poll(
        &self,
        server: &str,
        group: &str,
        updater_id: &str,
        facts: &tern_core::wire::FindFacts,
        hold: Duration,
        grace: Duration,
        seen: Option<&str>,
    ) -> Result<Polled> {
        let url = format!("{}/v1/webapi/find", server.trim_end_matches('/'));
        self.check_url(&url)?;
        let wait = hold.as_secs().to_string();
        let mut req = self
            .agent
            .get(&url)
            .query("group", group)
            .query("updater_id", updater_id)
            .query("wait", &wait);
        for (k, v) in facts.query() {
            req = req.query(k, &v);
        }
        if let Some(seen) = seen {
            req = req.query("seen", seen);
        }
        let mut resp = req
            .config()
            .timeout_global(Some(hold.saturating_add(grace)))
            .build()
            .call()
            .map_err(Self::request_err(&url))?;
        Self::expect_ternd_success(Method::GET, &url, &mut resp)?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        // From the network: an ETag is only kept when it looks like one (and is short),
        // so a hostile one cannot grow the next request without bound.
        let etag = header("etag")
            .filter(|e| !e.is_empty() && e.len() <= 128 && e.bytes().all(|b| b.is_ascii_graphic()));
        let label = header("tern-long-poll");
        let released = label.as_deref() == Some("changed");
        let expired = label.as_deref() == Some("expired");
        let find = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_json::<FindResponse>()
            .map_err(|source| Error::BadFindResponse { url, source })?;
        Ok(Polled {
            find,
            etag,
            released,
            expired,
        })
    }

    /// A small JSON answer of ternd (at most 64 KiB: ureq's default limit is 10 MB);
    /// `bad` names what a body that does not parse was meant to be.
    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: String,
        query: &[(&str, &str)],
        bad: fn(String, ureq::Error) -> Error,
    ) -> Result<T> {
        self.check_url(&url)?;
        let mut req = self.agent.get(&url);
        for (k, v) in query {
            req = req.query(*k, *v);
        }
        let mut resp = req.call().map_err(Self::request_err(&url))?;
        Self::expect_ternd_success(Method::GET, &url, &mut resp)?;
        resp.body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_json::<T>()
            .map_err(|source| bad(url, source))
    }

    /// `GET {channel}/{what}` (seed 001's plain-text `version` or `critical`): the body
    /// of a 200 answer, or why there is none. At most 1 KiB is read: a version or
    /// `yes` is a few bytes.
    pub fn channel_value(&self, channel: &str, what: &str) -> std::result::Result<String, String> {
        self.channel_value_as(channel, what, None)
    }

    /// [`channel_value`](Self::channel_value), naming the asking updater
    /// (`?updater_id=`) so that ternd's pin of it holds its channel too; only for a
    /// channel ternd serves (a third party's channel server learns no id).
    pub fn channel_value_as(
        &self,
        channel: &str,
        what: &str,
        updater_id: Option<&str>,
    ) -> std::result::Result<String, String> {
        let url = format!("{}/{what}", channel.trim_end_matches('/'));
        self.check_url(&url).map_err(|e| e.to_string())?;
        let mut req = self.agent.get(&url);
        if let Some(id) = updater_id.filter(|id| !id.is_empty()) {
            req = req.query("updater_id", id);
        }
        let mut resp = req.call().map_err(|e| format!("{url}: {e}"))?;
        if resp.status() != StatusCode::OK {
            // ternd says why it gives no version (a freeze, a pin…): the host says so.
            let why = error_reason(&mut resp).map_or_else(String::new, |r| {
                if r.code.is_empty() || r.code == r.message {
                    format!(": {}", r.message)
                } else {
                    format!(": {} ({})", r.message, r.code)
                }
            });
            return Err(format!("{url} answered {}{why}", resp.status()));
        }
        resp.body_mut()
            .with_config()
            .limit(1024)
            .read_to_string()
            .map_err(|e| format!("{url}: {e}"))
    }

    /// `GET {server}/v1/agents/schedule?group=G`: the group's maintenance window.
    pub fn schedule(&self, server: &str, group: &str) -> Result<AgentSchedule> {
        let url = format!("{}/v1/agents/schedule", server.trim_end_matches('/'));
        self.get_json(url, &[("group", group)], |url, source| Error::BadSchedule {
            url,
            source,
        })
    }

    /// The Content-Length of a HEAD request, when the server sends one.
    pub fn content_length(&self, url: &str) -> Result<Option<u64>> {
        self.check_url(url)?;
        let resp = self
            .agent
            .head(url)
            .call()
            .map_err(Self::request_err(url))?;
        Self::expect_success(Method::HEAD, url, resp.status())?;
        Ok(resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok()))
    }

    /// Fetches and parses `<url>.sha256`.
    pub fn checksum(&self, url: &str) -> Result<String> {
        let sum_url = tern_core::artifact::checksum_url(url);
        self.check_url(&sum_url)?;
        let missing = |problem| Error::MissingChecksum {
            url: sum_url.clone(),
            problem,
        };
        let mut resp = self
            .agent
            .get(&sum_url)
            .call()
            .map_err(|e| missing(ChecksumProblem::Fetch(e)))?;
        if !resp.status().is_success() {
            return Err(missing(ChecksumProblem::Status(resp.status())));
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .map_err(|e| missing(ChecksumProblem::Fetch(e)))?;
        parse_checksum(&text).ok_or_else(|| missing(ChecksumProblem::NotAChecksum))
    }

    /// Streams `url` into `dest`, hashing as it goes; refuses to write more than
    /// `max_bytes`. Returns (bytes, sha256 hex). `dest` is fsynced.
    /// `declared`: the length the signed metadata gives; a byte more aborts the download.
    pub fn download(
        &self,
        url: &str,
        dest: &Path,
        max_bytes: u64,
        declared: Option<u64>,
    ) -> Result<(u64, String)> {
        self.check_url(url)?;
        let mut resp = self.agent.get(url).call().map_err(Self::request_err(url))?;
        Self::expect_success(Method::GET, url, resp.status())?;
        let mut reader = resp.body_mut().as_reader();
        // Root only: it is unpacked as root after its checksum was checked, so no one
        // else may write it in between.
        let mut file = create_file(dest, 0o600)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut total: u64 = 0;
        loop {
            let n = reader.read(&mut buf).map_err(|source| Error::HttpBody {
                url: url.to_string(),
                source,
            })?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if let Some(declared) = declared
                && total > declared
            {
                return Err(Error::LargerThanSigned {
                    url: url.to_string(),
                    declared,
                });
            }
            if total > max_bytes {
                return Err(Error::NoSpace {
                    path: dest.to_path_buf(),
                    needed: total,
                    available: max_bytes,
                });
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| Error::io("write", dest, e))?;
        }
        file.sync_all().map_err(|e| Error::io("fsync", dest, e))?;
        Ok((total, hex(&hasher.finalize())))
    }

    /// A GET whose body is read as the caller goes (TUF metadata: tough stops reading
    /// at the size it allows). `None`: 404.
    pub fn open(&self, url: &str) -> Result<Option<ureq::BodyReader<'static>>> {
        self.check_url(url)?;
        let resp = self.agent.get(url).call().map_err(Self::request_err(url))?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Self::expect_success(Method::GET, url, resp.status())?;
        Ok(Some(resp.into_body().into_reader()))
    }

    /// True when `url` answers 2xx.
    pub fn probe(&self, url: &str) -> bool {
        if self.check_url(url).is_err() {
            return false;
        }
        matches!(self.agent.get(url).call(), Ok(r) if r.status().is_success())
    }

    /// `POST {server}/v1/agents/join`: exchanges the join token for this host's own
    /// credential.
    pub fn join(&self, server: &str, body: &JoinBody, token: &str) -> Result<Joined> {
        let url = format!("{}/v1/agents/join", server.trim_end_matches('/'));
        self.check_url(&url)?;
        let mut resp = self
            .agent
            .post(&url)
            .header("Authorization", format!("Bearer {token}"))
            .send_json(body)
            .map_err(Self::request_err(&url))?;
        let status = resp.status();
        if status.is_success() {
            let answer: JoinResponse = resp
                .body_mut()
                .with_config()
                .limit(16 * 1024)
                .read_json()
                .map_err(|e| Error::BadAnswer {
                url: url.clone(),
                problem: format!("the join answer is not valid: {e}"),
            })?;
            // Untrusted like every answer: a credential is one printable token.
            let token = answer.token.trim();
            if token.is_empty()
                || token.len() > 512
                || !token.bytes().all(|b| b.is_ascii_graphic())
                || answer.updater_id != body.updater_id
            {
                return Err(Error::BadAnswer {
                    url,
                    problem: "the join answer's credential is malformed or for another updater"
                        .into(),
                });
            }
            return Ok(Joined::Credential(token.to_string()));
        }
        let reason = error_reason(&mut resp);
        Ok(match status.as_u16() {
            404 | 405 => Joined::NotSupported,
            409 => Joined::HasCredential(reason.map(|r| r.message)),
            _ => Joined::Refused(Error::HeartbeatRejected {
                url,
                status,
                reason,
            }),
        })
    }

    /// `POST {server}/v1/agents/heartbeat`. An answer that does not parse is taken as
    /// saying nothing (an older or odd server): the heartbeat itself went through.
    /// Sends a heartbeat; the answer is read up to [`HEARTBEAT_ANSWER_LIMIT`] (an install
    /// instruction may carry a local script of up to 64 KiB, escaped in JSON).
    pub fn heartbeat(
        &self,
        server: &str,
        hb: &Heartbeat,
        token: Option<&str>,
    ) -> Result<HeartbeatResponse> {
        let url = format!("{}/v1/agents/heartbeat", server.trim_end_matches('/'));
        self.check_url(&url)?;
        let mut req = self.agent.post(&url);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = req.send_json(hb).map_err(Self::request_err(&url))?;
        if !resp.status().is_success() {
            let reason = error_reason(&mut resp);
            return Err(Error::HeartbeatRejected {
                url,
                status: resp.status(),
                reason,
            });
        }
        Ok(resp
            .body_mut()
            .with_config()
            .limit(HEARTBEAT_ANSWER_LIMIT)
            .read_json::<HeartbeatResponse>()
            .unwrap_or_default())
    }
}

/// ternd's reason in an error answer (read up to 16 KiB), made harmless to print.
fn error_reason(resp: &mut ureq::http::Response<ureq::Body>) -> Option<Reason> {
    resp.body_mut()
        .with_config()
        .limit(16 * 1024)
        .read_to_string()
        .ok()
        .and_then(|body| api_reason(&body))
}

/// What came of a join.
#[derive(Debug)]
pub enum Joined {
    /// This host's credential, to keep and send from now on.
    Credential(String),
    /// ternd predates host credentials: the token is sent as it is.
    NotSupported,
    /// ternd already gave this updater a credential (ternd's reason).
    HasCredential(Option<String>),
    /// The token was refused (used up, expired, revoked) or ternd failed.
    Refused(Error),
}

/// Creates `path` (which must not exist) for writing, with exactly `mode`.
fn create_file(path: &Path, mode: u32) -> Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    // open(2) applied the umask: set the mode asked for.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("chmod", path, e))?;
    Ok(f)
}

/// The first 64 hex characters of a `.sha256` file (`sha256sum` output works).
fn parse_checksum(text: &str) -> Option<String> {
    let word = text.split_whitespace().next()?;
    let hex = word.get(..64)?;
    if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some(hex.to_ascii_lowercase())
    } else {
        None
    }
}

use tern_core::text::hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums() {
        let h = "a".repeat(64);
        let cases = [
            (h.clone(), Some(h.clone())),
            (format!("{h}  agent.tar.gz\n"), Some(h.clone())),
            ("A".repeat(64), Some(h.clone())),
            (format!("{h}ffff"), Some(h.clone())),
            ("abc".to_string(), None),
            ("g".repeat(64), None),
            (String::new(), None),
            ("<html>not found</html>".to_string(), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_checksum(&text), want, "{text}");
        }
    }

    #[test]
    fn ternd_error_reasons_are_read_and_made_harmless() {
        let body = r#"{"error":{"code":"unauthenticated","message":"invalid or revoked token"}}"#;
        assert_eq!(
            api_reason(body),
            Some(Reason {
                code: "unauthenticated".into(),
                message: "invalid or revoked token".into()
            })
        );
        let hostile = format!(
            r#"{{"error":{{"code":"x\u001b[31m{}","message":"a\nerror: forged{}"}}}}"#,
            "c".repeat(1000),
            "x".repeat(1000)
        );
        let got = api_reason(&hostile).unwrap();
        assert!(
            !got.message.contains('\n') && got.message.chars().count() == 200,
            "{got:?}"
        );
        assert!(
            !got.code.contains('\u{1b}') && got.code.chars().count() == 64,
            "{got:?}"
        );
        assert_eq!(api_reason("<html>"), None);
        assert_eq!(api_reason(r#"{"error":{"message":""}}"#), None);
        assert_eq!(api_reason(r#"{"message":"not ternd's shape"}"#), None);
        // A code alone is the reason shown.
        assert_eq!(
            api_reason(r#"{"error":{"code":"forbidden"}}"#).map(|r| r.to_string()),
            Some("forbidden".into())
        );
        // A proxy's numeric code does not hide its message (the code is not text: dropped).
        let proxy = api_reason(r#"{"error":{"code":403,"message":"blocked by policy"}}"#).unwrap();
        assert_eq!(
            (proxy.code.as_str(), proxy.message.as_str()),
            ("", "blocked by policy")
        );
    }
}
