//! `tern-demo-agent STATE_DIR`: a tiny real agent for the demo and the end-to-end tests.
//!
//! Its version and behaviour are compiled in from environment variables read by
//! `rustc` (the e2e harness compiles one binary per release with `rustc` directly):
//!
//! - `TERN_DEMO_AGENT_VERSION`: the version it announces (default `0.0.0-dev`);
//! - `TERN_DEMO_AGENT_BROKEN=1`: the release is broken: it panics on start, always;
//! - `TERN_DEMO_AGENT_ERRORS_PER_MILLE`: of the requests it stands for handling, how many
//!   in a thousand fail (default 10): a release can raise its error rate and stay healthy.
//!
//! When `STATE_DIR/metrics-port` holds a port (it is looked for until found), it serves
//! `GET /metrics` on `127.0.0.1:PORT` in Prometheus' text format:
//! `tern_demo_requests_total` (100 a second since it started) and
//! `tern_demo_errors_total` (that many per mille of them), labelled with its version.
//!
//! Or at packaging time, so that one release binary makes every release of the
//! quickstart: a file `VERSION` in the release's top directory (beside `bin/`, where
//! the binary runs from) names the version, and a file `BROKEN` there makes the
//! release broken. These win over what was compiled in.
//!
//! On start it reads `STATE_DIR/crash-on` (whitespace-separated versions, or `*`): when
//! its version is listed it exits at once, which stands for a host-specific problem (a
//! cloud-metadata bug, a full disk). Otherwise it writes its PID to `STATE_DIR/agent.pid`
//! and its version to `STATE_DIR/running_version`, appends a line to `STATE_DIR/agent.log`
//! and runs until it is killed, or until `STATE_DIR` disappears, or, when
//! `TERN_DEMO_AGENT_EXIT_WITH=PID` is set at run time, until process PID is gone (the
//! harness that started the fleet: a test killed without cleaning up leaves no agent
//! behind for long).
//!
//! When `STATE_DIR/server` names its control plane (`HOST:PORT`, plain HTTP), it checks
//! every two seconds that `GET /healthz` answers 200 there, and exits (code 4) once it
//! has not for `STATE_DIR/give-up-seconds` (default 300): seed 001's agent that cannot
//! reach its server for five minutes exits, so that its updater sees it unhealthy and
//! may update it outside the maintenance window.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const COMPILED_VERSION: &str = match option_env!("TERN_DEMO_AGENT_VERSION") {
    Some(v) => v,
    None => "0.0.0-dev",
};

/// `TERN_DEMO_AGENT_BROKEN` as it was when this binary was compiled.
const BROKEN: Option<&str> = option_env!("TERN_DEMO_AGENT_BROKEN");

/// `TERN_DEMO_AGENT_ERRORS_PER_MILLE` as it was when this binary was compiled.
const ERRORS_PER_MILLE: Option<&str> = option_env!("TERN_DEMO_AGENT_ERRORS_PER_MILLE");

/// Requests it stands for handling per second.
const REQUESTS_PER_SECOND: u64 = 100;

fn errors_per_mille() -> u64 {
    ERRORS_PER_MILLE.and_then(|s| s.parse().ok()).unwrap_or(10)
}

/// Serves `/metrics` on `127.0.0.1:port` in a thread of its own; false when the port
/// cannot be taken (tried again later: the previous version may still hold it).
fn serve_metrics(port: u16, started: Instant, version: &str) -> bool {
    use std::io::Read;
    let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) else {
        return false;
    };
    let version = version.to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 1024];
            let n = conn.read(&mut buf).unwrap_or(0);
            let requests = started.elapsed().as_millis() as u64 * REQUESTS_PER_SECOND / 1000;
            let errors = requests * errors_per_mille() / 1000;
            let (status, body) = if buf[..n].starts_with(b"GET /metrics") {
                (
                    "200 OK",
                    format!(
                        "# TYPE tern_demo_requests_total counter\n\
                         tern_demo_requests_total{{version=\"{version}\"}} {requests}\n\
                         # TYPE tern_demo_errors_total counter\n\
                         tern_demo_errors_total{{version=\"{version}\"}} {errors}\n"
                    ),
                )
            } else {
                ("404 Not Found", "not found\n".to_string())
            };
            let _ = write!(
                conn,
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    true
}

/// The release's top directory: the parent of the `bin/` the binary runs from (links
/// resolved: tern-update runs it through its link dir).
fn release_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

/// What this release is: its version, and whether it is broken (see the top).
fn release() -> (String, bool) {
    let dir = release_dir();
    let packaged = dir
        .as_ref()
        .and_then(|d| std::fs::read_to_string(d.join("VERSION")).ok())
        .map(|s| s.trim().to_string())
        .filter(|v| !v.is_empty());
    let broken = BROKEN == Some("1") || dir.is_some_and(|d| d.join("BROKEN").exists());
    (
        packaged.unwrap_or_else(|| COMPILED_VERSION.to_string()),
        broken,
    )
}

fn log(state: &Path, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.join("agent.log"))
    {
        let _ = writeln!(f, "[pid {}] {line}", std::process::id());
    }
}

fn crashes_here(state: &Path, version: &str) -> bool {
    std::fs::read_to_string(state.join("crash-on"))
        .map(|s| s.split_whitespace().any(|v| v == "*" || v == version))
        .unwrap_or(false)
}

/// Writes `text` to `path` through a temporary file, so readers never see half of it.
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

fn main() -> ExitCode {
    let (version, broken) = release();
    let version = version.as_str();
    let Some(state) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: tern-demo-agent STATE_DIR   (version {version})");
        return ExitCode::from(2);
    };
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("tern-demo-agent {version}");
        return ExitCode::SUCCESS;
    }
    if broken {
        log(
            &state,
            &format!("{version} starting: crashing (broken release)"),
        );
        panic!("tern-demo-agent {version}: cannot read its configuration (a bug in this release)");
    }
    if crashes_here(&state, version) {
        log(
            &state,
            &format!("{version} starting: crashing (listed in crash-on)"),
        );
        eprintln!("tern-demo-agent {version}: cannot start on this host (see crash-on)");
        return ExitCode::from(3);
    }
    if let Err(e) = write_atomic(&state.join("running_version"), version)
        .and_then(|()| write_atomic(&state.join("agent.pid"), &std::process::id().to_string()))
    {
        eprintln!(
            "tern-demo-agent {version}: cannot write to {}: {e}",
            state.display()
        );
        return ExitCode::from(1);
    }
    log(&state, &format!("{version} running"));
    let watched = std::env::var("TERN_DEMO_AGENT_EXIT_WITH")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .map(|p| PathBuf::from(format!("/proc/{p}")));
    let mut reached = Instant::now();
    let mut last_probe: Option<Instant> = None;
    let started = Instant::now();
    let mut metrics = false;
    while state.is_dir() && watched.as_ref().is_none_or(|p| p.exists()) {
        if !metrics
            && let Some(port) =
                read_trimmed(&state.join("metrics-port")).and_then(|p| p.parse::<u16>().ok())
        {
            metrics = serve_metrics(port, started, version);
        }
        if last_probe.is_none_or(|t| t.elapsed() >= PROBE_EVERY) {
            last_probe = Some(Instant::now());
            if let Some(server) = read_trimmed(&state.join("server")) {
                let give_up = read_trimmed(&state.join("give-up-seconds"))
                    .and_then(|s| s.parse().ok())
                    .map_or(GIVE_UP, Duration::from_secs);
                if server_answers(&server) {
                    reached = Instant::now();
                } else if reached.elapsed() >= give_up {
                    log(
                        &state,
                        &format!(
                            "{version} exiting: the server at {server} has not answered for {}s",
                            reached.elapsed().as_secs()
                        ),
                    );
                    eprintln!("tern-demo-agent {version}: cannot reach {server}: exiting");
                    return ExitCode::from(4);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    ExitCode::SUCCESS
}

/// How often the agent checks its server, and how long it lasts without it.
const PROBE_EVERY: Duration = Duration::from_secs(2);
const GIVE_UP: Duration = Duration::from_secs(300);

fn read_trimmed(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Whether `GET /healthz` on `addr` (`HOST:PORT`) answers 200 within two seconds.
fn server_answers(addr: &str) -> bool {
    use std::io::Read;
    use std::net::ToSocketAddrs;
    let Some(sock) = addr.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let timeout = Duration::from_secs(2);
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&sock, timeout) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(timeout));
    let _ = conn.set_write_timeout(Some(timeout));
    if write!(conn, "GET /healthz HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}
