//! The update path of DESIGN.md in tarball mode, after find → decide → jitter (`run`):
//! download + verify → extract → back up the DB → switch links → restart → watch →
//! commit or roll back → clean up; and the heartbeat. The caller holds `update.lock`. A journal (`status.in_progress`) written before the
//! first change lets the next run revert a switch that a kill interrupted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use tern_client::StatusCode;
use tern_core::wire::Heartbeat;

use crate::artifact::{self, Vars};
use crate::backup::{self, BackupUnusable};
use crate::decide::{self, DbPlan};
use crate::error::{Error, IoContext, Result};
use crate::fsutil;
use crate::health;
use crate::hooks::kill_point;
use crate::layout::Layout;
use crate::links;
use crate::log;
use crate::service::{Service, ServiceConfig};
use crate::settings::Settings;
use crate::state::{self, EnvironmentFailure, InProgress, LastUpdate, Spec, UpdateFile};
use tern_client::Client;

/// Room left free beyond what a download or an unpacked version needs.
const SPACE_MARGIN: u64 = 64 * 1024;

/// How often a run waiting out its jitter still heartbeats, so that ternd (which forgets
/// a host after three silent minutes) keeps seeing it.
const HEARTBEAT_WHILE_WAITING: Duration =
    Duration::from_secs(tern_core::wire::DEFAULT_HEARTBEAT_SECONDS);

pub struct Ctx {
    pub layout: Layout,
    pub http: Client,
    /// Replace links and files tern-update does not manage (`enable --overwrite`).
    pub overwrite: bool,
    /// What this run was given or `enable` saved, with the layout's dirs filled in
    /// (what `enable` saves). Heartbeats name the host by `hostname` and `host_id`;
    /// `None`: the kernel's node name and `/etc/machine-id`.
    pub settings: Settings,
}

/// The service for a namespace: the configured one, else systemd with the unit file the
/// version ships, else none (the agent is installed but not managed).
pub(crate) fn service_for(spec: &Spec, version_dir: Option<&Path>) -> Result<Option<Service>> {
    if let Some(path) = &spec.service_config {
        return Ok(Some(Service::new(ServiceConfig::load(path)?)));
    }
    let unit = version_dir.and_then(links::unit_file);
    Ok(unit.and_then(|u| {
        let name = u.file_stem()?.to_string_lossy().into_owned();
        Some(Service::new(ServiceConfig {
            name,
            ..ServiceConfig::default()
        }))
    }))
}

/// What the host sees of the agent: its service not running (an agent that cannot
/// reach its server exits), or running but failing its own health URL, is unhealthy;
/// no service to look at is unknown.
pub(crate) fn agent_health(ctx: &Ctx, file: &UpdateFile) -> tern_core::host_update::Health {
    use tern_core::host_update::Health;
    if file.spec.self_update {
        return crate::self_check::health(&ctx.layout, &file.status);
    }
    let Some(active) = &file.status.active else {
        return Health::Unknown;
    };
    let dir = ctx.layout.version_dir(active);
    let service = match service_for(&file.spec, Some(&dir)) {
        Ok(Some(service)) => service,
        Ok(None) | Err(_) => return Health::Unknown,
    };
    if !service.is_active() {
        return if service.wants_running() {
            Health::Unhealthy(format!(
                "the agent's service {} is not running",
                service.cfg.name
            ))
        } else {
            // Stopped on purpose (a unit neither running nor enabled).
            Health::Unknown
        };
    }
    match &service.cfg.health_url {
        Some(url) if !ctx.http.probe(url) => {
            Health::Unhealthy(format!("the agent's health URL {url} does not answer 2xx"))
        }
        _ => Health::Healthy,
    }
}

/// Reads the updater id, creating it when missing.
pub(crate) fn updater_id(layout: &Layout) -> Result<String> {
    let path = layout.id_file();
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if id.len() == 36 {
            return Ok(id.to_string());
        }
    }
    let id = new_uuid()?;
    fsutil::write_atomic(&path, format!("{id}\n").as_bytes(), 0o644)?;
    Ok(id)
}

fn new_uuid() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(Error::Random)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = artifact::hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// A random number in `0..=n`.
pub(crate) fn random_up_to(n: u64) -> u64 {
    let mut b = [0u8; 8];
    if n == 0 || getrandom::fill(&mut b).is_err() {
        return 0;
    }
    match n.checked_add(1) {
        Some(range) => u64::from_le_bytes(b) % range,
        None => u64::from_le_bytes(b),
    }
}

/// The artifact URL of `version` for this host.
pub(crate) fn artifact_url(spec: &Spec, version: &str, edition: &str) -> Result<String> {
    let template = spec
        .url_template
        .as_deref()
        .unwrap_or(artifact::DEFAULT_TEMPLATE);
    let base = spec.base_url.as_deref().unwrap_or(&spec.server);
    artifact::render(
        template,
        &Vars {
            version,
            os: std::env::consts::OS,
            arch: artifact::go_arch(std::env::consts::ARCH),
            edition: if edition.is_empty() { "oss" } else { edition },
            base_url: base,
        },
    )
}

pub(crate) fn save(ctx: &Ctx, file: &UpdateFile) -> Result<()> {
    state::save(&ctx.layout.update_yaml(), file)
}

/// Keeps, for the heartbeats, an install of `target` that failed before the switch
/// (the host is unchanged). The error is cut to what a heartbeat carries.
pub(crate) fn record_install_failure(ctx: &Ctx, target: &str, e: &Error) {
    let error: String = e.to_string().chars().take(1024).collect();
    let failure = tern_core::wire::InstallFailure {
        version: target.to_string(),
        kind: e.install_failure_kind().to_string(),
        error,
    };
    state::save_install_failure(&ctx.layout.install_failure_file(), Some(&failure));
}

/// What this host tells ternd about itself, with find and with its heartbeats alike:
/// the version it runs (what tern-update installed, else what a local-script install
/// put in place), its labels, build and installer types.
pub(crate) fn host_facts(
    layout: &crate::layout::Layout,
    spec: &Spec,
    status: &state::Status,
) -> tern_core::wire::FindFacts {
    tern_core::wire::FindFacts {
        trust_root: crate::trust::pinned_root(layout, spec).unwrap_or(0),
        version: status
            .active
            .clone()
            .or_else(|| status.script_version.clone())
            .unwrap_or_default(),
        labels: spec.labels.clone(),
        arch: crate::artifact::go_arch(std::env::consts::ARCH).to_string(),
        os: std::env::consts::OS.to_string(),
        fips: spec.fips,
        installers: crate::installers::advertised(spec),
        product: spec.product.clone().unwrap_or_default(),
    }
}

/// Waits out a jitter without the lock, heartbeating what the host runs now and then.
pub(crate) fn wait_heartbeating(ctx: &Ctx, wait: Duration) {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(HEARTBEAT_WHILE_WAITING));
        if std::time::Instant::now() >= deadline {
            return;
        }
        // Without the lock another command may be saving update.yaml: it is replaced
        // whole, so this reads either version of it.
        if let Ok(Some(file)) = state::load(&ctx.layout.update_yaml()) {
            heartbeat(ctx, &file);
        }
    }
}

/// What a version directive's instruction says the artifact must be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expected<'a> {
    pub(crate) size: u64,
    /// Hex; compared without regard to case.
    pub(crate) sha256: &'a str,
}

/// Makes `versions/<target>` a complete, verified version directory.
pub(crate) fn install(ctx: &Ctx, spec: &Spec, edition: &str, target: &str) -> Result<PathBuf> {
    install_checked(ctx, spec, edition, target, None)
}

/// [`install`], the artifact checked against `expect` (a directive's size and sha256)
/// instead of the server's `.sha256` file. A version already unpacked must have been
/// unpacked from an artifact of that sha256.
pub(crate) fn install_checked(
    ctx: &Ctx,
    spec: &Spec,
    edition: &str,
    target: &str,
    expect: Option<Expected<'_>>,
) -> Result<PathBuf> {
    let versions = ctx.layout.versions_dir();
    let vdir = ctx.layout.version_dir(target);
    fsutil::create_own_dir(&versions)?;
    let signed = crate::trust::signed_artifact(&ctx.http, &ctx.layout, spec, target, edition)?;
    if signed.is_some() {
        kill_point("trust_refreshed");
    }
    let check = Check::new(signed.as_ref(), expect)?;
    if vdir.join("sha256").is_file() {
        if let Some(e) = check.expect {
            unpacked_matches(&vdir, e)?;
        }
        log::info(format!(
            "{target} is already unpacked in {}",
            vdir.display()
        ));
        return Ok(vdir);
    }
    let url = artifact_url(spec, target, edition)?;
    let expected = match check.expect {
        Some(e) => e.sha256.to_ascii_lowercase(),
        None => ctx.http.checksum(&url)?,
    };
    let free = room_for_download(ctx, &url, &versions)?;
    let tarball = fsutil::temp_beside(&versions.join(format!("{target}.tar.gz")));
    let result = download_verified(ctx, &url, &expected, &check, &tarball, free)
        .and_then(|()| unpack(ctx, &tarball, &vdir, &expected));
    let _ = std::fs::remove_file(&tarball);
    if let Err(e) = result {
        if vdir.exists() && !vdir.join("sha256").is_file() {
            let _ = fsutil::remove_dir_durable(&vdir);
        }
        return Err(e);
    }
    Ok(vdir)
}

/// What a download is held to: the signed release metadata's size and sha256 (a host
/// with a pinned root), else a directive's instruction, else the `.sha256` file.
struct Check<'a> {
    expect: Option<Expected<'a>>,
    signed: bool,
}

impl<'a> Check<'a> {
    fn new(
        signed: Option<&'a crate::trust::SignedArtifact>,
        instruction: Option<Expected<'a>>,
    ) -> Result<Self> {
        let Some(s) = signed else {
            return Ok(Self {
                expect: instruction,
                signed: false,
            });
        };
        // ternd's instruction must agree with what the release keys signed: ternd alone
        // cannot choose the bytes.
        if let Some(e) = instruction {
            let mismatch = if e.size != s.size {
                Some(("size", s.size.to_string(), e.size.to_string()))
            } else if !e.sha256.eq_ignore_ascii_case(&s.sha256) {
                Some(("sha256", s.sha256.clone(), e.sha256.to_ascii_lowercase()))
            } else {
                None
            };
            if let Some((what, expected, got)) = mismatch {
                return Err(Error::NotAsSigned {
                    url: "the install instruction".into(),
                    what,
                    expected,
                    got,
                });
            }
        }
        Ok(Self {
            expect: Some(Expected {
                size: s.size,
                sha256: &s.sha256,
            }),
            signed: true,
        })
    }
}

/// A directive's dry run: downloads the artifact of `target` and checks it against
/// `expect`, then removes the download. Nothing is unpacked, linked or switched.
pub(crate) fn verify_only(
    ctx: &Ctx,
    spec: &Spec,
    edition: &str,
    target: &str,
    expect: Expected<'_>,
) -> Result<()> {
    let versions = ctx.layout.versions_dir();
    let vdir = ctx.layout.version_dir(target);
    let signed = crate::trust::signed_artifact(&ctx.http, &ctx.layout, spec, target, edition)?;
    let check = Check::new(signed.as_ref(), Some(expect))?;
    let expect = check.expect.unwrap_or(expect);
    if vdir.join("sha256").is_file() {
        return unpacked_matches(&vdir, expect);
    }
    fsutil::create_own_dir(&versions)?;
    let url = artifact_url(spec, target, edition)?;
    let free = room_for_download(ctx, &url, &versions)?;
    let tarball = fsutil::temp_beside(&versions.join(format!("{target}.tar.gz")));
    let expected = expect.sha256.to_ascii_lowercase();
    let result = download_verified(ctx, &url, &expected, &check, &tarball, free);
    let _ = std::fs::remove_file(&tarball);
    result
}

/// An unpacked version came from an artifact of `expect.sha256` (its `sha256` file).
fn unpacked_matches(vdir: &Path, expect: Expected<'_>) -> Result<()> {
    let got = read_trimmed(&vdir.join("sha256")).unwrap_or_default();
    if got.eq_ignore_ascii_case(expect.sha256) {
        return Ok(());
    }
    Err(Error::InstructionMismatch {
        artifact: vdir.display().to_string(),
        what: "sha256",
        expected: expect.sha256.to_ascii_lowercase(),
        got,
    })
}

/// The free space in `versions`, when the artifact (by its Content-Length) fits in it.
fn room_for_download(ctx: &Ctx, url: &str, versions: &Path) -> Result<u64> {
    let free = fsutil::free_space(versions)?;
    if let Some(len) = ctx.http.content_length(url)?
        && len.saturating_add(SPACE_MARGIN) > free
    {
        return Err(Error::NoSpace {
            path: versions.to_path_buf(),
            // The length comes from the network: u64::MAX must not overflow.
            needed: len.saturating_add(SPACE_MARGIN),
            available: free,
        });
    }
    Ok(free)
}

/// Downloads `url` into `tarball` (at most what `free` leaves) and checks its sha256
/// (and, for a directive's instruction or signed metadata, its size).
fn download_verified(
    ctx: &Ctx,
    url: &str,
    expected: &str,
    check: &Check<'_>,
    tarball: &Path,
    free: u64,
) -> Result<()> {
    log::info(format!("downloading {url}"));
    let declared = check.expect.filter(|_| check.signed).map(|e| e.size);
    let (size, actual) =
        ctx.http
            .download(url, tarball, free.saturating_sub(SPACE_MARGIN), declared)?;
    kill_point("downloaded");
    if let Some(e) = check.expect {
        let mismatch = if size != e.size {
            Some(("size", e.size.to_string(), size.to_string()))
        } else if actual != expected {
            Some(("sha256", expected.to_string(), actual))
        } else {
            None
        };
        return match mismatch {
            None => Ok(()),
            Some((what, expected, got)) if check.signed => Err(Error::NotAsSigned {
                url: url.to_string(),
                what,
                expected,
                got,
            }),
            Some((what, expected, got)) => Err(Error::InstructionMismatch {
                artifact: url.to_string(),
                what,
                expected,
                got,
            }),
        };
    }
    if actual != expected {
        return Err(Error::ChecksumMismatch {
            url: url.to_string(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Unpacks a verified tarball into `vdir`. `vdir/sha256` is written last: it marks the
/// version complete, so a kill before it leaves a directory the next run replaces.
fn unpack(ctx: &Ctx, tarball: &Path, vdir: &Path, expected: &str) -> Result<()> {
    let versions = ctx.layout.versions_dir();
    let entries = tern_unpack::scan(tarball)?;
    let free = fsutil::free_space(&versions)?;
    let plan = entries.plan(free.saturating_sub(SPACE_MARGIN))?;
    if vdir.exists() {
        // A directory without `sha256` is not a complete version: never linked, safe to drop.
        fsutil::remove_dir_durable(vdir)?;
    }
    let tmp = fsutil::temp_beside(vdir);
    if let Err(e) = tern_unpack::extract(tarball, &plan, &tmp) {
        let _ = fsutil::remove_dir_all_if_exists(&tmp);
        return Err(e.into());
    }
    kill_point("extracted");
    std::fs::rename(&tmp, vdir)
        .map_err(|e| Error::io(format!("rename into {}", vdir.display()), e))?;
    fsutil::fsync_dir(&versions)?;
    kill_point("renamed");
    links::desired(&ctx.layout, vdir)?;
    fsutil::write_atomic(
        &vdir.join("sha256"),
        format!("{expected}\n").as_bytes(),
        0o644,
    )?;
    kill_point("verified");
    Ok(())
}

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

/// Records a successful switch: `to` is active, `from` its backup; clears the journal.
pub(crate) fn commit(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
) -> Result<()> {
    let st = &mut file.status;
    if from.as_deref() != Some(to) {
        st.backup = from;
    }
    st.active = Some(to.to_string());
    st.rollback = false;
    if st.skip.as_deref() == Some(to) {
        st.skip = None;
    }
    st.environment_failure = None;
    st.last_update = Some(LastUpdate {
        time: Timestamp::now(),
        target: to.to_string(),
        success: true,
        error: None,
        agent_output: None,
    });
    st.in_progress = None;
    save(ctx, file)?;
    state::save_install_failure(&ctx.layout.install_failure_file(), None);
    kill_point("committed");
    log::info(format!("now running {to}"));
    Ok(())
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

/// Why a switch failed: the error, whether the new version itself failed (it did not
/// start or stay healthy), and what the agent last printed then.
pub(crate) struct Failure {
    pub(crate) reason: Error,
    pub(crate) version_failed: bool,
    pub(crate) agent_output: Option<String>,
}

/// The agent's last lines of output when the new version itself failed (it did not
/// start or stay healthy), for `last_update.error`.
pub(crate) fn agent_output(spec: &Spec, version_failed: bool) -> Option<String> {
    if !version_failed {
        return None;
    }
    service_for(spec, None).ok().flatten()?.output_tail()
}

/// Records an update from `from` to `to` that failed and was reverted, and returns the
/// error to report. `to` is skipped only if the reverted version then passed the same
/// health check; otherwise the host is what is broken, and the failure is recorded as
/// an environment failure, retried after a backoff. Both install paths (tarballs and
/// the package manager) record their failures here.
pub(crate) fn record_failure(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<&str>,
    to: &str,
    failure: Failure,
    reverted: Reverted,
) -> Error {
    let Failure {
        reason,
        version_failed,
        agent_output,
    } = failure;
    let now = Timestamp::now();
    let st = &mut file.status;
    let blame = version_failed && reverted.healthy;
    if blame {
        st.skip = Some(to.to_string());
        st.rollback = from.is_some();
        st.environment_failure = None;
    } else {
        let attempts = st
            .environment_failure
            .as_ref()
            .map_or(0, |f| f.attempts)
            .saturating_add(1);
        let wait = jiff::SignedDuration::try_from(decide::backoff(attempts))
            .unwrap_or(jiff::SignedDuration::MAX);
        // Whole seconds: operators read these times in messages and `status`.
        let time = Timestamp::from_second(now.as_second()).unwrap_or(now);
        st.environment_failure = Some(EnvironmentFailure {
            target: to.to_string(),
            time,
            attempts,
            retry_after: time.checked_add(wait).unwrap_or(Timestamp::MAX),
            error: reason.to_string(),
        });
    }
    st.last_update = Some(LastUpdate {
        time: now,
        target: to.to_string(),
        success: false,
        error: Some(LastUpdate::error_with_output(
            reason.to_string(),
            agent_output.as_deref(),
        )),
        agent_output,
    });
    st.in_progress = None;
    if let Err(e) = save(ctx, file) {
        log::error(format!("could not record the rollback in update.yaml: {e}"));
    }
    let target = to.to_string();
    let reason = Box::new(reason);
    let outcome = reverted.outcome;
    match &file.status.environment_failure {
        Some(f) if !blame => Error::EnvironmentFailure {
            target,
            reason,
            outcome,
            why: if !version_failed {
                "the failure is the host's, not the version's"
            } else if from.is_some() {
                "the previous version failed the same health check, so the host's environment looks broken (network, disk…)"
            } else {
                "with no previous version to check, a broken version cannot be told from a broken host"
            },
            attempts: f.attempts,
            retry_after: f.retry_after,
        },
        _ => Error::UpdateFailed {
            target,
            reason,
            outcome,
        },
    }
}

/// What a revert left: in words, and whether the version it restored passed the
/// health check (false when it was not checked).
pub(crate) struct Reverted {
    pub(crate) outcome: String,
    pub(crate) healthy: bool,
}

impl Reverted {
    pub(crate) fn unchecked(outcome: impl Into<String>) -> Self {
        Self {
            outcome: outcome.into(),
            healthy: false,
        }
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

/// Removes every version but active (and backup with keep ≥ 2), and leftovers of killed runs.
pub(crate) fn cleanup(ctx: &Ctx, file: &mut UpdateFile) -> Result<()> {
    let Some(active) = file.status.active.clone() else {
        return Ok(());
    };
    let versions = ctx.layout.versions_dir();
    let mut installed = Vec::new();
    let Ok(rd) = std::fs::read_dir(&versions) else {
        return Ok(());
    };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if fsutil::is_temp_name(&name) {
            let p = entry.path();
            let _ = if p.is_dir() {
                fsutil::remove_dir_all_if_exists(&p)
            } else {
                std::fs::remove_file(&p).map_err(|e| Error::io("remove", e))
            };
        } else if entry.path().is_dir() {
            installed.push(name);
        }
    }
    if file.spec.keep < 2 && file.status.backup.is_some() {
        file.status.backup = None;
        save(ctx, file)?;
    }
    for v in decide::to_remove(
        &installed,
        &active,
        file.status.backup.as_deref(),
        file.spec.keep,
    ) {
        log::info(format!("removing version {v}"));
        fsutil::remove_dir_durable(&ctx.layout.version_dir(&v))?;
    }
    kill_point("cleaned");
    Ok(())
}

/// `ID-VERSION_ID` of an os-release file (`debian-13`, `ubuntu-24.04`; `ID` alone
/// without a version, as on a rolling release), kept to what a heartbeat accepts:
/// letters, digits, '.', '-', '_', at most 64. Empty when the file names no ID.
fn os_version(os_release: &str) -> String {
    let field = |name: &str| {
        os_release.lines().find_map(|l| {
            let v = l.trim().strip_prefix(name)?.strip_prefix('=')?;
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            Some(
                v.chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                    .collect::<String>(),
            )
        })
    };
    let Some(id) = field("ID").filter(|id| !id.is_empty()) else {
        return String::new();
    };
    let mut out = match field("VERSION_ID").filter(|v| !v.is_empty()) {
        Some(v) => format!("{id}-{v}"),
        None => id,
    };
    out.truncate(64);
    out
}

fn read_trimmed(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// What became of a heartbeat.
#[derive(Debug)]
pub(crate) enum Sent {
    Accepted,
    /// Not sent (no server, no updater id) or not taken; says why.
    Failed(Error),
}

impl Sent {
    /// ternd refused the heartbeat's credentials (401, 403): a wrong or revoked token.
    pub(crate) fn refused_token(&self) -> Option<(StatusCode, Option<String>)> {
        match self {
            Self::Failed(Error::Http(tern_client::Error::HeartbeatRejected {
                status,
                reason,
                ..
            })) if *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN => {
                Some((*status, reason.as_ref().map(|r| r.message.clone())))
            }
            _ => None,
        }
    }
}

/// Best effort: tell ternd what this host runs, and record when and how it went (for
/// `status`). Never fails the run.
pub(crate) fn heartbeat(ctx: &Ctx, file: &UpdateFile) -> Sent {
    let sent = send_heartbeat(ctx, file);
    match &sent {
        Sent::Accepted | Sent::Failed(Error::NotEnabled) => {}
        Sent::Failed(e) if sent.refused_token().is_some() => log::warn(format!(
            "ternd refused this host's token: {e}; the run itself is not affected, but ternd does not hear from this host (check --join-token-file)"
        )),
        Sent::Failed(e) => log::warn(format!("heartbeat failed (ignored): {e}")),
    }
    record_heartbeat(ctx, &sent);
    sent
}

/// Saves when a heartbeat was sent and how it went, for `status`.
fn record_heartbeat(ctx: &Ctx, sent: &Sent) {
    let (accepted, error) = match sent {
        Sent::Accepted => (true, None),
        // Nothing was sent: nothing to record.
        Sent::Failed(Error::NotEnabled) => return,
        Sent::Failed(e) => (false, Some(e.to_string())),
    };
    state::save_heartbeat(
        &ctx.layout.heartbeat_file(),
        &state::LastHeartbeat {
            time: Timestamp::now(),
            accepted,
            error,
            by: Some(crate::self_check::running_release()),
        },
    );
}

fn send_heartbeat(ctx: &Ctx, file: &UpdateFile) -> Sent {
    let spec = &file.spec;
    if spec.server.is_empty() {
        return Sent::Failed(Error::NotEnabled);
    }
    let id = match updater_id(&ctx.layout) {
        Ok(id) => id,
        Err(e) => return Sent::Failed(e),
    };
    let token = match host_token(ctx, spec, &id) {
        Ok(t) => t,
        Err(e) => return Sent::Failed(e),
    };
    // After an environment failure the running version failed its health check, and
    // nothing has checked it since: the host is not healthy, though no version is blamed
    // (no rollback, no failed version) until an update succeeds. Otherwise what the
    // host sees: the service running and its health URL answering, when one is set;
    // nothing to observe is unknown, never healthy.
    let healthy = if file.status.environment_failure.is_some() {
        Some(false)
    } else {
        match agent_health(ctx, file) {
            tern_core::host_update::Health::Healthy => Some(true),
            tern_core::host_update::Health::Unhealthy(_) => Some(false),
            tern_core::host_update::Health::Unknown => None,
        }
    };
    let facts = host_facts(&ctx.layout, &file.spec, &file.status);
    let hb = Heartbeat {
        updater_id: id,
        host_id: ctx
            .settings
            .host_id
            .clone()
            .or_else(|| read_trimmed(Path::new("/etc/machine-id")))
            .unwrap_or_default(),
        hostname: ctx.settings.hostname.clone().unwrap_or_else(|| {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        }),
        group: spec.group.clone(),
        version: facts.version,
        updater_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        updater_status: spec.updater_status(),
        rollback: file.status.rollback,
        failed_version: file.status.skip.clone(),
        healthy,
        follows: if spec.channel.is_some() {
            tern_core::wire::Follows::Channel
        } else {
            tern_core::wire::Follows::Rollout
        },
        install_failure: state::load_install_failure(&ctx.layout.install_failure_file()),
        update_failure: file
            .status
            .last_update
            .as_ref()
            .and_then(LastUpdate::failure),
        labels: facts.labels,
        arch: facts.arch,
        os: facts.os,
        os_version: ["/etc/os-release", "/usr/lib/os-release"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|text| os_version(&text))
            .unwrap_or_default(),
        fips: facts.fips,
        // The host's own installer, and those it opted in to (`enable --installer`).
        installers: facts.installers,
        install_result: file.status.install_result.clone(),
        trust: Some(tern_core::wire::HostTrust {
            pinned: facts.trust_root > 0,
            root_version: facts.trust_root,
        }),
        product: spec.product.clone().unwrap_or_default(),
    };
    match ctx.http.heartbeat(&spec.server, &hb, token.as_deref()) {
        Err(e) => Sent::Failed(e.into()),
        Ok(answer) => {
            if let Some(u) = answer.unknown_group {
                log::warn(unknown_group_warning(&u));
            }
            if let Some(g) = answer.placed_group {
                log::info(placed_note(&g, &spec.group));
            }
            // Sent with or without the lock: the instruction is only kept here, and
            // run by the next step that holds the lock (`directive::run_pending`).
            if let Some(instruction) = answer.install {
                crate::pending_install::keep(&ctx.layout, &instruction);
            }
            Sent::Accepted
        }
    }
}

/// The token heartbeats carry: this host's own credential, fetched once by
/// exchanging the join token (`--join-token-file`) at ternd's join endpoint; or the
/// token itself where ternd predates host credentials (or already gave this updater
/// one, which this host lost: the heartbeat then says what to do).
fn host_token(ctx: &Ctx, spec: &Spec, updater_id: &str) -> Result<Option<String>> {
    let credential = ctx.layout.credential_file();
    if let Some(c) = read_trimmed(&credential) {
        return Ok(Some(c));
    }
    let Some(token) = spec.join_token_file.as_deref().and_then(read_trimmed) else {
        return Ok(None);
    };
    let body = tern_core::api::JoinBody {
        updater_id: updater_id.to_string(),
        host_id: ctx.settings.host_id.clone().unwrap_or_default(),
        hostname: ctx.settings.hostname.clone().unwrap_or_else(|| {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        }),
    };
    match ctx.http.join(&spec.server, &body, &token)? {
        tern_client::Joined::Credential(c) => {
            crate::fsutil::write_atomic(&credential, format!("{c}\n").as_bytes(), 0o600)?;
            log::info(format!(
                "joined ternd: this host's own credential is in {} (the join token is no longer sent)",
                credential.display()
            ));
            Ok(Some(c))
        }
        tern_client::Joined::NotSupported => Ok(Some(token)),
        tern_client::Joined::HasCredential(reason) => {
            log::warn(format!(
                "ternd already gave updater {updater_id} a credential, and {} does not hold it ({}): ask an operator to run `ternctl inventory revoke {updater_id}`, then enable again",
                credential.display(),
                reason.unwrap_or_default()
            ));
            Ok(Some(token))
        }
        tern_client::Joined::Refused(e) => Err(e.into()),
    }
}

/// `enable`'s check that ternd takes this host's token, before anything is saved or
/// installed: a host enrolled with a wrong or revoked token would look enrolled and
/// never be heard. Other failures (ternd busy, 5xx) only warn: they pass.
pub(crate) fn check_token(ctx: &Ctx, file: &UpdateFile) -> Result<()> {
    if file.spec.server.is_empty() {
        // A channel without ternd: no heartbeats, nothing to check.
        return Ok(());
    }
    if let Some(path) = &file.spec.join_token_file {
        match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => {}
            Ok(_) => {
                return Err(Error::TokenFile {
                    path: path.clone(),
                    problem: "the file is empty".into(),
                });
            }
            Err(e) => {
                return Err(Error::TokenFile {
                    path: path.clone(),
                    problem: e.to_string(),
                });
            }
        }
    }
    let mut sent = send_heartbeat(ctx, file);
    let credential = ctx.layout.credential_file();
    if sent.refused_token().is_some() && credential.exists() {
        // This host's credential was revoked: join again with the token given now.
        log::warn(format!(
            "ternd refused this host's credential ({}): joining again with the join token",
            credential.display()
        ));
        std::fs::remove_file(&credential).ctx("remove", &credential)?;
        sent = send_heartbeat(ctx, file);
    }
    record_heartbeat(ctx, &sent);
    if let Some((status, reason)) = sent.refused_token() {
        return Err(Error::TokenRefused {
            status,
            reason,
            token_file: file.spec.join_token_file.clone(),
        });
    }
    if let Sent::Failed(e) = sent {
        log::warn(format!(
            "heartbeat failed ({e}); enabling anyway: the next runs heartbeat again"
        ));
    }
    Ok(())
}

/// A name from the network, for a log line: printable characters only, at most 64.
fn clean(s: &str) -> String {
    tern_core::text::excerpt(s, 64)
}

/// What the host is told when the server places it by its labels (the name comes from
/// the network: cleaned as [`clean`] does).
fn placed_note(placed: &str, presented: &str) -> String {
    let presented = if presented.is_empty() {
        "no group".to_string()
    } else {
        format!("group {:?}", clean(presented))
    };
    format!(
        "ternd counts this host in group {:?} by its labels (it presents {presented})",
        clean(placed)
    )
}

/// The warning for a group the rollout lacks. The names come from the network: only
/// printable characters are kept and each is bounded, so a hostile answer cannot
/// forge log lines or flood them.
fn unknown_group_warning(u: &tern_core::wire::UnknownGroup) -> String {
    let mut groups: Vec<String> = u.groups.iter().take(20).map(|g| clean(g)).collect();
    if u.groups.len() > 20 {
        groups.push("…".into());
    }
    format!(
        "group {:?} is not one of this rollout's groups ({}); this host is updated with the catch-all group {:?} (check --group)",
        clean(&u.group),
        groups.join(", "),
        clean(&u.served_by)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_version_reads_id_and_version_id_and_keeps_them_safe() {
        let debian =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(os_version(debian), "debian-12");
        assert_eq!(
            os_version("ID=ubuntu\nVERSION_ID='24.04'\nID_LIKE=debian\n"),
            "ubuntu-24.04"
        );
        // A rolling release has no VERSION_ID; ID_LIKE is not ID.
        assert_eq!(os_version("ID_LIKE=arch\nID=arch\n"), "arch");
        assert_eq!(os_version("NAME=nothing\n"), "");
        // Hostile content is cut down to what a heartbeat accepts.
        let hostile = format!("ID=\"a b;$(x)\"\nVERSION_ID={}\n", "9".repeat(100));
        let v = os_version(&hostile);
        assert!(v.starts_with("abx-999"), "{v}");
        assert_eq!(v.len(), 64);
        let hb = tern_core::wire::Heartbeat {
            os_version: v,
            ..tern_core::wire::Heartbeat::default()
        };
        assert_eq!(hb.check_facts(), Ok(()));
    }

    #[test]
    fn the_placement_note_keeps_hostile_names_harmless() {
        assert_eq!(
            placed_note("dev", ""),
            "ternd counts this host in group \"dev\" by its labels (it presents no group)"
        );
        let note = placed_note(&format!("x\n{}", "y".repeat(200)), "prod");
        assert!(
            !note.contains('\n') && note.contains('…') && note.contains("group \"prod\""),
            "{note}"
        );
    }

    #[test]
    fn the_unknown_group_warning_names_the_groups_and_keeps_hostile_names_harmless() {
        let u = tern_core::wire::UnknownGroup {
            group: "prdo".into(),
            served_by: "prod".into(),
            groups: vec!["dev".into(), "staging".into(), "prod".into()],
        };
        assert_eq!(
            unknown_group_warning(&u),
            "group \"prdo\" is not one of this rollout's groups (dev, staging, prod); this host is updated with the catch-all group \"prod\" (check --group)"
        );
        let hostile = tern_core::wire::UnknownGroup {
            group: "x\ntern-update: info: all good".into(),
            served_by: "p".repeat(10_000),
            groups: (0..1000).map(|i| format!("g{i}")).collect(),
        };
        let w = unknown_group_warning(&hostile);
        assert!(!w.contains('\n'), "{w}");
        assert!(w.len() < 1000, "{}", w.len());
    }

    #[test]
    fn random_up_to_any_bound() {
        assert_eq!(random_up_to(0), 0);
        for _ in 0..100 {
            assert!(random_up_to(3) <= 3);
        }
        let _ = random_up_to(u64::MAX);
    }

    #[test]
    fn uuid_shape() {
        let id = new_uuid().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_uuid().unwrap());
    }

    #[test]
    fn urls() {
        let mut spec = Spec {
            server: "https://ternd.example".into(),
            ..Spec::default()
        };
        let arch = artifact::go_arch(std::env::consts::ARCH);
        assert_eq!(
            artifact_url(&spec, "1.2.3", "").unwrap(),
            format!("https://ternd.example/tern-agent-v1.2.3-linux-{arch}-bin.tar.gz")
        );
        spec.base_url = Some("https://cdn.example/x/".into());
        assert!(
            artifact_url(&spec, "1.2.3", "")
                .unwrap()
                .starts_with("https://cdn.example/x/tern-agent-v1.2.3")
        );
        spec.url_template = Some("https://m/{{ .Edition }}/{{.Version}}.tgz".into());
        assert_eq!(
            artifact_url(&spec, "1.2.3", "ent").unwrap(),
            "https://m/ent/1.2.3.tgz"
        );
    }
}
