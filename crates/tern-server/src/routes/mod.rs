//! The HTTP routes of ternd, and who may call each: the access level of every route is
//! set here, in [`router`], by a layer that authenticates before any handler runs, so
//! a handler cannot forget it. [`routes`] lists them (method, path, access) for the
//! test that walks every route with every role, and for `docs/api.md`.

pub(crate) mod body;
pub(crate) mod channels;
pub(crate) mod dev;
pub(crate) mod directives;
pub(crate) mod freeze;
pub(crate) mod history;
pub(crate) mod hosts;
pub(crate) mod install;
pub(crate) mod pins;
pub(crate) mod public;
pub(crate) mod resources;
pub(crate) mod status;
pub(crate) mod tokens;
pub(crate) mod transitions;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};

use crate::auth::Access;
use crate::error::ApiError;
use crate::state::{AppState, parts_group};

/// Largest heartbeat body accepted.
pub(crate) const HEARTBEAT_BODY_LIMIT: usize = 16 * 1024;
/// Largest admin request body (resources are small).
pub(crate) const ADMIN_BODY_LIMIT: usize = 1024 * 1024;

/// One route as served: a method on a path, and who may call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteAccess {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
}

type Handler = MethodRouter<AppState>;

/// The router being built, with the access table it serves.
struct Routes {
    /// What every route's access layer checks with: one for the router, so that a
    /// request costs the layer one reference count (a heartbeat is the hot path).
    gate: Arc<Gate>,
    /// The client-address limits of the downloads.
    limits: Arc<crate::ratelimit::RateLimits>,
    router: Router<AppState>,
    table: Vec<RouteAccess>,
}

impl Routes {
    /// Serves `path` with one handler per method, each behind the layer checking its
    /// access level.
    fn route(self, path: &'static str, methods: Vec<(Method, Access, Handler)>) -> Self {
        self.route_with(path, methods, |h| h)
    }

    /// [`Routes::route`] with `outer` layers around the access check.
    fn route_with(
        self,
        path: &'static str,
        methods: Vec<(Method, Access, Handler)>,
        outer: impl FnOnce(Handler) -> Handler,
    ) -> Self {
        self.route_guarded(path, methods, Guard::Token, outer)
    }

    /// [`Routes::route_with`], the access layer checking `guard`.
    fn route_guarded(
        mut self,
        path: &'static str,
        methods: Vec<(Method, Access, Handler)>,
        guard: Guard,
        outer: impl FnOnce(Handler) -> Handler,
    ) -> Self {
        let mut served: Handler = MethodRouter::new();
        for (method, access, handler) in methods {
            let guarded = match access {
                Access::Public => handler,
                _ => handler.route_layer(middleware::from_fn_with_state(
                    (Arc::clone(&self.gate), access, guard),
                    authorize,
                )),
            };
            served = served.merge(guarded);
            self.table.push(RouteAccess {
                method,
                path,
                access,
            });
        }
        self.router = self.router.route(path, outer(served));
        self
    }
}

/// What the access layer checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Guard {
    /// The token, for the route's access level.
    Token,
    /// First the client address's rate (heartbeats and joins: `--heartbeat-rate`), then
    /// the token; answers other than success count as rejected heartbeats. One layer,
    /// not two: a heartbeat is the hot path, and each `from_fn` layer costs a boxed
    /// future and a clone of the service below it per request.
    AddressRateThenToken,
}

parts_group! {
    /// What the access layer touches: the tokens and what this replica accepted lately, the
    /// limits and counters of refusals, and the store the audit trail is written to.
    struct Gate {
        store: Arc<dyn tern_store::Store>,
        clock: Arc<dyn crate::clock::Clock>,
        settings: Arc<crate::state::Settings>,
        auth: Arc<crate::auth::Authenticator>,
        limits: Arc<crate::ratelimit::RateLimits>,
        metrics: Arc<crate::metrics::Metrics>,
    }
}

/// Authenticates the request for `access` (401 without a valid token, 403 with a role
/// that may not) before the handler runs, after the client address's rate if `guard`
/// says so. Writes (write, operator and join routes), done or refused for the role, go
/// to the audit trail with the token that sent them; read-level routes never do.
async fn authorize(
    State((gate, access, guard)): State<(Arc<Gate>, Access, Guard)>,
    request: Request,
    next: Next,
) -> Response {
    match guard {
        Guard::Token => authorize_token(&gate, access, request, next).await,
        Guard::AddressRateThenToken => {
            // Before the token: a flood is turned away without hashing what it sends.
            if let Some(refused) = public::address_rate(&gate.limits, &gate.metrics, &request) {
                return refused;
            }
            let response = authorize_token(&gate, access, request, next).await;
            if !response.status().is_success() {
                crate::metrics::Metrics::inc(&gate.metrics.heartbeats_rejected);
            }
            response
        }
    }
}

async fn authorize_token(
    state: &Gate,
    access: Access,
    mut request: Request,
    next: Next,
) -> Response {
    let admin = matches!(access, Access::Read | Access::Write | Access::Operator);
    let now = state.clock.now();
    // A token this replica accepted lately: no store read, so nothing to limit.
    let actor = match state.auth.known(request.headers(), now) {
        Some(actor) => actor,
        None => match authenticate_limited(state, admin, Sent::of(&request), now).await {
            Ok(actor) => actor,
            Err(refused) => return refused,
        },
    };
    // Per token, so that one leaked token cannot flood the store (and the audit
    // trail) while the others go on. Not stored: a flood past the limit would write
    // as much as the one it stops; it is logged and counted instead.
    if admin
        && let Err(wait) = state
            .limits
            .admin
            .check(actor.token_id.clone(), std::time::Instant::now())
    {
        crate::metrics::Metrics::inc(&state.metrics.admin_rate_limited);
        tracing::info!(
            target: "tern::audit",
            token_id = %actor.token_id,
            role = %actor.role,
            method = %request.method(),
            path = %request.uri().path(),
            status = 429,
            "admin request over --admin-rate"
        );
        return ApiError::rate_limited(
            wait,
            format!(
                "token {} is sending admin requests faster than --admin-rate allows: retry in {wait}s",
                actor.token_id
            ),
        )
        .into_response();
    }
    // Only what may change something is audited: writes, operator routes and joins.
    // Heartbeats (the hot path) and read-level routes (a preview is a POST that changes
    // nothing) are not, so that a token that may only read never pushes an accepted
    // action out of the trail; nothing is copied for them.
    let audited = (matches!(access, Access::Write | Access::Operator | Access::Join)
        && !matches!(*request.method(), Method::GET | Method::HEAD))
    .then(|| {
        let uri = request.uri();
        let path = uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), ToString::to_string);
        (request.method().clone(), path)
    });
    let checked = access.check(actor.role).and_then(|()| {
        if actor.is_legacy_shared_agent() && state.settings.security.refuses_shared_agent_token() {
            Err(shared_token_refused(&actor.token_id))
        } else {
            Ok(())
        }
    });
    let (mut response, actor) = match checked {
        Ok(()) => {
            let kept = audited.as_ref().map(|_| actor.clone());
            request.extensions_mut().insert(actor);
            (next.run(request).await, kept)
        }
        Err(e) => (e.into_response(), Some(actor)),
    };
    // An answer to a token is for that token only: no cache, shared or the browser's,
    // keeps it (a proxy would serve one operator's view to the next caller).
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    if let (Some((method, path)), Some(actor)) = (audited, actor) {
        crate::audit::record(
            state.store.as_ref(),
            state.clock.now(),
            &state.settings.replica_id,
            &actor,
            method.as_str(),
            &path,
            response.status().as_u16(),
        )
        .await;
    }
    response
}

/// What authentication reads of a request (the body stays out: it is not `Sync`).
#[derive(Clone, Copy)]
struct Sent<'a> {
    headers: &'a axum::http::HeaderMap,
    method: &'a Method,
    uri: &'a axum::http::Uri,
    address: Option<std::net::IpAddr>,
}

impl<'a> Sent<'a> {
    fn of(request: &'a Request) -> Self {
        Self {
            headers: request.headers(),
            method: request.method(),
            uri: request.uri(),
            address: request
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        }
    }
}

/// Authenticates a request whose token this replica has not accepted lately (a store
/// read). On an admin route, the client address's allowance of refused
/// authentications (`--auth-failure-rate`) is taken first and given back when the
/// token is accepted: an address that keeps sending tokens that are refused waits
/// (429) before its next one costs a store read. Every refusal is counted and logged
/// (at a bounded rate). `Err` is the answer.
async fn authenticate_limited(
    state: &Gate,
    admin: bool,
    request: Sent<'_>,
    now: jiff::Timestamp,
) -> Result<Arc<crate::auth::Actor>, Response> {
    let address = request.address;
    let limited = address.filter(|_| admin);
    if let Some(ip) = limited
        && let Err(wait) = state
            .limits
            .auth_failures
            .check(ip, std::time::Instant::now())
    {
        crate::metrics::Metrics::inc(&state.metrics.auth_address_limited);
        return Err(ApiError::rate_limited(
            wait,
            format!(
                "too many refused tokens from {ip} (--auth-failure-rate): retry in {wait}s with a valid token"
            ),
        )
        .into_response());
    }
    match state
        .auth
        .authenticate(state.store.as_ref(), request.headers, now)
        .await
    {
        Ok(actor) => {
            if let Some(ip) = limited {
                state.limits.auth_failures.give_back(&ip);
            }
            Ok(actor)
        }
        Err(e) if e.status == axum::http::StatusCode::UNAUTHORIZED => {
            crate::metrics::Metrics::inc(&state.metrics.auth_refused);
            if let Some(held_back) = state.limits.refusal_log.admit(std::time::Instant::now()) {
                tracing::warn!(
                    target: "tern::audit",
                    address = %address.map_or_else(|| "unknown".to_string(), |a| a.to_string()),
                    token_id = %crate::auth::presented_id(request.headers).unwrap_or_default(),
                    method = %request.method,
                    path = %request.uri.path(),
                    status = 401,
                    reason = %e.message,
                    held_back,
                    "refused authentication (held_back: refusals not logged since the last line; all are counted in tern_auth_refused_total)"
                );
            }
            Err(e.into_response())
        }
        Err(e) => {
            // Not a refusal (the store is down): it does not count against the address.
            if let Some(ip) = limited {
                state.limits.auth_failures.give_back(&ip);
            }
            Err(e.into_response())
        }
    }
}

/// 403 `shared_token_refused`: the shared agent token of earlier releases, on a ternd
/// that refuses it (`--shared-agent-token`).
fn shared_token_refused(token_id: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::FORBIDDEN,
        "shared_token_refused",
        format!(
            "token {token_id} is a shared agent token (it may speak for any host), and this ternd refuses those (the default on a new data dir): enroll the host with a join token (ternctl tokens create --role join; tern-update enable --join-token-file), or start ternd with --shared-agent-token allow while hosts move to their own credentials"
        ),
    )
}

/// Every route with its access level, as [`router`] serves them.
pub fn routes(state: &AppState) -> Vec<RouteAccess> {
    build(state).table
}

pub(crate) fn router(state: &AppState) -> Router {
    build(state)
        .router
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(ADMIN_BODY_LIMIT))
        .with_state(state.clone())
}

fn build(state: &AppState) -> Routes {
    let dev = state.clock.as_dev().is_some();
    let r = Routes {
        gate: Arc::new(Gate::of(state)),
        limits: Arc::clone(&state.limits),
        router: Router::new(),
        table: Vec::new(),
    };
    let r = admin(resources(public(r)));
    if dev { dev_routes(r) } else { r }
}

/// No token: the dashboard's files, health, metrics, find, channels, the installer;
/// and the agents' heartbeats.
fn public(r: Routes) -> Routes {
    use Access::{Agent, Join, Public};
    use Method as M;
    let download_limits = Arc::clone(&r.limits);
    r.route("/", vec![(M::GET, Public, get(crate::dashboard::index))])
        .route(
            "/dashboard/{file}",
            vec![(M::GET, Public, get(crate::dashboard::file))],
        )
        .route("/healthz", vec![(M::GET, Public, get(public::healthz))])
        .route("/readyz", vec![(M::GET, Public, get(public::readyz))])
        .route("/metrics", vec![(M::GET, Public, get(public::metrics))])
        .route("/v1/webapi/find", vec![(M::GET, Public, get(public::find))])
        // Teleport's clients: `webclient.Find` and `Ping` ask without `/v1` (the ping
        // answer is find's: its `auto_update` part is what an updater reads), the RFD
        // 109 upgraders ask the version server's paths.
        .route("/webapi/find", vec![(M::GET, Public, get(public::find))])
        .route("/webapi/ping", vec![(M::GET, Public, get(public::find))])
        .route("/v1/webapi/ping", vec![(M::GET, Public, get(public::find))])
        .route(
            "/v1/webapi/automaticupgrades/channel/{*request}",
            vec![(M::GET, Public, get(public::teleport_channel))],
        )
        .route(
            "/webapi/automaticupgrades/channel/{*request}",
            vec![(M::GET, Public, get(public::teleport_channel))],
        )
        .route(
            "/v1/channels/{name}/{what}",
            vec![(M::GET, Public, get(public::channel_value))],
        )
        // Seed 001's own path for a channel (`/v1/cloud-stable/version`); any fixed
        // path of the API takes precedence over it.
        .route_with(
            "/v1/{name}/{what}",
            vec![(M::GET, Public, get(public::channel_value))],
            // Another method on such a path is a path that does not exist (e.g. the dev
            // routes of a ternd without a dev clock), not a 405 of the alias.
            |h| h.fallback(|| async { ApiError::not_found("no such endpoint") }),
        )
        .route(
            "/v1/agents/schedule",
            vec![(M::GET, Public, get(public::schedule))],
        )
        .route_guarded(
            "/v1/agents/heartbeat",
            vec![(M::POST, Agent, post(public::heartbeat))],
            // The rate limit and the refusal count come before the token check.
            Guard::AddressRateThenToken,
            |h| h.layer(DefaultBodyLimit::max(HEARTBEAT_BODY_LIMIT)),
        )
        .route("/install.sh", vec![(M::GET, Public, get(install::script))])
        .route_with(
            "/downloads/tern-update/{file}",
            vec![(M::GET, Public, get(install::binary))],
            // Megabytes per request, to anyone: limited per client address like joins.
            |h| {
                h.layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(
                    download_limits,
                    install::download_guard,
                ))
            },
        )
        .route_guarded(
            "/v1/agents/join",
            vec![(M::POST, Join, post(hosts::join))],
            // Limited like heartbeats, per client address.
            Guard::AddressRateThenToken,
            |h| h.layer(DefaultBodyLimit::max(HEARTBEAT_BODY_LIMIT)),
        )
}

/// `/v1/resources/{kind}`: each kind on its own paths, so that its levels stand here
/// (anyone who may read may read any kind; writing the config needs `Write`, the
/// version `Operator`; the rollout and reports answer 405 to writes).
fn resources(mut r: Routes) -> Routes {
    use Method as M;
    type WriteQ = Query<resources::WriteQuery>;
    type W = State<resources::Writer>;
    for &(kind, path) in resources::PATHS {
        let write = kind.write_access();
        r = r.route(
            path,
            vec![
                (
                    M::GET,
                    Access::Read,
                    get(
                        move |s: State<Arc<dyn tern_store::Store>>,
                              q: Query<crate::products::ProductQuery>| {
                            resources::get(s, kind, q)
                        },
                    ),
                ),
                (
                    M::POST,
                    write,
                    post(move |w: W, q: WriteQ, b: Bytes| resources::create(w, kind, q, b)),
                ),
                (
                    M::PUT,
                    write,
                    put(move |w: W, q: WriteQ, b: Bytes| resources::update(w, kind, q, b)),
                ),
                (
                    M::DELETE,
                    write,
                    delete(
                        move |s: State<crate::state::Resources>,
                              q: Query<resources::DeleteQuery>| {
                            resources::delete(s, kind, q)
                        },
                    ),
                ),
            ],
        );
    }
    r.route(
        "/v1/resources/{kind}",
        vec![(M::GET, Access::Read, get(resources::unknown_kind))],
    )
}

/// The admin API: status, transitions (and their previews), modes, new-rollout (each
/// for one product, `?product=P`), products, inventory, tokens, whoami, channels.
fn admin(r: Routes) -> Routes {
    use Access::{Operator, Read, Write};
    use Method as M;
    let one = |method: Method, access: Access, handler: Handler| vec![(method, access, handler)];
    r.route("/v1/agents/status", one(M::GET, Read, get(status::status)))
        .route("/v1/agents/report", one(M::GET, Read, get(status::report)))
        .route("/v1/products", one(M::GET, Read, get(status::products)))
        .route(
            "/v1/agents/history",
            one(M::GET, Read, get(history::rollouts)),
        )
        .route(
            "/v1/agents/start-update",
            one(M::POST, Write, post(transitions::start_update)),
        )
        .route(
            "/v1/agents/mark-done",
            one(M::POST, Write, post(transitions::mark_done)),
        )
        .route(
            "/v1/agents/rollback",
            one(M::POST, Write, post(transitions::rollback)),
        )
        .route(
            "/v1/agents/reset",
            one(M::POST, Write, post(transitions::reset)),
        )
        .route(
            "/v1/agents/suspend",
            one(M::POST, Write, post(transitions::suspend)),
        )
        .route(
            "/v1/agents/resume",
            one(M::POST, Write, post(transitions::resume)),
        )
        .route(
            "/v1/agents/{action}",
            one(M::POST, Write, post(transitions::unknown_action)),
        )
        .route(
            "/v1/agents/new-rollout",
            one(M::POST, Operator, post(transitions::new_rollout)),
        )
        // Stopping is the safe direction: any writer may freeze in an incident; only an
        // operator lifts it.
        .route(
            "/v1/freeze",
            vec![
                (M::GET, Read, get(freeze::get)),
                (M::PUT, Write, put(freeze::put)),
                (M::DELETE, Operator, delete(freeze::delete)),
            ],
        )
        .route("/v1/inventory", one(M::GET, Read, get(status::inventory)))
        .route("/v1/audit", one(M::GET, Read, get(audit_trail)))
        .route(
            "/v1/releases/signed",
            one(M::GET, Read, get(status::release_signed)),
        )
        .route("/v1/pins", one(M::GET, Read, get(pins::list)))
        .route(
            "/v1/inventory/{updater_id}/pin",
            vec![
                (M::PUT, Write, put(pins::put)),
                (M::DELETE, Write, delete(pins::delete)),
            ],
        )
        .route(
            "/v1/inventory/{updater_id}",
            vec![
                (M::GET, Read, get(status::host)),
                (M::DELETE, Operator, delete(hosts::revoke)),
            ],
        )
        .route("/v1/whoami", one(M::GET, Read, get(tokens::whoami)))
        .route(
            "/v1/preview/{action}",
            one(M::POST, Read, post(transitions::preview)),
        )
        .route(
            "/v1/tokens",
            vec![
                (M::GET, Operator, get(tokens::list)),
                (M::POST, Operator, post(tokens::create)),
            ],
        )
        .route(
            "/v1/tokens/{id}",
            one(M::DELETE, Operator, delete(tokens::delete)),
        )
        .route("/v1/directives", one(M::GET, Read, get(directives::status)))
        .route(
            "/v1/directives/installers",
            one(M::GET, Read, get(directives::installers)),
        )
        .route(
            "/v1/directives/installers/{name}",
            vec![
                (M::GET, Read, get(directives::get_installer)),
                (M::PUT, Operator, put(directives::put_installer)),
                (M::DELETE, Operator, delete(directives::delete_installer)),
            ],
        )
        .route(
            "/v1/directives/config",
            vec![
                (M::GET, Read, get(directives::get_config)),
                (M::PUT, Operator, put(directives::put_config)),
            ],
        )
        .route(
            "/v1/directives/active",
            vec![
                (M::GET, Read, get(directives::get_active)),
                (M::DELETE, Operator, delete(directives::delete_active)),
            ],
        )
        .route(
            "/v1/directives/drafts/{name}",
            vec![
                (M::GET, Read, get(directives::get_draft)),
                (M::PUT, Operator, put(directives::put_draft)),
                (M::DELETE, Operator, delete(directives::delete_draft)),
            ],
        )
        .route(
            "/v1/directives/plan",
            vec![
                (M::GET, Read, get(directives::get_plan)),
                (M::POST, Operator, post(directives::plan)),
                (M::DELETE, Operator, delete(directives::cancel_plan)),
            ],
        )
        .route(
            "/v1/directives/apply",
            one(M::POST, Operator, post(directives::apply)),
        )
        .route(
            "/v1/directives/resume",
            one(M::POST, Operator, post(directives::resume)),
        )
        .route("/v1/channels", one(M::GET, Read, get(channels::list)))
        .route(
            "/v1/channels/{name}",
            vec![
                (M::PUT, Operator, put(channels::set)),
                (M::DELETE, Operator, delete(channels::delete)),
            ],
        )
}

/// Only under `--dev-clock`: read and move the clock, reconcile now.
fn dev_routes(r: Routes) -> Routes {
    use Access::{Operator, Read};
    use Method as M;
    r.route(
        "/v1/dev/clock",
        vec![
            (M::GET, Read, get(dev::get_clock)),
            (M::POST, Operator, post(dev::set_clock)),
        ],
    )
    .route(
        "/v1/dev/reconcile",
        vec![(M::POST, Operator, post(dev::reconcile))],
    )
    .route(
        "/v1/dev/directives",
        vec![(M::POST, Operator, post(directives::dev_pass))],
    )
    .route(
        "/v1/dev/controllers",
        vec![(M::POST, Operator, post(directives::dev_controllers))],
    )
}

#[derive(Debug, Default, serde::Deserialize)]
struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /v1/audit[?limit=N]`: the newest N (default 100; at most what is kept, about
/// 1000 of each) admin writes and token changes that were accepted, and the newest N
/// refused, oldest first. A large N shows every record the trail keeps, the quiet
/// tokens' older actions among them.
async fn audit_trail(
    State(store): State<Arc<dyn tern_store::Store>>,
    Query(q): Query<AuditQuery>,
) -> crate::error::ApiResult<axum::Json<Vec<tern_core::api::AuditRecord>>> {
    let limit = q.limit.unwrap_or(100);
    Ok(axum::Json(crate::audit::list(store.as_ref(), limit).await?))
}
