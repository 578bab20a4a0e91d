//! The module tree of one crate root, read from its files: every module at every depth
//! (in a file or inline), what it defines, what it imports and every path it names.
//!
//! Test code is left out: a `#[cfg(test)]` item (a test module, a helper, an import) is
//! skipped whole, since tests may reach across layers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::tokens::{Tok, matching, tokenize};

/// A module's path from the crate root; empty for the root.
pub(super) type ModPath = Vec<String>;

/// How a module path is written: `a::b` for a nested module, `crate` for the root.
pub(super) fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// Where a path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Anchor {
    /// `crate::` or, in a macro, `$crate::`.
    Crate,
    /// `super::` that many times.
    Super(usize),
    /// `self::`.
    SelfMod,
    /// A name in the module's scope (an item, a child module, an import) or another
    /// crate's name.
    Scope,
}

/// A path as written: `crate::a::B`, `super::b::g`, `b::g` or a bare `X`.
#[derive(Debug, Clone)]
pub(super) struct PathRef {
    pub(super) anchor: Anchor,
    pub(super) segs: Vec<String>,
    pub(super) line: usize,
}

/// One name a `use` brings in (`name: None` for a glob).
#[derive(Debug, Clone)]
pub(super) struct Import {
    pub(super) name: Option<String>,
    pub(super) path: PathRef,
    /// `pub use` (with any restriction) at the module's level: a re-export, which by
    /// itself is no use of what it names.
    pub(super) public: bool,
}

#[derive(Debug, Default)]
pub(super) struct Module {
    /// The file it is written in, relative to the crate's directory.
    pub(super) file: String,
    pub(super) children: BTreeSet<String>,
    /// Names of the types it defines (structs, enums, unions, traits, type aliases):
    /// what a path can go on through (`Kind::Variant`, `Type::new`).
    pub(super) types: BTreeSet<String>,
    /// Names of its functions, constants, statics and macros: a path ends at them, and
    /// a module of the same name (`use crate::run;` beside `fn run`) is another name.
    pub(super) values: BTreeSet<String>,
    pub(super) imports: Vec<Import>,
    /// Every path its own code names (not its child modules'): in code, in macro bodies
    /// and in the attribute strings that hold paths.
    pub(super) refs: Vec<PathRef>,
}

pub(super) struct Tree {
    pub(super) modules: BTreeMap<ModPath, Module>,
}

/// Reads the module tree of the crate root `root` (a `lib.rs`, `main.rs` or
/// `bin/*.rs`); `crate_dir` shortens the file names shown.
pub(super) fn load(root: &Path, crate_dir: &Path, label: &str) -> Result<Tree, String> {
    let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
    let mut exported = Vec::new();
    let root_dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut pending = vec![(root.to_path_buf(), root_dir, ModPath::new())];
    while let Some((file, dir, path)) = pending.pop() {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let shown = file
            .strip_prefix(crate_dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        let toks = tokenize(&text);
        let mut parser = Parser {
            toks: &toks,
            file: shown,
            modules: Vec::new(),
            files: Vec::new(),
            exported: Vec::new(),
        };
        parser.module(0, toks.len(), path, dir);
        modules.extend(parser.modules);
        exported.extend(parser.exported);
        for decl in parser.files {
            let (child_file, child_dir) = match &decl.path_attr {
                // rustc reads a file named by `#[path]` as it reads a `mod.rs`: its own
                // `mod x;` are looked up beside it, not in a directory named after it.
                Some(p) => {
                    let f = file.parent().unwrap_or(Path::new(".")).join(p);
                    let d = f.parent().unwrap_or(Path::new(".")).to_path_buf();
                    (f, d)
                }
                None => {
                    let flat = decl.dir.join(format!("{}.rs", decl.name));
                    let nested = decl.dir.join(&decl.name).join("mod.rs");
                    let f = if flat.is_file() { flat } else { nested };
                    (f, decl.dir.join(&decl.name))
                }
            };
            if !child_file.is_file() {
                return Err(format!(
                    "{label}: `mod {};` in {} has no file (looked for {})",
                    decl.name,
                    file.display(),
                    child_file.display()
                ));
            }
            pending.push((child_file, child_dir, decl.path));
        }
    }
    // An exported macro is `crate::name!` wherever it is written: as if the root
    // re-exported it from there.
    if let Some(root) = modules.get_mut(&ModPath::new()) {
        for (name, module) in exported {
            let mut segs = module;
            segs.push(name.clone());
            root.imports.push(Import {
                name: Some(name),
                path: PathRef {
                    anchor: Anchor::Crate,
                    segs,
                    line: 0,
                },
                public: true,
            });
        }
    }
    Ok(Tree { modules })
}

/// A `mod name;`: the module it makes and where its file is looked for.
struct FileDecl {
    path: ModPath,
    dir: PathBuf,
    name: String,
    path_attr: Option<String>,
}

/// What the attributes before an item say about it.
#[derive(Default)]
struct Attrs {
    cfg_test: bool,
    /// `#[macro_export]`: the macro is named at the crate root.
    macro_export: bool,
    path: Option<String>,
    /// Paths held in attribute strings, kept unless the item is test code.
    refs: Vec<PathRef>,
}

/// Attribute keys whose string value is a path or a type (serde's and thiserror's).
const PATH_KEYS: &[&str] = &[
    "default",
    "with",
    "serialize_with",
    "deserialize_with",
    "skip_serializing_if",
    "from",
    "try_from",
    "into",
    "remote",
    "getter",
];

/// Words that are never a name another module defines.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while",
];

/// Keywords after which a name is being defined, not used.
const DEFINING: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "union",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "let",
    "mut",
    "ref",
    "macro_rules",
];

struct Parser<'t> {
    toks: &'t [(Tok, usize)],
    file: String,
    modules: Vec<(ModPath, Module)>,
    files: Vec<FileDecl>,
    /// `#[macro_export]` macros: the name and the module that writes it.
    exported: Vec<(String, ModPath)>,
}

impl Parser<'_> {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i).map(|(t, _)| t)
    }

    fn ident(&self, i: usize) -> Option<&str> {
        match self.tok(i) {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }

    fn is(&self, i: usize, c: char) -> bool {
        self.tok(i) == Some(&Tok::Punct(c))
    }

    fn line(&self, i: usize) -> usize {
        self.toks.get(i).map_or(0, |(_, l)| *l)
    }

    /// The module whose body is `toks[lo..hi]`, at `path`; its `mod x;` files are looked
    /// for in `dir`.
    fn module(&mut self, lo: usize, hi: usize, path: ModPath, dir: PathBuf) {
        let mut m = Module {
            file: self.file.clone(),
            ..Module::default()
        };
        let mut i = lo;
        // Braces open inside this module's own body: 0 is the module's item level.
        let mut depth = 0usize;
        let mut attrs = Attrs::default();
        // `pub` opened the current item.
        let mut public = false;
        while i < hi {
            if self.is(i, '#')
                && (self.is(i + 1, '[') || self.is(i + 1, '!') && self.is(i + 2, '['))
            {
                let open = if self.is(i + 1, '[') { i + 1 } else { i + 2 };
                let end = matching(self.toks, open, '[', ']').min(hi);
                self.attribute(open + 1, end, &mut attrs);
                i = end + 1;
                continue;
            }
            if attrs.cfg_test {
                i = self.item_end(i, hi, depth > 0);
                attrs = Attrs::default();
                public = false;
                continue;
            }
            m.refs.append(&mut attrs.refs);
            // The attributes stay with the item through its `pub`.
            if self.ident(i) == Some("pub") {
                public = depth == 0;
                i += 1;
                if self.is(i, '(') {
                    i = matching(self.toks, i, '(', ')') + 1;
                }
                continue;
            }
            let item = std::mem::take(&mut attrs);
            let Some(tok) = self.tok(i) else { break };
            match tok {
                Tok::Ident(kw) if kw == "mod" && self.ident(i + 1).is_some() => {
                    let name = self.ident(i + 1).unwrap_or_default().to_string();
                    let mut child = path.clone();
                    child.push(name.clone());
                    if self.is(i + 2, ';') {
                        m.children.insert(name.clone());
                        self.files.push(FileDecl {
                            path: child,
                            dir: dir.clone(),
                            name,
                            path_attr: item.path,
                        });
                        i += 3;
                    } else if self.is(i + 2, '{') {
                        let close = matching(self.toks, i + 2, '{', '}').min(hi);
                        m.children.insert(name.clone());
                        self.module(i + 3, close, child, dir.join(&name));
                        i = close + 1;
                    } else {
                        i += 1;
                        continue;
                    }
                    public = false;
                    continue;
                }
                Tok::Ident(kw) if kw == "use" => {
                    let line = self.line(i);
                    let mut found = Vec::new();
                    let after = self.use_tree(i + 1, Anchor::Scope, Vec::new(), line, &mut found);
                    for (name, path) in found {
                        m.imports.push(Import {
                            name,
                            path,
                            public: public && depth == 0,
                        });
                    }
                    i = after;
                    while i < hi && !self.is(i, ';') {
                        i += 1;
                    }
                    public = false;
                    i += 1;
                    continue;
                }
                Tok::Ident(kw) if kw == "extern" && self.ident(i + 1) == Some("crate") => {
                    while i < hi && !self.is(i, ';') {
                        i += 1;
                    }
                    continue;
                }
                Tok::Ident(kw) if depth == 0 && kw == "macro_rules" && self.is(i + 1, '!') => {
                    if let Some(name) = self.ident(i + 2) {
                        m.values.insert(name.to_string());
                        if item.macro_export {
                            self.exported.push((name.to_string(), path.clone()));
                        }
                    }
                    i += 3;
                    continue;
                }
                Tok::Ident(_) if depth == 0 && self.defines_item(i) => {
                    let mut k = i + 1;
                    if self.ident(k) == Some("mut") {
                        k += 1;
                    }
                    if let Some(name) = self.ident(k) {
                        if matches!(self.ident(i), Some("fn" | "const" | "static")) {
                            m.values.insert(name.to_string());
                        } else {
                            m.types.insert(name.to_string());
                        }
                    }
                    i = k + 1;
                    continue;
                }
                Tok::Ident(_) => {
                    i = self.path_ref(i, &mut m.refs);
                    continue;
                }
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        public = false;
                    }
                }
                Tok::Punct(';') if depth == 0 => public = false,
                _ => {}
            }
            i += 1;
        }
        self.modules.push((path, m));
    }

    /// Whether the keyword at `i` starts the definition of a named item at module level.
    fn defines_item(&self, i: usize) -> bool {
        let Some(kw) = self.ident(i) else {
            return false;
        };
        let next = self.ident(i + 1);
        match kw {
            "fn" | "struct" | "enum" | "trait" | "type" => next.is_some(),
            // `const fn`, `const _`, `static mut X`.
            "const" => {
                next.is_some_and(|n| !matches!(n, "fn" | "unsafe" | "async" | "extern" | "_"))
            }
            "static" => next.is_some(),
            // A contextual keyword: only an item when a name and a body or generics follow.
            "union" => next.is_some() && (self.is(i + 2, '{') || self.is(i + 2, '<')),
            _ => false,
        }
    }

    /// Reads the attribute whose contents are `toks[lo..hi]` into `attrs`.
    fn attribute(&self, lo: usize, hi: usize, attrs: &mut Attrs) {
        let body: Vec<&Tok> = self.toks[lo..hi].iter().map(|(t, _)| t).collect();
        if body
            == [
                &Tok::Ident("cfg".into()),
                &Tok::Punct('('),
                &Tok::Ident("test".into()),
                &Tok::Punct(')'),
            ]
        {
            attrs.cfg_test = true;
        }
        if body.first() == Some(&&Tok::Ident("macro_export".into())) {
            attrs.macro_export = true;
        }
        if let [Tok::Ident(p), Tok::Punct('='), Tok::Str(s)] = body.as_slice()
            && p == "path"
        {
            attrs.path = Some(s.clone());
        }
        // A path written out (`#[arg(value_parser = super::parse_interval)]`); the bare
        // words of attributes (`derive(Debug)`, `arg(long)`) name nothing of the crate.
        let mut k = lo;
        while k < hi {
            if self.ident(k).is_some() && self.tok(k + 1) == Some(&Tok::Path) {
                let mut found = Vec::new();
                k = self.path_ref(k, &mut found);
                attrs.refs.extend(
                    found
                        .into_iter()
                        .filter(|p| p.anchor != Anchor::Scope || p.segs.len() > 1),
                );
            } else {
                k += 1;
            }
        }
        // `key = "a::b::c"` where the key holds a path: `#[serde(default = "…")]`.
        for k in lo..hi.saturating_sub(2) {
            if let (Some(key), true, Some(Tok::Str(s))) =
                (self.ident(k), self.is(k + 1, '='), self.tok(k + 2))
                && PATH_KEYS.contains(&key)
                && let Some(path) = path_in_string(s, self.line(k + 2))
            {
                attrs.refs.push(path);
            }
        }
    }

    /// The index after the item (or statement, field, variant) starting at `i`: its
    /// `;`, or the brace that closes its body; inside a body also a `,` or the brace
    /// that closes the body around it.
    fn item_end(&self, i: usize, hi: usize, in_body: bool) -> usize {
        // Items whose value may hold braces run to their `;`.
        let mut k = i;
        while matches!(
            self.ident(k),
            Some("pub" | "unsafe" | "async" | "extern" | "default")
        ) {
            k += 1;
            if self.is(k, '(') {
                k = matching(self.toks, k, '(', ')') + 1;
            }
        }
        let to_semicolon = matches!(self.ident(k), Some("const" | "static" | "let" | "use"))
            && !matches!(self.ident(k + 1), Some("fn" | "unsafe" | "async"));
        let mut nest = 0i64;
        let mut j = i;
        while j < hi {
            match self.tok(j) {
                Some(Tok::Punct('(' | '[' | '{')) => nest += 1,
                Some(Tok::Punct(')' | ']')) => {
                    nest -= 1;
                    if nest < 0 {
                        return j;
                    }
                }
                Some(Tok::Punct('}')) => {
                    nest -= 1;
                    if nest < 0 {
                        return j;
                    }
                    if nest == 0 && !to_semicolon {
                        return if self.is(j + 1, ';') { j + 2 } else { j + 1 };
                    }
                }
                Some(Tok::Punct(';')) if nest == 0 => return j + 1,
                Some(Tok::Punct(',')) if nest == 0 && in_body => return j + 1,
                _ => {}
            }
            j += 1;
        }
        hi
    }

    /// Reads a use tree from `i` with the path so far; pushes each name it brings in
    /// (`None` for a glob) and returns the index after the tree.
    fn use_tree(
        &self,
        mut i: usize,
        mut anchor: Anchor,
        mut segs: Vec<String>,
        line: usize,
        out: &mut Vec<(Option<String>, PathRef)>,
    ) -> usize {
        let mut first = segs.is_empty() && anchor == Anchor::Scope;
        loop {
            match self.tok(i) {
                Some(Tok::Punct('{')) => {
                    i += 1;
                    loop {
                        match self.tok(i) {
                            Some(Tok::Punct('}')) => return i + 1,
                            Some(Tok::Punct(',')) => i += 1,
                            None => return i,
                            Some(_) => {
                                let next = self.use_tree(i, anchor, segs.clone(), line, out);
                                i = if next == i { i + 1 } else { next };
                            }
                        }
                    }
                }
                Some(Tok::Punct('*')) => {
                    out.push((None, PathRef { anchor, segs, line }));
                    return i + 1;
                }
                // `$crate`, or the `::` of an absolute path.
                Some(Tok::Punct('$')) | Some(Tok::Path) => i += 1,
                Some(Tok::Ident(s)) => {
                    let s = s.clone();
                    i += 1;
                    let continues = self.tok(i) == Some(&Tok::Path);
                    match s.as_str() {
                        "crate" if first => anchor = Anchor::Crate,
                        "super" if segs.is_empty() && anchor != Anchor::Crate => {
                            anchor = match anchor {
                                Anchor::Super(n) => Anchor::Super(n + 1),
                                _ => Anchor::Super(1),
                            };
                        }
                        "self" if first && continues => anchor = Anchor::SelfMod,
                        // `{self, …}` in a group: the path so far itself.
                        "self" => {}
                        _ => segs.push(s.clone()),
                    }
                    first = false;
                    if continues {
                        i += 1;
                        continue;
                    }
                    let mut name = if s == "self" || s == "super" || s == "crate" {
                        segs.last().cloned()
                    } else {
                        Some(s)
                    };
                    if self.ident(i) == Some("as") {
                        name = self.ident(i + 1).map(str::to_string);
                        i += 2;
                    }
                    out.push((
                        name.or(Some("_".to_string())),
                        PathRef { anchor, segs, line },
                    ));
                    return i;
                }
                _ => return i,
            }
        }
    }

    /// Reads the path (or bare name) starting with the identifier at `i` into `refs`
    /// when it can name another module's item; returns the index after it.
    fn path_ref(&self, i: usize, refs: &mut Vec<PathRef>) -> usize {
        let prev = i.checked_sub(1).and_then(|p| self.tok(p));
        let dollar = prev == Some(&Tok::Punct('$'));
        let Some(head) = self.ident(i) else {
            return i + 1;
        };
        // A method or field (`.name`), the tail of a path already read, a macro's
        // metavariable (`$name`), or a name being defined.
        if matches!(prev, Some(Tok::Punct('.')) | Some(Tok::Path))
            || dollar && head != "crate"
            || i.checked_sub(1)
                .and_then(|p| self.ident(p))
                .is_some_and(|p| DEFINING.contains(&p))
        {
            return i + 1;
        }
        let line = self.line(i);
        let mut anchor = Anchor::Scope;
        let mut segs = Vec::new();
        let mut j = i;
        while let Some(s) = self.ident(j) {
            match s {
                "crate" if j == i => anchor = Anchor::Crate,
                "self" if j == i => anchor = Anchor::SelfMod,
                "super"
                    if segs.is_empty() && matches!(anchor, Anchor::Scope | Anchor::Super(_)) =>
                {
                    anchor = match anchor {
                        Anchor::Super(n) => Anchor::Super(n + 1),
                        _ => Anchor::Super(1),
                    };
                }
                _ => segs.push(s.to_string()),
            }
            if self.tok(j + 1) == Some(&Tok::Path) && self.ident(j + 2).is_some() {
                j += 2;
            } else {
                break;
            }
        }
        if segs.is_empty() {
            return j + 1;
        }
        let bare = anchor == Anchor::Scope && segs.len() == 1;
        // A field or binding followed by its type (`name: T`), or a keyword.
        if bare && (self.is(j + 1, ':') || KEYWORDS.contains(&segs[0].as_str())) {
            return j + 1;
        }
        refs.push(PathRef { anchor, segs, line });
        j + 1
    }
}

/// The path a string holds (`"crate::a::f"`, `"defaults::port"`, `"Raw"`), if it is one.
fn path_in_string(s: &str, line: usize) -> Option<PathRef> {
    let mut parts: Vec<&str> = s.split("::").collect();
    let valid = |p: &str| {
        let mut c = p.chars();
        c.next().is_some_and(|f| f == '_' || f.is_alphabetic())
            && c.all(|ch| ch == '_' || ch.is_alphanumeric())
    };
    let anchor = match parts.first().copied() {
        Some("crate") | Some("$crate") => {
            parts.remove(0);
            Anchor::Crate
        }
        Some("self") => {
            parts.remove(0);
            Anchor::SelfMod
        }
        Some("super") => {
            let n = parts.iter().take_while(|p| **p == "super").count();
            parts.drain(..n);
            Anchor::Super(n)
        }
        _ => Anchor::Scope,
    };
    (!parts.is_empty() && parts.iter().all(|p| valid(p))).then(|| PathRef {
        anchor,
        segs: parts.into_iter().map(str::to_string).collect(),
        line,
    })
}
