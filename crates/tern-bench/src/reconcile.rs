//! `reconcile`: in-process, ternd's own report and reconcile path
//! (`tern_server::bench::{write_report, reconcile_once}` over a memory store and a
//! dev clock) with 10 agents and with 1M agents in the inventory; plus the pure
//! `tern_core::reconcile::reconcile` given every connected agent against
//! `reconcile_reports`, which takes only what the reports offer (what ternd runs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::json;
use tern_core::inventory::AgentView;
use tern_core::reconcile::{self, ReconcileInput, Resources};
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion, ConnectedAgent};
use tern_server::bench;
use tern_server::{AppState, DevClock, Settings};
use tern_store::MemoryStore;

use crate::ternd::{CONFIG, VERSION};
use crate::{Opts, fleet, median, procs};

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let big: u64 = if opts.quick { 20_000 } else { 1_000_000 };
    let reps = if opts.quick { 5 } else { 30 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let small = rt.block_on(one(10, reps))?;
    let large = rt.block_on(one(big, reps))?;
    let ratio = large.reconcile_ms / small.reconcile_ms;
    let ratio_again = large.reconcile_again_ms / small.reconcile_again_ms;
    eprintln!(
        "reconcile_once: {:.3} ms with 10 agents, {:.3} ms with {big} (ratio {ratio:.2}); \
         again at once: {:.3} ms / {:.3} ms (ratio {ratio_again:.2}); \
         report: {:.3} ms / {:.1} ms; core reconcile given every agent {:.1} ms vs the agents the reports offer {:.3} ms",
        small.reconcile_ms,
        large.reconcile_ms,
        small.reconcile_again_ms,
        large.reconcile_again_ms,
        small.report_ms,
        large.report_ms,
        large.core_all_ms,
        large.core_reports_ms
    );
    Ok(json!({
        "bench": "reconcile",
        "quick": opts.quick,
        "agents_small": 10,
        "agents_large": big,
        "reconcile_ms_small": small.reconcile_ms,
        "reconcile_ms_large": large.reconcile_ms,
        "reconcile_again_ms_small": small.reconcile_again_ms,
        "reconcile_again_ms_large": large.reconcile_again_ms,
        "ratio_again": (ratio_again * 1000.0).round() / 1000.0,
        "ratio": (ratio * 1000.0).round() / 1000.0,
        "ratio_target": 1.1,
        "ratio_met": ratio <= 1.1,
        "report_ms_small": small.report_ms,
        "report_ms_large": large.report_ms,
        "core_reconcile_all_agents_ms_large": large.core_all_ms,
        "core_reconcile_from_reports_ms_large": large.core_reports_ms,
        "inventory_bytes_per_agent_in_process": large.bytes_per_agent.round(),
        "loadavg": procs::loadavg(),
    }))
}

struct One {
    /// Right after this replica's report (as ternd runs it every period).
    reconcile_ms: f64,
    /// A second reconcile straight after the first.
    reconcile_again_ms: f64,
    report_ms: f64,
    core_all_ms: f64,
    core_reports_ms: f64,
    bytes_per_agent: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn one(n: u64, reps: usize) -> anyhow::Result<One> {
    let t0: Timestamp = "2026-11-23T11:00:00Z".parse()?;
    let clock = Arc::new(DevClock::new(t0));
    let store = Arc::new(MemoryStore::new());
    let dir = tempfile::tempdir()?;
    let settings = Settings {
        data_dir: dir.path().to_path_buf(),
        replica_id: "bench".into(),
        report_period: jiff::SignedDuration::from_secs(60),
        active_report_period: None,
        report_after_change: None,
        heartbeat_interval: Duration::from_secs(3600),
        find_rate: 0.0,
        find_burst: 1,
        heartbeat_rate: 0.0,
        heartbeat_burst: 1,
        leader_ttl: Duration::from_secs(3600),
        edition: "community".into(),
        public_max_age: 5,
        max_agents: usize::MAX,
        max_shared_token_hosts: usize::MAX,
        store_contact_bound: std::time::Duration::from_secs(30),
        canary_tenure: jiff::SignedDuration::from_secs(60),
        directive_period: std::time::Duration::from_secs(10),
        release_trust: None,
        long_poll: Default::default(),
        prometheus: None,
        security: Default::default(),
        artifact_check: None,
    };
    let state = AppState::new(store, clock.clone(), settings);
    let reporter = bench::Reporter::of(&state);
    let reconciler = bench::Reconciler::of(&state);
    let config = AutoUpdateConfig::from_text(CONFIG).map_err(|e| anyhow::anyhow!("{e}"))?;
    let version = AutoUpdateVersion::from_text(VERSION).map_err(|e| anyhow::anyhow!("{e}"))?;
    bench::write(state.store(), &config, None).await?;
    bench::write(state.store(), &version, None).await?;
    bench::reconcile_once(&reconciler)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let pid = std::process::id();
    let rss0 = procs::rss(pid)?;
    {
        let at = Instant::now();
        let mut inv = state.inventory();
        for i in 0..n {
            let hb = fleet::heartbeat(i, if i % 2 == 0 { "1.0.0" } else { "1.1.0" });
            inv.heartbeat(&hb, t0, at)?;
        }
    }
    let rss1 = procs::rss(pid)?;
    clock.set("2026-11-23T12:05:00Z".parse()?);

    let mut report = Vec::new();
    let mut recon = Vec::new();
    let mut recon_again = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        bench::write_report(&reporter)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        report.push(ms(t.elapsed()));
        let t = Instant::now();
        bench::reconcile_once(&reconciler)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        recon.push(ms(t.elapsed()));
        // At once again, nothing else run in between: what is left of the difference
        // once the report build's traffic no longer fills the caches.
        let t = Instant::now();
        bench::reconcile_once(&reconciler)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        recon_again.push(ms(t.elapsed()));
    }

    // The pure core, given every settled agent vs the agents it can use.
    let now = clock.now_value();
    let period = state.settings.report_period;
    let reports = bench::reports(state.store())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rollout = bench::load::<tern_core::resource::AutoUpdateAgentRollout>(state.store())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .map(|s| s.value);
    let mut core_all = Vec::new();
    let mut core_reports = Vec::new();
    for _ in 0..reps.min(5) {
        let t = Instant::now();
        let agents: Vec<ConnectedAgent> = {
            let inv = state.inventory();
            inv.agents()
                .filter(|a| a.settled(now, period))
                .map(|a| a.connected())
                .collect()
        };
        let input = ReconcileInput {
            config: Some(&config),
            version: Some(&version),
            rollout: rollout.as_ref(),
            reports: &reports,
            agents: &agents,
            report_period: period,
            frozen: false,
        };
        reconcile::reconcile(now, &input, &mut ChaCha8Rng::seed_from_u64(1));
        core_all.push(ms(t.elapsed()));

        // What ternd runs: the agents the live reports offer.
        let t = Instant::now();
        let resources = Resources {
            config: Some(&config),
            version: Some(&version),
            rollout: rollout.as_ref(),
            frozen: false,
        };
        reconcile::reconcile_reports(
            now,
            resources,
            &reports,
            period,
            &mut ChaCha8Rng::seed_from_u64(1),
        );
        core_reports.push(ms(t.elapsed()));
    }
    Ok(One {
        reconcile_ms: median(recon),
        reconcile_again_ms: median(recon_again),
        report_ms: median(report),
        core_all_ms: median(core_all),
        core_reports_ms: median(core_reports),
        bytes_per_agent: rss1.saturating_sub(rss0) as f64 / n as f64,
    })
}
