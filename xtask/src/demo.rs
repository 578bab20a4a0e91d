//! `cargo xtask demo`: the main job. Builds ternd, ternctl and tern-update, starts a
//! real local fleet (tern-e2e), and plays a rollout story on it: 1.0.0 → 1.1.0 through
//! three halt-on-error groups, then a broken 1.2.0 halted at its canary, then a
//! rollback; then, with Debian's prometheus installed, 1.3.0 (healthy, twice the errors)
//! held at its canary by canary analysis. The releases are signed at start (tern-release) and every host pins the
//! root; the story ends with a tampered artifact refused. `--keep-running` leaves the fleet up for you to poke at.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tern_e2e::Fleet;
use tern_e2e::demo::{DemoOptions, split};

use crate::{cargo, root};

const USAGE: &str = "usage: cargo xtask demo [--hosts N] [--keep-running]
  --hosts N        hosts in the rollout (default 12, at least 3); 2 more follow a channel
  --keep-running   leave the fleet up afterwards; prints how to poke at it; Ctrl-C stops it";

struct Args {
    hosts: usize,
    keep_running: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        hosts: 12,
        keep_running: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--hosts" => {
                let v = it
                    .next()
                    .ok_or(format!("--hosts needs a number\n{USAGE}"))?;
                a.hosts = v
                    .parse()
                    .ok()
                    .filter(|n| (3..=200).contains(n))
                    .ok_or(format!("--hosts {v}: expected a number from 3 to 200"))?;
            }
            s if s.starts_with("--hosts=") => {
                return parse(&[
                    "--hosts".to_string(),
                    s.trim_start_matches("--hosts=").to_string(),
                ])
                .map(|h| Args {
                    hosts: h.hosts,
                    keep_running: a.keep_running,
                });
            }
            "--keep-running" => a.keep_running = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(a)
}

fn bin_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("debug")
}

pub fn run(args: &[String]) -> Result<(), String> {
    let a = parse(args)?;
    let cancel = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, cancel.clone())
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    build_binaries()?;
    let mut stdout = std::io::stdout();
    let (fleet, summary) = tern_e2e::demo::run(
        DemoOptions {
            hosts: a.hosts,
            bin_dir: Some(bin_dir()),
            cancel: Some(cancel.clone()),
        },
        &mut stdout,
    )
    .map_err(|e| format!("{e:#}"))?;
    if !a.keep_running {
        println!("{}", summary.line);
        println!(
            "The dashboard was at {}/ (docs/dashboard.md); `cargo xtask demo --keep-running` keeps it up.",
            fleet.ternd.url
        );
        return Ok(());
    }
    println!("{}\n", summary.line);
    print_how_to_poke(&fleet, a.hosts)?;
    keep_running(&fleet, &cancel);
    eprintln!("\nstopping: killing the agents and ternd, removing the fleet's files");
    drop(fleet);
    Ok(())
}

fn build_binaries() -> Result<(), String> {
    eprintln!("building ternd, ternctl, tern-update and tern-release (debug)…");
    let t = Instant::now();
    let mut build = cargo();
    build.args(["build", "--quiet", "--bins"]);
    build.args(["-p", "tern-server", "-p", "tern-ctl", "-p", "tern-update"]);
    // The demo signs its releases at start.
    build.args(["-p", "tern-release"]);
    let status = build
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed ({status})"));
    }
    eprintln!("built in {:.0}s\n", t.elapsed().as_secs_f64());
    Ok(())
}

/// `--keep-running`: the URLs and commands to look at the live fleet.
fn print_how_to_poke(fleet: &Fleet, hosts: usize) -> Result<(), String> {
    let h = fleet.hosts.first().ok_or("no hosts")?;
    let [nd, _, _] = split(hosts);
    println!(
        "The fleet is still up (Ctrl-C stops it and removes {}).\n\
         Each host runs `tern-update update` every 30 s, as its timer would, then ternd reconciles.\n\
         \n\
         \x20 dashboard   {url}/   log in with the operator token: cat {token}\n\
         \x20 ternd       {url}   metrics: {url}/metrics\n\
         \x20 find        curl '{url}/v1/webapi/find?group=dev&updater_id={id}'\n\
         \n\
         \x20 export TERN_SERVER={url} TERN_TOKEN_FILE={token}\n\
         \x20 alias ternctl={ctl}\n\
         \x20 ternctl agents status               # the rollout, group by group\n\
         \x20 ternctl inventory ls                # every host, its version and health\n\
         \x20 ternctl dev clock set 2026-11-26T10:00:00Z && ternctl dev reconcile\n\
         \x20 ternctl agents new-rollout 1.0.0    # or 1.1.0, 1.2.0\n\
         \x20 ternctl agents start-update dev --force | mark-done | suspend | resume\n\
         \n\
         \x20 host {name} ({nd} dev hosts in all):\n\
         \x20 {status}\n\
         \x20 cat {state}/agent.log",
        fleet.path().display(),
        url = fleet.ternd.url,
        id = h.updater_id().unwrap_or_default(),
        token = fleet.ternd.token_file.display(),
        ctl = fleet.bins.ternctl.display(),
        name = h.name,
        status = h.command_line(&["status"]),
        state = h.state.display(),
    );
    Ok(())
}

/// Until Ctrl-C: every 30 s each host runs its updater, as its timer would, around a
/// reconcile on each side.
fn keep_running(fleet: &Fleet, cancel: &AtomicBool) {
    let mut next = Instant::now() + Duration::from_secs(30);
    while !cancel.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        if Instant::now() >= next {
            next = Instant::now() + Duration::from_secs(30);
            let _ = fleet.reconcile();
            let failed: Vec<String> = fleet
                .update_all()
                .into_iter()
                .filter(|(_, o)| !o.ok())
                .map(|(n, o)| format!("{n}: {}", o.message()))
                .collect();
            let _ = fleet.reconcile();
            for f in failed {
                eprintln!("  ✗ {f}");
            }
        }
    }
}
