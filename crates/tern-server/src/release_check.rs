//! The release checks ternd makes with `--trust-root` (`trust`): where a version is
//! written it must be signed (a target, a channel) or at least not revoked (a start
//! version, a directive's targets, a promotion); and the signed minimums are kept in
//! memory for the one answer, refreshed at start, every minute and at each check, so a
//! revocation reaches every path within a minute of its signing.

use axum::http::StatusCode;
use tern_core::revocation::Revocation;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::trust::{ReleaseTrust, Signed};

/// An error unless `version` is signed and not revoked (`--trust-root`; without it,
/// nothing is checked). `field` names where it was written.
pub(crate) async fn require_signed(state: &AppState, field: &str, version: &str) -> ApiResult<()> {
    let Some(trust) = &state.settings.release_trust else {
        return Ok(());
    };
    match checked(state, trust, version).await? {
        Signed::Yes { .. } => Ok(()),
        Signed::No { targets_version } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_signed",
            format!(
                "{field} {version} is not signed by the release keys: no target of the signed release repository {} (targets version {targets_version}) has it; sign it with `tern-release add` first (hosts with a pinned root would refuse it)",
                trust.url
            ),
        )),
        Signed::Revoked { .. } if tern_core::planted!(RevokedWrites) => Ok(()),
        Signed::Revoked { why } => Err(revoked(field, version, &why)),
    }
}

/// An error when `version` is revoked: below the signed minimum of its release line.
/// A version the repository does not sign passes (a start version may predate it).
pub(crate) async fn require_not_revoked(
    state: &AppState,
    field: &str,
    version: &str,
) -> ApiResult<()> {
    let Some(trust) = &state.settings.release_trust else {
        return Ok(());
    };
    match checked(state, trust, version).await? {
        Signed::Revoked { .. } if tern_core::planted!(RevokedWrites) => Ok(()),
        Signed::Revoked { why } => Err(revoked(field, version, &why)),
        Signed::Yes { .. } | Signed::No { .. } => Ok(()),
    }
}

/// Looks `version` up, keeping the minimums the refresh brought.
async fn checked(state: &AppState, trust: &ReleaseTrust, version: &str) -> ApiResult<Signed> {
    let (signed, revocation) = trust.signed(version).await?;
    adopt(state, revocation).await;
    Ok(signed)
}

fn revoked(field: &str, version: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "below_minimum",
        format!(
            "{field} {version} is revoked: {why}; name a version at or above the minimum (hosts with a pinned root would refuse it)"
        ),
    )
}

/// Keeps `revocation` for the one answer; a change refreshes what find serves.
async fn adopt(state: &AppState, revocation: Revocation) {
    if state.set_revocation(revocation) {
        tracing::info!("the signed minimums changed: revoked versions are held on every path");
        if let Err(e) = state.refresh_snapshot().await {
            tracing::warn!(error = %e, "refreshing the find snapshot failed");
        }
    }
}

/// Refreshes the signed minimums now (at start, then every minute): a revocation
/// reaches every path within a minute of its signing. A failed refresh keeps what was
/// known and says so.
pub(crate) async fn refresh(state: &AppState) {
    let Some(trust) = &state.settings.release_trust else {
        return;
    };
    match trust.signed("0.0.0").await {
        Ok((_, revocation)) => adopt(state, revocation).await,
        Err(e) => {
            tracing::warn!(error = %e.message, "refreshing the signed release metadata failed; the minimums known stay in force")
        }
    }
}

/// The refresh, every minute of real time.
pub(crate) async fn refresh_loop(state: std::sync::Arc<AppState>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        refresh(&state).await;
    }
}
