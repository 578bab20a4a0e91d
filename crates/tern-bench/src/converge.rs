//! `converge`: with the simulator (tern-core's real reconcile and find over simulated
//! agents), the time from each group's window opening to the group done, for 10k
//! agents over `examples/01-halt-on-error`: Tern's defaults (60 s timer, find's jitter)
//! against the seeds' timer model (10-minute poll plus 60 s jitter), in the same run.

use jiff::SignedDuration;
use serde_json::json;
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_sim::{Params, Sim};

use crate::ternd::{CONFIG, VERSION};
use crate::{Opts, procs};

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let agents = if opts.quick { 1_000 } else { 10_000 };
    let config = AutoUpdateConfig::from_text(CONFIG).map_err(|e| anyhow::anyhow!("{e}"))?;
    let version = AutoUpdateVersion::from_text(VERSION).map_err(|e| anyhow::anyhow!("{e}"))?;
    let groups = vec![
        ("dev".to_string(), 0.1),
        ("staging".to_string(), 0.2),
        ("prod".to_string(), 0.7),
    ];
    let sim = |poll: i64, jitter: Option<i64>| -> anyhow::Result<Vec<(String, Option<i64>)>> {
        let params = Params {
            agents,
            seed: 1,
            groups: groups.clone(),
            poll_secs: poll,
            jitter_secs: jitter,
            ..Params::default()
        };
        let until = params
            .start
            .saturating_add(SignedDuration::from_hours(72))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut s = Sim::new(params, Some(config.clone()), version.clone())?;
        let t = s.run_until(until);
        Ok(t.groups
            .iter()
            .map(|g| (g.name.clone(), g.window_to_done_secs))
            .collect())
    };
    let tern = sim(60, None)?;
    let seeds = sim(600, Some(60))?;
    let mut per = serde_json::Map::new();
    for ((name, t), (_, s)) in tern.iter().zip(&seeds) {
        eprintln!(
            "{name:8} window→done: Tern {:>6}  seeds' timer {:>6}",
            t.map_or("-".into(), |v| format!("{v}s")),
            s.map_or("-".into(), |v| format!("{v}s"))
        );
        per.insert(
            name.clone(),
            json!({
                "tern_secs": t,
                "seeds_secs": s,
                "ratio": match (t, s) {
                    (Some(t), Some(s)) if *s > 0 => json!(((*t as f64 / *s as f64) * 1000.0).round() / 1000.0),
                    _ => serde_json::Value::Null,
                },
            }),
        );
    }
    Ok(json!({
        "bench": "converge",
        "quick": opts.quick,
        "agents": agents,
        "tern": {"poll_secs": 60, "jitter": "find (60s)"},
        "seeds": {"poll_secs": 600, "jitter_secs": 60},
        "window_to_done": per,
        "loadavg": procs::loadavg(),
    }))
}
