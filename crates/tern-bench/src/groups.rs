//! `coverage` and `topology`: in-process, tern-core only.
//!
//! - `coverage`: over many random fleets with skewed attributes (arch 90/9/1 %, five
//!   OS versions from 60 % to 1 %, six zones), what three canaries cover of
//!   `[arch, os_version, labels.zone]` when picked for coverage
//!   (`canary::pick_covering`) against a uniform random pick (`canary::pick`), in the
//!   same run; and what a covering pick of 5 costs over the ~100 candidates a leader
//!   gets, and over 10k, against a random one.
//! - `topology`: a replica's report over 100k hosts in 20 zones with a topology limit
//!   against the same report without one (time and bytes); and on a fleet of hosts
//!   acting on find (2,000 hosts, 10 zones, `max_in_flight: 20%`, an install taking
//!   three reconciles), the most hosts of one zone installing at once and the
//!   reconciles to done, with `{key: zone, max_in_flight: 5}` against without.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::json;
use tern_core::canary;
use tern_core::gate;
use tern_core::inventory::{InventoryAgent, replica_report};
use tern_core::reconcile::{Outcome, Resources, needs, reconcile_reports};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
    ConnectedAgent, GroupState,
};
use tern_core::rollout::DEFAULT_REPORT_PERIOD;
use tern_core::wire::Heartbeat;

use crate::{Opts, median};

const COVER: [&str; 3] = ["arch", "os_version", "labels.zone"];

/// A value from `weights` (relative), drawn with `rng`.
fn weighted<'a>(rng: &mut ChaCha8Rng, weights: &[(&'a str, u32)]) -> &'a str {
    let total: u32 = weights.iter().map(|(_, w)| w).sum();
    let mut x = (rng.next_u64() % u64::from(total)) as u32;
    for (v, w) in weights {
        if x < *w {
            return v;
        }
        x -= w;
    }
    weights[0].0
}

fn candidate(rng: &mut ChaCha8Rng, i: usize) -> ConnectedAgent {
    let arch = weighted(rng, &[("amd64", 90), ("arm64", 9), ("riscv64", 1)]);
    let os = weighted(
        rng,
        &[
            ("debian-12", 60),
            ("debian-13", 25),
            ("ubuntu-24.04", 10),
            ("ubuntu-22.04", 4),
            ("rhel-9", 1),
        ],
    );
    let zone = format!("z{}", rng.next_u64() % 6);
    ConnectedAgent {
        updater_id: tern_core::ids::uuid_v4({
            let mut b = [0u8; 16];
            rng.fill_bytes(&mut b);
            b[..8].copy_from_slice(&(i as u64).to_be_bytes());
            b
        }),
        host_id: String::new(),
        hostname: String::new(),
        group: "staging".into(),
        version: "1.0.0".into(),
        updater_status: tern_core::wire::UpdaterStatus::Enabled,
        healthy: Some(true),
        failed_version: None,
        refused_version: None,
        attributes: BTreeMap::from([
            ("arch".to_string(), arch.to_string()),
            ("os_version".to_string(), os.to_string()),
            ("labels.zone".to_string(), zone),
        ]),
    }
}

/// (values covered, values there were, rare values covered, rare values there were)
/// of `picked` among `hosts`; a value is rare when under 5 % of the hosts have it.
fn scored(picked: &[tern_core::resource::Canary], hosts: &[ConnectedAgent]) -> [usize; 4] {
    let on: HashSet<&str> = picked.iter().map(|c| c.updater_id.as_str()).collect();
    let mut score = [0; 4];
    for attr in COVER {
        let mut count: HashMap<&str, (usize, bool)> = HashMap::new();
        for h in hosts {
            let e = count.entry(&h.attributes[attr]).or_default();
            e.0 += 1;
            e.1 |= on.contains(h.updater_id.as_str());
        }
        for (n, covered) in count.values() {
            score[0] += usize::from(*covered);
            score[1] += 1;
            if *n * 20 < hosts.len() {
                score[2] += usize::from(*covered);
                score[3] += 1;
            }
        }
    }
    score
}

pub fn coverage(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let trials = if opts.quick { 100 } else { 2_000 };
    let cover: Vec<String> = COVER.iter().map(|s| s.to_string()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (mut covering, mut random) = ([0usize; 4], [0usize; 4]);
    for t in 0..trials {
        let n = 50 + (rng.next_u64() % 451) as usize;
        let hosts: Vec<ConnectedAgent> = (0..n).map(|i| candidate(&mut rng, i)).collect();
        let refs: Vec<&ConnectedAgent> = hosts.iter().collect();
        let mut pick_rng = ChaCha8Rng::seed_from_u64(t as u64);
        let c = scored(
            &canary::pick_covering(&refs, 3, &cover, &mut pick_rng),
            &hosts,
        );
        let r = scored(&canary::pick(&refs, 3, &mut pick_rng), &hosts);
        for i in 0..4 {
            covering[i] += c[i];
            random[i] += r[i];
        }
    }
    let share = |s: [usize; 4], i: usize| s[i] as f64 / s[i + 1].max(1) as f64;
    let reps = if opts.quick { 3 } else { 21 };
    // What a leader picks from: 4 replicas each offering one host per value (14 here)
    // and 10 at random, about 100; and a pool a hundred times larger.
    let mut timed = Vec::new();
    for n in [100usize, 10_000] {
        let pool: Vec<ConnectedAgent> = (0..n).map(|i| candidate(&mut rng, i)).collect();
        let refs: Vec<&ConnectedAgent> = pool.iter().collect();
        let time = |covering: bool| {
            median(
                (0..reps)
                    .map(|s| {
                        let mut r = ChaCha8Rng::seed_from_u64(s);
                        let t = Instant::now();
                        let p = if covering {
                            canary::pick_covering(&refs, 5, &cover, &mut r)
                        } else {
                            canary::pick(&refs, 5, &mut r)
                        };
                        std::hint::black_box(p);
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect(),
            )
        };
        timed.push(json!({"candidates": n, "covering_ms": time(true), "random_ms": time(false)}));
    }
    let figures = json!({
        "bench": "coverage",
        "quick": opts.quick,
        "trials": trials,
        "canaries": 3,
        "values_covered": {"covering": share(covering, 0), "random": share(random, 0)},
        "rare_values_covered": {"covering": share(covering, 2), "random": share(random, 2)},
        "rare_ratio": share(covering, 2) / share(random, 2).max(f64::MIN_POSITIVE),
        "values_ratio": share(covering, 0) / share(random, 0).max(f64::MIN_POSITIVE),
        "pick_time": timed,
    });
    eprintln!("{figures:#}");
    Ok(figures)
}

fn config(limits: &str) -> anyhow::Result<AutoUpdateConfig> {
    let text = format!(
        "kind: autoupdate_config
version: v1
metadata: {{name: autoupdate-config}}
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
        - name: prod
          days: [\"*\"]
          start_hour: 10
          max_in_flight: 20%
          topology: [{limits}]
"
    );
    AutoUpdateConfig::from_text(&text).map_err(|e| anyhow::anyhow!("{e}"))
}

fn host(rng: &mut ChaCha8Rng, zone: usize, on_target: bool, now: Timestamp) -> InventoryAgent {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    InventoryAgent {
        heartbeat: Heartbeat {
            updater_id: tern_core::ids::uuid_v4(b),
            group: "prod".into(),
            version: if on_target { "1.1.0" } else { "1.0.0" }.into(),
            labels: BTreeMap::from([("zone".to_string(), format!("z{zone}"))]),
            ..Heartbeat::default()
        },
        first_seen: now - SignedDuration::from_hours(1),
        last_seen: now,
    }
}

/// One reconcile of `agents` as a single replica's report, from `rollout`.
fn reconciled(
    now: Timestamp,
    config: &AutoUpdateConfig,
    version: &AutoUpdateVersion,
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &[InventoryAgent],
    rng: &mut ChaCha8Rng,
) -> anyhow::Result<AutoUpdateAgentRollout> {
    let n = rollout.map(needs);
    let by_id: HashMap<&str, &InventoryAgent> = agents
        .iter()
        .map(|a| (a.heartbeat.updater_id.as_str(), a))
        .collect();
    let spec = replica_report(
        now,
        agents,
        |id| by_id.get(id).copied(),
        |_| false,
        n.as_ref(),
        DEFAULT_REPORT_PERIOD,
        DEFAULT_REPORT_PERIOD,
        rng,
    );
    let report = AutoUpdateAgentReport::new("bench", spec);
    match reconcile_reports(
        now,
        Resources {
            config: Some(config),
            version: Some(version),
            rollout,
            frozen: false,
        },
        std::slice::from_ref(&report),
        DEFAULT_REPORT_PERIOD,
        rng,
    ) {
        Outcome::Rollout { rollout, .. } => Ok(*rollout),
        Outcome::NoRollout { why } => anyhow::bail!("no rollout: {why}"),
    }
}

/// Hosts acting on find, a reconcile a step, installs taking `install_steps`: the most
/// hosts of one zone installing at once, and the steps until every host runs the target.
fn drive(config: &AutoUpdateConfig, hosts: usize, zones: usize) -> anyhow::Result<(usize, u32)> {
    let version =
        AutoUpdateVersion::from_text(crate::ternd::VERSION).map_err(|e| anyhow::anyhow!("{e}"))?;
    let version_of = |r: &AutoUpdateAgentRollout| r.spec.target_version.to_string();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut now: Timestamp = "2026-11-23T10:00:00Z".parse()?;
    let mut agents: Vec<InventoryAgent> = (0..hosts)
        .map(|i| host(&mut rng, i % zones, false, now))
        .collect();
    let mut installing: Vec<Option<u32>> = vec![None; hosts];
    let mut rollout = reconciled(now, config, &version, None, &agents, &mut rng)?;
    let start = rollout.spec.start_version.to_string();
    for a in &mut agents {
        a.heartbeat.version.clone_from(&start);
    }
    let target = version_of(&rollout);
    let mut peak = 0;
    for step in 0..2_000u32 {
        for (i, a) in agents.iter_mut().enumerate() {
            match installing[i] {
                Some(since) if step >= since + 3 => {
                    a.heartbeat.version.clone_from(&target);
                    installing[i] = None;
                }
                Some(_) => {}
                None if a.heartbeat.version != target
                    && gate::rollout_answer(Some(&rollout), "prod", &a.heartbeat.updater_id)
                        .update() =>
                {
                    installing[i] = Some(step);
                }
                None => {}
            }
        }
        let mut per_zone: HashMap<&str, usize> = HashMap::new();
        for (i, a) in agents.iter().enumerate() {
            if installing[i].is_some() {
                *per_zone.entry(&a.heartbeat.labels["zone"]).or_default() += 1;
            }
        }
        peak = peak.max(per_zone.values().copied().max().unwrap_or(0));
        if agents.iter().all(|a| a.heartbeat.version == target) {
            return Ok((peak, step));
        }
        now += SignedDuration::from_secs(60);
        for a in &mut agents {
            a.last_seen = now;
        }
        rollout = reconciled(now, config, &version, Some(&rollout), &agents, &mut rng)?;
        if rollout.status.groups[0].state == GroupState::Rolledback {
            anyhow::bail!("rolled back");
        }
    }
    anyhow::bail!("not done after 2,000 reconciles")
}

pub fn topology(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let big = if opts.quick { 5_000 } else { 100_000 };
    let reps = if opts.quick { 3 } else { 11 };
    let limited = config("{key: zone, max_in_flight: 5}")?;
    let plain = config("")?;
    let version =
        AutoUpdateVersion::from_text(crate::ternd::VERSION).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let now: Timestamp = "2026-11-23T10:00:00Z".parse()?;
    let agents: Vec<InventoryAgent> = (0..big)
        .map(|i| host(&mut rng, i % 20, i % 2 == 0, now))
        .collect();
    let report = |config: &AutoUpdateConfig| -> anyhow::Result<(f64, usize)> {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let rollout = reconciled(now, config, &version, None, &agents, &mut rng)?;
        let n = needs(&rollout);
        let by_id: HashMap<&str, &InventoryAgent> = agents
            .iter()
            .map(|a| (a.heartbeat.updater_id.as_str(), a))
            .collect();
        let mut bytes = 0;
        let ms = median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    let spec = replica_report(
                        now,
                        &agents,
                        |id| by_id.get(id).copied(),
                        |_| false,
                        Some(&n),
                        DEFAULT_REPORT_PERIOD,
                        DEFAULT_REPORT_PERIOD,
                        &mut rng,
                    );
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    bytes = serde_json::to_vec(&spec).map_or(0, |v| v.len());
                    ms
                })
                .collect(),
        );
        Ok((ms, bytes))
    };
    let (plain_ms, plain_bytes) = report(&plain)?;
    let (limited_ms, limited_bytes) = report(&limited)?;
    let fleet = if opts.quick { 200 } else { 2_000 };
    let (peak_plain, steps_plain) = drive(&plain, fleet, 10)?;
    let (peak_limited, steps_limited) = drive(&limited, fleet, 10)?;
    let figures = json!({
        "bench": "topology",
        "quick": opts.quick,
        "report": {
            "hosts": big,
            "zones": 20,
            "plain_ms": plain_ms,
            "limited_ms": limited_ms,
            "time_ratio": limited_ms / plain_ms,
            "plain_bytes": plain_bytes,
            "limited_bytes": limited_bytes,
        },
        "rollout": {
            "hosts": fleet,
            "zones": 10,
            "most_installing_in_one_zone": {"plain": peak_plain, "limited": peak_limited, "limit": 5},
            "reconciles_to_done": {"plain": steps_plain, "limited": steps_limited},
            "duration_ratio": f64::from(steps_limited) / f64::from(steps_plain.max(1)),
        },
    });
    eprintln!("{figures:#}");
    Ok(figures)
}
