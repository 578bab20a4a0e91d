//! `converge`: with the simulator (tern-core's real reconcile and find over simulated
//! agents), for 10k agents over `examples/01-halt-on-error` (and the same with
//! backpressure on prod), in the same run:
//!
//! - the time from each group's window opening to the group done: Tern's defaults
//!   (60 s timer, find's jitter), the same hosts also long-polling find
//!   (`tern-update watch`, ternd's default 3 s release jitter, reports every 10 s
//!   while a group moves and 2 s after a host finishes), and the seeds' timer model
//!   (10-minute poll plus 60 s jitter);
//! - the time from a group's start to its first hosts, and its canaries, beginning to
//!   install, long poll against the 60 s timer;
//!
//! and, when a `ternd` binary is at hand, a real measurement: a few dozen HTTP clients
//! long-polling a real ternd against as many polling it on a timer, the time from one
//! group's start (`start-update`) to each client seeing its new answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jiff::SignedDuration;
use serde_json::json;
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_sim::{GroupSummary, Params, Sim};

use crate::ternd::{CONFIG, Ternd, VERSION};
use crate::{Opts, median, procs, quantile};

/// The whole fleet in one group, with backpressure.
const ONE_GROUP: &str = "kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
      - name: fleet
        days: [\"*\"]
        start_hour: 12
        max_in_flight: 10%
";

/// ternd's default `--long-poll-jitter`.
const RELEASE_JITTER_SECS: i64 = 3;

/// One way the hosts learn about changes.
#[derive(Clone, Copy)]
struct Model {
    poll_secs: i64,
    jitter_secs: Option<i64>,
    long_poll: Option<i64>,
    report_period_secs: i64,
    /// ternd's `--active-report-period` (default 10 s), absent before it existed.
    active_report_period_secs: Option<i64>,
    /// ternd's `--report-after-change` (default 2 s), absent before it existed.
    report_after_change_secs: Option<i64>,
    /// How long a host's install takes (download, swap, restart, health check).
    install_secs: i64,
}

const TIMER: Model = Model {
    poll_secs: 60,
    jitter_secs: None,
    long_poll: None,
    report_period_secs: 60,
    active_report_period_secs: None,
    report_after_change_secs: None,
    install_secs: INSTALL_SECS,
};
/// Tern now: the watcher's long poll, reports every 10 s while a group moves, and 2 s
/// after a host finishes.
const LONG_POLL: Model = Model {
    long_poll: Some(RELEASE_JITTER_SECS),
    active_report_period_secs: Some(ACTIVE_REPORT_PERIOD_SECS),
    report_after_change_secs: Some(REPORT_AFTER_CHANGE_SECS),
    ..TIMER
};
/// The long poll alone, reports every 60 s throughout: what each part brings.
const LONG_POLL_ONLY: Model = Model {
    active_report_period_secs: None,
    report_after_change_secs: None,
    ..LONG_POLL
};
/// The long poll and the active period, without the report after a change.
const LONG_POLL_ACTIVE_PERIOD: Model = Model {
    report_after_change_secs: None,
    ..LONG_POLL
};

/// ternd's default `--active-report-period`.
const ACTIVE_REPORT_PERIOD_SECS: i64 = 10;
/// ternd's default `--report-after-change`.
const REPORT_AFTER_CHANGE_SECS: i64 = 2;
/// The simulator's default install time; the one-group case also runs a fast one.
const INSTALL_SECS: i64 = 20;
const FAST_INSTALL_SECS: i64 = 5;
const SEEDS: Model = Model {
    poll_secs: 600,
    jitter_secs: Some(60),
    ..TIMER
};

fn ratio(a: Option<i64>, b: Option<i64>) -> serde_json::Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => json!(((a as f64 / b as f64) * 1000.0).round() / 1000.0),
        _ => serde_json::Value::Null,
    }
}

fn secs(v: Option<i64>) -> String {
    v.map_or("-".into(), |v| format!("{v}s"))
}

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let agents = if opts.quick { 1_000 } else { 10_000 };
    let groups = vec![
        ("dev".to_string(), 0.1),
        ("staging".to_string(), 0.2),
        ("prod".to_string(), 0.7),
    ];
    let sim_in =
        |config: &str, groups: &[(String, f64)], m: Model| -> anyhow::Result<Vec<GroupSummary>> {
            let config = AutoUpdateConfig::from_text(config).map_err(|e| anyhow::anyhow!("{e}"))?;
            let version =
                AutoUpdateVersion::from_text(VERSION).map_err(|e| anyhow::anyhow!("{e}"))?;
            let params = Params {
                agents,
                seed: 1,
                groups: groups.to_vec(),
                poll_secs: m.poll_secs,
                jitter_secs: m.jitter_secs,
                long_poll_jitter_secs: m.long_poll,
                report_period_secs: m.report_period_secs,
                active_report_period_secs: m.active_report_period_secs,
                report_after_change_secs: m.report_after_change_secs,
                install_secs: m.install_secs,
                ..Params::default()
            };
            let until = params
                .start
                .saturating_add(SignedDuration::from_hours(72))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut s = Sim::new(params, Some(config), version)?;
            Ok(s.run_until(until).groups)
        };
    let sim = |config: &str, m: Model| sim_in(config, &groups, m);
    let tern = sim(CONFIG, TIMER)?;
    let long_poll = sim(CONFIG, LONG_POLL)?;
    let seeds = sim(CONFIG, SEEDS)?;
    // What bounds the long poll's group time is the reconcile: without the active
    // report period, a group moves on once a minute.
    let long_poll_10s = sim(CONFIG, LONG_POLL_ONLY)?;
    let mut per = serde_json::Map::new();
    let mut starts = serde_json::Map::new();
    for (((t, l), s), l10) in tern.iter().zip(&long_poll).zip(&seeds).zip(&long_poll_10s) {
        let name = &t.name;
        eprintln!(
            "{name:8} window→done: Tern timer {:>6}  long poll {:>6}  seeds' timer {:>6}  (long poll, 60 s reports throughout: {})",
            secs(t.window_to_done_secs),
            secs(l.window_to_done_secs),
            secs(s.window_to_done_secs),
            secs(l10.window_to_done_secs),
        );
        eprintln!(
            "{name:8} start→first install: timer {:>5}  long poll {:>5};  →canaries installing: timer {:>5}  long poll {:>5}",
            secs(t.started_to_first_install_secs),
            secs(l.started_to_first_install_secs),
            secs(t.started_to_canaries_installing_secs),
            secs(l.started_to_canaries_installing_secs),
        );
        per.insert(
            name.clone(),
            json!({
                "tern_secs": t.window_to_done_secs,
                "long_poll_secs": l.window_to_done_secs,
                "seeds_secs": s.window_to_done_secs,
                "ratio": ratio(t.window_to_done_secs, s.window_to_done_secs),
                "long_poll_ratio": ratio(l.window_to_done_secs, t.window_to_done_secs),
                "long_poll_only_secs": l10.window_to_done_secs,
                "long_poll_only_ratio": ratio(l10.window_to_done_secs, t.window_to_done_secs),
            }),
        );
        starts.insert(
            name.clone(),
            json!({
                "first_install_timer_secs": t.started_to_first_install_secs,
                "first_install_long_poll_secs": l.started_to_first_install_secs,
                "canaries_installing_timer_secs": t.started_to_canaries_installing_secs,
                "canaries_installing_long_poll_secs": l.started_to_canaries_installing_secs,
            }),
        );
    }
    // The same with backpressure on prod (max_in_flight 10%: progress grows at each
    // reconcile as hosts update).
    let backpressure = CONFIG.replace(
        "        wait_hours: 24\n",
        "        wait_hours: 24\n        max_in_flight: 10%\n",
    );
    anyhow::ensure!(backpressure != CONFIG, "the example config changed shape");
    let prod = |v: &[GroupSummary]| v.iter().find(|g| g.name == "prod").cloned();
    let (bt, bl) = (
        prod(&sim(&backpressure, TIMER)?),
        prod(&sim(&backpressure, LONG_POLL)?),
    );
    let (bt, bl) = (
        bt.and_then(|g| g.window_to_done_secs),
        bl.and_then(|g| g.window_to_done_secs),
    );
    eprintln!(
        "prod with max_in_flight 10%: window→done timer {}  long poll {}",
        secs(bt),
        secs(bl)
    );
    // The whole fleet in one group with backpressure (max_in_flight 10%).
    let fleet = [("fleet".to_string(), 1.0)];
    let one = |m: Model| -> anyhow::Result<(Option<i64>, Option<i64>)> {
        let g = sim_in(ONE_GROUP, &fleet, m)?;
        let g = g.first().context("no group")?;
        Ok((g.window_to_done_secs, g.window_to_all_updated_secs))
    };
    let (ot, ol, ol10, ola) = (
        one(TIMER)?,
        one(LONG_POLL)?,
        one(LONG_POLL_ONLY)?,
        one(LONG_POLL_ACTIVE_PERIOD)?,
    );
    eprintln!(
        "one group of {agents}, max_in_flight 10%: window→done timer {}  long poll {}  (long poll, 60 s reports throughout: {}; with 10 s reports, none after a change: {})",
        secs(ot.0),
        secs(ol.0),
        secs(ol10.0),
        secs(ola.0)
    );
    // The same with 5 s installs (a nearby mirror, a small agent): the floor that
    // backpressure sets (10 waves of one install) is then far lower.
    let fast = |m: Model| Model {
        install_secs: FAST_INSTALL_SECS,
        ..m
    };
    let (ft, fl) = (one(fast(TIMER))?, one(fast(LONG_POLL))?);
    eprintln!(
        "the same, {FAST_INSTALL_SECS} s installs: window→done timer {}  long poll {}",
        secs(ft.0),
        secs(fl.0)
    );
    let real = if opts.ternd.is_file() {
        Some(real_fleet(opts)?)
    } else {
        eprintln!(
            "no ternd at {}: the real measurement is skipped",
            opts.ternd.display()
        );
        None
    };
    Ok(json!({
        "bench": "converge",
        "quick": opts.quick,
        "agents": agents,
        "tern": {"poll_secs": 60, "jitter": "find (60s)"},
        "long_poll": {"poll_secs": 60, "release_jitter_secs": RELEASE_JITTER_SECS, "active_report_period_secs": ACTIVE_REPORT_PERIOD_SECS, "report_after_change_secs": REPORT_AFTER_CHANGE_SECS},
        "seeds": {"poll_secs": 600, "jitter_secs": 60},
        "window_to_done": per,
        "start_to_install": starts,
        "backpressure_prod_window_to_done": {
            "max_in_flight": "10%",
            "tern_secs": bt,
            "long_poll_secs": bl,
            "long_poll_ratio": ratio(bl, bt),
        },
        "one_group_backpressure_window_to_done": {
            "agents": agents,
            "max_in_flight": "10%",
            "tern_secs": ot.0,
            "long_poll_secs": ol.0,
            "long_poll_ratio": ratio(ol.0, ot.0),
            "long_poll_only_secs": ol10.0,
            "long_poll_only_ratio": ratio(ol10.0, ot.0),
            "long_poll_no_report_after_change_secs": ola.0,
            "long_poll_no_report_after_change_ratio": ratio(ola.0, ot.0),
            "install_secs": INSTALL_SECS,
        },
        "one_group_backpressure_fast_install_window_to_done": {
            "agents": agents,
            "max_in_flight": "10%",
            "install_secs": FAST_INSTALL_SECS,
            "tern_secs": ft.0,
            "long_poll_secs": fl.0,
            "long_poll_ratio": ratio(fl.0, ft.0),
        },
        "real": real,
        "loadavg": procs::loadavg(),
    }))
}

/// A GET's status, ETag and `tern-long-poll` header (one connection per request).
fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let text = String::from_utf8_lossy(&resp);
    let (head, _) = text.split_once("\r\n\r\n").context("no response head")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status code")?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    Ok((status, header("etag"), header("tern-long-poll")))
}

fn find_path(id: &str) -> String {
    format!("/v1/webapi/find?group=staging&updater_id={id}")
}

/// Seconds from `t0` to each instant.
fn since(t0: Instant, seen: &[Instant]) -> Vec<f64> {
    seen.iter()
        .map(|t| t.saturating_duration_since(t0).as_secs_f64())
        .collect()
}

/// `clients` hosts long-poll a real ternd while as many poll it every `period`
/// (each with its own phase); staging is started (`start-update --force`) once every
/// long poll is held; each client's time to see its new answer is measured.
fn real_fleet(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let (clients, period) = if opts.quick {
        (8u64, Duration::from_secs(1))
    } else {
        (48u64, Duration::from_secs(60))
    };
    let ternd = Ternd::start(&opts.ternd, &[])?;
    let addr = ternd.server.addr;
    let (tx, rx) = std::sync::mpsc::channel::<(bool, anyhow::Result<Instant>)>();
    for i in 0..clients {
        let tx = tx.clone();
        let id = crate::fleet::updater_id(1_000_000 + i);
        std::thread::spawn(move || {
            let seen = (|| {
                let (_, etag, _) = get(addr, &find_path(&id))?;
                let seen: String = etag.replace('"', "%22");
                // As the watcher does: a hold that ends unchanged is asked again (and
                // one asked again just after the change is answered at once).
                loop {
                    let (status, _, how) =
                        get(addr, &format!("{}&wait=50&seen={seen}", find_path(&id)))?;
                    match (status, how.as_str()) {
                        (200, "changed" | "immediate") => return Ok(Instant::now()),
                        (200, "expired") => continue,
                        _ => anyhow::bail!("long poll: {status} {how}"),
                    }
                }
            })();
            let _ = tx.send((true, seen));
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = crate::load::request(addr, "GET", "/metrics", None, b"")?;
        let text = String::from_utf8_lossy(&metrics);
        if text.contains(&format!("\ntern_find_long_poll_held {clients}\n")) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the long polls were never all held"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    for i in 0..clients {
        let tx = tx.clone();
        let id = crate::fleet::updater_id(2_000_000 + i);
        // Evenly spread phases: the timer clients ask at every part of the period.
        let phase = period.mul_f64(i as f64 / clients as f64);
        std::thread::spawn(move || {
            let seen = (|| {
                let (_, first, _) = get(addr, &find_path(&id))?;
                std::thread::sleep(phase);
                let limit = Instant::now() + period * 3;
                loop {
                    let (_, etag, _) = get(addr, &find_path(&id))?;
                    if etag != first {
                        return Ok(Instant::now());
                    }
                    anyhow::ensure!(
                        Instant::now() < limit,
                        "the timer client never saw the change"
                    );
                    std::thread::sleep(period);
                }
            })();
            let _ = tx.send((false, seen));
        });
    }
    drop(tx);
    // Every timer client has asked once at its phase before the change.
    std::thread::sleep(period + Duration::from_millis(100));
    let t0 = Instant::now();
    ternd.call(
        "POST",
        "/v1/agents/start-update",
        br#"{"groups":["staging"],"force":true}"#,
    )?;
    let (mut long, mut timer) = (Vec::new(), Vec::new());
    for (is_long, seen) in rx {
        let t = seen?;
        if is_long { long.push(t) } else { timer.push(t) }
    }
    let (long, timer) = (since(t0, &long), since(t0, &timer));
    let ms = |v: f64| (v * 1e6).round() / 1e3;
    let (lm, tm) = (median(long.clone()), median(timer.clone()));
    let (lmax, tmax) = (quantile(long.clone(), 1.0), quantile(timer.clone(), 1.0));
    eprintln!(
        "real ternd, {clients} long-poll vs {clients} timer clients ({}s period): change seen after median {:.1} ms vs {:.1} ms, max {:.1} ms vs {:.1} ms (the timer clients ran {:.1}s)",
        period.as_secs(),
        lm * 1e3,
        tm * 1e3,
        lmax * 1e3,
        tmax * 1e3,
        started.elapsed().as_secs_f64()
    );
    Ok(json!({
        "clients": clients,
        "timer_period_secs": period.as_secs(),
        "release_jitter": "none: the bench's ternd runs on --dev-clock, which turns it off",
        "long_poll_median_ms": ms(lm),
        "long_poll_max_ms": ms(lmax),
        "timer_median_ms": ms(tm),
        "timer_max_ms": ms(tmax),
        "median_ratio": ((lm / tm) * 1e4).round() / 1e4,
    }))
}
