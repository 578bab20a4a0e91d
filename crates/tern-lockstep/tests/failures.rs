//! What lock-step promises when things go wrong, on real processes, on SQLite and on a
//! real three-member etcd with authentication on (each worker its own etcd user):
//!
//! - a failed step of a rolling component stops every other server: none starts it
//!   after the failure, and a failure is recorded even when `stop` came first;
//! - a status counts only when its server wrote it: a second worker claiming a server's
//!   id is refused or held, a status written by anyone else stops the update instead of
//!   moving a barrier, and on etcd a server's user cannot even write another's;
//! - on etcd a server's user writes only its own keys and leases (no shared result, no
//!   other server's claim), and a leader-only result it planted under its own key for
//!   another update is ignored: the component still runs, once;
//! - a worker that dies while a component is stopped everywhere raises
//!   `lockstep_stalled` long before the barrier timeout, naming it; the dead-server
//!   procedure (`servers rm`, `recover`) finishes the update on the others, and the server,
//!   back, is caught up to the version the others run, with its component started;
//! - a release that ships its own worker has its steps run by that worker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use support::{Bench, check_log, log_marks, wait_for, wait_halted};

const LONG: Duration = Duration::from_secs(90);

fn touch(bench: &Bench, name: &str) {
    std::fs::write(bench.dir.path().join(name), "").unwrap();
}

fn remove(bench: &Bench, name: &str) {
    let _ = std::fs::remove_file(bench.dir.path().join(name));
}

fn lines(bench: &Bench, prefix: &str) -> Vec<String> {
    bench
        .component_log()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .collect()
}

/// Three workers (each added with its own credentials) and one updater; 1.0.0 completed.
fn cluster(bench: &Bench, barrier: &str, updater_flags: &[&str]) -> Vec<support::Proc> {
    bench.release("release-1.0.0", "1.0.0", false);
    for id in 1..=3 {
        bench.add_server(id);
    }
    let mut procs: Vec<_> = (1..=3).map(|id| bench.worker(id, barrier)).collect();
    procs.push(bench.updater_with("u1", updater_flags));
    let refs: Vec<&support::Proc> = procs.iter().collect();
    bench.wait_status("completed: 1.0.0", LONG, &refs);
    procs
}

// ---------------------------------------------------------------------------------------

fn a_failed_rolling_check_stops_every_other_server(bench: &Bench) {
    let procs = cluster(bench, "60s", &[]);
    let refs: Vec<&support::Proc> = procs.iter().collect();

    // 1.1.0: whichever server takes B's lease first fails B's check.
    let workers = &refs[..3];
    let marks = log_marks(workers);
    touch(bench, "fail-b-first");
    bench.release("release-1.1.0", "1.1.0", false);
    let s = bench.wait_status("STOPPED", LONG, &refs);
    // Every worker halted: the others took the lease after the failure (as they did
    // before a worker checked for a peer's failure before taking it) and gave up B.
    wait_halted(workers, &marks, LONG);
    let begun = lines(bench, "b begin");
    let of_110: Vec<&String> = begun.iter().filter(|l| l.ends_with(" 1.1.0")).collect();
    assert_eq!(
        of_110.len(),
        1,
        "another server ran B after the first failed it:\n{}\n{s}",
        bench.component_log().join("\n")
    );
    let first: u32 = of_110[0]
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    let held = bench.status();
    assert!(
        held.contains(&format!(
            "server {first}: FAILED at step 3: step 3 (b check)"
        )) && held.contains("the first to check"),
        "{held}"
    );
    for other in (1..=3).filter(|&i| i != first) {
        assert!(
            held.contains(&format!("server {other}: step 3\n")),
            "server {other} moved:\n{held}"
        );
    }

    // Fixed: recover, and every server runs B, one at a time.
    remove(bench, "fail-b-first");
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok, "{out}");
    bench.wait_status("completed: 1.1.0", LONG, &refs);

    // 1.2.0: the first server's check hangs, an operator stops the update meanwhile, and
    // then the check fails: the failure is still recorded (the update stopped, it was not
    // replaced).
    std::fs::remove_dir(bench.dir.path().join("fail-b-first.taken")).unwrap();
    for i in 1..=3 {
        remove(bench, &format!("b-checking-{i}"));
    }
    touch(bench, "fail-b-first");
    touch(bench, "hold-b-check");
    let marks = log_marks(workers);
    bench.release("release-1.2.0", "1.2.0", false);
    let checking = bench.dir.path();
    wait_for(LONG, || {
        (1..=3).any(|i| checking.join(format!("b-checking-{i}")).exists())
    });
    let (ok, out) = bench.ctl(&["stop", "--reason", "maintenance"]);
    assert!(ok, "{out}");
    bench.wait_status("STOPPED", LONG, &refs);
    remove(bench, "hold-b-check");
    let s = bench.wait_status("the first to check", LONG, &refs);
    assert!(
        s.contains("reason: stopped by an operator: maintenance") && s.contains("FAILED at step 3"),
        "{s}"
    );
    wait_halted(workers, &marks, LONG);
    let of_120 = lines(bench, "b begin")
        .into_iter()
        .filter(|l| l.ends_with(" 1.2.0"))
        .count();
    assert_eq!(of_120, 1, "{}", bench.component_log().join("\n"));
    check_log(&bench.component_log());
}

#[test]
fn a_failed_rolling_check_stops_every_other_server_on_sqlite() {
    a_failed_rolling_check_stops_every_other_server(&Bench::new(None));
}

#[cfg(feature = "etcd")]
#[test]
fn a_failed_rolling_check_stops_every_other_server_on_etcd() {
    let (_cluster, bench) = etcd_bench();
    a_failed_rolling_check_stops_every_other_server(&bench);
}

// ---------------------------------------------------------------------------------------

/// Writes `lockstep/status/servers/<id>` straight into the store, as anyone with access
/// to it could (on etcd, as root: a server's own user is refused, checked below).
fn forge_status(bench: &Bench, id: u32, value: &serde_json::Value) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = format!("lockstep/status/servers/{id}");
    let bytes = serde_json::to_vec(value).unwrap();
    rt.block_on(async {
        let store = raw_store(bench, None).await;
        store.put(&key, bytes, None).await.unwrap();
    });
}

async fn raw_store(
    bench: &Bench,
    login: Option<(String, String)>,
) -> std::sync::Arc<dyn tern_store::Store> {
    if let Some(path) = bench.store.strip_prefix("sqlite:") {
        return std::sync::Arc::new(
            tern_store::SqliteStore::open(Path::new(path))
                .await
                .unwrap(),
        );
    }
    #[cfg(feature = "etcd")]
    {
        let urls: Vec<String> = bench
            .store
            .strip_prefix("etcd:")
            .unwrap()
            .split(',')
            .map(String::from)
            .collect();
        let credentials = login.or_else(|| {
            bench.root_login.as_ref().map(|f| {
                (
                    "root".to_string(),
                    std::fs::read_to_string(f).unwrap().trim().to_string(),
                )
            })
        });
        let opts = tern_store::EtcdOptions {
            credentials,
            ..tern_store::EtcdOptions::default()
        };
        std::sync::Arc::new(
            tern_store::EtcdStore::connect(&urls, "/tern/", opts)
                .await
                .unwrap(),
        )
    }
    #[cfg(not(feature = "etcd"))]
    {
        let _ = login;
        unreachable!("an etcd store without the etcd feature")
    }
}

fn a_status_counts_only_from_its_server(bench: &Bench) {
    let procs = cluster(bench, "60s", &[]);
    let refs: Vec<&support::Proc> = procs.iter().collect();
    let etcd = bench.store.starts_with("etcd:");

    // A second worker claiming id 2 on another machine (its own root): on SQLite it has
    // its own key, not the one server 2 registered, and is refused; on etcd it cannot
    // even log in without server 2's credentials.
    let other = bench.dir.path().join("elsewhere");
    let args: Vec<String> = [
        "worker",
        "--id",
        "2",
        "--root",
        other.to_str().unwrap(),
        "--insecure-http",
    ]
    .map(String::from)
    .to_vec();
    let mut impostor = bench.spawn("impostor-2", &args, false);
    let status = impostor.child.wait().unwrap();
    assert!(!status.success(), "a second worker 2 ran");
    let log = std::fs::read_to_string(&impostor.log).unwrap();
    if etcd {
        assert!(log.contains("connecting to etcd"), "{log}");
    } else {
        assert!(
            log.contains("server 2 is registered with another signing key"),
            "{log}"
        );
    }
    // Server 1's credentials claiming id 2: refused before it connects.
    let mut args2 = args.clone();
    args2.extend([
        "--credentials".to_string(),
        bench.credentials(1).display().to_string(),
    ]);
    let mut wrong = bench.spawn("wrong-2", &args2, false);
    assert!(!wrong.child.wait().unwrap().success());
    let log = std::fs::read_to_string(&wrong.log).unwrap();
    assert!(
        log.contains("the credentials are server 1's, not server 2's"),
        "{log}"
    );
    // Server 2's own credentials on a second machine, while its worker runs: it waits for
    // server 2's worker lease and does nothing.
    let mut args3 = args.clone();
    args3[4] = bench.dir.path().join("elsewhere-3").display().to_string();
    args3.extend([
        "--credentials".to_string(),
        bench.credentials(2).display().to_string(),
    ]);
    let duplicate = bench.spawn("duplicate-2", &args3, false);
    wait_for(LONG, || {
        std::fs::read_to_string(&duplicate.log)
            .unwrap()
            .contains("another worker runs as server 2")
    });

    // 1.1.0: server 2 is slow to stop A; servers 1 and 3 wait at step 2 (start A).
    touch(bench, "hang-a-2");
    bench.release("release-1.1.0", "1.1.0", false);
    wait_for(LONG, || {
        let stops = lines(bench, "a stop");
        ["a stop 1", "a stop 2", "a stop 3"]
            .iter()
            .all(|s| stops.iter().filter(|l| l == s).count() >= 2)
    });
    if etcd {
        // Server 1's etcd user may not write server 2's status.
        let creds: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bench.credentials(1)).unwrap()).unwrap();
        let login = Some((
            creds["etcd_user"].as_str().unwrap().to_string(),
            creds["etcd_password"].as_str().unwrap().to_string(),
        ));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let e = rt.block_on(async {
            let store = raw_store(bench, login).await;
            store
                .put("lockstep/status/servers/2", b"{}".to_vec(), None)
                .await
                .unwrap_err()
        });
        assert!(e.to_string().contains("permission denied"), "{e}");
    }
    // Someone else writes that server 2 reached step 2: nobody starts A. Servers 1 and 3
    // wait at step 2 (server 2 is still stopping A).
    let waiting = [refs[0], refs[2]];
    let marks = log_marks(&waiting);
    forge_status(
        bench,
        2,
        &serde_json::json!({"version": "1.1.0", "step": 2, "finished": false, "error": false, "message": ""}),
    );
    let s = bench.wait_status("STOPPED", LONG, &refs);
    assert!(
        s.contains("the status of server 2 is not signed by server 2's registered key")
            && s.contains("server 2: status IGNORED"),
        "{s}"
    );
    // Both decided on records holding the forged status: had they taken it for server
    // 2's, they would have started A before halting.
    wait_halted(&waiting, &marks, LONG);
    let started: Vec<String> = lines(bench, "a start")
        .into_iter()
        .filter(|l| l.ends_with(" 1.1.0"))
        .collect();
    assert!(
        started.is_empty(),
        "A started on the strength of a forged status: {started:?}"
    );

    // Server 2 finishes stopping; the operator looks, then recovers; 1.1.0 completes,
    // and the duplicate never acted.
    remove(bench, "hang-a-2");
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok, "{out}");
    bench.wait_status("completed: 1.1.0", LONG, &refs);
    let dup = std::fs::read_to_string(&duplicate.log).unwrap();
    assert!(
        !dup.contains("installed") && !dup.contains("action="),
        "{dup}"
    );
    check_log(&bench.component_log());
}

#[test]
fn a_status_counts_only_from_its_server_on_sqlite() {
    a_status_counts_only_from_its_server(&Bench::new(None));
}

#[cfg(feature = "etcd")]
#[test]
fn a_status_counts_only_from_its_server_on_etcd() {
    let (_cluster, bench) = etcd_bench();
    a_status_counts_only_from_its_server(&bench);
}

// ---------------------------------------------------------------------------------------

/// The procedures of docs/lockstep.md, "A server died" and "A server came back".
fn a_dead_worker_is_alerted_early_then_removed_and_caught_up_when_it_returns(bench: &Bench) {
    let mut procs = cluster(bench, "20s", &["--stalled-after", "0.1"]);

    // 1.1.0: server 3's worker dies while A is stopped on every server.
    let seen = bench.webhook.bodies.lock().unwrap().len();
    let stalled = || -> Option<serde_json::Value> {
        bench.webhook.bodies.lock().unwrap()[seen..]
            .iter()
            .find(|b| b["event"] == "raised" && b["alert"]["kind"] == "lockstep_stalled")
            .cloned()
    };
    touch(bench, "hang-a-3");
    bench.release("release-1.1.0", "1.1.0", false);
    wait_for(LONG, || {
        let stops = lines(bench, "a stop");
        ["a stop 1", "a stop 2", "a stop 3"]
            .iter()
            .all(|s| stops.iter().filter(|l| l == s).count() >= 2)
    });
    procs[2].signal("KILL");
    remove(bench, "hang-a-3");

    // The alert comes at a tenth of the 20 s barrier timeout, while the update still runs.
    wait_for(LONG, || stalled().is_some());
    let s = bench.status();
    assert!(
        !s.contains("STOPPED")
            && s.contains("alert: lockstep_stalled since")
            && s.contains("server(s) 3 have not reached step 2 of 1.1.0"),
        "{s}"
    );
    let alert = stalled().unwrap();
    assert!(
        alert["alert"]["message"]
            .as_str()
            .unwrap()
            .contains("server(s) 3 have not reached step 2 of 1.1.0: server(s) 1, 2 have waited"),
        "{alert}"
    );
    let alive = [&procs[0], &procs[1], &procs[3]];
    let s = bench.wait_status("STOPPED", LONG, &alive);
    assert!(s.contains("timed out") && s.contains("server(s) 3"), "{s}");

    // A server died: remove it, recover; the others finish. recover says what the
    // leader runs: the same version, on the two servers left.
    let (ok, out) = bench.ctl(&["servers", "rm", "3"]);
    assert!(ok && out.contains("recover"), "{out}");
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("(no longer registered: 3); the leading updater starts the update to 1.1.0 from step 1 on servers 1, 2 (those registered now), if its source still offers 1.1.0 as the newest release"),
        "{out}"
    );
    let s = bench.wait_status("completed: 1.1.0", LONG, &alive);
    assert!(s.contains("by servers 1, 2\n"), "{s}");

    // A server came back: its worker starts again and is caught up to 1.1.0, alone.
    procs[2] = bench.worker(3, "20s");
    let refs: Vec<&support::Proc> = procs.iter().collect();
    let s = bench.wait_status("by servers 1, 2, 3\n", LONG, &refs);
    assert!(s.contains("catch-up: 1.1.0 (finished), servers 3"), "{s}");
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok && out.contains("nothing to recover"), "{out}");

    // A runs on server 3 again, at the version the others run; it never ran two versions.
    check_log(&bench.component_log());
    let a3: Vec<String> = bench
        .component_log()
        .into_iter()
        .filter(|l| l.starts_with("a ") && l.contains(" 3"))
        .collect();
    assert_eq!(
        a3.last().map(String::as_str),
        Some("a start 3 1.1.0"),
        "{a3:?}"
    );
}

#[test]
fn a_dead_worker_is_alerted_early_then_removed_and_caught_up_when_it_returns_on_sqlite() {
    a_dead_worker_is_alerted_early_then_removed_and_caught_up_when_it_returns(&Bench::new(None));
}

#[cfg(feature = "etcd")]
#[test]
fn a_dead_worker_is_alerted_early_then_removed_and_caught_up_when_it_returns_on_etcd() {
    let (_cluster, bench) = etcd_bench();
    a_dead_worker_is_alerted_early_then_removed_and_caught_up_when_it_returns(&bench);
}

// ---------------------------------------------------------------------------------------

/// Publishes `version` shipping this build's `tern-lockstep` as its worker.
fn release_with_worker(bench: &Bench, version: &str) -> String {
    let plan = format!("worker: bin/tern-lockstep\n{}", support::PLAN);
    let binary = std::fs::read(env!("CARGO_BIN_EXE_tern-lockstep")).unwrap();
    let assets = support::build_release_files(
        &bench.github.assets,
        version,
        &plan,
        &[("bin/tern-lockstep", 0o755, &binary)],
    );
    bench.github.publish(support::FakeRelease {
        tag: format!("release-{version}"),
        prerelease: false,
        draft: false,
        assets,
    });
    let sums = std::fs::read_to_string(
        bench
            .github
            .assets
            .join(format!("app-{version}.tar.gz.sha256")),
    )
    .unwrap();
    format!("{version}@{}", sums.split_whitespace().next().unwrap())
}

fn the_release_worker_runs_the_release_steps(bench: &Bench) {
    for id in 1..=3 {
        bench.add_server(id);
    }
    let mut procs: Vec<_> = (1..=3).map(|id| bench.worker(id, "60s")).collect();
    procs.push(bench.updater("u1"));
    let refs: Vec<&support::Proc> = procs.iter().collect();
    for version in ["1.0.0", "1.1.0"] {
        let release = release_with_worker(bench, version);
        bench.wait_status(&format!("completed: {version}"), LONG, &refs);
        for (i, p) in procs[..3].iter().enumerate() {
            let id = i + 1;
            // The same process, now running the release's program…
            let exe = std::fs::read_link(format!("/proc/{}/exe", p.pid())).unwrap();
            let want = bench
                .dir
                .path()
                .join(format!("server-{id}/versions/{version}/bin/tern-lockstep"));
            assert_eq!(exe, want, "worker {id}");
            // …ran the release's steps.
            let ran = std::fs::read_to_string(
                bench
                    .dir
                    .path()
                    .join(format!("worker-release-{id}-{version}")),
            )
            .unwrap();
            assert_eq!(ran.trim(), release, "worker {id}");
        }
    }
    let log = std::fs::read_to_string(&procs[0].log).unwrap();
    assert!(log.contains("the release ships its own worker"), "{log}");
    check_log(&bench.component_log());
}

#[test]
fn the_release_worker_runs_the_release_steps_on_sqlite() {
    the_release_worker_runs_the_release_steps(&Bench::new(None));
}

#[cfg(feature = "etcd")]
#[test]
fn the_release_worker_runs_the_release_steps_on_etcd() {
    let (_cluster, bench) = etcd_bench();
    the_release_worker_runs_the_release_steps(&bench);
}

// ---------------------------------------------------------------------------------------

/// Hex to bytes (the credentials file's key).
fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Server 3, taken over, once wrote `lockstep/contents/d` (every server's etcd user
/// could): a success planted before 1.1.0 made the others skip D, never run, and a
/// planted failure stopped the cluster blaming server 2; it could also take or release
/// the rolling and leader-only leases every worker shared. Now each server's etcd user
/// writes only its own keys and leases, and a leader-only result counts only signed by
/// its server for the update it answers: one planted under server 3's own key, signed
/// with its own key for another update, is ignored, and D runs once.
#[cfg(feature = "etcd")]
#[test]
fn a_server_plants_nothing_its_peers_act_on_on_etcd() {
    use tern_core::lockstep::protocol::{LeaderOnlyRecord, UpdateRequest, leader_only_message};

    let (_cluster, bench) = etcd_bench();
    let procs = cluster(&bench, "60s", &[]);
    let refs: Vec<&support::Proc> = procs.iter().collect();
    // What an upgrade runs once: the users keep their passwords, get exactly these grants.
    let (ok, out) = bench.ctl(&["auth", "refresh"]);
    assert!(
        ok && out.contains("server(s) 1, 2, 3 may now write only their own keys"),
        "{out}"
    );
    let creds: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bench.credentials(3)).unwrap()).unwrap();
    let login = Some((
        creds["etcd_user"].as_str().unwrap().to_string(),
        creds["etcd_password"].as_str().unwrap().to_string(),
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server3 = rt.block_on(raw_store(&bench, login));
    let planted =
        serde_json::json!({"version": "1.1.0", "success": true, "server": 2, "message": ""});
    for key in [
        "lockstep/contents/d",
        "lockstep/contents/1/d",
        "lockstep/contents/2/d",
    ] {
        let e = rt
            .block_on(server3.put(key, serde_json::to_vec(&planted).unwrap(), None))
            .unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{key}: {e}");
    }
    for lease in [
        "lockstep-rolling-b",
        "lockstep-leader-only-d",
        "lockstep-claim-1",
        "lockstep-claim-2",
    ] {
        let e = rt
            .block_on(server3.lease_acquire(lease, "server-3", Duration::from_secs(30)))
            .unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{lease}: {e}");
    }

    // 1.1.0, held at its first step (server 2 is slow to stop A).
    touch(&bench, "hang-a-2");
    bench.release("release-1.1.0", "1.1.0", false);
    wait_for(LONG, || {
        let stops = lines(&bench, "a stop");
        ["a stop 1", "a stop 2", "a stop 3"]
            .iter()
            .all(|s| stops.iter().filter(|l| l == s).count() >= 2)
    });
    // Under its own key, signed with its own key, a success of D for 1.1.0, but for
    // another update of it (one written an hour before this one).
    let current: UpdateRequest = serde_json::from_slice(
        &rt.block_on(server3.get("lockstep/status/current"))
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    assert_eq!(current.version, "1.1.0");
    let earlier = UpdateRequest {
        started_at: current
            .started_at
            .map(|t| t - jiff::SignedDuration::from_hours(1)),
        ..current.clone()
    };
    let record = LeaderOnlyRecord {
        version: "1.1.0".into(),
        success: true,
        server: Some(3),
        message: String::new(),
    };
    let key =
        ring::signature::Ed25519KeyPair::from_pkcs8(&unhex(creds["signing_key"].as_str().unwrap()))
            .unwrap();
    let sig = key.sign(&leader_only_message(3, &earlier, "d", &record));
    let mut signed = serde_json::to_value(&record).unwrap();
    signed["sig"] = sig
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into();
    rt.block_on(server3.put(
        "lockstep/contents/3/d",
        serde_json::to_vec(&signed).unwrap(),
        None,
    ))
    .unwrap();
    let s = bench.status();
    assert!(
        s.contains("leader-only d: a record under server 3's key IGNORED"),
        "{s}"
    );

    // Server 2 finishes stopping A: the update completes, and D ran, once.
    remove(&bench, "hang-a-2");
    let s = bench.wait_status("completed: 1.1.0", LONG, &refs);
    assert!(s.contains("by servers 1, 2, 3\n"), "{s}");
    let runs = check_log(&bench.component_log());
    assert_eq!(
        runs.get("1.1.0"),
        Some(&1),
        "D ran once for 1.1.0 whatever was planted: {runs:?}\n{}",
        bench.component_log().join("\n")
    );
}

// ---------------------------------------------------------------------------------------

/// A three-member etcd with authentication on.
#[cfg(feature = "etcd")]
fn etcd_bench() -> (tern_testing::etcd::EtcdCluster, Bench) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(tern_testing::etcd::EtcdCluster::start(3));
    let mut bench = Bench::new(Some(format!("etcd:{}", cluster.endpoints().join(","))));
    bench.enable_etcd_auth();
    (cluster, bench)
}
