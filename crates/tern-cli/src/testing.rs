//! Checks of these conventions against a real binary, run by each binary's integration
//! tests (cargo feature `testing`, enabled only as a dev-dependency). Like any test
//! code they panic with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::path::Path;
use std::process::{Command, Output};

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
}

fn name_of(bin: &Path) -> String {
    bin.file_name().unwrap().to_string_lossy().into_owned()
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The whole words of a script (names, flags), for checks that a substring would pass
/// by accident.
fn words(script: &str) -> Vec<&str> {
    script
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// `BIN [prefix…] completion bash|zsh|fish` each print a script for BIN that offers
/// `subcommands`; bash completes the first of them from its first two letters; an
/// unknown shell is refused with exit status 2, naming the shells there are; `__man`
/// is offered nowhere. `prefix` goes before `completion` (flags that would make any
/// other command fail, to show that completion reads nothing).
pub fn check_completions(bin: &Path, prefix: &[&str], subcommands: &[&str]) {
    let name = name_of(bin);
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let mut args = prefix.to_vec();
        args.extend(["completion", shell]);
        let out = run(bin, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{name} {args:?} failed ({}): {stderr}",
            out.status
        );
        let script = String::from_utf8(out.stdout).unwrap();
        // What registers the script for BIN (bash's function name is clap_complete's
        // own spelling of BIN, so only the command it completes is checked).
        let registered = script.lines().map(str::trim).any(|l| match shell {
            "bash" => l.starts_with("complete -F ") && l.ends_with(&format!(" {name}")),
            "zsh" => l == format!("#compdef {name}"),
            _ => l.starts_with(&format!("complete -c {name} ")),
        });
        assert!(registered, "{shell}: nothing registers {name} in\n{script}");
        let words = words(&script);
        for sub in subcommands {
            assert!(words.contains(sub), "{shell}: {sub} is not offered");
        }
        // As a word of its own: a visible `man` subcommand is spelled `BIN__man` in
        // clap_complete's function names, which offers nothing.
        assert!(!words.contains(&crate::MAN_ARG), "{shell}: offers __man");
        let file = dir.path().join(format!("{name}.{shell}"));
        std::fs::write(&file, &script).unwrap();
        syntax_check(shell, &file);
    }
    if let Some(first) = subcommands.first() {
        bash_completes(&name, &dir.path().join(format!("{name}.bash")), first);
    }

    let mut args = prefix.to_vec();
    args.extend(["completion", "tcsh"]);
    let out = run(bin, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name} completion tcsh: {stderr}"
    );
    assert!(out.stdout.is_empty(), "a refused shell prints no script");
    assert!(
        stderr.contains("invalid value 'tcsh'") && stderr.contains("bash, "),
        "the refusal names the shell and the shells there are: {stderr}"
    );
}

/// `bash -n` / `zsh -n` / `fish --no-execute` on a script, when that shell is installed.
fn syntax_check(shell: &str, file: &Path) {
    if !have(shell) {
        // Not a failure: the script is still checked for its content above.
        eprintln!("skipped: {shell} is not installed, its script's syntax is not checked");
        return;
    }
    let flag = if shell == "fish" {
        "--no-execute"
    } else {
        "-n"
    };
    let out = Command::new(shell).arg(flag).arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{shell} {flag} {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sources the bash script and asks its completion function for `BIN <2 letters><TAB>`,
/// as bash would: `sub` must be among the answers.
fn bash_completes(name: &str, script: &Path, sub: &str) {
    if !have("bash") {
        eprintln!("skipped: bash is not installed, its completion is not exercised");
        return;
    }
    let typed = &sub[..2.min(sub.len())];
    let probe = format!(
        r#"source "$1"
fn=$(complete -p {name} | sed -E 's/.* -F ([^ ]+) .*/\1/')
COMP_WORDS=({name} {typed})
COMP_CWORD=1
COMP_LINE="{name} {typed}"
COMP_POINT=${{#COMP_LINE}}
"$fn" {name} {typed} {name}
printf '%s\n' "${{COMPREPLY[@]}}"
"#
    );
    let out = Command::new("bash")
        .args(["-c", &probe, "probe"])
        .arg(script)
        .output()
        .unwrap();
    let answers = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && answers.lines().any(|l| l == sub),
        "bash offers {answers:?} for `{name} {typed}<TAB>`, not {sub}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The text of a man page as written (roff escapes `-` as `\-`).
fn page_text(page: &Path) -> String {
    std::fs::read_to_string(page)
        .unwrap_or_else(|e| panic!("no page {}: {e}", page.display()))
        .replace("\\-", "-")
}

/// `BIN __man DIR` writes a page per command: each of `pages` (file name, a help text
/// it must contain) is there, every page is BIN's, `help` and `__man` have none; a
/// request without DIR is a usage error. When `man` is installed, the first page is
/// rendered too.
pub fn check_man_pages(bin: &Path, pages: &[(&str, &str)]) {
    let name = name_of(bin);
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man");
    let out = run(bin, &[crate::MAN_ARG, out_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{name} __man: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (page, help) in pages {
        let text = page_text(&out_dir.join(page));
        assert!(
            text.contains(&format!(".TH {}", page.trim_end_matches(".1"))),
            "{page} is not titled after its command:\n{text}"
        );
        assert!(text.contains(help), "{page} lacks {help:?}:\n{text}");
    }
    for entry in std::fs::read_dir(&out_dir).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            file == format!("{name}.1")
                || (file.starts_with(&format!("{name}-")) && file.ends_with(".1")),
            "a page that is not {name}'s: {file}"
        );
        assert!(
            !file.contains("-help") && !file.contains(crate::MAN_ARG),
            "a page for {file}"
        );
    }

    let out = run(bin, &[crate::MAN_ARG]);
    assert_eq!(out.status.code(), Some(2), "{name} __man without DIR");
    assert!(String::from_utf8_lossy(&out.stderr).contains("__man DIR"));

    if let Some((page, help)) = pages.first() {
        render(&out_dir.join(page), help);
    }
}

/// Renders a page with man(1) and finds `help` in what a reader sees.
fn render(page: &Path, help: &str) {
    if !have("man") {
        eprintln!(
            "skipped: man is not installed, {} is not rendered",
            page.display()
        );
        return;
    }
    let out = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "200")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "man -l {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("NAME") && shown.contains(help),
        "man -l {} shows no NAME or {help:?}:\n{shown}",
        page.display()
    );
}
