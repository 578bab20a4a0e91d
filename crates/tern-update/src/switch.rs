//! The agent's switch in tarball mode (`switch`), over the one link switch with
//! rollback (`link_switch`): the DB plan first (a refusal changes nothing); then, after
//! the journal, the agent stopped for a downgrade or a DB restore, its DB backed up
//! and restored; once linked, the agent restarted and watched until healthy. A failure
//! goes back onto the version before (its DB backup restored), never onto a revoked
//! one: onto the backup version when that one is installed and allowed, else the host
//! stays on the failing version and says so. `recover_switch` reverts a switch a
//! killed run left half done, in every namespace of tarball mode.

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
use crate::link_switch::{Back, Failed, Release, go_back, relink, switch_links};
use crate::links;
use crate::log;
use crate::service::Service;
use crate::state::{LastUpdate, Spec, UpdateFile};
use crate::update::{Failure, Reverted};

/// A switch of the agent from `from` to `to`: what its steps before and after the
/// links, and its rollback, need.
struct Agent<'a> {
    from: Option<&'a str>,
    to: &'a str,
    /// The service of `to`.
    svc: Option<Service>,
    db: Option<PathBuf>,
    plan: DbPlan<BackupUnusable>,
    /// A stop and a start rather than a reload (a downgrade or a DB restore).
    full_restart: bool,
    now: Timestamp,
    /// The agent ran when the journal was written.
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
    let mut agent = Agent {
        from: from.as_deref(),
        to,
        svc,
        db,
        plan,
        full_restart,
        now,
        was_running: false,
        db_backed_up: false,
    };
    switch_links(ctx, file, from.clone(), to, now, &mut agent)
}

impl Release for Agent<'_> {
    /// The agent stopped for a full restart, its DB backed up (and restored from `to`'s
    /// backup): a failure here is the host's.
    fn before_links(&mut self, ctx: &Ctx, file: &mut UpdateFile) -> Result<(), Failed> {
        let l = &ctx.layout;
        self.was_running = self.svc.as_ref().is_some_and(Service::is_active);
        if self.full_restart
            && self.was_running
            && let Some(svc) = &self.svc
        {
            log::info("stopping the agent (downgrade or database restore)");
            svc.stop().map_err(Failed::host)?;
        }
        if let (Some(db), Some(from)) = (&self.db, self.from)
            && matches!(self.plan, DbPlan::BackupOnly | DbPlan::BackupAndRestore)
        {
            backup::backup(db, &l.version_dir(from), &file.spec.server, from, self.now)
                .map_err(Failed::host)?;
            self.db_backed_up = true;
            if let Some(ip) = &mut file.status.in_progress {
                ip.db_backed_up = true;
            }
            save(ctx, file).map_err(Failed::host)?;
            kill_point("db_backed_up");
            if matches!(self.plan, DbPlan::BackupAndRestore) {
                log::info(format!("restoring the database backup made by {}", self.to));
                backup::restore(&l.version_dir(self.to), db).map_err(Failed::host)?;
                kill_point("db_restored");
            }
        }
        Ok(())
    }

    /// Links that cannot be moved are the host's failure, rolled back at once.
    fn links_failed(&self, e: Error) -> Result<Failed> {
        Ok(Failed::host(e))
    }

    /// The agent restarted (or reloaded) and watched until healthy; nothing to check
    /// without a service, or with one neither running nor enabled.
    fn check_linked(&mut self, ctx: &Ctx, _file: &mut UpdateFile) -> Result<(), Failed> {
        let l = &ctx.layout;
        let Some(svc) = &self.svc else {
            log::info("no service configured: links switched, nothing to restart");
            return Ok(());
        };
        if links::unit_file(&l.version_dir(self.to)).is_some() {
            svc.daemon_reload().map_err(Failed::host)?;
        }
        if !self.was_running && !svc.wants_running() {
            log::info(format!(
                "{} is not running and not enabled: not starting it",
                svc.cfg.name
            ));
            return Ok(());
        }
        let restarted = if self.was_running && !self.full_restart {
            log::info(format!("reloading {}", svc.cfg.name));
            svc.reload()
        } else {
            log::info(format!("starting {}", svc.cfg.name));
            svc.start()
        };
        restarted.map_err(Failed::version)?;
        kill_point("restarted");
        health::watch(svc, &ctx.http).map_err(|failure| {
            let version = self.to.to_string();
            Failed::version(Error::Unhealthy { version, failure })
        })?;
        kill_point("healthy");
        Ok(())
    }

    /// Back onto the version before, never onto a revoked one: onto the backup version
    /// when it is installed and allowed, else the host stays on the failing version.
    fn roll_back(&mut self, ctx: &Ctx, file: &mut UpdateFile, failed: Failed) -> Error {
        let Failed {
            reason,
            version_failed,
        } = failed;
        let to = self.to;
        log::error(format!("update to {to} failed: {reason}; rolling back"));
        // Read before the revert starts the old version, whose output would follow.
        let output = agent_output(&file.spec, version_failed);
        let failure = |reason, agent_output| Failure {
            reason,
            version_failed,
            agent_output,
        };
        if let Some(from) = self.from
            && let Some(why) = crate::trust::revoked(&ctx.http, &ctx.layout, &file.spec, from)
        {
            let allowed = file.status.backup.clone().filter(|b| {
                b != from
                    && b != to
                    && ctx.layout.version_dir(b).is_dir()
                    && crate::trust::revoked(&ctx.http, &ctx.layout, &file.spec, b).is_none()
            });
            log::error(format!(
                "{from}, the version before {to}, is revoked ({why}): not rolling back onto it"
            ));
            let Some(allowed) = allowed else {
                return stay_on_failing(ctx, file, to, from, &why, reason, output);
            };
            log::info(format!("rolling back to {allowed}, installed and allowed"));
            // The database backup is {from}'s: not restored into another version.
            let back = Back {
                version: Some(&allowed),
                restore_db: false,
                relink: true,
            };
            return go_back(ctx, file, self, back, to, failure(reason, output));
        }
        let back = Back {
            version: self.from,
            restore_db: self.db_backed_up,
            relink: true,
        };
        go_back(ctx, file, self, back, to, failure(reason, output))
    }

    /// The agent's failures all come after the journal: its links always go back.
    fn revert(&mut self, ctx: &Ctx, file: &UpdateFile, back: Back<'_>) -> Reverted {
        revert(
            ctx,
            &file.spec,
            back.version,
            back.restore_db,
            self.was_running,
        )
    }
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
    let relinked = relink(l, from, unlink_to_package);
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
