//! The updater rolled out like an agent: the `updater` namespace
//! (`enable --install-suffix updater --self-update`) installs tern-update's own
//! releases side by side, as the default namespace installs the agent's, and asks its
//! own ternd which release to run; the rollout's groups, canaries, windows and stops
//! decide it as for an agent.
//!
//! What differs from an agent is only what "healthy" means: there is no service to
//! restart and watch; a release is healthy when its binary answers `tern-update
//! self-check` (`self_check`). The check runs *before* the link is switched, so the
//! link the timer runs never points at a release that cannot start; it runs again
//! through the link after the switch, which is switched back when that fails. A failed
//! check is recorded as the version's failure (`skip`, `rollback` in the heartbeat),
//! which fails a canary and holds its group.

use std::path::Path;

use crate::error::{Error, Result};
use crate::hooks::kill_point;
use crate::layout::Layout;
use crate::log;
use crate::self_check::{EXE, NAMESPACE, run_check};
use crate::state::{InProgress, Spec, UpdateFile};
use crate::update::{Ctx, Failure, Reverted, commit, record_failure, save};

/// Checks what `enable --self-update` is given: only in [`NAMESPACE`], with tarballs
/// and find (no package manager, channel or agent service to watch).
pub(crate) fn check_spec(layout: &Layout, spec: &Spec) -> Result<()> {
    let problem = if layout.suffix != NAMESPACE {
        format!(
            "tern-update's own releases are managed in the {NAMESPACE:?} namespace; add --install-suffix {NAMESPACE}"
        )
    } else if spec.package.is_some() {
        "the updater is installed from tarballs, not through --package".to_string()
    } else if spec.channel.is_some() {
        "the updater follows its rollout (find), not a --channel".to_string()
    } else if spec.service_config.is_some() {
        "the updater has no service to watch: leave --service-config out (its health is `tern-update self-check`)".to_string()
    } else {
        return Ok(());
    };
    Err(Error::SelfUpdate { problem })
}

/// Why the agent's ternd holds this host's updater releases too, when it does: the
/// `default` namespace's ternd is asked with that namespace's group and updater id,
/// and `tern_core` decides whether its answer holds every product of the host (a
/// freeze, a pin of the host, a replica cut off). That ternd unreachable holds too
/// (fail closed: a freeze may have been written there). `None`: no agent namespace
/// following a ternd, or its answer does not hold the updater.
pub(crate) fn agent_stop(ctx: &Ctx) -> Option<String> {
    let l = &ctx.layout;
    let agent = Layout::new(l.install_dir.clone(), "default", &ctx.settings);
    // No agent namespace: nothing to ask. One that cannot be read may follow a ternd
    // that stops this host: hold (fail closed).
    let file = match crate::state::load(&agent.update_yaml()) {
        Ok(Some(file)) => file,
        Ok(None) => return None,
        Err(e) => {
            return Some(format!(
                "cannot read the agent namespace's state to ask its ternd whether updates are stopped ({e}): holding the updater too"
            ));
        }
    };
    if file.spec.server.is_empty() || file.spec.channel.is_some() {
        return None;
    }
    let facts = crate::update::host_facts(&agent, &file.spec, &file.status);
    let answer = crate::update::updater_id(&agent).and_then(|id| {
        ctx.http
            .find(&file.spec.server, &file.spec.group, &id, &facts)
            .map_err(crate::Error::from)
    });
    let server = &file.spec.server;
    match answer {
        Err(e) => Some(format!(
            "cannot ask the agent's ternd {server} whether updates are stopped ({e}): holding the updater too"
        )),
        Ok(find) => {
            let gate = tern_core::host_update::FindGate::of(&find.auto_update);
            gate.stops_every_product().then(|| {
                let a = &find.auto_update;
                let holds = if a.agent_holds.is_empty() {
                    a.agent_hold.clone()
                } else {
                    a.agent_holds.join(", ")
                };
                format!(
                    "the agent's ternd {server} holds every update of this host ({}): holding the updater too",
                    tern_core::text::excerpt(&holds, 200)
                )
            })
        }
    }
}

/// Switches the updater from `from` to `to` (unpacked): self-check the new release,
/// switch the link, self-check through the link; on a failure the link stays (or goes
/// back) on `from` and the failure is the version's.
pub(crate) fn switch(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    let l = &ctx.layout;
    let to_dir = l.version_dir(to);
    let exe = to_dir.join(EXE);
    crate::links::check(l, &to_dir, ctx.overwrite)?;
    let failed = |problem: String| Error::SelfCheckFailed {
        version: to.to_string(),
        exe: exe.clone(),
        problem,
    };
    if !exe.is_file() {
        let reason = failed(format!("the release has no {EXE}"));
        return Err(blame(ctx, file, from.as_deref(), to, reason, false));
    }
    if let Err(problem) = run_check(&exe, l) {
        log::error(format!("the updater {to} fails its self-check: {problem}"));
        return Err(blame(
            ctx,
            file,
            from.as_deref(),
            to,
            failed(problem),
            false,
        ));
    }
    file.status.in_progress = Some(InProgress {
        from: from.clone(),
        to: to.to_string(),
        started: jiff::Timestamp::now(),
        db_backed_up: false,
    });
    save(ctx, file)?;
    kill_point("journal_written");
    // `links::apply` replaces each link by a rename: the timer sees the old release or
    // the new one, never none.
    crate::links::apply(l, &to_dir, ctx.overwrite)?;
    kill_point("links_switched");
    let linked = l.link_dir.join("tern-update");
    if let Err(problem) = run_check(&linked, l) {
        log::error(format!(
            "the updater {to} fails its self-check through {}: {problem}",
            linked.display()
        ));
        return Err(blame(ctx, file, from.as_deref(), to, failed(problem), true));
    }
    commit(ctx, file, from, to)?;
    log::info(format!(
        "the updater now runs {to} ({}): every later command is handed to it",
        linked.display()
    ));
    Ok(())
}

/// Records `to` as a failed release: links back on `from` (when they were switched),
/// `from` checked again, and the failure recorded as every namespace records one
/// (`update::record_failure`: the version is skipped and reported when `from` passes).
fn blame(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<&str>,
    to: &str,
    reason: Error,
    switched: bool,
) -> Error {
    let l = &ctx.layout;
    let mut relink_failed = None;
    if switched {
        let relinked = match from {
            Some(f) => crate::links::apply(l, &l.version_dir(f), true),
            None => crate::links::remove(l, &|p: &Path| l.is_managed(p)),
        };
        if let Err(e) = relinked {
            relink_failed = Some(e.to_string());
        }
    }
    let reverted = match (relink_failed, from) {
        (Some(e), _) => Reverted::unchecked(format!(
            "relinking failed ({e}); the host may have no working updater link"
        )),
        (None, None) => Reverted::unchecked("no updater release was installed before; none is now"),
        (None, Some(f)) => match run_check(&l.version_dir(f).join(EXE), l) {
            Ok(()) => Reverted {
                outcome: format!("the updater {f} stays linked and passes its self-check"),
                healthy: true,
            },
            Err(problem) => Reverted::unchecked(format!(
                "the updater {f} stays linked but fails its self-check too: {problem}"
            )),
        },
    };
    record_failure(
        ctx,
        file,
        from,
        to,
        Failure {
            reason,
            version_failed: true,
            agent_output: None,
        },
        reverted,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn layout(dir: &Path, suffix: &str) -> Layout {
        Layout::new(dir.to_path_buf(), suffix, &Settings::default())
    }

    #[test]
    fn only_the_updater_namespace_with_tarballs_manages_the_updater() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec::default();
        assert!(check_spec(&layout(dir.path(), NAMESPACE), &spec).is_ok());
        let err = check_spec(&layout(dir.path(), "default"), &spec).unwrap_err();
        assert!(
            err.to_string().contains("--install-suffix updater"),
            "{err}"
        );
        let with_service = Spec {
            service_config: Some("/etc/tern/agent.yaml".into()),
            ..Spec::default()
        };
        let err = check_spec(&layout(dir.path(), NAMESPACE), &with_service).unwrap_err();
        assert!(err.to_string().contains("self-check"), "{err}");
    }
}
