use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which of the child's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Called from the reading thread with each line (without its `\n`) as it is read, and
/// whether it was cut at [`MAX_LINE`](crate::MAX_LINE) bytes.
pub type LineSink = Arc<dyn Fn(Stream, &[u8], bool) + Send + Sync>;

/// Asks a running child to stop: its group is killed at the next look, and it ends as
/// [`End::Cancelled`](crate::End::Cancelled). Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How one child is run: what the callers of [`run`](crate::run) differ in.
#[derive(Clone)]
pub struct Options {
    pub(crate) timeout: Duration,
    pub(crate) kill_group_after_exit: bool,
    pub(crate) read_after_exit: bool,
    pub(crate) keep_head: usize,
    pub(crate) keep_tail: usize,
    pub(crate) on_line: Option<LineSink>,
    pub(crate) cancel: Option<Cancel>,
}

impl Options {
    /// The child may run `timeout`; its group is then killed. Nothing of the output is
    /// kept until [`keep`](Self::keep) says how much.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            kill_group_after_exit: false,
            read_after_exit: false,
            keep_head: 0,
            keep_tail: 0,
            on_line: None,
            cancel: None,
        }
    }

    /// Kills what is left of the child's process group once the child itself ended (as
    /// systemd kills a unit's cgroup): what it started in the background dies with it.
    /// Without it, only a timeout or a cancel kills the group, so that a program may
    /// leave a service it started running.
    pub fn kill_group_after_exit(mut self) -> Self {
        self.kill_group_after_exit = true;
        self
    }

    /// Reads the output only once the child ended: a child that writes more than a pipe
    /// holds (64 KiB) blocks, and ends as timed out. For a check that must answer
    /// briefly, where flooding output is itself a failure.
    pub fn read_after_exit(mut self) -> Self {
        self.read_after_exit = true;
        self
    }

    /// Keeps, of each stream, its first `head` bytes and its last `tail` bytes after
    /// those; the bytes between are read, counted and dropped.
    pub fn keep(mut self, head: usize, tail: usize) -> Self {
        self.keep_head = head;
        self.keep_tail = tail;
        self
    }

    /// Hands each line to `sink` as it is read (logging it live, say).
    pub fn on_line(mut self, sink: LineSink) -> Self {
        self.on_line = Some(sink);
        self
    }

    /// Stops the child when `cancel` is set.
    pub fn cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }
}
