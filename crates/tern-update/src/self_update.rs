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
//!
//! A release is then judged by doing its job: it reports healthy (and so passes an
//! updater canary) only once it has itself sent the heartbeat and asked find of every
//! namespace of the host, in two of this namespace's runs in a row, with the agent as
//! healthy as before the switch (`note_proof`). Meanwhile the binary the timer starts
//! watches it (`reexec`): a release that fails a command, hangs, or leaves no heartbeat
//! of its own is taken back at once (`take_back`), on the host alone.
//!
//! One ternd serves every product: the `updater` namespace asks the agent namespace's
//! ternd for the product `updater` (`default_product`) with the host's one identity
//! (`share_identity`). A namespace enabled against a second ternd of its own (earlier
//! releases' setup) sends no product and keeps its own identity, as before.

use std::path::{Path, PathBuf};

use crate::ctx::{Ctx, save};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::link_switch::{Back, Failed, Release, go_back, relink, switch_links};
use crate::log;
use crate::self_check::{EXE, NAMESPACE, run_check};
use crate::state::{self, Spec, UpdateFile};
use crate::update::{Failure, Reverted};

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
    let facts = crate::host_facts::host_facts(&agent, &file.spec, &file.status);
    let answer = crate::identity::updater_id(&agent).and_then(|id| {
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
/// switch the link, self-check through the link (`link_switch`); on a failure the link
/// stays (or goes back) on `from` and the failure is the version's.
pub(crate) fn switch(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    let l = &ctx.layout;
    let to_dir = l.version_dir(to);
    crate::links::check(l, &to_dir, ctx.overwrite)?;
    let mut release = Updater {
        from: from.as_deref(),
        to,
        exe: to_dir.join(EXE),
    };
    if !release.exe.is_file() {
        let reason = release.failed(format!("the release has no {EXE}"));
        // Its link never moved: it stays on `from`.
        return Err(release.back_onto_from(ctx, file, reason, false));
    }
    if let Err(problem) = run_check(&release.exe, l) {
        log::error(format!("the updater {to} fails its self-check: {problem}"));
        let reason = release.failed(problem);
        return Err(release.back_onto_from(ctx, file, reason, false));
    }
    switch_links(
        ctx,
        file,
        from.clone(),
        to,
        jiff::Timestamp::now(),
        &mut release,
    )?;
    log::info(format!(
        "the updater now runs {to} ({}): every later command is handed to it",
        l.link_dir.join("tern-update").display()
    ));
    Ok(())
}

/// A switch of the updater to the release `to`, whose binary is `exe`.
struct Updater<'a> {
    from: Option<&'a str>,
    to: &'a str,
    exe: PathBuf,
}

impl Updater<'_> {
    /// `to`'s self-check failed with `problem`.
    fn failed(&self, problem: String) -> Error {
        Error::SelfCheckFailed {
            version: self.to.to_string(),
            exe: self.exe.clone(),
            problem,
        }
    }

    /// Back onto `from` (its link put back when `relink`), `from` checked again, and
    /// the failure recorded as the release's (`update::record_failure`: it is skipped
    /// and reported when `from` passes).
    fn back_onto_from(
        &mut self,
        ctx: &Ctx,
        file: &mut UpdateFile,
        reason: Error,
        relink: bool,
    ) -> Error {
        let back = Back {
            version: self.from,
            restore_db: false,
            relink,
        };
        let to = self.to;
        let failure = Failure {
            reason,
            version_failed: true,
            agent_output: None,
        };
        go_back(ctx, file, self, back, to, failure)
    }
}

impl Release for Updater<'_> {
    /// A link that cannot be moved is returned as it is: the journal stays, and the
    /// next run's recovery puts the link back.
    fn links_failed(&self, e: Error) -> Result<Failed> {
        Err(e)
    }

    /// The release answers its self-check through the link the timer runs.
    fn check_linked(&mut self, ctx: &Ctx, _file: &mut UpdateFile) -> Result<(), Failed> {
        let l = &ctx.layout;
        let linked = l.link_dir.join("tern-update");
        if let Err(problem) = run_check(&linked, l) {
            log::error(format!(
                "the updater {} fails its self-check through {}: {problem}",
                self.to,
                linked.display()
            ));
            return Err(Failed::version(self.failed(problem)));
        }
        Ok(())
    }

    /// The release's proof starts again (`note_proof`), against the agent's health now.
    fn before_commit(&mut self, ctx: &Ctx, file: &mut UpdateFile) {
        file.status.proven_runs = 0;
        file.status.agent_healthy_at_switch = agent_healthy(ctx);
    }

    /// Back onto `from`. Unlike the agent's rollback, the updater's has never asked
    /// whether `from` is revoked; merging the mechanism leaves that as it was.
    fn roll_back(&mut self, ctx: &Ctx, file: &mut UpdateFile, failed: Failed) -> Error {
        self.back_onto_from(ctx, file, failed.reason, true)
    }

    /// The link back on `back` (or removed: the binary the host was installed with
    /// runs then), and that release self-checked.
    fn revert(&mut self, ctx: &Ctx, _file: &UpdateFile, back: Back<'_>) -> Reverted {
        let l = &ctx.layout;
        if back.relink
            && let Err(e) = relink(l, back.version, |l| {
                crate::links::remove(l, &|p: &Path| l.is_managed(p))
            })
        {
            return Reverted::unchecked(format!(
                "relinking failed ({e}); the host may have no working updater link"
            ));
        }
        let Some(f) = back.version else {
            return Reverted::unchecked("no updater release was installed before; none is now");
        };
        match run_check(&l.version_dir(f).join(EXE), l) {
            Ok(()) => Reverted {
                outcome: format!("the updater {f} stays linked and passes its self-check"),
                healthy: true,
            },
            Err(problem) => Reverted::unchecked(format!(
                "the updater {f} stays linked but fails its self-check too: {problem}"
            )),
        }
    }
}

/// The product `enable --self-update` asks for when none is given: `updater` when the
/// namespace follows the agent namespace's ternd (one ternd serves every product);
/// none against another ternd (the second ternd of earlier releases serves the updater
/// as its agent).
pub(crate) fn default_product(install_dir: &Path, server: &str) -> Option<String> {
    let agent = state::load(&crate::layout::update_yaml_in(install_dir, "default"))
        .ok()
        .flatten()?;
    let same = agent.spec.server.trim_end_matches('/') == server.trim_end_matches('/');
    same.then(|| tern_core::product::UPDATER.to_string())
}

/// A host has one identity on a ternd: a namespace installing another product from the
/// agent namespace's ternd uses the agent namespace's updater id and credential, so
/// that a server pin of the host holds its every product. Copied at `enable`; says so.
pub(crate) fn share_identity(ctx: &Ctx, spec: &Spec) -> Result<()> {
    let Some(product) = spec.product.as_deref() else {
        return Ok(());
    };
    if product == tern_core::product::AGENT || ctx.layout.suffix == "default" {
        return Ok(());
    }
    let agent = Layout::new(ctx.layout.install_dir.clone(), "default", &ctx.settings);
    let Some(file) = state::load(&agent.update_yaml())? else {
        return Ok(());
    };
    if file.spec.server.trim_end_matches('/') != spec.server.trim_end_matches('/') {
        return Ok(());
    }
    let Ok(id) = std::fs::read_to_string(agent.id_file()) else {
        return Ok(());
    };
    crate::fsutil::create_own_dir(&ctx.layout.ns_dir())?;
    crate::fsutil::write_atomic(&ctx.layout.id_file(), id.as_bytes(), 0o644)?;
    match std::fs::read_to_string(agent.credential_file()) {
        Ok(c) => crate::fsutil::write_atomic(&ctx.layout.credential_file(), c.as_bytes(), 0o600)?,
        Err(_) => {
            // Joined later with the agent's id, which ternd then knows.
            let _ = std::fs::remove_file(ctx.layout.credential_file());
        }
    }
    log::info(format!(
        "this namespace installs the product {product} from the agent namespace's ternd: it uses the host's identity there (updater id {})",
        id.trim()
    ));
    Ok(())
}

/// Takes the updater release `version` out of service, found broken by the watch
/// (`reexec`): the previous release goes back in (links included) when it is installed
/// and passes its self-check, else the binary the timer starts runs the commands; the
/// broken one is skipped and reported as a rollback, as a failed self-check is.
pub(crate) fn take_back(install_dir: &Path, version: &str, why: &str) -> Result<()> {
    let path = crate::layout::update_yaml_in(install_dir, NAMESPACE);
    let Some(mut file) = state::load(&path)? else {
        return Ok(());
    };
    let l = Layout::new(install_dir.to_path_buf(), NAMESPACE, &file.spec.settings);
    let _lock = crate::lock::acquire(
        &l.lock_file(),
        crate::lock::Wait::Timeout(std::time::Duration::from_secs(30)),
    )?;
    // Read again under the lock: another run may have moved on meanwhile.
    let Some(fresh) = state::load(&path)? else {
        return Ok(());
    };
    file = fresh;
    if file.status.active.as_deref() != Some(version) {
        return Ok(());
    }
    let back = file
        .status
        .backup
        .clone()
        .filter(|b| b != version && run_check(&l.version_dir(b).join(EXE), &l).is_ok());
    let outcome = match &back {
        Some(b) => {
            crate::links::apply(&l, &l.version_dir(b), true)?;
            format!("back on the updater {b}")
        }
        None => {
            crate::links::remove(&l, &|p: &Path| l.is_managed(p))?;
            "no previous updater release is installed: the updater the host was installed with runs the commands".to_string()
        }
    };
    let st = &mut file.status;
    if let Some(b) = back {
        st.active = Some(b);
        st.backup = None;
    }
    st.skip = Some(version.to_string());
    st.rollback = true;
    st.environment_failure = None;
    st.proven_runs = 0;
    st.last_update = Some(state::LastUpdate {
        time: jiff::Timestamp::now(),
        target: version.to_string(),
        success: false,
        error: Some(format!(
            "the updater {version} failed on this host: {why}; {outcome}"
        )),
        agent_output: None,
    });
    state::save(&path, &file)?;
    log::warn(format!(
        "the updater {version} is taken out of service: {why}; {outcome}"
    ));
    Ok(())
}

/// After each run of the `updater` namespace by its active release: whether that
/// release has proven itself since it was switched in, counted in runs in a row
/// (`proven_runs`; healthy from the second, `self_check::health`).
pub(crate) fn note_proof(ctx: &Ctx, file: &mut UpdateFile) -> Result<()> {
    let Some(active) = file.status.active.clone() else {
        return Ok(());
    };
    if crate::self_check::running_release() != active {
        // Run by another updater (the one the host was installed with, or the previous
        // release): it proves nothing about the active one.
        return Ok(());
    }
    let since = file
        .status
        .last_update
        .as_ref()
        .filter(|u| u.success && u.target == active)
        .map_or(jiff::Timestamp::MIN, |u| u.time);
    let runs = match proof(ctx, &active, since, file.status.agent_healthy_at_switch) {
        Ok(()) => file.status.proven_runs.saturating_add(1),
        Err(why) => {
            log::info(format!("the updater {active} is not proven yet: {why}"));
            0
        }
    };
    if runs != file.status.proven_runs {
        file.status.proven_runs = runs;
        save(ctx, file)?;
    }
    Ok(())
}

/// Whether `active` sent the heartbeat and asked find of every namespace of the host
/// since `since`, and the agent is as healthy as it was at the switch.
fn proof(
    ctx: &Ctx,
    active: &str,
    since: jiff::Timestamp,
    agent_healthy_at_switch: Option<bool>,
) -> std::result::Result<(), String> {
    let dir = &ctx.layout.install_dir;
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let by_active = |by: Option<&str>| by == Some(active);
    for entry in entries.flatten() {
        let Some(suffix) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let l = Layout::new(dir.clone(), &suffix, &ctx.settings);
        let Ok(Some(f)) = state::load(&l.update_yaml()) else {
            continue;
        };
        if !f.spec.enabled || f.spec.server.is_empty() {
            continue;
        }
        match state::load_heartbeat(&l.heartbeat_file()) {
            Some(hb) if hb.accepted && hb.time >= since && by_active(hb.by.as_deref()) => {}
            _ => {
                return Err(format!(
                    "no heartbeat of namespace {suffix} accepted from it yet"
                ));
            }
        }
        if f.spec.channel.is_none() {
            match state::load_find(&l.find_file()) {
                Some(r) if r.ok && r.time >= since && by_active(r.by.as_deref()) => {}
                _ => return Err(format!("no find of namespace {suffix} answered to it yet")),
            }
        }
    }
    if agent_healthy_at_switch == Some(true) && agent_healthy(ctx) == Some(false) {
        return Err("the agent was healthy when it was switched in, and is not now".into());
    }
    Ok(())
}

/// The agent namespace's health, when the host has one.
pub(crate) fn agent_healthy(ctx: &Ctx) -> Option<bool> {
    let layout = Layout::new(ctx.layout.install_dir.clone(), "default", &ctx.settings);
    let file = state::load(&layout.update_yaml()).ok()??;
    let agent = Ctx {
        layout,
        http: ctx.http.clone(),
        overwrite: false,
        settings: ctx.settings.clone(),
    };
    match crate::agent::agent_health(&agent, &file) {
        tern_core::host_update::Health::Healthy => Some(true),
        tern_core::host_update::Health::Unhealthy(_) => Some(false),
        tern_core::host_update::Health::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn layout(dir: &Path, suffix: &str) -> Layout {
        Layout::new(dir.to_path_buf(), suffix, &Settings::default())
    }

    /// A context over a temporary install dir, no ternd (the switch asks none).
    fn ctx(dir: &Path) -> Ctx {
        Ctx {
            layout: layout(dir, NAMESPACE),
            http: tern_client::Client::for_host(
                std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
                false,
                std::time::Duration::from_secs(5),
                None,
            ),
            overwrite: false,
            settings: Settings::default(),
        }
    }

    /// Unpacks an updater release whose binary is a shell script (a real child process
    /// for `run_check`): `answer` is the script's body.
    fn release(l: &Layout, version: &str, answer: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let exe = l.version_dir(version).join(EXE);
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        std::fs::write(&exe, format!("#!/bin/sh\n{answer}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    const PASSES: &str = "echo \"tern-update $0 self-check ok\"";

    /// The host runs the updater 1.0.0 (linked, active), and 1.1.0 is unpacked.
    fn on_1_0_0(dir: &Path, new: &str) -> (Ctx, UpdateFile) {
        let ctx = ctx(dir);
        release(&ctx.layout, "1.0.0", PASSES);
        release(&ctx.layout, "1.1.0", new);
        crate::links::apply(&ctx.layout, &ctx.layout.version_dir("1.0.0"), false).unwrap();
        let mut file = UpdateFile::default();
        file.status.active = Some("1.0.0".into());
        save(&ctx, &file).unwrap();
        (ctx, file)
    }

    fn linked(ctx: &Ctx) -> std::path::PathBuf {
        std::fs::canonicalize(ctx.layout.link_dir.join("tern-update")).unwrap()
    }

    fn exe_of(ctx: &Ctx, version: &str) -> std::path::PathBuf {
        std::fs::canonicalize(ctx.layout.version_dir(version).join(EXE)).unwrap()
    }

    /// A switch to 1.1.0 failed with `err`, which says `says`: 1.0.0 is linked and
    /// active and passed its self-check again, and 1.1.0 is the version's failure.
    fn assert_back_on_1_0_0(ctx: &Ctx, err: &Error, says: &str) {
        let msg = err.to_string();
        assert!(
            msg.contains(says)
                && msg.contains("the updater 1.0.0 stays linked and passes its self-check"),
            "{msg}"
        );
        assert_eq!(linked(ctx), exe_of(ctx, "1.0.0"), "1.0.0 is linked");
        let st = &state::load(&ctx.layout.update_yaml())
            .unwrap()
            .unwrap()
            .status;
        assert_eq!(st.active.as_deref(), Some("1.0.0"));
        assert_eq!(st.skip.as_deref(), Some("1.1.0"));
        assert!(st.rollback && st.in_progress.is_none() && st.environment_failure.is_none());
    }

    #[test]
    fn a_release_that_passes_its_self_check_is_switched_in_and_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut file) = on_1_0_0(dir.path(), PASSES);
        file.status.proven_runs = 5;
        switch(&ctx, &mut file, Some("1.0.0".into()), "1.1.0").unwrap();
        assert_eq!(linked(&ctx), exe_of(&ctx, "1.1.0"));
        let saved = state::load(&ctx.layout.update_yaml()).unwrap().unwrap();
        for st in [&file.status, &saved.status] {
            assert_eq!(st.active.as_deref(), Some("1.1.0"));
            assert_eq!(st.backup.as_deref(), Some("1.0.0"));
            assert_eq!(st.proven_runs, 0, "the proof starts again");
            assert!(st.in_progress.is_none() && st.skip.is_none() && !st.rollback);
        }
    }

    #[test]
    fn a_release_failing_its_self_check_is_never_linked_and_is_the_versions_failure() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut file) = on_1_0_0(dir.path(), "echo 'tern-update: panicked' >&2; exit 101");
        let err = switch(&ctx, &mut file, Some("1.0.0".into()), "1.1.0").unwrap_err();
        assert_back_on_1_0_0(&ctx, &err, "exited with 101");
    }

    #[test]
    fn a_release_failing_through_its_link_is_linked_back_and_is_the_versions_failure() {
        let dir = tempfile::tempdir().unwrap();
        // Passes when run from its version directory, fails through the link.
        let through_link = "case \"$0\" in */versions/*) echo \"tern-update $0 self-check ok\";; *) echo 'broken through the link' >&2; exit 3;; esac";
        let (ctx, mut file) = on_1_0_0(dir.path(), through_link);
        let err = switch(&ctx, &mut file, Some("1.0.0".into()), "1.1.0").unwrap_err();
        assert_back_on_1_0_0(&ctx, &err, "broken through the link");
    }

    #[test]
    fn a_first_release_failing_through_its_link_leaves_no_updater_link() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let through_link =
            "case \"$0\" in */versions/*) echo \"tern-update $0 self-check ok\";; *) exit 3;; esac";
        release(&ctx.layout, "1.1.0", through_link);
        let mut file = UpdateFile::default();
        let err = switch(&ctx, &mut file, None, "1.1.0").unwrap_err();
        assert!(
            err.to_string()
                .contains("no updater release was installed before; none is now"),
            "{err}"
        );
        assert!(!ctx.layout.link_dir.join("tern-update").exists());
        // Nothing was checked to blame the release against: the host's failure.
        let st = &state::load(&ctx.layout.update_yaml())
            .unwrap()
            .unwrap()
            .status;
        assert!(st.environment_failure.is_some() && st.skip.is_none() && st.active.is_none());
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
