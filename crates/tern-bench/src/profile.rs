//! `profile`: instructions per operation on ternd's hot paths, counted by valgrind's
//! callgrind (deterministic for a given binary and input, whatever else the machine
//! does, unlike times on these shared cores). ternd runs under callgrind with the
//! benchmark setup of the other figures; the counters are zeroed before each phase and
//! dumped after it: `find` (one keep-alive connection), the same requests to the
//! baseline server of `find` (also under callgrind, for the ratio), heartbeats
//! registering N agents, the same agents with a new version, the same again (steady
//! state), the same heartbeats to the heartbeat baseline, and one report +
//! reconcile over the N agents. The dumps stay in the printed directory for
//! `callgrind_annotate`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;

use crate::load::{self, Load};
use crate::procs::{self, Server};
use crate::ternd::Ternd;
use crate::{Opts, heartbeat};

const FIND: &str = "/v1/webapi/find?group=dev&updater_id=3f1d9c2e-8a4b-4c6d-9e0f-1a2b3c4d5e6f";

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let (finds, agents) = if opts.quick {
        (200, 500)
    } else {
        (5_000, 20_000)
    };
    let ok = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        bail!("valgrind is not installed (Debian: apt-get install valgrind)");
    }
    let dir = tempfile::Builder::new()
        .prefix("tern-profile")
        .tempdir()?
        .keep();
    eprintln!("callgrind dumps in {}", dir.display());

    let ternd = Ternd::start_cmd(callgrind(&dir, "ternd", &opts.ternd), &[])?;
    let (status, body) = load::request(ternd.server.addr, "GET", FIND, None, b"")?;
    if status != 200 {
        bail!("find answered {status}");
    }
    let body_file = dir.join("find.json");
    std::fs::write(&body_file, &body)?;
    let pid = ternd.pid();
    let cg = Callgrind {
        pid,
        dir: dir.clone(),
    };

    let find_ir = cg.phase("find", || requests(ternd.server.addr, finds))? / finds as f64;
    let register_ir = cg.phase("register", || {
        heartbeat::round(&ternd, agents, "1.0.0", 1).map(drop)
    })? / agents as f64;
    history_written(&ternd, agents)?;
    // A new version from every agent, and the history writes it queues (the phase
    // ends when the writer has drained them): minus `steady`, what a host's history
    // change costs.
    let changed_ir = cg.phase("changed", || {
        heartbeat::round(&ternd, agents, "1.1.0", 1)?;
        history_written(&ternd, 2 * agents)
    })? / agents as f64;
    // The steady state of the `heartbeat` benchmark: every agent reports what it
    // reported last time.
    let steady_ir = cg.phase("steady", || {
        heartbeat::round(&ternd, agents, "1.1.0", 1).map(drop)
    })? / agents as f64;
    ternd.call(
        "POST",
        "/v1/dev/clock",
        br#"{"set":"2026-11-23T12:07:00Z"}"#,
    )?;
    let report_ir = cg.phase("report", || {
        ternd.call("POST", "/v1/dev/reconcile", b"").map(drop)
    })?;
    drop(ternd);

    let mut cmd = callgrind(&dir, "baseline", &std::env::current_exe()?);
    cmd.arg("baseline-server").arg(&body_file);
    let baseline = Server::spawn(cmd)?;
    baseline.wait_ready(FIND)?;
    let b = Callgrind {
        pid: baseline.pid(),
        dir: dir.clone(),
    };
    let baseline_ir = b.phase("find", || requests(baseline.addr, finds))? / finds as f64;
    drop(baseline);

    // The heartbeat baseline (parse the same body, upsert a map entry), for the
    // heartbeat ratio in instructions.
    let mut cmd = callgrind(&dir, "hb-baseline", &std::env::current_exe()?);
    cmd.arg("heartbeat-baseline");
    let hb_baseline = Server::spawn(cmd)?;
    hb_baseline.wait_ready("/healthz")?;
    let hb = Callgrind {
        pid: hb_baseline.pid(),
        dir: dir.clone(),
    };
    hb.phase("register", || {
        heartbeat::send(hb_baseline.addr, "", agents, "1.1.0", 1).map(drop)
    })?;
    let hb_baseline_ir = hb.phase("steady", || {
        heartbeat::send(hb_baseline.addr, "", agents, "1.1.0", 1).map(drop)
    })? / agents as f64;
    drop(hb_baseline);

    eprintln!(
        "instructions: find {find_ir:.0} (baseline {baseline_ir:.0}, ratio {:.2}); heartbeat register {register_ir:.0}, changed + its history write {changed_ir:.0}, steady {steady_ir:.0} (baseline {hb_baseline_ir:.0}, ratio {:.2}); report + reconcile over {agents} agents {:.0} per agent",
        find_ir / baseline_ir,
        steady_ir / hb_baseline_ir,
        report_ir / agents as f64
    );
    Ok(json!({
        "bench": "profile",
        "quick": opts.quick,
        "tool": "valgrind --tool=callgrind",
        "dumps": dir,
        "finds": finds,
        "agents": agents,
        "find_ir_per_request": find_ir.round(),
        "baseline_find_ir_per_request": baseline_ir.round(),
        "find_ir_ratio": ((find_ir / baseline_ir) * 1000.0).round() / 1000.0,
        "heartbeat_register_ir": register_ir.round(),
        "heartbeat_changed_ir": changed_ir.round(),
        "heartbeat_steady_ir": steady_ir.round(),
        "baseline_heartbeat_steady_ir": hb_baseline_ir.round(),
        "heartbeat_steady_ir_ratio": ((steady_ir / hb_baseline_ir) * 1000.0).round() / 1000.0,
        "report_and_reconcile_ir_per_agent": (report_ir / agents as f64).round(),
        "loadavg": procs::loadavg(),
    }))
}

/// Waits until ternd's history writer has written `writes` host records in all. Polls
/// once a second: a scrape of `/metrics` walks the inventory, and inside a phase its
/// instructions count as the phase's.
fn history_written(ternd: &Ternd, writes: u64) -> anyhow::Result<()> {
    for _ in 0..600 {
        if heartbeat::metric(ternd, "tern_host_history_writes_total")? >= writes as f64 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("the history writer did not drain in 10 minutes")
}

fn callgrind(dir: &Path, name: &str, bin: &Path) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg("--quiet")
        .arg(format!(
            "--callgrind-out-file={}/{name}.callgrind.%p",
            dir.display()
        ))
        .arg(bin);
    cmd
}

/// `n` GETs of find, one after another on one keep-alive connection.
fn requests(addr: std::net::SocketAddr, n: u64) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let req = load::get(FIND);
    let source: load::Source =
        Arc::new(move || (next.fetch_add(1, Ordering::Relaxed) < n).then(|| req.clone()));
    let o = load::run(&Load {
        addr,
        connections: 1,
        duration: Duration::from_secs(3600),
        rate: None,
        source,
        check: None,
        gate: None,
    })?;
    if o.ok != n {
        bail!("{} of {n} requests answered 2xx", o.ok);
    }
    Ok(())
}

/// A process running under callgrind, controlled with `callgrind_control`.
struct Callgrind {
    pid: u32,
    dir: PathBuf,
}

impl Callgrind {
    fn control(&self, arg: &str) -> anyhow::Result<()> {
        let out = Command::new("callgrind_control")
            .arg(arg)
            .arg(self.pid.to_string())
            .output()
            .context("running callgrind_control")?;
        if !out.status.success() {
            bail!(
                "callgrind_control {arg} {}: {}",
                self.pid,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Instructions executed by the process while `f` runs.
    fn phase(&self, name: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<f64> {
        self.control("--zero")?;
        f()?;
        self.control(&format!("--dump={name}"))?;
        let file = self.latest_dump(name)?;
        let text = std::fs::read_to_string(&file)?;
        text.lines()
            .find_map(|l| l.strip_prefix("summary:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .with_context(|| format!("no instruction total in {}", file.display()))
    }

    /// The dump described as `name` (callgrind numbers them `<file>.<pid>.<n>`).
    fn latest_dump(&self, name: &str) -> anyhow::Result<PathBuf> {
        // The dump is written asynchronously by the process under callgrind.
        for _ in 0..600 {
            if let Some(f) = self.find_dump(name)? {
                return Ok(f);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("callgrind wrote no dump for {name}")
    }

    fn find_dump(&self, name: &str) -> anyhow::Result<Option<PathBuf>> {
        let suffix = format!(".{}.", self.pid);
        let trigger = format!("desc: Trigger: dump {name}");
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            let fname = path.file_name().map(|f| f.to_string_lossy().into_owned());
            if fname.is_some_and(|f| f.contains(&suffix))
                && let Ok(text) = std::fs::read_to_string(&path)
                && text.lines().any(|l| l == trigger)
                && text.lines().any(|l| l.starts_with("summary:"))
            {
                return Ok(Some(path));
            }
        }
        Ok(None)
    }
}
