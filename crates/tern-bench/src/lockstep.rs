//! `lockstep`: what tern-lockstep's coordination costs per step. Five workers on one local
//! etcd member (started here on free loopback ports) pass the S numbered steps of a
//! release together, each step one `each` component whose command sleeps a fixed time;
//! in the same run, five processes run the same commands with no coordination at all
//! (the bare baseline). A few updates give enough samples.
//!
//! Both arms are timed by the same probe: the step's command is `tern-bench lockstep-step`
//! itself, which stamps its start and end into a file per server. A step's time is the
//! interval between two consecutive command starts on one server: the command, plus,
//! when coordinated, recording the status, waiting at the barrier for the slowest
//! server and hearing that it passed. The bench reads nothing from the store while a
//! step runs, so observing does not slow what is observed.
//!
//! `--quick` runs a few steps once, on etcd if one is installed, else on SQLite (whose
//! watches poll every 200 ms across processes, so its figures say nothing about etcd's).
//! `TERN_BENCH_KEEP=1` keeps the work directory (the workers' logs, the marks) to read.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::json;
use sha2::{Digest, Sha256};
use tern_core::lockstep::plan::{PLAN_FILE, Plan};

use crate::{Opts, median, procs, quantile};

/// The servers of the cluster (the figure).
const WORKERS: u32 = 5;
/// Where the step probe writes its marks (inherited by the workers and their commands).
const MARKS_ENV: &str = "TERN_BENCH_LOCKSTEP_MARKS";
/// The target: coordination adds less than this per step at the median.
const TARGET_MS: f64 = 100.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Etcd,
    Sqlite,
}

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let (steps, rounds) = if opts.quick { (4, 1) } else { (20, 3) };
    let command_ms: u64 = 20;
    let kind = match opts.store.as_deref() {
        Some("etcd") => StoreKind::Etcd,
        Some("sqlite") => StoreKind::Sqlite,
        Some(other) => bail!("--store {other:?}: give etcd or sqlite"),
        None if opts.quick && crate::etcd::binary().is_none() => {
            eprintln!(
                "no etcd installed: --quick runs on SQLite (a smoke test, not etcd's figures)"
            );
            StoreKind::Sqlite
        }
        None => StoreKind::Etcd,
    };
    if !opts.tern_lockstep.is_file() {
        bail!(
            "no tern-lockstep at {} (cargo build --release -p tern-lockstep --features tern-lockstep/etcd, or --tern-lockstep BIN)",
            opts.tern_lockstep.display()
        );
    }
    let work = tempfile::Builder::new()
        .prefix("tern-bench-lockstep")
        .tempdir()?;
    let w = work.path();
    let (files, path_dir, logs) = (w.join("files"), w.join("path"), w.join("logs"));
    let marks_coord = w.join("marks").join("coordinated");
    let marks_bare = w.join("marks").join("bare");
    for d in [&files, &path_dir, &logs, &marks_coord, &marks_bare] {
        std::fs::create_dir_all(d)?;
    }
    // The plan's commands name `tern-bench` (a program on PATH: a release may not point
    // outside itself), found here first.
    std::os::unix::fs::symlink(std::env::current_exe()?, path_dir.join("tern-bench"))?;
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            let mut dirs = vec![path_dir.clone()];
            dirs.extend(std::env::split_paths(&p));
            std::env::join_paths(dirs)?
        }
        None => path_dir.clone().into_os_string(),
    };

    let server = FileServer::start(&files)?;
    // Declared before the processes so that it is dropped (killed) after them.
    let etcd = match kind {
        StoreKind::Etcd => Some(crate::etcd::Cluster::start(
            &w.join("etcd"),
            1,
            "the lockstep benchmark (--store sqlite runs it on SQLite instead)",
        )?),
        StoreKind::Sqlite => None,
    };
    let store = match &etcd {
        Some(e) => format!("etcd:{}", e.urls[0]),
        None => format!("sqlite:{}", w.join("store.db").display()),
    };
    let cluster = Cluster {
        bin: opts.tern_lockstep.clone(),
        store,
        path,
        logs: logs.clone(),
    };
    eprintln!(
        "lockstep: {WORKERS} workers on {} ({steps} steps of {command_ms} ms, {rounds} update(s)), work dir {}",
        cluster.store,
        w.display()
    );
    let mut procs: Vec<Spawned> = Vec::new();
    for id in 1..=WORKERS {
        let root = w.join(format!("server-{id}"));
        let args = [
            "worker".to_string(),
            "--id".into(),
            id.to_string(),
            "--root".into(),
            root.display().to_string(),
            "--barrier-timeout".into(),
            "2m".into(),
            "--insecure-http".into(),
        ];
        procs.push(cluster.spawn(&format!("worker-{id}"), &args, &marks_coord)?);
    }
    let all: Vec<String> = (1..=WORKERS).map(|i| i.to_string()).collect();
    // The updater lists the servers registered when an update begins: all of them first.
    cluster.wait_status(
        &format!("registered: {}", all.join(", ")),
        &mut procs,
        Duration::from_secs(60),
    )?;
    let args = [
        "updater".to_string(),
        "--index".into(),
        format!("{}/index.json", server.url),
        "--poll".into(),
        "1s".into(),
        "--holder".into(),
        "bench".into(),
        "--insecure-http".into(),
    ];
    procs.push(cluster.spawn("updater", &args, &marks_coord)?);

    let mut coord_periods = Vec::new();
    let mut bare_periods = Vec::new();
    let mut coord_spans = Vec::new();
    let mut bare_spans = Vec::new();
    let mut per_round = Vec::new();
    for r in 0..rounds {
        let version = format!("1.{r}.0");
        let published = Instant::now();
        server.publish(&files, &version, steps, command_ms)?;
        let coord = wait_marks(
            &marks_coord,
            &version,
            steps,
            &mut procs,
            &logs,
            Duration::from_secs(180),
        )?;
        let took = published.elapsed();
        // Only now, with every step done, ask the store (a process per look).
        cluster.wait_status(
            &format!("completed: {version} at"),
            &mut procs,
            Duration::from_secs(60),
        )?;
        let bare = run_bare(w, &marks_bare, &version, steps, &cluster.path)?;
        let (cp, cs) = (periods(&coord), span(&coord));
        let (bp, bs) = (periods(&bare), span(&bare));
        let (cm, bm) = (median(cp.clone()), median(bp.clone()));
        eprintln!(
            "update {version}: step p50 coordinated {cm:.1} ms, bare {bm:.1} ms (+{:.1}); {steps} steps in {:.0} ms coordinated, {:.0} ms bare; {:.1} s from publishing to the last step",
            cm - bm,
            cs,
            bs,
            took.as_secs_f64()
        );
        per_round.push(json!({
            "version": version,
            "coordinated_p50_ms": round2(cm),
            "bare_p50_ms": round2(bm),
            "coordinated_span_ms": round2(cs),
            "bare_span_ms": round2(bs),
        }));
        coord_periods.extend(cp);
        bare_periods.extend(bp);
        coord_spans.push(cs);
        bare_spans.push(bs);
    }
    drop(procs);
    drop(etcd);
    if std::env::var_os("TERN_BENCH_KEEP").is_some() {
        eprintln!("kept {}", work.keep().display());
    }

    let figures = |v: &[f64]| {
        json!({
            "p50": round2(quantile(v.to_vec(), 0.5)),
            "p90": round2(quantile(v.to_vec(), 0.9)),
            "max": round2(v.iter().copied().fold(f64::NAN, f64::max)),
        })
    };
    let (c50, b50) = (
        quantile(coord_periods.clone(), 0.5),
        quantile(bare_periods.clone(), 0.5),
    );
    let (c90, b90) = (
        quantile(coord_periods.clone(), 0.9),
        quantile(bare_periods.clone(), 0.9),
    );
    let overhead_p50 = c50 - b50;
    // Between the first start and the last end of a run lie S commands and, when
    // coordinated, S - 1 barriers.
    let e2e = (median(coord_spans.clone()) - median(bare_spans.clone())) / f64::from(steps - 1);
    eprintln!(
        "per step: coordinated p50 {c50:.1} / p90 {c90:.1} ms, bare p50 {b50:.1} / p90 {b90:.1} ms: overhead p50 {overhead_p50:.1} ms, p90 {:.1} ms (target < {TARGET_MS} ms at p50); end to end {e2e:.1} ms per barrier",
        c90 - b90
    );
    Ok(json!({
        "bench": "lockstep",
        "quick": opts.quick,
        "store": match kind { StoreKind::Etcd => "etcd (1 member)", StoreKind::Sqlite => "sqlite" },
        "workers": WORKERS,
        "steps": steps,
        "updates": rounds,
        "command_ms": command_ms,
        "samples": coord_periods.len(),
        "coordinated_step_ms": figures(&coord_periods),
        "bare_step_ms": figures(&bare_periods),
        "overhead_p50_ms": round2(overhead_p50),
        "overhead_p90_ms": round2(c90 - b90),
        "ratio_p50": round3(c50 / b50),
        "e2e_overhead_per_step_ms": round2(e2e),
        "updates_detail": per_round,
        "target_overhead_ms": TARGET_MS,
        "target_met": overhead_p50 < TARGET_MS,
        "loadavg": procs::loadavg(),
    }))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// When one server ran one step: start and end of its command, in ns since the epoch
/// (the wall clock: the only clock the probe's processes share with each other).
#[derive(Clone, Copy, Debug)]
struct Mark {
    step: u32,
    start: u128,
    end: u128,
}

/// Server → its marks for one version, in step order.
type Marks = BTreeMap<u32, Vec<Mark>>;

/// `tern-bench lockstep-step MS`: a step's command. Sleeps MS milliseconds and appends
/// `version step start end` to `$TERN_BENCH_LOCKSTEP_MARKS/server-<id>` (one file per
/// server: one writer each, so lines never interleave).
pub fn step(args: &[String]) -> anyhow::Result<()> {
    let start = now_ns();
    let ms: u64 = args
        .first()
        .context("lockstep-step MS")?
        .parse()
        .context("lockstep-step MS: not a number")?;
    std::thread::sleep(Duration::from_millis(ms));
    let end = now_ns();
    let var = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
    let (dir, server) = (var(MARKS_ENV)?, var("TERN_LOCKSTEP_SERVER")?);
    let line = format!(
        "{} {} {start} {end}\n",
        var("TERN_LOCKSTEP_VERSION")?,
        var("TERN_LOCKSTEP_STEP")?
    );
    let file = Path::new(&dir).join(format!("server-{server}"));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .with_context(|| format!("appending to {}", file.display()))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The marks of `version` under `dir`; servers with none are absent.
fn read_marks(dir: &Path, version: &str) -> anyhow::Result<Marks> {
    let mut out = Marks::new();
    for id in 1..=WORKERS {
        let text = match std::fs::read_to_string(dir.join(format!("server-{id}"))) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let mut marks = Vec::new();
        // A line still being written has no newline yet: only whole lines count.
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [v, step, start, end] = f[..] else {
                bail!("server {id}: a bad mark {line:?}");
            };
            if v == version {
                marks.push(Mark {
                    step: step.parse()?,
                    start: start.parse()?,
                    end: end.parse()?,
                });
            }
        }
        marks.sort_by_key(|m| m.step);
        out.insert(id, marks);
    }
    Ok(out)
}

/// True when every server ran steps 1..=`steps` exactly once.
fn complete(marks: &Marks, steps: u32) -> bool {
    marks.len() == WORKERS as usize
        && marks
            .values()
            .all(|m| m.iter().map(|k| k.step).eq(1..=steps))
}

/// Every server's interval from one command's start to the next's, in ms.
fn periods(marks: &Marks) -> Vec<f64> {
    marks
        .values()
        .flat_map(|m| m.windows(2).map(|w| (w[1].start - w[0].start) as f64 / 1e6))
        .collect()
}

/// From the first start of step 1 to the last end of the last step, in ms.
fn span(marks: &Marks) -> f64 {
    let first = marks
        .values()
        .filter_map(|m| m.first())
        .map(|k| k.start)
        .min();
    let last = marks.values().filter_map(|m| m.last()).map(|k| k.end).max();
    match (first, last) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e6,
        _ => f64::NAN,
    }
}

/// Waits until every worker ran every step of `version` (reading the probe's files, not
/// the store); fails early when a process dies or a worker logs an error.
fn wait_marks(
    dir: &Path,
    version: &str,
    steps: u32,
    procs: &mut [Spawned],
    logs: &Path,
    within: Duration,
) -> anyhow::Result<Marks> {
    let start = Instant::now();
    let mut checked = Instant::now();
    loop {
        let marks = read_marks(dir, version)?;
        if complete(&marks, steps) {
            return Ok(marks);
        }
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            alive(procs)?;
            for p in procs.iter() {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                if log.contains("ERROR") {
                    bail!(
                        "{} logged an error during the update to {version}:\n{}",
                        p.name,
                        tail(&log)
                    );
                }
            }
        }
        if start.elapsed() > within {
            let done: Vec<String> = marks
                .iter()
                .map(|(id, m)| format!("server {id}: {} step(s)", m.len()))
                .collect();
            bail!(
                "the update to {version} did not run its {steps} steps within {within:?} ({}); logs in {}",
                done.join(", "),
                logs.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(procs: &mut [Spawned]) -> anyhow::Result<()> {
    for p in procs.iter_mut() {
        if let Some(status) = p.child.try_wait()? {
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            bail!("{} exited ({status}); its log:\n{}", p.name, tail(&log));
        }
    }
    Ok(())
}

fn tail(s: &str) -> &str {
    let start = s.len().saturating_sub(3000);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

/// The bare baseline: one `tern-bench lockstep-bare` process per server, all at once,
/// each running the steps of its installed copy of `version` back to back.
fn run_bare(
    work: &Path,
    marks: &Path,
    version: &str,
    steps: u32,
    path: &std::ffi::OsStr,
) -> anyhow::Result<Marks> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for id in 1..=WORKERS {
        // Where the worker installed it (tern-lockstep's `<root>/versions/<version>`).
        let dir = work
            .join(format!("server-{id}"))
            .join("versions")
            .join(version);
        let child = Command::new(&exe)
            .arg("lockstep-bare")
            .arg(&dir)
            .arg(id.to_string())
            .arg(version)
            .env(MARKS_ENV, marks)
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        children.push((id, child));
    }
    for (id, child) in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "the bare run of server {id} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let m = read_marks(marks, version)?;
    if !complete(&m, steps) {
        bail!("the bare run of {version} left incomplete marks: {m:?}");
    }
    Ok(m)
}

/// `tern-bench lockstep-bare DIR SERVER VERSION`: the release's steps in DIR run back to
/// back with no coordination, each command spawned as tern-lockstep's worker spawns it:
/// an argument vector (no shell) found in the release or on PATH, in the release's
/// directory, with the same `TERN_LOCKSTEP_*` environment, stdin closed, output read.
pub fn bare(args: &[String]) -> anyhow::Result<()> {
    let [dir, server, version] = args else {
        bail!("lockstep-bare DIR SERVER VERSION");
    };
    let dir = PathBuf::from(dir);
    let text = std::fs::read_to_string(dir.join(PLAN_FILE))
        .with_context(|| format!("reading {}", dir.join(PLAN_FILE).display()))?;
    let plan = Plan::from_text(&text).map_err(|e| anyhow::anyhow!("{PLAN_FILE}: {e}"))?;
    for step in plan.steps() {
        let component = &plan.components[step.component].name;
        for (what, argv) in plan.commands(&step) {
            let Some((argv0, rest)) = argv.split_first() else {
                bail!("step {}: an empty {what} command", step.number);
            };
            let program = if argv0.contains('/') {
                dir.join(argv0)
            } else {
                PathBuf::from(argv0)
            };
            let out = Command::new(&program)
                .args(rest)
                .current_dir(&dir)
                .env("TERN_LOCKSTEP_VERSION", version)
                .env("TERN_LOCKSTEP_SERVER", server)
                .env("TERN_LOCKSTEP_STEP", step.number.to_string())
                .env("TERN_LOCKSTEP_COMPONENT", component)
                .env("TERN_LOCKSTEP_RELEASE_DIR", &dir)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("running {}", program.display()))?;
            if !out.status.success() {
                bail!(
                    "step {} ({component} {what}) failed ({}): {}",
                    step.number,
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    Ok(())
}

/// The release's plan: `steps` components of kind `each` (each one numbered step, so one
/// barrier, and nothing else: no lease, no leader), each sleeping `ms`.
fn plan(steps: u32, ms: u64) -> String {
    let mut s = String::from("components:\n");
    for i in 1..=steps {
        s.push_str(&format!(
            "  - name: s{i:02}\n    kind: each\n    start: [tern-bench, lockstep-step, \"{ms}\"]\n"
        ));
    }
    s
}

/// The processes of the cluster and how to start them.
struct Cluster {
    bin: PathBuf,
    store: String,
    path: std::ffi::OsString,
    logs: PathBuf,
}

/// A process this bench started, killed (by its handle) on drop.
struct Spawned {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Cluster {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("TERN_LOCKSTEP_STORE", &self.store)
            .env("PATH", &self.path)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    fn spawn(&self, name: &str, args: &[String], marks: &Path) -> anyhow::Result<Spawned> {
        let log = self.logs.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = self
            .cmd()
            .args(args)
            .env("TERN_LOCKSTEP_LOG", "info")
            .env(MARKS_ENV, marks)
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        Ok(Spawned {
            name: name.to_string(),
            child,
            log,
        })
    }

    fn status(&self) -> anyhow::Result<String> {
        let out = self
            .cmd()
            .arg("status")
            .env("TERN_LOCKSTEP_LOG", "warn")
            .output()?;
        if !out.status.success() {
            bail!(
                "tern-lockstep status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until `tern-lockstep status` shows `needle`.
    fn wait_status(
        &self,
        needle: &str,
        procs: &mut [Spawned],
        within: Duration,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < within {
            alive(procs)?;
            // Until the store answers (etcd may still be electing itself), keep asking.
            if let Ok(s) = self.status() {
                if s.contains(needle) {
                    return Ok(());
                }
                last = s;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "tern-lockstep status did not show {needle:?} within {within:?}; it shows:\n{last}logs in {}",
            self.logs.display()
        )
    }
}

/// A loopback HTTP/1.1 server (one request per connection) for the updater's index and
/// the workers' downloads: `/index.json`, and files of a directory under `/files/`.
struct FileServer {
    url: String,
    index: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl FileServer {
    fn start(dir: &Path) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let index: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let (idx, d) = (Arc::clone(&index), dir.to_path_buf());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (idx, d) = (Arc::clone(&idx), d.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &idx, &d);
                });
            }
        });
        Ok(Self { url, index })
    }

    /// Builds `app-<version>.tar.gz` (the plan only) and lists it in the index as
    /// `release-<version>` with its digest.
    fn publish(&self, dir: &Path, version: &str, steps: u32, ms: u64) -> anyhow::Result<()> {
        let name = format!("app-{version}.tar.gz");
        let path = dir.join(&name);
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path)?,
            flate2::Compression::fast(),
        );
        let mut tar = tar::Builder::new(gz);
        let text = plan(steps, ms);
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, PLAN_FILE, text.as_bytes())?;
        tar.into_inner()?.finish()?.flush()?;
        let sha256: String = Sha256::digest(std::fs::read(&path)?)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(json!({
                "tag": format!("release-{version}"),
                "prerelease": false,
                "url": format!("{}/files/{name}", self.url),
                "sha256": sha256,
            }));
        Ok(())
    }
}

fn serve(conn: TcpStream, index: &Mutex<Vec<serde_json::Value>>, dir: &Path) -> anyhow::Result<()> {
    // The head and the body are two writes: without this, Nagle's algorithm holds the
    // body until the client's delayed ACK.
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let path = target.split('?').next().unwrap_or("");
    let (code, reply) = if path == "/index.json" {
        let releases = index.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (200, serde_json::to_vec(&json!({ "releases": releases }))?)
    } else if let Some(name) = path.strip_prefix("/files/")
        && !name.contains('/')
        && !name.starts_with('.')
        && let Ok(b) = std::fs::read(dir.join(name))
    {
        (200, b)
    } else {
        (404, b"not found".to_vec())
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    )?;
    conn.write_all(&reply)?;
    conn.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_one_barrier_per_step() {
        let p = Plan::from_text(&plan(20, 20)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.steps().len(), 20);
        let first = &p.steps()[0];
        assert_eq!(
            p.commands(first),
            vec![(
                "start",
                &[
                    "tern-bench".to_string(),
                    "lockstep-step".into(),
                    "20".into()
                ][..]
            )]
        );
    }
}
