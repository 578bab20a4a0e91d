//! The layer order ARCHITECTURE.md states for a crate, read from its fenced
//! ```` ```layers CRATE ```` blocks, and held against the crate's module graph.
//!
//! A block lists the crate root's modules (or, for ```` ```layers CRATE::a ````, the
//! modules of `a`), one layer a line, the top layer first; the modules of a line are
//! peers. A module may use the modules of its own line and of
//! the lines below it, never one above (counting what its submodules use). Every
//! module of the crate root is listed once, so the order cannot fall behind the code.

use std::collections::BTreeMap;

use super::report::Report;

/// One block: the crate root (or module) it is for, and its lines, top first.
#[derive(Debug)]
pub(crate) struct Layers {
    /// As written: `tern-core`, or `tern-core::domain` for a module's children.
    pub(crate) label: String,
    /// The crate root's label (`tern-core`).
    pub(crate) krate: String,
    /// Whose children the lines order: `crate` for the root, else `a::b`.
    pub(crate) parent: String,
    /// The line of ARCHITECTURE.md the block opens on.
    pub(crate) line: usize,
    pub(crate) rows: Vec<Vec<String>>,
}

const OPEN: &str = "```layers";

/// Every ```` ```layers CRATE ```` block of `text`.
pub(crate) fn parse(text: &str) -> Result<Vec<Layers>, String> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(label) = line.trim().strip_prefix(OPEN) else {
            continue;
        };
        let label = label.trim();
        if label.is_empty() {
            return Err(format!(
                "ARCHITECTURE.md:{}: a layers block names no crate (```layers CRATE)",
                n + 1
            ));
        }
        let mut rows = Vec::new();
        let mut closed = false;
        for (_, row) in lines.by_ref() {
            if row.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            let names: Vec<String> = row
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if !names.is_empty() {
                rows.push(names);
            }
        }
        if !closed || rows.is_empty() {
            return Err(format!(
                "ARCHITECTURE.md:{}: the layers block of {label} is {}",
                n + 1,
                if closed { "empty" } else { "never closed" }
            ));
        }
        let (krate, parent) = match label.split_once("::") {
            Some((k, p)) => (k.to_string(), p.to_string()),
            None => (label.to_string(), "crate".to_string()),
        };
        out.push(Layers {
            label: label.to_string(),
            krate,
            parent,
            line: n + 1,
            rows,
        });
    }
    Ok(out)
}

/// What is wrong with `layers` for the crate root of `report` (or the module it names):
/// a module missing, unknown or listed twice, and every use of a module above the user.
pub(crate) fn check(layers: &Layers, report: &Report) -> Vec<String> {
    let mut problems = Vec::new();
    let children: std::collections::BTreeSet<&str> = if layers.parent == "crate" {
        report.top.iter().map(String::as_str).collect()
    } else {
        let prefix = format!("{}::", layers.parent);
        report
            .modules
            .iter()
            .filter_map(|m| m.strip_prefix(&prefix))
            .filter(|rest| !rest.contains("::"))
            .collect()
    };
    let at = format!("ARCHITECTURE.md:{}", layers.line);
    // Height from the bottom: the last line is 0.
    let mut height: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, row) in layers.rows.iter().enumerate() {
        for name in row {
            if height
                .insert(name.as_str(), layers.rows.len() - 1 - k)
                .is_some()
            {
                problems.push(format!(
                    "{at}: the layers of {} list `{name}` twice",
                    layers.label
                ));
            }
            if !children.contains(name.as_str()) {
                problems.push(format!(
                    "{at}: the layers of {} list `{name}`, which is no module of its root",
                    layers.label
                ));
            }
        }
    }
    for m in &children {
        if !height.contains_key(m) {
            problems.push(format!(
                "{at}: the layers of {} leave out its module `{m}`: say which line it is on",
                layers.label
            ));
        }
    }
    for (x, tos) in report.siblings.get(&layers.parent).into_iter().flatten() {
        for (y, why) in tos {
            let (Some(hx), Some(hy)) = (height.get(x.as_str()), height.get(y.as_str())) else {
                continue;
            };
            if hy > hx {
                let mut msg = format!(
                    "{}: `{x}` uses `{y}`, which the layers in {at} put above it",
                    layers.label
                );
                for u in why {
                    msg.push_str(&format!("\n    {u}"));
                }
                problems.push(msg);
            }
        }
    }
    problems
}
