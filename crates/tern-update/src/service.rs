//! The agent's service manager: `systemd` (systemctl) or `command` (configured shell
//! commands and a PID file: OpenRC, runit, containers, tests). Configured by a YAML file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::error::ConfigProblem;
use crate::error::service::{MAX_BACKUP_AGE_HOURS, MAX_HEALTH_SECONDS};
use crate::error::{Error, IoContext, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ManagerKind {
    #[default]
    Systemd,
    Command,
}

/// The service config file (`--service-config`). Durations are seconds (may be fractional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ServiceConfig {
    pub(crate) manager: ManagerKind,
    /// systemd unit name (without `.service` is fine) or a label for `command`.
    pub(crate) name: String,
    pub(crate) start: Option<String>,
    pub(crate) stop: Option<String>,
    pub(crate) reload: Option<String>,
    pub(crate) is_active: Option<String>,
    pub(crate) pid_file: Option<PathBuf>,
    /// Optional URL that must answer 2xx for the agent to count as healthy.
    pub(crate) health_url: Option<String>,
    /// How long a new version has to become healthy.
    pub(crate) health_timeout: f64,
    /// Seconds between health samples.
    pub(crate) health_interval: f64,
    /// Samples with the same live PID (and a passing health URL) needed to be healthy.
    pub(crate) stable_ticks: u32,
    /// PID changes tolerated before calling it a crash loop.
    pub(crate) max_restarts: u32,
    /// The agent's SQLite database, backed up before every switch.
    pub(crate) db_path: Option<PathBuf>,
    /// A DB backup older than this (hours) is not restored (its certificates may have expired).
    pub(crate) backup_max_age_hours: f64,
    /// Where the agent's output goes (`manager: command`): when a new version fails,
    /// its last lines go into `status.last_update.error`. Under systemd the journal of
    /// the unit is read instead.
    pub(crate) log_file: Option<PathBuf>,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            manager: ManagerKind::Systemd,
            name: String::new(),
            start: None,
            stop: None,
            reload: None,
            is_active: None,
            pid_file: None,
            health_url: None,
            health_timeout: 60.0,
            health_interval: 1.0,
            stable_ticks: 5,
            max_restarts: 3,
            db_path: None,
            backup_max_age_hours: 24.0 * 30.0,
            log_file: None,
        }
    }
}

impl ServiceConfig {
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).ctx("read service config", path)?;
        let cfg: Self =
            serde_yaml_ng::from_str(&text).map_err(|source| Error::ServiceConfigSyntax {
                path: path.to_path_buf(),
                source,
            })?;
        cfg.validate()
            .map_err(|problem| Error::ServiceConfigInvalid {
                path: path.to_path_buf(),
                problem,
            })?;
        Ok(cfg)
    }

    pub(crate) fn validate(&self) -> std::result::Result<(), ConfigProblem> {
        if self.name.is_empty() {
            return Err(ConfigProblem::NoName);
        }
        if self.manager == ManagerKind::Command {
            for (field, v) in [("start", &self.start), ("stop", &self.stop)] {
                if v.as_deref().is_none_or(str::is_empty) {
                    return Err(ConfigProblem::MissingCommand { field });
                }
            }
            if self.pid_file.is_none() && self.is_active.is_none() {
                return Err(ConfigProblem::NoLivenessCheck);
            }
        }
        // These become `Duration::from_secs_f64`, which panics outside its range.
        let seconds = |x: f64| x.is_finite() && x > 0.0 && x <= MAX_HEALTH_SECONDS;
        if !seconds(self.health_timeout) || !seconds(self.health_interval) {
            return Err(ConfigProblem::HealthTimesNotPositive);
        }
        let age = self.backup_max_age_hours;
        if !(age.is_finite() && (0.0..=MAX_BACKUP_AGE_HOURS).contains(&age)) {
            return Err(ConfigProblem::BackupAgeOutOfRange);
        }
        if self.stable_ticks == 0 {
            return Err(ConfigProblem::NoStableTicks);
        }
        Ok(())
    }

    pub(crate) fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.health_interval)
    }
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.health_timeout)
    }
}

/// The `systemctl` to run (tests point `TERN_SYSTEMCTL` at a fake).
pub(crate) fn systemctl_path() -> String {
    std::env::var("TERN_SYSTEMCTL").unwrap_or_else(|_| "systemctl".into())
}

fn run(program: &str, args: &[&str]) -> Result<bool> {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .map_err(|source| Error::Spawn {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            source,
        })?;
    Ok(status.success())
}

/// Runs `systemctl args…`; an exit status other than 0 is an error.
pub(crate) fn systemctl(args: &[&str]) -> Result<()> {
    if run(&systemctl_path(), args)? {
        Ok(())
    } else {
        Err(Error::SystemctlFailed {
            args: args.iter().map(|a| a.to_string()).collect(),
        })
    }
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Lines of the agent's output kept in an error.
pub(crate) const OUTPUT_TAIL_LINES: usize = 10;
/// Bytes of the agent's output kept in an error.
pub(crate) const OUTPUT_TAIL_BYTES: usize = 1024;

/// The last `max` bytes of a file (a log may be large), as text.
fn read_end(path: &Path, max: usize) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let max = u64::try_from(max).unwrap_or(u64::MAX);
    f.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The last non-empty lines of `text`, joined with " | ", control characters replaced,
/// within [`OUTPUT_TAIL_BYTES`] (cut at the front: the last words say what failed).
fn tail_lines(text: &str) -> Option<String> {
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            l.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect::<String>()
                .trim()
                .to_string()
        })
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(OUTPUT_TAIL_LINES);
    let mut out = lines[start..].join(" | ");
    if out.is_empty() {
        return None;
    }
    if out.len() > OUTPUT_TAIL_BYTES {
        let mut cut = out.len() - OUTPUT_TAIL_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    Some(out)
}

fn sh(cmd: &str) -> Result<bool> {
    run("sh", &["-c", cmd])
}

pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    let Some(pid) = rustix::process::Pid::from_raw(raw) else {
        return false;
    };
    rustix::process::test_kill_process(pid).is_ok() && !is_zombie(raw)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// A configured service.
#[derive(Clone, Debug)]
pub(crate) struct Service {
    pub(crate) cfg: ServiceConfig,
}

impl Service {
    pub(crate) fn new(cfg: ServiceConfig) -> Self {
        Self { cfg }
    }

    fn unit(&self) -> String {
        if self.cfg.name.ends_with(".service") {
            self.cfg.name.clone()
        } else {
            format!("{}.service", self.cfg.name)
        }
    }

    fn command(&self, what: &'static str, cmd: &Option<String>) -> Result<()> {
        let cmd = cmd.as_deref().unwrap_or_default();
        if sh(cmd)? {
            Ok(())
        } else {
            Err(Error::CommandFailed {
                what,
                command: cmd.to_string(),
            })
        }
    }

    fn systemctl(&self, verb: &str) -> Result<()> {
        systemctl(&[verb, &self.unit()])
    }

    pub(crate) fn main_pid(&self) -> Option<u32> {
        let pid: u32 = match self.cfg.manager {
            ManagerKind::Systemd => output(
                &systemctl_path(),
                &["show", "-p", "MainPID", "--value", &self.unit()],
            )?
            .parse()
            .ok()?,
            ManagerKind::Command => std::fs::read_to_string(self.cfg.pid_file.as_ref()?)
                .ok()?
                .trim()
                .parse()
                .ok()?,
        };
        (pid != 0 && pid_alive(pid)).then_some(pid)
    }

    pub(crate) fn is_active(&self) -> bool {
        match self.cfg.manager {
            ManagerKind::Systemd => {
                run(&systemctl_path(), &["is-active", "--quiet", &self.unit()]).unwrap_or(false)
            }
            ManagerKind::Command => match &self.cfg.is_active {
                Some(cmd) => sh(cmd).unwrap_or(false),
                None => self.main_pid().is_some(),
            },
        }
    }

    /// The agent's last lines of output (its `log_file`, or the unit's journal), for
    /// saying why a new version failed: at most [`OUTPUT_TAIL_LINES`] lines and
    /// [`OUTPUT_TAIL_BYTES`] bytes, control characters replaced. `None` when there is
    /// nothing to read.
    pub(crate) fn output_tail(&self) -> Option<String> {
        let text = match (&self.cfg.log_file, self.cfg.manager) {
            (Some(path), _) => read_end(path, OUTPUT_TAIL_BYTES * 4)?,
            (None, ManagerKind::Systemd) => output(
                "journalctl",
                &[
                    "--unit",
                    &self.unit(),
                    "--lines",
                    &OUTPUT_TAIL_LINES.to_string(),
                    "--no-pager",
                    "--output",
                    "cat",
                ],
            )?,
            (None, ManagerKind::Command) => return None,
        };
        tail_lines(&text)
    }

    /// Whether the agent should run after an update even if it is not running now:
    /// systemd units that are enabled; command-managed agents always.
    pub(crate) fn wants_running(&self) -> bool {
        match self.cfg.manager {
            ManagerKind::Systemd => {
                run(&systemctl_path(), &["is-enabled", "--quiet", &self.unit()]).unwrap_or(false)
            }
            ManagerKind::Command => true,
        }
    }

    pub(crate) fn start(&self) -> Result<()> {
        match self.cfg.manager {
            ManagerKind::Systemd => self.systemctl("start"),
            ManagerKind::Command => self.command("start", &self.cfg.start),
        }
    }

    pub(crate) fn stop(&self) -> Result<()> {
        match self.cfg.manager {
            ManagerKind::Systemd => self.systemctl("stop"),
            ManagerKind::Command => self.command("stop", &self.cfg.stop),
        }
    }

    /// Graceful restart into the new binary (SIGHUP-style); stop + start when the
    /// command manager has no reload.
    pub(crate) fn reload(&self) -> Result<()> {
        match self.cfg.manager {
            ManagerKind::Systemd => self.systemctl("reload-or-restart"),
            ManagerKind::Command => match &self.cfg.reload {
                Some(_) => self.command("reload", &self.cfg.reload),
                None => {
                    self.stop()?;
                    self.start()
                }
            },
        }
    }

    /// `systemctl daemon-reload` after a unit file link changed.
    pub(crate) fn daemon_reload(&self) -> Result<()> {
        match self.cfg.manager {
            ManagerKind::Systemd => systemctl(&["daemon-reload"]),
            ManagerKind::Command => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_tail_keeps_the_last_lines_within_its_bound() {
        let many: String = (1..=30).map(|i| format!("line {i}\n\n")).collect();
        let t = tail_lines(&many).unwrap();
        assert!(t.starts_with("line 21 | ") && t.ends_with("line 30"), "{t}");
        assert_eq!(tail_lines("\n  \n"), None);
        let t = tail_lines("a\u{1b}[31mred\tb").unwrap();
        assert!(!t.chars().any(char::is_control), "{t:?}");
        let long = format!("{}é{}\npanicked: the end", "x".repeat(3000), "y".repeat(10));
        let t = tail_lines(&long).unwrap();
        assert!(t.len() <= OUTPUT_TAIL_BYTES + '…'.len_utf8(), "{}", t.len());
        assert!(
            t.starts_with('…') && t.ends_with("panicked: the end"),
            "{t}"
        );

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.out");
        std::fs::write(
            &log,
            format!("{}\nold run\nnew: cannot start\n", "z".repeat(100_000)),
        )
        .unwrap();
        let svc = Service::new(ServiceConfig {
            manager: ManagerKind::Command,
            log_file: Some(log),
            ..ServiceConfig::default()
        });
        assert!(
            svc.output_tail()
                .unwrap()
                .ends_with("old run | new: cannot start")
        );
        let none = Service::new(ServiceConfig {
            manager: ManagerKind::Command,
            ..ServiceConfig::default()
        });
        assert_eq!(none.output_tail(), None);
    }

    #[test]
    fn config_validation() {
        let ok: ServiceConfig = serde_yaml_ng::from_str(
            "manager: command\nname: a\nstart: s\nstop: t\npid_file: /run/a.pid\nhealth_timeout: 0.5\n",
        )
        .unwrap();
        assert!(ok.validate().is_ok());
        assert_eq!(ok.stable_ticks, 5);
        let sd: ServiceConfig = serde_yaml_ng::from_str("name: teleport\n").unwrap();
        assert_eq!(sd.manager, ManagerKind::Systemd);
        assert!(sd.validate().is_ok());
        let cases = [
            ("manager: command\nname: a\nstop: t\npid_file: p\n", "start"),
            ("manager: command\nname: a\nstart: s\nstop: t\n", "pid_file"),
            ("name: a\nhealth_timeout: 0\n", "positive"),
            ("manager: systemd\n", "name"),
            ("name: a\nstable_ticks: 0\n", "stable_ticks"),
        ];
        for (yaml, want) in cases {
            let cfg: ServiceConfig = serde_yaml_ng::from_str(yaml).unwrap();
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{yaml}: {err}");
        }
        assert!(serde_yaml_ng::from_str::<ServiceConfig>("name: a\ntypo: 1\n").is_err());
    }

    /// Durations become `Duration::from_secs_f64`, which panics on huge or negative
    /// values: such a config is refused when it is loaded instead.
    #[test]
    fn durations_out_of_range_are_refused() {
        for yaml in [
            "name: a\nhealth_timeout: 1e300\n",
            "name: a\nhealth_interval: 1e300\n",
            "name: a\nbackup_max_age_hours: -1\n",
            "name: a\nbackup_max_age_hours: 1e300\n",
            "name: a\nbackup_max_age_hours: .nan\n",
        ] {
            let cfg: ServiceConfig = serde_yaml_ng::from_str(yaml).unwrap();
            assert!(cfg.validate().is_err(), "{yaml}");
        }
        let ok: ServiceConfig =
            serde_yaml_ng::from_str("name: a\nhealth_timeout: 3600\nbackup_max_age_hours: 0\n")
                .unwrap();
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn pid_liveness() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }
}
