//! `/v1/resources/{kind}`: read, create, update and delete the config and the version;
//! read the rollout and the reports (written only by ternd). Each kind is its own route
//! so that its access level stands in the router. Each takes `?product=P` (the agent
//! by default: Teleport's resources at their usual keys); writing a product's version
//! or own config adds the product (`products::admit`).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tern_core::api::Deleted;
use tern_core::exposure::ConfigWarning;
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion};
use tern_core::rfd169::Translated;
use tern_core::validate::ResourceError;
use tern_store::Error as StoreError;
use tern_store::Store;

use super::body;
use crate::auth::Access;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::products::{self, ProductQuery};
use crate::resources::{self, Decision, Resource, Stored};
use crate::state::{Resources, Settings, parts_group};

parts_group! {
    /// What writing a resource touches: the resources, the settings (the report period for
    /// the warnings, the release trust) and the write-conflict counter.
    pub(crate) struct Writer {
        res: Resources,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Config,
    Version,
    Rollout,
    Reports,
}

impl Kind {
    /// Who may write it (the rollout and the reports answer 405 to anyone who may read).
    pub(crate) fn write_access(self) -> Access {
        match self {
            Kind::Config => Access::Write,
            Kind::Version => Access::Operator,
            Kind::Rollout | Kind::Reports => Access::Read,
        }
    }
}

/// Every path a kind answers on: its short name and the resource kind names.
pub(crate) const PATHS: &[(Kind, &str)] = &[
    (Kind::Config, "/v1/resources/config"),
    (Kind::Config, "/v1/resources/autoupdate_config"),
    (Kind::Version, "/v1/resources/version"),
    (Kind::Version, "/v1/resources/autoupdate_version"),
    (Kind::Rollout, "/v1/resources/rollout"),
    (Kind::Rollout, "/v1/resources/autoupdate_agent_rollout"),
    (Kind::Reports, "/v1/resources/reports"),
    (Kind::Reports, "/v1/resources/report"),
    (Kind::Reports, "/v1/resources/autoupdate_agent_report"),
    (Kind::Reports, "/v1/resources/autoupdate_agent_reports"),
];

/// `GET /v1/resources/{kind}` for a kind that does not exist.
pub(crate) async fn unknown_kind(Path(k): Path<String>) -> ApiError {
    ApiError::not_found(format!(
        "unknown resource kind {k:?}: one of config, version, rollout, reports"
    ))
}

fn read_only(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "read_only",
        format!("{what} is written only by ternd"),
    )
}

async fn get_one<T: Resource>(
    store: &dyn Store,
    product: &str,
    absent: &str,
) -> ApiResult<Response> {
    match resources::load_for::<T>(store, product).await? {
        Some(s) => Ok(Json(s.value).into_response()),
        None => Err(ApiError::not_found(absent.to_string())),
    }
}

/// How messages name `product`'s resources (nothing for the agent's).
fn of(product: &str) -> String {
    if product == tern_core::product::AGENT {
        String::new()
    } else {
        format!(" of product {product}")
    }
}

/// `GET /v1/resources/{kind}[?product=P]`
pub(crate) async fn get(
    State(store): State<Arc<dyn Store>>,
    kind: Kind,
    Query(q): Query<ProductQuery>,
) -> ApiResult<Response> {
    let product = q.served(store.as_ref()).await?;
    let of = of(product);
    match kind {
        Kind::Config if product != tern_core::product::AGENT => {
            get_one::<AutoUpdateConfig>(
                store.as_ref(),
                product,
                &format!(
                    "product {product} has no autoupdate_config of its own: the shared one applies (without canary analysis; GET /v1/resources/config)"
                ),
            )
            .await
        }
        Kind::Config => {
            get_one::<AutoUpdateConfig>(
                store.as_ref(),
                product,
                "no autoupdate_config exists (the defaults apply: mode enabled, halt-on-error, one group \"default\")",
            )
            .await
        }
        Kind::Version => {
            get_one::<AutoUpdateVersion>(
                store.as_ref(),
                product,
                &format!("no autoupdate_version{of} exists: nothing is being rolled out"),
            )
            .await
        }
        Kind::Rollout => {
            get_one::<AutoUpdateAgentRollout>(
                store.as_ref(),
                product,
                &format!(
                    "no autoupdate_agent_rollout{of} exists (it needs an autoupdate_version and a reconcile)"
                ),
            )
            .await
        }
        Kind::Reports => {
            Ok(Json(resources::reports_for(store.as_ref(), product).await?).into_response())
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WriteQuery {
    #[serde(default)]
    force: bool,
    product: Option<String>,
}

enum WriteMode {
    Create,
    Update,
    Force,
}

impl WriteQuery {
    /// `?force=true` overwrites whatever is there; otherwise the method's own mode.
    fn mode_or(&self, otherwise: WriteMode) -> WriteMode {
        if self.force {
            WriteMode::Force
        } else {
            otherwise
        }
    }
}

/// Resource texts parsed at once. Parsing is CPU work of up to a megabyte: it runs on
/// the blocking pool, never on the async workers that answer find and heartbeats and
/// renew the leader lease, and only this many at a time so that writers cannot take
/// every core.
static PARSE_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

async fn parse<T: Resource + Send + 'static>(
    body: Bytes,
    parse: fn(&str) -> Result<Translated<T>, ResourceError>,
) -> ApiResult<Translated<T>> {
    let _slot = PARSE_SLOTS
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the parse slots are closed"))?;
    tokio::task::spawn_blocking(move || {
        let text = body::text(&body)?;
        parse(text).map_err(|e| ApiError::invalid_resource(format!("invalid {}: {e}", T::KIND)))
    })
    .await
    .map_err(|e| ApiError::internal(format!("parsing the resource failed: {e}")))?
}

async fn write<T: Resource>(
    res: &Resources,
    metrics: &Metrics,
    product: &str,
    value: T,
    mode: WriteMode,
) -> ApiResult<(StatusCode, Stored<T>)> {
    let store = res.store();
    products::admit(store, product).await?;
    let result = match mode {
        WriteMode::Create => match resources::write_for(store, product, &value, None).await {
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
            match resources::write_for(store, product, &value, Some(rev)).await {
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
            let (stored, existed) = resources::read_modify_write(
                store,
                product,
                &metrics.write_conflicts,
                |current: Option<Stored<T>>| {
                    let value = value.clone();
                    async move { Ok(Decision::Put(value, current.is_some())) }
                },
            )
            .await?;
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            let stored =
                stored.ok_or_else(|| ApiError::internal("a forced write stored nothing"))?;
            (code, stored)
        }
    };
    res.after_write().await;
    Ok(result)
}

/// A written resource's answer: the resource, and in `Warning` headers (warn-code 299,
/// as Kubernetes sends its warnings) what its writer should know: how a file in the
/// RFD 169 draft's shape was translated, and the config's groups that would send a new
/// version to all their hosts at once. Text that cannot be a header value is cut to
/// what can.
fn written<T: serde::Serialize>(
    code: StatusCode,
    value: T,
    notes: &[tern_core::rfd169::Note],
    warnings: &[ConfigWarning],
) -> Response {
    let mut response = (code, Json(value)).into_response();
    let lines = notes
        .iter()
        .map(|n| format!("translated: {n}"))
        .chain(warnings.iter().map(|w| w.message.clone()));
    for line in lines {
        let text: String = line
            .chars()
            .map(|c| match c {
                '"' | '\\' => '\'',
                c if c.is_ascii_graphic() || c == ' ' => c,
                _ => '?',
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

async fn put_or_post(
    w: &Writer,
    product: &str,
    kind: Kind,
    body: Bytes,
    mode: WriteMode,
) -> ApiResult<Response> {
    let (now, period) = (w.res.clock.now(), w.settings.report_period);
    match kind {
        Kind::Config => {
            let t = parse(body, tern_core::rfd169::config).await?;
            let (code, s) = write(&w.res, &w.metrics, product, t.resource, mode).await?;
            let warnings =
                resources::all_at_once(w.res.store(), product, Some(&s.value), now, period).await?;
            Ok(written(code, s.value, &t.notes, &warnings))
        }
        Kind::Version => {
            let t = parse(body, tern_core::rfd169::version).await?;
            if let Some(agents) = &t.resource.spec.agents {
                let check = crate::release_check::Check::of(&w.settings, &w.res);
                crate::release_check::require_signed(
                    check,
                    "spec.agents.target_version",
                    &agents.target_version.to_string(),
                )
                .await?;
                crate::release_check::require_not_revoked(
                    check,
                    "spec.agents.start_version",
                    &agents.start_version.to_string(),
                )
                .await?;
            }
            let (code, s) = write(&w.res, &w.metrics, product, t.resource, mode).await?;
            let (config, _) = products::config_in_force(w.res.store(), product).await?;
            let warnings =
                resources::all_at_once(w.res.store(), product, config.as_ref(), now, period)
                    .await?;
            Ok(written(code, s.value, &t.notes, &warnings))
        }
        Kind::Rollout => Err(read_only("autoupdate_agent_rollout")),
        Kind::Reports => Err(read_only("autoupdate_agent_report")),
    }
}

/// `POST /v1/resources/{kind}[?product=P]`: create (409 if it exists; `?force=true`
/// overwrites).
pub(crate) async fn create(
    State(w): State<Writer>,
    kind: Kind,
    Query(q): Query<WriteQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let product = products::named(q.product.as_deref())?;
    put_or_post(&w, product, kind, body, q.mode_or(WriteMode::Create)).await
}

/// `PUT /v1/resources/{kind}[?product=P]`: update at `metadata.revision`
/// (`?force=true`: upsert).
pub(crate) async fn update(
    State(w): State<Writer>,
    kind: Kind,
    Query(q): Query<WriteQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let product = products::named(q.product.as_deref())?;
    put_or_post(&w, product, kind, body, q.mode_or(WriteMode::Update)).await
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeleteQuery {
    revision: Option<String>,
    product: Option<String>,
}

/// `DELETE /v1/resources/{kind}[?revision=N][&product=P]`: deleting a product's version
/// ends its rollout at the next reconcile; once it has neither version nor config of
/// its own, ternd no longer serves it.
pub(crate) async fn delete(
    State(res): State<Resources>,
    kind: Kind,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<Response> {
    let product = products::named(q.product.as_deref())?;
    let (key, name) = match kind {
        Kind::Config => (AutoUpdateConfig::key_of(product), "autoupdate_config"),
        Kind::Version => (AutoUpdateVersion::key_of(product), "autoupdate_version"),
        Kind::Rollout => return Err(read_only("autoupdate_agent_rollout")),
        Kind::Reports => return Err(read_only("autoupdate_agent_report")),
    };
    let of = of(product);
    let expected = q
        .revision
        .as_deref()
        .map(resources::parse_revision)
        .transpose()?;
    match res.store().delete(&key, expected).await {
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::not_found(format!("no {name}{of} exists")));
        }
        Err(StoreError::Conflict { actual, .. }) => {
            return Err(ApiError::conflict(format!(
                "{name}{of} changed since the given revision (now {actual}): read it again"
            )));
        }
        Err(e) => return Err(e.into()),
    }
    res.after_write().await;
    Ok(Json(Deleted {
        deleted: name.to_string(),
    })
    .into_response())
}
