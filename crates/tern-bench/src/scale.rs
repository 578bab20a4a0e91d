//! `scale`: a fleet on three ternd replicas over a real three-member etcd (ternd built
//! with the `etcd` feature: `cargo xtask bench scale` builds it apart, as `ternd-etcd`).
//!
//! Simulated hosts (tern-bench's `fleet`, groups dev:staging:prod 1:2:7) heartbeat
//! spread over the replicas (host `i` to replica `i % 3`), closed loop: every host once to
//! register, until every replica's history writer has written every host's first record
//! (the history's first deploy), then one steady round. Then a rollout through the three
//! groups under the dev clock, each started with `start-update`:
//! the time until every replica's snapshot shows the group updating (no canaries yet:
//! with `canary_count` set, the bench could not read which hosts the leader picked, so the
//! canary phase is not exercised — an open item), the time for all of
//! the group's hosts to ask `find` once after that (spread over the replicas; the sum of
//! the two is when 99 % of them were told), the hosts' heartbeats on the new version, and
//! reconciles until the group is done. Figures: each replica's CPU and RSS, etcd's own
//! counters (puts, deletes, transactions, lease grants and revokes, bytes received from
//! clients, DB size) per phase, the keys by kind at the end, the leader's reconcile time.
//! Per-host costs are reported so that a million hosts can be extrapolated on paper.
//!
//! Not in this run: heartbeats at an open-loop rate of one per 30 s (the rounds are
//! closed loop: the CPU per heartbeat gives the cores a rate needs) and long polls.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::etcd::Cluster;
use crate::load::{self, Load};
use crate::procs::{self, Server};
use crate::{Opts, fleet, median};

const REPLICAS: usize = 3;
const GROUPS: [&str; 3] = ["dev", "staging", "prod"];

fn config() -> String {
    let mut s = String::from(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: enabled\n    strategy: halt-on-error\n    schedules:\n      regular:\n",
    );
    for (g, hour) in [("dev", 10), ("staging", 12), ("prod", 14)] {
        s.push_str(&format!(
            "      - name: {g}\n        days: [\"*\"]\n        start_hour: {hour}\n"
        ));
    }
    s
}

const VERSION: &str = "kind: autoupdate_version\nversion: v1\nmetadata:\n  name: autoupdate-version\nspec:\n  agents:\n    start_version: 1.0.0\n    target_version: 1.1.0\n    schedule: regular\n";

struct Replica {
    server: Server,
    dir: PathBuf,
}

struct Fleet {
    replicas: Vec<Replica>,
    token: String,
    n: u64,
    conns: usize,
}

impl Fleet {
    fn call(&self, r: usize, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Value> {
        let (status, resp) = load::request(
            self.replicas[r].server.addr,
            method,
            path,
            Some(&self.token),
            body,
        )?;
        if !(200..300).contains(&status) {
            bail!(
                "replica {r}: {method} {path}: {status} {}",
                String::from_utf8_lossy(&resp)
            );
        }
        Ok(serde_json::from_slice(&resp).unwrap_or(Value::Null))
    }

    fn metrics(&self, r: usize) -> anyhow::Result<String> {
        let (_, body) = load::request(
            self.replicas[r].server.addr,
            "GET",
            "/metrics",
            Some(&self.token),
            b"",
        )?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    fn metric(&self, r: usize, name: &str) -> anyhow::Result<f64> {
        let text = self.metrics(r)?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("replica {r}'s /metrics has no {name}"))
    }

    fn leader(&self) -> anyhow::Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let leaders: Vec<usize> = (0..REPLICAS)
                .filter(|r| {
                    self.metrics(*r)
                        .is_ok_and(|m| m.contains("\ntern_leader 1\n"))
                })
                .collect();
            if leaders.len() == 1 {
                return Ok(leaders[0]);
            }
            if Instant::now() > deadline {
                bail!("no single leader within 60 s ({leaders:?})");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn pids(&self) -> Vec<u32> {
        self.replicas.iter().map(|r| r.server.pid()).collect()
    }

    fn cpu(&self) -> anyhow::Result<Vec<Duration>> {
        self.pids().into_iter().map(procs::cpu_time).collect()
    }

    fn rss(&self) -> anyhow::Result<Vec<u64>> {
        self.pids().into_iter().map(procs::rss).collect()
    }

    /// One request per selected host, each to its replica, all replicas at once; `make`
    /// builds host `i`'s request. Returns the wall time; every answer must be 2xx.
    fn each_host(
        &self,
        pick: impl Fn(u64) -> bool + Send + Sync + Clone + 'static,
        make: impl Fn(u64) -> Option<Arc<[u8]>> + Send + Sync + Clone + 'static,
    ) -> anyhow::Result<(Duration, u64)> {
        let start = Instant::now();
        let n = self.n;
        let per = (self.conns / REPLICAS).max(1);
        let handles: Vec<_> = (0..REPLICAS)
            .map(|r| {
                let addr = self.replicas[r].server.addr;
                let (pick, make) = (pick.clone(), make.clone());
                std::thread::spawn(move || {
                    let next = Arc::new(AtomicU64::new(r as u64));
                    let source: load::Source = Arc::new(move || {
                        loop {
                            let i = next.fetch_add(REPLICAS as u64, Ordering::Relaxed);
                            if i >= n {
                                return None;
                            }
                            if pick(i) {
                                return make(i);
                            }
                        }
                    });
                    load::run(&Load {
                        addr,
                        connections: per,
                        duration: Duration::from_secs(7200),
                        rate: None,
                        source,
                    })
                })
            })
            .collect();
        let mut ok = 0;
        for h in handles {
            let o = h
                .join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
            if o.bad_status > 0 {
                bail!("{} requests refused", o.bad_status);
            }
            ok += o.ok;
        }
        Ok((start.elapsed(), ok))
    }

    fn heartbeats(
        &self,
        pick: impl Fn(u64) -> bool + Send + Sync + Clone + 'static,
        version: &'static str,
    ) -> anyhow::Result<(Duration, u64)> {
        let token: Arc<str> = self.token.as_str().into();
        self.each_host(pick, move |i| {
            // As tern-update sends it for a host whose agent passes its health check:
            // only a healthy canary proves the target.
            let mut hb = fleet::heartbeat(i, version);
            hb.healthy = Some(true);
            let body = serde_json::to_vec(&hb).ok()?;
            Some(load::post_json("/v1/agents/heartbeat", &token, &body))
        })
    }

    /// Every replica's history writer has written the first record of each of its hosts;
    /// hosts dropped from a full queue are queued again by their next heartbeat, so the
    /// fleet heartbeats again (the same state) while some are left.
    fn drain(&self, version: &'static str) -> anyhow::Result<u32> {
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut rounds = 0;
        loop {
            let mut done = true;
            let mut resend = false;
            for r in 0..REPLICAS {
                let pending = self.metric(r, "tern_host_history_pending_hosts")?;
                let unrecorded = self.metric(r, "tern_host_history_unrecorded_hosts")?;
                let hosts = (self.n + (REPLICAS - 1 - r) as u64) / REPLICAS as u64;
                let writes = self.metric(r, "tern_host_history_writes_total")?;
                if pending > 0.0 || unrecorded > 0.0 || writes < hosts as f64 {
                    done = false;
                }
                resend |= pending == 0.0 && unrecorded > 0.0;
            }
            if done {
                return Ok(rounds);
            }
            if Instant::now() > deadline {
                bail!("the histories did not drain within an hour");
            }
            if resend {
                self.heartbeats(|_| true, version)?;
                rounds += 1;
            } else {
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }

    /// Every replica's find snapshot shows `group` in one of `states`.
    fn wait_state(&self, group: &str, states: &[&str]) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let want: Vec<String> = states
            .iter()
            .map(|s| format!("tern_rollout_group_state{{group=\"{group}\",state=\"{s}\"}} 1"))
            .collect();
        loop {
            let mut all = true;
            for r in 0..REPLICAS {
                let m = self.metrics(r)?;
                all &= want.iter().any(|w| m.lines().any(|l| l == w));
            }
            if all {
                return Ok(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(120) {
                bail!("replicas never showed {group} in {states:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every non-leader writes its report, then the leader reconciles (timed); returns
    /// the leader's reconcile time.
    fn reconcile(&self) -> anyhow::Result<Duration> {
        let leader = self.leader()?;
        for r in (0..REPLICAS).filter(|r| *r != leader) {
            self.call(r, "POST", "/v1/dev/reconcile", b"")?;
        }
        let t = Instant::now();
        let v = self.call(leader, "POST", "/v1/dev/reconcile", b"")?;
        let took = t.elapsed();
        if v["leader"] != true {
            bail!("replica {leader} reconciled as a non-leader: {v}");
        }
        Ok(took)
    }

    fn group_state(&self, group: &str) -> anyhow::Result<String> {
        let v = self.call(0, "GET", "/v1/resources/rollout", b"")?;
        let groups = v["status"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        groups
            .iter()
            .find(|g| g["name"] == group)
            .and_then(|g| g["state"].as_str())
            .map(str::to_string)
            .with_context(|| format!("no group {group} in the rollout: {v}"))
    }
}

/// etcd's counters, summed over what they count (member 0; every member applies every
/// write), and the bytes received from clients summed over the members.
#[derive(Clone, Copy, Debug, Default)]
struct EtcdCounters {
    puts: f64,
    deletes: f64,
    txns: f64,
    lease_grants: f64,
    lease_revokes: f64,
    /// Keys and values of every put, as etcd counts them.
    put_bytes: f64,
    client_bytes: f64,
    db_bytes: f64,
}

fn counters(etcd: &Cluster) -> anyhow::Result<EtcdCounters> {
    let mut client_bytes = 0.0;
    for m in 0..etcd.clients.len() {
        client_bytes += etcd.metric(m, "etcd_network_client_grpc_received_bytes_total")?;
    }
    Ok(EtcdCounters {
        puts: etcd.metric(0, "etcd_mvcc_put_total")?,
        deletes: etcd.metric(0, "etcd_mvcc_delete_total")?,
        txns: etcd.metric(0, "etcd_mvcc_txn_total")?,
        // etcd 3.4's names (3.5 moved them under `etcd_debugging_server_`): one is 0.
        lease_grants: etcd.metric(0, "etcd_debugging_lease_granted_total")?
            + etcd.metric(0, "etcd_debugging_server_lease_granted_total")?,
        lease_revokes: etcd.metric(0, "etcd_debugging_lease_revoked_total")?
            + etcd.metric(0, "etcd_debugging_server_lease_revoked_total")?,
        put_bytes: etcd.metric(0, "etcd_debugging_mvcc_total_put_size_in_bytes")?,
        client_bytes,
        db_bytes: etcd.metric(0, "etcd_mvcc_db_total_size_in_bytes")?,
    })
}

fn delta(a: &EtcdCounters, b: &EtcdCounters, hosts: u64) -> Value {
    let per = |x: f64| (x / hosts as f64 * 1000.0).round() / 1000.0;
    json!({
        "puts": b.puts - a.puts,
        "deletes": b.deletes - a.deletes,
        "txns": b.txns - a.txns,
        "lease_grants": b.lease_grants - a.lease_grants,
        "lease_revokes": b.lease_revokes - a.lease_revokes,
        "client_bytes": b.client_bytes - a.client_bytes,
        "put_bytes": b.put_bytes - a.put_bytes,
        "put_bytes_per_host": per(b.put_bytes - a.put_bytes).round(),
        "puts_per_host": per(b.puts - a.puts),
        "client_bytes_per_host": per(b.client_bytes - a.client_bytes).round(),
        "db_bytes_after": b.db_bytes,
    })
}

fn start_replicas(bin: &Path, dir: &Path, etcd: &Cluster) -> anyhow::Result<Fleet> {
    let backend = format!("etcd:{}", etcd.urls.join(","));
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let d = dir.join(format!("r{i}"));
        std::fs::create_dir_all(&d)?;
        let mut cmd = Command::new(bin);
        cmd.arg("start")
            .arg("--data-dir")
            .arg(&d)
            .args(["--listen", "127.0.0.1:0", "--insecure-http"])
            .args(["--dev-clock", "2026-11-23T09:00:00Z"])
            .args(["--find-rate", "0", "--heartbeat-rate", "0"])
            .args(["--log", "warn"])
            .args(["--backend", &backend])
            .args(["--etcd-lease-bucket", "1h"])
            .args(["--replica-id", &format!("r{i}")])
            .args(["--leader-ttl", "5s"]);
        let server = Server::spawn(cmd)?;
        replicas.push(Replica { server, dir: d });
    }
    for r in &replicas {
        r.server.wait_ready("/readyz")?;
    }
    // One replica initialised the store and wrote the operator token to its data dir.
    let token = replicas
        .iter()
        .find_map(|r| std::fs::read_to_string(r.dir.join("operator.token")).ok())
        .map(|t| t.trim().to_string())
        .context("no replica wrote an operator token")?;
    Ok(Fleet {
        replicas,
        token,
        n: 0,
        conns: 0,
    })
}

pub fn run(opts: &Opts) -> anyhow::Result<Value> {
    let n: u64 = match std::env::var("TERN_BENCH_SCALE_HOSTS") {
        Ok(v) => v.parse().context("TERN_BENCH_SCALE_HOSTS")?,
        Err(_) if opts.quick => 3_000,
        Err(_) => 100_000,
    };
    let tmp = tempfile::tempdir()?;
    let etcd = Cluster::start(&tmp.path().join("etcd"), 3, "the scale benchmark")?;
    let mut f = start_replicas(&opts.ternd, tmp.path(), &etcd)
        .context("starting ternd on etcd (is it built with --features tern-server/etcd?)")?;
    f.n = n;
    f.conns = opts.connections.max(REPLICAS);
    let leader = f.leader()?;
    f.call(leader, "POST", "/v1/resources/config", config().as_bytes())?;
    f.call(leader, "POST", "/v1/resources/version", VERSION.as_bytes())?;
    f.reconcile()?;
    std::thread::sleep(Duration::from_millis(300));
    let rss0 = f.rss()?;
    let cpu0 = f.cpu()?;
    let e0 = counters(&etcd)?;
    eprintln!("scale: {n} hosts, 3 replicas (leader r{leader}), 3 etcd members");

    // Register every host once.
    let (wall, ok) = f.heartbeats(|_| true, "1.0.0")?;
    if ok != n {
        bail!("{ok} of {n} registering heartbeats accepted");
    }
    let cpu_reg = f.cpu()?;
    let e1 = counters(&etcd)?;
    eprintln!(
        "scale: registered in {:.1} s ({:.0} hb/s)",
        wall.as_secs_f64(),
        n as f64 / wall.as_secs_f64()
    );

    // The history's first deploy: every host's first record written.
    let t = Instant::now();
    let extra_rounds = f.drain("1.0.0")?;
    let drain_secs = t.elapsed().as_secs_f64();
    let e2 = counters(&etcd)?;
    let rss_drained = f.rss()?;
    let cpu_drained = f.cpu()?;
    eprintln!(
        "scale: histories drained in {drain_secs:.1} s ({extra_rounds} extra rounds); etcd lease grants {} for {n} hosts",
        e2.lease_grants - e1.lease_grants
    );

    // A steady round: every host reports the same state again.
    let (wall_steady, _) = f.heartbeats(|_| true, "1.0.0")?;
    let cpu_steady = f.cpu()?;
    let e3 = counters(&etcd)?;
    let steady_ms_per_1k: Vec<f64> = (0..REPLICAS)
        .map(|r| {
            let hosts = n as f64 / REPLICAS as f64;
            cpu_steady[r].saturating_sub(cpu_drained[r]).as_secs_f64() * 1000.0 / (hosts / 1000.0)
        })
        .collect();

    // The rollout.
    let mut reconciles = Vec::new();
    let mut groups = serde_json::Map::new();
    let mut clock = 0u32;
    for (k, group) in GROUPS.into_iter().enumerate() {
        let e_before = counters(&etcd)?;
        let via = (leader + 1 + k) % REPLICAS;
        let body = json!({"groups": [group]}).to_string();
        let t0 = Instant::now();
        f.call(via, "POST", "/v1/agents/start-update", body.as_bytes())?;
        let seen = f.wait_state(group, &["active"])?;
        let converged = t0.elapsed();
        // Every host of the group asks find once, at its replica.
        let token: Arc<str> = f.token.as_str().into();
        let _ = token;
        let g = group;
        let (find_wall, asked) = f.each_host(
            move |i| fleet::group_of(i) == g,
            move |i| {
                Some(load::get(&format!(
                    "/v1/webapi/find?group={g}&updater_id={}",
                    fleet::updater_id(i)
                )))
            },
        )?;
        // A sample of the answers, read in full: told to update to 1.1.0.
        for i in (0..n)
            .filter(|i| fleet::group_of(*i) == group)
            .step_by(997)
            .take(20)
        {
            let r = (i % REPLICAS as u64) as usize;
            let (_, body) = load::request(
                f.replicas[r].server.addr,
                "GET",
                &format!(
                    "/v1/webapi/find?group={group}&updater_id={}",
                    fleet::updater_id(i)
                ),
                None,
                b"",
            )?;
            let v: Value = serde_json::from_slice(&body)?;
            if v["auto_update"]["agent_auto_update"] != true
                || v["auto_update"]["agent_version"] != "1.1.0"
            {
                bail!("host {i} of {group} not told to update: {v}");
            }
        }
        let told_99 = converged + find_wall.mul_f64(0.99);
        // The group's hosts update and report; reconcile until it is done.
        let (hb_wall, _) = f.heartbeats(move |i| fleet::group_of(i) == g, "1.1.0")?;
        let mut done = false;
        for _ in 0..10 {
            clock += 2;
            f.call(
                leader,
                "POST",
                "/v1/dev/clock",
                json!({"advance": "2m"}).to_string().as_bytes(),
            )?;
            std::thread::sleep(Duration::from_millis(200));
            reconciles.push(f.reconcile()?);
            if f.group_state(group)? == "done" {
                done = true;
                break;
            }
        }
        if !done {
            bail!("{group} never reached done");
        }
        let e_after = counters(&etcd)?;
        let hosts = (0..n).filter(|i| fleet::group_of(*i) == group).count() as u64;
        eprintln!(
            "scale: {group} ({hosts} hosts): snapshots updating after {:.0} ms, 99 % told after {:.0} ms; heartbeats on 1.1.0 {:.1} s",
            seen.as_secs_f64() * 1000.0,
            told_99.as_secs_f64() * 1000.0,
            hb_wall.as_secs_f64()
        );
        groups.insert(
            group.to_string(),
            json!({
                "hosts": hosts,
                "replicas_show_start_ms": seen.as_secs_f64() * 1000.0,
                "find_round_ms": find_wall.as_secs_f64() * 1000.0,
                "find_answers": asked,
                "told_99pct_ms": told_99.as_secs_f64() * 1000.0,
                "etcd": delta(&e_before, &e_after, hosts),
            }),
        );
    }
    let _ = clock;
    let e_end = counters(&etcd)?;
    let cpu_end = f.cpu()?;
    let rss_end = f.rss()?;
    let mut keys = serde_json::Map::new();
    for (kind, prefix) in [
        ("all", "/tern/kv/"),
        ("history", "/tern/kv//tern/history/"),
        ("hosts", "/tern/kv//tern/hosts/"),
        ("reports", "/tern/kv//tern/reports/"),
        ("attempts", "/tern/kv//tern/directives/attempts/"),
    ] {
        keys.insert(kind.into(), json!(etcd.count(prefix)?));
    }
    let reconcile_ms: Vec<f64> = reconciles
        .iter()
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    let per_replica: Vec<Value> = (0..REPLICAS)
        .map(|r| {
            let secs = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64();
            json!({
                "rss_before": rss0[r],
                "rss_drained": rss_drained[r],
                "rss_end": rss_end[r],
                "rss_bytes_per_host": (rss_drained[r].saturating_sub(rss0[r]) as f64 / (n as f64 / REPLICAS as f64)).round(),
                "cpu_register_secs": secs(cpu0[r], cpu_reg[r]),
                "cpu_drain_secs": secs(cpu_reg[r], cpu_drained[r]),
                "cpu_steady_ms_per_1k": steady_ms_per_1k[r],
                "cpu_rollout_secs": secs(cpu_steady[r], cpu_end[r]),
                "cpu_total_secs": secs(cpu0[r], cpu_end[r]),
            })
        })
        .collect();
    let history = delta(&e1, &e2, n);
    eprintln!(
        "scale: history first deploy: {} lease grants, {} puts in {} txns for {n} hosts; etcd DB {} MiB at the end; leader reconcile median {:.1} ms",
        history["lease_grants"],
        history["puts"],
        history["txns"],
        (e_end.db_bytes / 1048576.0).round(),
        median(reconcile_ms.clone())
    );
    Ok(json!({
        "bench": "scale",
        "quick": opts.quick,
        "hosts": n,
        "replicas": REPLICAS,
        "etcd_members": 3,
        "connections": f.conns,
        "register_hb_per_s": (n as f64 / wall.as_secs_f64()).round(),
        "steady_hb_per_s": (n as f64 / wall_steady.as_secs_f64()).round(),
        "history_drain_secs": drain_secs,
        "history_extra_rounds": extra_rounds,
        "etcd_register": delta(&e0, &e1, n),
        "etcd_history_first_deploy": history,
        "etcd_steady_round": delta(&e2, &e3, n),
        "etcd_whole_run": delta(&e0, &e_end, n),
        "etcd_db_bytes_end": e_end.db_bytes,
        "etcd_keys_end": keys,
        "groups": groups,
        "leader_reconcile_ms": reconcile_ms,
        "leader_reconcile_median_ms": median(reconcile_ms.clone()),
        "per_replica": per_replica,
        "loadavg": procs::loadavg(),
    }))
}
