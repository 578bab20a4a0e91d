//! The module graph of one crate root and the cycles in it, at two grains: between
//! modules (any depth, `directive::instruct` ⇄ `directive::validate`), and between the
//! sibling modules of each parent counting what their submodules import (`a::x` → `b`
//! and `b::y` → `a` make `a` ⇄ `b`, as the crate's top-level layering sees it).

use std::collections::{BTreeMap, BTreeSet};

use super::graph::{Graph, cycles, shortest_cycle};
use super::resolve::edges;
use super::tree::{Tree, show};

#[derive(Debug)]
pub(crate) struct Report {
    /// `tern-core`, or `tern-server (bin src/main.rs)` for a binary next to a library.
    pub(crate) label: String,
    /// Every module, as `a::b` (the root is `crate`).
    pub(crate) modules: BTreeSet<String>,
    /// The crate root's own modules.
    pub(crate) top: BTreeSet<String>,
    /// from → to → where the first such use is (`file:line`).
    pub(crate) edges: Graph,
    /// Each strongly connected group of modules, sorted.
    pub(crate) cycles: Vec<Vec<String>>,
    /// parent → its children → the children they import, through any submodule → the
    /// module edges that make it.
    pub(crate) siblings: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<Use>>>>,
}

/// One edge of the module graph: `from` uses `to` at `at` (`file:line`).
#[derive(Debug, Clone)]
pub(crate) struct Use {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) at: String,
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}  ({})", self.from, self.to, self.at)
    }
}

pub(super) fn build(label: String, tree: &Tree) -> Report {
    let edges = edges(tree);
    let modules: BTreeSet<String> = tree.modules.keys().map(|m| show(m)).collect();
    let top = tree
        .modules
        .keys()
        .filter(|m| m.len() == 1)
        .map(|m| show(m))
        .collect();
    let cycles = cycles(&modules, &edges);
    let mut siblings: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<Use>>>> =
        BTreeMap::new();
    for (from, tos) in &edges {
        for (to, at) in tos {
            let f = split(from);
            let t = split(to);
            let k = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if f.len() > k && t.len() > k {
                siblings
                    .entry(show(
                        &f[..k].iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                    ))
                    .or_default()
                    .entry(f[k].to_string())
                    .or_default()
                    .entry(t[k].to_string())
                    .or_default()
                    .push(Use {
                        from: from.clone(),
                        to: to.clone(),
                        at: at.clone(),
                    });
            }
        }
    }
    Report {
        label,
        modules,
        top,
        edges,
        cycles,
        siblings,
    }
}

fn split(m: &str) -> Vec<&str> {
    if m == "crate" {
        Vec::new()
    } else {
        m.split("::").collect()
    }
}

impl Report {
    pub(crate) fn summary(&self) -> String {
        let n: usize = self.edges.values().map(BTreeMap::len).sum();
        format!(
            "== {}: {} modules, {} edges, {} cycles",
            self.label,
            self.modules.len(),
            n,
            self.cycle_messages().len()
        )
    }

    /// The graph between the children of `parent` (`crate` for the top level): an
    /// edge when any module under one uses any module under the other.
    pub(crate) fn sibling_graph(&self, parent: &str) -> Graph {
        self.siblings
            .get(parent)
            .map(|children| {
                children
                    .iter()
                    .map(|(x, tos)| {
                        let tos = tos
                            .iter()
                            .map(|(y, why)| (y.clone(), why[0].to_string()))
                            .collect();
                        (x.clone(), tos)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One message per cycle: its members, one concrete cycle through them, and the
    /// use behind each edge inside the group. A cycle among siblings that only a
    /// module cycle makes is said once, as the module cycle.
    pub(crate) fn cycle_messages(&self) -> Vec<String> {
        let mut out = Vec::new();
        for group in &self.cycles {
            let members: BTreeSet<&str> = group.iter().map(String::as_str).collect();
            let path = shortest_cycle(&self.edges, &group[0], &members);
            let mut msg = format!(
                "{}: module cycle {} (strongly connected: {})",
                self.label,
                path.join(" -> "),
                group.join(", ")
            );
            for from in group {
                for (to, at) in self.edges.get(from).into_iter().flatten() {
                    if members.contains(to.as_str()) {
                        msg.push_str(&format!("\n    {from} -> {to}  ({at})"));
                    }
                }
            }
            out.push(msg);
        }
        for (parent, children) in &self.siblings {
            let graph = self.sibling_graph(parent);
            let nodes = children.keys().cloned().collect();
            for group in cycles(&nodes, &graph) {
                let members: BTreeSet<&str> = group.iter().map(String::as_str).collect();
                // The module edges behind each edge between the members.
                let inside: Vec<&Vec<Use>> = group
                    .iter()
                    .flat_map(|x| {
                        children[x]
                            .iter()
                            .filter(|(y, _)| members.contains(y.as_str()))
                            .map(|(_, why)| why)
                    })
                    .collect();
                if self.made_by_a_module_cycle(&inside) {
                    continue;
                }
                let path = shortest_cycle(&graph, &group[0], &members);
                let prefix = if parent == "crate" {
                    String::new()
                } else {
                    format!("{parent}::")
                };
                let mut msg = format!(
                    "{}: modules {} import each other through their submodules: {} (strongly connected: {})",
                    self.label,
                    group
                        .iter()
                        .map(|g| format!("{prefix}{g}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    path.iter()
                        .map(|g| format!("{prefix}{g}"))
                        .collect::<Vec<_>>()
                        .join(" -> "),
                    group.join(", ")
                );
                for why in inside.iter().flat_map(|w| w.iter()) {
                    msg.push_str(&format!("\n    {why}"));
                }
                out.push(msg);
            }
        }
        out
    }

    /// Whether one module cycle makes each of these edges between siblings (one of
    /// the module edges behind each lies inside it).
    fn made_by_a_module_cycle(&self, inside: &[&Vec<Use>]) -> bool {
        self.cycles.iter().any(|group| {
            let has = |m: &String| group.contains(m);
            inside
                .iter()
                .all(|why| why.iter().any(|u| has(&u.from) && has(&u.to)))
        })
    }
}
