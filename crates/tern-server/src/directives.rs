//! The version reconciliation loop of the modular upgrade system (RFD 90), run by every
//! replica over the hosts it holds: read the resources, run the core's pass, record each
//! chosen install's attempt in the store by compare-and-swap right before handing its
//! instruction to the host (so two replicas never trigger one host twice), pause on the
//! fault and churn limits with an alert, and report what it saw (the fleet's view, and
//! the plan, are the sum of the replicas' reports).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::pass::Elsewhere;
use tern_core::directive::report::{self as report, DirectiveReport, Paused, PlanEvaluation};
use tern_core::directive::resource::{
    DirectiveSpec, Rate, Strategy, VersionControlConfig, VersionDirective,
};
use tern_core::directive::state::{Attempt, InstallState};
use tern_core::resource::Alert;
use tern_store::{Compare, Op, Store, TxnOutcome};

use crate::clock::Clock;
use crate::directive_loop::DirectiveState;
use crate::directive_store::{encode, get, list, read_resources, stored_form};
use crate::error::ApiResult;
use crate::inventory::directed::{ChosenInstall, PassInput};
use crate::keys;
use crate::notify::{Notice, NoticeEvent, Notifiers};
use crate::snapshot::Answers;
use crate::state::{Health, Hosts, Resources, Settings, parts_group};
use crate::trust::ReleaseTrust;

parts_group! {
    /// What a pass of the directive loop touches: the resources, the hosts it instructs,
    /// the loop's own state, whether this replica is cut off, the alerts it sends.
    pub(crate) struct DirectivePass {
        res: Resources,
        settings: Arc<Settings>,
        directives: Arc<DirectiveState>,
        hosts: Arc<Hosts>,
        health: Arc<Health>,
        notifiers: Arc<Notifiers>,
    }
}

/// What one pass did (for the dev route and the tests).
#[derive(Debug, Default, Serialize)]
pub(crate) struct PassResult {
    pub(crate) triggered: Vec<String>,
    pub(crate) paused: Option<String>,
    /// The global freeze held this pass: nothing was triggered for it.
    pub(crate) frozen: bool,
    /// Hosts the pass chose that a stop of the one answer held (a pin, a mode, a
    /// revoked target, the replica cut off).
    pub(crate) held: Vec<String>,
}

/// One pass of this replica's loop.
pub(crate) async fn pass_once(state: &DirectivePass) -> ApiResult<PassResult> {
    let store = state.res.store();
    let now = state.res.clock.now();
    let res = read_resources(store).await?;
    // Nothing to evaluate and nothing left from an earlier directive: no pass over the
    // hosts, no report (a fleet that does not use directives pays nothing).
    let notification = res
        .config
        .as_ref()
        .and_then(|c| c.value.spec.notification.clone());
    if res.active.is_none() && res.pending.is_none() && notification.is_none() {
        state
            .directives
            .active
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut loop_state = state.directives.pass.lock().await;
        if loop_state.governed == 0 && loop_state.states.is_empty() {
            drop(loop_state);
            // Alerts raised while directives were in use are cleared once.
            if loop_state_had_alerts(&state.directives) {
                sync_alerts(
                    store,
                    &state.directives,
                    &state.notifiers,
                    None,
                    &[],
                    None,
                    now,
                )
                .await?;
            }
            return Ok(PassResult::default());
        }
        // The last pass governed hosts: one more pass clears their states.
        loop_state.governed = 0;
        loop_state.states.clear();
    }
    let control = res
        .config
        .as_ref()
        .map(|c| c.value.spec.clone())
        .unwrap_or_default();
    let timings = control.timings.state_timings();
    let reports = list::<DirectiveReport>(store, keys::DIRECTIVE_REPORTS_PREFIX).await?;
    let mut elsewhere = Elsewhere::default();
    for (_, r) in reports
        .iter()
        .filter(|(name, _)| *name != state.settings.replica_id)
    {
        elsewhere.governed += r.value.active.governed;
        for (s, n) in &r.value.active.states {
            *elsewhere.states.entry(*s).or_default() += n;
        }
    }
    state
        .directives
        .active
        .store(res.active.is_some(), std::sync::atomic::Ordering::Relaxed);
    let empty = DirectiveSpec::default();
    let spec = res.active.as_ref().map_or(&empty, |a| &a.value.spec);
    load_attempts(store, &state.hosts, &timings, now).await?;
    let mut loop_state = state.directives.pass.lock().await;
    let governed_before = loop_state.governed + elsewhere.governed;
    let rate = Rate::parse(&control.rolling_install.rate);
    // A freeze of the agent (the directives govern it alone) triggers nothing new,
    // like a pause (the bucket does not fill).
    let frozen = state
        .res
        .snapshot()
        .freeze
        .as_ref()
        .is_some_and(|f| f.holds(tern_core::product::AGENT));
    let budget = match (&rate, &res.paused) {
        (Some(rate), None) if control.enabled && !frozen => {
            loop_state.bucket.fill(rate, governed_before, now)
        }
        _ => 0,
    };
    let dry_nonce = res
        .pending
        .as_ref()
        .filter(|(p, _)| p.value.dry_run && p.value.expires_at > now)
        .map(|(p, _)| p.value.nonce.clone());
    let dry_budget = match (&rate, &dry_nonce) {
        (Some(rate), Some(_)) => {
            let governed = loop_state.plan_governed + elsewhere.governed;
            loop_state.dry_bucket.fill(rate, governed, now)
        }
        _ => 0,
    };
    // The notification controller's directive: a draft, or the active one.
    let notify_draft = match &notification {
        Some(n) if n.from != "active" => get::<VersionDirective>(store, &keys::draft(&n.from))
            .await?
            .map(|d| d.value.spec),
        _ => None,
    };
    let notify_spec = match &notification {
        Some(n) if n.from == "active" => res.active.as_ref().map(|a| &a.value.spec),
        _ => notify_draft.as_ref(),
    };
    let snapshot = state.res.snapshot();
    let fleet = snapshot.fleet(
        state.health.cut_off(),
        state.settings.security.require_trust,
        true,
        now,
    );
    let (active, plan, dry_chosen, notices) = {
        let mut inv = state.hosts.inventory();
        inv.expire(state.res.clock.monotonic(), state.settings.max_silence());
        // The active directive's pass; the plan's and the notification's vary it.
        let base = PassInput {
            spec,
            installers: &res.installers,
            control: &control,
            timings,
            now,
            budget,
            elsewhere: &elsewhere,
            record_states: true,
            dry_run: None,
            notices: false,
            release_to: Some(crate::inventory::directed::ReleaseTo { fleet }),
        };
        let active = inv.directive_pass(&base);
        let mut dry_chosen = Vec::new();
        let plan = res.pending.as_ref().map(|(p, draft)| {
            let e = inv.directive_pass(&PassInput {
                spec: &draft.spec,
                budget: dry_budget,
                record_states: false,
                dry_run: dry_nonce.as_deref(),
                release_to: None,
                ..base
            });
            dry_chosen = e.chosen;
            PlanEvaluation {
                nonce: p.value.nonce.clone(),
                evaluation: e.evaluation,
                dry_run: None,
            }
        });
        let notices = notify_spec.map_or_else(Vec::new, |spec| {
            inv.directive_pass(&PassInput {
                spec,
                budget: 0,
                record_states: false,
                notices: true,
                release_to: None,
                ..base
            })
            .notices
        });
        (active, plan, dry_chosen, notices)
    };
    let mut result = PassResult {
        frozen,
        ..PassResult::default()
    };
    let mut waiting = Vec::new();
    if let Some(pause) = &active.paused {
        result.paused = Some(pause.to_string());
        if res.paused.is_none() {
            raise_pause(
                store,
                &state.notifiers,
                &state.settings.replica_id,
                &pause.to_string(),
                now,
            )
            .await?;
        }
    } else {
        for chosen in &active.chosen {
            // The one answer's stops (a freeze, a pin, a mode set disabled or
            // suspended, a revoked target, this replica cut off) hold a directive's
            // install as every other: no attempt is recorded for a held host.
            if let Err((holds, start)) = directed_allowed(&fleet, spec, chosen) {
                result.held.push(chosen.updater_id.clone());
                if waiting.len() < report::MAX_WAITING {
                    waiting.push(waiting_of(chosen, holds, start));
                }
                continue;
            }
            if trigger(store, &state.hosts, chosen, &timings, now).await? {
                result.triggered.push(chosen.updater_id.clone());
            }
        }
    }
    let n = result.triggered.len() as u64;
    loop_state.bucket.take(n);
    let mut dry_sent = 0;
    if let (Some(nonce), Some((pending, _))) = (&dry_nonce, &res.pending) {
        for chosen in &dry_chosen {
            if send_dry_run(
                store,
                &state.hosts,
                chosen,
                nonce,
                pending.value.expires_at,
                now,
            )
            .await?
            {
                dry_sent += 1;
            }
        }
    }
    loop_state.dry_bucket.take(dry_sent);
    let mut plan = plan;
    if let Some(p) = plan.as_mut() {
        loop_state.plan_governed = p.evaluation.governed;
        let counts = state.hosts.inventory().dry_run_counts(dry_nonce.as_deref());
        if dry_nonce.is_some() {
            p.dry_run = Some(counts);
        }
    } else {
        loop_state.plan_governed = 0;
    }
    // The pass counted them before their trigger: report them where they are now.
    let mut active = active;
    if n > 0 {
        let states = &mut active.evaluation.states;
        let needs = states.entry(InstallState::NeedsInstall).or_default();
        *needs = needs.saturating_sub(n);
        if *needs == 0 {
            states.remove(&InstallState::NeedsInstall);
        }
        *states.entry(InstallState::InstallTriggered).or_default() += n;
    }
    loop_state.governed = active.evaluation.governed;
    loop_state.states = active.evaluation.states.clone();
    loop_state.triggered_total += result.triggered.len() as u64;
    drop(loop_state);
    let report = DirectiveReport {
        replica: state.settings.replica_id.clone(),
        at: Some(now),
        active_revision: res.active.as_ref().map(|a| a.revision.to_string()),
        active: active.evaluation,
        triggered: result.triggered.len() as u64,
        plan,
        notices,
        waiting,
    };
    store
        .put(
            &keys::directive_report(&state.settings.replica_id),
            encode(&report)?,
            Some(report_ttl(&state.settings)),
        )
        .await?;
    // The alerts follow the fleet: this report and the others' last ones.
    let mut fleet_notices = Vec::new();
    for r in reports
        .iter()
        .map(|(_, r)| &r.value)
        .filter(|r| r.replica != state.settings.replica_id)
        .chain(std::iter::once(&report))
    {
        for n in &r.notices {
            tern_core::directive::notice::push(&mut fleet_notices, n.clone());
        }
    }
    let stale_after = res.active.as_ref().and_then(|a| a.value.spec.stale_after);
    if notification.is_some() || stale_after.is_some() || loop_state_had_alerts(&state.directives) {
        sync_alerts(
            store,
            &state.directives,
            &state.notifiers,
            notification.as_ref(),
            &fleet_notices,
            stale_after,
            now,
        )
        .await?;
    }
    Ok(result)
}

/// Whether this replica last saw directive alerts raised (so an empty set must be
/// written once to clear them).
fn loop_state_had_alerts(directives: &DirectiveState) -> bool {
    directives
        .alerts_raised
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Makes `/tern/directives/alerts` hold the directive alerts that hold now
/// (`tern_core::directive::notice::alerts`), by compare-and-swap: the replica whose
/// write commits sends the notices of the change (`notify::diff_alerts`: raised,
/// cleared; a message that only changes sends nothing).
async fn sync_alerts(
    store: &dyn Store,
    directives: &DirectiveState,
    notifiers: &Notifiers,
    notification: Option<&tern_core::directive::resource::Notification>,
    fleet: &[tern_core::directive::notice::VersionNotice],
    stale_after: Option<Timestamp>,
    now: Timestamp,
) -> ApiResult<()> {
    let current = get::<Vec<Alert>>(store, keys::DIRECTIVE_ALERTS).await?;
    let before = current
        .as_ref()
        .map(|c| c.value.clone())
        .unwrap_or_default();
    let after =
        tern_core::directive::notice::alerts(notification, fleet, stale_after, &before, now);
    directives
        .alerts_raised
        .store(!after.is_empty(), std::sync::atomic::Ordering::Relaxed);
    if before == after {
        return Ok(());
    }
    let compare = compare_as_read(keys::DIRECTIVE_ALERTS, current.as_ref().map(|c| c.revision));
    let op = if after.is_empty() {
        Op::Delete {
            key: keys::DIRECTIVE_ALERTS.to_string(),
        }
    } else {
        Op::Put {
            key: keys::DIRECTIVE_ALERTS.to_string(),
            value: encode(&after)?,
            ttl: None,
        }
    };
    if let TxnOutcome::Failed { .. } = store.txn(&[compare], &[op]).await? {
        // Another replica wrote first; the next pass sees its set.
        return Ok(());
    }
    let server = notifiers.server_name();
    for notice in crate::notify::diff_alerts(&before, &after, None, server, now) {
        tracing::warn!(kind = %notice.alert.kind, event = ?notice.event, message = %notice.alert.message, "directive alert");
        notifiers.send(notice);
    }
    Ok(())
}

/// The store condition "`key` is still as it was read": absent, or at `revision`.
fn compare_as_read(key: &str, revision: Option<tern_store::Revision>) -> Compare {
    match revision {
        None => Compare::Absent {
            key: key.to_string(),
        },
        Some(revision) => Compare::ModRevision {
            key: key.to_string(),
            revision,
        },
    }
}

fn send_alert(notifiers: &Notifiers, event: NoticeEvent, alert: Alert, now: Timestamp) {
    notifiers.send(Notice {
        event,
        alert,
        rollout: None,
        server: notifiers.server_name().to_string(),
        at: now,
        program: "ternd",
    });
}

/// Above this many hosts new to this replica, their attempt records are read with one
/// listing instead of one read each.
const ATTEMPT_READS: usize = 64;

/// Reads the attempt records of the hosts this replica has not checked yet (after a
/// restart, every host; then those that arrive): an install in flight, or one that
/// failed or churned recently, shows in their state from this pass, not only once the
/// host is chosen again.
async fn load_attempts(
    store: &dyn Store,
    hosts: &Hosts,
    timings: &tern_core::directive::state::StateTimings,
    now: Timestamp,
) -> ApiResult<()> {
    let ids = hosts.inventory().unchecked_attempts();
    if ids.is_empty() {
        return Ok(());
    }
    let mut found = std::collections::HashMap::new();
    let mut keep = |id: String, a: Attempt| {
        let age = now.duration_since(a.at);
        if !age.is_negative() && age.unsigned_abs() < timings.recent {
            found.insert(id, a);
        }
    };
    if ids.len() <= ATTEMPT_READS {
        for id in &ids {
            if let Some(r) = get::<Attempt>(store, &keys::attempt(id)).await? {
                keep(id.clone(), r.value);
            }
        }
    } else {
        for (id, r) in list::<Attempt>(store, keys::ATTEMPTS_PREFIX).await? {
            keep(id, r.value);
        }
    }
    hosts.inventory().attempts_checked(&ids, &found);
    Ok(())
}

/// A replica's directive report outlives a few missed passes, not more: the fleet's
/// view is the sum of the reports there are.
pub(crate) fn report_ttl(settings: &Settings) -> Duration {
    (settings.directive_period * 5).max(Duration::from_secs(30))
}

/// Records the attempt by compare-and-swap, then hands the instruction to the host.
/// False when another replica (or an earlier life of this one) triggered the host
/// recently: its attempt is adopted instead.
async fn trigger(
    store: &dyn Store,
    hosts: &Hosts,
    chosen: &ChosenInstall,
    timings: &tern_core::directive::state::StateTimings,
    now: Timestamp,
) -> ApiResult<bool> {
    let key = keys::attempt(&chosen.updater_id);
    let existing = store.get(&key).await?;
    if let Some(kv) = &existing
        && let Ok(prev) = serde_json::from_slice::<Attempt>(&kv.value)
    {
        let age = now.duration_since(prev.at);
        if !age.is_negative() && age.unsigned_abs() < timings.recent {
            hosts.inventory().adopt_attempt(&chosen.updater_id, prev);
            return Ok(false);
        }
    }
    let attempt = Attempt {
        id: format!("att-{}", crate::auth::random_hex(12)?),
        at: now,
        installer: chosen.installer_name.clone(),
        from_version: chosen.from_version.clone(),
        target_version: chosen.target.version.clone(),
    };
    let compare = compare_as_read(&key, existing.as_ref().map(|kv| kv.mod_revision));
    // Past `recent` an attempt decides nothing: the store drops it a little later.
    let put = Op::Put {
        key: key.clone(),
        value: encode(&attempt)?,
        ttl: Some(timings.recent + Duration::from_secs(600)),
    };
    match store.txn(&[compare], &[put]).await? {
        TxnOutcome::Committed { .. } => {}
        TxnOutcome::Failed { .. } => {
            tracing::info!(updater_id = %chosen.updater_id, "another replica triggered this host first");
            return Ok(false);
        }
    }
    let instruction = InstallInstruction {
        attempt_id: attempt.id.clone(),
        installer_name: chosen.installer_name.clone(),
        installer: chosen.installer.clone(),
        target: chosen.target.clone(),
        dry_run: false,
        directive: chosen.directive.clone(),
    };
    tracing::info!(
        updater_id = %chosen.updater_id,
        directive = %chosen.directive,
        from = %chosen.from_version,
        to = %chosen.target.version,
        installer = %chosen.installer_name,
        attempt = %attempt.id,
        "install triggered"
    );
    Ok(hosts
        .inventory()
        .trigger(&chosen.updater_id, attempt, instruction))
}

/// A dry run of the pending plan on one host: recorded once per host and plan (by
/// compare-and-swap, as attempts are, so two replicas never both send it), apart from
/// the install attempts, whose state a dry run does not touch. True when sent now.
async fn send_dry_run(
    store: &dyn Store,
    hosts: &Hosts,
    chosen: &ChosenInstall,
    nonce: &str,
    expires_at: Timestamp,
    now: Timestamp,
) -> ApiResult<bool> {
    let key = keys::dry_run(&chosen.updater_id);
    let existing = store.get(&key).await?;
    if let Some(kv) = &existing
        && let Ok(prev) = serde_json::from_slice::<DryRunRecord>(&kv.value)
        && prev.nonce == nonce
    {
        // Sent by another replica, or before a restart: count it, do not resend.
        hosts
            .inventory()
            .send_dry_run(&chosen.updater_id, nonce, &prev.attempt_id, None);
        return Ok(false);
    }
    let record = DryRunRecord {
        nonce: nonce.to_string(),
        attempt_id: format!("dry-{}", crate::auth::random_hex(12)?),
        at: now,
        target_version: chosen.target.version.clone(),
        installer: chosen.installer_name.clone(),
    };
    let compare = compare_as_read(&key, existing.as_ref().map(|kv| kv.mod_revision));
    // Kept until the plan expires (a minute at least), then the store drops it.
    let left = expires_at.duration_since(now);
    let ttl = if left.is_negative() {
        Duration::from_secs(60)
    } else {
        left.unsigned_abs().max(Duration::from_secs(60))
    };
    let put = Op::Put {
        key,
        value: encode(&record)?,
        ttl: Some(ttl),
    };
    if let TxnOutcome::Failed { .. } = store.txn(&[compare], &[put]).await? {
        return Ok(false);
    }
    let instruction = InstallInstruction {
        attempt_id: record.attempt_id.clone(),
        installer_name: chosen.installer_name.clone(),
        installer: chosen.installer.clone(),
        target: chosen.target.clone(),
        dry_run: true,
        directive: chosen.directive.clone(),
    };
    tracing::info!(
        updater_id = %chosen.updater_id,
        to = %chosen.target.version,
        installer = %chosen.installer_name,
        attempt = %record.attempt_id,
        "dry run sent"
    );
    hosts.inventory().send_dry_run(
        &chosen.updater_id,
        nonce,
        &record.attempt_id,
        Some(instruction),
    );
    Ok(true)
}

/// `/tern/directives/dryruns/<updater_id>`: the dry run sent to a host for a plan.
#[derive(Debug, serde::Deserialize, Serialize)]
struct DryRunRecord {
    nonce: String,
    attempt_id: String,
    at: Timestamp,
    target_version: String,
    installer: String,
}

/// Writes the pause (the first replica to see it wins) and raises the alert once.
async fn raise_pause(
    store: &dyn Store,
    notifiers: &Notifiers,
    replica_id: &str,
    reason: &str,
    now: Timestamp,
) -> ApiResult<()> {
    let paused = Paused {
        reason: reason.to_string(),
        since: now,
        replica: replica_id.to_string(),
    };
    match store
        .create(keys::DIRECTIVES_PAUSED, encode(&paused)?, None)
        .await
    {
        Ok(_) => {}
        Err(tern_store::Error::AlreadyExists { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::error!(%reason, "directive installs paused; `ternctl version-control resume` lifts it");
    send_pause_notice(notifiers, NoticeEvent::Raised, reason, now, now);
    Ok(())
}

/// The pause's alert, raised or cleared, to ternd's notifiers.
fn send_pause_notice(
    notifiers: &Notifiers,
    event: NoticeEvent,
    reason: &str,
    since: Timestamp,
    now: Timestamp,
) {
    let alert = Alert {
        kind: tern_core::alert::kind::DIRECTIVE_INSTALLS_PAUSED.to_string(),
        group: None,
        message: reason.to_string(),
        since,
    };
    send_alert(notifiers, event, alert, now);
}

/// Lifts a pause (an operator's `resume`) and tells the receivers.
pub(crate) async fn lift_pause(
    store: &dyn Store,
    clock: &dyn Clock,
    notifiers: &Notifiers,
) -> ApiResult<Option<Paused>> {
    let Some(p) = get::<Paused>(store, keys::DIRECTIVES_PAUSED).await? else {
        return Ok(None);
    };
    match store
        .delete(keys::DIRECTIVES_PAUSED, Some(p.revision))
        .await
    {
        Ok(_) | Err(tern_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let now = clock.now();
    send_pause_notice(
        notifiers,
        NoticeEvent::Cleared,
        &p.value.reason,
        p.value.since,
        now,
    );
    Ok(Some(p.value))
}

/// The loop (system clock only; under a dev clock, passes run on
/// `POST /v1/dev/directives`).
pub(crate) async fn run(state: DirectivePass) {
    let mut interval = tokio::time::interval(state.settings.directive_period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if let Err(e) = pass_once(&state).await {
            tracing::warn!(error = %e.message, "a directive pass failed; the next one retries");
        }
    }
}

/// find's snapshot holds the active directive and the installers: refreshed at once
/// after a write of either here (the store watch brings it to the other replicas).
pub(crate) async fn refresh_find(store: &dyn Store, answers: &Answers) {
    if let Err(e) = crate::state::refresh_snapshot(store, answers).await {
        tracing::warn!(error = %e, "refreshing the find snapshot failed");
    }
}

/// Stores a draft (validated); under `promotion.strategy: automatic` with `from` naming
/// it, it becomes the active directive at once. Whether it was promoted. Here, not in
/// `routes::directives`, since the releases controller writes drafts too.
pub(crate) async fn write_draft(
    trust: Option<&ReleaseTrust>,
    store: &dyn Store,
    answers: &Answers,
    d: &VersionDirective,
) -> ApiResult<bool> {
    // A revoked target is refused here, before it is stored or promoted (by hand or
    // automatically), with `--trust-root`.
    for (i, directive) in d.spec.directives.iter().enumerate() {
        for (j, target) in directive.targets.iter().enumerate() {
            crate::release_check::require_not_revoked(
                crate::release_check::Check {
                    trust,
                    store,
                    answers,
                },
                &format!("spec.directives[{i}].targets[{j}].version"),
                &target.version,
            )
            .await?;
        }
    }
    let name = &d.metadata.name;
    let bytes = stored_form(d)?;
    store.put(&keys::draft(name), bytes.clone(), None).await?;
    let config = get::<VersionControlConfig>(store, keys::DIRECTIVE_CONFIG).await?;
    let automatic = config.is_some_and(|c| {
        c.value.spec.promotion.strategy == Strategy::Automatic
            && c.value.spec.promotion.from.as_deref() == Some(name.as_str())
    });
    if automatic {
        store.put(keys::ACTIVE_DIRECTIVE, bytes, None).await?;
        tracing::info!(draft = %name, "draft promoted at once (promotion.strategy automatic)");
        refresh_find(store, answers).await;
    }
    Ok(automatic)
}

/// What `version-control status` says of a chosen host held by `start`.
fn waiting_of(
    chosen: &ChosenInstall,
    holds: tern_core::hold::Holds,
    start: tern_core::gate::DirectedStart,
) -> report::Waiting {
    use tern_core::gate::DirectedStart;
    let starts_at = match start {
        DirectedStart::At(t) => Some(t),
        DirectedStart::Now | DirectedStart::Never | DirectedStart::Held(_) => None,
    };
    let holds = holds.codes();
    report::Waiting {
        updater_id: chosen.updater_id.clone(),
        group: chosen.group.clone(),
        directive: chosen.directive.clone(),
        target: chosen.target.version.clone(),
        holds,
        starts_at,
    }
}

/// The one answer for `chosen`'s host and its target now, under the time rules of the
/// directive that chose it; `Err` with when it may start when something holds it.
fn directed_allowed(
    fleet: &tern_core::gate::Fleet<'_>,
    spec: &tern_core::directive::resource::DirectiveSpec,
    chosen: &ChosenInstall,
) -> Result<(), (tern_core::hold::Holds, tern_core::gate::DirectedStart)> {
    let Ok(target) = tern_core::version::Version::parse(&chosen.target.version) else {
        return Err((
            tern_core::hold::Holds::NONE,
            tern_core::gate::DirectedStart::Never,
        ));
    };
    let mut host =
        tern_core::gate::Host::new(tern_core::gate::AGENT, &chosen.group, &chosen.updater_id);
    // Hosts that pin no root are refused at their heartbeat under --require-trust.
    host.pins_root = true;
    let timing = spec.timing(&chosen.directive);
    let answer = tern_core::gate::answer(
        fleet,
        &host,
        tern_core::gate::Ask::Directed(tern_core::gate::DirectedInstall {
            target: &target,
            timing,
        }),
    );
    if answer.update() {
        Ok(())
    } else {
        Err((
            answer.holds,
            tern_core::gate::directed_start(fleet, &host, timing, &answer),
        ))
    }
}
