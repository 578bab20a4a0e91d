//! `tern-bench <find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale|profile> [--quick]
//! [--ternd BIN] [--tern-update BIN] [--tern-lockstep BIN] [--store etcd|sqlite]
//! [--connections N]`: one benchmark; progress on stderr, the figures as one JSON object
//! on the last line of stdout.
//! `tern-bench baseline-server FILE`: the find baseline (used by `find`).
//! `tern-bench heartbeat-baseline`: the heartbeat baseline (used by `heartbeat`).
//! `tern-bench lockstep-step MS`, `tern-bench lockstep-bare DIR SERVER VERSION`: a step's
//! command and the uncoordinated baseline (used by `lockstep`).

use std::path::PathBuf;
use std::process::ExitCode;

use tern_bench::Opts;

/// Counts live and peak bytes for the in-process benchmarks (`directives`).
#[global_allocator]
static ALLOC: tern_bench::alloc::Counting = tern_bench::alloc::Counting;

const USAGE: &str = "usage: tern-bench <find|attack|heartbeat|reconcile|apply|converge|lockstep|directives|coverage|topology|scale|profile> [--quick] [--ternd BIN] [--tern-update BIN] [--tern-lockstep BIN] [--store etcd|sqlite] [--connections N]\n       tern-bench baseline-server FILE\n       tern-bench heartbeat-baseline\n       tern-bench lockstep-step MS\n       tern-bench lockstep-bare DIR SERVER VERSION";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tern-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprintln!("{USAGE}");
        return Ok(ExitCode::from(2));
    };
    if name == "baseline-server" {
        let file = args.get(1).ok_or_else(|| anyhow::anyhow!("{USAGE}"))?;
        tern_bench::find::baseline_server(&PathBuf::from(file))?;
        return Ok(ExitCode::SUCCESS);
    }
    if name == "heartbeat-baseline" {
        tern_bench::heartbeat::baseline_server()?;
        return Ok(ExitCode::SUCCESS);
    }
    // The step's probe and the bare baseline, run as child processes by `lockstep`.
    if name == "lockstep-step" {
        tern_bench::lockstep::step(&args[1..])?;
        return Ok(ExitCode::SUCCESS);
    }
    if name == "lockstep-bare" {
        tern_bench::lockstep::bare(&args[1..])?;
        return Ok(ExitCode::SUCCESS);
    }
    let here = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut opts = Opts {
        quick: false,
        ternd: here.join("ternd"),
        tern_update: here.join("tern-update"),
        tern_lockstep: here.join("tern-lockstep"),
        store: None,
        connections: 16,
    };
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => opts.quick = true,
            "--ternd" => opts.ternd = value()?.into(),
            "--tern-update" => opts.tern_update = value()?.into(),
            "--tern-lockstep" => opts.tern_lockstep = value()?.into(),
            "--store" => opts.store = Some(value()?),
            "--connections" => opts.connections = value()?.parse()?,
            other => anyhow::bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let figures = tern_bench::run(name, &opts)?;
    println!("{}", serde_json::to_string(&figures)?);
    Ok(ExitCode::SUCCESS)
}
