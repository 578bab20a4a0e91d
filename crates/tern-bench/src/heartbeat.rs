//! `heartbeat`: N simulated agents heartbeat to a real ternd over its API (bearer
//! token, JSON body, keep-alive). ternd's CPU time comes from `/proc/PID/stat`, its
//! resident memory from `/proc/PID/status`; the generator runs in this process and is
//! not counted. 1M agents every 30 s is 33k heartbeats/s, more than 2 shared cores can
//! generate and serve at once, so the test is scaled: every agent heartbeats once to
//! register and once more (the steady state), as fast as ternd takes them, and the CPU
//! per heartbeat gives the cores that 1M agents at 30 s would need.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use crate::load::{self, Load};
use crate::ternd::Ternd;
use crate::{Opts, fleet, procs};

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let sizes: &[u64] = if opts.quick {
        &[5_000]
    } else {
        &[100_000, 1_000_000]
    };
    let mut per = serde_json::Map::new();
    for &n in sizes {
        per.insert(n.to_string(), one(opts, n)?);
    }
    Ok(json!({
        "bench": "heartbeat",
        "quick": opts.quick,
        "connections": opts.connections,
        "interval_secs": 30,
        "agents": per,
        "bytes_per_agent_target": 300,
        "loadavg": procs::loadavg(),
    }))
}

/// One heartbeat of every agent `0..n`, version `version`; returns (wall, ternd CPU).
pub fn round(
    ternd: &Ternd,
    n: u64,
    version: &'static str,
    conns: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let next = Arc::new(AtomicU64::new(0));
    let token: Arc<str> = ternd.token.as_str().into();
    let source: load::Source = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return None;
        }
        let body = serde_json::to_vec(&fleet::heartbeat(i, version)).ok()?;
        Some(load::post_json("/v1/agents/heartbeat", &token, &body))
    });
    let cpu0 = procs::cpu_time(ternd.pid())?;
    let start = Instant::now();
    let o = load::run(&Load {
        addr: ternd.server.addr,
        connections: conns,
        duration: Duration::from_secs(3600),
        rate: None,
        source,
    })?;
    let wall = start.elapsed();
    let cpu = procs::cpu_time(ternd.pid())?.saturating_sub(cpu0);
    if o.bad_status > 0 || o.ok != n {
        bail!(
            "{} of {n} heartbeats accepted ({} refused)",
            o.ok,
            o.bad_status
        );
    }
    Ok((wall, cpu))
}

fn one(opts: &Opts, n: u64) -> anyhow::Result<serde_json::Value> {
    let ternd = Ternd::start(&opts.ternd, &[])?;
    std::thread::sleep(Duration::from_millis(300));
    let rss0 = procs::rss(ternd.pid())?;
    let (wall1, cpu1) = round(&ternd, n, "1.0.0", opts.connections)?;
    let rss1 = procs::rss(ternd.pid())?;
    // The steady state: every agent again (half of them now on the target).
    let (wall2, cpu2) = round(&ternd, n, "1.1.0", opts.connections)?;
    let rss2 = procs::rss(ternd.pid())?;
    // Settle the agents (one report period), then time a report + reconcile.
    ternd.call(
        "POST",
        "/v1/dev/clock",
        br#"{"set":"2026-11-23T12:07:00Z"}"#,
    )?;
    let t = Instant::now();
    ternd.call("POST", "/v1/dev/reconcile", b"")?;
    let tick = t.elapsed();
    let bytes_per_agent = rss1.saturating_sub(rss0) as f64 / n as f64;
    let per_1k = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / (n as f64 / 1000.0);
    let steady_ms_per_1k = per_1k(cpu2);
    // Cores needed for 1M agents heartbeating every 30 s at this CPU cost.
    let cores_1m_30s = steady_ms_per_1k / 1000.0 * (1_000_000.0 / 30.0 / 1000.0);
    eprintln!(
        "{n} agents: register {:.0} hb/s, ternd CPU {:.1} ms/1k; steady {:.0} hb/s, {:.1} ms/1k; \
         RSS +{:.0} B/agent ({} MiB total); report+reconcile over HTTP {:.1} ms",
        n as f64 / wall1.as_secs_f64(),
        per_1k(cpu1),
        n as f64 / wall2.as_secs_f64(),
        steady_ms_per_1k,
        bytes_per_agent,
        rss2 / (1 << 20),
        tick.as_secs_f64() * 1000.0
    );
    Ok(json!({
        "register_hb_per_s": (n as f64 / wall1.as_secs_f64()).round(),
        "register_cpu_ms_per_1k": per_1k(cpu1),
        "steady_hb_per_s": (n as f64 / wall2.as_secs_f64()).round(),
        "steady_cpu_ms_per_1k": steady_ms_per_1k,
        "cores_for_1m_agents_at_30s": (cores_1m_30s * 100.0).round() / 100.0,
        "rss_before_bytes": rss0,
        "rss_after_bytes": rss1,
        "bytes_per_agent": bytes_per_agent.round(),
        "bytes_per_agent_met": bytes_per_agent <= 300.0,
        "http_report_and_reconcile_ms": tick.as_secs_f64() * 1000.0,
    }))
}
