//! One cheap smoke test of the benchmarks (a few seconds): `converge --quick` (with
//! its real-ternd part when a `ternd` is built beside this test), `directives --quick`,
//! `coverage --quick` and `topology --quick` always,
//! `find --quick` and `heartbeat --quick` against the `ternd` built beside this test,
//! `lockstep --quick` on
//! SQLite against the `tern-lockstep` built beside it (as `cargo test --workspace` does;
//! SQLite because that build may lack the etcd backend), and `scale --quick` (three
//! replicas over a three-member etcd: 3,000 hosts through a rollout) when the `ternd`
//! beside it has the etcd backend (CI builds it with `tern-server/etcd`) and an `etcd`
//! is installed; each must print one JSON object
//! with its figures as its last line. The real measurements are `cargo xtask bench`
//! (docs/benchmarks.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tern-bench");

fn last_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tern-bench {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("no output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

#[test]
fn quick_benchmarks_print_their_figures_as_json() {
    let c = last_json(&["converge", "--quick"]);
    assert_eq!(c["bench"], "converge");
    for g in ["dev", "staging", "prod"] {
        assert!(c["window_to_done"][g]["tern_secs"].is_number(), "{g}: {c}");
        assert!(c["window_to_done"][g]["seeds_secs"].is_number(), "{g}: {c}");
        assert!(
            c["window_to_done"][g]["long_poll_secs"].is_number(),
            "{g}: {c}"
        );
        assert!(
            c["start_to_install"][g]["first_install_long_poll_secs"].is_number(),
            "{g}: {c}"
        );
    }
    assert!(
        c["start_to_install"]["staging"]["canaries_installing_long_poll_secs"].is_number(),
        "{c}"
    );
    if PathBuf::from(BIN).with_file_name("ternd").is_file() {
        assert!(c["real"]["long_poll_median_ms"].is_number(), "{c}");
        assert!(c["real"]["timer_median_ms"].is_number(), "{c}");
    }
    let d = last_json(&["directives", "--quick"]);
    assert_eq!(d["bench"], "directives");
    assert_eq!(d["governed"], d["hosts"], "{d}");
    for key in [
        "pass_ms",
        "plan_ms",
        "no_directive_ms",
        "extra_peak_bytes_per_host",
    ] {
        assert!(d[key].is_number(), "no {key}: {d}");
    }
    let cov = last_json(&["coverage", "--quick"]);
    assert_eq!(cov["bench"], "coverage");
    for key in ["values_covered", "rare_values_covered"] {
        let (c, r) = (&cov[key]["covering"], &cov[key]["random"]);
        assert!(c.is_number() && r.is_number(), "{key}: {cov}");
    }
    let topo = last_json(&["topology", "--quick"]);
    assert_eq!(topo["bench"], "topology");
    let peak = &topo["rollout"]["most_installing_in_one_zone"];
    assert!(
        peak["limited"].as_u64().unwrap() <= peak["limit"].as_u64().unwrap(),
        "{topo}"
    );
    assert!(topo["report"]["time_ratio"].is_number(), "{topo}");
    lockstep_quick();
    let ternd = PathBuf::from(BIN).with_file_name("ternd");
    let why = format!("no ternd beside {BIN} (cargo test --workspace builds it)");
    if !tern_testing::runs_here("find --quick", ternd.is_file(), &why) {
        return;
    }
    let f = last_json(&["find", "--quick", "--ternd", ternd.to_str().unwrap()]);
    for key in ["ratio", "ternd", "baseline", "half_rate"] {
        assert!(!f[key].is_null(), "no {key}: {f}");
    }
    assert!(f["ternd"]["rps"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f["baseline"]["rps"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f["half_rate"]["ternd_p99_ms"].is_number(), "{f}");
    let h = last_json(&["heartbeat", "--quick", "--ternd", ternd.to_str().unwrap()]);
    let a = &h["agents"]["5000"];
    assert_eq!(
        a["history_drain"]["writes"].as_f64(),
        Some(5000.0),
        "memory is measured once every host's first report is in its history: {h}"
    );
    for key in ["steady_ratio", "steady_cpu_ms_per_1k", "bytes_per_agent"] {
        assert!(a[key].is_number(), "no {key}: {h}");
    }
    let round = &a["steady_rounds"][0];
    assert!(round["baseline_hb_per_s"].as_f64().unwrap() > 0.0, "{h}");
    assert!(round["ternd_hb_per_s"].as_f64().unwrap() > 0.0, "{h}");
    scale_quick(&ternd);
}

/// True if `ternd` was built with the etcd backend: one without it refuses an `etcd:`
/// backend at once, saying so; one with it says it is trying to reach the (absent)
/// etcd, and keeps trying.
fn has_etcd_backend(ternd: &std::path::Path) -> bool {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(ternd)
        .args([
            "start",
            "--backend",
            "etcd:http://127.0.0.1:9",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--insecure-http"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Whichever it says first; the channel closes when it exits.
    let mut said = Vec::new();
    let supported = loop {
        match lines.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) if line.contains("etcd does not answer yet") => break true,
            Ok(line) if line.contains("without etcd support") => break false,
            Ok(line) => said.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("ternd exited saying neither:\n{}", said.join("\n"))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("ternd said neither within 60 s:\n{}", said.join("\n"))
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    supported
}

fn scale_quick(ternd: &std::path::Path) {
    let can = tern_bench::etcd::binary().is_some() && has_etcd_backend(ternd);
    let why = "needs an etcd server and a ternd built with tern-server/etcd (CI has both)";
    if !tern_testing::runs_here("scale --quick", can, why) {
        return;
    }
    let s = last_json(&["scale", "--quick", "--ternd", ternd.to_str().unwrap()]);
    assert_eq!(s["hosts"], 3000, "{s}");
    let history = &s["etcd_history_first_deploy"];
    // The history's first deploy writes every host's record...
    assert!(history["puts"].as_f64().unwrap() >= 3000.0, "{s}");
    // ...on a few shared leases (one per replica and time bucket), not one per host.
    assert!(history["lease_grants"].as_f64().unwrap() <= 12.0, "{s}");
    assert_eq!(s["etcd_keys_end"]["history"], 3000, "{s}");
    for g in ["dev", "staging", "prod"] {
        let group = &s["groups"][g];
        // Every host of the group asked find once and every answer said update; the
        // 99 % figure is the 0.99 N-th of those answers to arrive, so it comes no later
        // than the last.
        assert_eq!(group["find_told"], group["hosts"], "{s}");
        let told = group["told_99pct_ms"].as_f64().unwrap();
        assert!(
            told > 0.0 && told <= group["told_all_ms"].as_f64().unwrap(),
            "{s}"
        );
        assert!(group["told_99pct_estimate_ms"].is_number(), "{s}");
        for point in [
            "before_long_polls",
            "long_polls_held",
            "active",
            "after_find_round",
            "done",
        ] {
            assert_eq!(group["rss"][point].as_array().unwrap().len(), 3, "{s}");
        }
        // One in ten of the group's hosts long-polled, and every one was told.
        let polled = group["long_poll"]["hosts"].as_u64().unwrap();
        assert_eq!(polled, group["hosts"].as_u64().unwrap() / 10, "{s}");
        assert!(group["long_poll"]["told_99pct_ms"].is_number(), "{s}");
    }
    // staging and prod went through their canaries, the ones the leader picked.
    assert!(s["groups"]["dev"]["canary"].is_null(), "{s}");
    for (g, count) in [("staging", 3), ("prod", 5)] {
        let c = &s["groups"][g]["canary"];
        assert_eq!(c["canaries"].as_array().unwrap().len(), count, "{s}");
        assert!(c["canary_phase_ms"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(s["open_loop"]["offered_hb_per_s"], 1000.0, "{s}");
    // Hosts heartbeated in the background through the rollout, every one answered 2xx.
    // The rate achieved is a measurement, not checked here: a smoke test asserts no
    // timing on a shared machine.
    let bg = &s["background_heartbeats"];
    assert_eq!(bg["bad_status"], 0, "{s}");
    assert_eq!(bg["offered_hb_per_s"], 1000.0, "{s}");
    assert!(bg["sent"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(bg["ternd_cores"].as_array().unwrap().len(), 3, "{s}");
    assert_eq!(s["per_replica"].as_array().unwrap().len(), 3, "{s}");
}

fn lockstep_quick() {
    let bin = PathBuf::from(BIN).with_file_name("tern-lockstep");
    let why = format!("no tern-lockstep beside {BIN} (cargo test --workspace builds it)");
    if !tern_testing::runs_here("lockstep --quick", bin.is_file(), &why) {
        return;
    }
    let l = last_json(&[
        "lockstep",
        "--quick",
        "--store",
        "sqlite",
        "--tern-lockstep",
        bin.to_str().unwrap(),
    ]);
    assert_eq!(l["bench"], "lockstep", "{l}");
    assert!(l["samples"].as_u64().unwrap() > 0, "{l}");
    for key in ["overhead_p50_ms", "overhead_p90_ms", "ratio_p50"] {
        assert!(l[key].is_number(), "no {key}: {l}");
    }
    assert!(l["bare_step_ms"]["p50"].as_f64().unwrap() >= 20.0, "{l}");
}
