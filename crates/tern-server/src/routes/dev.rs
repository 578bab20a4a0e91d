//! `/v1/dev/*`: only mounted when ternd runs with `--dev-clock`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use jiff::Timestamp;
use tern_core::api::{ClockBody, ClockResponse, DevReconcileResponse};
use tern_core::duration::GoDuration;

use crate::clock::{Clock, ClockMove, MoveError, move_shared_clock};
use crate::error::{ApiError, ApiResult};
use crate::reconciler::{self, Reconciler, Reporter};
use crate::state::Resources;

fn dev(clock: &dyn Clock) -> ApiResult<&crate::clock::DevClock> {
    clock
        .as_dev()
        .ok_or_else(|| ApiError::not_found("ternd runs without --dev-clock"))
}

/// `GET /v1/dev/clock`
pub(crate) async fn get_clock(
    State(clock): State<Arc<dyn Clock>>,
) -> ApiResult<Json<ClockResponse>> {
    Ok(Json(ClockResponse {
        now: dev(clock.as_ref())?.now_value(),
    }))
}

/// `POST /v1/dev/clock` `{"set": RFC3339}` or `{"advance": DURATION}` (operator).
pub(crate) async fn set_clock(
    State(res): State<Resources>,
    body: Bytes,
) -> ApiResult<Json<ClockResponse>> {
    let b: ClockBody = if body.is_empty() {
        ClockBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))?
    };
    let clock = dev(res.clock.as_ref())?;
    let how = match (b.set, b.advance) {
        (Some(t), None) => {
            let t: Timestamp = t.parse().map_err(|e| {
                ApiError::bad_request(format!("set: {t:?} is not an RFC 3339 instant: {e}"))
            })?;
            ClockMove::Set(t)
        }
        (None, Some(d)) => {
            let d = GoDuration::parse(&d)
                .map_err(|e| ApiError::bad_request(format!("advance: {e}")))?;
            ClockMove::Advance(d.as_signed())
        }
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of \"set\" (RFC 3339) or \"advance\" (a duration like 90m)",
            ));
        }
    };
    // Shared through the store: every replica's watch moves its clock too.
    let (now, revision) = move_shared_clock(res.store(), how, clock.now_value())
        .await
        .map_err(|e| match e {
            MoveError::Clock(e) => ApiError::bad_request(format!("advance: {e}")),
            MoveError::Store(e) => ApiError::from(e),
        })?;
    clock.adopt(now, revision);
    tracing::info!(%now, "dev clock moved");
    // A pin lifts at a time: held finds look again.
    res.answers.long_poll.snapshot_changed();
    Ok(Json(ClockResponse { now }))
}

/// `POST /v1/dev/reconcile`: write this replica's report, then reconcile if this replica
/// holds or can take the leader lease (operator). On a replica that cannot lead, the
/// answer says `"leader": false` and names the replica holding the lease: send the
/// request there to reconcile (every replica's report counts, wherever it was written).
pub(crate) async fn reconcile(
    State(reporter): State<Reporter>,
    State(reconciler): State<Reconciler>,
) -> ApiResult<Json<DevReconcileResponse>> {
    let res = &reporter.res;
    dev(res.clock.as_ref())?;
    // Act at the shared time, even if this replica's watch has not delivered a move yet.
    res.sync_dev_clock().await?;
    let now = dev(res.clock.as_ref())?.now_value();
    reconciler::write_report(&reporter).await?;
    let result = reconciler::reconcile_once(&reconciler).await?;
    Ok(Json(DevReconcileResponse { now, result }))
}
