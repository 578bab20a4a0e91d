//! The switch of tarball mode (`switch`): the DB plan, the journal
//! (`status.in_progress`, written before the first change), stop, DB backup and
//! restore, the links, restart and health watch; then commit, or roll back (never onto
//! a revoked version) and record the failure. `recover_switch` reverts a switch a
//! killed run left half done.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;

use crate::agent::{agent_output, service_for};
use crate::backup::{self, BackupUnusable};
use crate::ctx::{Ctx, save};
use crate::decide::{self, DbPlan};
use crate::error::{Error, Result};
use crate::health;
use crate::hooks::kill_point;
use crate::layout::Layout;
use crate::links;
use crate::log;
use crate::service::Service;
use crate::state::{InProgress, LastUpdate, Spec, UpdateFile};
use crate::update::{Failure, Reverted, commit, record_failure};

struct Switch<'a> {
    from: Option<&'a str>,
    to: &'a str,
    svc: Option<Service>,
    db: Option<PathBuf>,
    was_running: bool,
    db_backed_up: bool,
}

/// Switches the host from `from` to `to` (both unpacked), or rolls back and errors.
pub(crate) fn switch(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    let l = &ctx.layout;
    let to_dir = l.version_dir(to);
    links::check(l, &to_dir, ctx.overwrite)?;
    let svc = service_for(&file.spec, Some(&to_dir))?;
    let now = Timestamp::now();
    let db = svc
        .as_ref()
        .and_then(|s| s.cfg.db_path.clone())
        .filter(|p| p.is_file());
    let max_age = svc
        .as_ref()
        .map(|s| Duration::from_secs_f64(s.cfg.backup_max_age_hours * 3600.0))
        .unwrap_or(Duration::ZERO);
    let target_backup =
        backup::load_valid(&to_dir, &file.spec.server, to, now, max_age).map(|_| ());
    let plan = decide::db_plan(from.as_deref(), to, db.is_some(), &target_backup);
    if let DbPlan::Refuse(refusal) = plan {
        return Err(refusal.into());
    }
    let downgrade = from
        .as_deref()
        .is_some_and(|f| decide::compare(to, f).is_lt());
    let full_restart = downgrade || matches!(plan, DbPlan::BackupAndRestore);

    file.status.in_progress = Some(InProgress {
        from: from.clone(),
        to: to.to_string(),
        started: now,
        db_backed_up: false,
    });
    save(ctx, file)?;
    kill_point("journal_written");

    let was_running = svc.as_ref().is_some_and(Service::is_active);
    let mut sw = Switch {
        from: from.as_deref(),
        to,
        svc,
        db,
        was_running,
        db_backed_up: false,
    };
    match apply_switch(ctx, file, &mut sw, &plan, full_restart, now) {
        Ok(()) => commit(ctx, file, from, to),
        Err((reason, version_failed)) => Err(rollback(ctx, file, &sw, reason, version_failed)),
    }
}

/// The steps that change the host. `Err((reason, version_failed))`: true when the new
/// version itself failed (its restart or its health check), false when a step of the
/// host did (stop, DB backup, links).
fn apply_switch(
    ctx: &Ctx,
    file: &mut UpdateFile,
    sw: &mut Switch<'_>,
    plan: &DbPlan<BackupUnusable>,
    full_restart: bool,
    now: Timestamp,
) -> std::result::Result<(), (Error, bool)> {
    let l = &ctx.layout;
    let io = |e: Error| (e, false);
    if full_restart
        && sw.was_running
        && let Some(svc) = &sw.svc
    {
        log::info("stopping the agent (downgrade or database restore)");
        svc.stop().map_err(io)?;
    }
    if let (Some(db), Some(from)) = (&sw.db, sw.from)
        && matches!(plan, DbPlan::BackupOnly | DbPlan::BackupAndRestore)
    {
        backup::backup(db, &l.version_dir(from), &file.spec.server, from, now).map_err(io)?;
        sw.db_backed_up = true;
        if let Some(ip) = &mut file.status.in_progress {
            ip.db_backed_up = true;
        }
        save(ctx, file).map_err(io)?;
        kill_point("db_backed_up");
        if matches!(plan, DbPlan::BackupAndRestore) {
            log::info(format!("restoring the database backup made by {}", sw.to));
            backup::restore(&l.version_dir(sw.to), db).map_err(io)?;
            kill_point("db_restored");
        }
    }
    links::apply(l, &l.version_dir(sw.to), ctx.overwrite).map_err(io)?;
    kill_point("links_switched");
    let Some(svc) = &sw.svc else {
        log::info("no service configured: links switched, nothing to restart");
        return Ok(());
    };
    if links::unit_file(&l.version_dir(sw.to)).is_some() {
        svc.daemon_reload().map_err(io)?;
    }
    if !sw.was_running && !svc.wants_running() {
        log::info(format!(
            "{} is not running and not enabled: not starting it",
            svc.cfg.name
        ));
        return Ok(());
    }
    let restarted = if sw.was_running && !full_restart {
        log::info(format!("reloading {}", svc.cfg.name));
        svc.reload()
    } else {
        log::info(format!("starting {}", svc.cfg.name));
        svc.start()
    };
    restarted.map_err(|e| (e, true))?;
    kill_point("restarted");
    health::watch(svc, &ctx.http).map_err(|failure| {
        let version = sw.to.to_string();
        (Error::Unhealthy { version, failure }, true)
    })?;
    kill_point("healthy");
    Ok(())
}

/// Puts the host back on `sw.from` after a failed switch and records the failure.
/// `version_failed`: the new version itself failed (its restart or its health check).
fn rollback(
    ctx: &Ctx,
    file: &mut UpdateFile,
    sw: &Switch<'_>,
    reason: Error,
    version_failed: bool,
) -> Error {
    log::error(format!(
        "update to {} failed: {reason}; rolling back",
        sw.to
    ));
    // Read before the revert starts the old version, whose output would follow.
    let output = agent_output(&file.spec, version_failed);
    // Never back onto a revoked version: the one before it if that is allowed, else
    // the host stays on the failing version, stops, and says so.
    if let Some(from) = sw.from
        && let Some(why) = crate::trust::revoked(&ctx.http, &ctx.layout, &file.spec, from)
    {
        let allowed = file.status.backup.clone().filter(|b| {
            b != from
                && b != sw.to
                && ctx.layout.version_dir(b).is_dir()
                && crate::trust::revoked(&ctx.http, &ctx.layout, &file.spec, b).is_none()
        });
        log::error(format!(
            "{from}, the version before {}, is revoked ({why}): not rolling back onto it",
            sw.to
        ));
        let Some(back) = allowed else {
            return stay_on_failing(ctx, file, sw.to, from, &why, reason, output);
        };
        log::info(format!("rolling back to {back}, installed and allowed"));
        // The database backup is {from}'s: not restored into another version.
        let reverted = revert(ctx, &file.spec, Some(&back), false, sw.was_running);
        return record_failure(
            ctx,
            file,
            Some(&back),
            sw.to,
            Failure {
                reason,
                version_failed,
                agent_output: output,
            },
            reverted,
        );
    }
    let reverted = revert(ctx, &file.spec, sw.from, sw.db_backed_up, sw.was_running);
    record_failure(
        ctx,
        file,
        sw.from,
        sw.to,
        Failure {
            reason,
            version_failed,
            agent_output: output,
        },
        reverted,
    )
}

/// A failed switch with nothing allowed to roll back to: `to` stays linked (the host
/// runs the failing version rather than a revoked one), is skipped so that nothing
/// retries it, and the failure says why; the heartbeat reports it (not healthy, failed
/// version `to`, no rollback). An operator rolls out a fixed version, or forces one.
fn stay_on_failing(
    ctx: &Ctx,
    file: &mut UpdateFile,
    to: &str,
    from: &str,
    why: &str,
    reason: Error,
    output: Option<String>,
) -> Error {
    let outcome = format!(
        "not rolled back: {from} is revoked ({why}) and no allowed version is installed; {to} stays linked though it failed, and is not retried: roll out a fixed version (or `tern-update pin --force-version`)"
    );
    let st = &mut file.status;
    st.active = Some(to.to_string());
    st.backup = None;
    st.skip = Some(to.to_string());
    st.rollback = false;
    st.environment_failure = None;
    st.last_update = Some(LastUpdate {
        time: Timestamp::now(),
        target: to.to_string(),
        success: false,
        error: Some(LastUpdate::error_with_output(
            format!("{reason}; {outcome}"),
            output.as_deref(),
        )),
        agent_output: output,
    });
    st.in_progress = None;
    if let Err(e) = save(ctx, file) {
        log::error(format!("could not record the failure in update.yaml: {e}"));
    }
    Error::UpdateFailed {
        target: to.to_string(),
        reason: Box::new(reason),
        outcome,
    }
}

/// Links, DB and service back to `from`.
fn revert(
    ctx: &Ctx,
    spec: &Spec,
    from: Option<&str>,
    db_backed_up: bool,
    was_running: bool,
) -> Reverted {
    let l = &ctx.layout;
    let from_dir = from.map(|f| l.version_dir(f));
    let svc = match service_for(spec, from_dir.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            log::error(format!("service config: {e}"));
            None
        }
    };
    let was_active = svc.as_ref().is_some_and(Service::is_active);
    if was_active
        && let Some(svc) = &svc
        && let Err(e) = svc.stop()
    {
        log::error(format!("stopping the failed version: {e}"));
    }
    if db_backed_up
        && let (Some(from), Some(db)) = (from, svc.as_ref().and_then(|s| s.cfg.db_path.clone()))
    {
        match backup::restore(&l.version_dir(from), &db) {
            Ok(()) => log::info(format!("restored the database of {from}")),
            Err(e) => log::error(format!("restoring the database of {from}: {e}")),
        }
    }
    let relinked = match &from_dir {
        Some(dir) => links::apply(l, dir, true),
        None => unlink_to_package(l),
    };
    if let Err(e) = relinked {
        log::error(format!("relinking: {e}"));
        return Reverted::unchecked(format!(
            "relinking failed ({e}); the host may have no working agent"
        ));
    }
    let running = from.unwrap_or("no managed version");
    let Some(svc) = svc else {
        return Reverted::unchecked(format!("links point to {running}"));
    };
    if from_dir.as_deref().and_then(links::unit_file).is_some() {
        let _ = svc.daemon_reload();
    }
    if from.is_none() && !l.system_dir().join("bin").is_dir() {
        return Reverted::unchecked("no agent was installed before; none is now");
    }
    if !(was_running || was_active || svc.wants_running()) {
        return Reverted::unchecked(format!(
            "links point to {running} (agent not running, as before)"
        ));
    }
    if let Err(e) = svc.start() {
        return Reverted::unchecked(format!("{running} is linked but failed to start: {e}"));
    }
    match health::watch(&svc, &ctx.http) {
        Ok(()) => Reverted {
            outcome: format!("the host runs {running} and it is healthy"),
            healthy: true,
        },
        Err(why) => Reverted::unchecked(format!(
            "the host runs {running} but it is not healthy: {why}"
        )),
    }
}

fn unlink_to_package(l: &Layout) -> Result<()> {
    links::remove(l, &|p: &Path| l.is_managed(p))?;
    if l.system_dir().is_dir() {
        links::apply(l, &l.system_dir(), false)?;
    }
    Ok(())
}

/// Reverts a switch a killed run left half done (journal in `status.in_progress`), in
/// tarball mode (`run::recover` picks the mode).
pub(crate) fn recover_switch(ctx: &Ctx, file: &mut UpdateFile) -> Result<()> {
    let Some(ip) = file.status.in_progress.clone() else {
        return Ok(());
    };
    log::warn(format!(
        "a previous run was interrupted while switching {} -> {}; reverting",
        ip.from.as_deref().unwrap_or("(nothing)"),
        ip.to
    ));
    let reverted = revert(ctx, &file.spec, ip.from.as_deref(), ip.db_backed_up, false);
    log::info(format!("recovered: {}", reverted.outcome));
    file.status.in_progress = None;
    save(ctx, file)?;
    kill_point("recovered");
    Ok(())
}
