//! `heartbeat`: N simulated agents heartbeat to a real ternd over its API (bearer
//! token, JSON body, keep-alive), and the same heartbeats to a baseline server in the
//! same run: a bare axum handler that parses the same JSON body into the same
//! `Heartbeat` and upserts it into a map (`tern-bench heartbeat-baseline`), so that the
//! throughput is a ratio measured against what the machine gives at that moment.
//! ternd's CPU time comes from `/proc/PID/stat`, its resident memory from
//! `/proc/PID/status`; the generator runs in this process and is not counted.
//!
//! 1M agents every 30 s is 33k heartbeats/s, more than 2 shared cores can generate and
//! serve at once, so the test is scaled: every agent heartbeats once to register; the
//! bench then waits until every host's first report is in its history (the queue
//! drained: hosts dropped from the bounded queue are queued again by their next
//! heartbeat, so the bench heartbeats the fleet again until the store holds all) and
//! measures the memory in that steady state (once ternd has given the heap the burst
//! freed back to the system, `tern_heap_trims_total`, at most a minute later); then steady rounds (every agent reports
//! the same state again, ternd and baseline alternating), and one round in which every
//! agent reports a new version (each heartbeat queues a history change). The CPU per
//! heartbeat gives the cores that 1M agents at 30 s would need.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use crate::load::{self, Load};
use crate::procs::{self, Server};
use crate::ternd::Ternd;
use crate::{Opts, fleet, median};

/// Memory per tracked agent at 1M agents, in the steady state (issue 38).
pub const BYTES_PER_AGENT_TARGET: f64 = 200.0;
/// ternd's throughput over the baseline's, steady heartbeats.
pub const RATIO_TARGET: f64 = 0.8;
/// ternd CPU per 1,000 steady heartbeats at 1M agents, ms.
pub const CPU_PER_1K_TARGET_MS: f64 = 15.0;

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    // `TERN_BENCH_HEARTBEAT_AGENTS=1000000` (a comma list) measures those sizes only.
    let sizes: Vec<u64> = match std::env::var("TERN_BENCH_HEARTBEAT_AGENTS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .with_context(|| format!("TERN_BENCH_HEARTBEAT_AGENTS: {n:?} is not a count"))
            })
            .collect::<anyhow::Result<_>>()?,
        Err(_) if opts.quick => vec![5_000],
        Err(_) => vec![100_000, 1_000_000],
    };
    let mut per = serde_json::Map::new();
    for &n in &sizes {
        per.insert(n.to_string(), one(opts, n)?);
    }
    Ok(json!({
        "bench": "heartbeat",
        "quick": opts.quick,
        "connections": opts.connections,
        "interval_secs": 30,
        "agents": per,
        "bytes_per_agent_target": BYTES_PER_AGENT_TARGET,
        "ratio_target": RATIO_TARGET,
        "steady_cpu_ms_per_1k_target": CPU_PER_1K_TARGET_MS,
        "loadavg": procs::loadavg(),
    }))
}

/// One heartbeat of every agent `0..n`, version `version`, to ternd; returns (wall,
/// ternd CPU).
pub fn round(
    ternd: &Ternd,
    n: u64,
    version: &'static str,
    conns: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let cpu0 = procs::cpu_time(ternd.pid())?;
    let wall = send(ternd.server.addr, &ternd.token, n, version, conns)?;
    let cpu = procs::cpu_time(ternd.pid())?.saturating_sub(cpu0);
    Ok((wall, cpu))
}

/// One heartbeat of every agent `0..n` to the baseline; returns (wall, its CPU).
fn baseline_round(
    baseline: &Server,
    n: u64,
    version: &'static str,
    conns: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let cpu0 = procs::cpu_time(baseline.pid())?;
    let wall = send(baseline.addr, "", n, version, conns)?;
    let cpu = procs::cpu_time(baseline.pid())?.saturating_sub(cpu0);
    Ok((wall, cpu))
}

/// One heartbeat of every agent `0..n` to the server at `addr`; returns the wall time.
/// Every heartbeat must be accepted.
pub(crate) fn send(
    addr: SocketAddr,
    token: &str,
    n: u64,
    version: &'static str,
    conns: usize,
) -> anyhow::Result<Duration> {
    let next = Arc::new(AtomicU64::new(0));
    let token: Arc<str> = token.into();
    let source: load::Source = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return None;
        }
        let body = serde_json::to_vec(&fleet::heartbeat(i, version)).ok()?;
        Some(load::post_json("/v1/agents/heartbeat", &token, &body))
    });
    let start = Instant::now();
    let o = load::run(&Load {
        addr,
        connections: conns,
        duration: Duration::from_secs(3600),
        rate: None,
        source,
        check: None,
        gate: None,
    })?;
    let wall = start.elapsed();
    if o.bad_status > 0 || o.ok != n {
        bail!(
            "{} of {n} heartbeats accepted ({} refused)",
            o.ok,
            o.bad_status
        );
    }
    Ok(wall)
}

/// A gauge or counter of ternd's `/metrics` (unlabelled).
pub(crate) fn metric(ternd: &Ternd, name: &str) -> anyhow::Result<f64> {
    let text = ternd.call("GET", "/metrics", b"")?;
    let text = String::from_utf8_lossy(&text);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("ternd's /metrics has no {name}"))
}

/// What it took to get every host's first report into its history.
struct Drained {
    /// Extra rounds of the whole fleet (same state) to queue the hosts dropped from the
    /// bounded queue again.
    rounds: u32,
    wall: Duration,
    writes: f64,
}

/// Waits until the history writer has written the first report of all `n` hosts: the
/// queue empty, no host marked unrecorded. Hosts dropped from the full queue are queued
/// again only by a heartbeat of theirs, so while some are marked, the whole fleet
/// heartbeats again (the same state).
fn drain(ternd: &Ternd, n: u64, version: &'static str, conns: usize) -> anyhow::Result<Drained> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(1800);
    let mut rounds = 0;
    loop {
        let pending = metric(ternd, "tern_host_history_pending_hosts")?;
        let unrecorded = metric(ternd, "tern_host_history_unrecorded_hosts")?;
        let writes = metric(ternd, "tern_host_history_writes_total")?;
        if pending == 0.0 && unrecorded == 0.0 && writes >= n as f64 {
            return Ok(Drained {
                rounds,
                wall: start.elapsed(),
                writes,
            });
        }
        if Instant::now() > deadline {
            bail!(
                "the history did not drain in 30 min: {pending} hosts queued, {unrecorded} unrecorded, {writes} written"
            );
        }
        if pending == 0.0 && unrecorded > 0.0 {
            eprintln!(
                "  drain: {writes} histories written, {unrecorded} hosts to queue again: the fleet heartbeats again"
            );
            send(ternd.server.addr, &ternd.token, n, version, conns)?;
            rounds += 1;
        } else {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Waits for the steady state after the drain: ternd gives the heap a burst freed back
/// to the system once the burst is over, at most once a minute (`tern_heap_trims_total`
/// counts it), so the RSS measured as the last write lands may still hold the burst's
/// peak. True when a trim came; false when none did within a minute and a flush (every
/// burst was trimmed already).
fn settle(ternd: &Ternd) -> anyhow::Result<bool> {
    let trims = metric(ternd, "tern_heap_trims_total")?;
    let deadline = Instant::now() + Duration::from_secs(75);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        if metric(ternd, "tern_heap_trims_total")? > trims {
            return Ok(true);
        }
    }
    Ok(false)
}

fn one(opts: &Opts, n: u64) -> anyhow::Result<serde_json::Value> {
    let conns = opts.connections;
    let ternd = Ternd::start(&opts.ternd, &[])?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("heartbeat-baseline");
    let baseline = Server::spawn(cmd)?;
    baseline.wait_ready("/healthz")?;
    std::thread::sleep(Duration::from_millis(300));
    let rss0 = procs::rss(ternd.pid())?;
    let per_1k = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / (n as f64 / 1000.0);
    let rate = |wall: Duration| n as f64 / wall.as_secs_f64();

    // Register: every agent once (each is new: its first report is queued for its
    // history, up to the queue's bound).
    let (wall_reg, cpu_reg) = round(&ternd, n, "1.0.0", conns)?;
    let rss_registered = procs::rss(ternd.pid())?;
    let (base_reg, _) = baseline_round(&baseline, n, "1.0.0", conns)?;
    eprintln!(
        "{n} agents, register: ternd {:.0} hb/s ({:.1} ms CPU/1k), baseline {:.0} hb/s, ratio {:.3}; RSS +{:.0} B/agent with the history queue full",
        rate(wall_reg),
        per_1k(cpu_reg),
        rate(base_reg),
        base_reg.as_secs_f64() / wall_reg.as_secs_f64(),
        rss_registered.saturating_sub(rss0) as f64 / n as f64,
    );

    let drained = drain(&ternd, n, "1.0.0", conns)?;
    let rss_at_drain = procs::rss(ternd.pid())?;
    // A smoke run does not measure memory: it does not wait the minute a trim may take.
    let settled = if opts.quick {
        "(--quick: not waited for the heap's trim)"
    } else if settle(&ternd)? {
        "once the heap was trimmed after the burst"
    } else {
        "(no trim was pending)"
    };
    let rss_drained = procs::rss(ternd.pid())?;
    let bytes_per_agent = rss_drained.saturating_sub(rss0) as f64 / n as f64;
    eprintln!(
        "{n} agents, history drained ({} writes, {} more rounds of the fleet, {:.1} s): RSS +{:.0} B/agent as the last write landed, +{bytes_per_agent:.0} B/agent {}",
        drained.writes,
        drained.rounds,
        drained.wall.as_secs_f64(),
        rss_at_drain.saturating_sub(rss0) as f64 / n as f64,
        settled
    );

    // Steady: every agent reports the same state again; ternd and baseline alternate.
    let rounds = if opts.quick { 1 } else { 3 };
    let mut steady = Vec::new();
    for r in 0..rounds {
        let (_, sys0) = procs::cpu_times(ternd.pid())?;
        let (wall, cpu) = round(&ternd, n, "1.0.0", conns)?;
        let (_, sys1) = procs::cpu_times(ternd.pid())?;
        let sys = sys1.saturating_sub(sys0);
        let (base, base_cpu) = baseline_round(&baseline, n, "1.0.0", conns)?;
        let ratio = base.as_secs_f64() / wall.as_secs_f64();
        eprintln!(
            "{n} agents, steady round {r}: ternd {:.0} hb/s ({:.1} ms CPU/1k, {:.1} of it in the kernel), baseline {:.0} hb/s ({:.1} ms CPU/1k), ratio {ratio:.3}",
            rate(wall),
            per_1k(cpu),
            per_1k(sys),
            rate(base),
            per_1k(base_cpu),
        );
        steady.push(json!({
            "ternd_hb_per_s": rate(wall).round(),
            "baseline_hb_per_s": rate(base).round(),
            "ratio": (ratio * 1000.0).round() / 1000.0,
            "ternd_cpu_ms_per_1k": per_1k(cpu),
            "ternd_system_cpu_ms_per_1k": per_1k(sys),
            "baseline_cpu_ms_per_1k": per_1k(base_cpu),
        }));
    }
    let rss_steady = procs::rss(ternd.pid())?;
    let pick = |k: &str| median(steady.iter().filter_map(|s| s[k].as_f64()).collect());
    let steady_ratio = pick("ratio");
    let steady_ms_per_1k = pick("ternd_cpu_ms_per_1k");
    let baseline_ms_per_1k = pick("baseline_cpu_ms_per_1k");

    // A change: every agent reports a new version (each heartbeat queues a history
    // change), as the `steady` round of earlier runs of this benchmark did.
    let (wall_chg, cpu_chg) = round(&ternd, n, "1.1.0", conns)?;
    let (base_chg, _) = baseline_round(&baseline, n, "1.1.0", conns)?;
    let rss_changed = procs::rss(ternd.pid())?;
    eprintln!(
        "{n} agents, every agent on a new version: ternd {:.0} hb/s ({:.1} ms CPU/1k), baseline {:.0} hb/s, ratio {:.3}",
        rate(wall_chg),
        per_1k(cpu_chg),
        rate(base_chg),
        base_chg.as_secs_f64() / wall_chg.as_secs_f64(),
    );

    // Settle the agents (one report period), then time a report + reconcile.
    ternd.call(
        "POST",
        "/v1/dev/clock",
        br#"{"set":"2026-11-23T12:07:00Z"}"#,
    )?;
    let t = Instant::now();
    ternd.call("POST", "/v1/dev/reconcile", b"")?;
    let tick = t.elapsed();
    // Cores needed for 1M agents heartbeating every 30 s at this CPU cost.
    let cores_1m_30s = steady_ms_per_1k / 1000.0 * (1_000_000.0 / 30.0 / 1000.0);
    eprintln!(
        "{n} agents: steady ratio {steady_ratio:.3} (median), ternd {steady_ms_per_1k:.1} ms CPU/1k; RSS +{bytes_per_agent:.0} B/agent drained ({} MiB total after the change round); report+reconcile over HTTP {:.1} ms",
        rss_changed / (1 << 20),
        tick.as_secs_f64() * 1000.0
    );
    let large = n >= 1_000_000;
    Ok(json!({
        "register_hb_per_s": rate(wall_reg).round(),
        "register_baseline_hb_per_s": rate(base_reg).round(),
        "register_cpu_ms_per_1k": per_1k(cpu_reg),
        "steady_rounds": steady,
        "steady_ratio": steady_ratio,
        "steady_ratio_met": steady_ratio >= RATIO_TARGET,
        "steady_cpu_ms_per_1k": steady_ms_per_1k,
        "steady_cpu_met": large.then_some(steady_ms_per_1k <= CPU_PER_1K_TARGET_MS),
        "steady_baseline_cpu_ms_per_1k": baseline_ms_per_1k,
        "change_hb_per_s": rate(wall_chg).round(),
        "change_baseline_hb_per_s": rate(base_chg).round(),
        "change_cpu_ms_per_1k": per_1k(cpu_chg),
        "cores_for_1m_agents_at_30s": (cores_1m_30s * 100.0).round() / 100.0,
        "history_drain": {
            "writes": drained.writes,
            "extra_rounds": drained.rounds,
            "secs": drained.wall.as_secs_f64(),
        },
        "rss_before_bytes": rss0,
        "rss_registered_bytes": rss_registered,
        "rss_at_drain_bytes": rss_at_drain,
        "rss_drained_bytes": rss_drained,
        "rss_steady_bytes": rss_steady,
        "rss_changed_bytes": rss_changed,
        "bytes_per_agent_queue_full": (rss_registered.saturating_sub(rss0) as f64 / n as f64).round(),
        "bytes_per_agent": bytes_per_agent.round(),
        "bytes_per_agent_met": large.then_some(bytes_per_agent <= BYTES_PER_AGENT_TARGET),
        "http_report_and_reconcile_ms": tick.as_secs_f64() * 1000.0,
    }))
}

/// `tern-bench heartbeat-baseline`: the least an HTTP server can do for a heartbeat —
/// axum on the same runtime flavour as ternd, parsing the body into the same
/// `Heartbeat` and upserting it into a map by updater_id, answering a small JSON body.
pub fn baseline_server() -> anyhow::Result<()> {
    use std::collections::HashMap;

    use axum::Json;
    use axum::body::Bytes;
    use axum::http::StatusCode;
    use tern_core::wire::{Heartbeat, HeartbeatResponse};

    type Map = Arc<Mutex<HashMap<String, Heartbeat>>>;
    let map: Map = Arc::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let app = axum::Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .route(
                "/v1/agents/heartbeat",
                axum::routing::post(move |body: Bytes| {
                    let map = Arc::clone(&map);
                    async move {
                        let hb: Heartbeat = serde_json::from_slice(&body)
                            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
                        let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
                        m.insert(hb.updater_id.clone(), hb);
                        drop(m);
                        Ok::<_, (StatusCode, String)>(Json(HeartbeatResponse {
                            next_heartbeat_seconds: 30,
                            unknown_group: None,
                            placed_group: None,
                            install: None,
                        }))
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("heartbeat baseline listening on {}", listener.local_addr()?);
        axum::serve(listener, app).await?;
        Ok(())
    })
}
