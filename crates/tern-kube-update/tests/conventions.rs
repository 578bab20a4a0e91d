//! The command-line conventions of docs/cli.md on the real tern-kube-update: completion
//! scripts and man pages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tern-kube-update"))
}

#[test]
fn completion_scripts_offer_the_subcommands() {
    tern_cli::testing::check_completions(bin(), &[], &["run", "completion"]);
}

#[test]
fn man_pages_cover_every_subcommand() {
    tern_cli::testing::check_man_pages(
        bin(),
        &[
            ("tern-kube-update.1", "Kubernetes agent updater"),
            ("tern-kube-update-run.1", "TERN_SERVER"),
        ],
    );
}
