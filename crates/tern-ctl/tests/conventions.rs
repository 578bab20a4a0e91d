//! The command-line conventions of docs/cli.md on the real ternctl: completion scripts
//! and man pages, with no ternd anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn ternctl() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ternctl"))
}

#[test]
fn completion_scripts_offer_the_subcommands() {
    // A server that is nowhere: completion never asks it anything.
    tern_cli::testing::check_completions(
        ternctl(),
        &[
            "--server",
            "https://127.0.0.1:1",
            "--token-file",
            "/nonexistent",
        ],
        &["agents", "plan", "get", "apply", "tokens", "completion"],
    );
}

#[test]
fn man_pages_cover_every_level_of_subcommand() {
    tern_cli::testing::check_man_pages(
        ternctl(),
        &[
            (
                "ternctl-agents.1",
                "The rollout of the agent, or of the product",
            ),
            ("ternctl.1", "admin CLI and offline rollout planner"),
            ("ternctl-agents-start-update.1", "Start groups now"),
            // VERSION had no help at all (issue 37).
            (
                "ternctl-agents-new-rollout.1",
                "The version to roll out (semver",
            ),
            ("ternctl-plan.1", "Run the rollout logic offline on files"),
            (
                "ternctl-tokens-create.1",
                "Mint a token; it is printed once",
            ),
            ("ternctl-completion.1", "Print the shell completion script"),
            // Global options are documented on each subcommand's page.
            ("ternctl-inventory-ls.1", "TERN_SERVER"),
        ],
    );
}

/// `ternctl man DIR`: the pages from the binary one has, no xtask needed (visible in
/// the help, not only the hidden `__man`).
#[test]
fn man_writes_the_pages_into_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(ternctl())
        .arg("man")
        .arg(dir.path().join("man1"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in ["ternctl.1", "ternctl-agents-status.1", "ternctl-man.1"] {
        assert!(dir.path().join("man1").join(page).is_file(), "{page}");
    }
    let help = std::process::Command::new(ternctl())
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("man "),
        "man is listed in the help"
    );
}
