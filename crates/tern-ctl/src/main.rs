//! ternctl: the admin CLI over ternd's API, and the offline planner that runs the
//! same pure core with no server.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

mod api;
mod global;
mod plan;
mod replay;
mod text;

#[derive(Parser)]
#[command(
    name = "ternctl",
    version,
    about = "Tern's admin CLI and offline rollout planner"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    global: global::Global,
}

#[derive(Subcommand)]
enum Command {
    /// Run the rollout logic offline on files: what one reconcile, a find or a manual
    /// transition would produce.
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    #[command(flatten)]
    Api(api::ApiCommand),
    /// The updater's own rollout (docs/updater.md): the `agents` commands (status,
    /// new-rollout, suspend, freeze, rollback…) for the `updater` product of the same
    /// ternd (`--product updater agents …`), or, with --updater-server, without a
    /// product against the second ternd of the older two-ternd setup.
    Updater {
        /// The URL of a second ternd serving the updater's rollout as its agent (the
        /// two-ternd setup); without it, the `updater` product of --server.
        #[arg(long, env = "TERN_UPDATER_SERVER", value_name = "URL")]
        updater_server: Option<String>,
        #[command(flatten)]
        agents: api::AgentsArgs,
    },
    /// Print the shell completion script (see docs/cli.md), e.g.
    /// `ternctl completion bash > /etc/bash_completion.d/ternctl`.
    Completion(tern_cli::CompletionArgs),
    /// Write ternctl's man pages, one per command, into DIR (created if missing), e.g.
    /// `ternctl man /usr/local/share/man/man1` then `man ternctl-agents-status`.
    Man {
        /// The directory the pages are written to (created if missing).
        #[arg(value_name = "DIR")]
        dir: std::path::PathBuf,
    },
}

/// `ternctl updater …`: the `agents` commands for the updater's rollout, on the same
/// ternd as the `updater` product, or on a second ternd (`--updater-server`) as its
/// agent. A `--product` naming another product contradicts it.
fn updater(
    updater_server: Option<String>,
    agents: api::AgentsArgs,
    global: global::Global,
) -> anyhow::Result<ExitCode> {
    if global
        .products
        .iter()
        .any(|p| p != tern_core::product::UPDATER)
    {
        anyhow::bail!(
            "`ternctl updater` is `ternctl --product updater agents`: drop --product {}",
            global.products.join(" --product ")
        );
    }
    let global = match updater_server {
        // The second ternd serves the updater's releases as its agent: no product is
        // named (TERN_PRODUCT included), as a ternd that predates products expects.
        Some(server) => global::Global {
            server,
            products: Vec::new(),
            product_env: false,
            ..global
        },
        None => global::Global {
            products: vec![tern_core::product::UPDATER.to_string()],
            ..global
        },
    };
    api::run(api::ApiCommand::Agents(agents), &global)
}

/// Exit status of a program whose reader went away (128 + SIGPIPE), as shells report.
const EXIT_BROKEN_PIPE: i32 = 141;

/// `ternctl … | head` closes ternctl's stdout early; printing then fails with a broken
/// pipe. That is the reader's choice, not an error of ternctl's: exit quietly, as
/// tools killed by SIGPIPE do, instead of printing a panic.
fn exit_quietly_on_broken_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        report(info);
    }));
}

fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(cmd) => plan::run(cmd, cli.global.output),
        Command::Api(cmd) => api::run(cmd, &cli.global),
        Command::Updater {
            updater_server,
            agents,
        } => updater(updater_server, agents, cli.global),
        Command::Completion(a) => tern_cli::print_completion(Cli::command(), a.shell)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::Man { dir } => tern_cli::write_man_pages(Cli::command(), &dir)
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| anyhow::anyhow!("writing man pages to {}: {e}", dir.display())),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument of `cmd` and its subcommands without a help text, as
    /// `path: --name`; clap's own help and version flags aside.
    fn missing_help(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() {
                out.push(format!("{path}: {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            missing_help(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_and_argument_has_a_help_text() {
        let mut cmd = Cli::command();
        // Global options reach the subcommands when the tree is built.
        cmd.build();
        let mut missing = Vec::new();
        missing_help(&cmd, "ternctl", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
