//! The command-line conventions every Tern binary follows (ternctl, ternd, tern-update,
//! tern-lockstep), written once so that they behave alike:
//!
//! - `BIN completion SHELL` prints a completion script ([`CompletionArgs`],
//!   [`completion_script`]);
//! - `BIN __man DIR` writes the man pages, for `cargo xtask man` ([`man_pages_if_asked`]);
//! - `--log-format text|json` ([`LogFormat`]).
//!
//! The crate knows no binary's commands: each passes its own `clap::Command`, so the
//! scripts and pages always follow the definitions the binary parses with.

use std::ffi::OsString;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
pub use clap_complete::Shell;

#[cfg(feature = "testing")]
pub mod testing;

/// The arguments of `completion`.
#[derive(Args, Clone, Debug)]
pub struct CompletionArgs {
    /// The shell: bash, zsh or fish (elvish and powershell work too).
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// The completion script of `cmd` for `shell`, named after the command.
///
/// It is built in memory and printed by the caller: clap_complete panics when its
/// writer fails, and a closed stdout (`… | head`) must not make a binary panic.
pub fn completion_script(mut cmd: clap::Command, shell: Shell) -> Vec<u8> {
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    script
}

/// Prints [`completion_script`] to stdout. A reader that goes away early
/// (`… completion bash | head`) is no error: it had what it wanted.
pub fn print_completion(cmd: clap::Command, shell: Shell) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out
        .write_all(&completion_script(cmd, shell))
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}

/// The first argument that asks a binary for its man pages: `BIN __man DIR`.
///
/// It is read before clap parses, and is no clap subcommand: clap_complete's scripts
/// offer hidden subcommands and flags too, so a hidden `__man` would show up on every
/// `BIN <TAB>`. Running the binary (rather than linking every binary's definitions into
/// xtask) keeps each `Cli` private to its binary, and the pages are exactly what that
/// binary parses.
pub const MAN_ARG: &str = "__man";

/// What a command line asks of the man pages: nothing (`None`), the pages written to a
/// directory, or a malformed request (the usage to print).
pub fn man_request<I>(args: I) -> Option<Result<PathBuf, String>>
where
    I: IntoIterator<Item = OsString>,
{
    let mut args = args.into_iter().skip(1);
    if args.next()? != MAN_ARG {
        return None;
    }
    let usage = || format!("usage: {MAN_ARG} DIR (writes one man page per command into DIR)");
    Some(match (args.next(), args.next()) {
        (Some(dir), None) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => Err(usage()),
    })
}

/// Writes the man pages of `cmd` into `dir` (created if absent): `NAME.1` for the
/// command and `NAME-SUB.1`, `NAME-SUB-SUBSUB.1`… for every subcommand but hidden ones.
pub fn write_man_pages(cmd: clap::Command, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Building the command names each subcommand's page (`ternctl-agents`) and passes
    // global options down to every page; `help` gets no page (`BIN help X` is X's help).
    clap_mangen::generate_to(cmd.disable_help_subcommand(true), dir)
}

/// Answers `BIN __man DIR` (see [`MAN_ARG`]) with the man pages of the command `cmd`
/// builds: `Some` exit status (0, 1 when a page cannot be written, 2 for a malformed
/// request), each message on stderr; `None` when the command line asks for something
/// else, and the binary goes on to parse it.
pub fn man_pages_if_asked(cmd: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let request = man_request(std::env::args_os())?;
    let cmd = cmd();
    let name = cmd.get_name().to_string();
    Some(match request {
        Ok(dir) => match write_man_pages(cmd, &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: error: writing man pages to {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        },
        Err(usage) => {
            eprintln!("{name}: {usage}");
            ExitCode::from(2)
        }
    })
}

/// Sends tracing's events to stderr, filtered by `filter` (tracing's EnvFilter syntax)
/// and written as `format` says; colours only on a terminal. A filter that does not
/// parse is an error, and nothing is set up.
#[cfg(feature = "logs")]
pub fn init_logs(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| format!("the log filter {filter:?}: {e}"))?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    Ok(())
}

/// This machine's host name (Linux), or `fallback`: a default name for a replica in a
/// lease or a server in a report.
pub fn host_name(fallback: &str) -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

/// `--log-format`: how a binary writes its logs to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people and the journal.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, fields (the message among them),
    /// target.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    /// A command tree like the binaries': a subcommand with subcommands of its own, a
    /// hidden one, and a global flag.
    fn demo() -> Command {
        Command::new("demo")
            .about("A demo tool")
            .arg(
                Arg::new("server")
                    .long("server")
                    .global(true)
                    .help("Where the server is"),
            )
            .subcommand(
                Command::new("agents")
                    .about("The agent rollout")
                    .subcommand(Command::new("start").about("Start groups now"))
                    .subcommand(Command::new("done").about("Mark groups done")),
            )
            .subcommand(Command::new("plan").about("Plan offline"))
            .subcommand(Command::new("secret").about("Not for people").hide(true))
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_a_leading_man_arg_is_a_request() {
        assert_eq!(man_request(args(&["demo", "agents", "start"])), None);
        assert_eq!(man_request(args(&["demo"])), None);
        // `__man` further on is an ordinary argument (a group named so, say).
        assert_eq!(
            man_request(args(&["demo", "agents", "start", "__man"])),
            None
        );
        assert_eq!(
            man_request(args(&["demo", "__man", "out/man"])),
            Some(Ok(PathBuf::from("out/man")))
        );
    }

    #[test]
    fn a_man_request_takes_exactly_one_directory() {
        for bad in [
            &["demo", "__man"][..],
            &["demo", "__man", ""],
            &["demo", "__man", "a", "b"],
        ] {
            let answer = man_request(args(bad));
            assert!(
                matches!(&answer, Some(Err(usage)) if usage.contains("__man DIR")),
                "{bad:?}: {answer:?}"
            );
        }
    }

    #[test]
    fn every_visible_command_gets_a_page_with_its_help() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("not/yet/there");
        write_man_pages(demo(), &out).unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        pages.sort();
        assert_eq!(
            pages,
            [
                "demo-agents-done.1",
                "demo-agents-start.1",
                "demo-agents.1",
                "demo-plan.1",
                "demo.1"
            ]
        );
        let page = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
        assert!(page("demo.1").contains("A demo tool"));
        assert!(page("demo-agents.1").contains("The agent rollout"));
        // The parent page lists its subcommands; the hidden one appears nowhere.
        assert!(page("demo-agents.1").contains("Start groups now"));
        assert!(!page("demo.1").contains("secret"));
        assert!(page("demo-agents-start.1").contains("Start groups now"));
        // Global options are documented on every page that takes them.
        assert!(page("demo-agents-start.1").contains("Where the server is"));
    }

    #[test]
    fn completion_scripts_name_the_subcommands() {
        let bash = String::from_utf8(completion_script(demo(), Shell::Bash)).unwrap();
        assert!(bash.contains("complete -F _demo"), "{bash}");
        assert!(bash.contains("agents") && bash.contains("start"), "{bash}");
        let zsh = String::from_utf8(completion_script(demo(), Shell::Zsh)).unwrap();
        assert!(zsh.starts_with("#compdef demo"), "{zsh}");
        let fish = String::from_utf8(completion_script(demo(), Shell::Fish)).unwrap();
        assert!(fish.contains("complete -c demo"), "{fish}");
        assert!(fish.contains("Start groups now"), "{fish}");
    }
}
