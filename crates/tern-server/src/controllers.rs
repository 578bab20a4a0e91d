//! ternd's built-in `releases` version controller: on the replica holding the leader
//! lease, every `spec.releases.period`, it lists the releases of the configured source
//! (an index or a GitHub-compatible API, read with the same hardened client as
//! tern-lockstep), asks the core for the draft `releases`
//! (`tern_core::directive::releases`), and writes it when it changed (or to refresh its
//! `stale_after`). Promotion then follows the control config, as for any draft. What it
//! did last is kept at `/tern/directives/controllers/releases`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tern_core::directive::releases::{self, RELEASES_DRAFT, ReleaseAsset, ReleaseInfo};
use tern_core::directive::report::ControllerStatus;
use tern_core::directive::resource::{ReleasesController, VersionControlConfig, VersionDirective};
use tern_core::duration::GoDuration;
use tern_store::Store;

use crate::directive_store::{encode, get};
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::metrics::Metrics;
use crate::release_source::{Fetcher, Source, SourceRelease};
use crate::snapshot::Answers;
use crate::state::{Leadership, Resources, SecuritySettings, Settings, parts_group};

parts_group! {
    /// What the controllers touch: the resources (the store they read and draft into,
    /// the answers a promoted draft refreshes), and the leader lease only the leader
    /// runs them under.
    pub(crate) struct Controllers {
        res: Resources,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        leadership: Arc<Leadership>,
    }
}

/// What one run did (the dev route's answer).
#[derive(Debug, Default, Serialize)]
pub(crate) struct RunResult {
    /// False when this replica does not lead (only the leader runs controllers).
    pub(crate) leader: bool,
    /// False when no `spec.releases` is configured.
    pub(crate) configured: bool,
    pub(crate) status: Option<ControllerStatus>,
    /// The draft was written in this run.
    pub(crate) wrote: bool,
    pub(crate) promoted: bool,
}

/// One run of the `releases` controller, if configured and this replica leads.
pub(crate) async fn run_once(state: &Controllers) -> ApiResult<RunResult> {
    let store = state.res.store();
    let config = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG).await?;
    let Some(c) = config.and_then(|c| c.value.spec.releases) else {
        return Ok(RunResult::default());
    };
    let candidate = crate::reconciler::Candidate {
        store: &state.res.store,
        settings: &state.settings,
        metrics: &state.metrics,
        leadership: &state.leadership,
    };
    if !crate::reconciler::ensure_leader(candidate).await? {
        return Ok(RunResult {
            configured: true,
            ..RunResult::default()
        });
    }
    let now = state.res.clock.now();
    let key = format!("{}{RELEASES_DRAFT}", keys::CONTROLLERS_PREFIX);
    let mut status = get::<ControllerStatus>(store, &key)
        .await?
        .map(|s| s.value)
        .unwrap_or_default();
    status.name = RELEASES_DRAFT.into();
    status.replica = state.settings.replica_id.clone();
    status.last_run = Some(now);
    let mut out = RunResult {
        leader: true,
        configured: true,
        ..RunResult::default()
    };
    match draft_now(store, &state.res.answers, &state.settings, &c, now).await {
        Ok(d) => {
            status.last_success = Some(now);
            status.error = None;
            status.targets = d.targets;
            status.notes = d.notes;
            if d.wrote {
                status.draft_written = Some(now);
            }
            out.wrote = d.wrote;
            out.promoted = d.promoted;
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "the releases controller failed; the draft is left as it was");
            status.error = Some(e.message);
        }
    }
    store.put(&key, encode(&status)?, None).await?;
    out.status = Some(status);
    Ok(out)
}

/// What one run drafted.
struct Drafted {
    wrote: bool,
    promoted: bool,
    /// Each directive's target version.
    targets: std::collections::BTreeMap<String, String>,
    notes: Vec<String>,
}

async fn draft_now(
    store: &dyn Store,
    answers: &Answers,
    settings: &Settings,
    c: &ReleasesController,
    now: Timestamp,
) -> ApiResult<Drafted> {
    let listed = list(&settings.security, c).await?;
    let infos: Vec<ReleaseInfo> = listed.iter().map(info).collect();
    let drafted = releases::draft(c, &infos, now)
        .map_err(|e| ApiError::bad_gateway(format!("releases: {e}")))?;
    let mut d = drafted.directive;
    // The core checks each field it takes; the whole draft is validated as any other.
    d.validate()
        .map_err(|e| ApiError::bad_gateway(format!("the drafted directive is not valid: {e}")))?;
    let targets = d
        .spec
        .directives
        .iter()
        .map(|x| {
            let v = x
                .targets
                .first()
                .map(|t| t.version.clone())
                .unwrap_or_default();
            (x.name.clone(), v)
        })
        .collect();
    let before = get::<VersionDirective>(store, &keys::draft(RELEASES_DRAFT)).await?;
    let notes = drafted.notes;
    if !releases::needs_write(c, before.as_ref().map(|b| &b.value.spec), &d.spec, now) {
        return Ok(Drafted {
            wrote: false,
            promoted: false,
            targets,
            notes,
        });
    }
    if let Some(b) = &before {
        // Keep the description an operator may have set.
        d.metadata.description = b.value.metadata.description.clone();
    }
    let promoted =
        crate::directives::write_draft(settings.release_trust.as_ref(), store, answers, &d).await?;
    tracing::info!(
        promoted,
        "the releases controller wrote the draft `releases`"
    );
    Ok(Drafted {
        wrote: true,
        promoted,
        targets,
        notes,
    })
}

/// Refuses a configuration naming a variable of ternd's environment that
/// `--controller-secret-env` does not allow: the API must not reach ternd's other
/// secrets (its database password, its Slack URL) by having them sent to a URL of the
/// caller's choosing.
pub(crate) fn check_secret_env(
    security: &SecuritySettings,
    c: &VersionControlConfig,
) -> ApiResult<()> {
    let named = c
        .spec
        .releases
        .as_ref()
        .and_then(|r| r.github.as_ref())
        .and_then(|g| g.token_env.as_deref());
    match named {
        Some(name) => secret_env(security, name).map(|_| ()),
        None => Ok(()),
    }
}

/// The value of `name` if `--controller-secret-env` allows it.
fn secret_env(security: &SecuritySettings, name: &str) -> ApiResult<Option<String>> {
    if !security.secret_env_allowed(name) {
        return Err(ApiError::invalid_resource(format!(
            "spec.releases.github.token_env: {name:?} is not a variable ternd may hand to a controller: start ternd with --controller-secret-env {name} to allow it"
        )));
    }
    Ok(std::env::var(name).ok())
}

/// The source's listing, read off the async runtime (the client blocks).
async fn list(
    security: &SecuritySettings,
    c: &ReleasesController,
) -> ApiResult<Vec<SourceRelease>> {
    let source = match (&c.index, &c.github) {
        (Some(url), _) => Source::Index { url: url.clone() },
        (None, Some(g)) => Source::GitHub {
            api: g.api.clone(),
            repo: g.repo.clone(),
            // Checked again here: the configuration may have been written by a replica
            // started with other flags, or before this check existed.
            token: match &g.token_env {
                Some(name) => secret_env(security, name)?,
                None => None,
            },
            asset: g.asset.clone(),
        },
        (None, None) => return Err(ApiError::bad_gateway("releases: no source configured")),
    };
    let fetcher = Fetcher::new(c.allow_http, Duration::from_secs(30));
    tokio::task::spawn_blocking(move || fetcher.list(&source))
        .await
        .map_err(|e| ApiError::internal(format!("the release listing task failed: {e}")))?
        .map_err(|e| ApiError::bad_gateway(format!("releases: {e}")))
}

fn info(r: &SourceRelease) -> ReleaseInfo {
    ReleaseInfo {
        tag: r.listed.tag.clone(),
        prerelease: r.listed.prerelease,
        draft: r.listed.draft,
        security: r.security,
        assets: r
            .assets
            .iter()
            .map(|a| ReleaseAsset {
                name: a.name.clone(),
                arch: a.arch.clone(),
                size: a.size,
                sha256: a.sha256.clone(),
            })
            .collect(),
    }
}

/// The controller's loop (system clock only; under a dev clock it runs on
/// `POST /v1/dev/controllers`). The period is read from the config at each run.
pub(crate) async fn run(state: Controllers) {
    loop {
        let period = match run_once(&state).await {
            Ok(_) => period(state.res.store()).await,
            Err(e) => {
                tracing::warn!(error = %e.message, "the releases controller's run failed");
                Duration::from_secs(60)
            }
        };
        tokio::time::sleep(period).await;
    }
}

async fn period(store: &dyn Store) -> Duration {
    let c = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.value.spec.releases);
    match c {
        Some(c) => Duration::from_secs(
            GoDuration::parse_positive(&c.period).map_or(600, |d| d.as_secs().max(60)),
        ),
        // Not configured: look again in a minute.
        None => Duration::from_secs(60),
    }
}
