//! `setup`: the updater's own systemd service + timer, and a drop-in for the agent's unit.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::fsutil;
use crate::layout::Layout;
use crate::service::systemctl_path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnitFile {
    pub(crate) path: PathBuf,
    pub(crate) content: String,
}

/// The files `setup` writes (pure). `exe` is the updater to run; `agent_unit` the
/// managed unit's name, when known; `transport` the flags the timer's runs need to
/// reach the server as this command did (`--insecure`, `--ca-cert FILE`, …).
pub(crate) fn units(
    layout: &Layout,
    exe: &str,
    agent_unit: Option<&str>,
    transport: &[String],
    schedule_timers: bool,
    watch: bool,
) -> Vec<UnitFile> {
    let stem = layout.updater_unit_stem();
    let flags = updater_args(layout, transport)
        .iter()
        .map(|a| systemd_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let ns = &layout.suffix;
    // With schedule timers, a run that updated (or found nothing to do) refreshes the
    // window the timer is restricted to.
    let sync = if schedule_timers {
        format!("ExecStartPost={exe} {flags} schedule sync\n")
    } else {
        String::new()
    };
    let timer = if schedule_timers {
        format!(
            "# Written by `tern-update setup --schedule-timers`. `tern-update schedule sync`\n# restricts it to the maintenance window (a drop-in); `schedule clear` lifts that.\n[Unit]\nDescription=Run the Tern agent updater ({ns}) every 30 minutes, or in the maintenance window\n\n[Timer]\nOnActiveSec=1min\nOnUnitActiveSec=30min\nRandomizedDelaySec=5min\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
        )
    } else {
        format!(
            "# Written by `tern-update setup`.\n[Unit]\nDescription=Run the Tern agent updater ({ns}) every minute\n\n[Timer]\nOnActiveSec=30s\nOnUnitActiveSec=60s\nRandomizedDelaySec=15s\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
        )
    };
    let mut out = vec![
        UnitFile {
            path: layout.systemd_dir.join(format!("{stem}.service")),
            content: format!(
                "# Written by `tern-update setup`.\n[Unit]\nDescription=Tern agent updater ({ns})\nAfter=network-online.target\nWants=network-online.target\n\n[Service]\nType=oneshot\nExecStart={exe} {flags} update\n{sync}"
            ),
        },
        UnitFile {
            path: layout.systemd_dir.join(format!("{stem}.timer")),
            content: timer,
        },
    ];
    if schedule_timers {
        out.push(UnitFile {
            path: layout.systemd_dir.join(format!("{stem}-check.service")),
            content: format!(
                "# Written by `tern-update setup --schedule-timers`.\n[Unit]\nDescription=Lift the Tern agent updater's ({ns}) window for a critical update\nAfter=network-online.target\nWants=network-online.target\n\n[Service]\nType=oneshot\nExecStart={exe} {flags} schedule check\n"
            ),
        });
        out.push(UnitFile {
            path: layout.systemd_dir.join(format!("{stem}-check.timer")),
            content: format!(
                "# Written by `tern-update setup --schedule-timers`.\n[Unit]\nDescription=Check for a critical update for the Tern agent ({ns}) every 5 minutes\n\n[Timer]\nOnActiveSec=2min\nOnUnitActiveSec=5min\nRandomizedDelaySec=1min\n\n[Install]\nWantedBy=timers.target\n"
            ),
        });
    }
    if watch {
        // Beside the timer, not instead of it: the timer is the safety net when the
        // watcher or the server's long poll is missing.
        out.push(UnitFile {
            path: layout.systemd_dir.join(format!("{stem}-watch.service")),
            content: format!(
                "# Written by `tern-update setup --watch`.\n[Unit]\nDescription=Tern agent updater ({ns}): update as soon as ternd says so (long poll)\nAfter=network-online.target\nWants=network-online.target\n\n[Service]\nType=simple\nExecStart={exe} {flags} watch\nRestart=always\nRestartSec=10\n\n[Install]\nWantedBy=multi-user.target\n"
            ),
        });
    }
    if let Some(unit) = agent_unit {
        let unit = if unit.ends_with(".service") {
            unit.to_string()
        } else {
            format!("{unit}.service")
        };
        out.push(UnitFile {
            path: layout.systemd_dir.join(format!("{unit}.d")).join(format!("{stem}.conf")),
            content: format!(
                "# Written by `tern-update setup`: the agent restarts on failure, without a start\n# limit, so the updater's health watch sees a crash loop instead of a stopped unit.\n[Unit]\nStartLimitIntervalSec=0\n\n[Service]\nRestart=on-failure\nRestartSec=2\n{clear}",
                // A stopped or crashed agent lifts the window: its updater may act.
                clear = if schedule_timers {
                    format!("ExecStopPost={exe} {flags} schedule clear\n")
                } else {
                    String::new()
                }
            ),
        });
    }
    out
}

/// The flags every run the units start is given: this command's layout and the
/// transport flags (`--insecure`, `--ca-cert FILE`, …).
fn updater_args(layout: &Layout, transport: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--install-dir".into(),
        layout.install_dir.display().to_string(),
        "--install-suffix".into(),
        layout.suffix.clone(),
        "--link-dir".into(),
        layout.link_dir.display().to_string(),
        "--unit-dir".into(),
        layout.unit_dir.display().to_string(),
    ];
    args.extend(transport.iter().cloned());
    args
}

/// `exe` with the units' flags and `update`, for a shell (a cron line): what to run
/// every minute on a host without systemd.
fn update_command_line(layout: &Layout, exe: &str, transport: &[String]) -> String {
    std::iter::once(exe.to_string())
        .chain(updater_args(layout, transport))
        .chain(std::iter::once("update".to_string()))
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quotes an argument for a POSIX shell when it holds anything but plain characters.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// Quotes an `ExecStart=` argument for systemd when it holds spaces or quotes.
fn systemd_quote(arg: &str) -> String {
    if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\') {
        format!("\"{}\"", arg.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        arg.to_string()
    }
}

/// The directory that exists when systemd runs this host: `TERN_SYSTEMD_RUNTIME_DIR`
/// (tests), else none with a stand-in systemctl (`TERN_SYSTEMCTL`: it answers for
/// systemd), else `/run/systemd/system`.
fn systemd_probe() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TERN_SYSTEMD_RUNTIME_DIR") {
        return Some(PathBuf::from(dir));
    }
    if std::env::var_os("TERN_SYSTEMCTL").is_some() {
        return None;
    }
    Some(PathBuf::from("/run/systemd/system"))
}

pub fn run(
    layout: &Layout,
    exe: &str,
    agent_unit: Option<&str>,
    transport: &[String],
    dry_run: bool,
    schedule_timers: bool,
    watch: bool,
) -> Result<String> {
    if !dry_run && let Some(probe) = systemd_probe() {
        // sd_booted(3)'s test: without it systemctl only says "System has not been
        // booted with systemd", after the units were written for nothing.
        if !probe.is_dir() {
            return Err(Error::NoSystemd {
                probe,
                command: update_command_line(layout, exe, transport),
            });
        }
    }
    let files = units(layout, exe, agent_unit, transport, schedule_timers, watch);
    let mut report = String::new();
    for f in &files {
        if dry_run {
            report.push_str(&format!(
                "# would write {}\n{}\n",
                f.path.display(),
                f.content
            ));
        } else {
            fsutil::write_atomic(&f.path, f.content.as_bytes(), 0o644)?;
            report.push_str(&format!("wrote {}\n", f.path.display()));
        }
    }
    if dry_run {
        return Ok(report);
    }
    let timer = format!("{}.timer", layout.updater_unit_stem());
    let check = format!("{}-check.timer", layout.updater_unit_stem());
    let mut commands = vec![
        vec!["daemon-reload"],
        vec!["enable", "--now", timer.as_str()],
    ];
    if schedule_timers {
        commands.push(vec!["enable", "--now", check.as_str()]);
    }
    let watcher = format!("{}-watch.service", layout.updater_unit_stem());
    if watch {
        commands.push(vec!["enable", "--now", watcher.as_str()]);
    }
    for args in commands {
        let program = systemctl_path();
        let owned = || args.iter().map(|a| a.to_string()).collect();
        let status = std::process::Command::new(&program)
            .args(&args)
            .status()
            .map_err(|source| Error::Spawn {
                program,
                args: owned(),
                source,
            })?;
        if !status.success() {
            return Err(Error::SystemctlFailed { args: owned() });
        }
    }
    report.push_str(&format!("enabled {timer}\n"));
    if schedule_timers {
        report.push_str(&format!("enabled {check}\n"));
    }
    if watch {
        report.push_str(&format!("enabled {watcher}\n"));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_files() {
        let l = Layout {
            install_dir: "/opt/tern".into(),
            suffix: "blue".into(),
            link_dir: "/opt/tern/blue/bin".into(),
            unit_dir: "/usr/local/lib/systemd/system".into(),
            systemd_dir: "/etc/systemd/system".into(),
        };
        let transport = [
            "--insecure".to_string(),
            "--ca-cert".into(),
            "/etc/my ca.pem".into(),
        ];
        let u = units(
            &l,
            "/usr/local/bin/tern-update",
            Some("agent"),
            &transport,
            false,
            false,
        );
        assert_eq!(u.len(), 3);
        assert_eq!(
            u[0].path,
            PathBuf::from("/etc/systemd/system/tern-update-blue.service")
        );
        assert!(u[0].content.contains(
            "ExecStart=/usr/local/bin/tern-update --install-dir /opt/tern --install-suffix blue"
        ));
        assert!(u[0].content.contains(
            "--unit-dir /usr/local/lib/systemd/system --insecure --ca-cert \"/etc/my ca.pem\" update\n"
        ));
        assert!(u[1].content.contains("OnUnitActiveSec=60s"));
        assert_eq!(
            u[2].path,
            PathBuf::from("/etc/systemd/system/agent.service.d/tern-update-blue.conf")
        );
        assert_eq!(units(&l, "x", None, &[], false, false).len(), 2);
        assert!(!u[2].content.contains("ExecStopPost"));

        // The seed's timer pair: a 30-minute timer synced to the window, a check timer,
        // and the agent's stop lifting the window.
        let u = units(
            &l,
            "/usr/local/bin/tern-update",
            Some("agent"),
            &[],
            true,
            false,
        );
        let names: Vec<String> = u
            .iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "tern-update-blue.service",
                "tern-update-blue.timer",
                "tern-update-blue-check.service",
                "tern-update-blue-check.timer",
                "tern-update-blue.conf"
            ]
        );
        assert!(
            u[0].content
                .contains("update\nExecStartPost=/usr/local/bin/tern-update")
        );
        assert!(u[0].content.ends_with(" schedule sync\n"));
        assert!(u[1].content.contains("OnUnitActiveSec=30min"));
        assert!(u[2].content.contains(" schedule check\n"));
        assert!(
            u[4].content
                .contains("ExecStopPost=/usr/local/bin/tern-update --install-dir /opt/tern")
        );
        assert!(u[4].content.ends_with(" schedule clear\n"));

        // --watch: the watcher's service beside the timer, with the same flags.
        let u = units(
            &l,
            "/usr/local/bin/tern-update",
            None,
            &transport,
            false,
            true,
        );
        assert_eq!(u.len(), 3);
        assert_eq!(
            u[2].path,
            PathBuf::from("/etc/systemd/system/tern-update-blue-watch.service")
        );
        assert!(u[2].content.starts_with("# Written by `tern-update setup"));
        assert!(
            u[2].content
                .contains("--ca-cert \"/etc/my ca.pem\" watch\n")
        );
        assert!(u[2].content.contains("Restart=always"));
        assert!(
            u[1].content.contains("OnUnitActiveSec=60s"),
            "the timer stays"
        );
    }
}
