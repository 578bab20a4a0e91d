//! Commands that talk to a running ternd (arrive with the ternd issue).

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ApiCommand {}

pub fn run(cmd: ApiCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
