//! The release checks ternd makes with `--trust-root` (`trust`): where a version is
//! written it must be signed (a target, a channel) or at least not revoked (a start
//! version, a directive's targets, a promotion); and the signed minimums are kept in
//! memory for the one answer, refreshed at start, every `--trust-refresh` (a minute) and
//! at each check, so a revocation reaches every path within that of its signing.

use std::sync::Arc;

use axum::http::StatusCode;
use tern_core::revocation::Revocation;
use tern_store::Store;

use crate::error::{ApiError, ApiResult};
use crate::snapshot::Answers;
use crate::state::{Resources, Settings};
use crate::trust::{ReleaseTrust, Signed};

/// What a check reads and keeps: the signed release repository (`--trust-root`; without
/// it, nothing is checked), and the answers the minimums a check brings are kept in,
/// refreshed from the store when they changed.
#[derive(Clone, Copy)]
pub(crate) struct Check<'a> {
    pub(crate) trust: Option<&'a ReleaseTrust>,
    pub(crate) store: &'a dyn Store,
    pub(crate) answers: &'a Answers,
}

impl<'a> Check<'a> {
    /// The check a handler makes, with the replica's settings and resources.
    pub(crate) fn of(settings: &'a Settings, res: &'a Resources) -> Self {
        Self {
            trust: settings.release_trust.as_ref(),
            store: res.store(),
            answers: &res.answers,
        }
    }

    /// Looks `version` up (`None` without `--trust-root`), keeping the minimums the
    /// refresh brought.
    async fn verdict(self, version: &str) -> ApiResult<Option<(&'a ReleaseTrust, Signed)>> {
        let Some(trust) = self.trust else {
            return Ok(None);
        };
        let (signed, revocation) = trust.signed(version).await?;
        adopt(self.store, self.answers, revocation).await;
        Ok(Some((trust, signed)))
    }
}

/// An error unless `version` is signed and not revoked (with `--trust-root`). `field`
/// names where it was written.
pub(crate) async fn require_signed(check: Check<'_>, field: &str, version: &str) -> ApiResult<()> {
    match check.verdict(version).await? {
        None | Some((_, Signed::Yes { .. })) => Ok(()),
        Some((trust, Signed::No { targets_version })) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_signed",
            format!(
                "{field} {version} is not signed by the release keys: no target of the signed release repository {} (targets version {targets_version}) has it; sign it with `tern-release add` first (hosts with a pinned root would refuse it)",
                trust.url
            ),
        )),
        Some((_, Signed::Revoked { why })) => refuse_revoked(field, version, &why),
    }
}

/// An error when `version` is revoked: below the signed minimum of its release line.
/// A version the repository does not sign passes (a start version may predate it).
pub(crate) async fn require_not_revoked(
    check: Check<'_>,
    field: &str,
    version: &str,
) -> ApiResult<()> {
    match check.verdict(version).await? {
        Some((_, Signed::Revoked { why })) => refuse_revoked(field, version, &why),
        None | Some((_, Signed::Yes { .. } | Signed::No { .. })) => Ok(()),
    }
}

/// The refusal of a revoked `version` written to `field`.
fn refuse_revoked(field: &str, version: &str, why: &str) -> ApiResult<()> {
    if tern_core::planted!(RevokedWrites) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "below_minimum",
        format!(
            "{field} {version} is revoked: {why}; name a version at or above the minimum (hosts with a pinned root would refuse it)"
        ),
    ))
}

/// Keeps `revocation` for the one answer; a change refreshes what find serves.
async fn adopt(store: &dyn Store, answers: &Answers, revocation: Revocation) {
    if answers.set_revocation(revocation) {
        tracing::info!("the signed minimums changed: revoked versions are held on every path");
        if let Err(e) = crate::state::refresh_snapshot(store, answers).await {
            tracing::warn!(error = %e, "refreshing the find snapshot failed");
        }
    }
}

/// Refreshes the signed minimums now (at start, then every `--trust-refresh`): a
/// revocation reaches every path within that period of its signing. A failed refresh keeps what was
/// known and says so.
pub(crate) async fn refresh(trust: Option<&ReleaseTrust>, store: &dyn Store, answers: &Answers) {
    let Some(trust) = trust else {
        return;
    };
    match trust.signed("0.0.0").await {
        Ok((_, revocation)) => adopt(store, answers, revocation).await,
        Err(e) => {
            tracing::warn!(error = %e.message, "refreshing the signed release metadata failed; the minimums known stay in force")
        }
    }
}

/// The refresh, every `--trust-refresh` of real time (nothing without `--trust-root`).
pub(crate) async fn refresh_loop(
    settings: Arc<Settings>,
    store: Arc<dyn Store>,
    answers: Arc<Answers>,
) {
    let Some(trust) = settings.release_trust.as_ref() else {
        return;
    };
    loop {
        tokio::time::sleep(trust.refresh).await;
        refresh(Some(trust), store.as_ref(), &answers).await;
    }
}
