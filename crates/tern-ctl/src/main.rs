//! ternctl: the admin CLI over ternd's API, and the offline planner that runs the
//! same pure core with no server.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod api;
mod events;
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(cmd) => plan::run(cmd),
        Command::Api(cmd) => api::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
