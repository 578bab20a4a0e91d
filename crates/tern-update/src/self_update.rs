//! The updater rolled out like an agent: the `updater` namespace
//! (`enable --install-suffix updater --self-update`) installs tern-update's own
//! releases side by side, as the default namespace installs the agent's, and asks its
//! own ternd (or the same ternd's updater product, when one exists) which release to
//! run; the rollout's groups, canaries, windows and stops decide it as for an agent.
//!
//! What differs from an agent is only what "healthy" means: there is no service to
//! restart and watch; a release is healthy when its binary answers `tern-update
//! self-check` (it starts, parses its command line and reads this host's state). The
//! check runs *before* the link is switched, so the link the timer runs never points
//! at a release that cannot start; it runs again through the link after the switch,
//! which is switched back when that fails. A failed check is recorded as the version's
//! failure (`skip`, `rollback` in the heartbeat), which fails a canary and holds its
//! group.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::hooks::kill_point;
use crate::layout::Layout;
use crate::log;
use crate::state::{self, InProgress, Spec, UpdateFile};
use crate::update::{Ctx, Failure, Reverted, commit, record_failure, save};

/// The namespace that manages tern-update itself.
pub const NAMESPACE: &str = "updater";

/// The executable of a release, inside its version directory.
const EXE: &str = "bin/tern-update";

/// How long a self-check may take before it counts as failed. A release that hangs at
/// start is as broken as one that exits.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// The line `self-check` prints first: what a release answers when it runs.
pub fn self_check_line() -> String {
    format!("tern-update {} self-check ok", env!("CARGO_PKG_VERSION"))
}

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

/// The managed updater release this host runs, when its `updater` namespace manages
/// one: every command of every namespace is handed to it (`reexec`).
pub fn managed_exe(install_dir: &Path) -> Option<PathBuf> {
    let file = state::load(&crate::layout::update_yaml_in(install_dir, NAMESPACE)).ok()??;
    if !file.spec.self_update {
        return None;
    }
    let active = file.status.active?;
    let exe = install_dir
        .join(NAMESPACE)
        .join("versions")
        .join(active)
        .join(EXE);
    exe.is_file().then_some(exe)
}

/// Runs `exe self-check` (without handing it on to another updater) and returns what
/// went wrong, if anything: it did not start, exited non-zero, was killed, hung, or
/// did not say it is tern-update.
pub(crate) fn run_check(exe: &Path, layout: &Layout) -> std::result::Result<(), String> {
    let mut child = Command::new(exe)
        .arg("--install-dir")
        .arg(&layout.install_dir)
        .arg("--install-suffix")
        .arg(&layout.suffix)
        .arg("--link-dir")
        .arg(&layout.link_dir)
        .arg("self-check")
        .env(crate::reexec::GUARD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("it does not start: {e}"))?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "it did not answer within {}s",
                    CHECK_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for it: {e}")),
        }
    };
    // Read after the exit: a release that fills a pipe (64 KiB) blocks, and counts as
    // one that hangs.
    let stdout = excerpt_of(child.stdout.take());
    let stderr = excerpt_of(child.stderr.take());
    if !status.success() {
        let how = match status.code() {
            Some(code) => format!("it exited with {code}"),
            None => "it was killed by a signal".to_string(),
        };
        return Err(if stderr.is_empty() {
            how
        } else {
            format!("{how}: {stderr}")
        });
    }
    if !stdout.starts_with("tern-update ") || !stdout.contains("self-check ok") {
        return Err(format!(
            "it exited 0 without answering the self-check (printed {stdout:?})"
        ));
    }
    Ok(())
}

/// The start of what a check printed, one line, without control characters.
fn excerpt_of(pipe: Option<impl std::io::Read>) -> String {
    use std::io::Read as _;
    let mut buf = Vec::new();
    if let Some(p) = pipe {
        let _ = p.take(4096).read_to_end(&mut buf);
    }
    tern_core::text::excerpt(&String::from_utf8_lossy(&buf), 512)
}

/// What the host sees of its updater release: the active one answers its self-check.
pub(crate) fn health(ctx: &Ctx, file: &UpdateFile) -> tern_core::host_update::Health {
    use tern_core::host_update::Health;
    let Some(active) = &file.status.active else {
        return Health::Unknown;
    };
    let exe = ctx.layout.version_dir(active).join(EXE);
    match run_check(&exe, &ctx.layout) {
        Ok(()) => Health::Healthy,
        Err(problem) => Health::Unhealthy(format!(
            "the updater {active} fails its self-check: {problem}"
        )),
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

/// `tern-update self-check`: this binary starts, and reads this namespace's state and
/// the updater namespace's (what it will run on). Its first line is
/// [`self_check_line`].
pub fn self_check(layout: &Layout) -> Result<String> {
    state::load(&layout.update_yaml())?;
    state::load(&crate::layout::update_yaml_in(
        &layout.install_dir,
        NAMESPACE,
    ))?;
    Ok(self_check_line())
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

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn a_check_fails_for_a_binary_that_exits_says_nothing_or_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path(), NAMESPACE);
        let ok = script(dir.path(), "ok", "echo 'tern-update 9.9.9 self-check ok'");
        assert_eq!(run_check(&ok, &l), Ok(()));
        let exits = script(dir.path(), "exits", "echo 'boom at start' >&2; exit 70");
        let err = run_check(&exits, &l).unwrap_err();
        assert!(
            err.contains("exited with 70") && err.contains("boom"),
            "{err}"
        );
        let silent = script(dir.path(), "silent", "exit 0");
        assert!(
            run_check(&silent, &l)
                .unwrap_err()
                .contains("without answering")
        );
        let err = run_check(&dir.path().join("missing"), &l).unwrap_err();
        assert!(err.contains("does not start"), "{err}");
    }

    #[test]
    fn no_managed_exe_without_a_self_updating_namespace() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(managed_exe(dir.path()), None);
    }
}
