use std::collections::VecDeque;
use std::io::Read;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use crate::options::{LineSink, Stream};

/// A line longer than this reaches the [`LineSink`] cut (the rest of it is dropped).
pub const MAX_LINE: usize = 4096;

/// What was kept of one output stream: its start and its end, bounded by
/// [`Options::keep`](crate::Options::keep).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes the stream carried.
    pub head: Vec<u8>,
    /// The last bytes after `head`.
    pub tail: Vec<u8>,
    /// How many bytes between `head` and `tail` were dropped.
    pub dropped: u64,
}

impl Captured {
    /// The bytes kept, in order (with a gap where `dropped` says so).
    pub fn bytes(&self) -> Vec<u8> {
        let mut all = self.head.clone();
        all.extend_from_slice(&self.tail);
        all
    }

    /// The text kept (invalid UTF-8 replaced); a line `…` stands where bytes were dropped.
    pub fn text(&self) -> String {
        if self.dropped == 0 {
            return String::from_utf8_lossy(&self.bytes()).into_owned();
        }
        format!(
            "{}\n…\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&self.tail)
        )
    }
}

/// One stream's buffers while it is read.
#[derive(Debug)]
pub(crate) struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl Capture {
    pub(crate) fn new(head_cap: usize, tail_cap: usize) -> Self {
        Self {
            head_cap,
            tail_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let room = self.head_cap.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        if rest.len() >= self.tail_cap {
            let skipped = rest.len() - self.tail_cap;
            self.dropped = self
                .dropped
                .saturating_add((self.tail.len() + skipped) as u64);
            self.tail.clear();
            self.tail.extend(&rest[skipped..]);
        } else {
            self.tail.extend(rest);
            let over = self.tail.len().saturating_sub(self.tail_cap);
            self.tail.drain(..over);
            self.dropped = self.dropped.saturating_add(over as u64);
        }
    }

    pub(crate) fn captured(&self) -> Captured {
        Captured {
            head: self.head.clone(),
            tail: self.tail.iter().copied().collect(),
            dropped: self.dropped,
        }
    }
}

/// Reads `pipe` to its end on a thread of its own into `capture`, each line to `sink`;
/// says so on `done`. The thread is never joined: a process that left the child's group
/// may hold the pipe open for ever, and the caller stops waiting (see `DRAIN`).
pub(crate) fn pump(
    mut pipe: impl Read + Send + 'static,
    stream: Stream,
    capture: Arc<Mutex<Capture>>,
    sink: Option<LineSink>,
    done: Sender<()>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut line: Vec<u8> = Vec::new();
        let mut cut = false;
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            if let Ok(mut c) = capture.lock() {
                c.push(&buf[..n]);
            }
            let Some(sink) = &sink else { continue };
            for &b in &buf[..n] {
                if b == b'\n' {
                    sink(stream, &line, cut);
                    line.clear();
                    cut = false;
                } else if line.len() < MAX_LINE {
                    line.push(b);
                } else {
                    cut = true;
                }
            }
        }
        if let Some(sink) = &sink
            && !line.is_empty()
        {
            sink(stream, &line, cut);
        }
        let _ = done.send(());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(head: usize, tail: usize, chunks: &[&[u8]]) -> Captured {
        let mut c = Capture::new(head, tail);
        for chunk in chunks {
            c.push(chunk);
        }
        c.captured()
    }

    #[test]
    fn the_start_and_the_end_are_kept_and_the_middle_counted() {
        let c = pushed(3, 4, &[b"abcdefghij"]);
        assert_eq!(
            (c.head.as_slice(), c.tail.as_slice()),
            (&b"abc"[..], &b"ghij"[..])
        );
        assert_eq!(c.dropped, 3);
        assert_eq!(c.text(), "abc\n…\nghij");
        // The same bytes in small chunks keep the same.
        let bytes = b"abcdefghij";
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(pushed(3, 4, &chunks), c);
    }

    #[test]
    fn what_fits_is_kept_whole() {
        let c = pushed(4, 4, &[b"abc", b"def"]);
        assert_eq!(c.dropped, 0);
        assert_eq!(c.text(), "abcdef");
        assert_eq!(pushed(0, 0, &[b"abc"]).dropped, 3);
    }
}
