//! Child processes under test: start, find their address, read their CPU time and
//! memory from `/proc`, and kill them (by PID, never by name) when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A server process that prints `... listening on [http://]ADDR` on stdout.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    pub fn spawn(mut cmd: Command) -> anyhow::Result<Self> {
        cmd.stdout(Stdio::piped()).stdin(Stdio::null());
        let shown = format!("{cmd:?}");
        let mut child = cmd.spawn().with_context(|| format!("cannot run {shown}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut sent = false;
            while let Some(Ok(line)) = lines.next() {
                if !sent && let Some(rest) = line.split("listening on ").nth(1) {
                    let addr = rest.trim().trim_start_matches("http://").to_string();
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let mut server = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .with_context(|| format!("{shown} did not say where it listens"))?;
        server.addr = addr
            .parse()
            .with_context(|| format!("bad address {addr:?}"))?;
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `GET path` answers 200.
    pub fn wait_ready(&self, path: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok((200, _)) = crate::load::request(self.addr, "GET", path, None, b"") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the server at {} never became ready", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU time of a process (all its threads), from `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let (user, system) = cpu_times(pid)?;
    Ok(user + system)
}

/// User and system CPU time of a process (all its threads), apart.
pub fn cpu_times(pid: u32) -> anyhow::Result<(Duration, Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').context("bad /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = f.get(11).context("no utime")?.parse()?;
    let stime: u64 = f.get(12).context("no stime")?.parse()?;
    let hz = clock_ticks();
    Ok((
        Duration::from_secs_f64(utime as f64 / hz),
        Duration::from_secs_f64(stime as f64 / hz),
    ))
}

fn clock_ticks() -> f64 {
    // Linux reports /proc times in USER_HZ, 100 on every architecture Tern targets.
    100.0
}

/// A field of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
pub fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    let kb: u64 = line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kb * 1024)
}

/// Resident memory now, in bytes.
pub fn rss(pid: u32) -> anyhow::Result<u64> {
    status_bytes(pid, "VmRSS")
}

/// Runs `cmd` to completion, sampling its peak resident memory (`VmHWM`) every few
/// milliseconds. Returns wall time, exit success and peak RSS in bytes.
pub fn run_measured(mut cmd: Command) -> anyhow::Result<(Duration, bool, u64, String)> {
    let shown = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("cannot run {shown}"))?;
    let pid = child.id();
    let mut out = child.stdout.take().context("no stdout")?;
    let mut err = child.stderr.take().context("no stderr")?;
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let mut e = String::new();
        let _ = err.read_to_string(&mut e);
        s + &e
    });
    let mut peak = 0;
    let status = loop {
        if let Ok(hwm) = status_bytes(pid, "VmHWM") {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let elapsed = start.elapsed();
    let text = reader.join().unwrap_or_default();
    Ok((elapsed, status.success(), peak, text))
}

/// Load average over the last minute (for the record).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}
