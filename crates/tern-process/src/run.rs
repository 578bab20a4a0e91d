use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::Pid;

use crate::capture::{Capture, Captured, pump};
use crate::error::Error;
use crate::options::{Options, Stream};

/// How long the output is still read once the child ended (and its group was killed,
/// when it is). A process that left the group may hold a pipe open: it is not waited
/// for longer.
pub const DRAIN: Duration = Duration::from_secs(2);

/// How often a running child is looked at.
const POLL: Duration = Duration::from_millis(20);

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Exited(i32),
    Signalled(i32),
    /// Still running at its deadline: killed with its process group.
    TimedOut(Duration),
    /// [`Cancel`](crate::Cancel)led: killed with its process group.
    Cancelled,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "exited with {code}"),
            Self::Signalled(signal) => write!(f, "killed by signal {signal}"),
            Self::TimedOut(after) => write!(
                f,
                "no end after {}s: killed with its process group",
                after.as_secs_f64()
            ),
            Self::Cancelled => write!(f, "cancelled: killed with its process group"),
        }
    }
}

/// A child's end and what was kept of its output.
#[derive(Clone, Debug)]
pub struct Finished {
    pub end: End,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The output was still open [`DRAIN`] after the end (a process that left the group
    /// holds it): it was not read further.
    pub output_left_open: bool,
}

impl Finished {
    /// It exited with 0.
    pub fn success(&self) -> bool {
        self.end == End::Exited(0)
    }
}

/// A child started by [`spawn`], until [`wait`](Running::wait) says how it ended.
pub struct Running {
    child: Child,
    program: String,
    options: Options,
    deadline: Option<Instant>,
    /// Read from [`Running::wait`] on, so that what the caller does between (logging
    /// that the child started) comes before any line of its output.
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

struct Readers {
    stdout: Arc<Mutex<Capture>>,
    stderr: Arc<Mutex<Capture>>,
    done: Receiver<()>,
    count: usize,
}

impl Readers {
    fn start(stdout: Option<ChildStdout>, stderr: Option<ChildStderr>, o: &Options) -> Self {
        let capture = || Arc::new(Mutex::new(Capture::new(o.keep_head, o.keep_tail)));
        let (tx, done) = std::sync::mpsc::channel();
        let readers = Self {
            stdout: capture(),
            stderr: capture(),
            done,
            count: usize::from(stdout.is_some()) + usize::from(stderr.is_some()),
        };
        if let Some(pipe) = stdout {
            let c = Arc::clone(&readers.stdout);
            pump(pipe, Stream::Stdout, c, o.on_line.clone(), tx.clone());
        }
        if let Some(pipe) = stderr {
            let c = Arc::clone(&readers.stderr);
            pump(pipe, Stream::Stderr, c, o.on_line.clone(), tx);
        }
        readers
    }

    /// Waits at most [`DRAIN`] for both streams' ends; false when one is still open.
    fn drain(&self) -> bool {
        let until = Instant::now() + DRAIN;
        for _ in 0..self.count {
            let left = until.saturating_duration_since(Instant::now());
            if self.done.recv_timeout(left).is_err() {
                return false;
            }
        }
        true
    }

    fn captured(c: &Mutex<Capture>) -> Captured {
        c.lock().map(|c| c.captured()).unwrap_or_default()
    }
}

/// Starts `cmd` (its program, arguments, environment and directory as the caller set
/// them) with stdin closed, its output piped, in a process group of its own.
pub fn spawn(cmd: &mut Command, options: Options) -> Result<Running, Error> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
    Ok(Running {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        child,
        program,
        // None: a timeout past the clock's end, which is no deadline.
        deadline: Instant::now().checked_add(options.timeout),
        options,
    })
}

/// [`spawn`] then [`Running::wait`].
pub fn run(cmd: &mut Command, options: Options) -> Result<Finished, Error> {
    spawn(cmd, options)?.wait()
}

/// Whether the child has exited, without reaping it: its pid (the group's id) stays
/// reserved until it is reaped, so killing the group never hits a stranger.
fn exited(pid: Pid) -> std::io::Result<bool> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    Ok(waitid(WaitId::Pid(pid), options)
        .map_err(std::io::Error::from)?
        .is_some())
}

impl Running {
    /// The child's pid (and its process group's id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child's end, its deadline or a cancel; kills its group at the
    /// deadline or cancel (and after the end when asked); reads what is left of the
    /// output for at most [`DRAIN`].
    pub fn wait(mut self) -> Result<Finished, Error> {
        let wait_err = |source| Error::Wait {
            program: self.program.clone(),
            source,
        };
        let pid = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw);
        let mut pipes = (self.stdout.take(), self.stderr.take());
        let mut readers = None;
        if !self.options.read_after_exit {
            readers = Some(Readers::start(
                pipes.0.take(),
                pipes.1.take(),
                &self.options,
            ));
        }
        let mut stopped = None;
        loop {
            let gone = match pid {
                Some(pid) => exited(pid).map_err(wait_err)?,
                None => self.child.try_wait().map_err(wait_err)?.is_some(),
            };
            if gone {
                break;
            }
            if self
                .options
                .cancel
                .as_ref()
                .is_some_and(|c| c.is_cancelled())
            {
                stopped = Some(End::Cancelled);
                break;
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                stopped = Some(End::TimedOut(self.options.timeout));
                break;
            }
            std::thread::sleep(POLL);
        }
        // Before reaping: see `exited`.
        if stopped.is_some() || self.options.kill_group_after_exit {
            match pid {
                Some(pid) => {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                None => {
                    let _ = self.child.kill();
                }
            }
        }
        let status = self.child.wait().map_err(wait_err)?;
        let readers = readers
            .unwrap_or_else(|| Readers::start(pipes.0.take(), pipes.1.take(), &self.options));
        let output_left_open = !readers.drain();
        let end = stopped.unwrap_or_else(|| match (status.code(), status.signal()) {
            (Some(code), _) => End::Exited(code),
            (None, Some(signal)) => End::Signalled(signal),
            // Unix says one or the other; were it neither, it did not exit well.
            (None, None) => End::Exited(-1),
        });
        Ok(Finished {
            end,
            stdout: Readers::captured(&readers.stdout),
            stderr: Readers::captured(&readers.stderr),
            output_left_open,
        })
    }
}
