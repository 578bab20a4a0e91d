//! The runner against real child processes (`/bin/sh`, `sleep`, `setsid`).

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_process::{Cancel, End, Error, MAX_LINE, Options, Stream, run, spawn};

const LONG: Duration = Duration::from_secs(60);

fn sh(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c").arg(script);
    c
}

/// Whether `pid` runs (a zombie, killed and waiting for its reaper, does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits, with a deadline, until `pid` no longer runs; whether it stopped.
fn gone_within(pid: u32, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    while alive(pid) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The pid a script wrote to `file`, waiting (with a deadline) for it to be written.
fn pid_in(file: &Path) -> u32 {
    let until = Instant::now() + LONG;
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < until, "{} never written", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

#[test]
fn an_exit_code_and_both_outputs_are_reported() {
    let f = run(
        &mut sh("echo out; echo err >&2; exit 3"),
        Options::new(LONG).keep(1024, 1024),
    )
    .unwrap();
    assert_eq!(f.end, End::Exited(3));
    assert!(!f.success());
    assert_eq!(f.stdout.text(), "out\n");
    assert_eq!(f.stderr.text(), "err\n");
    assert!(!f.output_left_open);
    let ok = run(&mut sh("true"), Options::new(LONG)).unwrap();
    assert!(ok.success());
}

#[test]
fn a_signal_is_reported_as_such() {
    let f = run(&mut sh("kill -TERM $$"), Options::new(LONG)).unwrap();
    assert_eq!(f.end, End::Signalled(15));
    assert_eq!(f.end.to_string(), "killed by signal 15");
}

#[test]
fn a_program_that_cannot_start_is_named() {
    let e = run(
        &mut Command::new("/nonexistent/tern-no-such-program"),
        Options::new(LONG),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Spawn { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("cannot start /nonexistent/tern-no-such-program: "),
        "{e}"
    );
}

#[test]
fn at_its_deadline_the_child_is_killed_with_its_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = format!(
        "sleep 100 & echo $! > '{}'; echo 'still going' >&2; sleep 100",
        pidfile.display()
    );
    let f = run(
        &mut sh(&script),
        Options::new(Duration::from_secs(1)).keep(1024, 1024),
    )
    .unwrap();
    assert_eq!(f.end, End::TimedOut(Duration::from_secs(1)));
    assert_eq!(
        f.end.to_string(),
        "no end after 1s: killed with its process group"
    );
    // What it wrote before the kill is still read.
    assert_eq!(f.stderr.text(), "still going\n");
    let child = pid_in(&pidfile);
    assert!(
        gone_within(child, LONG),
        "the background child {child} survived"
    );
}

#[test]
fn what_the_child_left_in_its_group_dies_with_it_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let left = |kill_after: bool, name: &str| {
        let pidfile = dir.path().join(name);
        let script = format!(
            "sleep 100 >/dev/null 2>&1 & echo $! > '{}'",
            pidfile.display()
        );
        let mut o = Options::new(LONG);
        if kill_after {
            o = o.kill_group_after_exit();
        }
        let f = run(&mut sh(&script), o).unwrap();
        assert_eq!(f.end, End::Exited(0));
        pid_in(&pidfile)
    };
    let killed = left(true, "killed.pid");
    assert!(
        gone_within(killed, LONG),
        "{killed} survived its group's kill"
    );
    let kept = left(false, "kept.pid");
    let still = alive(kept);
    kill(kept);
    assert!(
        still,
        "{kept} was killed though the group was to be left alone"
    );
}

#[test]
fn a_process_that_left_the_group_holding_the_output_does_not_hold_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("escaped.pid");
    // setsid: a session and group of its own, which no group kill reaches; its stdout
    // is the child's pipe. The child waits for its pid file (written after the setsid)
    // before it ends, or the group kill after its end could catch the process still in
    // the group, before its setsid.
    let script = format!(
        "setsid sh -c 'echo $$ > \"{0}\"; exec sleep 100' & \
         while [ ! -s \"{0}\" ]; do sleep 0.01; done; echo started",
        pidfile.display()
    );
    let f = run(
        &mut sh(&script),
        Options::new(LONG).kill_group_after_exit().keep(1024, 0),
    )
    .unwrap();
    let escaped = pid_in(&pidfile);
    kill(escaped);
    assert_eq!(f.end, End::Exited(0));
    assert!(f.output_left_open);
    assert_eq!(f.stdout.text(), "started\n");
}

#[test]
fn output_is_bounded_to_its_start_and_end() {
    let f = run(
        &mut sh("printf start; head -c 1000000 /dev/zero | tr '\\0' x; printf end"),
        Options::new(LONG).keep(5, 3),
    )
    .unwrap();
    assert!(f.success());
    assert_eq!(f.stdout.head, b"start");
    assert_eq!(f.stdout.tail, b"end");
    assert_eq!(f.stdout.dropped, 1_000_000);
    assert_eq!(f.stdout.text(), "start\n…\nend");
}

#[test]
fn read_after_exit_makes_a_child_that_fills_its_pipe_hang() {
    let flood = "head -c 300000 /dev/zero; echo done >&2";
    let read_late = run(
        &mut sh(flood),
        Options::new(Duration::from_secs(1))
            .read_after_exit()
            .keep(16, 0),
    )
    .unwrap();
    assert_eq!(read_late.end, End::TimedOut(Duration::from_secs(1)));
    let read_along = run(&mut sh(flood), Options::new(LONG).keep(16, 0)).unwrap();
    assert!(read_along.success(), "{:?}", read_along.end);
    assert_eq!(read_along.stderr.text(), "done\n");
    // A short answer is read after the end as it would be along the way.
    let short = run(
        &mut sh("echo answer"),
        Options::new(LONG).read_after_exit().keep(16, 0),
    )
    .unwrap();
    assert!(short.success());
    assert_eq!(short.stdout.text(), "answer\n");
}

#[test]
fn each_line_reaches_the_sink_as_it_comes_cut_when_too_long() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&lines);
    let sink = Arc::new(move |stream: Stream, line: &[u8], cut: bool| {
        seen.lock()
            .unwrap()
            .push((stream, String::from_utf8_lossy(line).into_owned(), cut));
    });
    let f = run(
        &mut sh(&format!(
            "echo one; echo two >&2; head -c {} /dev/zero | tr '\\0' y; echo; printf last",
            MAX_LINE + 10
        )),
        Options::new(LONG).on_line(sink),
    )
    .unwrap();
    assert!(f.success());
    let lines = lines.lock().unwrap();
    let stdout: Vec<_> = lines.iter().filter(|l| l.0 == Stream::Stdout).collect();
    assert_eq!(stdout.len(), 3, "{stdout:?}");
    assert_eq!((stdout[0].1.as_str(), stdout[0].2), ("one", false));
    assert_eq!(stdout[1].1, "y".repeat(MAX_LINE));
    assert!(stdout[1].2, "the long line is marked cut");
    assert_eq!((stdout[2].1.as_str(), stdout[2].2), ("last", false));
    assert!(lines.contains(&(Stream::Stderr, "two".into(), false)));
}

#[test]
fn a_cancel_kills_the_group_and_says_so() {
    let cancel = Cancel::new();
    let running = spawn(
        &mut sh("sleep 100"),
        Options::new(LONG).cancel(cancel.clone()),
    )
    .unwrap();
    let pid = running.id();
    let waiter = std::thread::spawn(move || running.wait());
    assert!(alive(pid));
    cancel.cancel();
    let f = waiter.join().unwrap().unwrap();
    assert_eq!(f.end, End::Cancelled);
    assert!(gone_within(pid, LONG));
}
