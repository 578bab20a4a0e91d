//! `cargo xtask cycles [--edges]`: fails when the top-level modules of any workspace crate import
//! each other in a cycle (ARCHITECTURE.md, "Layering inside a crate").
//!
//! A crate's layering is only as clear as its module graph: with a cycle, no module of
//! the cycle can be read, tested or moved without the others. The check follows each
//! crate root's module tree (`mod` declarations, inline and in files), reads every path
//! that starts with `crate::` (or `$crate::`) or climbs out of a top-level module with
//! `super::`, and builds the graph of top-level modules. Test modules
//! (`#[cfg(test)] mod …`) are left out: tests may reach across layers. A strongly
//! connected group of more than one module is an error that names a cycle in it and
//! the lines that make each of its edges.
//!
//! A text scan, not a parser: comments, string and character literals are skipped, and
//! the rest is split into identifiers and punctuation, which is all a path needs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// `--edges` also lists every edge with the import that makes it.
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
    let crates = workspace_crates(&crate::root())?;
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
        }
    }
    if failures.is_empty() {
        eprintln!("no module import cycles in {} crates", crates.len());
        Ok(())
    } else {
        for f in &failures {
            eprintln!("{f}");
        }
        Err(format!(
            "{} module import cycle(s); move what the lower module needs below it",
            failures.len()
        ))
    }
}

/// The workspace's crates: every directory under `crates/` with a Cargo.toml, and
/// `xtask`, each with its package name.
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

/// The module graph of one crate root (a library, or one binary).
#[derive(Debug)]
pub(crate) struct Report {
    /// `tern-core`, or `tern-server (bin src/main.rs)` for a binary next to a library.
    pub(crate) label: String,
    pub(crate) modules: BTreeSet<String>,
    /// from → to → where the first such import is (file:line).
    pub(crate) edges: BTreeMap<String, BTreeMap<String, String>>,
    /// Each strongly connected group of more than one module, sorted.
    pub(crate) cycles: Vec<Vec<String>>,
}

impl Report {
    fn summary(&self) -> String {
        let n: usize = self.edges.values().map(BTreeMap::len).sum();
        format!(
            "== {}: {} top modules, {} edges, {} cycles",
            self.label,
            self.modules.len(),
            n,
            self.cycles.len()
        )
    }

    /// One message per cycle: its members, one concrete cycle through them, and the
    /// import behind each edge inside the group.
    pub(crate) fn cycle_messages(&self) -> Vec<String> {
        self.cycles
            .iter()
            .map(|group| {
                let members: BTreeSet<&String> = group.iter().collect();
                let path = self.shortest_cycle(&group[0], &members);
                let mut msg = format!(
                    "{}: module cycle {} (strongly connected: {})",
                    self.label,
                    path.join(" -> "),
                    group.join(", ")
                );
                for from in group {
                    for (to, at) in self.edges.get(from).into_iter().flatten() {
                        if members.contains(to) {
                            msg.push_str(&format!("\n    {from} -> {to}  ({at})"));
                        }
                    }
                }
                msg
            })
            .collect()
    }

    /// The shortest path from `start` back to itself inside `members`, as names
    /// (first and last are `start`).
    fn shortest_cycle(&self, start: &String, members: &BTreeSet<&String>) -> Vec<String> {
        let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(m) = queue.pop_front() {
            for to in self.edges.get(m).into_iter().flat_map(BTreeMap::keys) {
                if !members.contains(to) || prev.contains_key(to) {
                    continue;
                }
                prev.insert(to, m);
                if to == start {
                    let mut path = vec![start.clone()];
                    let mut at = m;
                    while at != start {
                        path.push(at.clone());
                        at = prev[at];
                    }
                    path.push(start.clone());
                    path.reverse();
                    return path;
                }
                queue.push_back(to);
            }
        }
        // A strongly connected group always has a cycle through each member.
        vec![start.clone()]
    }
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
        .map(|(label, file)| check_root(label, &file, dir))
        .collect()
}

fn check_root(label: String, root: &Path, crate_dir: &Path) -> Result<Report, String> {
    let mut files = Vec::new();
    let root_dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut pending = vec![(root.to_path_buf(), root_dir, Vec::<String>::new())];
    let mut modules = BTreeSet::new();
    while let Some((file, dir, path)) = pending.pop() {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let scan = scan_file(&text, &path);
        for child in scan.children {
            let child_path: Vec<String> = path.iter().chain(child.inline.iter()).cloned().collect();
            let mut child_dir = dir.clone();
            for m in &child.inline {
                child_dir.push(m);
            }
            let (child_file, grandchild_dir) = match &child.path_attr {
                Some(p) => {
                    let f = file.parent().unwrap_or(Path::new(".")).join(p);
                    let d = f.parent().unwrap_or(Path::new(".")).join(
                        f.file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    );
                    (f, d)
                }
                None => {
                    let flat = child_dir.join(format!("{}.rs", child.name));
                    let nested = child_dir.join(&child.name).join("mod.rs");
                    let f = if flat.is_file() { flat } else { nested };
                    (f, child_dir.join(&child.name))
                }
            };
            if !child_file.is_file() {
                return Err(format!(
                    "{}: `mod {};` in {} has no file (looked for {})",
                    label,
                    child.name,
                    file.display(),
                    child_file.display()
                ));
            }
            let mut p = child_path;
            p.push(child.name);
            pending.push((child_file, grandchild_dir, p));
        }
        if path.is_empty() {
            modules.extend(scan.declared.iter().cloned());
        }
        let shown = file
            .strip_prefix(crate_dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        files.push((shown, scan.refs));
    }
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (file, refs) in files {
        for r in refs {
            if r.from != r.to && modules.contains(&r.from) && modules.contains(&r.to) {
                edges
                    .entry(r.from)
                    .or_default()
                    .entry(r.to)
                    .or_insert_with(|| format!("{file}:{}", r.line));
            }
        }
    }
    let cycles = strongly_connected(&modules, &edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    Ok(Report {
        label,
        modules,
        edges,
        cycles,
    })
}

/// Tarjan's algorithm; each group sorted, groups in order of their first member.
fn strongly_connected(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flat_map(BTreeMap::keys) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(lw);
                }
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            group.sort();
            s.out.push(group);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for n in nodes {
        if !s.index.contains_key(n.as_str()) {
            visit(&mut s, n);
        }
    }
    s.out.sort();
    s.out
}

/// A `mod name;` found in a file: inside which inline modules, and its `#[path]`.
struct Child {
    inline: Vec<String>,
    name: String,
    path_attr: Option<String>,
}

/// One path into another module: from the top-level module the file (or its inline
/// module) belongs to, to the top-level module named.
struct Ref {
    from: String,
    to: String,
    line: usize,
}

struct FileScan {
    children: Vec<Child>,
    /// Every module the file declares at its own level (inline or not): for a crate
    /// root, the top-level modules.
    declared: Vec<String>,
    refs: Vec<Ref>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    Path,
    Punct(char),
}

/// Splits `text` into tokens with their line numbers, dropping comments, whitespace,
/// numbers, lifetimes and character literals.
fn tokenize(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let is_ident_start = |ch: char| ch == '_' || ch.is_alphabetic();
    let is_ident = |ch: char| ch == '_' || ch.is_alphanumeric();
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((len, hashes)) = raw_string_start(&c, i) {
            // r"…", r#"…"#, br"…", cr"…": no escapes, ends at a quote and the hashes.
            let start_line = line;
            let mut j = i + len;
            let body_start = j;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    break;
                }
                if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            let body: String = c[body_start..j.min(c.len())].iter().collect();
            out.push((Tok::Str(body), start_line));
            i = j + 1 + hashes;
        } else if ch == '"' || ((ch == 'b' || ch == 'c') && next == Some('"')) {
            let start_line = line;
            let mut j = if ch == '"' { i + 1 } else { i + 2 };
            let body_start = j;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    if c.get(j + 1) == Some(&'\n') {
                        line += 1;
                    }
                    j += 1;
                } else if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            let body: String = c[body_start..j.min(c.len())].iter().collect();
            out.push((Tok::Str(body), start_line));
            i = j + 1;
        } else if ch == 'b' && next == Some('\'') {
            i = skip_char_literal(&c, i + 1);
        } else if ch == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if next == Some('\\') || c.get(i + 2) == Some(&'\'') {
                i = skip_char_literal(&c, i);
            } else {
                i += 1;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch == 'r' && next == Some('#') && c.get(i + 2).is_some_and(|&x| is_ident_start(x))
        {
            // A raw identifier (r#type).
            let mut j = i + 2;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            out.push((Tok::Ident(c[i + 2..j].iter().collect()), line));
            i = j;
        } else if is_ident_start(ch) {
            let mut j = i;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            out.push((Tok::Ident(c[i..j].iter().collect()), line));
            i = j;
        } else if ch.is_ascii_digit() {
            while i < c.len()
                && (is_ident(c[i])
                    || c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
            {
                i += 1;
            }
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// If a raw string starts at `i`: the length of its opening (prefix, hashes, quote) and
/// the number of hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if matches!(c.get(j), Some('b') | Some('c')) {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    // An identifier that merely ends in r (`bar"` cannot happen; `for"` cannot either).
    if i > 0 && (c[i - 1] == '_' || c[i - 1].is_alphanumeric()) {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((j + 1 - i, hashes))
}

/// Skips a character literal starting at the quote at `i`; returns the index after it.
fn skip_char_literal(c: &[char], i: usize) -> usize {
    let mut j = i + 1;
    if c.get(j) == Some(&'\\') {
        j += 2;
    } else {
        j += 1;
    }
    while j < c.len() && c[j] != '\'' && c[j] != '\n' {
        j += 1;
    }
    j + 1
}

/// Reads the module declarations and cross-module paths of one file whose module path
/// is `path` (empty for a crate root).
fn scan_file(text: &str, path: &[String]) -> FileScan {
    let toks = tokenize(text);
    let mut scan = FileScan {
        children: Vec::new(),
        declared: Vec::new(),
        refs: Vec::new(),
    };
    // Inline modules open around the current token, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut cfg_test = false;
    let mut path_attr: Option<String> = None;
    let mut i = 0;
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let is = |k: usize, t: Tok| toks.get(k).is_some_and(|(x, _)| *x == t);
    while i < toks.len() {
        let line = toks[i].1;
        match &toks[i].0 {
            Tok::Punct('#') if is(i + 1, Tok::Punct('[')) => {
                let end = matching(&toks, i + 1, '[', ']');
                let body: Vec<&Tok> = toks[i + 2..end].iter().map(|(t, _)| t).collect();
                if body
                    == [
                        &Tok::Ident("cfg".into()),
                        &Tok::Punct('('),
                        &Tok::Ident("test".into()),
                        &Tok::Punct(')'),
                    ]
                {
                    cfg_test = true;
                }
                if let [Tok::Ident(p), Tok::Punct('='), Tok::Str(s)] = body.as_slice()
                    && p == "path"
                {
                    path_attr = Some(s.clone());
                }
                i = end + 1;
                continue;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(name) = ident(i + 1) {
                    let name = name.to_string();
                    if is(i + 2, Tok::Punct(';')) {
                        if !cfg_test {
                            if inline.is_empty() {
                                scan.declared.push(name.clone());
                            }
                            scan.children.push(Child {
                                inline: inline.iter().map(|(n, _)| n.clone()).collect(),
                                name,
                                path_attr: path_attr.take(),
                            });
                        }
                        cfg_test = false;
                        path_attr = None;
                        i += 3;
                        continue;
                    }
                    if is(i + 2, Tok::Punct('{')) {
                        if cfg_test {
                            i = matching(&toks, i + 2, '{', '}') + 1;
                        } else {
                            if inline.is_empty() {
                                scan.declared.push(name.clone());
                            }
                            depth += 1;
                            inline.push((name, depth));
                            i += 3;
                        }
                        cfg_test = false;
                        path_attr = None;
                        continue;
                    }
                }
            }
            Tok::Ident(kw) if (kw == "crate" || kw == "super") && is(i + 1, Tok::Path) => {
                let here: Vec<&String> = path.iter().chain(inline.iter().map(|(n, _)| n)).collect();
                let mut base: Vec<&String> = here.clone();
                let mut k = i;
                if kw == "crate" {
                    base.clear();
                    k += 2;
                } else {
                    while ident(k) == Some("super") && is(k + 1, Tok::Path) {
                        base.pop();
                        k += 2;
                    }
                }
                let named: Vec<String> = if is(k, Tok::Punct('{')) {
                    group_heads(&toks, k)
                } else {
                    ident(k).map(str::to_string).into_iter().collect()
                };
                if let Some(from) = here.first() {
                    for n in named {
                        let to = match base.first() {
                            Some(top) => (*top).clone(),
                            None => n,
                        };
                        scan.refs.push(Ref {
                            from: (*from).clone(),
                            to,
                            line,
                        });
                    }
                }
                i = k.max(i + 1);
                continue;
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        // An attribute applies to the next item only: it ends at the item's `;` or body.
        if matches!(&toks[i].0, Tok::Punct(';' | '{' | '}')) {
            cfg_test = false;
            path_attr = None;
        }
        i += 1;
    }
    scan
}

/// The index of the bracket that closes the one at `open`.
fn matching(toks: &[(Tok, usize)], open: usize, o: char, c: char) -> usize {
    let mut depth = 0;
    for (k, (t, _)) in toks.iter().enumerate().skip(open) {
        if *t == Tok::Punct(o) {
            depth += 1;
        } else if *t == Tok::Punct(c) {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    toks.len().saturating_sub(1)
}

/// The first name of each item of the use-group opening at `open`: `{a::X, b, c::{D}}`
/// gives a, b, c.
fn group_heads(toks: &[(Tok, usize)], open: usize) -> Vec<String> {
    let end = matching(toks, open, '{', '}');
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_start = true;
    for (t, _) in &toks[open + 1..end] {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth -= 1,
            Tok::Punct(',') if depth == 0 => at_start = true,
            Tok::Ident(s) if depth == 0 && at_start => {
                heads.push(s.clone());
                at_start = false;
            }
            _ => {}
        }
    }
    heads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn synthetic(dir: &Path) {
        write(
            dir,
            "Cargo.toml",
            "[package]\nname = \"synthetic\"\nversion = \"0.1.0\"\n\n[dependencies]\nname = \"not this\"\n",
        );
        write(
            dir,
            "src/lib.rs",
            "mod a;\nmod b;\npub mod c;\nmod d { pub(crate) fn f() { super::c::g() } }\n#[cfg(test)]\nmod tests;\n",
        );
        // a imports b through a nested group; comments and strings that look like paths
        // make no edges.
        write(
            dir,
            "src/a.rs",
            "use crate::{x::Y, b::{B, C}};\n// use crate::c::Z;\n/* crate::d::W */\nconst S: &str = \"crate::c::V\";\nconst R: &str = r#\"crate::d::\"#;\nfn l<'a>(x: &'a str) -> char { '\"' }\n",
        );
        write(dir, "src/b/mod.rs", "mod inner;\n");
        write(dir, "src/b/inner.rs", "use super::super::c::Thing;\n");
        write(
            dir,
            "src/c.rs",
            "pub fn g() {}\n#[cfg(test)]\nmod tests { use crate::a::*; }\n",
        );
        // The test module's imports do not count.
        write(dir, "src/tests.rs", "use crate::a::X;\n");
    }

    #[test]
    fn a_crate_without_cycles_passes_and_its_edges_are_found() {
        let dir = tempfile::tempdir().unwrap();
        synthetic(dir.path());
        let reports = check_crate(&package_name(dir.path()).unwrap(), dir.path()).unwrap();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(r.label, "synthetic");
        assert_eq!(
            r.modules.iter().map(String::as_str).collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
        let edges: Vec<(String, String)> = r
            .edges
            .iter()
            .flat_map(|(f, t)| t.keys().map(move |t| (f.clone(), t.clone())))
            .collect();
        assert_eq!(
            edges,
            [
                ("a".to_string(), "b".to_string()),
                ("b".to_string(), "c".to_string()),
                ("d".to_string(), "c".to_string()),
            ]
        );
        assert_eq!(r.edges["b"]["c"], "src/b/inner.rs:1");
        assert!(r.cycles.is_empty(), "{:?}", r.cycles);
    }

    #[test]
    fn a_cycle_is_named_with_the_imports_that_make_it() {
        let dir = tempfile::tempdir().unwrap();
        synthetic(dir.path());
        // c now reaches back to a: a -> b -> c -> a.
        write(dir.path(), "src/c.rs", "pub fn g() { crate::a::h() }\n");
        let reports = check_crate("synthetic", dir.path()).unwrap();
        let r = &reports[0];
        assert_eq!(r.cycles, [vec!["a".to_string(), "b".into(), "c".into()]]);
        let msgs = r.cycle_messages();
        assert_eq!(msgs.len(), 1);
        let first = msgs[0].lines().next().unwrap();
        assert_eq!(
            first,
            "synthetic: module cycle a -> b -> c -> a (strongly connected: a, b, c)"
        );
        assert!(msgs[0].contains("c -> a  (src/c.rs:1)"), "{}", msgs[0]);
    }

    #[test]
    fn a_mutual_pair_is_a_cycle_of_two() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "Cargo.toml", "[package]\nname = \"pair\"\n");
        write(
            dir.path(),
            "src/main.rs",
            "mod routes;\nmod pins;\nfn main() {}\n",
        );
        write(dir.path(), "src/routes.rs", "use crate::pins::Pin;\n");
        write(
            dir.path(),
            "src/pins.rs",
            "pub(crate) fn f() -> crate::routes::Error { todo!() }\n",
        );
        let r = &check_crate("pair", dir.path()).unwrap()[0];
        assert_eq!(
            r.cycle_messages()[0].lines().next().unwrap(),
            "pair: module cycle pins -> routes -> pins (strongly connected: pins, routes)"
        );
    }

    #[test]
    fn a_missing_module_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "src/lib.rs", "mod gone;\n");
        let err = check_crate("x", dir.path()).unwrap_err();
        assert!(err.contains("`mod gone;`"), "{err}");
    }
}
