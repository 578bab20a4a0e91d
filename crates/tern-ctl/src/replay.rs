//! `ternctl plan replay SCENARIO`: a rollout told as a story. A scenario file names a
//! config, a version and a small fleet, then steps through instants; at each step the
//! planner reconciles exactly as ternd would, prints the groups, checks what the
//! scenario expects, and lets every simulated agent act on its find answer (agents
//! told to update to a broken version roll back and skip it, as tern-update does).
//!
//! It is how the bundled examples are shown (`cargo xtask demo`) and tested.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::Deserialize;
use tern_core::codec;
use tern_core::find;
use tern_core::inventory::{self, AgentView, InventoryAgent};
use tern_core::reconcile::{self, DEFAULT_REPORT_PERIOD, Outcome, ReconcileInput};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, GroupState,
};
use tern_core::transition::{self, Transition};
use tern_core::version::normalize;
use tern_core::wire::{Heartbeat, UpdaterStatus};

use crate::events::describe;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    #[serde(default)]
    description: String,
    /// Files are relative to the scenario file.
    #[serde(default)]
    config: Option<PathBuf>,
    #[serde(default)]
    version: Option<PathBuf>,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    fleet: Vec<Hosts>,
    /// Versions that crash on start: an agent told to update to one rolls back.
    #[serde(default)]
    broken: Vec<String>,
    steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hosts {
    #[serde(default)]
    group: String,
    version: String,
    count: usize,
    #[serde(default)]
    status: UpdaterStatus,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    at: Timestamp,
    #[serde(default)]
    say: String,
    /// Replace the config (a file) or remove it (`none`).
    #[serde(default)]
    config: Option<PathBuf>,
    #[serde(default)]
    version: Option<PathBuf>,
    #[serde(default)]
    transition: Option<StepTransition>,
    #[serde(default)]
    join: Vec<Hosts>,
    /// Hosts that disconnect: `{group, count}`.
    #[serde(default)]
    leave: Vec<Leave>,
    /// Whether agents act on their find answer after this step (default yes).
    #[serde(default = "yes")]
    agents_act: bool,
    #[serde(default)]
    expect: Option<Expect>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Leave {
    #[serde(default)]
    group: String,
    count: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepTransition {
    action: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    force: bool,
    /// The transition must be refused with a message containing this.
    #[serde(default)]
    refused: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[serde(default)]
    state: Option<String>,
    /// Group name → `state` or `state/reason`.
    #[serde(default)]
    groups: BTreeMap<String, String>,
    /// Group name → how many of its hosts run each version.
    #[serde(default)]
    hosts: BTreeMap<String, BTreeMap<String, usize>>,
    #[serde(default)]
    find: Vec<ExpectFind>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectFind {
    #[serde(default)]
    group: String,
    /// Ask as a canary of the group (`true`) or as a host that is not one.
    #[serde(default)]
    canary: bool,
    version: String,
    update: bool,
}

struct Agent {
    hb: Heartbeat,
    skip: Option<String>,
}

/// Runs the scenario, printing the story to `out`. Returns the number of failed
/// expectations.
pub fn replay(path: &Path, out: &mut String) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the scenario {}", path.display()))?;
    let scenario: Scenario = codec::from_text(&text)
        .map_err(|e| anyhow::anyhow!("{}: invalid scenario: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let load_config = |p: &Path| -> anyhow::Result<Option<AutoUpdateConfig>> {
        if p == Path::new("none") {
            return Ok(None);
        }
        let file = dir.join(p);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        AutoUpdateConfig::from_text(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: invalid autoupdate_config: {e}", file.display()))
    };
    let load_version = |p: &Path| -> anyhow::Result<Option<AutoUpdateVersion>> {
        if p == Path::new("none") {
            return Ok(None);
        }
        let file = dir.join(p);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        AutoUpdateVersion::from_text(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: invalid autoupdate_version: {e}", file.display()))
    };
    let mut config = scenario
        .config
        .as_deref()
        .map(load_config)
        .transpose()?
        .flatten();
    let mut version = scenario
        .version
        .as_deref()
        .map(load_version)
        .transpose()?
        .flatten();
    let mut rng = ChaCha8Rng::seed_from_u64(scenario.seed);
    let mut agents: Vec<Agent> = Vec::new();
    let mut next_host = 0usize;
    let mut add = |agents: &mut Vec<Agent>, hosts: &Hosts| {
        for _ in 0..hosts.count {
            agents.push(Agent {
                hb: Heartbeat {
                    updater_id: host_uuid(next_host),
                    host_id: format!("host-{next_host:03}"),
                    hostname: format!(
                        "{}-{next_host:03}",
                        if hosts.group.is_empty() {
                            "nogroup"
                        } else {
                            &hosts.group
                        }
                    ),
                    group: hosts.group.clone(),
                    version: normalize(&hosts.version),
                    updater_status: hosts.status,
                    ..Heartbeat::default()
                },
                skip: None,
            });
            next_host += 1;
        }
    };
    for h in &scenario.fleet {
        add(&mut agents, h);
    }
    let broken: Vec<String> = scenario.broken.iter().map(|v| normalize(v)).collect();
    let mut rollout: Option<AutoUpdateAgentRollout> = None;
    let mut failures = 0;

    if !scenario.description.is_empty() {
        for line in scenario.description.trim().lines() {
            let _ = writeln!(out, "# {line}");
        }
    }
    let _ = writeln!(out, "# {} hosts", agents.len());
    for (i, step) in scenario.steps.iter().enumerate() {
        let now = step.at;
        let _ = writeln!(
            out,
            "\n[{}] {}",
            now.strftime("%a %Y-%m-%d %H:%M"),
            if step.say.is_empty() {
                format!("step {}", i + 1)
            } else {
                step.say.clone()
            }
        );
        if let Some(p) = &step.config {
            config = load_config(p)?;
        }
        if let Some(p) = &step.version {
            version = load_version(p)?;
        }
        for h in &step.join {
            add(&mut agents, h);
        }
        for l in &step.leave {
            for _ in 0..l.count {
                if let Some(pos) = agents.iter().rposition(|a| a.hb.group == l.group) {
                    agents.remove(pos);
                }
            }
        }
        if let Some(t) = &step.transition {
            let Some(current) = &rollout else {
                bail!(
                    "step {}: a transition needs a rollout; reconcile first",
                    i + 1
                );
            };
            let tr = match t.action.as_str() {
                "start-update" => Transition::StartUpdate {
                    groups: t.groups.clone(),
                    force: t.force,
                },
                "mark-done" => Transition::MarkDone {
                    groups: t.groups.clone(),
                },
                "rollback" => Transition::Rollback {
                    groups: t.groups.clone(),
                },
                other => bail!(
                    "step {}: unknown transition {other:?} (start-update, mark-done, rollback)",
                    i + 1
                ),
            };
            match (transition::apply(current, &tr, now), &t.refused) {
                (Ok((next, events)), None) => {
                    for e in &events {
                        let _ = writeln!(out, "  operator: {}", describe(e));
                    }
                    rollout = Some(next);
                }
                (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => {
                    let _ = writeln!(out, "  operator: {} refused: {e}", tr.name());
                }
                (Ok(_), Some(want)) => {
                    failures += 1;
                    let _ = writeln!(
                        out,
                        "  EXPECTATION FAILED: {} was accepted, expected a refusal ({want})",
                        tr.name()
                    );
                }
                (Err(e), _) => {
                    failures += 1;
                    let _ = writeln!(out, "  EXPECTATION FAILED: {} refused: {e}", tr.name());
                }
            }
        }
        // One report from a replica that has seen every host for a while.
        let inventory: Vec<InventoryAgent> = agents
            .iter()
            .map(|a| InventoryAgent {
                heartbeat: a.hb.clone(),
                first_seen: now - SignedDuration::from_hours(1),
                last_seen: now,
            })
            .collect();
        let report = AutoUpdateAgentReport::new(
            "replay",
            inventory::build_report(now, &inventory, DEFAULT_REPORT_PERIOD),
        );
        let connected: Vec<_> = inventory.iter().map(InventoryAgent::connected).collect();
        let input = ReconcileInput {
            config: config.as_ref(),
            version: version.as_ref(),
            rollout: rollout.as_ref(),
            reports: std::slice::from_ref(&report),
            agents: &connected,
            report_period: DEFAULT_REPORT_PERIOD,
        };
        match reconcile::reconcile(now, &input, &mut rng) {
            Outcome::NoRollout { why } => {
                let _ = writeln!(out, "  no rollout: {why}");
                rollout = None;
            }
            Outcome::Rollout {
                rollout: next,
                events,
            } => {
                for e in &events {
                    let _ = writeln!(out, "  {}", describe(e));
                }
                rollout = Some(*next);
            }
        }
        if let Some(r) = &rollout {
            print_rollout(out, r, &agents);
        }
        if let Some(expect) = &step.expect {
            failures += check(out, expect, rollout.as_ref(), &agents);
        }
        if step.agents_act {
            act(out, rollout.as_ref(), &mut agents, &broken);
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if failures == 0 {
            "every expectation held".to_string()
        } else {
            format!("{failures} expectation(s) failed")
        }
    );
    Ok(failures)
}

/// A UUID-shaped id spread over the id space (so backpressure admits hosts gradually).
fn host_uuid(i: usize) -> String {
    tern_core::ids::uuid_from_halves(tern_core::ids::spread(i as u64), i as u64)
}

fn print_rollout(out: &mut String, r: &AutoUpdateAgentRollout, agents: &[Agent]) {
    let _ = writeln!(
        out,
        "  rollout {} ({}, {}) {} -> {}",
        r.status.state.as_str(),
        r.spec.autoupdate_mode.as_str(),
        r.spec.strategy.as_str(),
        r.spec.start_version,
        r.spec.target_version
    );
    let names: Vec<&str> = r.status.groups.iter().map(|g| g.name.as_str()).collect();
    for g in &r.status.groups {
        let mut versions: BTreeMap<&str, usize> = BTreeMap::new();
        for a in agents
            .iter()
            .filter(|a| tern_core::canary::belongs_to(&a.hb.group, &g.name, &names))
        {
            *versions.entry(a.hb.version.as_str()).or_default() += 1;
        }
        let hosts: Vec<String> = versions.iter().map(|(v, n)| format!("{n}x{v}")).collect();
        let state = match g.state {
            GroupState::Canary => format!(
                "canary ({}/{})",
                g.canaries.iter().filter(|c| c.success).count(),
                g.canaries.len()
            ),
            GroupState::Active if g.progress < 1.0 => {
                format!("active ({:.0}%)", g.progress * 100.0)
            }
            s => s.as_str().to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<10} {:<14} {:<30} hosts {}",
            g.name,
            state,
            g.last_update_reason,
            hosts.join(" ")
        );
    }
}

fn check(
    out: &mut String,
    expect: &Expect,
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &[Agent],
) -> usize {
    let mut failed = 0;
    let mut fail = |out: &mut String, msg: String| {
        failed += 1;
        let _ = writeln!(out, "  EXPECTATION FAILED: {msg}");
    };
    if let Some(want) = &expect.state {
        let got = rollout.map_or("none", |r| r.status.state.as_str());
        if got != want {
            fail(out, format!("rollout state is {got}, expected {want}"));
        }
    }
    for (name, want) in &expect.groups {
        let Some(g) = rollout.and_then(|r| r.group(name)) else {
            fail(out, format!("no group {name:?} in the rollout"));
            continue;
        };
        let got = if want.contains('/') {
            format!("{}/{}", g.state.as_str(), g.last_update_reason)
        } else {
            g.state.as_str().to_string()
        };
        if &got != want {
            fail(out, format!("group {name} is {got}, expected {want}"));
        }
    }
    let names: Vec<&str> = rollout
        .map(|r| r.status.groups.iter().map(|g| g.name.as_str()).collect())
        .unwrap_or_default();
    for (group, want) in &expect.hosts {
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for a in agents.iter().filter(|a| {
            a.hb.group == *group || tern_core::canary::belongs_to(&a.hb.group, group, &names)
        }) {
            *got.entry(a.hb.version.clone()).or_default() += 1;
        }
        let want: BTreeMap<String, usize> = want.iter().map(|(v, n)| (normalize(v), *n)).collect();
        if got != want {
            fail(
                out,
                format!("hosts of {group} run {got:?}, expected {want:?}"),
            );
        }
    }
    for f in &expect.find {
        let id = match rollout.and_then(|r| r.serving_group(&f.group)) {
            Some(g) if f.canary => g
                .canaries
                .first()
                .map(|c| c.updater_id.clone())
                .unwrap_or_default(),
            _ => agents
                .iter()
                .find(|a| a.hb.group == f.group && !is_canary(rollout, &a.hb.updater_id))
                .map(|a| a.hb.updater_id.clone())
                .unwrap_or_default(),
        };
        let d = find::decide(rollout, &f.group, &id);
        let got = (
            d.version.map(|v| v.to_string()).unwrap_or_default(),
            d.update,
        );
        let want = (normalize(&f.version), f.update);
        if got != want {
            fail(
                out,
                format!(
                    "find for a {} of group {:?}: {got:?}, expected {want:?}",
                    if f.canary { "canary" } else { "host" },
                    f.group
                ),
            );
        }
    }
    failed
}

fn is_canary(rollout: Option<&AutoUpdateAgentRollout>, id: &str) -> bool {
    rollout.is_some_and(|r| {
        r.status
            .groups
            .iter()
            .any(|g| g.canaries.iter().any(|c| c.updater_id == id))
    })
}

/// Every enabled agent asks find and does what tern-update would.
fn act(
    out: &mut String,
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &mut [Agent],
    broken: &[String],
) {
    let mut moved: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for a in agents
        .iter_mut()
        .filter(|a| a.hb.updater_status == UpdaterStatus::Enabled)
    {
        let d = find::decide(rollout, &a.hb.group, &a.hb.updater_id);
        let Some(v) = d.version.map(|v| v.to_string()) else {
            continue;
        };
        if !d.update || v == a.hb.version || a.skip.as_deref() == Some(v.as_str()) {
            continue;
        }
        if broken.contains(&v) {
            a.hb.rollback = true;
            a.hb.failed_version = Some(v.clone());
            a.skip = Some(v.clone());
            *failed.entry(v).or_default() += 1;
        } else {
            a.hb.version = v.clone();
            a.hb.rollback = false;
            a.hb.failed_version = None;
            *moved.entry(v).or_default() += 1;
        }
    }
    for (v, n) in moved {
        let _ = writeln!(out, "  hosts: {n} updated to {v}");
    }
    for (v, n) in failed {
        let _ = writeln!(
            out,
            "  hosts: {n} tried {v}, crashed, rolled back and skip it"
        );
    }
}
