//! The command-line conventions of docs/cli.md on the real tern-update: completion
//! scripts and man pages, with no install, settings or server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tern-update"))
}

#[test]
fn completion_scripts_offer_the_subcommands() {
    // Any other command would refuse this namespace and find no install there.
    tern_cli::testing::check_completions(
        bin(),
        &[
            "--install-dir",
            "/nonexistent/tern",
            "--install-suffix",
            "../escape",
        ],
        &["enable", "update", "status", "schedule", "completion"],
    );
    assert!(!Path::new("/nonexistent/tern").exists());
}

#[test]
fn man_pages_cover_every_subcommand() {
    tern_cli::testing::check_man_pages(
        bin(),
        &[
            ("tern-update-enable.1", "Enroll this host"),
            // --group had no help at all (issue 37).
            (
                "tern-update-enable.1",
                "The rollout group this host belongs to",
            ),
            ("tern-update.1", "Tern host updater"),
            ("tern-update-schedule.1", "schedule override"),
            ("tern-update-schedule-sync.1", "Fetch the group"),
            ("tern-update-link-package.1", "Link the package install"),
            (
                "tern-update-completion.1",
                "Print the shell completion script",
            ),
            ("tern-update-update.1", "TERN_UPDATE_LOG_FORMAT"),
        ],
    );
}

/// `enable --help` says what the join token file is for: exchanged once for the
/// host's own credential, never sent with heartbeats.
#[test]
fn the_join_token_file_is_said_to_be_exchanged_for_a_credential() {
    let out = std::process::Command::new(bin())
        .args(["enable", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let said: String = help
        .split("--join-token-file")
        .nth(1)
        .unwrap_or_else(|| panic!("no --join-token-file: {help}"))
        .split("\n      --")
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!said.contains("sent with heartbeats"), "{said}");
    assert!(
        said.contains("exchanges it once for this host's own credential")
            && said.contains("join token itself is never sent again"),
        "{said}"
    );
}
