//! The library's error type. Every message says what failed; the binary adds what the
//! host runs now. A message includes its `#[source]`, because messages are also shown
//! alone (logs, `update.yaml`, `status`); the binary leaves out causes already said.

use std::path::{Path, PathBuf};

use tern_client::StatusCode;

pub use self::artifact::TemplateProblem;
pub use self::backup::BackupUnusable;
pub use self::decide::DowngradeRefused;
pub use self::health::{HealthFailure, Pending};
pub use self::links::Conflict as LinkConflict;
pub use self::service::ConfigProblem;
pub use self::state::StateProblem;

// The problem types of each module, here so that `error` needs no other module of the
// crate (every module returns `Error`); each module re-exports its own.
mod artifact;
mod backup;
mod decide;
mod health;
mod links;
pub(crate) mod service;
pub(crate) mod state;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid --install-suffix {suffix:?}: use 1-32 characters a-z 0-9 - _, not \"system\"")]
    InvalidSuffix { suffix: String },
    #[error(
        "invalid version {version:?}: a version is 1-128 characters a-z A-Z 0-9 . - + _, not starting with '.'; nothing was installed"
    )]
    InvalidVersion { version: String },
    #[error("url template {template:?}: {problem}")]
    UrlTemplate {
        template: String,
        #[source]
        problem: TemplateProblem,
    },
    /// A call to ternd, a channel or an artifact server failed (`tern_client`).
    #[error(transparent)]
    Http(#[from] tern_client::Error),
    #[error("service config {}: {source}", path.display())]
    ServiceConfigSyntax {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("service config {}: {problem}", path.display())]
    ServiceConfigInvalid {
        path: PathBuf,
        #[source]
        problem: ConfigProblem,
    },
    #[error("enabled but no server is set: run `tern-update enable --server URL`")]
    NoServer,
    #[error("random: {0}")]
    Random(#[source] getrandom::Error),
    #[error("{}", token_refused(*status, reason.as_deref(), token_file.as_deref()))]
    TokenRefused {
        status: StatusCode,
        reason: Option<String>,
        token_file: Option<PathBuf>,
    },
    #[error("join token file {}: {problem}", path.display())]
    TokenFile { path: PathBuf, problem: String },
    #[error("the channel {url} cannot be followed: {problem}")]
    Channel { url: String, problem: String },
    #[error("{server}: the maintenance schedule cannot be used: {problem}")]
    UnusableSchedule { server: String, problem: String },
    #[error(
        "the maintenance schedule's OnCalendar value {value:?} is not one tern-update writes into a unit"
    )]
    BadCalendar { value: String },
    #[error("checksum mismatch for {url}: expected {expected}, got {actual}")]
    ChecksumMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{artifact} does not match the install instruction: {what} expected {expected}, got {got}; nothing was installed"
    )]
    InstructionMismatch {
        artifact: String,
        what: &'static str,
        expected: String,
        got: String,
    },
    /// The signed release metadata (TUF) refused the install: the artifact is not
    /// signed, the metadata is not trustworthy, or the download is not what was signed.
    #[error("{source}; nothing was installed")]
    Trust {
        #[source]
        source: tern_trust::Error,
    },
    #[error(
        "{url} does not match the signed release metadata: {what} expected {expected}, got {got}; nothing was installed"
    )]
    NotAsSigned {
        url: String,
        what: &'static str,
        expected: String,
        got: String,
    },
    #[error("--trust-url needs --trust-root: no release root is pinned on this host")]
    TrustUrlWithoutRoot,
    #[error(
        "--installer local-script cannot be used on a host with a pinned release root: a script from ternd would install what no release key signed"
    )]
    TrustWithLocalScript,
    #[error(
        "--trust-root cannot be used with --package: package mode installs what the package manager's own signatures allow"
    )]
    TrustWithPackage,
    #[error(
        "installer type {given:?} cannot be enabled: the host's own installer is always accepted; the one to opt in to is \"local-script\""
    )]
    UnknownInstallerType { given: String },
    /// A release tarball was refused or could not be unpacked (`tern_unpack`).
    #[error(transparent)]
    Unpack(#[from] tern_unpack::Error),
    #[error("not enough free space in {}: need {needed} bytes, {available} available", path.display())]
    NoSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error(
        "{} is damaged: {problem}; to repair it, run `tern-update enable --server URL …` again (it rewrites the file and finds the installed versions again), or restore the file from a backup",
        path.display()
    )]
    State {
        path: PathBuf,
        #[source]
        problem: StateProblem,
    },
    #[error("state file {}: {source}", path.display())]
    StateSerialize {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("another tern-update holds {} (timed out waiting)", .0.display())]
    Locked(PathBuf),
    #[error("service: run {program} {}: {source}", args.join(" "))]
    Spawn {
        program: String,
        args: Vec<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("service: {what} command failed: {command}")]
    CommandFailed { what: &'static str, command: String },
    #[error("service: systemctl {} failed", args.join(" "))]
    SystemctlFailed { args: Vec<String> },
    #[error(
        "setup: this host does not run systemd ({} is missing: a container, or OpenRC, runit…), and `setup` installs systemd units only; nothing written. Run `tern-update update` every minute some other way, with the flags the timer would have run it with: a cron line (`* * * * * root {command} >> /var/log/tern-update.log 2>&1` in /etc/cron.d/tern-update), or a loop under your supervisor (`while :; do {command}; sleep 60; done`). An agent not run by systemd needs `manager: command` (see the tern-update docs, \"Hosts without systemd\")",
        probe.display()
    )]
    NoSystemd {
        probe: PathBuf,
        /// `tern-update update` as the timer would run it (shell-quoted).
        command: String,
    },
    #[error("database backup: {} -> {}: {source}", from.display(), to.display())]
    Sqlite {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("database backup: {}: {source}", path.display())]
    BackupMeta {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{} has no executables to link", dir.display())]
    NoExecutables { dir: PathBuf },
    #[error("{} {conflict} (use --overwrite to replace it)", link.display())]
    LinkConflict {
        link: PathBuf,
        #[source]
        conflict: LinkConflict,
    },
    #[error(transparent)]
    DowngradeRefused(#[from] DowngradeRefused<BackupUnusable>),
    #[error("not enabled: run `tern-update enable --server URL` first")]
    NotEnabled,
    #[error("no version installed: use `pin --force-version V`")]
    NothingToPin,
    #[error("pin --{0}; nothing was pinned")]
    PinUntil(String),
    #[error("no package install in {}", dir.display())]
    NoPackage { dir: PathBuf },
    #[error(
        "no package install in {}: uninstalling would leave this host without an agent; use --force to remove it anyway",
        dir.display()
    )]
    WouldLeaveNoAgent { dir: PathBuf },
    #[error(
        "invalid package name {name:?} for {manager}: use 2-128 characters a-z 0-9 + - . (yum also A-Z _), starting with a letter or digit"
    )]
    InvalidPackageName { name: String, manager: &'static str },
    #[error("refusing version {version:?} for the package manager: {reason}; nothing was run")]
    PackageVersion { version: String, reason: String },
    #[error("package manager: cannot run {command}: {source}")]
    PackageSpawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("package manager: {command} failed with {status}{}", if output.is_empty() { String::new() } else { format!(": {output}") })]
    PackageCommand {
        command: String,
        /// `exit status N`, or how it ended otherwise.
        status: String,
        /// The last lines it wrote (stderr, else stdout), on one line.
        output: String,
    },
    #[error("package manager: {command}: {problem}")]
    PackageQuery { command: String, problem: String },
    #[error(
        "package manager: apt knows no version {version} of {name} (apt-cache madison {name} lists: {listed}){refresh}; publish it in the host's apt repository"
    )]
    PackageNotAvailable {
        name: String,
        version: String,
        listed: String,
        /// Why refreshing the lists failed, when it did.
        refresh: String,
    },
    #[error(
        "package manager: it reported success, but {command} says {installed} is installed, not {asked}"
    )]
    PackageMismatch {
        command: String,
        asked: String,
        installed: String,
    },
    #[error(
        "package mode needs --service-config: the agent's service, restarted after the package manager installs a version"
    )]
    PackageNeedsServiceConfig,
    #[error(
        "this host runs {active}, installed from a tarball in {}: package mode would leave its links and versions behind; run `tern-update uninstall` (or `uninstall --force`) first, then enable --package",
        dir.display()
    )]
    PackageModeSwitch { active: String, dir: PathBuf },
    /// The manager failed before the package database changed.
    #[error(
        "installing {target} failed: {reason}; nothing was changed: the host runs {running} (no other source or package manager is tried)"
    )]
    PackageInstallFailed {
        target: String,
        #[source]
        reason: Box<Error>,
        running: String,
    },
    /// The updater's own release (the `updater` namespace) failed its self-check: the
    /// links were not switched, or were switched back.
    #[error("the updater {version} ({}) failed its self-check: {problem}", exe.display())]
    SelfCheckFailed {
        version: String,
        exe: PathBuf,
        problem: String,
    },
    /// `enable --self-update` given what the updater's namespace cannot have.
    #[error("--self-update: {problem}")]
    SelfUpdate { problem: String },
    #[error(
        "--product: {product:?} is not a product name (1 to 63 of a-z, 0-9 and '-', starting with a letter)"
    )]
    BadProduct { product: String },
    #[error("{version} {failure}")]
    Unhealthy {
        version: String,
        #[source]
        failure: HealthFailure,
    },
    /// `outcome` says in words what the host runs after the rollback.
    #[error("update to {target} failed: {reason}; rolled back: {outcome}")]
    UpdateFailed {
        target: String,
        #[source]
        reason: Box<Error>,
        outcome: String,
    },
    /// An update that failed because of the host, not of the version: `why` says how
    /// that was told; the version is not skipped and is retried after `retry_after`.
    #[error(
        "update to {target} failed: {reason}; rolled back: {outcome}; {target} is not marked skip: {why}; environment failure {attempts} in a row: the timer's runs try again after {retry_after} (`tern-update update --now` tries now)"
    )]
    EnvironmentFailure {
        target: String,
        #[source]
        reason: Box<Error>,
        outcome: String,
        why: &'static str,
        attempts: u32,
        retry_after: jiff::Timestamp,
    },
}

/// `enable`'s refusal when ternd rejects the heartbeat's credentials.
fn token_refused(status: StatusCode, reason: Option<&str>, token_file: Option<&Path>) -> String {
    let answer = match reason {
        Some(r) => format!("{status}: {r}"),
        None => status.to_string(),
    };
    match token_file {
        Some(p) => format!(
            "ternd refused the token read from {} ({answer}): nothing was changed; put a valid agent token in it (or give another file with --join-token-file) and run enable again",
            p.display()
        ),
        None => format!(
            "ternd refused a heartbeat without a token ({answer}): nothing was changed; give an agent token with --join-token-file and run enable again"
        ),
    }
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// What kind of install failure this is, as heartbeats report it
    /// (`tern_core::wire::INSTALL_FAILURE_KINDS`).
    pub fn install_failure_kind(&self) -> &'static str {
        match self {
            Self::Trust { .. } | Self::NotAsSigned { .. } => "not_signed",
            Self::ChecksumMismatch { .. } | Self::InstructionMismatch { .. } => "digest_mismatch",
            Self::Http(e) => e.install_failure_kind(),
            Self::NoSpace { .. } | Self::Io { .. } => "disk",
            Self::Unpack(e) => e.install_failure_kind(),
            _ => "other",
        }
    }
}

/// Adds a context to an I/O result.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("{what} {}", path.display()), e))
    }
}
