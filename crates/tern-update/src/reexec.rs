//! Updating the updater: every command first runs the managed updater release (the
//! `updater` namespace, `self_check`), else the `tern-update` shipped in the active
//! agent version (the seed's simple mode), when it differs from the running binary. It
//! runs as a child with a guard variable (so it never re-executes again), and this
//! binary — the one the timer starts, which the host keeps whatever release it hands
//! commands to — watches it:
//!
//! - it cannot start, is killed, does not understand the command line (exit 2) or
//!   outlives its bound (`--release-timeout`, 30 minutes by default): the release is
//!   broken;
//! - a command that always heartbeats (`update`, `heartbeat`) left no heartbeat sent by
//!   that release since it started: it does not do its job (a hollow release that
//!   exits 0 and does nothing is caught here), and the release is broken;
//! - any other failure (a non-zero exit): the seed's rule, "if teleport-update itself
//!   fails with an error, and an older version of teleport-update is available, the
//!   update will retry with the older version": this binary runs the command itself.
//!
//! A broken managed release is blamed at once ([`blame`]): the `updater` namespace goes
//! back to its previous release (or to this binary when it has none), the broken one
//! is skipped and reported as a rollback (so an updater canary fails and its group
//! holds), and this binary runs the command. A broken updater shipped in an agent
//! version is remembered (`updater-refused`) and never used again for that version.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::layout::Layout;
use crate::log;
use crate::self_check::NAMESPACE;
use crate::state;

pub(crate) use crate::self_check::{GUARD_ENV, RELEASE_ENV};

/// The bound on one command of a release, unless `--release-timeout` sets another.
pub(crate) const DEFAULT_RELEASE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A release commands may be handed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub exe: PathBuf,
    /// Its version, as the host installed it.
    pub version: String,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// The `updater` namespace's active release.
    Managed,
    /// The one shipped in the active agent version of `namespace`.
    Shipped { namespace: String },
}

/// The updater to hand commands to, when it exists and is not this binary: the
/// release the `updater` namespace manages (`self_update`), when the host has one and
/// it is not known broken; else the one shipped in the active agent version, unless
/// it failed on this host before.
pub fn candidate(layout: &Layout, current_exe: &Path) -> Option<Release> {
    if std::env::var_os(GUARD_ENV).is_some() {
        return None;
    }
    let release = match crate::self_check::managed_release(&layout.install_dir) {
        Some((version, exe)) => Release {
            exe,
            version,
            kind: Kind::Managed,
        },
        None => {
            let file = state::load(&layout.update_yaml()).ok()??;
            let active = file.status.active?;
            if refused(layout).as_deref() == Some(active.as_str()) {
                return None;
            }
            Release {
                exe: layout.version_dir(&active).join("bin").join("tern-update"),
                version: active,
                kind: Kind::Shipped {
                    namespace: layout.suffix.clone(),
                },
            }
        }
    };
    let exe_real = std::fs::canonicalize(&release.exe).ok()?;
    let cur_real = std::fs::canonicalize(current_exe).ok()?;
    (exe_real != cur_real && exe_real.is_file()).then_some(Release {
        exe: exe_real,
        ..release
    })
}

/// What the handed command is, for the watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duty {
    /// It always heartbeats (`update`, `heartbeat`): it must leave a heartbeat of its
    /// own behind.
    Heartbeats,
    /// Anything else.
    Other,
}

/// Runs `release` with our arguments, watching it; `Some(code)` when it handled the
/// command, `None` when this binary must run it itself.
pub fn delegate(
    release: &Release,
    args: &[std::ffi::OsString],
    layout: &Layout,
    duty: Duty,
) -> Option<i32> {
    log::info(format!(
        "running the updater release {} ({})",
        release.version,
        release.exe.display()
    ));
    let started = jiff::Timestamp::now();
    let timeout = release_timeout(layout);
    let verdict = match run(release, args, timeout) {
        Ran::Exited(2) => Err("it did not accept the command line (exit 2)".to_string()),
        Ran::Exited(code) if duty == Duty::Heartbeats && expects_heartbeat(layout) => {
            match heartbeat_since(layout, started, &release.version) {
                Ok(()) => Ok(code),
                Err(why) => Err(why),
            }
        }
        Ran::Exited(0) => Ok(0),
        Ran::Exited(code) => {
            // The seed's rule: an error of the updater is retried with the older one.
            log::warn(format!(
                "the updater release {} failed this command (exit {code}); running it with this updater",
                release.version
            ));
            return None;
        }
        Ran::Killed => Err("it was killed by a signal".to_string()),
        Ran::TimedOut => Err(format!(
            "it did not finish within {}s (--release-timeout)",
            timeout.as_secs()
        )),
        Ran::NotStarted(e) => Err(format!("it does not start: {e}")),
    };
    match verdict {
        Ok(code) => Some(code),
        Err(why) => {
            blame(layout, release, &why);
            None
        }
    }
}

enum Ran {
    Exited(i32),
    Killed,
    TimedOut,
    NotStarted(String),
}

fn run(release: &Release, args: &[std::ffi::OsString], timeout: Duration) -> Ran {
    let mut child = match Command::new(&release.exe)
        .args(args)
        .env(GUARD_ENV, "1")
        .env(RELEASE_ENV, &release.version)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Ran::NotStarted(e.to_string()),
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return match status.code() {
                    Some(code) => Ran::Exited(code),
                    None => Ran::Killed,
                };
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Ran::TimedOut;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Ran::NotStarted(format!("waiting for it: {e}")),
        }
    }
}

/// The bound the `updater` namespace was enabled with.
fn release_timeout(layout: &Layout) -> Duration {
    state::load(&crate::layout::update_yaml_in(
        &layout.install_dir,
        NAMESPACE,
    ))
    .ok()
    .flatten()
    .and_then(|f| f.spec.release_timeout_seconds)
    .map_or(DEFAULT_RELEASE_TIMEOUT, Duration::from_secs)
}

/// Whether this namespace heartbeats at all (it follows a ternd and is enabled).
fn expects_heartbeat(layout: &Layout) -> bool {
    state::load(&layout.update_yaml())
        .ok()
        .flatten()
        .is_some_and(|f| f.spec.enabled && !f.spec.server.is_empty())
}

/// `Ok` when this namespace's last heartbeat was sent by `version` since `since`
/// (whether ternd took it or not: a release that tries does its job; ternd's answer
/// is not the release's to give).
fn heartbeat_since(layout: &Layout, since: jiff::Timestamp, version: &str) -> Result<(), String> {
    match state::load_heartbeat(&layout.heartbeat_file()) {
        Some(hb) if hb.time >= since && hb.by.as_deref() == Some(version) => Ok(()),
        Some(hb) if hb.time >= since => Err(format!(
            "the last heartbeat was sent by {}, not by it",
            hb.by.as_deref().unwrap_or("an older updater")
        )),
        _ => Err("it exited without sending a heartbeat: it does not do its job".into()),
    }
}

/// The file remembering an agent version whose shipped updater failed here.
fn refused_file(layout: &Layout) -> PathBuf {
    layout.ns_dir().join("updater-refused")
}

fn refused(layout: &Layout) -> Option<String> {
    let text = std::fs::read_to_string(refused_file(layout)).ok()?;
    Some(text.trim().to_string()).filter(|v| !v.is_empty())
}

/// Takes `release` out of service for `why`, so that this binary (or the previous
/// release) runs the commands from now on, and says so where ternd hears it.
fn blame(layout: &Layout, release: &Release, why: &str) {
    log::error(format!(
        "the updater release {} is broken ({why}): going back to the previous updater",
        release.version
    ));
    match &release.kind {
        Kind::Shipped { namespace } => {
            let l = Layout::new(
                layout.install_dir.clone(),
                namespace,
                &crate::settings::Settings::default(),
            );
            if let Err(e) = crate::fsutil::write_atomic(
                &refused_file(&l),
                format!("{}\n", release.version).as_bytes(),
                0o644,
            ) {
                log::error(format!("could not record the broken updater: {e}"));
            }
        }
        Kind::Managed => {
            if let Err(e) =
                crate::self_update::take_back(&layout.install_dir, &release.version, why)
            {
                log::error(format!(
                    "could not take the updater release {} out of service: {e}",
                    release.version
                ));
            }
        }
    }
}
