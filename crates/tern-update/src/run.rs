//! One update run of tern-update mode or package mode: recover what a killed run left,
//! ask find (or the channel), decide, wait out the jitter, install and switch. Above
//! the mechanics (`download` and `switch` in tarball mode, `package` in package mode) and the channel
//! follower, which this module picks between.

use std::time::Duration;

use jiff::Timestamp;
use tern_core::wire::FindResponse;

use crate::agent::agent_health;
use crate::cleanup::cleanup;
use crate::ctx::{Ctx, save};
use crate::decide::{self, Decision};
use crate::download::{install, record_install_failure};
use crate::error::Result;
use crate::hooks::kill_point;
use crate::host_facts::host_facts;
use crate::identity::updater_id;
use crate::layout;
use crate::log;
use crate::random::random_up_to;
use crate::state::UpdateFile;
use crate::switch::{recover_switch, switch};

/// The longest jitter a run waits, whatever the server says (`agent_update_jitter_seconds`
/// comes from the network: u64::MAX, or years, must not stall the host). ternd's own
/// jitter is a minute; an hour spreads the largest fleet without making a host look gone.
pub(crate) const MAX_JITTER_SECONDS: u64 = 3600;

#[derive(Clone, Debug, Default)]
pub(crate) struct Opts {
    /// `--now`: no jitter, and update even when the server says "not now".
    pub(crate) now: bool,
    /// Install this version whatever the server says (`pin --force-version`,
    /// `enable --force-version`).
    pub(crate) force_version: Option<String>,
    /// A find response already fetched by the caller.
    pub(crate) find: Option<FindResponse>,
    /// The jitter was waited already: the run after the wait goes ahead.
    pub(crate) jitter_done: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Installed and healthy.
    Updated { from: Option<String>, to: String },
    /// Nothing to do; says why.
    Nothing(String),
    /// The configuration forbids updating (disabled, pinned); says how to undo.
    Refused(String),
    /// Wait this long, without the lock, then run again (and decide again).
    Jitter { wait: Duration, target: String },
}

/// Runs one update. The caller holds the lock; `file` is saved as it changes. Every
/// run that does not fail also cleans up old versions and leftovers of killed runs.
pub(crate) fn run(ctx: &Ctx, file: &mut UpdateFile, opts: Opts) -> Result<Outcome> {
    let outcome = run_inner(ctx, file, opts)?;
    cleanup(ctx, file)?;
    if file.spec.self_update {
        crate::self_update::note_proof(ctx, file)?;
    }
    Ok(outcome)
}

fn run_inner(ctx: &Ctx, file: &mut UpdateFile, opts: Opts) -> Result<Outcome> {
    recover(ctx, file)?;
    kill_point("locked");
    let (decision, find) = match (&file.spec.channel, &opts.force_version) {
        (Some(_), None) => {
            let (decision, _) = crate::channel::decide(ctx, file, opts.now);
            save(ctx, file)?;
            (decision, FindResponse::default())
        }
        // A forced version needs neither the channel nor find.
        (Some(_), Some(_)) => {
            let none = FindResponse::default();
            (decide_target(ctx, file, &opts, &none), none)
        }
        (None, _) => {
            let find = find(ctx, file, &opts)?;
            (decide_target(ctx, file, &opts, &find), find)
        }
    };
    kill_point("found");
    let (target, trigger) = match decision {
        Decision::Update { target, trigger } => (target, trigger),
        Decision::Nothing(why) => return Ok(Outcome::Nothing(why)),
        Decision::Refused(why) => return Ok(Outcome::Refused(why)),
    };
    layout::validate_version(&target)?;
    // The updater's releases stop where the agent's ternd stops the whole host.
    if file.spec.self_update
        && let Some(why) = crate::self_update::agent_stop(ctx)
    {
        return Ok(Outcome::Nothing(why));
    }
    let asked_now = opts.now || opts.force_version.is_some();
    if let Some(why) = decide::backing_off(&file.status, Timestamp::now(), asked_now) {
        return Ok(Outcome::Nothing(why));
    }
    if trigger.is_forced_by_health() {
        log::info(format!(
            "the agent is unhealthy: updating to {target} outside the maintenance window ({trigger:?})"
        ));
        file.status.last_forced_attempt = Some(Timestamp::now());
        save(ctx, file)?;
    }
    if let Some(wait) = jitter(file, &opts, &find) {
        return Ok(Outcome::Jitter { wait, target });
    }
    let from = file.status.active.clone();
    log::info(format!(
        "updating {} -> {target}",
        from.as_deref().unwrap_or("(nothing installed)")
    ));
    if let Some(package) = file.spec.package.clone() {
        crate::package::update(ctx, file, &package, from.clone(), &target)?;
    } else {
        if let Err(e) = install(ctx, &file.spec, &find.edition, &target) {
            record_install_failure(ctx, &target, &e);
            return Err(e);
        }
        if file.spec.self_update {
            crate::self_update::switch(ctx, file, from.clone(), &target)?;
        } else {
            switch(ctx, file, from.clone(), &target)?;
        }
    }
    Ok(Outcome::Updated { from, to: target })
}

/// The server's answer: the caller's, else a fresh one. A forced version does not need
/// the server, so then a failed find only warns.
fn find(ctx: &Ctx, file: &UpdateFile, opts: &Opts) -> Result<FindResponse> {
    if let Some(f) = &opts.find {
        return Ok(f.clone());
    }
    let id = updater_id(&ctx.layout)?;
    let answer = ctx.http.find(
        &file.spec.server,
        &file.spec.group,
        &id,
        &host_facts(&ctx.layout, &file.spec, &file.status),
    );
    // The round, for the watch of a new updater release (`self_update::note_proof`).
    crate::state::save_find(
        &ctx.layout.find_file(),
        &crate::state::LastFind {
            time: Timestamp::now(),
            ok: answer.is_ok(),
            by: Some(crate::self_check::running_release()),
        },
    );
    match answer {
        Ok(f) => Ok(f),
        Err(e) if opts.force_version.is_some() => {
            log::warn(format!(
                "find failed ({e}); installing the forced version anyway"
            ));
            Ok(FindResponse::default())
        }
        Err(e) => Err(e.into()),
    }
}

/// The version to install: the forced one, else what the server's answer decides.
fn decide_target(ctx: &Ctx, file: &UpdateFile, opts: &Opts, find: &FindResponse) -> Decision {
    let Some(forced) = &opts.force_version else {
        // What find's answer allows (its hold decides what the host's shortcuts may
        // do: tern_core::host_update).
        let source = tern_core::host_update::Source::Find {
            version: find.auto_update.agent_version.clone(),
            gate: tern_core::host_update::FindGate::of(&find.auto_update),
        };
        return decide::decide_source(
            &file.spec,
            &file.status,
            source,
            agent_health(ctx, file),
            Timestamp::now(),
            opts.now,
        );
    };
    let v = layout::version_name(forced, &file.status);
    if file.status.active.as_deref() == Some(v.as_str()) {
        return Decision::Nothing(format!("already on {v}"));
    }
    Decision::Update {
        target: v,
        trigger: tern_core::host_update::Trigger::Forced,
    }
}

/// The timer's runs on hosts that have a version wait a random part of the server's
/// jitter (at most [`MAX_JITTER_SECONDS`]), so that a group does not update all at once.
fn jitter(file: &UpdateFile, opts: &Opts, find: &FindResponse) -> Option<Duration> {
    let asked = find.auto_update.agent_update_jitter_seconds;
    let applies = !opts.now
        && !opts.jitter_done
        && opts.force_version.is_none()
        && file.status.active.is_some()
        && asked > 0;
    if !applies {
        return None;
    }
    let cap = asked.min(MAX_JITTER_SECONDS);
    let wait = crate::hooks::jitter_wait()
        .unwrap_or_else(|| random_up_to(cap))
        .min(cap);
    let capped = if asked > cap {
        format!("; the server asked for up to {asked}s")
    } else {
        String::new()
    };
    log::info(format!(
        "waiting {wait}s of jitter (up to {cap}s{capped}) before updating; update.lock is free meanwhile"
    ));
    Some(Duration::from_secs(wait))
}

/// Reverts what a killed run left half done, in the host's mode.
pub(crate) fn recover(ctx: &Ctx, file: &mut UpdateFile) -> Result<()> {
    if let Some(package) = file.spec.package.clone() {
        return crate::package::recover(ctx, file, &package);
    }
    recover_switch(ctx, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_capped_and_skipped_when_it_does_not_apply() {
        let mut file = UpdateFile::default();
        file.status.active = Some("1.0.0".into());
        let mut find = FindResponse::default();
        find.auto_update.agent_update_jitter_seconds = u64::MAX;
        for _ in 0..20 {
            let wait = jitter(&file, &Opts::default(), &find).unwrap();
            assert!(wait <= Duration::from_secs(MAX_JITTER_SECONDS));
        }
        let now = Opts {
            now: true,
            ..Opts::default()
        };
        assert_eq!(jitter(&file, &now, &find), None);
        let done = Opts {
            jitter_done: true,
            ..Opts::default()
        };
        assert_eq!(jitter(&file, &done, &find), None);
        file.status.active = None;
        assert_eq!(jitter(&file, &Opts::default(), &find), None);
    }
}
