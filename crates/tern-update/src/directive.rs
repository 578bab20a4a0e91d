//! Install instructions from version directives (RFD 90): ternd's heartbeat answer may
//! ask this host to install a target with an installer. The instruction is untrusted
//! input: it is checked again here ([`InstallInstruction::check`]) and refused, with a
//! failed result naming why, before anything runs.
//!
//! Heartbeats are also sent without `update.lock` (while a timer run waits out its
//! jitter, `tern-update heartbeat`), so a heartbeat never runs an instruction itself: it
//! keeps it in `install_pending.json`, and the next step that holds the lock runs it
//! ([`run_pending`]: after the heartbeat of `update`, `enable` and `pin`). The lock is
//! what keeps an install from running beside another update of the same namespace.
//!
//! The outcome is saved in `update.yaml` (`status.install_result`), with the rest of
//! the host's state, and every heartbeat carries it until a newer attempt replaces it.
//! An attempt is run at most once: its id is recorded before it starts
//! (`status.install_running`) and kept after it ends (`status.install_attempts`); an
//! attempt a kill interrupted is reported failed, not run again.

use std::time::Duration;

use tern_core::directive::instruct::{InstallInstruction, render_env};
use tern_core::directive::resource::InstallerType;
use tern_core::directive::state::AttemptResult;

use crate::ctx::Ctx;
use crate::download::{self, Expected};
use crate::error::Error;
use crate::installers::LOCAL_SCRIPT;
use crate::layout;
use crate::log;
use crate::pending_install;
use crate::run;
use crate::script::{self, ScriptFailure};
use crate::state::{self, Spec, UpdateFile};
use crate::{cleanup, heartbeat, host_facts, identity, switch};

/// Attempt ids remembered as run.
const KEPT_ATTEMPTS: usize = 32;
/// The longest error reported (ternd refuses a heartbeat whose error passes 4096 bytes).
const MAX_ERROR: usize = 2000;
/// Instructions run back to back by one step (each answer to a result's heartbeat may
/// bring the next).
const ROUNDS: usize = 3;

/// Why an instruction failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum InstallFailure {
    #[error("refused: {0}; nothing was run")]
    Check(String),
    #[error("refused: the installer {0:?} is disabled; nothing was run")]
    InstallerDisabled(String),
    #[error(
        "refused: automatic updates are disabled on this host (`tern-update enable` turns them on); nothing was run"
    )]
    HostDisabled,
    #[error(
        "refused: this host is pinned to {0} (`tern-update unpin` lets directives install); nothing was run"
    )]
    HostPinned(String),
    #[error("this host does not accept local-script installers: enable --installer local-script")]
    LocalScriptNotAccepted,
    #[error(
        "refused: this host installs the agent with its package manager (package mode): the tern-update installer is not supported on it; nothing was run"
    )]
    NativeInPackageMode,
    #[error(
        "refused: the package installer is not supported on this host: it installs from tarballs (package mode is `enable --package NAME --package-manager apt|yum`); nothing was run"
    )]
    PackageNotInPackageMode,
    #[error(
        "refused: the package installer names {asked}, this host's package is {configured}; nothing was run"
    )]
    OtherPackage { asked: String, configured: String },
    #[error(
        "interrupted: tern-update stopped while running this attempt (killed or crashed); it is not run again"
    )]
    Interrupted,
    #[error(transparent)]
    Script(#[from] ScriptFailure),
    #[error(transparent)]
    Update(#[from] Error),
}

/// Runs the kept instruction, if any, and reports its result at once. The caller holds
/// the lock and has loaded `file` under it.
pub(crate) fn run_pending(ctx: &Ctx, file: &mut UpdateFile) {
    script::remove_leftovers(&ctx.layout.ns_dir());
    if interrupted(ctx, file) {
        heartbeat::heartbeat(ctx, file);
    }
    for _ in 0..ROUNDS {
        let Some(instruction) = pending_install::load_pending(&ctx.layout) else {
            return;
        };
        let ran = run(ctx, file, &instruction);
        pending_install::drop_pending(&ctx.layout, &instruction);
        if !ran {
            return;
        }
        // The result, right away; the answer may bring the next instruction.
        heartbeat::heartbeat(ctx, file);
    }
}

/// An attempt a kill interrupted: reported failed, never run again.
fn interrupted(ctx: &Ctx, file: &mut UpdateFile) -> bool {
    let Some(id) = file.status.install_running.clone() else {
        return false;
    };
    log::warn(format!(
        "install attempt {id} was interrupted (tern-update stopped while running it): reporting it failed"
    ));
    record(ctx, file, &id, Err(InstallFailure::Interrupted));
    true
}

/// Runs one instruction unless its attempt ran already; records the result. Returns
/// whether a result was recorded.
fn run(ctx: &Ctx, file: &mut UpdateFile, instruction: &InstallInstruction) -> bool {
    let id = &instruction.attempt_id;
    let st = &file.status;
    if st.install_attempts.contains(id)
        || st
            .install_result
            .as_ref()
            .is_some_and(|r| &r.attempt_id == id)
    {
        log::info(format!(
            "install attempt {} ran already: not run again",
            log::printable(id)
        ));
        return false;
    }
    let outcome = match refusal(&file.spec, instruction) {
        Some(refused) => Err(refused),
        None => {
            file.status.install_running = Some(id.clone());
            match state::save(&ctx.layout.update_yaml(), file) {
                Ok(()) => execute(ctx, file, instruction),
                Err(e) => Err(InstallFailure::Update(e)),
            }
        }
    };
    record(ctx, file, id, outcome);
    true
}

/// Why the instruction is refused before anything runs, if it is.
fn refusal(spec: &Spec, instruction: &InstallInstruction) -> Option<InstallFailure> {
    if let Err(e) = instruction.check() {
        return Some(InstallFailure::Check(e));
    }
    if !instruction.installer.enabled {
        return Some(InstallFailure::InstallerDisabled(log::printable(
            &instruction.installer_name,
        )));
    }
    if !spec.enabled {
        return Some(InstallFailure::HostDisabled);
    }
    if spec.pinned {
        return Some(InstallFailure::HostPinned(
            spec.pinned_version.clone().unwrap_or_default(),
        ));
    }
    match instruction.installer.installer_type {
        InstallerType::LocalScript if !spec.installers.iter().any(|i| i == LOCAL_SCRIPT) => {
            Some(InstallFailure::LocalScriptNotAccepted)
        }
        InstallerType::TernUpdate if spec.package.is_some() => {
            Some(InstallFailure::NativeInPackageMode)
        }
        InstallerType::Package => {
            let Some(configured) = &spec.package else {
                return Some(InstallFailure::PackageNotInPackageMode);
            };
            let asked = instruction.installer.package.as_ref()?;
            let manager = match asked.manager {
                tern_core::directive::resource::PackageManager::Apt => "apt",
                tern_core::directive::resource::PackageManager::Yum => "yum",
            };
            (asked.name != configured.name || manager != configured.manager.label()).then(|| {
                InstallFailure::OtherPackage {
                    asked: format!("{} ({manager})", asked.name),
                    configured: format!("{} ({})", configured.name, configured.manager.label()),
                }
            })
        }
        _ => None,
    }
}

/// Runs a checked, accepted instruction.
fn execute(
    ctx: &Ctx,
    file: &mut UpdateFile,
    instruction: &InstallInstruction,
) -> std::result::Result<(), InstallFailure> {
    let what = format!(
        "install attempt {} (installer {}, {} {}{})",
        instruction.attempt_id,
        log::printable(&instruction.installer_name),
        instruction.installer.installer_type.as_str(),
        instruction.target.version,
        if instruction.dry_run { ", dry run" } else { "" }
    );
    // The updater's releases stop where the agent's ternd stops the whole host, whatever
    // installer the instruction names (find's path is in `run`; tern_core decides).
    if file.spec.self_update
        && tern_core::host_update::instruction_waits_for_agents(instruction)
        && let Some(why) = crate::self_update::agent_stop(ctx)
    {
        return Err(InstallFailure::Check(why));
    }
    log::info(format!("running {what}"));
    match instruction.installer.installer_type {
        InstallerType::LocalScript => {
            // A script from ternd would install whatever ternd says: a host that pinned
            // the release root installs only signed artifacts.
            if file.spec.trust_url.is_some() {
                return Err(InstallFailure::Check(
                    "this host installs only what the release keys signed (enable --trust-root): it runs no local script".into(),
                ));
            }
            local_script(ctx, instruction)?;
            if !instruction.dry_run {
                file.status.script_version = Some(instruction.target.version.clone());
            }
            Ok(())
        }
        InstallerType::TernUpdate => native(ctx, file, instruction),
        InstallerType::Package => package(ctx, file, instruction),
    }
}

fn local_script(
    ctx: &Ctx,
    instruction: &InstallInstruction,
) -> std::result::Result<(), InstallFailure> {
    let Some(ls) = &instruction.installer.local_script else {
        return Err(InstallFailure::Check(
            "installer.local_script: missing".into(),
        ));
    };
    // Checked by `check` already; rendered again for the values themselves.
    let env = render_env(&ls.env, &instruction.target)
        .map_err(|e| InstallFailure::Check(format!("installer.local_script.{e}")))?;
    let timeout: Duration = instruction
        .script_timeout()
        .map_err(InstallFailure::Check)?;
    let label = format!(
        "local-script {} (attempt {})",
        log::printable(&instruction.installer_name),
        instruction.attempt_id
    );
    script::run(&script::Script {
        shell: &ls.shell,
        text: &ls.script,
        env: &env,
        timeout,
        dry_run: instruction.dry_run,
        dir: &ctx.layout.ns_dir(),
        label: &label,
    })?;
    Ok(())
}

/// The edition in artifact URLs: find's answer, as a normal update uses it.
fn edition(ctx: &Ctx, file: &UpdateFile) -> String {
    if file.spec.channel.is_some() || file.spec.server.is_empty() {
        return String::new();
    }
    let id = identity::updater_id(&ctx.layout).unwrap_or_default();
    match ctx.http.find(
        &file.spec.server,
        &file.spec.group,
        &id,
        &host_facts::host_facts(&ctx.layout, &file.spec, &file.status),
    ) {
        Ok(f) => f.edition,
        Err(e) => {
            log::warn(format!(
                "find failed ({e}): the artifact URL uses the default edition"
            ));
            String::new()
        }
    }
}

/// tern-update's own installer: the normal install, switch, health check and rollback
/// of `target.version`, the artifact checked against the instruction's size and sha256.
fn native(
    ctx: &Ctx,
    file: &mut UpdateFile,
    instruction: &InstallInstruction,
) -> std::result::Result<(), InstallFailure> {
    let t = &instruction.target;
    let (Some(size), Some(sha256)) = (t.size, t.sha256.as_deref()) else {
        return Err(InstallFailure::Check(
            "target: the tern-update installer refuses a target without size and sha256".into(),
        ));
    };
    let expect = Expected { size, sha256 };
    let target = layout::version_name(&t.version, &file.status);
    layout::validate_version(&target)?;
    let edition = edition(ctx, file);
    if instruction.dry_run {
        download::verify_only(ctx, &file.spec, &edition, &target, expect)?;
        log::info(format!(
            "dry run: the artifact of {target} matches the instruction; nothing was installed"
        ));
        return Ok(());
    }
    run::recover(ctx, file)?;
    download::install_checked(ctx, &file.spec, &edition, &target, Some(expect))?;
    let from = file.status.active.clone();
    if from.as_deref() == Some(target.as_str()) {
        log::info(format!("already running {target}"));
        return Ok(());
    }
    log::info(format!(
        "updating {} -> {target} (version directive)",
        from.as_deref().unwrap_or("(nothing installed)")
    ));
    if file.spec.self_update {
        crate::self_update::switch(ctx, file, from, &target)?;
    } else {
        switch::switch(ctx, file, from, &target)?;
    }
    cleanup::cleanup(ctx, file)?;
    Ok(())
}

/// The package installer: package mode's own install of `target.version`.
fn package(
    ctx: &Ctx,
    file: &mut UpdateFile,
    instruction: &InstallInstruction,
) -> std::result::Result<(), InstallFailure> {
    let Some(configured) = file.spec.package.clone() else {
        return Err(InstallFailure::PackageNotInPackageMode);
    };
    let target = layout::version_name(&instruction.target.version, &file.status);
    crate::package::checked_version(configured.manager, &target)?;
    if instruction.dry_run {
        log::info(format!(
            "dry run: {target} is a version the package manager may be asked for; nothing was installed"
        ));
        return Ok(());
    }
    run::recover(ctx, file)?;
    let from = file.status.active.clone();
    if from.as_deref() == Some(target.as_str()) {
        log::info(format!("already running {target}"));
        return Ok(());
    }
    crate::package::update(ctx, file, &configured, from, &target)?;
    Ok(())
}

/// Saves the attempt's result (with the rest of the state) and logs it.
fn record(
    ctx: &Ctx,
    file: &mut UpdateFile,
    attempt_id: &str,
    outcome: std::result::Result<(), InstallFailure>,
) {
    let id = reportable_id(attempt_id);
    let error = match &outcome {
        Ok(()) => {
            log::info(format!("install attempt {id} succeeded"));
            String::new()
        }
        Err(e) => {
            let text = bounded(&e.to_string());
            log::error(format!("install attempt {id} failed: {text}"));
            text
        }
    };
    let st = &mut file.status;
    st.install_result = Some(AttemptResult {
        attempt_id: id,
        success: outcome.is_ok(),
        error,
    });
    st.install_running = None;
    st.install_attempts.retain(|a| a != attempt_id);
    st.install_attempts
        .push(attempt_id.chars().take(64).collect());
    let excess = st.install_attempts.len().saturating_sub(KEPT_ATTEMPTS);
    st.install_attempts.drain(..excess);
    if let Err(e) = state::save(&ctx.layout.update_yaml(), file) {
        log::error(format!(
            "could not save the install result in update.yaml: {e}"
        ));
    }
}

/// An attempt id as a heartbeat may carry it (ternd refuses ids past 64 bytes): only
/// the characters a valid id has.
fn reportable_id(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect()
}

/// An error on one line, at most [`MAX_ERROR`] bytes.
fn bounded(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.len() <= MAX_ERROR {
        return one_line;
    }
    let mut cut = MAX_ERROR - 3;
    while !one_line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &one_line[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_bounded_and_ids_reportable() {
        let long = "é".repeat(5000);
        let b = bounded(&long);
        assert!(b.len() <= MAX_ERROR, "{}", b.len());
        assert_eq!(bounded("a\nb"), "a b");
        assert_eq!(reportable_id("a1;rm -rf /"), "a1rm-rf");
        assert_eq!(reportable_id(&"x".repeat(100)).len(), 64);
    }
}
