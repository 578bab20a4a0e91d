//! One function per subcommand. Each takes the lock as its kind of caller should (the
//! timer waits, interactive commands time out, `link-package` skips), and returns what
//! to tell the operator.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::heartbeat::{self, Sent};
use crate::layout::{self, Layout};
use crate::links;
use crate::lock::{self, Lock, Wait};
use crate::log;
use crate::run::{self, Opts, Outcome};
use crate::service::ServiceConfig;
use crate::state::{self, Spec, UpdateFile};
use crate::{agent, host_facts, identity};

/// How long interactive commands wait for a running update.
pub(crate) const INTERACTIVE_LOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// What a command did: exit 0 (`Done`), or a refusal that the caller maps to an exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Done(String),
    Refused(String),
}

fn lock(ctx: &Ctx, wait: Wait) -> Result<Option<Lock>> {
    lock::acquire(&ctx.layout.lock_file(), wait)
}

fn interactive_lock(ctx: &Ctx) -> Result<Lock> {
    lock(ctx, Wait::Timeout(INTERACTIVE_LOCK_TIMEOUT))?
        .ok_or_else(|| Error::Locked(ctx.layout.lock_file()))
}

fn load(ctx: &Ctx) -> Result<Option<UpdateFile>> {
    state::load(&ctx.layout.update_yaml())
}

fn save(ctx: &Ctx, file: &UpdateFile) -> Result<()> {
    state::save(&ctx.layout.update_yaml(), file)
}

fn describe(outcome: Outcome) -> Report {
    match outcome {
        Outcome::Updated { from: Some(f), to } => Report::Done(format!("updated {f} -> {to}")),
        Outcome::Updated { from: None, to } => Report::Done(format!("installed {to}")),
        Outcome::Nothing(why) => Report::Done(why),
        Outcome::Refused(why) => Report::Refused(why),
        // Only `update` asks for a jitter, and it waits it out itself.
        Outcome::Jitter { target, .. } => Report::Done(format!("{target} is due after a jitter")),
    }
}

#[derive(Clone, Debug, Default)]
pub struct EnableArgs {
    pub server: String,
    pub group: Option<String>,
    pub base_url: Option<String>,
    pub url_template: Option<String>,
    pub force_version: Option<String>,
    pub service_config: Option<PathBuf>,
    pub join_token_file: Option<PathBuf>,
    pub keep: Option<u32>,
    /// Follow this channel (seed 001) instead of find.
    pub channel: Option<String>,
    /// Package mode: install the agent through the OS package manager. `None` keeps
    /// what was saved.
    pub package: Option<crate::package::PackageSpec>,
    /// Replace the host's labels; `None` keeps the saved ones.
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// `None` keeps the saved flag.
    pub fips: Option<bool>,
    /// Installer types accepted besides the native one (`local-script`); `None` keeps
    /// the saved ones, an empty list drops them.
    pub installers: Option<Vec<String>>,
    /// Pin this TUF root (`--trust-root`): from now on only signed artifacts install.
    pub trust_root: Option<PathBuf>,
    /// Where the TUF metadata is (`--trust-url`); default: beside the artifacts.
    pub trust_url: Option<String>,
    /// This namespace manages tern-update itself (`--self-update`); `None` keeps the
    /// saved choice.
    pub self_update: Option<bool>,
    /// The product this namespace installs (`--product`); `None` keeps the saved one
    /// (for `--self-update` against the agent namespace's ternd: `updater`).
    pub product: Option<String>,
    /// The bound on one command of the updater's releases (`--release-timeout`).
    pub release_timeout: Option<std::time::Duration>,
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| Error::io(format!("resolve {}", p.display()), e))
}

/// `enable`: check the server answers, save the spec, install what it says (or the
/// forced version) right away.
pub fn enable(ctx: &Ctx, args: EnableArgs) -> Result<Report> {
    let _lock = interactive_lock(ctx)?;
    let mut file = match load(ctx) {
        Ok(f) => f.unwrap_or_default(),
        // `enable` is the repair the damage message names: it starts from a blank file;
        // the installed versions are found again by name when the server names them.
        Err(e @ Error::State { .. }) => {
            log::warn(format!("{e}: replacing it"));
            UpdateFile::default()
        }
        Err(e) => return Err(e),
    };
    let server = args.server.trim_end_matches('/').to_string();
    let package = match args.package {
        Some(p) => {
            crate::package::validate_name(&p)?;
            Some(p)
        }
        // Kept, as the group is: an `enable` that leaves the flag out never moves a
        // host between the package manager and tarballs.
        None => file.spec.package.clone(),
    };
    let mut spec = Spec {
        server,
        group: args.group.unwrap_or_else(|| file.spec.group.clone()),
        base_url: None,
        url_template: None,
        enabled: true,
        pinned: false,
        pinned_version: None,
        pinned_until: None,
        service_config: match args.service_config {
            Some(p) => Some(absolute(&p)?),
            None => file.spec.service_config.clone(),
        },
        join_token_file: match args.join_token_file {
            Some(p) => Some(absolute(&p)?),
            None => file.spec.join_token_file.clone(),
        },
        keep: args.keep.unwrap_or(file.spec.keep).clamp(1, 2),
        channel: args
            .channel
            .as_deref()
            .map(|c| c.trim_end_matches('/').to_string()),
        package,
        labels: args.labels.unwrap_or_else(|| file.spec.labels.clone()),
        fips: args.fips.unwrap_or(file.spec.fips),
        installers: match args.installers {
            Some(list) => crate::installers::checked_opt_ins(list)?,
            None => file.spec.installers.clone(),
        },
        trust_url: None,
        self_update: args.self_update.unwrap_or(file.spec.self_update),
        product: args.product.or_else(|| file.spec.product.clone()),
        release_timeout_seconds: args
            .release_timeout
            .map(|d| d.as_secs().max(1))
            .or(file.spec.release_timeout_seconds),
        settings: ctx.settings.clone(),
    };
    if let Some(p) = &spec.product
        && !tern_core::product::is_product_name(p)
    {
        return Err(Error::BadProduct { product: p.clone() });
    }
    if spec.self_update {
        crate::self_update::check_spec(&ctx.layout, &spec)?;
        if spec.product.is_none() {
            spec.product =
                crate::self_update::default_product(&ctx.layout.install_dir, &spec.server);
        }
    }
    crate::self_update::share_identity(ctx, &spec)?;
    // Artifact location: the flags given now, else what was saved before.
    if args.base_url.is_some() || args.url_template.is_some() {
        spec.base_url = args.base_url;
        spec.url_template = args.url_template;
    } else {
        spec.base_url = file.spec.base_url.clone();
        spec.url_template = file.spec.url_template.clone();
    }
    if let Some(p) = &spec.service_config {
        ServiceConfig::load(p)?;
    }
    // Trust: once a root is pinned, a later `enable` without the flag keeps it (a host
    // never drops back to unverified by accident).
    // A metadata URL given before is kept unless a new one is given; one that was the
    // default follows the artifact location, so a new --base-url moves it too.
    let kept = file.spec.trust_url.as_ref().map(|old| {
        if *old == crate::trust::default_url(&file.spec) {
            crate::trust::default_url(&spec)
        } else {
            old.clone()
        }
    });
    spec.trust_url = match (&args.trust_root, args.trust_url) {
        (Some(_), Some(url)) => Some(url),
        (None, Some(url)) if kept.is_some() => Some(url),
        (None, Some(_)) => return Err(Error::TrustUrlWithoutRoot),
        (Some(_), None) => kept.or_else(|| Some(crate::trust::default_url(&spec))),
        (None, None) => kept,
    };
    if spec.trust_url.is_some() {
        if spec.package.is_some() {
            return Err(Error::TrustWithPackage);
        }
        if spec.installers.iter().any(|i| i == "local-script") {
            return Err(Error::TrustWithLocalScript);
        }
    }
    if let Some(root) = &args.trust_root {
        fsutil::create_own_dir(&ctx.layout.ns_dir())?;
        let pinned = tern_trust::pin_root(&crate::trust::state_file(&ctx.layout), root)
            .map_err(|source| Error::Trust { source })?;
        log::info(format!(
            "release root v{} pinned (sha256 {}){}",
            pinned.version,
            pinned.sha256,
            if pinned.replaced {
                ""
            } else {
                ": the same root as before, the trust state is kept"
            }
        ));
    }
    if let Some(v) = &args.force_version {
        layout::validate_version(&layout::version_name(v, &file.status))?;
    }
    let moved = match &spec.package {
        Some(package) => {
            if spec.service_config.is_none() {
                return Err(Error::PackageNeedsServiceConfig);
            }
            // What runs is what the package database has installed.
            let previous = file.spec.clone();
            crate::package::adopt(ctx, &previous, &mut file.status, package)?;
            // No links in package mode.
            Vec::new()
        }
        None => moved_link_dirs(ctx, &file)?,
    };
    let id = identity::updater_id(&ctx.layout)?;
    let find = match &spec.channel {
        // Channel mode: the channel must answer a version now, as find must otherwise.
        Some(channel) => {
            if args.force_version.is_none() {
                let answer = ctx
                    .http
                    .channel_value(channel, "version")
                    .map(|body| tern_core::host_update::VersionAnswer::from_body(&body));
                match answer {
                    Ok(tern_core::host_update::VersionAnswer::Version(_)) => {}
                    Ok(
                        tern_core::host_update::VersionAnswer::Malformed(problem)
                        | tern_core::host_update::VersionAnswer::Unreachable(problem),
                    ) => {
                        return Err(Error::Channel {
                            url: channel.clone(),
                            problem: format!("its version answer is not usable: {problem}"),
                        });
                    }
                    Err(problem) => {
                        return Err(Error::Channel {
                            url: channel.clone(),
                            problem,
                        });
                    }
                }
            }
            None
        }
        None => match ctx.http.find(
            &spec.server,
            &spec.group,
            &id,
            &host_facts::host_facts(&ctx.layout, &spec, &state::Status::default()),
        ) {
            Ok(f) => Some(f),
            Err(e) if args.force_version.is_some() => {
                log::warn(format!(
                    "find failed ({e}); installing the forced version anyway"
                ));
                None
            }
            Err(e) => return Err(e.into()),
        },
    };
    // Before anything is saved: the heartbeat says what the host runs now, under the
    // spec about to be saved.
    heartbeat::check_token(
        ctx,
        &UpdateFile {
            spec: spec.clone(),
            ..file.clone()
        },
    )?;
    file.spec = spec;
    save(ctx, &file)?;
    move_links(ctx, &file, &moved)?;
    if let Some(p) = &file.spec.package {
        log::info(format!(
            "package mode: the agent is the {} package {}",
            p.manager.label(),
            p.name
        ));
    }
    log::info(format!(
        "automatic updates enabled: {}, group {:?}",
        match &file.spec.channel {
            Some(c) if file.spec.server.is_empty() => format!("channel {c}"),
            Some(c) => format!(
                "channel {c} (maintenance schedule from {})",
                file.spec.server
            ),
            None => format!("server {}", file.spec.server),
        },
        if file.spec.group.is_empty() {
            "(default)"
        } else {
            &file.spec.group
        }
    ));
    let result = run::run(
        ctx,
        &mut file,
        Opts {
            now: true,
            force_version: args.force_version,
            find,
            jitter_done: false,
        },
    );
    heartbeat::heartbeat(ctx, &file);
    crate::directive::run_pending(ctx, &mut file);
    result.map(describe)
}

/// The link and unit dirs `enable` saved before, when this `enable` names others and a
/// version is linked there; checks that its links can be made in the new ones.
fn moved_link_dirs(ctx: &Ctx, file: &UpdateFile) -> Result<Vec<PathBuf>> {
    let Some(active) = &file.status.active else {
        return Ok(Vec::new());
    };
    let old = &file.spec.settings;
    let l = &ctx.layout;
    let moved: Vec<PathBuf> = [(&old.link_dir, &l.link_dir), (&old.unit_dir, &l.unit_dir)]
        .into_iter()
        .filter_map(|(old, new)| old.as_ref().filter(|o| *o != new).cloned())
        .collect();
    if !moved.is_empty() {
        links::check(l, &l.version_dir(active), ctx.overwrite)?;
    }
    Ok(moved)
}

/// Links the active version in the new dirs, then removes its links from the old ones:
/// the agent stays linked somewhere at every instant.
fn move_links(ctx: &Ctx, file: &UpdateFile, old_dirs: &[PathBuf]) -> Result<()> {
    let (Some(active), false) = (&file.status.active, old_dirs.is_empty()) else {
        return Ok(());
    };
    let l = &ctx.layout;
    links::apply(l, &l.version_dir(active), ctx.overwrite)?;
    for dir in old_dirs {
        links::remove_in(dir, &|p: &Path| l.is_managed(p))?;
        log::info(format!(
            "moved the links of {active} out of {}",
            dir.display()
        ));
    }
    Ok(())
}

/// `disable`: `update` stops changing the version.
pub fn disable(ctx: &Ctx) -> Result<Report> {
    let _lock = interactive_lock(ctx)?;
    let Some(mut file) = load(ctx)? else {
        return Ok(Report::Done("not enabled: nothing to disable".into()));
    };
    file.spec.enabled = false;
    save(ctx, &file)?;
    Ok(Report::Done(
        "automatic updates disabled; run `tern-update enable --server ...` to turn them back on"
            .into(),
    ))
}

/// `pin [--force-version V] [--until T]`: install V (if given) and stop following the
/// server (until T, when given: then `update` lifts the pin by itself).
pub fn pin(ctx: &Ctx, force_version: Option<String>, until: Option<String>) -> Result<Report> {
    let until = until
        .map(|u| tern_core::api::parse_until(&u, jiff::Timestamp::now()))
        .transpose()
        .map_err(Error::PinUntil)?;
    let _lock = interactive_lock(ctx)?;
    let Some(mut file) = load(ctx)? else {
        return Err(Error::NotEnabled);
    };
    let version = match force_version {
        Some(v) => {
            let v = layout::version_name(&v, &file.status);
            layout::validate_version(&v)?;
            let result = run::run(
                ctx,
                &mut file,
                Opts {
                    now: true,
                    force_version: Some(v.clone()),
                    find: None,
                    jitter_done: false,
                },
            );
            heartbeat::heartbeat(ctx, &file);
            result?;
            v
        }
        None => file.status.active.clone().ok_or(Error::NothingToPin)?,
    };
    file.spec.pinned = true;
    file.spec.pinned_version = Some(version.clone());
    file.spec.pinned_until = until;
    save(ctx, &file)?;
    heartbeat::heartbeat(ctx, &file);
    // Pinned now: an instruction the answers brought is refused (and reported).
    crate::directive::run_pending(ctx, &mut file);
    Ok(Report::Done(match until {
        Some(t) => format!(
            "pinned to {version} until {t}; then `update` follows the server again (`tern-update unpin` lifts it sooner)"
        ),
        None => format!("pinned to {version}; run `tern-update unpin` to follow the server again"),
    }))
}

/// `unpin`: follow the server again.
pub fn unpin(ctx: &Ctx) -> Result<Report> {
    let _lock = interactive_lock(ctx)?;
    let Some(mut file) = load(ctx)? else {
        return Ok(Report::Done("not enabled: nothing to unpin".into()));
    };
    file.spec.pinned = false;
    file.spec.pinned_version = None;
    file.spec.pinned_until = None;
    save(ctx, &file)?;
    Ok(Report::Done(
        "unpinned: the next `update` follows the server".into(),
    ))
}

/// `update [--now]`. Without `--now` (the timer) it waits for the lock and applies
/// jitter: the wait holds no lock (an operator's `pin` or `update --now` goes ahead), and
/// afterwards everything is decided again from update.yaml and a fresh find.
///
/// `released` (the watcher's runs after ternd released a long poll on a change): ternd
/// already spread the hosts that change released, so this run waits no jitter of its
/// own.
pub fn update(ctx: &Ctx, now: bool, released: bool) -> Result<Report> {
    let wait = if now {
        Wait::Timeout(INTERACTIVE_LOCK_TIMEOUT)
    } else {
        Wait::Forever
    };
    let mut opts = Opts {
        now,
        jitter_done: released,
        ..Opts::default()
    };
    loop {
        let held = lock(ctx, wait)?.ok_or_else(|| Error::Locked(ctx.layout.lock_file()))?;
        let Some(mut file) = load(ctx)? else {
            return Ok(Report::Done(
                "not enabled (no update.yaml): nothing to do".into(),
            ));
        };
        if file.spec.enabled && file.spec.server.is_empty() && file.spec.channel.is_none() {
            return Err(Error::NoServer);
        }
        if let Some(until) = file.spec.pinned_until
            && file.spec.lift_expired_pin(jiff::Timestamp::now())
        {
            save(ctx, &file)?;
            log::info(format!(
                "the pin until {until} has lifted: following the server again"
            ));
        }
        let result = run::run(ctx, &mut file, opts.clone());
        heartbeat::heartbeat(ctx, &file);
        // Still under the lock: instructions the heartbeats brought (this one's, or
        // those kept while waiting out a jitter) run now.
        crate::directive::run_pending(ctx, &mut file);
        match result {
            Ok(Outcome::Jitter { wait, .. }) if !opts.jitter_done => {
                drop(held);
                heartbeat::wait_heartbeating(ctx, wait);
                opts.jitter_done = true;
            }
            other => return other.map(describe),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StatusView {
    pub(crate) namespace: String,
    pub(crate) install_dir: PathBuf,
    pub(crate) updater_id: Option<String>,
    pub(crate) spec: Spec,
    pub(crate) status: state::Status,
    /// When the last heartbeat was sent and whether ternd took it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_heartbeat: Option<state::LastHeartbeat>,
    /// The last install that failed before the switch, reported with every heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) install_failure: Option<tern_core::wire::InstallFailure>,
    pub(crate) server: ServerView,
    /// Whether installs are held to signed release metadata.
    pub(crate) trust: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ServerView {
    pub(crate) reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    pub(crate) target_version: String,
    /// The server says this group may update now (its window is open).
    pub(crate) in_window: bool,
    /// What `update` would do now.
    pub(crate) update_now: String,
    pub(crate) jitter_seconds: u64,
    pub(crate) edition: String,
}

/// `heartbeat`: tell the server what this host runs now, without updating (every run
/// ends with one). No lock: it only reads.
pub fn heartbeat(ctx: &Ctx) -> Result<Report> {
    let file = load(ctx)?.unwrap_or_default();
    if file.spec.server.is_empty() {
        return Err(Error::NotEnabled);
    }
    Ok(match heartbeat::heartbeat(ctx, &file) {
        Sent::Accepted => Report::Done(format!("heartbeat sent to {}", file.spec.server)),
        Sent::Failed(e) => {
            Report::Refused(format!("the heartbeat to {} failed: {e}", file.spec.server))
        }
    })
}

/// `status`: no lock, only reads (and asks the server).
pub fn status(ctx: &Ctx) -> Result<StatusView> {
    let file = load(ctx)?.unwrap_or_default();
    let id = std::fs::read_to_string(ctx.layout.id_file())
        .ok()
        .map(|s| s.trim().to_string());
    let mut server = ServerView::default();
    if file.spec.channel.is_some() {
        // What a run would decide now, on a copy: status saves nothing.
        let mut probe = file.clone();
        let (decision, version) = crate::channel::decide(ctx, &mut probe, false);
        match version {
            tern_core::host_update::VersionAnswer::Version(v) => {
                server.reachable = true;
                server.target_version = layout::version_name(&v.to_string(), &file.status);
            }
            tern_core::host_update::VersionAnswer::Unreachable(why) => {
                server.error = Some(format!("(unreachable: {why})"));
            }
            tern_core::host_update::VersionAnswer::Malformed(why) => {
                server.error = Some(format!("(malformed: {why})"));
            }
        }
        server.in_window = probe.status.channel.is_some_and(|seen| seen.in_window);
        server.update_now = match decision {
            crate::decide::Decision::Update { target, .. } => {
                crate::decide::backing_off(&file.status, jiff::Timestamp::now(), false)
                    .unwrap_or_else(|| format!("would update to {target}"))
            }
            crate::decide::Decision::Nothing(why) | crate::decide::Decision::Refused(why) => why,
        };
    } else if file.spec.server.is_empty() {
        server.error = Some("no server configured".into());
    } else {
        match ctx.http.find(
            &file.spec.server,
            &file.spec.group,
            id.as_deref().unwrap_or(""),
            &host_facts::host_facts(&ctx.layout, &file.spec, &file.status),
        ) {
            Ok(f) => {
                server.reachable = true;
                server.target_version =
                    layout::version_name(&f.auto_update.agent_version, &file.status);
                server.in_window = f.auto_update.agent_auto_update;
                server.jitter_seconds = f
                    .auto_update
                    .agent_update_jitter_seconds
                    .min(run::MAX_JITTER_SECONDS);
                server.edition = f.edition;
                let source = tern_core::host_update::Source::Find {
                    version: f.auto_update.agent_version.clone(),
                    gate: tern_core::host_update::FindGate::of(&f.auto_update),
                };
                let health = agent::agent_health(ctx, &file);
                server.update_now = match crate::decide::decide_source(
                    &file.spec,
                    &file.status,
                    source,
                    health,
                    jiff::Timestamp::now(),
                    false,
                ) {
                    crate::decide::Decision::Update { target, .. } => {
                        crate::decide::backing_off(&file.status, jiff::Timestamp::now(), false)
                            .unwrap_or_else(|| format!("would update to {target}"))
                    }
                    crate::decide::Decision::Nothing(why)
                    | crate::decide::Decision::Refused(why) => why,
                };
            }
            Err(e) => server.error = Some(e.to_string()),
        }
    }
    Ok(StatusView {
        trust: crate::trust::describe(&ctx.layout, &file.spec),
        namespace: ctx.layout.suffix.clone(),
        install_dir: ctx.layout.ns_dir(),
        updater_id: id,
        spec: file.spec,
        status: file.status,
        last_heartbeat: state::load_heartbeat(&ctx.layout.heartbeat_file()),
        install_failure: state::load_install_failure(&ctx.layout.install_failure_file()),
        server,
    })
}

fn package_present(l: &Layout) -> bool {
    links::executables(&l.system_dir()).is_ok_and(|v| !v.is_empty())
}

/// `uninstall [--force]`: hand the host back to the package install, or with `--force`
/// remove the agent entirely.
pub fn uninstall(ctx: &Ctx, force: bool) -> Result<Report> {
    let _lock = interactive_lock(ctx)?;
    let l = &ctx.layout;
    let file = load(ctx)?.unwrap_or_default();
    if let Some(p) = &file.spec.package {
        // The package manager owns the agent: tern-update only stops managing it.
        fsutil::remove_file_durable(&l.update_yaml())?;
        fsutil::remove_file_durable(&l.id_file())?;
        fsutil::remove_file_durable(&l.heartbeat_file())?;
        fsutil::remove_file_durable(&l.install_pending_file())?;
        fsutil::remove_file_durable(&crate::trust::state_file(l))?;
        return Ok(Report::Done(format!(
            "tern-update no longer manages this host; the {} package {} stays installed and running (remove it with {} if you want)",
            p.manager.label(),
            p.name,
            match p.manager {
                crate::package::Manager::Apt => "apt-get remove",
                crate::package::Manager::Yum => "yum remove",
            }
        )));
    }
    let package = package_present(l);
    if !package && !force {
        return Err(Error::WouldLeaveNoAgent {
            dir: l.system_dir(),
        });
    }
    let active_dir = file.status.active.as_deref().map(|v| l.version_dir(v));
    let svc = agent::service_for(&file.spec, active_dir.as_deref())?;
    let was_active = svc.as_ref().is_some_and(|s| s.is_active());
    if let Some(svc) = &svc
        && was_active
    {
        svc.stop()?;
    }
    let msg = if package {
        links::apply(l, &l.system_dir(), false)?;
        if let Some(svc) = &svc {
            svc.daemon_reload()?;
            if was_active {
                svc.start()?;
            }
        }
        format!(
            "removed the managed versions; the package in {} is linked",
            l.system_dir().display()
        )
    } else {
        links::remove(l, &|p: &Path| l.is_managed(p))?;
        if let Some(svc) = &svc {
            let _ = svc.daemon_reload();
        }
        "removed the agent (--force): no agent is installed now".to_string()
    };
    fsutil::remove_dir_durable(&l.versions_dir())?;
    fsutil::remove_file_durable(&l.update_yaml())?;
    fsutil::remove_file_durable(&l.id_file())?;
    fsutil::remove_file_durable(&l.heartbeat_file())?;
    fsutil::remove_file_durable(&l.install_pending_file())?;
    // The pinned root goes with the rest: uninstall then enable is how a host stops
    // verifying (no `enable` flag drops a pinned root, so a typo never does).
    fsutil::remove_file_durable(&crate::trust::state_file(l))?;
    Ok(Report::Done(msg))
}

/// `link-package`: link the package install when no managed version is active. Skips
/// (exit 0) when an update holds the lock.
pub fn link_package(ctx: &Ctx) -> Result<Report> {
    let Some(_lock) = lock(ctx, Wait::Try)? else {
        return Ok(Report::Done(
            "an update is running: not linking the package now".into(),
        ));
    };
    let l = &ctx.layout;
    if let Some(active) = load(ctx)?.and_then(|f| f.status.active) {
        return Ok(Report::Done(format!(
            "managed version {active} is active: the package stays unlinked"
        )));
    }
    if !package_present(l) {
        return Err(Error::NoPackage {
            dir: l.system_dir(),
        });
    }
    links::apply(l, &l.system_dir(), ctx.overwrite)?;
    Ok(Report::Done(format!(
        "linked the package in {}",
        l.system_dir().display()
    )))
}

/// `unlink-package`: remove the links into the package install.
pub fn unlink_package(ctx: &Ctx) -> Result<Report> {
    let _lock = interactive_lock(ctx)?;
    let l = &ctx.layout;
    links::remove(l, &|p: &Path| l.is_package(p))?;
    Ok(Report::Done("removed the package's links".into()))
}

/// `schedule sync|clear|check`: the systemd timer override of `setup --schedule-timers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleAction {
    Sync,
    Clear,
    Check,
}

pub fn schedule(ctx: &Ctx, action: ScheduleAction) -> Result<Report> {
    let done = match action {
        ScheduleAction::Sync => {
            let _lock = interactive_lock(ctx)?;
            let Some(mut file) = load(ctx)? else {
                return Err(Error::NotEnabled);
            };
            let done = crate::schedule::sync(ctx, &mut file)?;
            save(ctx, &file)?;
            done
        }
        // No lock: run by the agent unit's ExecStopPost, possibly while an update that
        // holds the lock stops the agent. It only removes the override file.
        ScheduleAction::Clear => crate::schedule::clear(ctx)?,
        ScheduleAction::Check => {
            let file = load(ctx)?.ok_or(Error::NotEnabled)?;
            crate::schedule::check(ctx, &file)?
        }
    };
    Ok(Report::Done(done.to_string()))
}
