//! How an update ends, for every install path (tarballs, the updater's own releases,
//! the package manager): committed (`commit`), or failed and reverted, recorded as the
//! version's failure or the host's (`record_failure`, given the [`Failure`] and what the
//! revert left, [`Reverted`]).

use jiff::Timestamp;

use crate::ctx::save;
use crate::decide;
use crate::error::{Error, Result};
use crate::hooks::kill_point;
use crate::log;
use crate::state::{self, EnvironmentFailure, LastUpdate, UpdateFile};

use crate::ctx::Ctx;

/// Records a successful switch: `to` is active, `from` its backup; clears the journal.
pub(crate) fn commit(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    let st = &mut file.status;
    if from.as_deref() != Some(to) {
        st.backup = from;
    }
    st.active = Some(to.to_string());
    st.rollback = false;
    if st.skip.as_deref() == Some(to) {
        st.skip = None;
    }
    st.environment_failure = None;
    st.last_update = Some(LastUpdate {
        time: Timestamp::now(),
        target: to.to_string(),
        success: true,
        error: None,
        agent_output: None,
    });
    st.in_progress = None;
    save(ctx, file)?;
    state::save_install_failure(&ctx.layout.install_failure_file(), None);
    kill_point("committed");
    log::info(format!("now running {to}"));
    Ok(())
}

/// Why a switch failed: the error, whether the new version itself failed (it did not
/// start or stay healthy), and what the agent last printed then.
pub(crate) struct Failure {
    pub(crate) reason: Error,
    pub(crate) version_failed: bool,
    pub(crate) agent_output: Option<String>,
}

/// Records an update from `from` to `to` that failed and was reverted, and returns the
/// error to report. `to` is skipped only if the reverted version then passed the same
/// health check; otherwise the host is what is broken, and the failure is recorded as
/// an environment failure, retried after a backoff. Both install paths (tarballs and
/// the package manager) record their failures here.
pub(crate) fn record_failure(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<&str>,
    to: &str,
    failure: Failure,
    reverted: Reverted,
) -> Error {
    let Failure {
        reason,
        version_failed,
        agent_output,
    } = failure;
    let now = Timestamp::now();
    let st = &mut file.status;
    let blame = version_failed && reverted.healthy;
    if blame {
        st.skip = Some(to.to_string());
        st.rollback = from.is_some();
        st.environment_failure = None;
    } else {
        let attempts = st
            .environment_failure
            .as_ref()
            .map_or(0, |f| f.attempts)
            .saturating_add(1);
        let wait = jiff::SignedDuration::try_from(decide::backoff(attempts))
            .unwrap_or(jiff::SignedDuration::MAX);
        // Whole seconds: operators read these times in messages and `status`.
        let time = Timestamp::from_second(now.as_second()).unwrap_or(now);
        st.environment_failure = Some(EnvironmentFailure {
            target: to.to_string(),
            time,
            attempts,
            retry_after: time.checked_add(wait).unwrap_or(Timestamp::MAX),
            error: reason.to_string(),
        });
    }
    st.last_update = Some(LastUpdate {
        time: now,
        target: to.to_string(),
        success: false,
        error: Some(LastUpdate::error_with_output(
            reason.to_string(),
            agent_output.as_deref(),
        )),
        agent_output,
    });
    st.in_progress = None;
    if let Err(e) = save(ctx, file) {
        log::error(format!("could not record the rollback in update.yaml: {e}"));
    }
    let target = to.to_string();
    let reason = Box::new(reason);
    let outcome = reverted.outcome;
    match &file.status.environment_failure {
        Some(f) if !blame => Error::EnvironmentFailure {
            target,
            reason,
            outcome,
            why: if !version_failed {
                "the failure is the host's, not the version's"
            } else if from.is_some() {
                "the previous version failed the same health check, so the host's environment looks broken (network, disk…)"
            } else {
                "with no previous version to check, a broken version cannot be told from a broken host"
            },
            attempts: f.attempts,
            retry_after: f.retry_after,
        },
        _ => Error::UpdateFailed {
            target,
            reason,
            outcome,
        },
    }
}

/// What a revert left: in words, and whether the version it restored passed the
/// health check (false when it was not checked).
pub(crate) struct Reverted {
    pub(crate) outcome: String,
    pub(crate) healthy: bool,
}

impl Reverted {
    pub(crate) fn unchecked(outcome: impl Into<String>) -> Self {
        Self {
            outcome: outcome.into(),
            healthy: false,
        }
    }
}
