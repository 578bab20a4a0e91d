//! `attack`: find's latency while ternd is attacked, against find's latency on the same
//! ternd a moment before (the baseline, same run). The attack: 5,000 half-open
//! connections (a request line and a header, never the blank line that ends the
//! headers) from 20 loopback addresses (250 each, under the per-address cap, so that
//! every one is held), and 4 clients posting a config nested 40,000 levels deep, over
//! and over, with a user token. find is asked at a fixed rate (open loop: latency from
//! the instant each request was due) from 127.0.0.1 over keep-alive connections.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::Opts;
use crate::load::{self, Load, Outcome};
use crate::procs;
use crate::ternd::Ternd;

const PATH: &str = "/v1/webapi/find?group=dev&updater_id=3f1d9c2e-8a4b-4c6d-9e0f-1a2b3c4d5e6f";
const HALF_OPEN: usize = 5_000;
const SOURCES: u8 = 20;
const NESTED_CLIENTS: usize = 4;
const DEPTH: usize = 40_000;

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    // The attack holds over a thousand sockets: the soft limit goes to the hard one.
    let _ = tern_server::descriptor_budget();
    let ternd = Ternd::start(&opts.ternd, &[])?;
    let addr = ternd.server.addr;
    let user = token(&ternd, "user")?;
    let (rate, secs) = if opts.quick {
        (200.0, 2.0)
    } else {
        (2_000.0, 8.0)
    };
    let find = |addr| Load {
        addr,
        connections: opts.connections,
        duration: Duration::from_secs_f64(secs),
        rate: Some(rate),
        source: Arc::new(|| Some(load::get(PATH))),
        check: None,
        gate: None,
    };
    load::run(&Load {
        duration: Duration::from_secs(1),
        ..find(addr)
    })?;
    let quiet = load::run(&find(addr))?;
    report("quiet", &quiet);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let held = rt.block_on(hold_half_open(addr))?;
    eprintln!("holding {held} half-open connections");
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let body = Arc::new(nested_body());
    let posters: Vec<_> = (0..NESTED_CLIENTS)
        .map(|_| {
            let (stop, refused, body, user) = (
                Arc::clone(&stop),
                Arc::clone(&refused),
                Arc::clone(&body),
                user.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match load::request(
                        addr,
                        "POST",
                        "/v1/resources/config?force=true",
                        Some(&user),
                        body.as_bytes(),
                    ) {
                        Ok((400, _)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((status, b)) => eprintln!(
                            "nested body answered {status}: {}",
                            String::from_utf8_lossy(&b)
                        ),
                        Err(e) => eprintln!("nested body: {e}"),
                    }
                }
            })
        })
        .collect();
    let attacked = load::run(&find(addr));
    stop.store(true, Ordering::Relaxed);
    for p in posters {
        let _ = p.join();
    }
    let attacked = attacked?;
    report("attacked", &attacked);
    if quiet.bad_status + attacked.bad_status > 0 {
        bail!("find answered errors");
    }
    let metrics = String::from_utf8_lossy(&ternd.call("GET", "/metrics", b"")?).into_owned();
    let open = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tern_connections_open "))
        .unwrap_or("?")
        .to_string();
    drop(rt);
    let p99 = attacked.quantile_ms(0.99);
    Ok(json!({
        "bench": "attack",
        "quick": opts.quick,
        "find_rate": rate,
        "half_open_held": held,
        "connections_open_at_end": open,
        "nested_bodies_refused": refused.load(Ordering::Relaxed),
        "quiet": {"p50_ms": quiet.quantile_ms(0.5), "p99_ms": quiet.quantile_ms(0.99), "rps": quiet.rps().round()},
        "attacked": {"p50_ms": attacked.quantile_ms(0.5), "p99_ms": p99, "rps": attacked.rps().round()},
        "p99_ratio": ((p99 / quiet.quantile_ms(0.99)) * 100.0).round() / 100.0,
        "p99_target_ms": 50.0,
        "p99_met": p99 < 50.0,
        "loadavg": procs::loadavg(),
    }))
}

fn report(name: &str, o: &Outcome) {
    eprintln!(
        "{name:9} find: {:>6.0} req/s  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        o.rps(),
        o.quantile_ms(0.5),
        o.quantile_ms(0.99),
        o.quantile_ms(1.0)
    );
}

fn token(ternd: &Ternd, role: &str) -> anyhow::Result<String> {
    let v: serde_json::Value = serde_json::from_slice(&ternd.call(
        "POST",
        "/v1/tokens",
        format!(r#"{{"role":"{role}"}}"#).as_bytes(),
    )?)?;
    v["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no token in {v}"))
}

fn nested_body() -> String {
    format!(
        "{{\"kind\":\"autoupdate_config\",\"spec\":{}{}}}",
        "[".repeat(DEPTH),
        "]".repeat(DEPTH)
    )
}

/// Opens the half-open connections; they stay open until the runtime is dropped.
async fn hold_half_open(server: SocketAddr) -> anyhow::Result<usize> {
    let per = HALF_OPEN / usize::from(SOURCES);
    let mut held = 0;
    for s in 0..SOURCES {
        let source = Ipv4Addr::new(127, 0, 0, 2 + s);
        for _ in 0..per {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind((source, 0).into())?;
            let Ok(mut stream) = socket.connect(server).await else {
                continue;
            };
            if stream
                .write_all(b"GET /v1/webapi/find HTTP/1.1\r\nHost: ternd\r\nX-Slow: ")
                .await
                .is_ok()
            {
                held += 1;
                // Kept open (and never read) until the runtime goes.
                tokio::spawn(async move {
                    let _keep = stream;
                    std::future::pending::<()>().await;
                });
            }
        }
    }
    Ok(held)
}
