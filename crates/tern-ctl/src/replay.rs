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
use tern_core::gate;
use tern_core::host_update;
use tern_core::inventory::{self, AgentView, InventoryAgent};
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
    ConnectedAgent, GroupState,
};
use tern_core::rollout::{DEFAULT_REPORT_PERIOD, Groups};
use tern_core::transition::{self, Transition, TransitionKind};
use tern_core::validate::ResourceError;
use tern_core::version::normalize;
use tern_core::wire::{Heartbeat, UpdaterStatus};

use crate::text::plural;

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
    action: TransitionKind,
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
pub(crate) fn replay(path: &Path, out: &mut String) -> anyhow::Result<usize> {
    let scenario = read_scenario(path)?;
    let files = Files {
        dir: path.parent().unwrap_or(Path::new(".")),
    };
    let mut world = World::new(&scenario, files)?;
    print_description(out, &scenario.description, world.fleet.agents.len());
    let mut failures = 0;
    for (i, step) in scenario.steps.iter().enumerate() {
        failures += world.play(i + 1, step, out)?;
    }
    print_verdict(out, failures);
    Ok(failures)
}

fn read_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the scenario {}", path.display()))?;
    codec::from_text(&text)
        .map_err(|e| anyhow::anyhow!("{}: invalid scenario: {e}", path.display()))
}

/// The resource files a scenario names, relative to the scenario file; `none` stands
/// for no resource.
#[derive(Clone, Copy)]
struct Files<'a> {
    dir: &'a Path,
}

impl Files<'_> {
    fn config(self, p: &Path) -> anyhow::Result<Option<AutoUpdateConfig>> {
        self.load(p, "autoupdate_config", AutoUpdateConfig::from_text)
    }

    fn version(self, p: &Path) -> anyhow::Result<Option<AutoUpdateVersion>> {
        self.load(p, "autoupdate_version", AutoUpdateVersion::from_text)
    }

    fn load<T>(
        self,
        p: &Path,
        what: &str,
        parse: fn(&str) -> Result<T, ResourceError>,
    ) -> anyhow::Result<Option<T>> {
        if p == Path::new("none") {
            return Ok(None);
        }
        let file = self.dir.join(p);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        parse(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: invalid {what}: {e}", file.display()))
    }
}

/// The simulated hosts, in the order they joined.
#[derive(Default)]
struct Fleet {
    agents: Vec<Agent>,
    /// Hosts ever joined: numbers the next one, so ids stay unique after leaves.
    joined: usize,
}

impl Fleet {
    fn join(&mut self, hosts: &Hosts) {
        for _ in 0..hosts.count {
            let n = self.joined;
            self.agents.push(Agent {
                hb: Heartbeat {
                    updater_id: host_uuid(n),
                    host_id: format!("host-{n:03}"),
                    hostname: format!(
                        "{}-{n:03}",
                        if hosts.group.is_empty() {
                            "nogroup"
                        } else {
                            &hosts.group
                        }
                    ),
                    group: hosts.group.clone(),
                    version: normalize(&hosts.version),
                    updater_status: hosts.status,
                    // A replayed host runs its version healthy unless it is broken.
                    healthy: Some(true),
                    ..Heartbeat::default()
                },
                skip: None,
            });
            self.joined += 1;
        }
    }

    /// The last hosts of the group to join are the first to go.
    fn leave(&mut self, l: &Leave) {
        for _ in 0..l.count {
            if let Some(pos) = self.agents.iter().rposition(|a| a.hb.group == l.group) {
                self.agents.remove(pos);
            }
        }
    }

    /// One report from a replica that has seen every host for a while (with the
    /// topology part the `rollout`'s limits ask for), and the agents it has connected.
    fn report(
        &self,
        now: Timestamp,
        rollout: Option<&AutoUpdateAgentRollout>,
    ) -> (AutoUpdateAgentReport, Vec<ConnectedAgent>) {
        let inventory: Vec<InventoryAgent> = self
            .agents
            .iter()
            .map(|a| InventoryAgent {
                heartbeat: a.hb.clone(),
                first_seen: now - SignedDuration::from_hours(1),
                last_seen: now,
            })
            .collect();
        let mut spec = inventory::build_report(now, &inventory, DEFAULT_REPORT_PERIOD);
        if let Some(needs) = rollout.map(tern_core::reconcile::needs) {
            spec.topology =
                inventory::topology_report(&inventory, &needs, now, DEFAULT_REPORT_PERIOD, |_| {
                    false
                });
        }
        let report = AutoUpdateAgentReport::new("replay", spec);
        let connected = inventory.iter().map(InventoryAgent::connected).collect();
        (report, connected)
    }
}

/// What carries over from one step of the scenario to the next.
struct World<'a> {
    files: Files<'a>,
    config: Option<AutoUpdateConfig>,
    version: Option<AutoUpdateVersion>,
    rng: ChaCha8Rng,
    fleet: Fleet,
    broken: Vec<String>,
    rollout: Option<AutoUpdateAgentRollout>,
}

impl<'a> World<'a> {
    fn new(scenario: &Scenario, files: Files<'a>) -> anyhow::Result<Self> {
        let mut fleet = Fleet::default();
        for h in &scenario.fleet {
            fleet.join(h);
        }
        let mut world = Self {
            files,
            config: None,
            version: None,
            rng: ChaCha8Rng::seed_from_u64(scenario.seed),
            fleet,
            broken: scenario.broken.iter().map(|v| normalize(v)).collect(),
            rollout: None,
        };
        world.replace(scenario.config.as_deref(), scenario.version.as_deref())?;
        Ok(world)
    }

    /// Step number `n`: what changes, the operator's transition, a reconcile, the
    /// checks, then the agents. Returns the number of failed expectations.
    fn play(&mut self, n: usize, step: &Step, out: &mut String) -> anyhow::Result<usize> {
        print_step_title(out, n, step);
        self.change(step)?;
        let mut failures = 0;
        if let Some(t) = &step.transition {
            failures += self.operate(n, t, step.at, out)?;
        }
        self.reconcile(step.at, out);
        if let Some(r) = &self.rollout {
            print_rollout(out, r, &self.fleet.agents);
        }
        if let Some(expect) = &step.expect {
            failures += check(out, expect, self.rollout.as_ref(), &self.fleet.agents);
        }
        if step.agents_act {
            act(
                out,
                self.rollout.as_ref(),
                &mut self.fleet.agents,
                &self.broken,
                step.at,
            );
        }
        Ok(failures)
    }

    /// The resources and hosts the step replaces, adds or removes.
    fn change(&mut self, step: &Step) -> anyhow::Result<()> {
        self.replace(step.config.as_deref(), step.version.as_deref())?;
        for h in &step.join {
            self.fleet.join(h);
        }
        for l in &step.leave {
            self.fleet.leave(l);
        }
        Ok(())
    }

    /// Loads the config and the version named (`none` removes one); keeps the rest.
    fn replace(&mut self, config: Option<&Path>, version: Option<&Path>) -> anyhow::Result<()> {
        if let Some(p) = config {
            self.config = self.files.config(p)?;
        }
        if let Some(p) = version {
            self.version = self.files.version(p)?;
        }
        Ok(())
    }

    /// The operator's manual transition at `now`, checked against what the scenario
    /// expects of it. Returns the number of failed expectations.
    fn operate(
        &mut self,
        n: usize,
        t: &StepTransition,
        now: Timestamp,
        out: &mut String,
    ) -> anyhow::Result<usize> {
        let Some(current) = &self.rollout else {
            bail!("step {n}: a transition needs a rollout; reconcile first");
        };
        let tr = Transition::new(t.action, t.groups.clone(), t.force);
        let failed = match (transition::apply(current, &tr, now), &t.refused) {
            (Ok((next, events)), None) => {
                for e in &events {
                    let _ = writeln!(out, "  operator: {e}");
                }
                self.rollout = Some(next);
                0
            }
            (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => {
                let _ = writeln!(out, "  operator: {} refused: {e}", tr.name());
                0
            }
            (Ok(_), Some(want)) => {
                expectation_failed(
                    out,
                    &format!("{} was accepted, expected a refusal ({want})", tr.name()),
                );
                1
            }
            (Err(e), _) => {
                expectation_failed(out, &format!("{} refused: {e}", tr.name()));
                1
            }
        };
        Ok(failed)
    }

    /// One reconcile at `now`, as ternd's leader would run it on the fleet's report.
    fn reconcile(&mut self, now: Timestamp, out: &mut String) {
        let (report, connected) = self.fleet.report(now, self.rollout.as_ref());
        let input = ReconcileInput {
            config: self.config.as_ref(),
            version: self.version.as_ref(),
            rollout: self.rollout.as_ref(),
            reports: std::slice::from_ref(&report),
            agents: &connected,
            report_period: DEFAULT_REPORT_PERIOD,
            frozen: false,
        };
        match reconcile::reconcile(now, &input, &mut self.rng) {
            Outcome::NoRollout { why } => {
                let _ = writeln!(out, "  no rollout: {why}");
                self.rollout = None;
            }
            Outcome::Rollout {
                rollout: next,
                events,
            } => {
                for e in &events {
                    let _ = writeln!(out, "  {e}");
                }
                self.rollout = Some(*next);
            }
        }
    }
}

fn print_description(out: &mut String, description: &str, hosts: usize) {
    if !description.is_empty() {
        for line in description.trim().lines() {
            let _ = writeln!(out, "# {line}");
        }
    }
    let _ = writeln!(out, "# {}", plural(hosts as u64, "host"));
}

fn print_step_title(out: &mut String, n: usize, step: &Step) {
    let _ = writeln!(
        out,
        "\n[{}] {}",
        step.at.strftime("%a %Y-%m-%d %H:%M"),
        if step.say.is_empty() {
            format!("step {n}")
        } else {
            step.say.clone()
        }
    );
}

fn print_verdict(out: &mut String, failures: usize) {
    let _ = writeln!(
        out,
        "\n{}",
        if failures == 0 {
            "every expectation held".to_string()
        } else {
            format!("{} failed", plural(failures as u64, "expectation"))
        }
    );
}

fn expectation_failed(out: &mut String, msg: &str) {
    let _ = writeln!(out, "  EXPECTATION FAILED: {msg}");
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
    let groups = Groups::of(r);
    for g in &r.status.groups {
        let mut versions: BTreeMap<&str, usize> = BTreeMap::new();
        for a in agents
            .iter()
            .filter(|a| groups.serves(&g.name, &a.hb.group))
        {
            *versions.entry(a.hb.version.as_str()).or_default() += 1;
        }
        let hosts: Vec<String> = versions.iter().map(|(v, n)| format!("{n}x{v}")).collect();
        let state = match g.state {
            GroupState::Canary => format!(
                "canary ({})",
                tern_core::canary::summary(&g.canaries, g.config.canary_count)
            ),
            GroupState::Active if g.progress < 1.0 => {
                format!("active ({:.0}%)", g.progress * 100.0)
            }
            s => s.as_str().to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<10} {:<26} {:<30} hosts {}",
            g.name,
            state,
            g.last_update_reason,
            hosts.join(" ")
        );
    }
}

/// Checks what the step expects; prints each failure. Returns how many failed.
fn check(
    out: &mut String,
    expect: &Expect,
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &[Agent],
) -> usize {
    let failed = [
        state_mismatch(expect.state.as_deref(), rollout),
        group_mismatches(&expect.groups, rollout),
        host_mismatches(&expect.hosts, rollout, agents),
        find_mismatches(&expect.find, rollout, agents),
    ]
    .concat();
    for msg in &failed {
        expectation_failed(out, msg);
    }
    failed.len()
}

fn state_mismatch(want: Option<&str>, rollout: Option<&AutoUpdateAgentRollout>) -> Vec<String> {
    let Some(want) = want else {
        return Vec::new();
    };
    let got = rollout.map_or("none", |r| r.status.state.as_str());
    if got == want {
        Vec::new()
    } else {
        vec![format!("rollout state is {got}, expected {want}")]
    }
}

/// Each group's `state`, or `state/reason` where the scenario names a reason.
fn group_mismatches(
    want: &BTreeMap<String, String>,
    rollout: Option<&AutoUpdateAgentRollout>,
) -> Vec<String> {
    let mut failed = Vec::new();
    for (name, want) in want {
        let Some(g) = rollout.and_then(|r| r.group(name)) else {
            failed.push(format!("no group {name:?} in the rollout"));
            continue;
        };
        let got = if want.contains('/') {
            format!("{}/{}", g.state.as_str(), g.last_update_reason)
        } else {
            g.state.as_str().to_string()
        };
        if &got != want {
            failed.push(format!("group {name} is {got}, expected {want}"));
        }
    }
    failed
}

/// How many hosts of each group run each version.
fn host_mismatches(
    want: &BTreeMap<String, BTreeMap<String, usize>>,
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &[Agent],
) -> Vec<String> {
    let groups = rollout.map(Groups::of).unwrap_or_default();
    let mut failed = Vec::new();
    for (group, want) in want {
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for a in agents.iter().filter(|a| groups.serves(group, &a.hb.group)) {
            *got.entry(a.hb.version.clone()).or_default() += 1;
        }
        let want: BTreeMap<String, usize> = want.iter().map(|(v, n)| (normalize(v), *n)).collect();
        if got != want {
            failed.push(format!("hosts of {group} run {got:?}, expected {want:?}"));
        }
    }
    failed
}

/// What find answers a canary, or a host that is not one, of each group.
fn find_mismatches(
    want: &[ExpectFind],
    rollout: Option<&AutoUpdateAgentRollout>,
    agents: &[Agent],
) -> Vec<String> {
    let mut failed = Vec::new();
    for f in want {
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
        let d = gate::rollout_answer(rollout, &f.group, &id);
        let got = (
            d.version
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            d.update(),
        );
        let want = (normalize(&f.version), f.update);
        if got != want {
            failed.push(format!(
                "find for a {} of group {:?}: {got:?}, expected {want:?}",
                if f.canary { "canary" } else { "host" },
                f.group
            ));
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
    now: Timestamp,
) {
    let mut moved: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for a in agents
        .iter_mut()
        .filter(|a| a.hb.updater_status == UpdaterStatus::Enabled)
    {
        // find's answer and what tern-update does with it (the same two functions).
        let d = gate::answer(
            &gate::Fleet::new(rollout, now),
            &gate::Host::new(gate::AGENT, &a.hb.group, &a.hb.updater_id),
            gate::Ask::Find,
        );
        let health = if a.hb.healthy != Some(false) {
            host_update::Health::Healthy
        } else {
            host_update::Health::Unhealthy("the replayed agent is unhealthy".into())
        };
        let host_update::Decision::Update { target: v, .. } = host_update::on_find(
            &d,
            (!a.hb.version.is_empty()).then_some(a.hb.version.as_str()),
            a.skip.as_deref(),
            health,
            now,
        ) else {
            continue;
        };
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
