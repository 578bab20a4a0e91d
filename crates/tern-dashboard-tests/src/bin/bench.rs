//! `tern-dashboard-bench --ternd BIN [--quick] [--agents N]` (run by `cargo xtask bench
//! dashboard`; `TERN_BENCH_DASHBOARD_AGENTS` sets N there):
//! a real ternd holding N agents (100k; 5k with `--quick`) heartbeated over its API, and
//! headless Chromium loading the dashboard's rollout and inventory pages, each load a
//! fresh navigation. Measured in the browser: time from navigation start to the page's
//! first content (`window.ternFirstRender`, set by the page when it has drawn the
//! data), against fetching `GET /v1/agents/status` alone from the same page (the
//! baseline, same run); each page's own requests to ternd fetched alone (what the page
//! waits for on ternd's side); and the bytes the inventory page loads (document, script, style
//! sheet, whoami and one page of hosts). Progress on stderr, the figures as one JSON
//! object on the last line of stdout.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tern_dashboard_tests::Browser;

const USAGE: &str = "usage: tern-dashboard-bench --ternd BIN [--quick] [--agents N]\n(or TERN_BENCH_DASHBOARD_AGENTS=N; default 100000, 5000 with --quick)";
/// Loads of each page measured (after one warm-up load).
const RUNS: usize = 9;

fn main() -> anyhow::Result<()> {
    let mut ternd_bin: Option<PathBuf> = None;
    let mut quick = false;
    let mut agents: Option<u64> = match std::env::var("TERN_BENCH_DASHBOARD_AGENTS") {
        Ok(n) => Some(
            n.parse()
                .with_context(|| format!("TERN_BENCH_DASHBOARD_AGENTS={n:?} is not a count"))?,
        ),
        Err(_) => None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ternd" => ternd_bin = Some(args.next().context(USAGE)?.into()),
            "--quick" => quick = true,
            "--agents" => {
                let n = args.next().context(USAGE)?;
                agents = Some(
                    n.parse()
                        .with_context(|| format!("--agents {n:?} is not a count"))?,
                );
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let ternd_bin = ternd_bin.context(USAGE)?;
    let agents: u64 = agents.unwrap_or(if quick { 5_000 } else { 100_000 });
    eprintln!("dashboard: starting ternd and heartbeating {agents} agents");
    let ternd = tern_bench::ternd::Ternd::start(&ternd_bin, &[])?;
    tern_bench::heartbeat::round(&ternd, agents, "1.0.0", 16)?;
    // Half of them on the target, then one report period so they are counted.
    tern_bench::heartbeat::round(&ternd, agents / 2, "1.1.0", 16)?;
    ternd.call(
        "POST",
        "/v1/dev/clock",
        br#"{"set":"2026-11-23T12:07:00Z"}"#,
    )?;
    ternd.call("POST", "/v1/dev/reconcile", b"")?;
    let url = format!("http://{}", ternd.server.addr);
    let full = ternd.call("GET", "/v1/inventory", b"")?.len();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let figures = rt.block_on(measure(&url, &ternd.token, agents, full))?;
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One fresh load of `hash`: (first render ms, bytes loaded up to it).
async fn load(b: &Browser, url: &str, page: &str) -> anyhow::Result<(f64, f64)> {
    b.client.goto("about:blank").await?;
    b.client.goto(&format!("{url}/#/{page}")).await?;
    let v = b
        .wait_js(
            page,
            &format!(
                "if (document.getElementById('main').dataset.page !== '{page}' || window.ternFirstRender === undefined) return null;
                 const t = window.ternFirstRender;
                 const all = performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'));
                 const bytes = all.filter(e => e.responseEnd <= t + 1).reduce((s, e) => s + (e.encodedBodySize || 0), 0);
                 return [t, bytes];"
            ),
            Duration::from_secs(60),
        )
        .await?;
    let n = |i: usize| v[i].as_f64().context("not a number");
    Ok((n(0)?, n(1)?))
}

/// The requests a page makes to ternd before its first render, one after the other as
/// the page makes them (`app.js`): what the page waits for on ternd's side.
fn page_requests(page: &str) -> &'static [&'static str] {
    match page {
        "inventory" => &["/v1/whoami", "/v1/inventory?limit=50"],
        _ => &["/v1/whoami", "/v1/agents/status"],
    }
}

/// `RUNS` times: the milliseconds from the page's first request of `paths` to the end of
/// its last, fetched in order from the open page with its token, bodies read in full.
async fn fetch_times(b: &Browser, paths: &[&str]) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let v = b
            .client
            .execute_async(
                "const [paths, done] = [arguments[0], arguments[arguments.length - 1]];
                 const auth = {Authorization: 'Bearer ' + sessionStorage.getItem('tern.token')};
                 const t0 = performance.now();
                 (async () => {
                   for (const p of paths) {
                     const r = await fetch(p, {cache: 'no-store', headers: auth});
                     if (!r.ok) throw new Error(p + ': ' + r.status);
                     await r.json();
                   }
                 })().then(() => done(performance.now() - t0), () => done(-1));",
                vec![json!(paths)],
            )
            .await?;
        let ms = v.as_f64().context("fetch time")?;
        if ms < 0.0 {
            bail!("fetching {paths:?} from the page failed");
        }
        times.push(ms);
    }
    Ok(times)
}

async fn measure(
    url: &str,
    token: &str,
    agents: u64,
    full_inventory_bytes: usize,
) -> anyhow::Result<Value> {
    let b = Browser::start().await?;
    // Log in once: the token in this tab's session storage, as the log-in form does.
    b.client.goto(&format!("{url}/#/login")).await?;
    b.client
        .execute(
            "sessionStorage.setItem('tern.token', arguments[0]);",
            vec![json!(token)],
        )
        .await?;
    let mut out = serde_json::Map::new();
    let status = median(fetch_times(&b, &["/v1/agents/status"]).await?);
    eprintln!("status JSON alone: {status:.1} ms (median of {RUNS})");
    for page in ["rollout", "inventory"] {
        let (_, cold_bytes) = load(&b, url, page).await?;
        let mut times = Vec::new();
        for _ in 0..RUNS {
            times.push(load(&b, url, page).await?.0);
        }
        let first = median(times);
        let api = median(fetch_times(&b, page_requests(page)).await?);
        eprintln!(
            "{page}: first render {first:.1} ms (median of {RUNS}), {:.1}x the status JSON; its API requests alone {api:.1} ms; {:.1} KB loaded",
            first / status,
            cold_bytes / 1000.0
        );
        out.insert(
            page.to_string(),
            json!({
                "first_render_ms": (first * 10.0).round() / 10.0,
                "api_requests_ms": (api * 10.0).round() / 10.0,
                "ratio_to_status_json": (first / status * 100.0).round() / 100.0,
                "bytes_loaded": cold_bytes,
            }),
        );
    }
    b.close().await?;
    Ok(json!({
        "bench": "dashboard",
        "agents": agents,
        "runs": RUNS,
        "status_json_ms": (status * 10.0).round() / 10.0,
        "pages": out,
        "first_render_target_ms": 300,
        "inventory_page_target_bytes": 200_000,
        "whole_inventory_json_bytes": full_inventory_bytes,
        "loadavg": tern_bench::procs::loadavg(),
    }))
}
