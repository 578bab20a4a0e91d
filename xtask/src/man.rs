//! `cargo xtask man [DIR]`: the man pages of ternctl, ternd, tern-update,
//! tern-lockstep and tern-release, one per binary and one per subcommand at every level
//! (`ternctl.1`, `ternctl-agents.1`, `ternctl-agents-status.1`…), into DIR (default
//! `target/man`).
//!
//! Each binary writes its own pages when run as `BIN __man DIR`
//! (`tern_cli::man_pages_if_asked`), from the clap definitions it parses with; xtask
//! builds the binaries and runs them. It does not link their definitions instead: they
//! live in each binary's `main.rs` (ternctl and tern-lockstep have no library), and
//! moving them into libraries would make four command lines public API only to
//! document them. Running the binary also documents exactly what that build accepts.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, root, run as run_cmd};

/// (package, binary) of every binary with pages.
const BINARIES: &[(&str, &str)] = &[
    ("tern-ctl", "ternctl"),
    ("tern-server", "ternd"),
    ("tern-update", "tern-update"),
    ("tern-lockstep", "tern-lockstep"),
    ("tern-release", "tern-release"),
    ("tern-kube-update", "tern-kube-update"),
];

const USAGE: &str = "usage: cargo xtask man [DIR]   (default DIR: target/man)";

pub fn run(args: &[String]) -> Result<(), String> {
    let dir = out_dir(args)?;
    let mut build = cargo();
    build.args(["build", "--quiet", "--bins"]);
    for (package, _) in BINARIES {
        build.args(["-p", package]);
    }
    run_cmd(build)?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Pages of subcommands that no longer exist would otherwise linger beside the new ones.
    let stale = our_pages(&dir)?;
    for page in &stale {
        std::fs::remove_file(page).map_err(|e| format!("cannot remove {}: {e}", page.display()))?;
    }
    let bin_dir = crate::target_dir().join("debug");
    let bins: Vec<&str> = BINARIES.iter().map(|(_, bin)| *bin).collect();
    write_pages(&bin_dir, &bins, &dir)?;
    let pages = our_pages(&dir)?;
    println!(
        "man: {} pages in {}; read one with `man -l {}`",
        pages.len(),
        dir.display(),
        dir.join("ternctl.1").display()
    );
    Ok(())
}

/// Runs each of `bins` (in `bin_dir`) to write its pages into `dir`; `cargo xtask
/// dist` calls it on the binaries it packages.
pub(crate) fn write_pages(bin_dir: &Path, bins: &[&str], dir: &Path) -> Result<(), String> {
    for bin in bins {
        let mut cmd = Command::new(bin_dir.join(bin));
        cmd.arg(tern_cli::MAN_ARG).arg(dir);
        run_cmd(cmd)?;
    }
    Ok(())
}

/// Where the pages go: DIR as given (relative to where xtask was run), else the
/// workspace's `target/man`.
fn out_dir(args: &[String]) -> Result<PathBuf, String> {
    match args {
        [] => Ok(root().join("target").join("man")),
        [dir] if !dir.starts_with('-') && !dir.is_empty() => {
            std::path::absolute(dir).map_err(|e| format!("{dir}: {e}"))
        }
        _ => Err(USAGE.to_string()),
    }
}

/// The pages in `dir` that belong to our binaries; other files are left alone.
fn our_pages(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut pages: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| is_our_page(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    pages.sort();
    Ok(pages)
}

/// `BIN.1` or `BIN-….1` for one of [`BINARIES`].
fn is_our_page(file: &str) -> bool {
    file.strip_suffix(".1").is_some_and(|stem| {
        BINARIES.iter().any(|(_, bin)| {
            stem == *bin
                || stem
                    .strip_prefix(bin)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_our_binaries_only() {
        for ours in [
            "ternctl.1",
            "ternctl-agents-status.1",
            "ternd-start.1",
            "tern-update.1",
        ] {
            assert!(is_our_page(ours), "{ours}");
        }
        for other in [
            "ternctl",
            "ternctl.1.gz",
            "ternctlx.1",
            "tern.1",
            "git-log.1",
            "ternd-start.8",
            "README",
        ] {
            assert!(!is_our_page(other), "{other}");
        }
    }

    #[test]
    fn the_directory_defaults_to_target_man() {
        assert_eq!(out_dir(&[]).unwrap(), root().join("target/man"));
        let given = out_dir(&["out/pages".to_string()]).unwrap();
        assert!(
            given.is_absolute() && given.ends_with("out/pages"),
            "{given:?}"
        );
        for bad in [&["a", "b"][..], &["--help"], &[""]] {
            let bad: Vec<String> = bad.iter().map(ToString::to_string).collect();
            assert!(out_dir(&bad).unwrap_err().contains("usage"), "{bad:?}");
        }
    }
}
