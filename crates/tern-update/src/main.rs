//! The `tern-update` binary: argument parsing and exit codes (0 success or nothing to
//! do, 1 failure, 2 usage). Everything else is in the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tern_update::commands::{self, EnableArgs, Report};
use tern_update::http::Client;
use tern_update::layout::{self, Layout};
use tern_update::update::Ctx;
use tern_update::{log, reexec, setup};

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
    /// Where executables are linked [default: /usr/local/bin, or <install-dir>/<suffix>/bin
    /// outside the default namespace].
    #[arg(long, global = true)]
    link_dir: Option<PathBuf>,
    /// Where the agent's unit file is linked.
    #[arg(long, global = true, default_value = "/usr/local/lib/systemd/system")]
    unit_dir: PathBuf,
    /// Where `setup` writes the updater's units and the agent's drop-in.
    #[arg(long, global = true, default_value = "/etc/systemd/system")]
    systemd_dir: PathBuf,
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Allow plain http and unverified TLS certificates (tests, labs).
    #[arg(long, global = true)]
    insecure: bool,
    /// Trust exactly the CA certificates of this PEM file instead of the public ones
    /// (a ternd or artifact server behind a private CA).
    #[arg(long, global = true, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// Timeout of each HTTP request, in seconds.
    #[arg(long, global = true, default_value_t = 300)]
    http_timeout: u64,
    /// The host name heartbeats report [default: the kernel's node name] (containers,
    /// several hosts on one machine).
    #[arg(long, global = true, env = "TERN_UPDATE_HOSTNAME")]
    hostname: Option<String>,
    /// The host id heartbeats report [default: /etc/machine-id].
    #[arg(long, global = true, env = "TERN_UPDATE_HOST_ID")]
    host_id: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Enroll this host: save the server and group, install the version it serves.
    Enable {
        #[arg(long)]
        server: String,
        #[arg(long)]
        group: Option<String>,
        /// Base URL of the artifacts, used with the default template.
        #[arg(long, conflicts_with = "url_template")]
        base_url: Option<String>,
        /// Artifact URL template ({{.Version}} {{.OS}} {{.Arch}} {{.Edition}} {{.BaseURL}}).
        #[arg(long)]
        url_template: Option<String>,
        /// Install this version instead of the server's.
        #[arg(long)]
        force_version: Option<String>,
        /// Service manager config (YAML); default: systemd with the version's unit file.
        #[arg(long)]
        service_config: Option<PathBuf>,
        /// File holding the join token sent with heartbeats.
        #[arg(long)]
        join_token_file: Option<PathBuf>,
        /// Replace links and files in the link dir that tern-update does not manage.
        #[arg(long)]
        overwrite: bool,
        /// Versions kept installed: 2 = active + backup, 1 = active only (small disks).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
        keep: Option<u32>,
    },
    /// Stop `update` from changing the version.
    Disable,
    /// Keep the current version (or install and keep --force-version).
    Pin {
        #[arg(long)]
        force_version: Option<String>,
    },
    /// Follow the server again.
    Unpin,
    /// Update to the server's version (run by the timer).
    Update {
        /// Act now: no jitter, even outside the group's window.
        #[arg(long)]
        now: bool,
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
    /// Link the package install in <install-dir>/system when no managed version is active.
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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    log::init(match cli.log_format {
        LogFormat::Text => log::Format::Text,
        LogFormat::Json => log::Format::Json,
    });
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            log::error(chain(&e));
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let layout = layout_of(&cli)?;
    let current_exe = std::env::current_exe().context("current executable")?;
    if !matches!(cli.command, Cmd::Setup { .. })
        && let Some(code) = run_active_updater(&layout, &current_exe)
    {
        return Ok(code);
    }
    let transport = transport_flags(&cli);
    let ctx = context_of(&cli, layout)?;
    execute(&ctx, cli.command, current_exe, &transport)?;
    Ok(ExitCode::SUCCESS)
}

/// Where things live, from the flags (relative paths made absolute).
fn layout_of(cli: &Cli) -> anyhow::Result<Layout> {
    layout::validate_suffix(&cli.install_suffix)?;
    let install_dir = std::path::absolute(&cli.install_dir).context("--install-dir")?;
    let link_dir = match &cli.link_dir {
        Some(d) => std::path::absolute(d).context("--link-dir")?,
        None if cli.install_suffix == "default" => PathBuf::from("/usr/local/bin"),
        None => install_dir.join(&cli.install_suffix).join("bin"),
    };
    Ok(Layout {
        install_dir,
        suffix: cli.install_suffix.clone(),
        link_dir,
        unit_dir: std::path::absolute(&cli.unit_dir).context("--unit-dir")?,
        systemd_dir: std::path::absolute(&cli.systemd_dir).context("--systemd-dir")?,
    })
}

/// Hands the command to the active version's updater when it has another one; its
/// exit code when it handled the command.
fn run_active_updater(layout: &Layout, current_exe: &Path) -> Option<ExitCode> {
    let exe = reexec::candidate(layout, current_exe)?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let code = reexec::delegate(&exe, &args)?;
    Some(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// What the timer's runs need to reach the server as this invocation does.
fn transport_flags(cli: &Cli) -> Vec<String> {
    let mut transport: Vec<String> = Vec::new();
    if cli.insecure {
        transport.push("--insecure".into());
    }
    if let Some(ca) = &cli.ca_cert {
        transport.push("--ca-cert".into());
        transport.push(
            std::path::absolute(ca)
                .unwrap_or_else(|_| ca.clone())
                .display()
                .to_string(),
        );
    }
    if cli.http_timeout != 300 {
        transport.push(format!("--http-timeout={}", cli.http_timeout));
    }
    if matches!(cli.log_format, LogFormat::Json) {
        transport.push("--log-format=json".into());
    }
    for (flag, value) in [("--hostname", &cli.hostname), ("--host-id", &cli.host_id)] {
        if let Some(v) = value {
            transport.push(format!("{flag}={v}"));
        }
    }
    transport
}

fn context_of(cli: &Cli, layout: Layout) -> anyhow::Result<Ctx> {
    let roots = cli
        .ca_cert
        .as_deref()
        .map(tern_update::http::roots_from_pem)
        .transpose()?;
    Ok(Ctx {
        layout,
        http: Client::new(
            cli.insecure,
            Duration::from_secs(cli.http_timeout.max(1)),
            roots,
        ),
        overwrite: matches!(
            cli.command,
            Cmd::Enable {
                overwrite: true,
                ..
            }
        ),
        hostname: cli.hostname.clone(),
        host_id: cli.host_id.clone(),
    })
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
            group,
            base_url,
            url_template,
            force_version,
            service_config,
            join_token_file,
            overwrite: _,
            keep,
        } => commands::enable(
            ctx,
            EnableArgs {
                server,
                group,
                base_url,
                url_template,
                force_version,
                service_config,
                join_token_file,
                keep,
            },
        )?,
        Cmd::Disable => commands::disable(ctx)?,
        Cmd::Pin { force_version } => commands::pin(ctx, force_version)?,
        Cmd::Unpin => commands::unpin(ctx)?,
        Cmd::Update { now } => update(ctx, now)?,
        Cmd::Heartbeat => match commands::heartbeat(ctx)? {
            Report::Refused(why) => anyhow::bail!(why),
            sent => sent,
        },
        Cmd::Status { output } => return print_status(ctx, output),
        Cmd::Uninstall { force } => commands::uninstall(ctx, force)?,
        Cmd::LinkPackage => commands::link_package(ctx)?,
        Cmd::UnlinkPackage => commands::unlink_package(ctx)?,
        Cmd::Setup {
            dry_run,
            agent_unit,
        } => return print_setup(ctx, current_exe, agent_unit.as_deref(), transport, dry_run),
    };
    match report {
        Report::Done(msg) => log::info(&msg),
        Report::Refused(msg) => log::warn(&msg),
    }
    Ok(())
}

fn update(ctx: &Ctx, now: bool) -> anyhow::Result<Report> {
    let report = commands::update(ctx, now)?;
    // The timer's run is not an error when the operator disabled or pinned
    // updates; an explicit `update --now` that cannot act is.
    if let (Report::Refused(why), true) = (&report, now) {
        anyhow::bail!("{why}");
    }
    Ok(report)
}

fn print_status(ctx: &Ctx, output: OutputFormat) -> anyhow::Result<()> {
    let view = commands::status(ctx)?;
    let text = match output {
        OutputFormat::Yaml => serde_yaml_ng::to_string(&view)?,
        OutputFormat::Json => serde_json::to_string_pretty(&view)? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// `setup` writes units that run the linked updater when there is one, else this binary.
fn print_setup(
    ctx: &Ctx,
    current_exe: PathBuf,
    agent_unit: Option<&str>,
    transport: &[String],
    dry_run: bool,
) -> anyhow::Result<()> {
    let exe = ctx.layout.link_dir.join("tern-update");
    let exe = if exe.exists() { exe } else { current_exe };
    print!(
        "{}",
        setup::run(
            &ctx.layout,
            &exe.to_string_lossy(),
            agent_unit,
            transport,
            dry_run
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
