//! The HTTP routes of ternd.

pub mod admin;
pub mod dev;
pub mod public;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};

use crate::error::ApiError;
use crate::state::AppState;

/// Largest heartbeat body accepted.
pub const HEARTBEAT_BODY_LIMIT: usize = 16 * 1024;
/// Largest admin request body (resources are small).
pub const ADMIN_BODY_LIMIT: usize = 1024 * 1024;

pub fn router(state: Arc<AppState>) -> Router {
    let mut r = Router::new()
        .route("/healthz", get(public::healthz))
        .route("/readyz", get(public::readyz))
        .route("/metrics", get(public::metrics))
        .route("/v1/webapi/find", get(public::find))
        .route("/v1/channels/{name}/{what}", get(public::channel_value))
        .route(
            "/v1/agents/heartbeat",
            post(public::heartbeat).layer(DefaultBodyLimit::max(HEARTBEAT_BODY_LIMIT)),
        )
        .route(
            "/v1/resources/{kind}",
            get(admin::get_resource)
                .post(admin::create_resource)
                .put(admin::update_resource)
                .delete(admin::delete_resource),
        )
        .route("/v1/agents/status", get(admin::status))
        .route("/v1/agents/report", get(admin::report))
        .route("/v1/agents/start-update", post(admin::start_update))
        .route("/v1/agents/mark-done", post(admin::mark_done))
        .route("/v1/agents/rollback", post(admin::rollback))
        .route("/v1/agents/suspend", post(admin::suspend))
        .route("/v1/agents/resume", post(admin::resume))
        .route("/v1/agents/new-rollout", post(admin::new_rollout))
        .route("/v1/inventory", get(admin::inventory))
        .route(
            "/v1/tokens",
            get(admin::list_tokens).post(admin::create_token),
        )
        .route("/v1/tokens/{id}", delete(admin::delete_token))
        .route("/v1/channels", get(admin::list_channels))
        .route(
            "/v1/channels/{name}",
            put(admin::set_channel).delete(admin::delete_channel),
        );
    if state.clock.as_dev().is_some() {
        r = r
            .route("/v1/dev/clock", get(dev::get_clock).post(dev::set_clock))
            .route("/v1/dev/reconcile", post(dev::reconcile));
    }
    r.fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(ADMIN_BODY_LIMIT))
        .with_state(state)
}
