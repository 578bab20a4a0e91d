//! The admin API: resources, manual transitions, status, report, inventory, tokens,
//! channels. Every handler authenticates first (401/403), then validates (400), then
//! writes with compare-and-swap (409 on a stale revision).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use jiff::{SignedDuration, Timestamp};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tern_core::aggregate::Aggregate;
use tern_core::reconcile::group_window;
use tern_core::resource::{
    AgentsVersion, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Canary, GroupState,
    Mode, Omitted, Schedule,
};
use tern_core::transition::{self, Transition, TransitionError};
use tern_core::validate::ResourceError;
use tern_core::version::Version;
use tern_store::{Error as StoreError, Revision};

use crate::auth::{self, Access, Role};
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::reconciler::{EventView, describe};
use crate::resources::{self, Resource, Stored};
use crate::snapshot::Channel;
use crate::state::AppState;

const RETRIES: usize = 5;

fn json_body<T: DeserializeOwned + Default>(body: &[u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

fn body_text(body: &[u8]) -> ApiResult<&str> {
    std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid_resource("the resource is not UTF-8 text (YAML or JSON)"))
}

fn is_conflict(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Conflict { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::NotFound { .. }
    )
}

// ---------------------------------------------------------------------------
// resources

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Config,
    Version,
    Rollout,
    Reports,
}

fn kind(s: &str) -> ApiResult<Kind> {
    match s {
        "config" | "autoupdate_config" => Ok(Kind::Config),
        "version" | "autoupdate_version" => Ok(Kind::Version),
        "rollout" | "autoupdate_agent_rollout" => Ok(Kind::Rollout),
        "reports" | "report" | "autoupdate_agent_report" | "autoupdate_agent_reports" => {
            Ok(Kind::Reports)
        }
        _ => Err(ApiError::not_found(format!(
            "unknown resource kind {s:?}: one of config, version, rollout, reports"
        ))),
    }
}

fn read_only(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "read_only",
        format!("{what} is written only by ternd"),
    )
}

async fn get_one<T: Resource>(state: &AppState, absent: &str) -> ApiResult<Response> {
    match resources::load::<T>(state.store()).await? {
        Some(s) => Ok(Json(s.value).into_response()),
        None => Err(ApiError::not_found(absent.to_string())),
    }
}

/// `GET /v1/resources/{kind}`
pub async fn get_resource(
    State(state): State<Arc<AppState>>,
    Path(k): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Read)
        .await?;
    match kind(&k)? {
        Kind::Config => {
            get_one::<AutoUpdateConfig>(
                &state,
                "no autoupdate_config exists (the defaults apply: mode enabled, halt-on-error, one group \"default\")",
            )
            .await
        }
        Kind::Version => {
            get_one::<AutoUpdateVersion>(
                &state,
                "no autoupdate_version exists: nothing is being rolled out",
            )
            .await
        }
        Kind::Rollout => {
            get_one::<AutoUpdateAgentRollout>(
                &state,
                "no autoupdate_agent_rollout exists (it needs an autoupdate_version and a reconcile)",
            )
            .await
        }
        Kind::Reports => Ok(Json(resources::reports(state.store()).await?).into_response()),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct WriteQuery {
    #[serde(default)]
    force: bool,
}

enum WriteMode {
    Create,
    Update,
    Force,
}

fn parse_resource<T: Resource>(
    text: &str,
    parse: fn(&str) -> Result<T, ResourceError>,
) -> ApiResult<T> {
    parse(text).map_err(|e| ApiError::invalid_resource(format!("invalid {}: {e}", T::KIND)))
}

async fn write_resource<T: Resource>(
    state: &AppState,
    value: T,
    mode: WriteMode,
) -> ApiResult<(StatusCode, Stored<T>)> {
    let store = state.store();
    let result = match mode {
        WriteMode::Create => match resources::write(store, &value, None).await {
            Ok(s) => (StatusCode::CREATED, s),
            Err(StoreError::AlreadyExists { .. }) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "already_exists",
                    format!(
                        "{} already exists: update it (give metadata.revision) or overwrite it (force)",
                        T::KIND
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        },
        WriteMode::Update => {
            let Some(rev) = value.metadata().revision.as_deref() else {
                return Err(ApiError::invalid_resource(format!(
                    "metadata.revision: missing; updating {} needs the revision it was read at (or force)",
                    T::KIND
                )));
            };
            let rev = resources::parse_revision(rev)?;
            match resources::write(store, &value, Some(rev)).await {
                Ok(s) => (StatusCode::OK, s),
                Err(StoreError::NotFound { .. }) => {
                    return Err(ApiError::conflict(format!(
                        "{} no longer exists (revision {rev} is stale): create it again",
                        T::KIND
                    )));
                }
                Err(StoreError::Conflict { actual, .. }) => {
                    return Err(ApiError::conflict(format!(
                        "{} changed since revision {rev} (now {actual}): read it again, reapply your change and retry",
                        T::KIND
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        WriteMode::Force => {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let current: Option<Revision> =
                    resources::load::<T>(store).await?.map(|s| s.revision);
                match resources::write(store, &value, current).await {
                    Ok(s) => {
                        let code = if current.is_some() {
                            StatusCode::OK
                        } else {
                            StatusCode::CREATED
                        };
                        break (code, s);
                    }
                    Err(e) if is_conflict(&e) && attempt < RETRIES => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    state.after_write().await;
    Ok(result)
}

async fn put_or_post(
    state: &AppState,
    k: &str,
    headers: &HeaderMap,
    body: &[u8],
    mode: WriteMode,
) -> ApiResult<Response> {
    let k = kind(k)?;
    let access = match k {
        Kind::Config => Access::Write,
        Kind::Version => Access::Operator,
        Kind::Rollout => return Err(read_only("autoupdate_agent_rollout")),
        Kind::Reports => return Err(read_only("autoupdate_agent_report")),
    };
    state.auth.require(state.store(), headers, access).await?;
    let text = body_text(body)?;
    match k {
        Kind::Config => {
            let v = parse_resource(text, AutoUpdateConfig::from_text)?;
            let (code, s) = write_resource(state, v, mode).await?;
            Ok((code, Json(s.value)).into_response())
        }
        _ => {
            let v = parse_resource(text, AutoUpdateVersion::from_text)?;
            let (code, s) = write_resource(state, v, mode).await?;
            Ok((code, Json(s.value)).into_response())
        }
    }
}

/// `POST /v1/resources/{kind}`: create (409 if it exists; `?force=true` overwrites).
pub async fn create_resource(
    State(state): State<Arc<AppState>>,
    Path(k): Path<String>,
    Query(q): Query<WriteQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let mode = if q.force {
        WriteMode::Force
    } else {
        WriteMode::Create
    };
    put_or_post(&state, &k, &headers, &body, mode).await
}

/// `PUT /v1/resources/{kind}`: update at `metadata.revision` (`?force=true`: upsert).
pub async fn update_resource(
    State(state): State<Arc<AppState>>,
    Path(k): Path<String>,
    Query(q): Query<WriteQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let mode = if q.force {
        WriteMode::Force
    } else {
        WriteMode::Update
    };
    put_or_post(&state, &k, &headers, &body, mode).await
}

#[derive(Debug, Default, Deserialize)]
pub struct DeleteQuery {
    revision: Option<String>,
}

/// `DELETE /v1/resources/{kind}[?revision=N]`
pub async fn delete_resource(
    State(state): State<Arc<AppState>>,
    Path(k): Path<String>,
    Query(q): Query<DeleteQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (key, access, name) = match kind(&k)? {
        Kind::Config => (keys::CONFIG, Access::Write, "autoupdate_config"),
        Kind::Version => (keys::VERSION, Access::Operator, "autoupdate_version"),
        Kind::Rollout => return Err(read_only("autoupdate_agent_rollout")),
        Kind::Reports => return Err(read_only("autoupdate_agent_report")),
    };
    state.auth.require(state.store(), &headers, access).await?;
    let expected = q
        .revision
        .as_deref()
        .map(resources::parse_revision)
        .transpose()?;
    match state.store().delete(key, expected).await {
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("no {name} exists")));
        }
        Err(StoreError::Conflict { actual, .. }) => {
            return Err(ApiError::conflict(format!(
                "{name} changed since the given revision (now {actual}): read it again"
            )));
        }
        Err(e) => return Err(e.into()),
    }
    state.after_write().await;
    Ok(Json(serde_json::json!({ "deleted": name })).into_response())
}

// ---------------------------------------------------------------------------
// modes

#[derive(Clone, Debug, Serialize)]
pub struct Modes {
    /// The mode in force: the most restrictive of the two.
    pub mode: Mode,
    pub config_mode: Mode,
    pub version_mode: Mode,
}

async fn modes(state: &AppState) -> ApiResult<Modes> {
    let c = resources::load::<AutoUpdateConfig>(state.store()).await?;
    let v = resources::load::<AutoUpdateVersion>(state.store()).await?;
    let config_mode = c.map_or(Mode::Enabled, |s| s.value.mode());
    let version_mode = v.map_or(Mode::Enabled, |s| s.value.mode());
    Ok(Modes {
        mode: config_mode.combine(version_mode),
        config_mode,
        version_mode,
    })
}

#[derive(Debug, Serialize)]
pub struct ModeResponse {
    #[serde(flatten)]
    pub modes: Modes,
    /// False when the config already had that mode.
    pub changed: bool,
}

async fn set_mode(state: &AppState, headers: &HeaderMap, mode: Mode) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), headers, Access::Write)
        .await?;
    let store = state.store();
    let mut attempt = 0;
    let changed = loop {
        attempt += 1;
        let current = resources::load::<AutoUpdateConfig>(store).await?;
        let mut cfg = current
            .as_ref()
            .map_or_else(AutoUpdateConfig::default, |s| s.value.clone());
        if current.is_some() && cfg.mode() == mode {
            break false;
        }
        cfg.spec.agents.get_or_insert_with(Default::default).mode = Some(mode);
        match resources::write(store, &cfg, current.map(|s| s.revision)).await {
            Ok(_) => break true,
            Err(e) if is_conflict(&e) && attempt < RETRIES => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if changed {
        tracing::info!(mode = mode.as_str(), "config mode set");
        state.after_write().await;
    }
    let modes = modes(state).await?;
    Ok(Json(ModeResponse { modes, changed }).into_response())
}

/// `POST /v1/agents/suspend`
pub async fn suspend(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    set_mode(&state, &headers, Mode::Suspended).await
}

/// `POST /v1/agents/resume`
pub async fn resume(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult<Response> {
    set_mode(&state, &headers, Mode::Enabled).await
}

// ---------------------------------------------------------------------------
// manual transitions

#[derive(Debug, Default, Deserialize)]
pub struct TransitionBody {
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Serialize)]
pub struct TransitionResponse {
    /// The groups that changed, with their new state.
    pub groups: Vec<ChangedGroup>,
    pub events: Vec<EventView>,
    #[serde(flatten)]
    pub modes: Modes,
    pub rollout: AutoUpdateAgentRollout,
}

#[derive(Debug, Serialize)]
pub struct ChangedGroup {
    pub name: String,
    pub from: GroupState,
    pub to: GroupState,
}

fn transition_error(e: TransitionError) -> ApiError {
    match e {
        TransitionError::UnknownGroup { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_group", e.to_string())
        }
        _ => ApiError::new(StatusCode::BAD_REQUEST, "invalid_transition", e.to_string()),
    }
}

async fn run_transition(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    action: &str,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), headers, Access::Write)
        .await?;
    let b: TransitionBody = json_body(body)?;
    let t = match action {
        "start-update" => Transition::StartUpdate {
            groups: b.groups,
            force: b.force,
        },
        "mark-done" => Transition::MarkDone { groups: b.groups },
        _ => Transition::Rollback { groups: b.groups },
    };
    let store = state.store();
    let mut attempt = 0;
    let (stored, events) = loop {
        attempt += 1;
        let Some(current) = resources::load::<AutoUpdateAgentRollout>(store).await? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "no_rollout",
                "no rollout exists: create one with `ternctl agents new-rollout VERSION` and wait for a reconcile",
            ));
        };
        let now = state.clock.now();
        let (next, events) =
            transition::apply(&current.value, &t, now).map_err(transition_error)?;
        match resources::write(store, &next, Some(current.revision)).await {
            Ok(s) => break (s, events),
            Err(e) if is_conflict(&e) && attempt < RETRIES => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let groups = events
        .iter()
        .filter_map(|e| match e {
            tern_core::reconcile::Event::GroupChanged {
                group, from, to, ..
            } => Some(ChangedGroup {
                name: group.clone(),
                from: *from,
                to: *to,
            }),
            _ => None,
        })
        .collect();
    let events: Vec<EventView> = events.iter().map(describe).collect();
    for e in &events {
        state.metrics.event(e.kind);
        tracing::info!(event = e.kind, action, "{}", e.message);
    }
    state.after_write().await;
    let modes = modes(state).await?;
    Ok(Json(TransitionResponse {
        groups,
        events,
        modes,
        rollout: stored.value,
    })
    .into_response())
}

/// `POST /v1/agents/{action}` for start-update, mark-done, rollback.
pub async fn start_update(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    run_transition(&state, &headers, &body, "start-update").await
}

pub async fn mark_done(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    run_transition(&state, &headers, &body, "mark-done").await
}

pub async fn rollback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    run_transition(&state, &headers, &body, "rollback").await
}

// ---------------------------------------------------------------------------
// new-rollout

#[derive(Debug, Default, Deserialize)]
pub struct NewRolloutBody {
    #[serde(default)]
    version: String,
    #[serde(default)]
    current_version: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct NewRolloutResponse {
    pub start_version: String,
    pub target_version: String,
    /// False when the autoupdate_version already asked for exactly this.
    pub changed: bool,
    pub version: AutoUpdateVersion,
}

fn parse_version(field: &str, s: &str) -> ApiResult<Version> {
    Version::parse(s).map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
}

/// `POST /v1/agents/new-rollout` `{"version": V, "current_version": V?}` (operator).
pub async fn new_rollout(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    let b: NewRolloutBody = json_body(&body)?;
    if b.version.trim().is_empty() {
        return Err(ApiError::bad_request(
            "version: missing (the version to roll out)",
        ));
    }
    let target = parse_version("version", &b.version)?;
    let given_start = b
        .current_version
        .as_deref()
        .map(|s| parse_version("current_version", s))
        .transpose()?;
    let store = state.store();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = resources::load::<AutoUpdateVersion>(store).await?;
        let rollout = resources::load::<AutoUpdateAgentRollout>(store).await?;
        let current_agents = current.as_ref().and_then(|s| s.value.spec.agents.clone());
        let start = given_start
            .clone()
            .or_else(|| current_agents.as_ref().map(|a| a.target_version.clone()))
            .or_else(|| {
                rollout
                    .as_ref()
                    .map(|r| r.value.spec.target_version.clone())
            })
            .unwrap_or_else(|| target.clone());
        let mut next = current
            .as_ref()
            .map_or_else(|| AutoUpdateVersion::new(None), |s| s.value.clone());
        next.spec.agents = Some(AgentsVersion {
            start_version: start.clone(),
            target_version: target.clone(),
            schedule: current_agents
                .as_ref()
                .map_or(Schedule::Regular, |a| a.schedule),
            mode: current_agents.as_ref().and_then(|a| a.mode),
        });
        next.validate()
            .map_err(|e| ApiError::invalid_resource(format!("invalid autoupdate_version: {e}")))?;
        let changed = current
            .as_ref()
            .is_none_or(|c| !resources::same(&c.value, &next));
        let stored = if changed {
            match resources::write(store, &next, current.map(|s| s.revision)).await {
                Ok(s) => s.value,
                Err(e) if is_conflict(&e) && attempt < RETRIES => continue,
                Err(e) => return Err(e.into()),
            }
        } else {
            current.map_or(next, |c| c.value)
        };
        if changed {
            tracing::info!(%start, %target, "new rollout requested");
            state.after_write().await;
        }
        return Ok(Json(NewRolloutResponse {
            start_version: start.to_string(),
            target_version: target.to_string(),
            changed,
            version: stored,
        })
        .into_response());
    }
}

// ---------------------------------------------------------------------------
// status and report

#[derive(Debug, Serialize)]
pub struct GroupStatus {
    pub name: String,
    pub state: GroupState,
    /// The last group also serves agents with no group or an unknown one.
    pub catch_all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    pub last_update_reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Timestamp>,
    /// Connected agents now (from the live reports).
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    /// Agents when the group started.
    pub initial: u64,
    pub progress: f64,
    pub canary_count: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<Canary>,
    /// When the open window opened, if it is open now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_open_since: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_closes: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Timestamp>,
}

#[derive(Debug, Serialize)]
pub struct StatusResponse {
    pub now: Timestamp,
    #[serde(flatten)]
    pub modes: Modes,
    pub rollout: Option<AutoUpdateAgentRollout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rollout_reason: Option<String>,
    pub groups: Vec<GroupStatus>,
    /// All agents in the live reports.
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    pub omitted: Vec<Omitted>,
    pub live_reports: usize,
}

/// `GET /v1/agents/status`
pub async fn status(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Read)
        .await?;
    let store = state.store();
    let now = state.clock.now();
    let modes = modes(&state).await?;
    let rollout = resources::load::<AutoUpdateAgentRollout>(store)
        .await?
        .map(|s| s.value);
    let reports = resources::reports(store).await?;
    let names: Vec<String> = rollout
        .as_ref()
        .map(|r| r.status.groups.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let target = rollout
        .as_ref()
        .map(|r| r.spec.target_version.to_string())
        .unwrap_or_default();
    let agg = Aggregate::from_reports(
        &reports,
        now,
        state.settings.report_period,
        &name_refs,
        &target,
    );
    let mut groups = Vec::new();
    if let Some(r) = &rollout {
        let last = r.status.groups.len().saturating_sub(1);
        for (i, g) in r.status.groups.iter().enumerate() {
            let c = agg.group(&g.name);
            let w = group_window(&r.spec, g);
            let open = w.open_since(now);
            groups.push(GroupStatus {
                name: g.name.clone(),
                state: g.state,
                catch_all: i == last,
                start_time: g.start_time,
                last_update_reason: g.last_update_reason.clone(),
                last_update_time: g.last_update_time,
                present: c.present,
                up_to_date: c.up_to_date,
                failed: c.failed,
                initial: g.initial_count,
                progress: g.progress,
                canary_count: g.canary_count,
                canaries: g.canaries.clone(),
                window_open_since: open,
                window_closes: open.and_then(|o| o.checked_add(w.duration).ok()),
                next_window: w.next_open(now),
            });
        }
    }
    let no_rollout_reason = if rollout.is_some() {
        None
    } else if resources::load::<AutoUpdateVersion>(store).await?.is_none() {
        Some(
            "no autoupdate_version exists: nothing to roll out (ternctl agents new-rollout VERSION)"
                .to_string(),
        )
    } else {
        Some("the rollout has not been created yet: it appears at the next reconcile".to_string())
    };
    let (present, up_to_date, failed) = agg.groups.values().fold((0, 0, 0), |acc, c| {
        (acc.0 + c.present, acc.1 + c.up_to_date, acc.2 + c.failed)
    });
    Ok(Json(StatusResponse {
        now,
        modes,
        rollout,
        no_rollout_reason,
        groups,
        present,
        up_to_date,
        failed,
        omitted: agg.omitted,
        live_reports: agg.live_reports,
    })
    .into_response())
}

#[derive(Debug, Serialize)]
pub struct GroupVersions {
    pub versions: BTreeMap<String, u64>,
    pub total: u64,
    pub failed: u64,
}

#[derive(Debug, Serialize)]
pub struct ReportResponse {
    pub now: Timestamp,
    /// Replicas whose report is live (at most two report periods old).
    pub replicas: Vec<String>,
    /// Agents per group (as the agents present it; "" = no group) and version.
    pub groups: BTreeMap<String, GroupVersions>,
    pub total: u64,
    pub omitted: Vec<Omitted>,
}

/// `GET /v1/agents/report`: the sum of the live reports.
pub async fn report(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Read)
        .await?;
    let now = state.clock.now();
    let period = state.settings.report_period;
    let reports = resources::reports(state.store()).await?;
    let agg = Aggregate::from_reports(&reports, now, period, &[], "");
    let max_age = period.saturating_mul(2);
    let replicas = reports
        .iter()
        .filter(|r| now.duration_since(r.spec.timestamp) <= max_age)
        .map(|r| r.metadata.name.clone())
        .collect();
    let mut groups = BTreeMap::new();
    let mut total = 0;
    for (g, versions) in &agg.versions {
        let t: u64 = versions.values().sum();
        total += t;
        groups.insert(
            g.clone(),
            GroupVersions {
                versions: versions.clone(),
                total: t,
                failed: agg.group(g).failed,
            },
        );
    }
    Ok(Json(ReportResponse {
        now,
        replicas,
        groups,
        total,
        omitted: agg.omitted,
    })
    .into_response())
}

// ---------------------------------------------------------------------------
// inventory

#[derive(Debug, Serialize)]
pub struct InventoryEntry {
    pub updater_id: String,
    pub host_id: String,
    pub hostname: String,
    pub group: String,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updater_version: Option<String>,
    pub updater_status: tern_core::wire::UpdaterStatus,
    pub healthy: bool,
    pub rollback: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    /// Connected for one report period.
    pub settled: bool,
    /// Counted in this replica's report (settled, with an updater_id, updates enabled);
    /// otherwise it is under the report's `omitted`.
    pub counted: bool,
}

#[derive(Debug, Serialize)]
pub struct InventoryResponse {
    pub replica: String,
    pub now: Timestamp,
    pub agents: Vec<InventoryEntry>,
}

/// `GET /v1/inventory`: the agents connected to this replica.
pub async fn inventory(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Read)
        .await?;
    let now = state.clock.now();
    let period: SignedDuration = state.settings.report_period;
    let mut agents: Vec<InventoryEntry> = {
        let mut inv = state.inventory();
        inv.expire(std::time::Instant::now(), state.settings.max_silence());
        inv.agents()
            .map(|a| {
                let a = a.to_inventory_agent();
                let settled = tern_core::inventory::AgentView::settled(&a, now, period);
                let hb = a.heartbeat;
                InventoryEntry {
                    counted: settled
                        && !hb.updater_id.is_empty()
                        && hb.updater_status == tern_core::wire::UpdaterStatus::Enabled,
                    updater_id: hb.updater_id,
                    host_id: hb.host_id,
                    hostname: hb.hostname,
                    group: hb.group,
                    version: hb.version,
                    updater_version: hb.updater_version,
                    updater_status: hb.updater_status,
                    healthy: hb.healthy,
                    rollback: hb.rollback,
                    failed_version: hb.failed_version,
                    first_seen: a.first_seen,
                    last_seen: a.last_seen,
                    settled,
                }
            })
            .collect()
    };
    agents.sort_by(|a, b| {
        (&a.group, &a.hostname, &a.updater_id).cmp(&(&b.group, &b.hostname, &b.updater_id))
    });
    Ok(Json(InventoryResponse {
        replica: state.settings.replica_id.clone(),
        now,
        agents,
    })
    .into_response())
}

// ---------------------------------------------------------------------------
// tokens

#[derive(Debug, Default, Deserialize)]
pub struct TokenBody {
    #[serde(default)]
    role: String,
    #[serde(default)]
    description: String,
}

#[derive(Debug, Serialize)]
pub struct TokenView {
    pub id: String,
    pub role: Role,
    pub created: Timestamp,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

#[derive(Debug, Serialize)]
pub struct NewTokenResponse {
    /// Shown once: ternd keeps only its hash.
    pub token: String,
    #[serde(flatten)]
    pub view: TokenView,
}

/// Stores a new token of `role`; returns it in clear (the only time).
pub async fn store_new_token(
    state_store: &dyn tern_store::Store,
    role: Role,
    description: &str,
    now: Timestamp,
) -> ApiResult<auth::NewToken> {
    let t = auth::mint(role, description, now)?;
    let bytes = serde_json::to_vec(&t.record)
        .map_err(|e| ApiError::internal(format!("encoding a token record: {e}")))?;
    state_store
        .create(&keys::token(&t.record.id), bytes, None)
        .await?;
    Ok(t)
}

/// `POST /v1/tokens` `{"role", "description"}` (operator).
pub async fn create_token(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    let b: TokenBody = json_body(&body)?;
    let role = Role::parse(&b.role).ok_or_else(|| {
        ApiError::bad_request(format!(
            "role: {:?} is not a role (operator, user, viewer or agent)",
            b.role
        ))
    })?;
    let t = store_new_token(state.store(), role, &b.description, state.clock.now()).await?;
    tracing::info!(id = %t.record.id, role = %role, "token created");
    Ok((
        StatusCode::CREATED,
        Json(NewTokenResponse {
            token: t.token,
            view: TokenView {
                id: t.record.id,
                role,
                created: t.record.created,
                description: t.record.description,
            },
        }),
    )
        .into_response())
}

/// `GET /v1/tokens` (operator): ids and roles, never the tokens.
pub async fn list_tokens(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    let listing = state.store().list(keys::TOKENS_PREFIX).await?;
    let tokens: Vec<TokenView> = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<auth::TokenRecord>(&kv.value).ok())
        .map(|r| TokenView {
            id: r.id,
            role: r.role,
            created: r.created,
            description: r.description,
        })
        .collect();
    Ok(Json(tokens).into_response())
}

/// `DELETE /v1/tokens/{id}` (operator).
pub async fn delete_token(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    delete_or_404(&state, &keys::token(&id), || {
        format!("no token with id {id:?}")
    })
    .await?;
    state.auth.forget(&id);
    Ok(Json(serde_json::json!({ "deleted": id })).into_response())
}

// ---------------------------------------------------------------------------
// channels

#[derive(Debug, Default, Deserialize)]
pub struct ChannelBody {
    #[serde(default)]
    version: String,
    #[serde(default)]
    critical: bool,
}

/// `GET /v1/channels` (read).
pub async fn list_channels(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Read)
        .await?;
    let listing = state.store().list(keys::CHANNELS_PREFIX).await?;
    let channels: Vec<Channel> = listing
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    Ok(Json(channels).into_response())
}

/// `PUT /v1/channels/{name}` `{"version", "critical"}` (operator).
pub async fn set_channel(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    if !tern_core::validate::is_valid_group_name(&name) {
        return Err(ApiError::bad_request(format!(
            "name: {name:?} is not a valid channel name (letters, digits, '-', '_', '.'; at most 64)"
        )));
    }
    let b: ChannelBody = json_body(&body)?;
    let version = parse_version("version", &b.version)?;
    let channel = Channel {
        name: name.clone(),
        version: version.to_string(),
        critical: b.critical,
        updated: Some(state.clock.now()),
    };
    let bytes = serde_json::to_vec(&channel)
        .map_err(|e| ApiError::internal(format!("encoding a channel: {e}")))?;
    state
        .store()
        .put(&keys::channel(&name), bytes, None)
        .await?;
    state.after_write().await;
    Ok(Json(channel).into_response())
}

/// `DELETE /v1/channels/{name}` (operator).
pub async fn delete_channel(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    state
        .auth
        .require(state.store(), &headers, Access::Operator)
        .await?;
    delete_or_404(&state, &keys::channel(&name), || {
        format!("no channel named {name:?}")
    })
    .await?;
    state.after_write().await;
    Ok(Json(serde_json::json!({ "deleted": name })).into_response())
}

/// Deletes `key`; a missing key is a 404 saying `missing()`.
async fn delete_or_404(
    state: &AppState,
    key: &str,
    missing: impl FnOnce() -> String,
) -> ApiResult<()> {
    match state.store().delete(key, None).await {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound { .. }) => Err(ApiError::not_found(missing())),
        Err(e) => Err(e.into()),
    }
}
