//! `tern-sim`: simulate a rollout over a large fleet and print per-group timelines.
//! Thin: parses flags, reads the two resources, runs `tern_sim::Sim`, prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use jiff::{SignedDuration, Timestamp};
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_sim::params::{self, DEFAULT_START};
use tern_sim::{Params, Sim};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Simulate a Tern rollout over a fleet of simulated agents, with no process and no
/// network, and print each group's timeline (started, canaries, active, done).
#[derive(Debug, Parser)]
#[command(name = "tern-sim", disable_version_flag = true)]
struct Cli {
    /// The autoupdate_config (YAML or JSON). Omit it to simulate without a config
    /// (one `default` group, Mon-Thu 12:00 UTC, halt-on-error); the version must
    /// then set spec.agents.mode: enabled, since a mode set nowhere means disabled.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The autoupdate_version (YAML or JSON). Not with --faults.
    #[arg(long, value_name = "FILE", required_unless_present = "faults")]
    version: Option<PathBuf>,
    /// Simulate the control plane under seeded faults instead (replica crashes, failed
    /// and late reports, store outages, partitions, clock jumps, silent and lying
    /// hosts, an operator's freezes and pins) and check the fleet-safety invariant on
    /// each seed (docs/simulator.md). Exits 1 if any seed breaks it, printing the
    /// command that replays it.
    #[arg(long)]
    faults: bool,
    /// With --faults: how many seeds to run, from --seed.
    #[arg(long, default_value_t = 1, requires = "faults")]
    seeds: u64,
    /// With --faults: hosts of the simulated fleet.
    #[arg(long, default_value_t = 24, requires = "faults")]
    hosts: usize,
    /// With --faults: simulated hours per seed.
    #[arg(long, default_value_t = 72, requires = "faults")]
    hours: i64,
    /// With --faults and one seed: print its faults and the trace's last events.
    #[arg(long, requires = "faults")]
    verbose: bool,
    /// Agents at the start.
    #[arg(long, default_value_t = 1000)]
    agents: u32,
    /// Simulated start instant (RFC 3339, UTC); the first reconcile happens then.
    #[arg(long, default_value = DEFAULT_START)]
    start: Timestamp,
    /// Simulated end instant (RFC 3339). Default: --start plus --duration.
    #[arg(long, conflicts_with = "duration")]
    until: Option<Timestamp>,
    /// Simulated duration (like 3d, 36h, 90m).
    #[arg(long, default_value = "3d", value_parser = params::parse_duration)]
    duration: i64,
    /// Seeds every random choice: the same seed gives the same timeline.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Share of the fleet in a group, like dev=10% (repeat). Default: spread evenly over
    /// the config's groups. A name the config lacks is served by the last group.
    #[arg(long = "group", value_name = "NAME=SHARE", value_parser = params::parse_group)]
    groups: Vec<(String, f64)>,
    /// Share of the fleet presenting no group (served by the last group).
    #[arg(long, default_value = "0%", value_parser = params::parse_share)]
    ungrouped: f64,
    /// Version the fleet runs at the start. Default: the version's start_version.
    #[arg(long, value_name = "VERSION")]
    from: Option<String>,
    /// Period of each agent's updater timer (each agent gets a random phase).
    /// tern-update's own default is 60s; the seeds' timer is 10m.
    #[arg(long, default_value = "60s", value_parser = params::parse_duration)]
    poll: i64,
    /// Upper bound of the random wait before an update. Default: what find answers
    /// (agent_update_jitter_seconds: 60s, 10s under backpressure).
    #[arg(long, value_parser = params::parse_duration)]
    jitter: Option<i64>,
    /// Agents also long-poll find (`tern-update watch`): released by a change, they
    /// ask again within this bound (ternd's --long-poll-jitter) and skip find's jitter.
    /// The timer still runs.
    #[arg(long, value_name = "JITTER", value_parser = params::parse_duration)]
    long_poll: Option<i64>,
    /// Time from the end of the jitter to the new version running (download, install,
    /// restart, health check).
    #[arg(long, default_value = "20s", value_parser = params::parse_duration)]
    install: i64,
    /// Probability that installing a version fails and is rolled back, like
    /// 1.2.0=0.3 (repeat).
    #[arg(long = "fail", value_name = "VERSION=P", value_parser = params::parse_fail)]
    fail: Vec<(String, f64)>,
    /// Share of its requests a version fails while running healthy, like 1.3.0=2%
    /// (repeat; unlisted versions: 1%). A group's canary analysis sees it: every query
    /// is answered with the canaries' share, every baseline with the start version's.
    #[arg(long = "errors", value_name = "VERSION=RATIO", value_parser = params::parse_fail)]
    errors: Vec<(String, f64)>,
    /// Agents leaving per agent and unit of time, like 0.01/h or 5%/d; as many join.
    #[arg(long, default_value = "0/h", value_parser = params::parse_churn)]
    churn: f64,
    /// ternd replicas (replica 0 leads); agents are spread over them at random.
    /// Default: 1, and 3 with --faults.
    #[arg(long)]
    replicas: Option<u16>,
    /// Report period of each replica, and reconcile period of the leader.
    #[arg(long, default_value = "60s", value_parser = params::parse_duration)]
    report_period: i64,
    /// Report and reconcile period while a group tests canaries or is active, as
    /// ternd's --active-report-period (unset: the report period throughout).
    #[arg(long, value_parser = params::parse_duration)]
    active_report_period: Option<i64>,
    /// While a group moves, a replica reports this long after a change among its hosts,
    /// at most once per this long, as ternd's --report-after-change (unset: never early).
    #[arg(long, value_parser = params::parse_duration)]
    report_after_change: Option<i64>,
    /// Output: text for people, json for programs (one object, on the last line).
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

fn read<T>(
    path: &PathBuf,
    what: &str,
    parse: impl Fn(&str) -> Result<T, tern_core::validate::ResourceError>,
) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("{}: invalid {what}: {e}", path.display()))
}

/// `--faults`: the seeds, the invariant on each, and the rate of simulated fleet-hours.
fn faults(cli: &Cli) -> anyhow::Result<()> {
    let base = tern_sim::faults::FaultParams {
        seed: cli.seed,
        hosts: cli.hosts.max(3),
        replicas: usize::from(cli.replicas.unwrap_or(3).max(1)),
        hours: cli.hours.max(2),
    };
    let wall = Instant::now();
    if cli.seeds == 1 {
        let run = tern_sim::faults::run(base);
        if cli.verbose {
            for line in &run.log {
                println!("{line}");
            }
        }
        println!(
            "seed {}: target {}, reached {:?}, rollout: {}",
            cli.seed,
            if run.broken_target { "broken" } else { "good" },
            run.reached,
            run.final_state
        );
        if let Some(v) = &run.violation {
            if cli.verbose {
                let from = v.index.saturating_sub(5);
                for e in &run.trace.events[from..=v.index] {
                    println!("  {}", serde_json::to_string(e)?);
                }
            }
            bail!("{v}\nreplay: {}", run.replay_command());
        }
        println!("the fleet-safety invariant held");
        return Ok(());
    }
    let (failed, hours) = tern_sim::faults::run_many(cli.seed, cli.seeds, base);
    let secs = wall.elapsed().as_secs_f64();
    println!(
        "{} seeds, {} of them broke the invariant; {:.0} simulated fleet-hours ({} hosts, {} replicas) in {secs:.1}s: {:.0} fleet-hours per second",
        cli.seeds,
        failed.len(),
        hours,
        base.hosts,
        base.replicas,
        hours / secs.max(1e-9)
    );
    for run in &failed {
        if let Some(v) = &run.violation {
            println!(
                "seed {}: {v}\n  replay: {}",
                run.params.seed,
                run.replay_command()
            );
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{} seeds broke the fleet-safety invariant", failed.len())
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if cli.faults {
        return faults(&cli);
    }
    let Some(version_file) = cli.version.clone() else {
        bail!("--version is required");
    };
    let config = cli
        .config
        .as_ref()
        .map(|p| read(p, "autoupdate_config", AutoUpdateConfig::from_text))
        .transpose()?;
    let version = read(
        &version_file,
        "autoupdate_version",
        AutoUpdateVersion::from_text,
    )?;
    let until = match cli.until {
        Some(u) => u,
        None => cli
            .start
            .checked_add(SignedDuration::from_secs(cli.duration))
            .context("--start plus --duration is out of range")?,
    };
    if until <= cli.start {
        bail!("--until must be after --start");
    }
    let params = Params {
        agents: cli.agents,
        start: cli.start,
        seed: cli.seed,
        groups: cli.groups,
        ungrouped: cli.ungrouped,
        from_version: cli.from,
        poll_secs: cli.poll,
        jitter_secs: cli.jitter,
        long_poll_jitter_secs: cli.long_poll,
        install_secs: cli.install,
        fail: cli.fail.into_iter().collect(),
        errors: cli.errors.into_iter().collect(),
        churn_per_hour: cli.churn,
        replicas: cli.replicas.unwrap_or(1),
        report_period_secs: cli.report_period,
        active_report_period_secs: cli.active_report_period,
        report_after_change_secs: cli.report_after_change,
    };
    if let Some(why) = tern_core::views::modes(config.as_ref(), Some(&version), None).why_stopped {
        eprintln!("tern-sim: {why}; the simulated rollout will not move");
    }
    let wall = Instant::now();
    let mut sim = Sim::new(params, config, version)?;
    let timeline = sim.run_until(until);
    let elapsed = wall.elapsed();
    match cli.output {
        Format::Text => {
            print!("{}", timeline.render_text());
            println!("(simulated in {:.2}s of wall time)", elapsed.as_secs_f64());
        }
        Format::Json => {
            eprintln!("simulated in {:.2}s of wall time", elapsed.as_secs_f64());
            println!("{}", serde_json::to_string(&timeline)?);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern-sim: {e:#}");
            ExitCode::from(1)
        }
    }
}
