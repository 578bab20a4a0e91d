//! `ternctl plan …`: the offline planner. Reads resources from files, runs the same
//! core ternd runs, prints the result. No server, no clock (the instant is given).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::codec::{self, Format};
use tern_core::duration::GoDuration;
use tern_core::exposure;
use tern_core::gate;
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::{AutoUpdateAgentReport, AutoUpdateAgentRollout, ConnectedAgent};
use tern_core::rfd169::{self, Translated};
use tern_core::transition::{self, Transition, TransitionKind};
use tern_core::wire::FindResponse;

use crate::global::Output;

#[derive(Subcommand)]
pub enum PlanCommand {
    /// Print the autoupdate_agent_rollout one reconcile at --now produces.
    Rollout(RolloutArgs),
    /// Print the find response a host would get from a rollout.
    Find(FindArgs),
    /// Print the rollout after a manual transition, or fail with the reason.
    Transition(TransitionArgs),
    /// Replay a scenario file: reconciles at each of its instants with a simulated
    /// fleet acting on its find answers; checks the scenario's expectations.
    Replay(ReplayArgs),
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The scenario file (see examples/*/scenario.yaml and docs/rollouts.md).
    scenario: PathBuf,
}

/// The format of a printed resource: YAML unless JSON is asked for (`-o text` is YAML,
/// a resource's text form).
fn resource_format(output: Option<Output>) -> Format {
    match output {
        Some(Output::Json) => Format::Json,
        Some(Output::Text | Output::Yaml) | None => Format::Yaml,
    }
}

#[derive(Args)]
pub struct RolloutArgs {
    /// The autoupdate_config; omit it when no config resource exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The autoupdate_version; omit it when no version resource exists.
    #[arg(long, value_name = "FILE")]
    version: Option<PathBuf>,
    /// The current autoupdate_agent_rollout; omit it when none exists yet.
    #[arg(long, value_name = "FILE")]
    rollout: Option<PathBuf>,
    /// A YAML list of autoupdate_agent_report resources.
    #[arg(long, value_name = "FILE")]
    reports: Option<PathBuf>,
    /// The connected agents, to pick and check canaries: what `ternctl inventory ls -o
    /// json|yaml` prints, or a YAML/JSON list of {updater_id, host_id, hostname, group,
    /// version}.
    #[arg(long, value_name = "FILE")]
    agents: Option<PathBuf>,
    /// The instant of the reconcile (RFC 3339, e.g. 2026-11-23T12:05:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    now: Timestamp,
    /// Seed of the canary sampling (random when omitted).
    #[arg(long)]
    seed: Option<u64>,
    /// How often replicas write reports; reports older than two periods are ignored.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    report_period: GoDuration,
    /// Print what changed (transitions, canaries picked, alerts) on stderr.
    #[arg(long)]
    events: bool,
}

#[derive(Args)]
pub struct FindArgs {
    /// The autoupdate_agent_rollout to answer from (e.g. `plan rollout`'s output).
    #[arg(long, value_name = "FILE")]
    rollout: PathBuf,
    /// The group the host presents (empty or unknown: the catch-all last group).
    #[arg(long, default_value = "")]
    group: String,
    /// The host's updater id (decides canaries and backpressure).
    #[arg(long, default_value = "")]
    updater_id: String,
}

#[derive(Args)]
pub struct TransitionArgs {
    /// The manual transition to apply.
    #[arg(value_name = "ACTION", value_parser = kind_parser())]
    kind: TransitionKind,
    /// Groups to act on. mark-done without groups: the groups in canary or active;
    /// rollback without groups: every started group.
    groups: Vec<String>,
    /// start-update: skip the canaries and go straight to active.
    #[arg(long)]
    force: bool,
    /// The autoupdate_agent_rollout to change.
    #[arg(long, value_name = "FILE")]
    rollout: PathBuf,
    /// The instant of the transition (RFC 3339, e.g. 2026-11-23T12:06:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    now: Timestamp,
}

/// Transition kinds as clap should offer them: the names listed in the help, and an
/// unknown one refused with that list.
fn kind_parser() -> impl TypedValueParser<Value = TransitionKind> {
    PossibleValuesParser::new(TransitionKind::ALL.map(TransitionKind::as_str))
        .try_map(|name| name.parse::<TransitionKind>())
}

fn parse_now(s: &str) -> Result<Timestamp, String> {
    s.parse::<Timestamp>()
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant like 2026-11-23T12:05:00Z ({e})"))
}

fn parse_duration(s: &str) -> Result<GoDuration, String> {
    GoDuration::parse(s).map_err(|e| e.to_string())
}

/// Runs a planner command; `output` is the global `-o`.
pub fn run(cmd: PlanCommand, output: Option<Output>) -> anyhow::Result<ExitCode> {
    match cmd {
        PlanCommand::Rollout(args) => plan_rollout(args, resource_format(output)),
        PlanCommand::Find(args) => plan_find(args, output),
        PlanCommand::Transition(args) => plan_transition(args, resource_format(output)),
        PlanCommand::Replay(args) => {
            let mut out = String::new();
            let failures = crate::replay::replay(&args.scenario, &mut out)?;
            print!("{out}");
            Ok(if failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn read(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the {what} file {}", path.display()))
}

/// Reads a resource file, naming the file in any error.
fn load<T>(
    path: &Path,
    what: &str,
    parse: impl FnOnce(&str) -> Result<T, tern_core::validate::ResourceError>,
) -> anyhow::Result<T> {
    let text = read(path, what)?;
    parse(&text).map_err(|e| anyhow::anyhow!("{}: invalid {what}: {e}", path.display()))
}

fn load_list<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<Vec<T>> {
    let text = read(path, what)?;
    codec::list_from_text(&text)
        .map_err(|e| anyhow::anyhow!("{}: invalid {what}: {e}", path.display()))
}

/// `ternctl inventory ls -o json|yaml`: the agents of one replica, and more.
#[derive(serde::Deserialize)]
struct Inventory {
    agents: Vec<ConnectedAgent>,
}

/// The `--agents` file: an inventory as ternctl prints it (a document with `agents:`
/// and no `updater_id:` of its own), or a list of agents.
fn load_agents(path: &Path) -> anyhow::Result<Vec<ConnectedAgent>> {
    let text = read(path, "agents")?;
    let invalid = |e| anyhow::anyhow!("{}: invalid agents: {e}", path.display());
    let doc: Option<serde_yaml_ng::Value> = serde_yaml_ng::from_str(&text).ok();
    let is_inventory = doc.as_ref().is_some_and(|d| {
        d.get("agents")
            .is_some_and(serde_yaml_ng::Value::is_sequence)
            && d.get("updater_id").is_none()
    });
    if is_inventory {
        codec::from_text::<Inventory>(&text)
            .map(|inv| inv.agents)
            .map_err(invalid)
    } else {
        codec::list_from_text(&text).map_err(invalid)
    }
}

/// Reads a resource file in Tern's shape or the RFD 169 draft's (`tern_core::rfd169`),
/// saying on stderr which field became which.
fn load_translated<T>(
    path: &Path,
    what: &str,
    parse: impl FnOnce(&str) -> Result<Translated<T>, tern_core::validate::ResourceError>,
) -> anyhow::Result<T> {
    let t = load(path, what, parse)?;
    print_notes(path, &t.notes);
    Ok(t.resource)
}

/// The notes of a translation from the RFD 169 draft, one line each on stderr.
pub(crate) fn print_notes(path: &Path, notes: &[tern_core::rfd169::Note]) {
    for n in notes {
        eprintln!("translated: {}: {n}", path.display());
    }
}

/// The config's groups that send a new version to all their hosts at once, one line
/// each on stderr.
pub(crate) fn print_warnings(warnings: &[tern_core::exposure::ConfigWarning]) {
    for w in warnings {
        eprintln!("warning: {}", w.message);
    }
}

/// A rollout file: an autoupdate_agent_rollout; the draft's autoupdate_agent_plan is
/// refused with what to give instead (its status is ternd's, read from a rollout).
fn load_rollout(path: &Path) -> anyhow::Result<AutoUpdateAgentRollout> {
    let text = read(path, "autoupdate_agent_rollout")?;
    let kind = codec::from_text::<serde_yaml_ng::Value>(&text)
        .ok()
        .and_then(|d| d.get("kind").and_then(|k| k.as_str()).map(str::to_string));
    if kind.as_deref() == Some(rfd169::KIND_PLAN) {
        bail!(
            "{}: kind: autoupdate_agent_plan is read as the autoupdate_version: give it as --version (the rollout's state is ternd's: `ternctl get rollout` prints one)",
            path.display()
        );
    }
    AutoUpdateAgentRollout::from_text(&text)
        .map_err(|e| anyhow::anyhow!("{}: invalid autoupdate_agent_rollout: {e}", path.display()))
}

fn plan_rollout(args: RolloutArgs, format: Format) -> anyhow::Result<ExitCode> {
    let config = args
        .config
        .as_deref()
        .map(|p| load_translated(p, "autoupdate_config", rfd169::config))
        .transpose()?;
    let version = args
        .version
        .as_deref()
        .map(|p| load_translated(p, "autoupdate_version", rfd169::version))
        .transpose()?;
    let rollout = args.rollout.as_deref().map(load_rollout).transpose()?;
    let reports: Vec<AutoUpdateAgentReport> = match &args.reports {
        Some(p) => load_list(p, "reports")?,
        None => Vec::new(),
    };
    for (i, r) in reports.iter().enumerate() {
        if let Err(e) = r.validate() {
            bail!(
                "{}: invalid report [{i}]: {e}",
                args.reports.as_deref().unwrap_or(Path::new("")).display()
            );
        }
    }
    let agents: Vec<ConnectedAgent> = match &args.agents {
        Some(p) => load_agents(p)?,
        None => Vec::new(),
    };
    // Without reports, the agents given (or none) are what one live replica reports:
    // the planner's fleet. (A reconcile with no live report holds every group: no
    // evidence is not an empty fleet.)
    let fleet_known = args.reports.is_some() || args.agents.is_some();
    let reports = if args.reports.is_some() {
        reports
    } else {
        vec![tern_core::inventory::report_of_agents(args.now, &agents)]
    };
    let report_period = SignedDuration::from_secs(
        i64::try_from(args.report_period.as_secs()).context("--report-period is too long")?,
    );
    let hosts = fleet_known
        .then(|| exposure::hosts_from_reports(config.as_ref(), &reports, args.now, report_period))
        .flatten();
    print_warnings(&exposure::all_at_once(config.as_ref(), hosts.as_ref()));
    let input = ReconcileInput {
        config: config.as_ref(),
        version: version.as_ref(),
        rollout: rollout.as_ref(),
        reports: &reports,
        agents: &agents,
        report_period,
        frozen: false,
    };
    let mut rng = match args.seed {
        Some(seed) => ChaCha8Rng::seed_from_u64(seed),
        None => ChaCha8Rng::from_os_rng(),
    };
    match reconcile::reconcile(args.now, &input, &mut rng) {
        Outcome::NoRollout { why } => {
            eprintln!("no rollout: {why}");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Rollout { rollout, events } => {
            if args.events {
                for e in &events {
                    eprintln!("event: {e}");
                }
            }
            print!("{}", codec::to_text(&*rollout, format)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn plan_find(args: FindArgs, output: Option<Output>) -> anyhow::Result<ExitCode> {
    let rollout = load_rollout(&args.rollout)?;
    let decision = gate::rollout_answer(Some(&rollout), &args.group, &args.updater_id);
    let response = FindResponse {
        edition: "community".to_string(),
        fips: false,
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        auto_update: decision.settings(),
    };
    // A find answer is JSON on the wire: JSON unless YAML is asked for.
    let format = match output {
        Some(Output::Yaml) => Format::Yaml,
        Some(Output::Text | Output::Json) | None => Format::Json,
    };
    print!("{}", codec::to_text(&response, format)?);
    Ok(ExitCode::SUCCESS)
}

fn plan_transition(args: TransitionArgs, format: Format) -> anyhow::Result<ExitCode> {
    let rollout = load_rollout(&args.rollout)?;
    if args.force && args.kind != TransitionKind::StartUpdate {
        bail!("--force only applies to start-update");
    }
    let t = Transition::new(args.kind, args.groups, args.force);
    let (next, _) = transition::apply(&rollout, &t, args.now)
        .map_err(|e| anyhow::anyhow!("{}: {e}", t.name()))?;
    print!("{}", codec::to_text(&next, format)?);
    Ok(ExitCode::SUCCESS)
}
