//! The check on small synthetic crates: each kind of edge, cycles at depth, between
//! siblings through their submodules, and the layers.

use super::*;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A crate in a temporary directory from (file, text) pairs; its one report.
fn report(files: &[(&str, &str)]) -> Report {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        write(dir.path(), rel, text);
    }
    let mut reports = check_crate("synthetic", dir.path()).unwrap();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

fn edge_list(r: &Report) -> Vec<String> {
    r.edges
        .iter()
        .flat_map(|(f, t)| t.keys().map(move |t| format!("{f} -> {t}")))
        .collect()
}

fn first_lines(r: &Report) -> Vec<String> {
    r.cycle_messages()
        .iter()
        .map(|m| m.lines().next().unwrap().to_string())
        .collect()
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
        "mod a;\nmod b;\npub mod c;\nmod d { pub(crate) fn f() { super::c::g() } }\nmod x { pub struct Y; }\n#[cfg(test)]\nmod tests;\n",
    );
    // a imports b through a nested group; comments and strings that look like paths
    // make no edges.
    write(
        dir,
        "src/a.rs",
        "use crate::{x::Y, b::{B, C}};\n// use crate::c::Z;\n/* crate::d::W */\nconst S: &str = \"crate::c::V\";\nconst R: &str = r#\"crate::d::\"#;\nfn l<'a>(x: &'a str) -> char { '\"' }\n",
    );
    write(
        dir,
        "src/b/mod.rs",
        "mod inner;\npub struct B;\npub struct C;\n",
    );
    write(dir, "src/b/inner.rs", "use super::super::c::Thing;\n");
    write(
        dir,
        "src/c.rs",
        "pub fn g() {}\npub struct Thing;\n#[cfg(test)]\nmod tests { use crate::a::*; }\n",
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
        ["a", "b", "b::inner", "c", "crate", "d", "x"]
    );
    assert_eq!(
        r.top.iter().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "c", "d", "x"]
    );
    assert_eq!(
        edge_list(r),
        ["a -> b", "a -> x", "b::inner -> c", "d -> c"]
    );
    assert_eq!(r.edges["b::inner"]["c"], "src/b/inner.rs:1");
    assert!(r.cycle_messages().is_empty(), "{:?}", r.cycle_messages());
}

#[test]
fn a_cycle_is_named_with_the_imports_that_make_it() {
    let dir = tempfile::tempdir().unwrap();
    synthetic(dir.path());
    // c now reaches back to a: a -> b -> c -> a.
    write(
        dir.path(),
        "src/c.rs",
        "pub struct Thing;\npub fn g() { crate::a::h() }\n",
    );
    write(dir.path(), "src/a.rs", "use crate::b::B;\npub fn h() {}\n");
    let reports = check_crate("synthetic", dir.path()).unwrap();
    let r = &reports[0];
    let msgs = r.cycle_messages();
    assert_eq!(msgs.len(), 1, "{msgs:#?}");
    let first = msgs[0].lines().next().unwrap();
    assert_eq!(
        first,
        "synthetic: modules a, b, c import each other through their submodules: a -> b -> c -> a (strongly connected: a, b, c)"
    );
    assert!(msgs[0].contains("c -> a  (src/c.rs:2)"), "{}", msgs[0]);
    assert!(
        msgs[0].contains("b::inner -> c  (src/b/inner.rs:1)"),
        "{}",
        msgs[0]
    );
}

#[test]
fn a_mutual_pair_is_a_cycle_of_two() {
    let r = report(&[
        ("src/main.rs", "mod routes;\nmod pins;\nfn main() {}\n"),
        (
            "src/routes.rs",
            "use crate::pins::Pin;\npub enum Error {}\n",
        ),
        (
            "src/pins.rs",
            "pub struct Pin;\npub(crate) fn f() -> crate::routes::Error { todo!() }\n",
        ),
    ]);
    assert_eq!(
        first_lines(&r),
        ["synthetic: module cycle pins -> routes -> pins (strongly connected: pins, routes)"]
    );
}

#[test]
fn a_missing_module_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "src/lib.rs", "mod gone;\n");
    let err = check_crate("x", dir.path()).unwrap_err();
    assert!(err.contains("`mod gone;`"), "{err}");
}

/// `directive/instruct.rs` and `directive/validate.rs` importing each other: a cycle
/// two levels down, which the top-level graph cannot see.
#[test]
fn a_cycle_between_nested_modules_is_found() {
    let r = report(&[
        ("src/lib.rs", "pub mod directive;\npub mod wire;\n"),
        (
            "src/directive/mod.rs",
            "pub mod instruct;\npub mod validate;\n",
        ),
        (
            "src/directive/instruct.rs",
            "use super::validate::FieldError;\npub fn check() -> Result<(), FieldError> { Ok(()) }\n",
        ),
        (
            "src/directive/validate.rs",
            "pub struct FieldError;\npub fn env() { super::instruct::check().ok(); }\n",
        ),
        ("src/wire.rs", "use crate::directive::instruct::check;\n"),
    ]);
    assert_eq!(
        first_lines(&r),
        [
            "synthetic: module cycle directive::instruct -> directive::validate -> directive::instruct (strongly connected: directive::instruct, directive::validate)"
        ]
    );
    let msg = &r.cycle_messages()[0];
    assert!(
        msg.contains("directive::instruct -> directive::validate  (src/directive/instruct.rs:1)"),
        "{msg}"
    );
    assert!(
        msg.contains("directive::validate -> directive::instruct  (src/directive/validate.rs:2)"),
        "{msg}"
    );
    assert!(edge_list(&r).contains(&"wire -> directive::instruct".to_string()));
}

/// `crate::X` where the root re-exports `a::X`: a use of `a`, not of the root.
#[test]
fn a_root_re_export_leads_to_the_module_that_defines_the_item() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\npub use a::Settings;\n"),
        (
            "src/a.rs",
            "pub struct Settings { pub port: crate::b::Port }\n",
        ),
        (
            "src/b.rs",
            "pub struct Port;\npub fn load() -> crate::Settings { todo!() }\n",
        ),
    ]);
    assert_eq!(edge_list(&r), ["a -> b", "b -> a"]);
    assert_eq!(r.edges["b"]["a"], "src/b.rs:2");
    assert_eq!(
        first_lines(&r),
        ["synthetic: module cycle a -> b -> a (strongly connected: a, b)"]
    );
}

/// A parent that re-exports its children is not above them for that: only what its
/// own code uses counts.
#[test]
fn a_re_export_alone_is_no_use() {
    let r = report(&[
        ("src/lib.rs", "pub mod error;\n"),
        (
            "src/error/mod.rs",
            "mod io;\nmod parse;\npub use io::IoError;\npub use parse::ParseError;\npub struct Context;\n",
        ),
        (
            "src/error/io.rs",
            "pub struct IoError(pub super::Context);\n",
        ),
        (
            "src/error/parse.rs",
            "use super::{Context, IoError};\npub struct ParseError(Context, IoError);\n",
        ),
    ]);
    assert_eq!(
        edge_list(&r),
        [
            "error::io -> error",
            "error::parse -> error",
            "error::parse -> error::io"
        ]
    );
    assert!(r.cycle_messages().is_empty(), "{:?}", r.cycle_messages());
    // Once the parent's own code uses a child that uses it, it is a cycle.
    let r = report(&[
        ("src/lib.rs", "pub mod error;\n"),
        (
            "src/error/mod.rs",
            "mod io;\npub use io::IoError;\npub struct Context;\npub fn wrap(e: IoError) {}\n",
        ),
        (
            "src/error/io.rs",
            "pub struct IoError(pub super::Context);\n",
        ),
    ]);
    assert_eq!(
        first_lines(&r),
        [
            "synthetic: module cycle error -> error::io -> error (strongly connected: error, error::io)"
        ]
    );
}

#[test]
fn a_renamed_import_is_followed() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        (
            "src/a.rs",
            "use crate::b as bee;\npub fn f() { bee::g(); }\npub struct T;\n",
        ),
        (
            "src/b.rs",
            "use crate::c::{self as sea};\npub fn g() { sea::h() }\n",
        ),
        (
            "src/c.rs",
            "use crate::a::T as Renamed;\npub fn h() { let _ = Renamed; }\n",
        ),
    ]);
    assert_eq!(edge_list(&r), ["a -> b", "b -> c", "c -> a"]);
    assert_eq!(r.edges["a"]["b"], "src/a.rs:2");
    assert_eq!(r.cycles, [vec!["a".to_string(), "b".into(), "c".into()]]);
}

/// A function and a module may share a name: `run::recover()` is the module's.
#[test]
fn a_module_and_a_function_of_one_name_are_told_apart() {
    let r = report(&[
        (
            "src/lib.rs",
            "mod directive;
mod run;
",
        ),
        (
            "src/directive.rs",
            "use crate::run;
fn run() {}
pub fn go() { run(); run::recover(); }
",
        ),
        (
            "src/run.rs",
            "pub fn recover() {}
",
        ),
    ]);
    assert_eq!(edge_list(&r), ["directive -> run"]);
    assert_eq!(r.edges["directive"]["run"], "src/directive.rs:3");
}

/// `use super::*;` and then `b::g()`: `b` is the parent's child module, brought into
/// scope by the glob.
#[test]
fn a_path_through_a_glob_import_is_followed() {
    let r = report(&[
        ("src/lib.rs", "mod m;\n"),
        ("src/m/mod.rs", "mod b;\nmod x;\n"),
        ("src/m/x.rs", "use super::*;\npub fn h() { b::g() }\n"),
        ("src/m/b.rs", "pub fn g() { super::x::h() }\n"),
    ]);
    assert_eq!(edge_list(&r), ["m::b -> m::x", "m::x -> m::b"]);
    assert_eq!(r.edges["m::x"]["m::b"], "src/m/x.rs:2");
    assert_eq!(r.cycles, [vec!["m::b".to_string(), "m::x".into()]]);
    // A glob import of a module that is not an ancestor is a use of it.
    let r = report(&[
        ("src/lib.rs", "mod resource;\nmod validate;\n"),
        ("src/resource.rs", "pub struct Config;\n"),
        ("src/validate.rs", "use crate::resource::*;\n"),
    ]);
    assert_eq!(edge_list(&r), ["validate -> resource"]);
}

#[test]
fn a_crate_path_in_a_macro_is_a_use_of_its_module() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub fn helper() {}\n#[macro_export]\nmacro_rules! call_b {\n    ($x:expr) => { $crate::b::g($x) };\n}\n",
        ),
        (
            "src/b.rs",
            "pub fn g(_: u8) {}\npub fn k() { crate::a::helper() }\n",
        ),
    ]);
    assert_eq!(edge_list(&r), ["a -> b", "b -> a"]);
    assert_eq!(r.edges["a"]["b"], "src/a.rs:4");
    // An exported macro is named at the crate root; its user uses where it is written.
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "#[macro_export]\nmacro_rules! m { () => {} }\n"),
        ("src/b.rs", "fn k() { crate::m!(); }\n"),
    ]);
    assert_eq!(edge_list(&r), ["b -> a"]);
}

#[test]
fn a_path_in_an_attribute_string_is_a_use() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod defaults;\n"),
        (
            "src/a.rs",
            "#[derive(serde::Deserialize)]\n#[serde(try_from = \"crate::defaults::Raw\")]\npub struct S {\n    #[serde(default = \"crate::defaults::port\", rename = \"defaults\")]\n    p: u16,\n}\n",
        ),
        (
            "src/defaults.rs",
            "pub struct Raw;\npub fn port() -> u16 { 1 }\npub fn check(s: &crate::a::S) {}\n",
        ),
    ]);
    assert_eq!(edge_list(&r), ["a -> defaults", "defaults -> a"]);
    assert_eq!(r.edges["a"]["defaults"], "src/a.rs:2");
    assert_eq!(r.cycles.len(), 1);
    // A path written out in an attribute is a use too; its bare words are not.
    let r = report(&[
        (
            "src/lib.rs",
            "mod args;
mod interval;
mod long;
",
        ),
        (
            "src/args.rs",
            "#[derive(clap::Args)]
pub struct A {
    #[arg(long, value_parser = crate::interval::parse)]
    every: u64,
}
",
        ),
        (
            "src/interval.rs",
            "pub fn parse(s: &str) -> u64 { 1 }
",
        ),
        (
            "src/long.rs",
            "pub fn f() {}
",
        ),
    ]);
    assert_eq!(edge_list(&r), ["args -> interval"]);
    assert_eq!(r.edges["args"]["interval"], "src/args.rs:3");
}

#[test]
fn test_only_items_are_left_out() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "#[cfg(test)]\nuse crate::b::X;\n#[cfg(test)]\nfn helper() { crate::b::f() }\npub fn g() {}\nstruct S {\n    #[cfg(test)]\n    x: crate::b::X,\n    y: u8,\n}\n",
        ),
        ("src/b.rs", "pub struct X;\npub fn f() { crate::a::g() }\n"),
    ]);
    assert_eq!(edge_list(&r), ["b -> a"]);
    assert!(r.cycle_messages().is_empty());
}

/// Two top-level modules whose submodules import each other: no module cycle, but the
/// two cannot be layered.
#[test]
fn siblings_that_import_each_other_through_submodules_are_a_cycle() {
    let r = report(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a/mod.rs", "mod x;\nmod z;\n"),
        ("src/a/x.rs", "pub fn f() { crate::b::y::g() }\n"),
        ("src/a/z.rs", "pub fn w() {}\n"),
        ("src/b/mod.rs", "pub mod y;\n"),
        (
            "src/b/y.rs",
            "pub fn g() {}\npub fn h() { crate::a::z::w() }\n",
        ),
    ]);
    assert!(r.cycles.is_empty(), "{:?}", r.cycles);
    let msgs = r.cycle_messages();
    assert_eq!(
        msgs[0].lines().next().unwrap(),
        "synthetic: modules a, b import each other through their submodules: a -> b -> a (strongly connected: a, b)"
    );
    assert!(
        msgs[0].contains("a::x -> b::y  (src/a/x.rs:1)"),
        "{}",
        msgs[0]
    );
    assert!(
        msgs[0].contains("b::y -> a::z  (src/b/y.rs:2)"),
        "{}",
        msgs[0]
    );
}

const LAYERED: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        "mod api;\nmod find;\nmod ids;\nmod rollout;\nmod text;\n",
    ),
    ("src/api.rs", "use crate::find::answer;\n"),
    (
        "src/find.rs",
        "use crate::rollout::Groups;\npub fn answer() {}\n",
    ),
    (
        "src/rollout.rs",
        "use crate::ids::Id;\npub struct Groups;\n",
    ),
    ("src/ids.rs", "pub struct Id;\n"),
    ("src/text.rs", "pub fn one_line() {}\n"),
];

fn layer_problems(files: &[(&str, &str)], doc: &str) -> Vec<String> {
    let r = report(files);
    let layers = layers::parse(doc).unwrap();
    assert_eq!(layers.len(), 1);
    layers::check(&layers[0], &r)
}

#[test]
fn the_stated_layers_hold_or_each_break_is_named() {
    let doc = "# Map\n\nsome prose\n\n```layers synthetic\napi\nfind\nrollout, text\nids\n```\n";
    assert_eq!(layer_problems(LAYERED, doc), Vec::<String>::new());
    // rollout now uses find, which is above it.
    let mut files = LAYERED.to_vec();
    files[3] = (
        "src/rollout.rs",
        "use crate::ids::Id;\npub struct Groups;\nfn f() { crate::find::answer() }\n",
    );
    let problems = layer_problems(&files, doc);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(
        problems[0],
        "synthetic: `rollout` uses `find`, which the layers in ARCHITECTURE.md:5 put above it\n    rollout -> find  (src/rollout.rs:3)"
    );
}

#[test]
fn the_layers_list_every_module_once_and_no_other() {
    let doc = "```layers synthetic\napi gone\nfind\nrollout find\nids\n```\n";
    let problems = layer_problems(LAYERED, doc);
    assert_eq!(
        problems,
        [
            "ARCHITECTURE.md:1: the layers of synthetic list `gone`, which is no module of its root",
            "ARCHITECTURE.md:1: the layers of synthetic list `find` twice",
            "ARCHITECTURE.md:1: the layers of synthetic leave out its module `text`: say which line it is on",
        ]
    );
}

#[test]
fn a_broken_layers_block_is_an_error() {
    let err = layers::parse("```layers\na\n```\n").unwrap_err();
    assert!(err.contains("names no crate"), "{err}");
    let err = layers::parse("x\n```layers synthetic\na\nb\n").unwrap_err();
    assert_eq!(
        err,
        "ARCHITECTURE.md:2: the layers block of synthetic is never closed"
    );
}

/// A file named by `#[path]` is read as rustc reads a `mod.rs`: its modules are the
/// files beside it (tern-core's `domain.rs` declares `src/`'s modules so).
#[test]
fn a_path_attribute_file_declares_the_modules_beside_it() {
    let r = report(&[
        (
            "src/lib.rs",
            "#[path = \"domain.rs\"]\nmod domain;\npub mod gate {\n    pub use crate::domain::gate::answer;\n}\n",
        ),
        (
            "src/domain.rs",
            "pub(crate) mod gate;\npub(crate) mod ids;\n",
        ),
        (
            "src/gate.rs",
            "mod table;\npub fn answer() { table::row() }\n",
        ),
        (
            "src/gate/table.rs",
            "pub(super) fn row() { crate::domain::ids::f() }\n",
        ),
        ("src/ids.rs", "pub fn f() {}\n"),
    ]);
    assert_eq!(
        edge_list(&r),
        [
            "domain::gate -> domain::gate::table",
            "domain::gate::table -> domain::ids",
        ]
    );
    // The facade's `pub use` alone is no use; the files were all found.
    assert!(r.modules.contains("domain::gate::table"), "{:?}", r.modules);
}

/// ```` ```layers CRATE::m ```` orders the children of `m`, as a crate's block orders
/// its root's.
#[test]
fn a_layers_block_may_order_a_modules_children() {
    let files = [
        (
            "src/lib.rs",
            "#[path = \"domain.rs\"]\nmod domain;\npub mod gate {\n    pub use crate::domain::gate::answer;\n}\n",
        ),
        (
            "src/domain.rs",
            "pub(crate) mod gate;\npub(crate) mod ids;\n",
        ),
        (
            "src/gate.rs",
            "pub fn answer() { crate::domain::ids::f() }\n",
        ),
        ("src/ids.rs", "pub fn f() {}\n"),
    ];
    let ok = "```layers synthetic::domain\ngate\nids\n```\n";
    assert_eq!(layer_problems(&files, ok), Vec::<String>::new());
    let wrong = "```layers synthetic::domain\nids\ngate, extra\n```\n";
    assert_eq!(
        layer_problems(&files, wrong),
        [
            "ARCHITECTURE.md:1: the layers of synthetic::domain list `extra`, which is no module of its root",
            "synthetic::domain: `gate` uses `ids`, which the layers in ARCHITECTURE.md:1 put above it\n    domain::gate -> domain::ids  (src/gate.rs:1)",
        ]
    );
}
