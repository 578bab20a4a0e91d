//! `/v1/directives/…`: the modular upgrade system's resources (installers, the control
//! config, drafts, the active directive), plan and apply, the pause, and the fleet's
//! view summed from the replicas' reports. Bodies are YAML or JSON, validated by
//! `tern_core::directive::validate` with errors naming the field.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde_json::Value;
use tern_core::api::Deleted;
use tern_core::directive::report::{
    self, ApplyBody, ApplyResponse, Approval, DirectiveReport, DirectivesStatus, Named, Paused,
    Pending, PlanBody, PlanResponse,
};
use tern_core::directive::resource::{Installer, VersionControlConfig, VersionDirective};
use tern_core::duration::GoDuration;
use tern_store::{Compare, Op, Store, TxnOutcome};

use super::body;
use crate::auth::Actor;
use crate::clock::Clock;
use crate::controllers::Controllers;
use crate::directive_store::{encode, get, list, stored_form};
use crate::directives::{self, DirectivePass, refresh_find, write_draft};
use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::notify::Notifiers;
use crate::state::{Resources, Settings};

fn text(body: &Bytes) -> ApiResult<&str> {
    std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the body is not UTF-8 text"))
}

/// The stored value as JSON, with `metadata.revision` filled in.
async fn read_json(store: &dyn Store, key: &str, absent: String) -> ApiResult<Json<Value>> {
    let Some(r) = get::<Value>(store, key).await? else {
        return Err(ApiError::not_found(absent));
    };
    let mut v = r.value;
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("revision".into(), Value::String(r.revision.to_string()));
    }
    Ok(Json(v))
}

fn check_path_name(path: &str, in_body: &str) -> ApiResult<()> {
    if path != in_body {
        return Err(ApiError::invalid_resource(format!(
            "metadata.name: {in_body:?} differs from the name in the path, {path:?}"
        )));
    }
    Ok(())
}

// ---- installers ------------------------------------------------------------------

/// `GET /v1/directives/installers`
pub(crate) async fn installers(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<Vec<Value>>> {
    let all = list::<Value>(store.as_ref(), keys::INSTALLERS_PREFIX).await?;
    Ok(Json(all.into_iter().map(|(_, r)| r.value).collect()))
}

/// `GET /v1/directives/installers/{name}`
pub(crate) async fn get_installer(
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    read_json(
        store.as_ref(),
        &keys::installer(&name),
        format!("no installer named {name:?}"),
    )
    .await
}

/// `PUT /v1/directives/installers/{name}`
pub(crate) async fn put_installer(
    State(res): State<Resources>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let i = Installer::from_text(text(&body)?)
        .map_err(|e| ApiError::invalid_resource(e.to_string()))?;
    check_path_name(&name, &i.metadata.name)?;
    res.store()
        .put(&keys::installer(&name), stored_form(&i)?, None)
        .await?;
    refresh_find(res.store(), &res.answers).await;
    get_installer(State(res.store), Path(name)).await
}

/// `DELETE /v1/directives/installers/{name}`
pub(crate) async fn delete_installer(
    State(res): State<Resources>,
    Path(name): Path<String>,
) -> ApiResult<Json<Deleted>> {
    delete_key(
        &res,
        &keys::installer(&name),
        &format!("installer {name:?}"),
    )
    .await
}

async fn delete_key(res: &Resources, key: &str, what: &str) -> ApiResult<Json<Deleted>> {
    match res.store().delete(key, None).await {
        Ok(_) => {
            refresh_find(res.store(), &res.answers).await;
            Ok(Json(Deleted {
                deleted: what.to_string(),
            }))
        }
        Err(tern_store::Error::NotFound { .. }) => {
            Err(ApiError::not_found(format!("no {what} exists")))
        }
        Err(e) => Err(e.into()),
    }
}

// ---- the control config -----------------------------------------------------------

/// `GET /v1/directives/config`
pub(crate) async fn get_config(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<Value>> {
    read_json(
        store.as_ref(),
        keys::DIRECTIVE_CONFIG,
        "no version_control_config exists: directives are planned and shown, nothing is installed"
            .into(),
    )
    .await
}

/// A change of the control config's `promotion` waiting for the approvals in force
/// (`PENDING_CONFIG`): the config as it will be written, the revision of the config it
/// replaces, and who approved it so far.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct PendingConfig {
    /// The stored form of the config proposed.
    config: String,
    /// The `mod_revision` of the config in force when it was proposed: any other
    /// change since voids it.
    replaces: u64,
    approvals_needed: u8,
    approvals: Vec<Approval>,
    expires_at: jiff::Timestamp,
}

/// `PUT /v1/directives/config`. A change of `spec.promotion` (the approvals, the
/// strategy, what it promotes, the pending TTL) needs the approvals the config in
/// force asks for: with `approvals: 2`, the first PUT of such a change is recorded as
/// pending (202, approval 1), and the same config PUT by another principal writes it.
/// Anything else is written at once.
pub(crate) async fn put_config(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    Extension(actor): Extension<Arc<Actor>>,
    body: Bytes,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    let c = VersionControlConfig::from_text(text(&body)?)
        .map_err(|e| ApiError::invalid_resource(e.to_string()))?;
    crate::controllers::check_secret_env(&settings.security, &c)?;
    let store = res.store();
    let bytes = stored_form(&c)?;
    let current = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG).await?;
    let needed = current
        .as_ref()
        .map_or(1, |r| r.value.spec.promotion.approvals)
        .max(1);
    let promotion_changes = current
        .as_ref()
        .is_some_and(|r| r.value.spec.promotion != c.spec.promotion);
    if needed < 2 || !promotion_changes {
        store.put(keys::DIRECTIVE_CONFIG, bytes, None).await?;
        return Ok(get_config(State(Arc::clone(&res.store)))
            .await?
            .into_response());
    }
    let Some(current) = current else {
        return Err(ApiError::internal("the config in force vanished"));
    };
    let now = res.clock.now();
    let proposed = String::from_utf8_lossy(&bytes).into_owned();
    let pending = get::<PendingConfig>(store, keys::PENDING_CONFIG).await?;
    // The same change, still valid: this PUT is another approval of it.
    let same = pending.as_ref().filter(|p| {
        p.value.config == proposed
            && p.value.replaces == current.revision
            && now < p.value.expires_at
    });
    let (mut change, guard) = match same {
        Some(p) => {
            check_another_approver(&p.value.approvals, &actor, p.value.approvals_needed)?;
            (
                p.value.clone(),
                Compare::ModRevision {
                    key: keys::PENDING_CONFIG.into(),
                    revision: p.revision,
                },
            )
        }
        None => {
            let ttl = GoDuration::parse_positive(&current.value.spec.promotion.pending_ttl)
                .map(|d| d.as_signed())
                .unwrap_or(jiff::SignedDuration::from_hours(1));
            let change = PendingConfig {
                config: proposed,
                replaces: current.revision,
                approvals_needed: needed,
                approvals: Vec::new(),
                expires_at: now.saturating_add(ttl).unwrap_or(now),
            };
            let guard = match &pending {
                Some(p) => Compare::ModRevision {
                    key: keys::PENDING_CONFIG.into(),
                    revision: p.revision,
                },
                None => Compare::Absent {
                    key: keys::PENDING_CONFIG.into(),
                },
            };
            (change, guard)
        }
    };
    change.approvals.push(approval(&actor, now));
    let approvals = u8::try_from(change.approvals.len()).unwrap_or(u8::MAX);
    let done = approvals >= change.approvals_needed;
    let compares = [
        guard,
        Compare::ModRevision {
            key: keys::DIRECTIVE_CONFIG.into(),
            revision: current.revision,
        },
    ];
    let ops = if done {
        vec![
            Op::Put {
                key: keys::DIRECTIVE_CONFIG.into(),
                value: bytes,
                ttl: None,
            },
            Op::Delete {
                key: keys::PENDING_CONFIG.into(),
            },
        ]
    } else {
        vec![Op::Put {
            key: keys::PENDING_CONFIG.into(),
            value: encode(&change)?,
            ttl: None,
        }]
    };
    if let TxnOutcome::Failed { reason, .. } = store.txn(&compares, &ops).await? {
        return Err(ApiError::conflict(format!(
            "the control config or its pending change changed meanwhile ({reason}): send it again"
        )));
    }
    if done {
        tracing::info!(by = %actor.token_id, "a change of the control config's promotion was approved and written");
        return Ok(get_config(State(Arc::clone(&res.store)))
            .await?
            .into_response());
    }
    let answer = ApplyResponse {
        applied: false,
        approvals,
        approvals_needed: change.approvals_needed,
        message: format!(
            "approval {approvals} of {} recorded: spec.promotion changes, and the config in force asks for {} approvals; another principal (with a token not minted down this one's chain) sends the same config before {} to write it",
            change.approvals_needed, change.approvals_needed, change.expires_at
        ),
    };
    Ok((axum::http::StatusCode::ACCEPTED, Json(answer)).into_response())
}

// ---- directives: active and drafts -------------------------------------------------

/// `GET /v1/directives/active`
pub(crate) async fn get_active(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<Value>> {
    read_json(
        store.as_ref(),
        keys::ACTIVE_DIRECTIVE,
        "no directive is active: write a draft, then `ternctl version-control plan` and `apply`"
            .into(),
    )
    .await
}

/// `DELETE /v1/directives/active`: no directive governs any host from the next pass on;
/// the hosts go back to the rollout (installs already triggered finish on the hosts).
pub(crate) async fn delete_active(State(res): State<Resources>) -> ApiResult<Json<Deleted>> {
    delete_key(&res, keys::ACTIVE_DIRECTIVE, "active directive").await
}

/// `GET /v1/directives/drafts/{name}`
pub(crate) async fn get_draft(
    State(store): State<Arc<dyn Store>>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    read_json(
        store.as_ref(),
        &keys::draft(&name),
        format!("no draft named {name:?}"),
    )
    .await
}

/// `PUT /v1/directives/drafts/{name}`: writes a draft; under `promotion.strategy:
/// automatic` with `from` naming this draft, it becomes the active directive at once.
pub(crate) async fn put_draft(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let d = VersionDirective::from_text(text(&body)?)
        .map_err(|e| ApiError::invalid_resource(e.to_string()))?;
    check_path_name(&name, &d.metadata.name)?;
    write_draft(
        settings.release_trust.as_ref(),
        res.store(),
        &res.answers,
        &d,
    )
    .await?;
    get_draft(State(res.store), Path(name)).await
}

/// `DELETE /v1/directives/drafts/{name}`
pub(crate) async fn delete_draft(
    State(res): State<Resources>,
    Path(name): Path<String>,
) -> ApiResult<Json<Deleted>> {
    delete_key(&res, &keys::draft(&name), &format!("draft {name:?}")).await
}

// ---- plan and apply ---------------------------------------------------------------

/// `POST /v1/directives/plan` `{"draft": NAME}`: makes the draft pending (replacing
/// any earlier plan); replicas evaluate it in their next pass, without installing.
pub(crate) async fn plan(
    State(res): State<Resources>,
    Extension(actor): Extension<Arc<Actor>>,
    body: Bytes,
) -> ApiResult<Json<Pending>> {
    let b: PlanBody = body::json(&body)?;
    let store = res.store();
    let Some(draft) = get::<VersionDirective>(store, &keys::draft(&b.draft)).await? else {
        return Err(ApiError::not_found(format!(
            "no draft named {:?}: write it first (ternctl version-control draft -f FILE)",
            b.draft
        )));
    };
    let config = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG)
        .await?
        .map(|c| c.value.spec)
        .unwrap_or_default();
    let ttl = GoDuration::parse_positive(&config.promotion.pending_ttl)
        .map(|d| d.as_signed())
        .unwrap_or(jiff::SignedDuration::from_hours(1));
    let now = res.clock.now();
    let pending = Pending {
        draft: b.draft.clone(),
        draft_revision: draft.revision.to_string(),
        nonce: crate::auth::random_hex(8)?,
        planned_at: now,
        expires_at: now.saturating_add(ttl).unwrap_or(now),
        planned_by: actor.token_id.clone(),
        approvals_needed: config.promotion.approvals.max(1),
        approvals: Vec::new(),
        dry_run: b.dry_run,
    };
    store
        .put(keys::PENDING_DIRECTIVE, encode(&pending)?, None)
        .await?;
    Ok(Json(pending))
}

async fn reports(store: &dyn Store) -> ApiResult<Vec<DirectiveReport>> {
    Ok(
        list::<DirectiveReport>(store, keys::DIRECTIVE_REPORTS_PREFIX)
            .await?
            .into_iter()
            .map(|(_, r)| r.value)
            .collect(),
    )
}

/// `GET /v1/directives/plan`: the pending directive over every replica that evaluated
/// it (`evaluated_by` of `replicas`), beside what the active one does now.
pub(crate) async fn get_plan(State(store): State<Arc<dyn Store>>) -> ApiResult<Json<PlanResponse>> {
    let store = store.as_ref();
    let Some(pending) = get::<Pending>(store, keys::PENDING_DIRECTIVE).await? else {
        return Err(ApiError::not_found(
            "nothing is planned: `ternctl version-control plan --draft NAME`",
        ));
    };
    let reports = reports(store).await?;
    let sum = report::sum(&reports, Some(&pending.value.nonce));
    let config = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG)
        .await?
        .map(|c| c.value.spec);
    let paused = get::<Paused>(store, keys::DIRECTIVES_PAUSED)
        .await?
        .map(|p| p.value);
    Ok(Json(PlanResponse {
        pending: pending.value,
        replicas: sum.replicas,
        evaluated_by: sum.evaluated_by,
        evaluation: sum.plan,
        dry_run: sum.dry_run,
        active: sum.active,
        enabled: config.as_ref().is_some_and(|c| c.enabled),
        rate: config
            .map(|c| c.rolling_install.rate)
            .unwrap_or_else(|| "(no version_control_config)".into()),
        paused,
    }))
}

/// `DELETE /v1/directives/plan`: drops the pending directive.
pub(crate) async fn cancel_plan(State(res): State<Resources>) -> ApiResult<Json<Deleted>> {
    delete_key(&res, keys::PENDING_DIRECTIVE, "pending directive").await
}

/// Why `actor` cannot approve after `a`, if it cannot: the same token, the same
/// principal, a token that minted the other (named when the chain is short enough to
/// be recorded), or a token that speaks for the same principal whatever its chain
/// (`auth::speaks_for`): a token minted down a chain from an approver speaks for that
/// approver, whatever principal it was given.
fn same_approver(a: &Approval, actor: &Actor) -> Option<String> {
    // Approvals of earlier releases carry no principal: their token is one.
    let earlier = format!("token:{}", a.token_id);
    let principal = if a.principal.is_empty() {
        &earlier
    } else {
        &a.principal
    };
    let speaks_for = if a.speaks_for.is_empty() {
        principal
    } else {
        &a.speaks_for
    };
    if a.token_id == actor.token_id {
        Some(format!("token {} already approved this plan", a.token_id))
    } else if *principal == actor.principal {
        Some(format!(
            "principal {principal} already approved this plan (token {})",
            a.token_id
        ))
    } else if actor.minted_by.contains(&a.token_id) {
        Some(format!(
            "token {} was minted by token {}, which already approved this plan",
            actor.token_id, a.token_id
        ))
    } else if a.minted_by.contains(&actor.token_id) {
        Some(format!(
            "token {} minted token {}, which already approved this plan",
            actor.token_id, a.token_id
        ))
    } else if *speaks_for == actor.speaks_for {
        Some(format!(
            "token {} speaks for principal {speaks_for} (its chain of minters starts there), who already approved this plan (token {})",
            actor.token_id, a.token_id
        ))
    } else {
        None
    }
}

/// The approval `actor` gives.
fn approval(actor: &Actor, at: jiff::Timestamp) -> Approval {
    Approval {
        token_id: actor.token_id.clone(),
        at,
        principal: actor.principal.clone(),
        minted_by: actor.minted_by.clone(),
        speaks_for: actor.speaks_for.clone(),
    }
}

/// 409 unless `actor` is another approver than each of `approvals`.
fn check_another_approver(approvals: &[Approval], actor: &Actor, needed: u8) -> ApiResult<()> {
    match approvals.iter().find_map(|a| same_approver(a, actor)) {
        Some(why) => Err(ApiError::conflict(format!(
            "{why}: {needed} approvals are needed, from distinct principals (docs/security.md, \"Principals\")"
        ))),
        None => Ok(()),
    }
}

/// The approvals the stored control config asks for (1 without one).
async fn approvals_in_force(store: &dyn Store) -> ApiResult<u8> {
    Ok(get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG)
        .await?
        .map_or(1, |c| c.value.spec.promotion.approvals)
        .max(1))
}

/// `POST /v1/directives/apply` `{"nonce"}`: one approval of the pending directive;
/// with enough approvals (from distinct principals) the draft, as planned, becomes the
/// active directive, in one transaction that fails if the plan or the draft changed.
pub(crate) async fn apply(
    State(res): State<Resources>,
    Extension(actor): Extension<Arc<Actor>>,
    body: Bytes,
) -> ApiResult<Json<ApplyResponse>> {
    let b: ApplyBody = body::json(&body)?;
    let store = res.store();
    let Some(p) = get::<Pending>(store, keys::PENDING_DIRECTIVE).await? else {
        return Err(ApiError::not_found(
            "nothing is planned: `ternctl version-control plan --draft NAME` first",
        ));
    };
    let mut pending = p.value;
    if pending.nonce != b.nonce {
        return Err(ApiError::conflict(format!(
            "nonce {:?} is not the pending plan's ({}): read the current plan (ternctl version-control plan --show) and apply its nonce",
            b.nonce, pending.nonce
        )));
    }
    let now = res.clock.now();
    if now >= pending.expires_at {
        return Err(ApiError::conflict(format!(
            "the plan of draft {} expired at {} (promotion.pending_ttl): plan it again",
            pending.draft, pending.expires_at
        )));
    }
    let Some(draft) = store.get(&keys::draft(&pending.draft)).await? else {
        return Err(ApiError::conflict(format!(
            "draft {} was deleted since it was planned",
            pending.draft
        )));
    };
    if draft.mod_revision.to_string() != pending.draft_revision {
        return Err(ApiError::conflict(format!(
            "draft {} changed since it was planned (revision {} → {}): plan it again",
            pending.draft, pending.draft_revision, draft.mod_revision
        )));
    }
    // The approvals asked for when it was planned, or more if the config asks for
    // more since.
    pending.approvals_needed = pending
        .approvals_needed
        .max(approvals_in_force(store).await?);
    check_another_approver(&pending.approvals, &actor, pending.approvals_needed)?;
    pending.approvals.push(approval(&actor, now));
    let approvals = u8::try_from(pending.approvals.len()).unwrap_or(u8::MAX);
    let done = approvals >= pending.approvals_needed;
    let mut compares = vec![
        Compare::ModRevision {
            key: keys::PENDING_DIRECTIVE.into(),
            revision: p.revision,
        },
        Compare::ModRevision {
            key: keys::draft(&pending.draft),
            revision: draft.mod_revision,
        },
    ];
    let ops = if done {
        vec![
            Op::Put {
                key: keys::ACTIVE_DIRECTIVE.into(),
                value: draft.value.clone(),
                ttl: None,
            },
            Op::Delete {
                key: keys::PENDING_DIRECTIVE.into(),
            },
        ]
    } else {
        compares.truncate(1);
        vec![Op::Put {
            key: keys::PENDING_DIRECTIVE.into(),
            value: encode(&pending)?,
            ttl: None,
        }]
    };
    match store.txn(&compares, &ops).await? {
        TxnOutcome::Committed { .. } => {}
        TxnOutcome::Failed { reason, .. } => {
            return Err(ApiError::conflict(format!(
                "the plan or the draft changed meanwhile ({reason}): read the plan again"
            )));
        }
    }
    let message = if done {
        tracing::info!(draft = %pending.draft, by = %actor.token_id, "directive applied");
        refresh_find(store, &res.answers).await;
        format!("draft {} is now the active directive", pending.draft)
    } else {
        format!(
            "approval {approvals} of {} recorded: another principal, with a token not minted by this one, applies nonce {} to promote draft {}",
            pending.approvals_needed, pending.nonce, pending.draft
        )
    };
    Ok(Json(ApplyResponse {
        applied: done,
        approvals,
        approvals_needed: pending.approvals_needed,
        message,
    }))
}

/// `POST /v1/directives/resume`: lifts a pause of the fault or churn limit.
pub(crate) async fn resume(
    State(res): State<Resources>,
    State(notifiers): State<Arc<Notifiers>>,
) -> ApiResult<Json<Value>> {
    match directives::lift_pause(res.store(), res.clock.as_ref(), &notifiers).await? {
        Some(p) => Ok(Json(serde_json::json!({
            "resumed": true,
            "was_paused_for": p.reason,
            "since": p.since,
        }))),
        None => Err(ApiError::not_found("the directive installs are not paused")),
    }
}

// ---- the status -------------------------------------------------------------------

/// `GET /v1/directives`
pub(crate) async fn status(
    State(store): State<Arc<dyn Store>>,
    State(clock): State<Arc<dyn Clock>>,
) -> ApiResult<Json<DirectivesStatus>> {
    let store = store.as_ref();
    let res = crate::directive_store::read_resources(store).await?;
    let drafts = list::<Value>(store, keys::DRAFTS_PREFIX)
        .await?
        .into_iter()
        .map(|(name, r)| Named {
            name,
            revision: r.revision.to_string(),
        })
        .collect();
    let reports = reports(store).await?;
    let report::Sum {
        active: fleet,
        replicas,
        notices,
        ..
    } = report::sum(&reports, None);
    let controllers = list::<report::ControllerStatus>(store, keys::CONTROLLERS_PREFIX)
        .await?
        .into_iter()
        .map(|(_, r)| r.value)
        .collect();
    let now = clock.now();
    let stale = res
        .active
        .as_ref()
        .and_then(|a| a.value.spec.stale_after)
        .is_some_and(|at| at <= now);
    Ok(Json(DirectivesStatus {
        notices,
        controllers,
        stale,
        enabled: res.config.as_ref().map(|c| c.value.spec.enabled),
        active: res.active.as_ref().map(|a| Named {
            name: a.value.metadata.name.clone(),
            revision: a.revision.to_string(),
        }),
        drafts,
        installers: res.installers.keys().cloned().collect(),
        pending: res.pending.map(|(p, _)| p.value),
        paused: res.paused.map(|p| p.value),
        replicas,
        fleet,
        triggered: reports.iter().map(|r| r.triggered).sum(),
        timing: res
            .active
            .as_ref()
            .map(|a| report::TimingView::of(&a.value.spec)),
        waiting: {
            let mut w: Vec<report::Waiting> =
                reports.iter().flat_map(|r| r.waiting.clone()).collect();
            // Soonest first; those no clock lifts last.
            w.sort_by_key(|x| (x.starts_at.is_none(), x.starts_at));
            w.truncate(report::MAX_WAITING);
            w
        },
    }))
}

/// `POST /v1/dev/directives` (dev clock only): one pass of this replica's loop now.
pub(crate) async fn dev_pass(
    State(pass): State<DirectivePass>,
) -> ApiResult<Json<directives::PassResult>> {
    // At the shared dev time, even if this replica's watch has not delivered it yet.
    pass.res.sync_dev_clock().await?;
    Ok(Json(directives::pass_once(&pass).await?))
}

/// `POST /v1/dev/controllers` (dev clock only): one run of the built-in version
/// controllers now (on the leader; elsewhere it says so and does nothing).
pub(crate) async fn dev_controllers(
    State(res): State<Resources>,
    State(controllers): State<Controllers>,
) -> ApiResult<Json<crate::controllers::RunResult>> {
    res.sync_dev_clock().await?;
    Ok(Json(crate::controllers::run_once(&controllers).await?))
}
