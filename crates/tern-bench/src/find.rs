//! `find`: ternd's `GET /v1/webapi/find` against a minimal axum server returning a
//! fixed JSON body of the same size, with the same generator, connections and
//! keep-alive over loopback. Then p99 at half of ternd's peak rate.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;

use crate::load::{self, Load, Outcome};
use crate::procs::{self, Server};
use crate::ternd::Ternd;
use crate::{Opts, median};

const PATH: &str = "/v1/webapi/find?group=dev&updater_id=3f1d9c2e-8a4b-4c6d-9e0f-1a2b3c4d5e6f";

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let ternd = Ternd::start(&opts.ternd, &[])?;
    let (status, body) = load::request(ternd.server.addr, "GET", PATH, None, b"")?;
    if status != 200 {
        bail!("find answered {status}");
    }
    let find: serde_json::Value =
        serde_json::from_slice(&body).context("find did not answer JSON")?;
    eprintln!(
        "find answers {} bytes: {}",
        body.len(),
        String::from_utf8_lossy(&body)
    );
    let dir = tempfile::tempdir()?;
    let body_file = dir.path().join("find.json");
    std::fs::write(&body_file, &body)?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("baseline-server").arg(&body_file);
    let baseline = Server::spawn(cmd)?;
    baseline.wait_ready(PATH)?;

    let (rounds, secs, warm) = if opts.quick {
        (1, 1.0, 0.3)
    } else {
        (3, 5.0, 1.0)
    };
    let conns = opts.connections;
    let closed = |addr| Load {
        addr,
        connections: conns,
        duration: Duration::from_secs_f64(secs),
        rate: None,
        source: fixed(PATH),
        check: None,
        gate: None,
    };
    let mut t_runs = Vec::new();
    let mut b_runs = Vec::new();
    for round in 0..rounds {
        for (name, addr, runs) in [
            ("ternd", ternd.server.addr, &mut t_runs),
            ("baseline", baseline.addr, &mut b_runs),
        ] {
            let mut warmup = closed(addr);
            warmup.duration = Duration::from_secs_f64(warm);
            load::run(&warmup)?;
            let o = load::run(&closed(addr))?;
            eprintln!(
                "round {round} {name:8}: {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms  ({} non-2xx)",
                o.rps(),
                o.quantile_ms(0.5),
                o.quantile_ms(0.99),
                o.bad_status
            );
            if o.bad_status > 0 {
                bail!("{name} answered {} requests with an error", o.bad_status);
            }
            runs.push(o);
        }
    }
    let pick = |runs: &Vec<Outcome>| {
        let rps = median(runs.iter().map(Outcome::rps).collect());
        let p50 = median(runs.iter().map(|o| o.quantile_ms(0.5)).collect());
        let p99 = median(runs.iter().map(|o| o.quantile_ms(0.99)).collect());
        (rps, p50, p99)
    };
    let (t_rps, t_p50, t_p99) = pick(&t_runs);
    let (b_rps, b_p50, b_p99) = pick(&b_runs);

    // Open loop at half of ternd's peak, for both servers.
    let half = t_rps / 2.0;
    let open = |addr| Load {
        addr,
        connections: conns,
        duration: Duration::from_secs_f64(if opts.quick { 1.0 } else { 10.0 }),
        rate: Some(half),
        source: fixed(PATH),
        check: None,
        gate: None,
    };
    let t_half = load::run(&open(ternd.server.addr))?;
    let b_half = load::run(&open(baseline.addr))?;
    eprintln!(
        "at {half:.0} req/s (half of ternd's peak): ternd p50 {:.3} ms p99 {:.3} ms ({:.0} req/s done); baseline p50 {:.3} ms p99 {:.3} ms",
        t_half.quantile_ms(0.5),
        t_half.quantile_ms(0.99),
        t_half.rps(),
        b_half.quantile_ms(0.5),
        b_half.quantile_ms(0.99),
    );
    let ratio = t_rps / b_rps;
    Ok(json!({
        "bench": "find",
        "quick": opts.quick,
        "connections": conns,
        "body_bytes": body.len(),
        "answer": find,
        "ternd": {"rps": t_rps.round(), "p50_ms": t_p50, "p99_ms": t_p99},
        "baseline": {"rps": b_rps.round(), "p50_ms": b_p50, "p99_ms": b_p99},
        "ratio": (ratio * 1000.0).round() / 1000.0,
        "ratio_target": 0.8,
        "ratio_met": ratio >= 0.8,
        "half_rate": {
            "rps": half.round(),
            "ternd_p50_ms": t_half.quantile_ms(0.5),
            "ternd_p99_ms": t_half.quantile_ms(0.99),
            "baseline_p99_ms": b_half.quantile_ms(0.99),
            "p99_target_ms": 2.0,
            "p99_met": t_half.quantile_ms(0.99) < 2.0,
        },
        "loadavg": procs::loadavg(),
    }))
}

fn fixed(path: &str) -> load::Source {
    let req = load::get(path);
    Arc::new(move || Some(Arc::clone(&req)))
}

/// `tern-bench baseline-server FILE`: the least an HTTP server can do for find — axum
/// on the same runtime flavour as ternd, answering every GET with FILE's bytes as JSON
/// (plus the same `Cache-Control`).
pub fn baseline_server(body_file: &Path) -> anyhow::Result<()> {
    use axum::http::header;
    let body: axum::body::Bytes = std::fs::read(body_file)?.into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let app = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "public, max-age=5"),
                    ],
                    body,
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("baseline listening on {}", listener.local_addr()?);
        axum::serve(listener, app).await?;
        Ok(())
    })
}
