//! From the paths a module names to the modules that define what they name: the edges
//! of the module graph.
//!
//! A path is followed the way the compiler does, through child modules, imports
//! (`use a::B as C`), re-exports (`pub use inner::X` at a crate root) and glob imports
//! (`use super::*`), to the module that defines the item. A `pub use` is no use by
//! itself: it only passes a name on, so a module that re-exports its children is not
//! above them until its own code uses what it re-exports. A private `use` is a use
//! (the compiler refuses unused imports under `-D warnings`, and a trait imported for
//! its methods is named nowhere else).

use std::collections::{BTreeMap, HashMap};

use super::tree::{Anchor, ModPath, PathRef, Tree, show};

/// from → to → where the first such use is (`file:line`), for modules shown as
/// [`show`] writes them.
pub(super) type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// What a name or a path resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Res {
    Module(ModPath),
    /// An item, by the module that defines it.
    Item(ModPath),
    /// Another crate's, a generic parameter, a local binding: nothing of this crate.
    Outside,
}

/// Imports chained deeper than this are taken as a loop (`use super::*` both ways).
const MAX_DEPTH: usize = 24;

pub(super) fn edges(tree: &Tree) -> Edges {
    let mut r = Resolver {
        tree,
        cache: HashMap::new(),
    };
    let mut edges = Edges::new();
    for (path, m) in &tree.modules {
        let mut add = |to: ModPath, line: usize| {
            if to != *path {
                edges
                    .entry(show(path))
                    .or_default()
                    .entry(show(&to))
                    .or_insert_with(|| format!("{}:{line}", m.file));
            }
        };
        for imp in m.imports.iter().filter(|i| !i.public) {
            match (r.path(path, &imp.path, 0), &imp.name) {
                (Res::Item(d), _) => add(d, imp.path.line),
                // `use crate::resource::*`: everything of that module is in scope.
                (Res::Module(p), None) if !path.starts_with(&p) => add(p, imp.path.line),
                _ => {}
            }
        }
        for p in &m.refs {
            if let Res::Item(d) = r.path(path, p, 0) {
                add(d, p.line);
            }
        }
    }
    edges
}

struct Resolver<'t> {
    tree: &'t Tree,
    cache: HashMap<(ModPath, String, bool), Res>,
}

impl Resolver<'_> {
    /// What `p`, written in module `here`, names.
    fn path(&mut self, here: &ModPath, p: &PathRef, depth: usize) -> Res {
        let mut at = match p.anchor {
            Anchor::Crate => ModPath::new(),
            Anchor::SelfMod => here.clone(),
            Anchor::Super(n) => here[..here.len().saturating_sub(n)].to_vec(),
            Anchor::Scope => {
                let Some(first) = p.segs.first() else {
                    return Res::Outside;
                };
                match self.name(here, first, p.segs.len() > 1, depth) {
                    Res::Module(m) => {
                        return self.walk(m, &p.segs[1..], depth);
                    }
                    other => return other,
                }
            }
        };
        if !self.tree.modules.contains_key(&at) {
            at = here.clone();
        }
        self.walk(at, &p.segs, depth)
    }

    /// Follows `segs` down from module `at`.
    fn walk(&mut self, mut at: ModPath, segs: &[String], depth: usize) -> Res {
        for (k, s) in segs.iter().enumerate() {
            match self.name(&at, s, k + 1 < segs.len(), depth) {
                Res::Module(m) => at = m,
                Res::Item(d) => return Res::Item(d),
                // Made by a macro, or a name the scan does not see: still that module's.
                Res::Outside => return Res::Item(at),
            }
        }
        Res::Module(at)
    }

    /// What `name` means inside module `m`: a child module, an item of its own, an
    /// import, or a name a glob import brings in. `goes_on`: the path continues after
    /// it (`name::…`), so it names a module or a type, not a function or a constant.
    fn name(&mut self, m: &ModPath, name: &str, goes_on: bool, depth: usize) -> Res {
        if depth > MAX_DEPTH {
            return Res::Outside;
        }
        let key = (m.clone(), name.to_string(), goes_on);
        if let Some(r) = self.cache.get(&key) {
            return r.clone();
        }
        // A loop through imports resolves to nothing rather than forever.
        self.cache.insert(key.clone(), Res::Outside);
        let r = self.lookup(m, name, goes_on, depth);
        self.cache.insert(key, r.clone());
        r
    }

    fn lookup(&mut self, m: &ModPath, name: &str, goes_on: bool, depth: usize) -> Res {
        let tree = self.tree;
        let Some(module) = tree.modules.get(m) else {
            return Res::Outside;
        };
        if module.children.contains(name) {
            let mut c = m.clone();
            c.push(name.to_string());
            return Res::Module(c);
        }
        if module.types.contains(name) || !goes_on && module.values.contains(name) {
            return Res::Item(m.clone());
        }
        for imp in &module.imports {
            if imp.name.as_deref() == Some(name) {
                let r = self.path(m, &imp.path, depth + 1);
                if r != Res::Outside {
                    return r;
                }
            }
        }
        for imp in module.imports.iter().filter(|i| i.name.is_none()) {
            if let Res::Module(p) = self.path(m, &imp.path, depth + 1)
                && p != *m
            {
                let r = self.name(&p, name, goes_on, depth + 1);
                if r != Res::Outside {
                    return r;
                }
            }
        }
        Res::Outside
    }
}
