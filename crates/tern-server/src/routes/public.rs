//! Unauthenticated endpoints (find, channels, health, metrics) and heartbeats.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use tern_core::rollout::Groups;
use tern_core::wire::{Heartbeat, HeartbeatResponse, UnknownGroup};

use crate::auth::Actor;
use crate::error::{ApiError, ApiResult};
use crate::inventory::Refused;
use crate::longpoll::Release;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimits;
use crate::snapshot::Answers;
use crate::state::{Answering, Health};

/// The find query: `group` and updater id (each may be absent), and for a long poll
/// `wait` and `seen`; other parameters are ignored. Decoded in place: a typed `Query`
/// extractor cost an eighth of a find's instructions (profiled). The id is
/// `updater_id=`, or `host=` as seed 000's updaters send it; `updater_id` wins when
/// both are given.
struct FindQuery<'a> {
    /// The product asked for (`product=`; Teleport's updaters send none: the agent).
    product: Cow<'a, str>,
    group: Cow<'a, str>,
    updater_id: Cow<'a, str>,
    wait: Option<Cow<'a, str>>,
    seen: Option<Cow<'a, str>>,
    /// What the host says of itself (`tern_core::wire::FindFacts`), when it says it
    /// (an updater that predates them sends none).
    facts: Option<tern_core::wire::FindFacts>,
}

fn find_query(raw: Option<&str>) -> FindQuery<'_> {
    let (mut group, mut updater_id, mut host) =
        (Cow::Borrowed(""), Cow::Borrowed(""), Cow::Borrowed(""));
    let mut product = Cow::Borrowed(tern_core::gate::AGENT);
    let (mut wait, mut seen) = (None, None);
    let mut facts: Option<tern_core::wire::FindFacts> = None;
    let mut said_version = false;
    for (k, v) in query_pairs(raw.unwrap_or_default()) {
        match k.as_ref() {
            "group" => group = v,
            // Read here, never as one of the facts: empty is the agent, and a fact
            // would make an updater that sends no facts look like one that does.
            "product" if !v.is_empty() => product = v,
            "product" => {}
            "updater_id" => updater_id = v,
            "host" => host = v,
            "wait" => wait = Some(v),
            "seen" => seen = Some(v),
            key if tern_core::wire::FindFacts::is_key(key) => {
                said_version |= key == "version";
                facts.get_or_insert_with(Default::default).read(key, &v);
            }
            _ => {}
        }
    }
    // Facts count when the host said its version (every updater that sends facts does,
    // empty when nothing is installed) and they are within a heartbeat's bounds; else
    // the replica goes by what the host's heartbeats told it.
    let facts = facts.filter(|f| said_version && f.check().is_ok());
    if updater_id.is_empty() {
        updater_id = host;
    }
    FindQuery {
        product,
        group,
        updater_id,
        wait,
        seen,
        facts,
    }
}

/// The `key=value` pairs of a query string, decoded as `application/x-www-form-urlencoded`.
/// A pair without `%` or `+` (what every updater sends) is borrowed as it is; the others
/// go through `form_urlencoded`. Parsing every find's query with `form_urlencoded` alone
/// was a tenth of find's instructions (`bench profile`).
fn query_pairs(raw: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    raw.split('&').filter(|p| !p.is_empty()).map(|pair| {
        if pair.bytes().any(|b| b == b'%' || b == b'+') {
            // One pair, non-empty: form_urlencoded yields exactly it.
            form_urlencoded::parse(pair.as_bytes())
                .next()
                .unwrap_or((Cow::Borrowed(""), Cow::Borrowed("")))
        } else {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (Cow::Borrowed(k), Cow::Borrowed(v))
        }
    })
}

/// The fuzzing entry for [`find_query`]: the decoded group and updater id.
#[cfg(feature = "fuzzing")]
pub fn fuzz_find_query(raw: &str) -> (String, String) {
    let q = find_query(Some(raw));
    (q.group.into_owned(), q.updater_id.into_owned())
}

const JSON: HeaderValue = HeaderValue::from_static("application/json");

fn cacheable(answers: &Answers, mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, answers.cache_control.clone());
    resp
}

fn limit_public(one: &Answering, addr: SocketAddr) -> ApiResult<()> {
    one.limits
        .find
        .check(addr.ip(), Instant::now())
        .map_err(|wait| {
            Metrics::inc(&one.metrics.find_rate_limited);
            ApiError::rate_limited(
                wait,
                format!("too many requests from {}: retry in {wait}s", addr.ip()),
            )
        })
}

/// `GET /v1/webapi/find?group=G&updater_id=U[&wait=SECONDS&seen=ETAG]`. With `wait`
/// and the ETag of the answer the host holds, the request is held until the host's
/// answer differs (then released after a random part of `--long-poll-jitter`) or
/// `wait` (capped at `--long-poll-max-hold`) has passed; `tern-long-poll` says which.
pub(crate) async fn find(
    State(one): State<Arc<Answering>>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    limit_ready(&one, addr)?;
    let q = find_query(query.as_deref());
    let long_poll = &one.answers.long_poll;
    let wait = q
        .wait
        .as_deref()
        .map(|w| crate::longpoll::parse_wait(w, long_poll.settings.max_hold))
        .transpose()
        .map_err(ApiError::bad_request)?;
    Metrics::inc(&one.metrics.find_requests);
    let Some(wait) = wait else {
        let snapshot = one.answers.current();
        let fallback = one.fallbacks.check(&snapshot, &q.product, &q.group);
        let answer = find_answer(&one, &snapshot, &q)?;
        return Ok(said_fallback(
            cacheable(&one.answers, find_response(answer, None)),
            fallback,
        ));
    };
    let fallback = one
        .fallbacks
        .check(&one.answers.current(), &q.product, &q.group);
    // Subscribed before the answer is worked out: a change in between wakes the hold.
    let mut changes = long_poll.subscribe();
    let answer = find_answer(&one, &one.answers.current(), &q)?;
    let seen = q.seen.as_deref().unwrap_or_default();
    let etag = answer.etag.to_str().unwrap_or_default();
    if wait.is_zero() || !crate::longpoll::is_seen(seen, etag) {
        return Ok(said_fallback(
            find_response(answer, Some(POLL_IMMEDIATE)),
            fallback,
        ));
    }
    let Some(_permit) = long_poll.admit() else {
        return Ok(said_fallback(
            find_response(answer, Some(POLL_BUSY)),
            fallback,
        ));
    };
    let deadline = tokio::time::Instant::now() + wait;
    // A pin lifts when the leader deletes it: a change of the snapshot like any other.
    let stopped = long_poll.stopped();
    tokio::pin!(stopped);
    let release = loop {
        let look_again = tokio::select! {
            changed = changes.changed() => {
                // The sender lives as long as the state: an error only at its end.
                if changed.is_err() {
                    break Release::Expired;
                }
                true
            }
            () = tokio::time::sleep_until(deadline) => break Release::Expired,
            () = &mut stopped => break Release::Expired,
        };
        if look_again && find_answer(&one, &one.answers.current(), &q)?.etag != answer.etag {
            break Release::Changed;
        }
    };
    long_poll.count(release);
    if release == Release::Changed {
        // Under a dev clock time moves only when told, as for find's own jitter.
        let bound = if one.clock.as_dev().is_some() {
            std::time::Duration::ZERO
        } else {
            long_poll.settings.release_jitter
        };
        tokio::select! {
            () = tokio::time::sleep(long_poll.jitter(bound)) => {}
            () = &mut stopped => {}
        }
    }
    // The answer as it is now: another change may have come during the jitter.
    let answer = find_answer(&one, &one.answers.current(), &q)?;
    let how = match release {
        Release::Changed => POLL_CHANGED,
        Release::Expired => POLL_EXPIRED,
    };
    Ok(said_fallback(find_response(answer, Some(how)), fallback))
}

/// `resp` saying, when `fallback` is set, which group answered for a group the
/// rollout lacks (`group_fallback`).
fn said_fallback(mut resp: Response, fallback: Option<HeaderValue>) -> Response {
    if let Some(serving) = fallback {
        resp.headers_mut()
            .insert(crate::group_fallback::HEADER, serving);
    }
    resp
}

/// How a long poll was answered (`tern-long-poll`): its answer had changed, its hold
/// expired (or the replica is stopping), the replica holds too many, or the host's
/// answer already differed from `seen` (or `wait` was 0).
const POLL_CHANGED: HeaderValue = HeaderValue::from_static("changed");
const POLL_EXPIRED: HeaderValue = HeaderValue::from_static("expired");
const POLL_BUSY: HeaderValue = HeaderValue::from_static("busy");
const POLL_IMMEDIATE: HeaderValue = HeaderValue::from_static("immediate");
const LONG_POLL_HEADER: header::HeaderName = header::HeaderName::from_static("tern-long-poll");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

fn find_response(answer: crate::snapshot::FindBody, long_poll: Option<HeaderValue>) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, JSON.clone())], answer.body).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::ETAG, answer.etag);
    if let Some(how) = long_poll {
        headers.insert(LONG_POLL_HEADER, how);
        // A held answer depends on when it was asked: no cache may keep it.
        headers.insert(header::CACHE_CONTROL, NO_STORE);
    }
    resp
}

/// What find tells this host now: the one answer (`tern_core::gate::answer`) over the
/// snapshot and what this replica knows of the host, serialized once per snapshot. A
/// host refused for want of a pinned root (`--require-trust`) gets 403.
fn find_answer(
    one: &Answering,
    snapshot: &crate::snapshot::Snapshot,
    q: &FindQuery<'_>,
) -> ApiResult<crate::snapshot::FindBody> {
    let answer = one_answer(one, snapshot, q);
    if answer.holds.contains(tern_core::hold::Hold::TrustRequired) {
        return Err(trust_required(
            &q.updater_id,
            "its find does not name a pinned root",
        ));
    }
    Ok(snapshot.find_body(&answer, &one.settings.edition))
}

/// The fleet as the one answer reads it on this replica, now, for `product`.
fn fleet<'s>(
    one: &Answering,
    snapshot: &'s crate::snapshot::Snapshot,
    product: &str,
) -> tern_core::gate::Fleet<'s> {
    snapshot.fleet_for(
        product,
        one.health.cut_off(),
        one.settings.security.require_trust,
        // Under a dev clock time moves only when told: a real-time random wait before
        // updating would only slow tests and demos down.
        one.clock.as_dev().is_none(),
        one.clock.now(),
    )
}

/// The one answer for the host `q` describes, for the product it asks for: what
/// [`find`] serializes, and what Teleport's channel paths ([`teleport_channel`])
/// answer from. An updater that sends no facts is known by what this replica's
/// heartbeats of that product recorded of it. A product this ternd does not serve has
/// no rollout: its hosts are told `no_rollout`, never an error.
fn one_answer(
    one: &Answering,
    snapshot: &crate::snapshot::Snapshot,
    q: &FindQuery<'_>,
) -> tern_core::gate::Answer {
    let fleet = fleet(one, snapshot, &q.product);
    let mut host = tern_core::gate::Host {
        product: &q.product,
        updater_id: &q.updater_id,
        group: &q.group,
        facts: q.facts.as_ref(),
        recorded: tern_core::gate::Recorded::default(),
        pins_root: q.facts.as_ref().is_some_and(|f| f.trust_root > 0),
    };
    let seen = if tern_core::gate::reads_recorded(&fleet, &host) {
        one.hosts
            .with_inventory(&q.product, |inv| {
                inv.by_updater_id(&q.updater_id).map(|a| {
                    (
                        tern_core::inventory::AgentView::group(&a).to_string(),
                        a.install_state().is_some(),
                    )
                })
            })
            .flatten()
    } else {
        None
    };
    if let Some((group, governed)) = &seen {
        host.recorded = tern_core::gate::Recorded {
            placed_group: Some(group),
            governed: *governed,
        };
    }
    tern_core::gate::answer(&fleet, &host, tern_core::gate::Ask::Find)
}

/// The public rate limit, then readiness: what find and the schedule answer from needs
/// the first snapshot.
fn limit_ready(one: &Answering, addr: SocketAddr) -> ApiResult<()> {
    limit_public(one, addr)?;
    if !one.health.is_ready() {
        return Err(ApiError::unavailable("ternd is starting"));
    }
    Ok(())
}

/// `GET /v1/channels/{name}/version` and `/critical` (plain text, seed 001). A host may
/// name itself (`?updater_id=`, as tern-update does) so that a server pin of it holds
/// its channel too. Under any hold of the one answer (a freeze, a pin, a mode set
/// disabled or suspended, a revoked version, the replica cut off) `version` answers 503
/// with the hold's code, uncached: a channel host never updates without a version, and
/// acts again once the hold lifts.
pub(crate) async fn channel_value(
    State(one): State<Arc<Answering>>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    Path((name, what)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    limit_public(&one, addr)?;
    let snap = one.answers.snapshot();
    let Some(ch) = snap.channels.get(&name) else {
        return Err(ApiError::not_found(format!("no channel named {name:?}")));
    };
    Metrics::inc(&one.metrics.channel_requests);
    let q = find_query(query.as_deref());
    let answer = channel_answer(&one, &snap, &q, ch);
    let body = match what.as_str() {
        "version" => match (answer.version.clone(), answer.hold()) {
            (Some(v), None) => v.to_string(),
            (_, hold) => {
                let hold = hold.unwrap_or(tern_core::hold::Hold::Revoked);
                let why = match (&snap.freeze, hold) {
                    (Some(f), tern_core::hold::Hold::Frozen) => f.describe(),
                    _ => hold.describe().to_string(),
                };
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    hold.code(),
                    why,
                ));
            }
        },
        "critical" => if ch.critical { "yes" } else { "no" }.to_string(),
        _ => {
            return Err(ApiError::not_found(format!(
                "channel {name:?} has no {what:?}: ask for version or critical"
            )));
        }
    };
    let resp = ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
    Ok(cacheable(&one.answers, resp))
}

/// The one answer for a host following channel `ch`.
fn channel_answer(
    one: &Answering,
    snapshot: &crate::snapshot::Snapshot,
    q: &FindQuery<'_>,
    ch: &tern_core::api::Channel,
) -> tern_core::gate::Answer {
    let fleet = snapshot.fleet_for(
        &q.product,
        one.health.cut_off(),
        false,
        true,
        one.clock.now(),
    );
    let host = tern_core::gate::Host::new(&q.product, &q.group, &q.updater_id);
    tern_core::gate::answer(&fleet, &host, tern_core::gate::Ask::Channel(ch))
}

/// Teleport's version server (RFD 109), for Teleport's own upgraders (the Kubernetes
/// agent updater, `teleport-upgrade`): `GET /v1/webapi/automaticupgrades/channel/
/// {channel}/version` and `/critical`, also without `/v1`, plain text. The channel may
/// hold `/`. A channel set on ternd answers its version and criticality; any other name
/// is a rollout group, answered as find answers a host of that group without an
/// updater id. Such an upgrader installs `version` in a maintenance window of its own,
/// so it is told a version only when find would tell the host to update now: under
/// any hold (a freeze, a pin, a mode, a group not started, not a canary, outside its
/// window) it gets Teleport's `none`, with the hold's code in `tern-hold`. Under
/// `--require-trust` a group is refused (403 `trust_required`), as a find naming no
/// pinned root is.
pub(crate) async fn teleport_channel(
    State(one): State<Arc<Answering>>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    Path(request): Path<String>,
) -> ApiResult<Response> {
    limit_ready(&one, addr)?;
    let Some((name, what)) = request
        .trim_matches('/')
        .rsplit_once('/')
        .filter(|(name, _)| !name.is_empty())
    else {
        return Err(ApiError::bad_request(
            "path format should be /v1/webapi/automaticupgrades/channel/<channel>/{version,critical}",
        ));
    };
    if what != "version" && what != "critical" {
        return Err(ApiError::bad_request(format!(
            "{what:?}: the path must end with version or critical"
        )));
    }
    let snapshot = one.answers.snapshot();
    let anonymous = FindQuery {
        product: Cow::Borrowed(tern_core::gate::AGENT),
        group: Cow::Borrowed(name),
        updater_id: Cow::Borrowed(""),
        wait: None,
        seen: None,
        facts: None,
    };
    let (version, critical, hold) = if let Some(ch) = snapshot.channels.get(name) {
        Metrics::inc(&one.metrics.channel_requests);
        let a = channel_answer(&one, &snapshot, &anonymous, ch);
        match (a.version.clone(), a.hold()) {
            (Some(v), None) => (Some(v.to_string()), a.critical, None),
            (_, hold) => (None, false, hold.or(Some(tern_core::hold::Hold::Revoked))),
        }
    } else {
        // A rollout group asked as a channel is a find without identity: it can name no
        // pinned root, so under --require-trust it is refused as such a find is.
        if one.settings.security.require_trust {
            return Err(trust_required(
                "",
                "Teleport's channel path for a rollout group cannot name a pinned root",
            ));
        }
        Metrics::inc(&one.metrics.find_requests);
        let d = one_answer(&one, &snapshot, &anonymous);
        match (d.version.clone(), d.hold()) {
            (Some(v), None) => (Some(v.to_string()), true, None),
            (_, hold) => (None, false, hold),
        }
    };
    let fallback = (!snapshot.channels.contains_key(name))
        .then(|| {
            one.fallbacks
                .check(&snapshot, tern_core::product::AGENT, name)
        })
        .flatten();
    let body = match what {
        // RFD 109's versions carry the leading `v`; `none` means "do not update".
        "version" => version.map_or_else(
            || TELEPORT_NO_VERSION.to_string(),
            |v| format!("v{}", v.trim_start_matches('v')),
        ),
        _ => if critical { "yes" } else { "no" }.to_string(),
    };
    let mut resp = ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response();
    if let Some(hold) = hold {
        resp.headers_mut()
            .insert(HOLD_HEADER, HeaderValue::from_static(hold.code()));
    }
    Ok(said_fallback(cacheable(&one.answers, resp), fallback))
}

/// What Teleport's version server answers when there is no version to move to.
const TELEPORT_NO_VERSION: &str = "none";
const HOLD_HEADER: header::HeaderName = header::HeaderName::from_static("tern-hold");

/// `GET /v1/agents/schedule?group=G[&count=N][&format=json|systemd]`: the group's
/// maintenance window as seed 001 exports it, from memory like find. JSON (the rule,
/// the `OnCalendar=` value and the next `count` windows, default 8, at most 64), or
/// with `format=systemd` the bare `OnCalendar=` values, one per window and line.
pub(crate) async fn schedule(
    State(one): State<Arc<Answering>>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    limit_ready(&one, addr)?;
    Metrics::inc(&one.metrics.schedule_requests);
    let (mut group, mut count, mut format) = (String::new(), 8usize, String::from("json"));
    for (k, v) in form_urlencoded::parse(query.as_deref().unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "group" => group = v.into_owned(),
            "count" => {
                count = v.parse().map_err(|_| {
                    ApiError::bad_request(format!("count: {v:?} is not a whole number"))
                })?;
            }
            "format" => format = v.into_owned(),
            _ => {}
        }
    }
    let snapshot = one.answers.snapshot();
    // The cluster's window, from the config alone when no rollout exists (seed 001).
    let Some(schedule) = tern_core::reconcile::maintenance_schedule(
        snapshot.config.as_ref(),
        snapshot.rollout.as_ref(),
        &group,
        one.clock.now(),
        count,
    ) else {
        return Err(ApiError::not_found(
            "the config has no group with a maintenance window",
        ));
    };
    let resp = match format.as_str() {
        "json" => Json(schedule).into_response(),
        "systemd" => {
            // One value per line: a group with several windows has several.
            let calendar = if schedule.on_calendars.is_empty() {
                schedule.on_calendar
            } else {
                Some(schedule.on_calendars.join("\n"))
            };
            let Some(calendar) = calendar else {
                return Err(ApiError::not_found(format!(
                    "group {:?} has no window that ever opens",
                    schedule.group
                )));
            };
            (
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                calendar,
            )
                .into_response()
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "format: {other:?} is not json or systemd"
            )));
        }
    };
    Ok(cacheable(&one.answers, resp))
}

/// Longest string accepted in a heartbeat field.
const MAX_FIELD: usize = 256;

/// The client address's heartbeat rate (`--heartbeat-rate`, per address, heartbeats
/// and joins), checked before the token (`routes::authorize`): the 429, if refused.
pub(crate) fn address_rate(
    limits: &RateLimits,
    metrics: &Metrics,
    request: &Request,
) -> Option<Response> {
    // The listener gives every connection its peer address; a router served without it
    // is a ternd bug, answered 500 rather than left unlimited.
    let Some(ConnectInfo(addr)) = request.extensions().get::<ConnectInfo<SocketAddr>>() else {
        return Some(
            ApiError::internal("the request carries no peer address to limit").into_response(),
        );
    };
    if let Err(wait) = limits.heartbeat.check(addr.ip(), Instant::now()) {
        Metrics::inc(&metrics.heartbeats_rate_limited);
        return Some(
            ApiError::rate_limited(wait, format!("too many heartbeats from {}", addr.ip()))
                .into_response(),
        );
    }
    None
}

/// 403 `trust_required` (`ternd start --require-trust`): the host does not pin the
/// release root, so it would install whatever it is told, signed or not.
fn trust_required(updater_id: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "trust_required",
        format!(
            "updater {:?} is refused: this ternd serves only hosts that pin the release root (--require-trust), and {why}; on the host: tern-update enable --trust-root root.json",
            updater_id.chars().take(64).collect::<String>()
        ),
    )
}

/// `POST /v1/agents/heartbeat` (an agent token, checked by the router)
pub(crate) async fn heartbeat(
    State(one): State<Arc<Answering>>,
    Extension(actor): Extension<Arc<Actor>>,
    body: Bytes,
) -> ApiResult<Json<HeartbeatResponse>> {
    let at = one.clock.monotonic();
    let mut hb: Heartbeat = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the heartbeat is not valid JSON: {e}")))?;
    // A host credential speaks for its own updater only: one leaked credential cannot
    // invent hosts nor speak for others.
    if let Some(own) = &actor.bound_to
        && hb.updater_id != *own
    {
        return Err(ApiError::forbidden(format!(
            "this host credential belongs to updater {own}, not {:?}",
            hb.updater_id.chars().take(64).collect::<String>()
        )));
    }
    let shared = actor.bound_to.is_none() && actor.role == tern_core::api::Role::Agent;
    if shared {
        Metrics::inc(&one.metrics.heartbeats_shared_token);
    }
    for (field, value) in [
        ("updater_id", &hb.updater_id),
        ("host_id", &hb.host_id),
        ("hostname", &hb.hostname),
        ("group", &hb.group),
        ("version", &hb.version),
    ] {
        if value.len() > MAX_FIELD {
            return Err(ApiError::bad_request(format!(
                "{field}: longer than {MAX_FIELD} bytes"
            )));
        }
        // These go into the canary analysis' queries and the operators' views: a
        // control character has no place in them (one made of nothing else once
        // widened the analysis' selector to series without the label).
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(ApiError::bad_request(format!(
                "{field}: holds the control character U+{:04X}; send printable text",
                u32::from(c)
            )));
        }
    }
    hb.check_facts().map_err(ApiError::bad_request)?;
    if one.settings.security.require_trust {
        match hb.trust {
            Some(t) if t.pinned => {}
            Some(_) => return Err(trust_required(&hb.updater_id, "it pins no release root")),
            None => {
                return Err(trust_required(
                    &hb.updater_id,
                    "its tern-update does not say whether it pins a release root (upgrade it)",
                ));
            }
        }
    }
    // Each product a host runs heartbeats on its own, into that product's inventory;
    // only products this ternd serves, so that no client makes inventories up.
    let snap = one.answers.current();
    let product = hb.product().to_string();
    if !snap.serves(&product) {
        let mut served = vec![tern_core::product::AGENT.to_string()];
        served.extend(snap.products.keys().cloned());
        return Err(ApiError::bad_request(format!(
            "product: {product:?} is not a product this ternd serves ({}); an operator adds it by writing its autoupdate_version (ternctl --product {product} agents new-rollout VERSION)",
            served.join(", ")
        )));
    }
    let agent = product == tern_core::product::AGENT;
    // Groups placed by labels: from here on the host counts in the group its labels
    // (and the config's host_group) place it in: its report, canaries, history, find.
    let mut placed_group = None;
    if let Some(r) = snap.rollout_of(&product) {
        let placed = tern_core::rollout::place(r, &hb.group, &hb.labels);
        if placed != hb.group {
            hb.group = placed.to_string();
            placed_group = Some(hb.group.clone());
        }
    }
    let now = one.clock.now();
    let recorded = one
        .hosts
        .record_in(&product, |inv| inv.heartbeat_via(&hb, now, at, shared))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "products_full",
                format!(
                    "this replica already holds the hosts of {} products, the most a ternd serves: product {product:?} is not recorded",
                    crate::products::MAX_PRODUCTS
                ),
            )
        })?;
    let install = match recorded {
        Ok(r) => {
            // A host's history follows its agent (the product Teleport's files describe).
            if r.changed && agent {
                crate::history::observe(&one.hosts, &one.metrics, &hb, now);
            }
            if r.moved {
                one.hosts.changed.notify_one();
            }
            r.install
        }
        Err(e @ Refused::Unidentified) => return Err(ApiError::bad_request(e.to_string())),
        Err(e @ Refused::Full { .. }) => {
            Metrics::inc(&one.metrics.heartbeats_inventory_full);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "inventory_full",
                e.to_string(),
            ));
        }
        Err(e @ Refused::SharedTokenFull { .. }) => {
            Metrics::inc(&one.metrics.heartbeats_inventory_full);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shared_token_full",
                e.to_string(),
            ));
        }
    };
    Metrics::inc(&one.metrics.heartbeats);
    // The hot path (a known group, or none) allocates nothing. The snapshot is read
    // again, not reused from before recording: the inventory's lock may have been
    // waited on for a long time (a 1M-agent inventory page), and a freeze confirmed to
    // its operator meanwhile must keep this answer's instruction back.
    let snapshot = one.answers.current();
    let unknown_group = snapshot
        .rollout_of(&product)
        .filter(|r| !hb.group.is_empty() && r.group(&hb.group).is_none())
        .and_then(|r| {
            let groups = Groups::of(r);
            Some(UnknownGroup {
                served_by: groups.unknown(&hb.group)?.to_string(),
                group: hb.group.clone(),
                groups: groups.names().map(str::to_string).collect(),
            })
        });
    // Under any hold of the one answer for this host and the instruction's target (a
    // freeze, a pin, a mode set disabled or suspended, a revoked target, the replica
    // cut off), the instruction is not handed out; it stays pending and is given again
    // with the first heartbeat after the hold lifts. A dry run changes nothing on the
    // host: it goes whatever holds.
    let install = install.filter(|i| i.dry_run || directed_allowed(&one, &snapshot, &hb, i));
    Ok(Json(HeartbeatResponse {
        next_heartbeat_seconds: one.settings.heartbeat_interval.as_secs().max(1),
        unknown_group,
        placed_group,
        install,
    }))
}

/// Whether the one answer lets `hb`'s host install `i`'s target now.
fn directed_allowed(
    one: &Answering,
    snapshot: &crate::snapshot::Snapshot,
    hb: &Heartbeat,
    i: &tern_core::install::InstallInstruction,
) -> bool {
    let Ok(target) = tern_core::version::Version::parse(&i.target.version) else {
        return false;
    };
    let fleet = fleet(one, snapshot, hb.product());
    let mut host = tern_core::gate::Host::new(hb.product(), &hb.group, &hb.updater_id);
    host.pins_root = hb.trust.is_some_and(|t| t.pinned);
    // The time rules of the directive that chose it, as the store holds it now.
    let timing = snapshot
        .directive
        .as_ref()
        .map_or_else(tern_core::directive::resource::Timing::default, |d| {
            d.spec.timing(&i.directive)
        });
    tern_core::gate::answer(
        &fleet,
        &host,
        tern_core::gate::Ask::Directed(tern_core::gate::DirectedInstall {
            target: &target,
            timing,
        }),
    )
    .update()
}

pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

pub(crate) async fn readyz(State(health): State<Arc<Health>>) -> Response {
    if health.is_ready() {
        "ready\n".into_response()
    } else {
        ApiError::unavailable("ternd is starting: the store or the first snapshot is not loaded")
            .into_response()
    }
}

/// `GET /metrics` (Prometheus text format): the page is `metrics_page`'s.
pub(crate) async fn metrics(State(page): State<crate::metrics_page::MetricsPage>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics_page::render(&page).await,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_query_decodes_its_parameters() {
        let q = |raw: Option<&str>| {
            let q = find_query(raw);
            (q.group.into_owned(), q.updater_id.into_owned())
        };
        assert_eq!(q(None), (String::new(), String::new()));
        assert_eq!(
            q(Some("group=prod%20eu&updater_id=3f1d&x=1")),
            ("prod eu".into(), "3f1d".into())
        );
        assert_eq!(q(Some("updater_id=a+b")), (String::new(), "a b".into()));
        assert_eq!(q(Some("group=&group=dev")), ("dev".into(), String::new()));
        // Seed 000's updaters send their id as `host`.
        assert_eq!(
            q(Some("host=3f1d&group=dev")),
            ("dev".into(), "3f1d".into())
        );
        assert_eq!(q(Some("host=h&updater_id=u")), (String::new(), "u".into()));
        let long = find_query(Some("group=dev&wait=30&seen=%22ab%22"));
        assert_eq!(long.wait.as_deref(), Some("30"));
        assert_eq!(long.seen.as_deref(), Some("\"ab\""));
        let plain = find_query(Some("group=dev"));
        assert!(plain.wait.is_none() && plain.seen.is_none());
    }

    #[test]
    fn query_pairs_decode_as_form_urlencoded_does() {
        for raw in [
            "",
            "&",
            "&&group=dev&",
            "group=dev&updater_id=3f1d9c2e-8a4b-4c6d-9e0f-1a2b3c4d5e6f",
            "group",
            "=x",
            "group=a=b",
            "group=prod%20eu&updater_id=a+b",
            "k%3D=v%26w&x=%zz&y=%",
            "g=%C3%A9t%C3%A9&h=%FF",
            "a+b=c+d&e=f",
        ] {
            let ours: Vec<(String, String)> = query_pairs(raw)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let reference: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            assert_eq!(ours, reference, "{raw:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn query_pairs_match_form_urlencoded_on_any_query(raw in "[a-z=&%+0-9A-F\\x{e9}]{0,40}") {
            let ours: Vec<(String, String)> = query_pairs(&raw)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let reference: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            proptest::prop_assert_eq!(ours, reference);
        }
    }
}
