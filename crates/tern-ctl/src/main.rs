//! ternctl: the admin CLI over ternd's API, and the offline planner that runs the
//! same pure core with no server.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod api;
mod global;
mod plan;
mod replay;

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
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(cmd) => plan::run(cmd, cli.global.output),
        Command::Api(cmd) => api::run(cmd, &cli.global),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
