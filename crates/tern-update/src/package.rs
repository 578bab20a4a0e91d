//! Package mode: the agent comes from the OS package manager (apt or yum) instead of
//! tarballs. The version to run is decided as in tarball mode (find or a channel); this
//! module installs it with the manager's own version pinning, reads the installed
//! version back from the package database, restarts the agent and watches it, and on a
//! failure reinstalls the previous version through the same manager. No links and no
//! versions directory: `status.active` is the installed package's version.
//!
//! Every program runs directly from an argv vector, never through a shell. The version
//! comes from the network: it is checked strictly ([`checked_version`]) before any
//! program runs. A manager that fails is an error naming the command; nothing else is
//! tried (no tarball download, no other manager).

use std::process::Command;

use jiff::Timestamp;
use tern_process::{End, Options};

use crate::agent;
use crate::ctx::Ctx;
use crate::decide;
use crate::error::{Error, Result};
use crate::health;
use crate::hooks::kill_point;
use crate::log;
use crate::service::Service;
use crate::state::{self, InProgress, Spec, Status, UpdateFile};
pub use crate::state::{Manager, PackageSpec};
use crate::update::{self, Reverted};

/// The programs package mode runs. Each can be replaced through an environment
/// variable, as `TERN_SYSTEMCTL` replaces systemctl: the tests point them at stand-ins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    AptGet,
    AptCache,
    DpkgQuery,
    Yum,
    Rpm,
}

impl Tool {
    fn default_program(self) -> &'static str {
        match self {
            Self::AptGet => "apt-get",
            Self::AptCache => "apt-cache",
            Self::DpkgQuery => "dpkg-query",
            Self::Yum => "yum",
            Self::Rpm => "rpm",
        }
    }

    fn env_var(self) -> &'static str {
        match self {
            Self::AptGet => "TERN_APT_GET",
            Self::AptCache => "TERN_APT_CACHE",
            Self::DpkgQuery => "TERN_DPKG_QUERY",
            Self::Yum => "TERN_YUM",
            Self::Rpm => "TERN_RPM",
        }
    }

    fn program(self) -> String {
        std::env::var(self.env_var()).unwrap_or_else(|_| self.default_program().into())
    }
}

/// One program run: what to run and with what, shown whole in errors and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Invocation {
    tool: Tool,
    args: Vec<String>,
    /// Set on top of the inherited environment.
    env: Vec<(&'static str, &'static str)>,
}

/// The longest a package-manager command may run: apt-get on a slow mirror takes
/// minutes, never this long. `TERN_PACKAGE_TIMEOUT_SECS` shortens it in tests (the
/// `test-hooks` feature only).
fn command_timeout() -> std::time::Duration {
    const DEFAULT: std::time::Duration = std::time::Duration::from_secs(20 * 60);
    #[cfg(feature = "test-hooks")]
    if let Some(secs) = std::env::var("TERN_PACKAGE_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return std::time::Duration::from_secs(secs);
    }
    DEFAULT
}

/// How much of the start of each of a program's outputs is kept: what is parsed
/// (`apt-cache madison`, `dpkg-query`) is a few lines; apt-get's progress is more.
const OUTPUT_HEAD: usize = 1024 * 1024;
/// And of their end, past that: where [`output_tail`] finds why a manager failed.
const OUTPUT_TAIL: usize = 16 * 1024;

/// What a program said and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Invocation {
    fn new(tool: Tool, args: &[&str]) -> Self {
        Self {
            tool,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
        }
    }

    /// The command line as an operator would type it (arguments with spaces quoted).
    fn display(&self) -> String {
        let mut words = vec![self.tool.program()];
        words.extend(self.args.iter().map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a.clone()
            }
        }));
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if env.is_empty() {
            words.join(" ")
        } else {
            format!("{} {}", env.join(" "), words.join(" "))
        }
    }

    /// Runs the program directly (no shell), stdin closed, output captured, in a
    /// process group of its own that is killed whole (apt-get's dpkg included) when it
    /// takes longer than [`command_timeout`]: a hung manager must not hold the
    /// updater's lock forever. A manager that ended is not followed by a kill of its
    /// group: what its maintainer scripts started may run on.
    fn run(&self) -> Result<Ran> {
        let timeout = command_timeout();
        let mut cmd = Command::new(self.tool.program());
        cmd.args(&self.args).envs(self.env.iter().copied());
        let options = Options::new(timeout).keep(OUTPUT_HEAD, OUTPUT_TAIL);
        let finished = tern_process::run(&mut cmd, options).map_err(|e| {
            let (tern_process::Error::Spawn { source, .. }
            | tern_process::Error::Wait { source, .. }) = e;
            Error::PackageSpawn {
                command: self.display(),
                source,
            }
        })?;
        if finished.output_left_open {
            log::warn(format!(
                "{}: its output is still open (a process it started holds it); not read further",
                self.display()
            ));
        }
        let ran = Ran {
            code: match finished.end {
                End::Exited(code) => Some(code),
                _ => None,
            },
            stdout: finished.stdout.text(),
            stderr: finished.stderr.text(),
        };
        if let End::TimedOut(_) | End::Cancelled = finished.end {
            return Err(Error::PackageCommand {
                command: self.display(),
                status: format!("no end after {}s: killed", timeout.as_secs()),
                output: output_tail(&ran),
            });
        }
        Ok(ran)
    }

    /// Runs it; an exit status other than 0 is an error with the end of its output.
    fn run_ok(&self) -> Result<Ran> {
        let ran = self.run()?;
        if ran.code == Some(0) {
            Ok(ran)
        } else {
            Err(self.failed(&ran))
        }
    }

    fn failed(&self, ran: &Ran) -> Error {
        Error::PackageCommand {
            command: self.display(),
            status: ran.code.map_or_else(
                || "killed by a signal".to_string(),
                |c| format!("exit status {c}"),
            ),
            output: output_tail(ran),
        }
    }
}

/// The last lines a failed program wrote (stderr, else stdout), on one line and
/// bounded: what says why apt or yum failed, without flooding the log.
fn output_tail(ran: &Ran) -> String {
    const LINES: usize = 5;
    const CHARS: usize = 800;
    let text = if ran.stderr.trim().is_empty() {
        &ran.stdout
    } else {
        &ran.stderr
    };
    let lines: Vec<String> = text
        .lines()
        .map(|l| l.chars().filter(|c| !c.is_control()).collect::<String>())
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(LINES)..].join(" / ");
    let count = tail.chars().count();
    if count > CHARS {
        let kept: String = tail.chars().skip(count - CHARS).collect();
        format!("…{kept}")
    } else {
        tail
    }
}

/// Checks a package name: Debian's rules (at least two characters of `a-z 0-9 + - .`,
/// starting with a letter or digit); yum also takes upper case and `_`, as RPM names may
/// have them. Names never start with `-`, so they cannot be read as options.
pub fn validate_name(spec: &PackageSpec) -> Result<()> {
    let name = &spec.name;
    let allowed = |b: u8| match spec.manager {
        Manager::Apt => b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b),
        Manager::Yum => b.is_ascii_alphanumeric() || b"+-._".contains(&b),
    };
    let ok = (2..=128).contains(&name.len())
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(allowed);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidPackageName {
            name: name.clone(),
            manager: spec.manager.label(),
        })
    }
}

/// Checks a version before it reaches a package manager's command line. It comes from
/// the network (find or a channel), so it must be a semantic version in its normal form
/// (`1.2.3`, `1.2.3-rc.1`, `1.2.3+b1`): it starts with a digit (never `-`, never an
/// option) and holds only letters, digits and `. - +` (no whitespace, no shell
/// character). yum also refuses `-`, which RPM versions cannot hold.
pub(crate) fn checked_version(manager: Manager, version: &str) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::PackageVersion {
            version: version.to_string(),
            reason,
        })
    };
    if version.starts_with('-') {
        return refuse("it starts with '-' and would be read as an option".into());
    }
    if let Some(c) = version
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
    {
        return refuse(format!(
            "it holds {c:?}; only letters, digits and . - + are allowed"
        ));
    }
    match tern_core::version::Version::parse(version) {
        Ok(v) if v.to_string() == version => {}
        Ok(v) => return refuse(format!("write it as {v}")),
        Err(e) => return refuse(e.to_string()),
    }
    crate::layout::validate_version(version)?;
    if manager == Manager::Yum && version.contains('-') {
        return refuse(
            "RPM versions cannot hold '-', so yum cannot install this pre-release".into(),
        );
    }
    Ok(())
}

/// A Debian version without its epoch (`N:`): `1:1.2.3-1` → `1.2.3-1`.
fn without_epoch(version: &str) -> &str {
    match version.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => version,
    }
}

/// The upstream part of a Debian version: without the epoch (`N:`) and the revision
/// (from the last `-`). `1:1.2.3-1` → `1.2.3`; `1.2.3` → `1.2.3`.
pub(crate) fn upstream(version: &str) -> &str {
    let v = without_epoch(version);
    v.rsplit_once('-').map_or(v, |(up, _)| up)
}

/// Whether the Debian version `candidate` is `target`: the same once the epoch is
/// dropped (a native package, `2.0.0-rc.1`), or its upstream part is (`1.2.3-1`).
pub(crate) fn is_target(candidate: &str, target: &str) -> bool {
    without_epoch(candidate) == target || upstream(candidate) == target
}

/// The version to ask apt for among the versions `apt-cache madison` lists (newest
/// first): the first that is the target itself (but for an epoch), else the first
/// whose upstream part is.
pub(crate) fn pick_apt_version(listed: &[String], target: &str) -> Option<String> {
    listed
        .iter()
        .find(|v| without_epoch(v) == target)
        .or_else(|| listed.iter().find(|v| is_target(v, target)))
        .cloned()
}

/// The versions in `apt-cache madison NAME`'s output (`NAME | VERSION | SOURCE`).
pub(crate) fn parse_madison(text: &str, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut cols = line.split('|').map(str::trim);
        if let (Some(n), Some(v)) = (cols.next(), cols.next())
            && n == name
            && !v.is_empty()
            && !out.iter().any(|o| o == v)
        {
            out.push(v.to_string());
        }
    }
    out
}

/// The command that reads the installed version from the package database.
fn query_invocation(spec: &PackageSpec) -> Invocation {
    match spec.manager {
        // The status too: a package removed but for its config files still has a version.
        Manager::Apt => Invocation::new(
            Tool::DpkgQuery,
            &["-W", "-f=${db:Status-Status} ${Version}\\n", &spec.name],
        ),
        Manager::Yum => Invocation::new(Tool::Rpm, &["-q", "--qf", "%{VERSION}\\n", &spec.name]),
    }
}

/// The version of `spec` the package database says is installed, as the database
/// writes it (`1.2.3-1` for apt, `1.2.3` for yum); `None` when it is not installed.
fn installed(spec: &PackageSpec) -> Result<Option<String>> {
    let inv = query_invocation(spec);
    let ran = inv.run()?;
    match ran.code {
        Some(0) => {}
        // dpkg-query: "no packages found matching"; rpm: "package … is not installed".
        Some(1) => return Ok(None),
        _ => return Err(inv.failed(&ran)),
    }
    let lines: Vec<&str> = ran
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let version = match (spec.manager, lines.as_slice()) {
        (_, []) => None,
        (Manager::Apt, [line]) => match line.split_once(' ') {
            Some(("installed", v)) => Some(v.trim().to_string()),
            _ => None,
        },
        (Manager::Yum, [v]) => Some(v.to_string()),
        (_, several) => {
            return Err(Error::PackageQuery {
                command: inv.display(),
                problem: format!("it names several versions: {}", several.join(", ")),
            });
        }
    };
    Ok(version.filter(|v| !v.is_empty()))
}

/// The name tern-update gives a version as the database writes it: for apt its
/// upstream part (`1.2.3` for `1.2.3-1`); yum's `%{VERSION}` as it is.
fn version_name(manager: Manager, db_version: &str) -> &str {
    match manager {
        Manager::Apt => upstream(db_version),
        Manager::Yum => db_version,
    }
}

/// The version name of what the database has installed. `None` when nothing is
/// installed or the version is not one tern-update can name.
pub(crate) fn installed_name(spec: &PackageSpec) -> Result<Option<String>> {
    let Some(v) = installed(spec)? else {
        return Ok(None);
    };
    let name = version_name(spec.manager, &v).to_string();
    match checked_version(spec.manager, &name) {
        Ok(()) => Ok(Some(name)),
        Err(e) => {
            log::warn(format!(
                "{} {v} is installed, but its version is not one tern-update can name ({e}): it is treated as no version",
                spec.name
            ));
            Ok(None)
        }
    }
}

/// The versions of the package apt's lists know.
fn apt_listed(spec: &PackageSpec) -> Result<Vec<String>> {
    let ran = Invocation::new(Tool::AptCache, &["madison", &spec.name]).run_ok()?;
    Ok(parse_madison(&ran.stdout, &spec.name))
}

fn apt_env(mut inv: Invocation) -> Invocation {
    inv.env.push(("DEBIAN_FRONTEND", "noninteractive"));
    inv
}

/// What to ask the manager to install for `version`: apt needs the package's whole
/// version (its Debian revision too), found in apt's lists, refreshed once with
/// `apt-get update` when they lack it; yum takes `NAME-VERSION` and picks the release.
fn resolve(spec: &PackageSpec, version: &str) -> Result<String> {
    if spec.manager == Manager::Yum {
        return Ok(version.to_string());
    }
    if let Some(v) = pick_apt_version(&apt_listed(spec)?, version) {
        return Ok(v);
    }
    let update = apt_env(Invocation::new(Tool::AptGet, &["update"]));
    log::info(format!(
        "apt's lists have no version {version} of {}: running {}",
        spec.name,
        update.display()
    ));
    let refreshed = update.run_ok().err();
    if let Some(e) = &refreshed {
        log::warn(format!("{e}; looking in the lists as they are"));
    }
    let listed = apt_listed(spec)?;
    pick_apt_version(&listed, version).ok_or_else(|| Error::PackageNotAvailable {
        name: spec.name.clone(),
        version: version.to_string(),
        listed: if listed.is_empty() {
            "none".into()
        } else {
            listed.join(", ")
        },
        refresh: refreshed.map_or_else(String::new, |e| format!("; {e}")),
    })
}

/// The command that installs `asked` (what [`resolve`] gave).
fn install_invocation(spec: &PackageSpec, asked: &str, downgrade: bool) -> Invocation {
    match spec.manager {
        Manager::Apt => {
            let pin = format!("{}={asked}", spec.name);
            apt_env(Invocation::new(
                Tool::AptGet,
                &[
                    "install",
                    "-y",
                    "--allow-downgrades",
                    // Keep the operator's edited config files, without asking.
                    "-o",
                    "Dpkg::Options::=--force-confdef",
                    "-o",
                    "Dpkg::Options::=--force-confold",
                    &pin,
                ],
            ))
        }
        Manager::Yum => {
            let pin = format!("{}-{asked}", spec.name);
            let verb = if downgrade { "downgrade" } else { "install" };
            Invocation::new(Tool::Yum, &[verb, "-y", &pin])
        }
    }
}

/// Installs `version` through the manager and checks that the database then says so.
/// `Err((e, changed))`: `changed` is false when the database still shows `before`.
fn install(
    spec: &PackageSpec,
    version: &str,
    before: Option<&str>,
) -> std::result::Result<(), (Error, bool)> {
    let unchanged = |e| (e, false);
    let asked = resolve(spec, version).map_err(unchanged)?;
    let downgrade =
        before.is_some_and(|b| decide::compare(version, version_name(spec.manager, b)).is_lt());
    let inv = install_invocation(spec, &asked, downgrade);
    log::info(format!("running {}", inv.display()));
    if let Err(e) = inv.run_ok() {
        // A manager that failed may still have changed the database (a maintainer
        // script failed after the unpack): only the database can say.
        let changed = !installed(spec).is_ok_and(|now| now.as_deref() == before);
        return Err((e, changed));
    }
    kill_point("package_installed");
    let now = installed(spec).map_err(|e| (e, true))?;
    if now.as_deref() != Some(asked.as_str()) {
        return Err((
            Error::PackageMismatch {
                command: query_invocation(spec).display(),
                asked: format!("{} {asked}", spec.name),
                installed: now.unwrap_or_else(|| "nothing".into()),
            },
            true,
        ));
    }
    Ok(())
}

/// The agent's service: package mode needs a service config (which service to restart
/// once the package is installed).
fn service(spec: &Spec) -> Result<Service> {
    agent::service_for(spec, None)?.ok_or(Error::PackageNeedsServiceConfig)
}

/// Why a step after the journal failed, and whether the host changed.
enum Failed {
    /// The manager failed and the database still shows what was installed.
    Unchanged(Error),
    /// The host changed: revert. `bool`: the new version itself failed (its start or
    /// its health check), not a step of the host.
    Changed(Error, bool),
}

/// Installs `to` (in place of `from`, what `status.active` says) through the package
/// manager, restarts the agent and watches it; on a failure reinstalls `from` and
/// records the failure as the tarball path does. Nothing runs before the version and
/// the package name are checked.
pub(crate) fn update(
    ctx: &Ctx,
    file: &mut UpdateFile,
    spec: &PackageSpec,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    checked_version(spec.manager, to)?;
    validate_name(spec)?;
    let svc = service(&file.spec)?;
    let before = installed(spec)?;
    file.status.in_progress = Some(InProgress {
        from: from.clone(),
        to: to.to_string(),
        started: Timestamp::now(),
        db_backed_up: false,
    });
    state::save(&ctx.layout.update_yaml(), file)?;
    kill_point("journal_written");
    let was_running = svc.is_active();
    match switch(ctx, spec, &svc, to, before.as_deref(), was_running) {
        Ok(()) => update::commit(ctx, file, from, to),
        Err(Failed::Unchanged(reason)) => {
            file.status.in_progress = None;
            state::save(&ctx.layout.update_yaml(), file)?;
            Err(Error::PackageInstallFailed {
                target: to.to_string(),
                reason: Box::new(reason),
                running: from.unwrap_or_else(|| "no version of the package".into()),
            })
        }
        Err(Failed::Changed(reason, version_failed)) => {
            log::error(format!("update to {to} failed: {reason}; rolling back"));
            // Read before the revert starts the old version, whose output would follow.
            let output = version_failed.then(|| svc.output_tail()).flatten();
            let reverted = revert(ctx, spec, &svc, from.as_deref(), to, was_running);
            Err(update::record_failure(
                ctx,
                file,
                from.as_deref(),
                to,
                update::Failure {
                    reason,
                    version_failed,
                    agent_output: output,
                },
                reverted,
            ))
        }
    }
}

/// The steps that change the host: install, restart, watch.
fn switch(
    ctx: &Ctx,
    spec: &PackageSpec,
    svc: &Service,
    to: &str,
    before: Option<&str>,
    was_running: bool,
) -> std::result::Result<(), Failed> {
    install(spec, to, before).map_err(|(e, changed)| {
        if changed {
            Failed::Changed(e, false)
        } else {
            Failed::Unchanged(e)
        }
    })?;
    if !was_running && !svc.wants_running() {
        log::info(format!(
            "{} is not running and not enabled: not starting it",
            svc.cfg.name
        ));
        return Ok(());
    }
    let downgrade =
        before.is_some_and(|b| decide::compare(to, version_name(spec.manager, b)).is_lt());
    // The package's own scripts may have restarted it already: then this is a second,
    // harmless restart into the same binary.
    if svc.is_active() {
        if downgrade {
            log::info(format!("restarting {} (downgrade)", svc.cfg.name));
            svc.stop().map_err(|e| Failed::Changed(e, false))?;
            svc.start().map_err(|e| Failed::Changed(e, true))?;
        } else {
            log::info(format!("reloading {}", svc.cfg.name));
            svc.reload().map_err(|e| Failed::Changed(e, true))?;
        }
    } else {
        log::info(format!("starting {}", svc.cfg.name));
        svc.start().map_err(|e| Failed::Changed(e, true))?;
    }
    kill_point("restarted");
    health::watch(svc, &ctx.http).map_err(|failure| {
        let version = to.to_string();
        Failed::Changed(Error::Unhealthy { version, failure }, true)
    })?;
    kill_point("healthy");
    Ok(())
}

/// Puts the host back on `from` after `failed` failed: the agent stopped, `from`
/// reinstalled through the same manager, started and watched with the same check.
fn revert(
    ctx: &Ctx,
    spec: &PackageSpec,
    svc: &Service,
    from: Option<&str>,
    failed: &str,
    was_running: bool,
) -> Reverted {
    let was_active = svc.is_active();
    if was_active && let Err(e) = svc.stop() {
        log::error(format!("stopping the failed version: {e}"));
    }
    let Some(prev) = from else {
        return Reverted::unchecked(format!(
            "there is no previous version to reinstall: {} {failed} stays installed, its agent stopped",
            spec.name
        ));
    };
    let before = installed(spec).ok().flatten();
    let reinstalled = checked_version(spec.manager, prev)
        .map_err(|e| (e, false))
        .and_then(|()| install(spec, prev, before.as_deref()));
    if let Err((e, _)) = reinstalled {
        log::error(format!("reinstalling {prev}: {e}"));
        return Reverted::unchecked(format!(
            "reinstalling {prev} with {} failed ({e}); the host may have no working agent",
            spec.manager.label()
        ));
    }
    if !(was_running || was_active || svc.wants_running()) {
        return Reverted::unchecked(format!(
            "{prev} is reinstalled (agent not running, as before)"
        ));
    }
    let started = if svc.is_active() {
        svc.reload()
    } else {
        svc.start()
    };
    if let Err(e) = started {
        return Reverted::unchecked(format!("{prev} is reinstalled but failed to start: {e}"));
    }
    match health::watch(svc, &ctx.http) {
        Ok(()) => Reverted {
            outcome: format!(
                "the host runs {prev} (reinstalled with {}) and it is healthy",
                spec.manager.label()
            ),
            healthy: true,
        },
        Err(why) => Reverted::unchecked(format!(
            "the host runs {prev} (reinstalled with {}) but it is not healthy: {why}",
            spec.manager.label()
        )),
    }
}

/// Reverts an update a killed run left half done (`status.in_progress`): reinstalls
/// the version it started from.
pub(crate) fn recover(ctx: &Ctx, file: &mut UpdateFile, spec: &PackageSpec) -> Result<()> {
    let Some(ip) = file.status.in_progress.clone() else {
        return Ok(());
    };
    log::warn(format!(
        "a previous run was interrupted while installing {} {} in place of {}; reverting",
        spec.name,
        ip.to,
        ip.from.as_deref().unwrap_or("(nothing)"),
    ));
    let svc = service(&file.spec)?;
    let reverted = revert(ctx, spec, &svc, ip.from.as_deref(), &ip.to, false);
    log::info(format!("recovered: {}", reverted.outcome));
    file.status.in_progress = None;
    state::save(&ctx.layout.update_yaml(), file)?;
    kill_point("recovered");
    Ok(())
}

/// `enable` in package mode: refuses a host whose agent tern-update installed from
/// tarballs (its links and versions are in use: `uninstall` first), then takes
/// `status.active` from the package database, which says what is installed (a package
/// installed or upgraded by hand is adopted as it is).
pub(crate) fn adopt(
    ctx: &Ctx,
    previous: &Spec,
    status: &mut Status,
    spec: &PackageSpec,
) -> Result<()> {
    if previous.package.is_none()
        && let Some(active) = &status.active
        && ctx.layout.version_dir(active).is_dir()
    {
        return Err(Error::PackageModeSwitch {
            active: active.clone(),
            dir: ctx.layout.versions_dir(),
        });
    }
    if status.in_progress.is_some() {
        // A killed run's journal: the run enable starts reverts it first, and the
        // database then holds `status.active` again.
        return Ok(());
    }
    let found = installed_name(spec)?;
    if found != status.active {
        log::info(format!(
            "the package database has {}: {}",
            spec.name,
            found.as_deref().unwrap_or("not installed")
        ));
        status.active = found;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apt(name: &str) -> PackageSpec {
        PackageSpec {
            name: name.into(),
            manager: Manager::Apt,
        }
    }

    #[test]
    fn package_names_follow_debian_rules() {
        for ok in ["tern-agent", "teleport", "g++", "lib.x-1", "a0"] {
            assert!(validate_name(&apt(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a",
            "-o",
            "+x",
            ".x",
            "Tern",
            "tern_agent",
            "a b",
            "a;b",
            "a/b",
            "a=1",
            "$(x)",
        ] {
            assert!(validate_name(&apt(bad)).is_err(), "{bad}");
        }
        let yum = |n: &str| PackageSpec {
            name: n.into(),
            manager: Manager::Yum,
        };
        assert!(validate_name(&yum("PackageKit_x")).is_ok());
        assert!(validate_name(&yum("-x")).is_err());
        assert!(validate_name(&yum("a b")).is_err());
    }

    #[test]
    fn hostile_versions_are_refused() {
        for bad in [
            "1.0.0 --force-all",
            "$(touch /tmp/x)",
            "-o",
            "1.0.0;rm",
            "--allow-unauthenticated",
            "1.0.0\n",
            " 1.0.0",
            "v1.0.0",
            "1.0",
            "1.0.0`x`",
            "1.0.0|x",
            "1.0.0&",
            "1.0.0=2",
            "../1.0.0",
            "",
            "1.0.0_x",
        ] {
            for m in [Manager::Apt, Manager::Yum] {
                assert!(checked_version(m, bad).is_err(), "{bad:?} ({m:?})");
            }
        }
        for ok in ["1.0.0", "1.2.3+b1", "10.20.30"] {
            assert!(checked_version(Manager::Apt, ok).is_ok(), "{ok}");
            assert!(checked_version(Manager::Yum, ok).is_ok(), "{ok}");
        }
        assert!(checked_version(Manager::Apt, "2.0.0-rc.1").is_ok());
        let e = checked_version(Manager::Yum, "2.0.0-rc.1").unwrap_err();
        assert!(e.to_string().contains("RPM"), "{e}");
        let e = checked_version(Manager::Apt, "-o").unwrap_err().to_string();
        assert!(e.contains("\"-o\"") && e.contains("option"), "{e}");
    }

    #[test]
    fn debian_versions_match_their_upstream_part() {
        assert_eq!(upstream("1.2.3-1"), "1.2.3");
        assert_eq!(upstream("1:1.2.3-1"), "1.2.3");
        assert_eq!(upstream("1.2.3"), "1.2.3");
        assert_eq!(upstream("2.0.0-rc.1-2"), "2.0.0-rc.1");
        assert!(is_target("1.2.3-1", "1.2.3"));
        assert!(is_target("1.2.3", "1.2.3"));
        assert!(is_target("3:1.2.3-0ubuntu1", "1.2.3"));
        assert!(is_target("2.0.0-rc.1", "2.0.0-rc.1"));
        assert!(!is_target("1.2.30-1", "1.2.3"));
        assert!(!is_target("1.2.3.1-1", "1.2.3"));
        assert!(!is_target("11.2.3-1", "1.2.3"));
    }

    #[test]
    fn apt_picks_the_exact_version_else_the_newest_revision() {
        let listed = parse_madison(
            " tern-agent |    1.2.3-2 | https://apt.example stable/main amd64 Packages\n\
             tern-agent |    1.2.3-1 | https://apt.example stable/main amd64 Packages\n\
             tern-agent | 1.2.30-1 | https://apt.example stable/main amd64 Packages\n\
             other | 1.2.3-9 | x\n\
             tern-agent |    1.2.3-1 | file:/var/cache ./ Packages\n",
            "tern-agent",
        );
        assert_eq!(listed, ["1.2.3-2", "1.2.3-1", "1.2.30-1"]);
        assert_eq!(
            pick_apt_version(&listed, "1.2.3").as_deref(),
            Some("1.2.3-2")
        );
        assert_eq!(pick_apt_version(&listed, "1.2.4"), None);
        // A native package that is exactly the target wins over one whose upstream
        // part merely equals it.
        let listed: Vec<String> = vec!["2.0.0-rc.1".into(), "2.0.0".into()];
        assert_eq!(pick_apt_version(&listed, "2.0.0").as_deref(), Some("2.0.0"));
        assert_eq!(
            pick_apt_version(&listed, "2.0.0-rc.1").as_deref(),
            Some("2.0.0-rc.1")
        );
    }

    #[test]
    fn commands_are_argv_vectors_with_the_pin() {
        let a = apt("tern-agent");
        let inv = install_invocation(&a, "1.2.3-1", true);
        assert_eq!(inv.tool, Tool::AptGet);
        assert_eq!(inv.args[..3], ["install", "-y", "--allow-downgrades"]);
        assert_eq!(
            inv.args.last().map(String::as_str),
            Some("tern-agent=1.2.3-1")
        );
        assert_eq!(inv.env, [("DEBIAN_FRONTEND", "noninteractive")]);
        let y = PackageSpec {
            name: "tern-agent".into(),
            manager: Manager::Yum,
        };
        assert_eq!(
            install_invocation(&y, "1.2.3", false).args,
            ["install", "-y", "tern-agent-1.2.3"]
        );
        assert_eq!(
            install_invocation(&y, "1.2.3", true).args,
            ["downgrade", "-y", "tern-agent-1.2.3"]
        );
        assert_eq!(
            query_invocation(&y).args,
            ["-q", "--qf", "%{VERSION}\\n", "tern-agent"]
        );
        assert!(
            query_invocation(&a)
                .display()
                .contains("'-f=${db:Status-Status} ${Version}\\n'")
        );
    }

    #[test]
    fn the_output_tail_is_short_and_on_one_line() {
        let ran = Ran {
            code: Some(100),
            stdout: "Reading package lists...\n".into(),
            stderr: (0..50)
                .map(|i| format!("line {i}\x1b[31m"))
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let tail = output_tail(&ran);
        assert_eq!(
            tail,
            "line 45[31m / line 46[31m / line 47[31m / line 48[31m / line 49[31m"
        );
        let quiet = Ran {
            code: Some(1),
            stdout: "No package tern-agent-9.9.9 available.\nError: Nothing to do\n".into(),
            stderr: String::new(),
        };
        assert_eq!(
            output_tail(&quiet),
            "No package tern-agent-9.9.9 available. / Error: Nothing to do"
        );
        let long = Ran {
            code: Some(1),
            stdout: String::new(),
            stderr: "x".repeat(10_000),
        };
        assert!(output_tail(&long).chars().count() <= 801);
    }
}
