//! The writes that move a rollout: the manual transitions (start-update, mark-done,
//! rollback), suspend and resume (the config's mode), and new-rollout (the version).
//! Each takes `?product=P` (the agent by default): the transitions and new-rollout act
//! on that product's rollout and version; suspend and resume of a product other than
//! the agent set its version's mode, since the config's is shared by every product
//! without a config of its own.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use tern_core::api::{
    ChangedGroup, EventView, ModeResponse, NewRolloutBody, NewRolloutResponse, PreviewResponse,
    TransitionBody, TransitionResponse,
};
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Mode};
use tern_core::rollout::Event;
use tern_core::transition::{self, Transition, TransitionError, TransitionKind};
use tern_core::{reconcile, views};
use tern_store::Store;

use super::body;
use crate::clock::Clock;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::notify::Notifiers;
use crate::products::{self, ProductQuery};
use crate::resources::{self, Decision, Stored};
use crate::state::{Hosts, Resources, Settings, parts_group};

async fn set_mode(
    res: &Resources,
    metrics: &Metrics,
    product: &str,
    mode: Mode,
) -> ApiResult<Json<ModeResponse>> {
    let changed = if product == tern_core::product::AGENT {
        let (_, changed) = resources::read_modify_write(
            res.store(),
            product,
            &metrics.write_conflicts,
            |current: Option<Stored<AutoUpdateConfig>>| async move {
                let existed = current.is_some();
                let mut cfg = current.map_or_else(AutoUpdateConfig::default, |s| s.value);
                if existed && cfg.mode() == Some(mode) {
                    return Ok(Decision::Keep(false));
                }
                cfg.spec.agents.get_or_insert_with(Default::default).mode = Some(mode);
                Ok(Decision::Put(cfg, true))
            },
        )
        .await?;
        changed
    } else {
        set_version_mode(res.store(), metrics, product, mode).await?
    };
    if changed {
        tracing::info!(mode = mode.as_str(), product, "mode set");
        res.after_write().await;
    }
    let modes = products::modes(res.store(), product).await?;
    Ok(Json(ModeResponse { modes, changed }))
}

/// Sets `product`'s version's own mode (a product other than the agent: the config's
/// mode is shared); whether it changed. 404 without a version to set it on.
async fn set_version_mode(
    store: &dyn Store,
    metrics: &Metrics,
    product: &str,
    mode: Mode,
) -> ApiResult<bool> {
    let (_, changed) = resources::read_modify_write(
        store,
        product,
        &metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateVersion>>| {
            let decided = match current.map(|s| s.value) {
                Some(mut v) => match v.spec.agents.as_mut() {
                    Some(a) if a.mode == Some(mode) => Ok(Decision::Keep(false)),
                    Some(a) => {
                        a.mode = Some(mode);
                        Ok(Decision::Put(v, true))
                    }
                    None => Err(no_version(product)),
                },
                None => Err(no_version(product)),
            };
            async move { decided }
        },
    )
    .await?;
    Ok(changed)
}

/// 404 `no_version`: `product` has no version resource whose mode to set.
fn no_version(product: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_version",
        format!(
            "product {product} has no autoupdate_version with spec.agents: suspend and resume set its version's mode (the config's is shared by every product); roll it out first (ternctl --product {product} agents new-rollout VERSION)"
        ),
    )
}

/// `POST /v1/agents/suspend[?product=P]`
pub(crate) async fn suspend(
    State(res): State<Resources>,
    State(metrics): State<Arc<Metrics>>,
    Query(q): Query<ProductQuery>,
) -> ApiResult<Json<ModeResponse>> {
    let product = q.served(res.store()).await?;
    set_mode(&res, &metrics, product, Mode::Suspended).await
}

/// `POST /v1/agents/resume[?product=P]`
pub(crate) async fn resume(
    State(res): State<Resources>,
    State(metrics): State<Arc<Metrics>>,
    Query(q): Query<ProductQuery>,
) -> ApiResult<Json<ModeResponse>> {
    let product = q.served(res.store()).await?;
    set_mode(&res, &metrics, product, Mode::Enabled).await
}

fn transition_error(e: TransitionError) -> ApiError {
    match e {
        TransitionError::UnknownGroup { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_group", e.to_string())
        }
        _ => ApiError::new(StatusCode::BAD_REQUEST, "invalid_transition", e.to_string()),
    }
}

/// The group state changes among a transition's events (what the action and its
/// preview both answer).
fn changed_groups(events: &[Event]) -> Vec<ChangedGroup> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::GroupChanged {
                group, from, to, ..
            } => Some(ChangedGroup {
                name: group.clone(),
                from: *from,
                to: *to,
            }),
            _ => None,
        })
        .collect()
}

fn no_rollout() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_rollout",
        "no rollout exists: create one with `ternctl agents new-rollout VERSION` and wait for a reconcile",
    )
}

/// The resources a product's rollout is renewed from ([`reconcile::renew`]): the
/// config in force, the version and whether a freeze of the product holds.
struct Wanted {
    config: Option<AutoUpdateConfig>,
    version: Option<AutoUpdateVersion>,
    frozen: bool,
}

impl Wanted {
    async fn load(store: &dyn Store, product: &str) -> ApiResult<Self> {
        Ok(Self {
            config: products::config_in_force(store, product).await?.0,
            version: resources::load_for::<AutoUpdateVersion>(store, product)
                .await?
                .map(|s| s.value),
            frozen: frozen(store, product).await?,
        })
    }

    /// The rollout the resources ask for now, given the stored one: a new one when the
    /// versions (or, with `config_too`, the config's groups) changed since it was
    /// created and no reconcile has replaced it yet, with the event saying so.
    fn renew(
        &self,
        now: jiff::Timestamp,
        stored: Option<&AutoUpdateAgentRollout>,
        config_too: bool,
    ) -> Option<(AutoUpdateAgentRollout, Vec<Event>)> {
        let resources = reconcile::Resources {
            config: self.config.as_ref(),
            version: self.version.as_ref(),
            rollout: stored,
            frozen: self.frozen,
        };
        match reconcile::renew(now, resources, config_too) {
            reconcile::Renewal::Fresh { rollout, events } => Some((*rollout, events)),
            reconcile::Renewal::Current | reconcile::Renewal::NoRollout { .. } => None,
        }
    }
}

/// Whether a freeze of `product` holds.
async fn frozen(store: &dyn tern_store::Store, product: &str) -> ApiResult<bool> {
    Ok(crate::freeze::load(store)
        .await?
        .is_some_and(|f| f.holds(product)))
}

parts_group! {
    /// What a write of a product's rollout touches: the resources, the counters of
    /// write conflicts and events, and the notices a renewal sends.
    pub(crate) struct RolloutWrites {
        res: Resources,
        metrics: Arc<Metrics>,
        notifiers: Arc<Notifiers>,
    }
}

/// Logs and counts the events of a write that renewed the rollout, and sends the
/// cleared notices of the alerts the rollout it replaced had: that write ended them,
/// and only the replica whose write succeeded announces it (as a leader announces what
/// its own fenced write changed).
fn announce_renewal(
    w: &RolloutWrites,
    product: &str,
    events: &[Event],
    replaced: &[tern_core::resource::Alert],
    next: &AutoUpdateAgentRollout,
    why: &str,
) {
    for e in events {
        w.metrics.event(e.kind());
        tracing::info!(event = e.kind(), action = why, product, "{e}");
    }
    if !replaced.is_empty() {
        let versions = crate::notify::RolloutVersions {
            start_version: next.spec.start_version.to_string(),
            target_version: next.spec.target_version.to_string(),
            product: (product != tern_core::product::AGENT).then(|| product.to_string()),
        };
        w.notifiers.notify_changes(
            replaced,
            &next.status.alerts,
            Some(&versions),
            w.res.clock.now(),
        );
    }
}

/// A transition lands on the rollout the resources ask for: when new-rollout's
/// version (or an `apply` of one) has not been turned into a rollout yet, it is made
/// first, in the same write, so that no transition is undone by the reconcile that
/// would have replaced the rollout it changed.
async fn run_transition(
    w: &RolloutWrites,
    q: &ProductQuery,
    kind: TransitionKind,
    body: &[u8],
) -> ApiResult<Json<TransitionResponse>> {
    let product = q.served(w.res.store()).await?;
    let b: TransitionBody = body::json(body)?;
    let t = Transition::new(kind, b.groups, b.force);
    let now = w.res.clock.now();
    let wanted = Wanted::load(w.res.store(), product).await?;
    let (stored, (events, renewed)) = resources::read_modify_write(
        w.res.store(),
        product,
        &w.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateAgentRollout>>| {
            let current = current.map(|c| c.value);
            let renewal = wanted.renew(now, current.as_ref(), false);
            let replaced = current
                .as_ref()
                .filter(|_| renewal.is_some())
                .map(|c| c.status.alerts.clone())
                .unwrap_or_default();
            let applied = match renewal {
                Some((fresh, created)) => transition::apply(&fresh, &t, now)
                    .map_err(transition_error)
                    .map(|(next, events)| (next, events, Some((created, replaced)))),
                None => current
                    .ok_or_else(no_rollout)
                    .and_then(|c| transition::apply(&c, &t, now).map_err(transition_error))
                    .map(|(next, events)| (next, events, None)),
            };
            async move {
                let (next, events, renewed) = applied?;
                Ok(Decision::Put(next, (events, renewed)))
            }
        },
    )
    .await?;
    let rollout = stored.ok_or_else(no_rollout)?.value;
    if let Some((created, replaced)) = &renewed {
        announce_renewal(w, product, created, replaced, &rollout, kind.as_str());
    }
    let groups = changed_groups(&events);
    for e in &events {
        w.metrics.event(e.kind());
        tracing::info!(event = e.kind(), action = kind.as_str(), product, "{e}");
    }
    w.res.after_write().await;
    let modes = products::modes(w.res.store(), product).await?;
    Ok(Json(TransitionResponse {
        groups,
        events: events.iter().map(EventView::from).collect(),
        modes,
        rollout,
    }))
}

/// `POST /v1/agents/{action}` for an action that is not a transition: a 400 naming the
/// transitions (never taken as some default one).
pub(crate) async fn unknown_action(
    axum::extract::Path(action): axum::extract::Path<String>,
) -> ApiError {
    let why = match action.parse::<TransitionKind>() {
        Ok(kind) => format!("{kind} is served at its own route"),
        Err(e) => e.to_string(),
    };
    ApiError::bad_request(format!("action: {why}"))
}

/// `POST /v1/agents/start-update[?product=P]` `{"groups": [...], "force": bool}`
pub(crate) async fn start_update(
    State(w): State<RolloutWrites>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&w, &q, TransitionKind::StartUpdate, &body).await
}

/// `POST /v1/agents/mark-done[?product=P]` `{"groups": [...]}`
pub(crate) async fn mark_done(
    State(w): State<RolloutWrites>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&w, &q, TransitionKind::MarkDone, &body).await
}

/// `POST /v1/agents/rollback[?product=P]` `{"groups": [...]}`
pub(crate) async fn rollback(
    State(w): State<RolloutWrites>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&w, &q, TransitionKind::Rollback, &body).await
}

/// `POST /v1/agents/reset[?product=P]` `{"groups": [...]}`
pub(crate) async fn reset(
    State(w): State<RolloutWrites>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<TransitionResponse>> {
    run_transition(&w, &q, TransitionKind::Reset, &body).await
}

/// `POST /v1/agents/new-rollout[?product=P]` `{"version": V, "current_version": V?}`:
/// a product the store does not have yet is added (within `products::MAX_PRODUCTS`).
pub(crate) async fn new_rollout(
    State(w): State<RolloutWrites>,
    State(settings): State<Arc<Settings>>,
    State(hosts): State<Arc<Hosts>>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<NewRolloutResponse>> {
    let product = q.name()?;
    let b: NewRolloutBody = body::json(&body)?;
    if b.version.trim().is_empty() {
        return Err(ApiError::bad_request(
            "version: missing (the version to roll out)",
        ));
    }
    let target = body::version("version", &b.version)?;
    let given_start = b
        .current_version
        .as_deref()
        .map(|s| body::version("current_version", s))
        .transpose()?;
    let check = crate::release_check::Check::of(&settings, &w.res);
    crate::release_check::require_signed(check, "version", &target.to_string()).await?;
    if let Some(start) = &given_start {
        crate::release_check::require_not_revoked(check, "current_version", &start.to_string())
            .await?;
    }
    products::admit(w.res.store(), product).await?;
    let rollout = resources::load_for::<AutoUpdateAgentRollout>(w.res.store(), product).await?;
    let (stored, (changed, note)) = resources::read_modify_write(
        w.res.store(),
        product,
        &w.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateVersion>>| {
            let views::NewRollout {
                version: next,
                note,
            } = views::new_rollout_version(
                current.as_ref().map(|s| &s.value),
                rollout.as_ref().map(|s| &s.value),
                target.clone(),
                given_start.clone(),
                b.follow_in_window,
            );
            let decision = match next.validate() {
                Err(e) => Err(ApiError::invalid_resource(format!(
                    "invalid autoupdate_version: {e}"
                ))),
                Ok(()) if current.is_some_and(|c| resources::same(&c.value, &next)) => {
                    Ok(Decision::Keep((false, note)))
                }
                Ok(()) => Ok(Decision::Put(next, (true, note))),
            };
            async move { decision }
        },
    )
    .await?;
    let version = stored
        .ok_or_else(|| ApiError::internal("new-rollout stored no autoupdate_version"))?
        .value;
    let agents = version
        .spec
        .agents
        .clone()
        .ok_or_else(|| ApiError::internal("new-rollout stored no spec.agents"))?;
    if changed {
        tracing::info!(product, start = %agents.start_version, target = %agents.target_version, note = note.as_deref().unwrap_or(""), "new rollout requested");
    }
    // The rollout exists when new-rollout answers: a start-update right after it lands
    // on it, and status no longer shows the rollout it replaced. Asking again for the
    // current target renews a rollout that runs an older copy of the config.
    let renewed = renew_rollout(&w, product).await?;
    let (changed, note) = match renewed {
        Some(why) if !changed => (true, Some(format!("{}: every group starts over", why))),
        _ => (changed, note),
    };
    if changed {
        w.res.after_write().await;
    }
    // `--artifact-url-template` says where the agent's tarballs are: the other
    // products' are elsewhere, and not checked.
    let warnings = if product == tern_core::product::AGENT {
        artifact_warnings(&settings, &hosts, &agents.target_version.to_string()).await
    } else {
        Vec::new()
    };
    for w in &warnings {
        tracing::warn!(target = %agents.target_version, "new rollout: {w}");
    }
    Ok(Json(NewRolloutResponse {
        start_version: agents.start_version.to_string(),
        target_version: agents.target_version.to_string(),
        changed,
        note,
        version,
        warnings,
    }))
}

/// Writes the rollout the stored resources ask for when it is not the stored one (a
/// new version, or a rollout running an older copy of the config's groups): every
/// group unstarted, the hosts seen carried over. Returns why it was renewed, if it was.
async fn renew_rollout(w: &RolloutWrites, product: &str) -> ApiResult<Option<String>> {
    let now = w.res.clock.now();
    let wanted = Wanted::load(w.res.store(), product).await?;
    let (stored, renewed) = resources::read_modify_write(
        w.res.store(),
        product,
        &w.metrics.write_conflicts,
        |current: Option<Stored<AutoUpdateAgentRollout>>| {
            let current = current.map(|c| c.value);
            let decision = match wanted.renew(now, current.as_ref(), true) {
                Some((next, events)) => {
                    let replaced = current.map(|c| c.status.alerts).unwrap_or_default();
                    Decision::Put(next, Some((events, replaced)))
                }
                None => Decision::Keep(None),
            };
            async move { Ok(decision) }
        },
    )
    .await?;
    let (Some((events, replaced)), Some(stored)) = (renewed, stored) else {
        return Ok(None);
    };
    announce_renewal(w, product, &events, &replaced, &stored.value, "new-rollout");
    Ok(events.iter().find_map(|e| match e {
        Event::RolloutCreated { why, .. } => Some(format!("new rollout: {why}")),
        _ => None,
    }))
}

/// What is missing, or could not be checked, of `version`'s artifacts for the
/// platforms this replica's hosts run (linux/amd64 when it has none yet), with
/// `--artifact-url-template`.
async fn artifact_warnings(settings: &Settings, hosts: &Hosts, version: &str) -> Vec<String> {
    let Some(check) = settings.artifact_check.clone() else {
        return Vec::new();
    };
    let mut platforms: Vec<(String, String)> = {
        let inv = hosts.inventory();
        let set: std::collections::BTreeSet<(&str, &str)> =
            inv.agents().filter_map(|a| a.platform()).collect();
        set.into_iter()
            .map(|(os, arch)| (os.to_string(), arch.to_string()))
            .collect()
    };
    if platforms.is_empty() {
        platforms.push(("linux".into(), "amd64".into()));
    }
    let (edition, version) = (settings.edition.clone(), version.to_string());
    tokio::task::spawn_blocking(move || check.warnings(&edition, &version, &platforms))
        .await
        .unwrap_or_else(|e| vec![format!("artifact not checked: the check failed: {e}")])
}

/// `POST /v1/preview/{action}[?product=P]` with the action's own body: what suspend,
/// resume, start-update, mark-done, rollback, reset or new-rollout would do now to
/// that product's rollout, computed by
/// the same core functions the action runs (`transition::apply`, `views::modes`,
/// `views::new_rollout_version`) on the stored resources, and written nowhere. A
/// refused action is refused here with the same error. new-rollout's signed-release
/// check (`--trust-root`) is left to the action.
pub(crate) async fn preview(
    State(res): State<Resources>,
    axum::extract::Path(action): axum::extract::Path<String>,
    Query(q): Query<ProductQuery>,
    body: Bytes,
) -> ApiResult<Json<PreviewResponse>> {
    // new-rollout may add a product; every other action needs one this ternd serves.
    let product = if action == "new-rollout" {
        q.name()?
    } else {
        q.served(res.store()).await?
    };
    match action.as_str() {
        "suspend" => preview_mode(res.store(), product, &action, Mode::Suspended).await,
        "resume" => preview_mode(res.store(), product, &action, Mode::Enabled).await,
        "new-rollout" => {
            preview_new_rollout(res.store(), res.clock.as_ref(), product, &action, &body).await
        }
        _ => {
            let kind = action
                .parse::<TransitionKind>()
                .map_err(|e| ApiError::bad_request(format!("action: {e}")))?;
            let b: TransitionBody = body::json(&body)?;
            let t = Transition::new(kind, b.groups, b.force);
            let rollout = resources::load_for::<AutoUpdateAgentRollout>(res.store(), product)
                .await?
                .ok_or_else(no_rollout)?
                .value;
            let (_, events) =
                transition::apply(&rollout, &t, res.clock.now()).map_err(transition_error)?;
            let groups = changed_groups(&events);
            let effects: Vec<String> = if events.is_empty() {
                vec!["no group changes state".to_string()]
            } else {
                events.iter().map(ToString::to_string).collect()
            };
            Ok(Json(PreviewResponse {
                action,
                changes: !groups.is_empty(),
                effects,
                groups,
                events: events.iter().map(EventView::from).collect(),
                modes: None,
                start_version: None,
                target_version: None,
            }))
        }
    }
}

async fn preview_mode(
    store: &dyn Store,
    product: &str,
    action: &str,
    mode: Mode,
) -> ApiResult<Json<PreviewResponse>> {
    let (config, _) = products::config_in_force(store, product).await?;
    let version = resources::load_for::<AutoUpdateVersion>(store, product)
        .await?
        .map(|s| s.value);
    let freeze = products::freeze_of(crate::freeze::load(store).await?, product);
    let before = views::modes(config.as_ref(), version.as_ref(), freeze.as_ref());
    // The agent's mode is the config's; another product's, its version's.
    let (changes, after, what) = if product == tern_core::product::AGENT {
        let changes = config.as_ref().is_none_or(|c| c.mode() != Some(mode));
        let mut next = config.unwrap_or_default();
        next.spec.agents.get_or_insert_with(Default::default).mode = Some(mode);
        let after = views::modes(Some(&next), version.as_ref(), freeze.as_ref());
        (changes, after, "the config's mode".to_string())
    } else {
        let mut next = version.ok_or_else(|| no_version(product))?;
        let agents = next
            .spec
            .agents
            .as_mut()
            .ok_or_else(|| no_version(product))?;
        let changes = agents.mode != Some(mode);
        agents.mode = Some(mode);
        let after = views::modes(config.as_ref(), Some(&next), freeze.as_ref());
        (changes, after, format!("the mode of {product}'s version"))
    };
    let mut effects = vec![format!(
        "{what} becomes {}; the mode in force goes from {} to {}",
        mode.as_str(),
        before.mode.as_str(),
        after.mode.as_str()
    )];
    effects.extend(after.why_stopped.clone());
    Ok(Json(PreviewResponse {
        action: action.to_string(),
        effects,
        groups: Vec::new(),
        events: Vec::new(),
        modes: Some(after),
        start_version: None,
        target_version: None,
        changes,
    }))
}

async fn preview_new_rollout(
    store: &dyn Store,
    clock: &dyn Clock,
    product: &str,
    action: &str,
    body: &[u8],
) -> ApiResult<Json<PreviewResponse>> {
    let b: NewRolloutBody = body::json(body)?;
    if b.version.trim().is_empty() {
        return Err(ApiError::bad_request(
            "version: missing (the version to roll out)",
        ));
    }
    let target = body::version("version", &b.version)?;
    let given_start = b
        .current_version
        .as_deref()
        .map(|s| body::version("current_version", s))
        .transpose()?;
    let rollout = resources::load_for::<AutoUpdateAgentRollout>(store, product).await?;
    let current = resources::load_for::<AutoUpdateVersion>(store, product).await?;
    let views::NewRollout { version, note } = views::new_rollout_version(
        current.as_ref().map(|s| &s.value),
        rollout.as_ref().map(|s| &s.value),
        target,
        given_start,
        b.follow_in_window,
    );
    version
        .validate()
        .map_err(|e| ApiError::invalid_resource(format!("invalid autoupdate_version: {e}")))?;
    let version_changes = current
        .as_ref()
        .is_none_or(|c| !resources::same(&c.value, &version));
    let agents = version
        .spec
        .agents
        .as_ref()
        .ok_or_else(|| ApiError::internal("new-rollout would store no spec.agents"))?;
    // What the rollout then becomes: renewed for the new version, or for the current
    // config when it runs an older copy.
    let renewal = Wanted {
        config: products::config_in_force(store, product).await?.0,
        version: Some(version.clone()),
        frozen: frozen(store, product).await?,
    }
    .renew(clock.now(), rollout.as_ref().map(|s| &s.value), true);
    let config_renewal = renewal
        .as_ref()
        .filter(|_| !version_changes)
        .and_then(|(_, events)| {
            events.iter().find_map(|e| match e {
                Event::RolloutCreated { why, .. } => Some(why.clone()),
                _ => None,
            })
        });
    let changes = version_changes || config_renewal.is_some();
    let mut effects = vec![if let Some(why) = &config_renewal {
        format!(
            "the rollout from {} to {} starts over from unstarted: {why}",
            agents.start_version, agents.target_version
        )
    } else if changes {
        format!(
            "a new rollout from {} to {}: every group starts over from unstarted",
            agents.start_version, agents.target_version
        )
    } else {
        format!(
            "the rollout from {} to {} is already the one asked for: nothing changes",
            agents.start_version, agents.target_version
        )
    }];
    effects.extend(note);
    Ok(Json(PreviewResponse {
        action: action.to_string(),
        effects,
        groups: Vec::new(),
        events: Vec::new(),
        modes: None,
        start_version: Some(agents.start_version.to_string()),
        target_version: Some(agents.target_version.to_string()),
        changes,
    }))
}
