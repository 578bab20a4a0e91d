//! The updater's own releases, the part below the switch: what a release must answer
//! (`tern-update self-check`), running that check on a release, what the host's
//! managed release is (`managed_release`, which `reexec` hands commands to), and its
//! health for heartbeats. `self_update` switches releases with it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use tern_process::{End, Options};

use crate::error::Result;
use crate::layout::Layout;
use crate::state::{self, Status};

/// Set on an updater that another one started (`reexec`), so that it never hands the
/// command on again. Here, below `reexec`, because a self-check sets it too.
pub(crate) const GUARD_ENV: &str = "TERN_UPDATE_REEXECED";

/// The release a delegating binary hands a command to names itself to it here, so
/// that what the release records (its heartbeats, its find rounds) says who did it.
pub(crate) const RELEASE_ENV: &str = "TERN_UPDATE_RELEASE";

/// Which updater release runs this process: the one a delegating binary named, else
/// the managed release when this is its executable (the host's link runs it
/// directly), else this binary itself (the one the host was installed with).
pub(crate) fn running_release() -> String {
    std::env::var(RELEASE_ENV)
        .ok()
        .filter(|v| !v.is_empty() && v.len() <= 128 && !v.chars().any(char::is_control))
        .or_else(|| RUNNING_MANAGED.get().cloned())
        .unwrap_or_else(|| format!("bootstrap {}", env!("CARGO_PKG_VERSION")))
}

/// The managed release's version when this process is its executable, found once at
/// start ([`identify_release`]).
static RUNNING_MANAGED: OnceLock<String> = OnceLock::new();

/// Notes, once at start, whether `current_exe` is the managed release of the host
/// under `install_dir`, so that what it does is counted as that release's work.
pub fn identify_release(install_dir: &Path, current_exe: &Path) {
    let Some((version, exe)) = managed_release(install_dir) else {
        return;
    };
    let same = match (
        std::fs::canonicalize(exe),
        std::fs::canonicalize(current_exe),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        let _ = RUNNING_MANAGED.set(version);
    }
}

/// The namespace that manages tern-update itself.
pub const NAMESPACE: &str = "updater";

/// The executable of a release, inside its version directory.
pub(crate) const EXE: &str = "bin/tern-update";

/// How long a self-check may take before it counts as failed. A release that hangs at
/// start is as broken as one that exits.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// The line `self-check` prints first: what a release answers when it runs.
pub fn self_check_line() -> String {
    format!("tern-update {} self-check ok", env!("CARGO_PKG_VERSION"))
}

/// The managed updater release this host runs (its version and executable), when its
/// `updater` namespace manages one: every command of every namespace is handed to it
/// (`reexec`). None when the active release was taken
/// out of service (the watch found it broken and there was no previous one: it is
/// active and skipped at once, until the server names another).
pub(crate) fn managed_release(install_dir: &Path) -> Option<(String, PathBuf)> {
    let file = state::load(&crate::layout::update_yaml_in(install_dir, NAMESPACE)).ok()??;
    if !file.spec.self_update {
        return None;
    }
    let active = file.status.active?;
    if file.status.skip.as_deref() == Some(active.as_str()) {
        return None;
    }
    let exe = release_exe(install_dir, &active);
    exe.is_file().then_some((active, exe))
}

/// The executable of release `version` of the `updater` namespace.
pub(crate) fn release_exe(install_dir: &Path, version: &str) -> PathBuf {
    install_dir
        .join(NAMESPACE)
        .join("versions")
        .join(version)
        .join(EXE)
}

/// Runs `exe self-check` (without handing it on to another updater) and returns what
/// went wrong, if anything: it did not start, exited non-zero, was killed, hung, or
/// did not say it is tern-update.
pub(crate) fn run_check(exe: &Path, layout: &Layout) -> std::result::Result<(), String> {
    let mut cmd = Command::new(exe);
    cmd.arg("--install-dir")
        .arg(&layout.install_dir)
        .arg("--install-suffix")
        .arg(&layout.suffix)
        .arg("--link-dir")
        .arg(&layout.link_dir)
        .arg("self-check")
        .env(GUARD_ENV, "1");
    // Read after the exit: a release that fills a pipe (64 KiB) blocks, and counts as
    // one that hangs. A check starts nothing that should outlive it.
    let options = Options::new(CHECK_TIMEOUT)
        .read_after_exit()
        .kill_group_after_exit()
        .keep(EXCERPT_BYTES, 0);
    let finished = tern_process::run(&mut cmd, options).map_err(|e| match e {
        tern_process::Error::Spawn { source, .. } => format!("it does not start: {source}"),
        tern_process::Error::Wait { source, .. } => format!("waiting for it: {source}"),
    })?;
    let stdout = excerpt_of(&finished.stdout);
    let stderr = excerpt_of(&finished.stderr);
    let how = match finished.end {
        End::Exited(0) => None,
        End::Exited(code) => Some(format!("it exited with {code}")),
        End::Signalled(_) => Some("it was killed by a signal".to_string()),
        End::TimedOut(_) | End::Cancelled => {
            return Err(format!(
                "it did not answer within {}s",
                CHECK_TIMEOUT.as_secs()
            ));
        }
    };
    if let Some(how) = how {
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

/// How much of each of a check's outputs is read.
const EXCERPT_BYTES: usize = 4096;

/// The start of what a check printed, one line, without control characters.
fn excerpt_of(output: &tern_process::Captured) -> String {
    tern_core::text::excerpt(&String::from_utf8_lossy(&output.head), 512)
}

/// What the host sees of its updater release: the active one answers its self-check,
/// and (to count as healthy, which an updater canary needs) has proven itself by doing
/// its job in two runs in a row (`self_update::note_proof`); until then, unknown.
pub(crate) fn health(layout: &Layout, status: &Status) -> tern_core::host_update::Health {
    use tern_core::host_update::Health;
    let Some(active) = &status.active else {
        return Health::Unknown;
    };
    let exe = layout.version_dir(active).join(EXE);
    match run_check(&exe, layout) {
        Ok(()) if status.skip.as_deref() == Some(active.as_str()) => Health::Unhealthy(format!(
            "the updater {active} was taken out of service on this host"
        )),
        Ok(()) if status.proven_runs >= PROVEN_RUNS => Health::Healthy,
        Ok(()) => Health::Unknown,
        Err(problem) => Health::Unhealthy(format!(
            "the updater {active} fails its self-check: {problem}"
        )),
    }
}

/// How many runs in a row an updater release must prove itself in to count healthy.
pub(crate) const PROVEN_RUNS: u32 = 2;

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
    use std::time::Instant;

    fn layout(dir: &Path, suffix: &str) -> Layout {
        Layout::new(dir.to_path_buf(), suffix, &Settings::default())
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

    /// Its output is read after the end: what the check left running in the background
    /// with the pipe open is killed with its group instead of holding the updater.
    #[test]
    fn a_check_that_leaves_a_process_holding_its_output_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path(), NAMESPACE);
        let pidfile = dir.path().join("left.pid");
        let left = script(
            dir.path(),
            "left",
            &format!(
                "sleep 100 &\necho $! > '{}'\necho 'tern-update 9.9.9 self-check ok'",
                pidfile.display()
            ),
        );
        assert_eq!(run_check(&left, &l), Ok(()));
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Its pipes are closed; its end as a process follows at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::service::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!crate::service::pid_alive(pid), "{pid} outlived its check");
    }

    #[test]
    fn no_managed_exe_without_a_self_updating_namespace() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(managed_release(dir.path()), None);
    }
}
