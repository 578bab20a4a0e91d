//! `cargo xtask cycles [--edges]`: fails when modules of a workspace crate import each
//! other in a cycle, at any depth, or a crate's module uses one that ARCHITECTURE.md's
//! layers put above it (ARCHITECTURE.md, "No import cycles between modules").
//!
//! A crate's layering is only as clear as its module graph: with a cycle, no module of
//! the cycle can be read, tested or moved without the others. The check reads each
//! crate root's module tree (`tree`), follows every path its modules name to the
//! module that defines the item (`resolve`: through imports, `use … as`, re-exports,
//! glob imports, `$crate::` in macros and the paths serde's attributes hold in
//! strings), and reports the cycles between modules and between the sibling modules of
//! each parent (`report`), then holds each crate root to the layer order ARCHITECTURE.md
//! states for it (`layers`). Test code (`#[cfg(test)]` items) is left out: tests may
//! reach across layers.
//!
//! A text scan, not a compiler: comments, string and character literals are skipped,
//! and the rest is split into identifiers and punctuation, which is all a path needs.
//! Where it cannot tell (a name a macro makes) it counts a use of the module the path
//! reached, so it errs towards an edge too many.

mod graph;
mod layers;
mod report;
mod resolve;
#[cfg(test)]
mod tests;
mod tokens;
mod tree;

use std::path::{Path, PathBuf};

pub(crate) use report::Report;

/// `--edges` also lists every edge with the use that makes it.
pub fn run(args: &[String]) -> Result<(), String> {
    let show_edges = match args {
        [] => false,
        [a] if a == "--edges" => true,
        _ => {
            return Err(format!(
                "usage: cargo xtask cycles [--edges] (got {args:?})"
            ));
        }
    };
    let root = crate::root();
    let doc = root.join("ARCHITECTURE.md");
    let text =
        std::fs::read_to_string(&doc).map_err(|e| format!("cannot read {}: {e}", doc.display()))?;
    let mut layers = layers::parse(&text)?;
    if layers.is_empty() {
        return Err(
            "ARCHITECTURE.md states no layer order (a ```layers CRATE block per crate)".into(),
        );
    }
    let crates = workspace_crates(&root)?;
    let mut failures = Vec::new();
    for (name, dir) in &crates {
        for report in check_crate(name, dir)? {
            eprintln!("{}", report.summary());
            if show_edges {
                for (from, tos) in &report.edges {
                    for (to, at) in tos {
                        println!("{} {from} {to} {at}", report.label);
                    }
                }
            }
            failures.extend(report.cycle_messages());
            while let Some(k) = layers.iter().position(|l| l.krate == report.label) {
                failures.extend(layers::check(&layers.remove(k), &report));
            }
        }
    }
    for l in &layers {
        failures.push(format!(
            "ARCHITECTURE.md:{}: layers for `{}`, which is no crate root of the workspace",
            l.line, l.label
        ));
    }
    if failures.is_empty() {
        eprintln!(
            "no module import cycles and the layers hold in {} crates",
            crates.len()
        );
        Ok(())
    } else {
        for f in &failures {
            eprintln!("{f}");
        }
        Err(format!(
            "{} module cycle(s) or layer break(s); move what the lower module needs below it",
            failures.len()
        ))
    }
}

/// The workspace's crates: every directory under `crates/` with a Cargo.toml, `xtask`
/// and `fuzz`, each with its package name.
fn workspace_crates(root: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let mut dirs = Vec::new();
    let crates = root.join("crates");
    let entries =
        std::fs::read_dir(&crates).map_err(|e| format!("cannot read {}: {e}", crates.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", crates.display()))?;
        if entry.path().join("Cargo.toml").is_file() {
            dirs.push(entry.path());
        }
    }
    dirs.push(root.join("xtask"));
    dirs.push(root.join("fuzz"));
    dirs.sort();
    dirs.into_iter()
        .map(|d| Ok((package_name(&d)?, d)))
        .collect()
}

fn package_name(dir: &Path) -> Result<String, String> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().trim_start_matches('=').trim();
            return Ok(value.trim_matches('"').to_string());
        }
    }
    Err(format!("{} has no [package] name", manifest.display()))
}

/// The reports of every crate root of the crate in `dir`: `src/lib.rs`, `src/main.rs`
/// and `src/bin/*.rs` (each its own module tree).
pub(crate) fn check_crate(name: &str, dir: &Path) -> Result<Vec<Report>, String> {
    let src = dir.join("src");
    let mut roots = Vec::new();
    let lib = src.join("lib.rs");
    if lib.is_file() {
        roots.push((name.to_string(), lib.clone()));
    }
    let main = src.join("main.rs");
    if main.is_file() {
        let label = if lib.is_file() {
            format!("{name} (bin src/main.rs)")
        } else {
            name.to_string()
        };
        roots.push((label, main));
    }
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect();
        bins.sort();
        for b in bins {
            let rel = b.strip_prefix(dir).unwrap_or(&b).display().to_string();
            roots.push((format!("{name} (bin {rel})"), b));
        }
    }
    roots
        .into_iter()
        .map(|(label, file)| {
            let tree = tree::load(&file, dir, &label)?;
            Ok(report::build(label, &tree))
        })
        .collect()
}
