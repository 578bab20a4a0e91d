//! The `tern-update` binary: argument parsing and exit codes (0 success or nothing to
//! do, 1 failure, 2 usage; docs/cli.md). Everything else is in the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory as _, Parser, Subcommand, ValueEnum};
use tern_cli::LogFormat;
use tern_update::{
    Client, Ctx, EnableArgs, Layout, Report, Settings, log_error, log_info, log_warn,
};

#[derive(Parser, Debug)]
#[command(
    name = "tern-update",
    version,
    about = "Tern host updater: installs, switches, verifies and rolls back the agent"
)]
struct Cli {
    /// Root of the managed installs.
    #[arg(long, global = true, default_value = "/opt/tern")]
    install_dir: PathBuf,
    /// Namespace: several independent installs can live side by side.
    #[arg(long, global = true, default_value = "default")]
    install_suffix: String,
    /// Where executables are linked [default: what `enable` saved, else /usr/local/bin,
    /// or <install-dir>/<suffix>/bin outside the default namespace].
    #[arg(long, global = true)]
    link_dir: Option<PathBuf>,
    /// Where the agent's unit file is linked [default: what `enable` saved, else
    /// /usr/local/lib/systemd/system].
    #[arg(long, global = true)]
    unit_dir: Option<PathBuf>,
    /// Where `setup` writes the updater's units and the agent's drop-in [default: what
    /// `enable` saved, else /etc/systemd/system].
    #[arg(long, global = true)]
    systemd_dir: Option<PathBuf>,
    /// How logs are written to stderr: text lines, or JSON objects one per line.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "TERN_UPDATE_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    /// Allow plain http and unverified TLS certificates (tests, labs); `enable` saves
    /// it, `--insecure=false` turns it off again.
    #[arg(
        long,
        global = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    insecure: Option<bool>,
    /// Trust exactly the CA certificates of this PEM file instead of the public ones
    /// (a ternd or artifact server behind a private CA).
    #[arg(long, global = true, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// Timeout of each HTTP request, in seconds [default: what `enable` saved, else 300].
    #[arg(long, global = true)]
    http_timeout: Option<u64>,
    /// The host name heartbeats report [default: what `enable` saved, else the kernel's
    /// node name] (containers, several hosts on one machine).
    #[arg(long, global = true, env = "TERN_UPDATE_HOSTNAME")]
    hostname: Option<String>,
    /// The host id heartbeats report [default: what `enable` saved, else
    /// /etc/machine-id].
    #[arg(long, global = true, env = "TERN_UPDATE_HOST_ID")]
    host_id: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

/// `--package-manager`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum PackageManager {
    /// apt-cache madison, apt-get install NAME=VERSION, dpkg-query (Debian, Ubuntu).
    Apt,
    /// yum install|downgrade NAME-VERSION, rpm -q (RHEL and its kin).
    Yum,
}

impl From<PackageManager> for tern_update::Manager {
    fn from(m: PackageManager) -> Self {
        match m {
            PackageManager::Apt => Self::Apt,
            PackageManager::Yum => Self::Yum,
        }
    }
}

/// `enable --installer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum InstallerOpt {
    /// Run the local scripts version directives send (the target in env vars only).
    LocalScript,
    /// Only the host's own installer (tern-update, or package in package mode).
    None,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Yaml,
    Json,
}

// One value per run, parsed once: the size of `Enable`'s flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Cmd {
    /// Enroll this host: save the server and group (or the channel), install the
    /// version it serves.
    Enable {
        /// ternd's base URL: find, heartbeats and (with --channel) the maintenance
        /// schedule.
        #[arg(long, required_unless_present_any = ["channel", "proxy"], default_value = "")]
        server: String,
        /// teleport-update's name for --server: ternd's address, `https://` added when
        /// it names no scheme (Teleport's proxy is a host[:port]). Unlike
        /// teleport-update, a missing --proxy is not read from teleport.yaml.
        #[arg(long, value_name = "HOST[:PORT]|URL", conflicts_with = "server")]
        proxy: Option<String>,
        /// Follow a channel instead of ternd's rollout: a base URL answering `version`
        /// and `critical` in plain text (ternd's `/v1/channels/NAME`, or any server).
        /// Updates happen in the group's maintenance window (from --server), at once
        /// when `critical` is `yes`, and outside the window when the agent is down.
        #[arg(long)]
        channel: Option<String>,
        /// The rollout group this host belongs to (a group name of the
        /// autoupdate_config, e.g. staging): it updates in that group's windows. An
        /// unknown group is served by the config's last group (ternd flags it).
        #[arg(long)]
        group: Option<String>,
        /// Base URL of the artifacts, used with the default template.
        #[arg(long, conflicts_with = "url_template")]
        base_url: Option<String>,
        /// Artifact URL template ({{.Version}} {{.OS}} {{.Arch}} {{.Edition}} {{.BaseURL}};
        /// spaces inside the braces allowed). `--template` is teleport-update's name for
        /// it; the checksum is the URL + `.sha256` in both.
        #[arg(long, visible_alias = "template")]
        url_template: Option<String>,
        /// Install this version instead of the server's.
        #[arg(long)]
        force_version: Option<String>,
        /// Service manager config (YAML); default: systemd with the version's unit file.
        #[arg(long)]
        service_config: Option<PathBuf>,
        /// File holding a join token (`ternctl tokens create --role join`): `enable`
        /// exchanges it once for this host's own credential (kept as `host.token` in
        /// the install dir), which every heartbeat then sends; the join token itself is
        /// never sent again.
        #[arg(long)]
        join_token_file: Option<PathBuf>,
        /// Replace links and files in the link dir that tern-update does not manage.
        #[arg(long)]
        overwrite: bool,
        /// Versions kept installed: 2 = active + backup, 1 = active only (small disks).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
        keep: Option<u32>,
        /// Package mode: the agent is this OS package, installed and rolled back through
        /// --package-manager at the version ternd or the channel names, instead of
        /// tarballs. Needs --service-config. Later `enable`s keep it.
        #[arg(
            long,
            value_name = "NAME",
            requires = "package_manager",
            conflicts_with_all = ["base_url", "url_template"]
        )]
        package: Option<String>,
        /// The package manager of --package.
        #[arg(long, value_enum, requires = "package")]
        package_manager: Option<PackageManager>,
        /// A label of this host, KEY=VALUE (repeatable), sent in heartbeats for version
        /// directives to select on. Given, it replaces the saved labels; left out, they
        /// are kept.
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// Whether the agent's build is a FIPS build (directives never cross it).
        #[arg(long, value_name = "BOOL")]
        fips: Option<bool>,
        /// An installer type this host accepts from version directives besides its own
        /// (repeatable): `local-script` runs the operator's script that ternd sends;
        /// `none` accepts only the host's own. Given, it replaces the saved choice;
        /// left out, it is kept.
        #[arg(long = "installer", value_enum, value_name = "TYPE")]
        installers: Vec<InstallerOpt>,
        /// Pin this TUF root.json (from the release keys' owners, out of band): from now
        /// on every install is checked against the signed release metadata and nothing
        /// unsigned is installed. Later `enable`s keep it.
        #[arg(long, value_name = "ROOT_JSON")]
        trust_root: Option<PathBuf>,
        /// Where the signed release metadata is (the directory of timestamp.json);
        /// default: <base-url or server>/tuf/metadata/.
        #[arg(long, value_name = "URL")]
        trust_url: Option<String>,
        /// This namespace manages tern-update itself (only with --install-suffix
        /// updater): it installs the updater releases its ternd names, each checked with
        /// `tern-update self-check` before and after its link is switched; every command
        /// of every namespace then runs the managed release. Later `enable`s keep it.
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
        self_update: Option<bool>,
        /// The product this namespace installs, as its ternd names it (one ternd serves
        /// every product of a host). Default: the agent; with --self-update against the
        /// agent namespace's ternd, `updater`. Later `enable`s keep it.
        #[arg(long, value_name = "NAME")]
        product: Option<String>,
        /// With --self-update: how long one command handed to an updater release may
        /// run before the updater the host was installed with counts it as hung and
        /// goes back to the previous release (default 30m).
        #[arg(long, value_name = "DURATION", value_parser = parse_release_timeout)]
        release_timeout: Option<std::time::Duration>,
    },
    /// Stop `update` from changing the version.
    Disable,
    /// Keep the current version (or install and keep --force-version).
    Pin {
        #[arg(long)]
        force_version: Option<String>,
        /// Lift the pin by itself at this time: a date (2026-12-01, its start in UTC) or
        /// an RFC 3339 instant; the next `update` after it follows the server again.
        #[arg(long)]
        until: Option<String>,
    },
    /// Follow the server again.
    Unpin,
    /// teleport-update's `use-version VERSION --disable-automatic-updates`: install
    /// VERSION and keep it (`pin --force-version VERSION`). Refused without the flag
    /// while the host follows its server. Unlike teleport-update, which turns automatic
    /// updates off, the host stays enrolled and reports itself pinned; `unpin` (or
    /// `enable`) follows the server again.
    UseVersion {
        /// The version to install and keep.
        #[arg(value_name = "VERSION")]
        version: String,
        /// Leave automatic updates: required while the host follows its server.
        #[arg(long)]
        disable_automatic_updates: bool,
    },
    /// Update to the server's version (run by the timer).
    Update {
        /// Act now: no jitter, even outside the group's window.
        #[arg(long)]
        now: bool,
        /// Run by `watch` after ternd released its long poll on a change: ternd spread
        /// the hosts it released, so no jitter of this run's own.
        #[arg(long, hide = true, conflicts_with = "now")]
        released: bool,
    },
    /// Between the timer's runs, long-poll ternd's find and run `update` as soon as the
    /// answer says to update (run by the `-watch` service of `setup --watch`; the timer
    /// stays). Runs until stopped.
    Watch {
        /// Seconds ternd may hold each request (it caps them at its
        /// --long-poll-max-hold).
        #[arg(long, default_value_t = 50, value_name = "SECONDS",
              value_parser = clap::value_parser!(u64).range(1..=tern_update::MAX_HOLD_SECONDS))]
        hold: u64,
    },
    /// Tell the server what this host runs now, without updating (every run ends with
    /// one).
    Heartbeat,
    /// Show the spec, the status, and what the server says now.
    Status {
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
        output: OutputFormat,
    },
    /// Remove the managed install (back to the package, or everything with --force).
    Uninstall {
        #[arg(long)]
        force: bool,
    },
    /// Link the package install in <install-dir>/system when no managed version is active
    /// (`link` is teleport-update's name for it).
    #[command(visible_alias = "link")]
    LinkPackage,
    /// Remove the package install's links.
    UnlinkPackage,
    /// Install the updater's systemd service + timer and the agent's drop-in.
    Setup {
        #[arg(long)]
        dry_run: bool,
        /// The agent's unit name for the drop-in.
        #[arg(long)]
        agent_unit: Option<String>,
        /// Timers shaped by the maintenance schedule instead of a run every minute: the
        /// updater's timer every 30 minutes, restricted to the window by `schedule
        /// sync` while the agent is healthy; a check timer that lifts the restriction
        /// for a critical channel update; the agent's unit lifts it when it stops.
        #[arg(long)]
        schedule_timers: bool,
        /// Also install and start the watcher (`tern-update watch` as a service of its
        /// own): it long-polls ternd and updates as soon as the answer says so, instead
        /// of at the timer's next run. The timer stays.
        #[arg(long)]
        watch: bool,
    },
    /// The updater timer's schedule override (with `setup --schedule-timers`).
    Schedule {
        #[command(subcommand)]
        action: ScheduleCmd,
    },
    /// Check that this binary runs and reads this host's state; prints `tern-update
    /// VERSION self-check ok` and exits 0. What a new updater release must answer before
    /// its link is switched (`--self-update`).
    SelfCheck,
    /// Print the shell completion script (see docs/cli.md), e.g.
    /// `tern-update completion bash > /etc/bash_completion.d/tern-update`.
    Completion(tern_cli::CompletionArgs),
}

#[derive(Subcommand, Debug, Clone, Copy)]
enum ScheduleCmd {
    /// Fetch the group's window from the server and restrict the timer to it (while
    /// the agent is healthy; an unhealthy agent clears the restriction instead).
    Sync,
    /// Remove the restriction: the timer fires every 30 minutes again.
    Clear,
    /// Remove the restriction when the channel has a critical update this host lacks.
    Check,
}

fn main() -> ExitCode {
    // Runs as root: whatever umask it inherits, nothing it (or a library, or a command
    // it runs) creates is group- or world-writable. The library also sets every mode
    // it relies on explicitly; this covers what it does not create itself.
    let inherited = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    rustix::process::umask(inherited | rustix::fs::Mode::from_raw_mode(0o022));
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    // Answered from the definitions alone, before anything else: it needs no install
    // dir, settings or root, and is never handed to the active version's updater (an
    // older one would not know the command).
    if let Cmd::Completion(a) = &cli.command {
        return match tern_cli::print_completion(Cli::command(), a.shell) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tern-update: error: printing the completion script: {e}");
                ExitCode::from(1)
            }
        };
    }
    tern_update::init_log(match cli.log_format {
        LogFormat::Text => tern_update::LogFormat::Text,
        LogFormat::Json => tern_update::LogFormat::Json,
    });
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            log_error(chain(&e));
            ExitCode::from(1)
        }
    }
}

/// The error and its causes, like `{:#}`, but a cause is left out when the text before
/// it already says it: the library's messages include their `#[source]`, so that they
/// read whole wherever they are shown alone.
fn chain(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// `--release-timeout`: a Go-style duration (`90s`, `30m`), at least a second.
fn parse_release_timeout(s: &str) -> Result<std::time::Duration, String> {
    tern_core::duration::GoDuration::parse_positive_std(s)
}

/// Default timeout of each HTTP request.
const HTTP_TIMEOUT_SECONDS: u64 = 300;

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    tern_update::validate_suffix(&cli.install_suffix)?;
    let install_dir = std::path::absolute(&cli.install_dir).context("--install-dir")?;
    let enable = matches!(cli.command, Cmd::Enable { .. });
    let given = given_settings(&cli)?;
    let saved = tern_update::saved_settings(
        &tern_update::update_yaml_in(&install_dir, &cli.install_suffix),
        enable,
    )?;
    let resolved = tern_update::resolve_settings(&given, &saved, enable)?;
    let layout = Layout::new(install_dir, &cli.install_suffix, &resolved);
    let current_exe = std::env::current_exe().context("current executable")?;
    // `watch` runs for as long as the host does: the `update`s it starts are the ones
    // handed to the active version's updater.
    // `self-check` checks this binary, whichever it is: never handed on.
    tern_update::identify_release(&layout.install_dir, &current_exe);
    if !matches!(
        cli.command,
        Cmd::Setup { .. } | Cmd::Watch { .. } | Cmd::SelfCheck
    ) && let Some(code) = run_active_updater(
        &layout,
        &current_exe,
        &Settings::missing_from(&saved, &given),
        if matches!(cli.command, Cmd::Update { .. } | Cmd::Heartbeat) {
            tern_update::ReexecDuty::Heartbeats
        } else {
            tern_update::ReexecDuty::Other
        },
    ) {
        return Ok(code);
    }
    let settings = layout.fill(&resolved);
    let transport = transport_flags(&settings, cli.log_format);
    let update_command = update_command(&current_exe, &layout, &settings, cli.log_format);
    let ctx = context_of(&cli, layout, settings)?;
    if let Cmd::Watch { hold } = cli.command {
        tern_update::watch(
            &ctx,
            &tern_update::WatchArgs {
                hold: Duration::from_secs(hold),
                update_command,
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    execute(&ctx, cli.command, current_exe, &transport)?;
    Ok(ExitCode::SUCCESS)
}

/// The settings given on this command line (paths made absolute).
fn given_settings(cli: &Cli) -> anyhow::Result<Settings> {
    let absolute = |p: &Option<PathBuf>, flag: &str| -> anyhow::Result<Option<PathBuf>> {
        p.as_deref()
            .map(|p| std::path::absolute(p).with_context(|| flag.to_string()))
            .transpose()
    };
    Ok(Settings {
        link_dir: absolute(&cli.link_dir, "--link-dir")?,
        unit_dir: absolute(&cli.unit_dir, "--unit-dir")?,
        systemd_dir: absolute(&cli.systemd_dir, "--systemd-dir")?,
        hostname: cli.hostname.clone(),
        host_id: cli.host_id.clone(),
        ca_cert: absolute(&cli.ca_cert, "--ca-cert")?,
        insecure: cli.insecure,
        http_timeout: cli.http_timeout,
    })
}

/// Hands the command to the active version's updater when it has another one; its
/// exit code when it handled the command. It is told the saved settings this command
/// line lacks: an older updater does not read them from update.yaml.
fn run_active_updater(
    layout: &Layout,
    current_exe: &Path,
    from_update_yaml: &Settings,
    duty: tern_update::ReexecDuty,
) -> Option<ExitCode> {
    let exe = tern_update::reexec_candidate(layout, current_exe)?;
    let mut args: Vec<std::ffi::OsString> = from_update_yaml
        .flags()
        .into_iter()
        .map(Into::into)
        .collect();
    args.extend(std::env::args_os().skip(1));
    let code = tern_update::reexec_delegate(&exe, &args, layout, duty)?;
    Some(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// What the timer's runs need to reach the server as this invocation does (the link
/// and unit dirs are written by `setup` itself).
fn transport_flags(settings: &Settings, log_format: LogFormat) -> Vec<String> {
    let mut transport = Settings {
        link_dir: None,
        unit_dir: None,
        systemd_dir: None,
        ..settings.clone()
    }
    .flags();
    if matches!(log_format, LogFormat::Json) {
        transport.push("--log-format=json".into());
    }
    transport
}

/// The command line of the `update` the watcher runs: this binary with everything
/// this invocation was given or resolved, as the timer's unit gives it.
fn update_command(
    exe: &Path,
    layout: &Layout,
    settings: &Settings,
    log_format: LogFormat,
) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec![
        exe.into(),
        "--install-dir".into(),
        layout.install_dir.clone().into(),
        "--install-suffix".into(),
        layout.suffix.clone().into(),
    ];
    argv.extend(settings.flags().into_iter().map(Into::into));
    if matches!(log_format, LogFormat::Json) {
        argv.push("--log-format=json".into());
    }
    argv
}

fn context_of(cli: &Cli, layout: Layout, settings: Settings) -> anyhow::Result<Ctx> {
    let roots = settings
        .ca_cert
        .as_deref()
        .map(tern_client::roots_from_pem)
        .transpose()?;
    let timeout = settings.http_timeout.unwrap_or(HTTP_TIMEOUT_SECONDS).max(1);
    Ok(Ctx {
        layout,
        http: Client::for_host(
            // aws-lc-rs: the crypto library TUF (tough) links already; one, not two.
            std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            settings.insecure.unwrap_or(false),
            Duration::from_secs(timeout),
            roots,
        ),
        overwrite: matches!(
            cli.command,
            Cmd::Enable {
                overwrite: true,
                ..
            }
        ),
        settings,
    })
}

/// `KEY=VALUE`, within the bounds ternd accepts in heartbeats.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    let hb = tern_core::wire::Heartbeat {
        labels: [(k.to_string(), v.to_string())].into(),
        ..Default::default()
    };
    hb.check_facts()?;
    Ok((k.to_string(), v.to_string()))
}

/// Runs the subcommand: `status` and `setup` print their answer, the others log it.
fn execute(
    ctx: &Ctx,
    command: Cmd,
    current_exe: PathBuf,
    transport: &[String],
) -> anyhow::Result<()> {
    let report = match command {
        Cmd::Enable {
            server,
            proxy,
            group,
            base_url,
            url_template,
            force_version,
            service_config,
            join_token_file,
            overwrite: _,
            keep,
            channel,
            package,
            package_manager,
            labels,
            fips,
            installers,
            trust_root,
            trust_url,
            self_update,
            product,
            release_timeout,
        } => tern_update::enable(
            ctx,
            EnableArgs {
                server: proxy.as_deref().map_or(server, proxy_url),
                group,
                base_url,
                url_template,
                force_version,
                service_config,
                join_token_file,
                keep,
                channel,
                package: package
                    .zip(package_manager)
                    .map(|(name, m)| tern_update::PackageSpec {
                        name,
                        manager: m.into(),
                    }),
                labels: (!labels.is_empty()).then(|| labels.into_iter().collect()),
                fips,
                installers: (!installers.is_empty()).then(|| {
                    let mut opted: Vec<String> = installers
                        .iter()
                        .filter(|i| **i == InstallerOpt::LocalScript)
                        .map(|_| "local-script".to_string())
                        .collect();
                    opted.dedup();
                    opted
                }),
                trust_root,
                trust_url,
                self_update,
                product,
                release_timeout,
            },
        )?,
        Cmd::Disable => tern_update::disable(ctx)?,
        Cmd::Pin {
            force_version,
            until,
        } => tern_update::pin(ctx, force_version, until)?,
        Cmd::Unpin => tern_update::unpin(ctx)?,
        Cmd::UseVersion {
            version,
            disable_automatic_updates,
        } => {
            if !disable_automatic_updates && follows_its_server(ctx)? {
                anyhow::bail!(
                    "this host is enrolled in automatic updates: add --disable-automatic-updates to install {version} and keep it (tern-update pin --force-version {version}; `tern-update unpin` follows the server again)"
                );
            }
            tern_update::pin(ctx, Some(version), None)?
        }
        Cmd::Update { now, released } => update(ctx, now, released)?,
        // run answers it before execute.
        Cmd::Watch { .. } => return Ok(()),
        Cmd::Heartbeat => match tern_update::heartbeat(ctx)? {
            Report::Refused(why) => anyhow::bail!(why),
            sent => sent,
        },
        Cmd::Status { output } => return print_status(ctx, output),
        Cmd::Uninstall { force } => tern_update::uninstall(ctx, force)?,
        Cmd::LinkPackage => tern_update::link_package(ctx)?,
        Cmd::UnlinkPackage => tern_update::unlink_package(ctx)?,
        Cmd::Schedule { action } => tern_update::schedule(
            ctx,
            match action {
                ScheduleCmd::Sync => tern_update::ScheduleAction::Sync,
                ScheduleCmd::Clear => tern_update::ScheduleAction::Clear,
                ScheduleCmd::Check => tern_update::ScheduleAction::Check,
            },
        )?,
        // main answers it before anything is read.
        Cmd::Completion(_) => return Ok(()),
        Cmd::SelfCheck => {
            println!("{}", tern_update::self_check(&ctx.layout)?);
            return Ok(());
        }
        Cmd::Setup {
            dry_run,
            agent_unit,
            schedule_timers,
            watch,
        } => {
            return print_setup(
                ctx,
                current_exe,
                agent_unit.as_deref(),
                transport,
                SetupFlags {
                    dry_run,
                    schedule_timers,
                    watch,
                },
            );
        }
    };
    match report {
        Report::Done(msg) => log_info(&msg),
        Report::Refused(msg) => log_warn(&msg),
    }
    Ok(())
}

/// `--proxy HOST[:PORT]` as ternd's URL: `https://` unless it names its scheme.
fn proxy_url(proxy: &str) -> String {
    if proxy.contains("://") {
        proxy.to_string()
    } else {
        format!("https://{proxy}")
    }
}

/// Whether the host is enrolled and follows its server (enabled, not pinned): what
/// teleport-update's `use-version` refuses to leave without being told.
fn follows_its_server(ctx: &Ctx) -> anyhow::Result<bool> {
    let path = tern_update::update_yaml_in(&ctx.layout.install_dir, &ctx.layout.suffix);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    };
    let file = tern_update::parse_update_file(&text)?;
    Ok(file.spec.enabled && !file.spec.pinned)
}

fn update(ctx: &Ctx, now: bool, released: bool) -> anyhow::Result<Report> {
    let report = tern_update::update(ctx, now, released)?;
    // The timer's run is not an error when the operator disabled or pinned
    // updates; an explicit `update --now` that cannot act is.
    if let (Report::Refused(why), true) = (&report, now) {
        anyhow::bail!("{why}");
    }
    Ok(report)
}

fn print_status(ctx: &Ctx, output: OutputFormat) -> anyhow::Result<()> {
    let view = tern_update::status(ctx)?;
    let text = match output {
        OutputFormat::Yaml => serde_yaml_ng::to_string(&view)?,
        OutputFormat::Json => serde_json::to_string_pretty(&view)? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// `setup`'s switches.
struct SetupFlags {
    dry_run: bool,
    schedule_timers: bool,
    watch: bool,
}

/// `setup` writes units that run the linked updater when there is one, else this binary.
fn print_setup(
    ctx: &Ctx,
    current_exe: PathBuf,
    agent_unit: Option<&str>,
    transport: &[String],
    flags: SetupFlags,
) -> anyhow::Result<()> {
    let exe = ctx.layout.link_dir.join("tern-update");
    let exe = if exe.exists() { exe } else { current_exe };
    print!(
        "{}",
        tern_update::setup(
            &ctx.layout,
            &exe.to_string_lossy(),
            agent_unit,
            transport,
            flags.dry_run,
            flags.schedule_timers,
            flags.watch,
        )?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let lib = tern_update::Error::io("read /x", io());
        assert_eq!(chain(&anyhow::Error::new(lib)), "read /x: gone");
        let ctx = anyhow::Error::new(io()).context("--install-dir");
        assert_eq!(chain(&ctx), "--install-dir: gone");
    }
}
