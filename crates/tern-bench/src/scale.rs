//! `scale`: a fleet on three ternd replicas over a real three-member etcd (ternd built
//! with the `etcd` feature: `cargo xtask bench scale` builds it apart, as `ternd-etcd`).
//!
//! Simulated hosts (tern-bench's `fleet`, groups dev:staging:prod 1:2:7) heartbeat
//! spread over the replicas (host `i` to replica `i % 3`): every host once to register
//! (closed loop), until etcd holds every host's first history record and no replica has
//! one queued (the history's first deploy), then one steady round (closed loop), then one
//! **open-loop** period: every host once in 30 s (3 s with `--quick`), the heartbeats
//! spread evenly at hosts / 30 s per second, latency measured from when each was due, so
//! that a replica that falls behind shows it.
//!
//! Then a rollout through the three groups under the dev clock, each started with
//! `start-update`, while every host keeps heartbeating once per period in the
//! **background** (open loop at the same rate on connections of its own, each replica's
//! hosts in turn over and over, from before the first `start-update` until the last
//! group is done; every answer must be 2xx). Each host reports the version it runs at
//! that moment: when a canary or a group updates, the shared state changes under a lock
//! that first waits out every background heartbeat built on the old state, so no host
//! ever reports a version it has left.
//!
//! Before each start, one in ten of the group's hosts (at most 6,000) **long-polls** find
//! at its replica, each on its own connection, as tern-update's watcher does; the time
//! from `start-update` until each is told to update is measured. staging and prod have
//! **canaries** (3 and 5): the bench waits for every replica to show the group in
//! canary, has the replicas report and the leader reconcile, reads the canaries the
//! leader picked from the rollout's status (`GET /v1/resources/rollout`, as an operator
//! would), asks find for each at its replica until it is told to update, has them
//! heartbeat healthy on the new version, and reconciles until the group is active. Then
//! every host of the group asks find once; every answer is read and must say update (the
//! bench fails naming how many did not), and **99 % told** is counted: the time from
//! `start-update` until the 0.99 N-th of those answers arrived (N the group's hosts).
//! The estimate the bench made before it counted (the time to active plus 99 % of the
//! round's wall time) is reported beside it. Then the group's hosts heartbeat on the new
//! version, and the dev clock moves in 2-minute steps (each after a heartbeat of every
//! host, so none is forgotten for silence) with a reconcile each, until the group is
//! done.
//!
//! Figures: each replica's CPU and RSS (RSS per group before its long polls, with them
//! held, when the group is active, after its find round and when it is done, and open
//! connections at each of those points but active, and at the end once the rollout's
//! history writes have drained and every replica has trimmed its heap after them, or
//! 75 s), the
//! background heartbeats' offered and achieved rate and latency from when each was due,
//! etcd's own counters (puts, deletes, transactions, lease grants and revokes, bytes
//! received from clients, DB size, its members' CPU) per phase, the cores of the
//! replicas, etcd and the bench through the rollout, the lease grants per second in the
//! open-loop period and over the run, the keys by kind at the end, the leader's reconcile
//! times, the bench's own CPU. Per-host costs are reported so that a million hosts can be
//! extrapolated on paper.
//!
//! `TERN_BENCH_SCALE_ROUND_RATE=R` paces the rollout's own rounds (the canaries' and
//! each group's heartbeats, the find round, the heartbeats before each clock step) at
//! R requests/s in all instead of as fast as the replicas answer: whether the
//! background heartbeats fall behind because of the replicas or because the rounds
//! take every core the machine has. Paced, the 99 % told figure measures the pace.
//!
//! Reconciles run when the bench asks (the dev clock turns the timers off), at once: in a
//! deployment the leader's next reconcile comes within `--active-report-period` (10 s)
//! or `--report-after-change` (2 s), which the canary times here do not include.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::etcd::Cluster;
use crate::load::{self, Load};
use crate::procs::{self, Server};
use crate::{Opts, fleet, median, quantile};

const REPLICAS: usize = 3;
/// Where etcd holds the hosts' history records (ternd's keys under its `/tern/kv/`).
const HISTORY_KEYS: &str = "/tern/kv//tern/history/";
const GROUPS: [&str; 3] = ["dev", "staging", "prod"];
/// Each group's `canary_count`: dev goes first without canaries (as in the examples),
/// staging and prod test theirs first.
const CANARIES: [usize; 3] = [0, 3, 5];
/// Long-polling hosts of a group at most: each holds a connection of the bench (its
/// descriptors share a 20,000 limit here) and one of its replica (ternd holds at most
/// 10,000 at once per replica by default).
const MAX_POLLERS: usize = 6_000;
/// Connections per replica of the background heartbeats during the rollout: an open
/// loop sends on a connection only once its previous answer is in, so enough of them
/// that the rollout's own closed-loop rounds, which slow every answer, do not hold the
/// rate back.
const BACKGROUND_CONNS: usize = 32;

fn config() -> String {
    let mut s = String::from(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: enabled\n    strategy: halt-on-error\n    schedules:\n      regular:\n",
    );
    for ((g, hour), canaries) in [("dev", 10), ("staging", 12), ("prod", 14)]
        .into_iter()
        .zip(CANARIES)
    {
        s.push_str(&format!(
            "      - name: {g}\n        days: [\"*\"]\n        start_hour: {hour}\n"
        ));
        if canaries > 0 {
            s.push_str(&format!("        canary_count: {canaries}\n"));
        }
    }
    s
}

/// The version each simulated host runs: its group's target once the group has
/// updated, a canary's as soon as it has, the start version otherwise. Every round of
/// heartbeats reports it, so that a host never seems to go back.
#[derive(Clone, Default)]
struct Running {
    groups: Vec<&'static str>,
    canaries: HashSet<u64>,
}

impl Running {
    fn version(&self, i: u64) -> &'static str {
        if self.canaries.contains(&i) || self.groups.contains(&fleet::group_of(i)) {
            "1.1.0"
        } else {
            "1.0.0"
        }
    }
}

/// The long-polling hosts of `group`: one in ten of its hosts, at most [`MAX_POLLERS`].
fn pollers(n: u64, group: &str) -> Vec<u64> {
    (0..n)
        .filter(|i| fleet::group_of(*i) == group && (i / 10).is_multiple_of(10))
        .take(MAX_POLLERS)
        .collect()
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
    /// The rollout's rounds in requests/s over the replicas (open loop), or as fast as
    /// they answer (closed loop).
    round_rate: Option<f64>,
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

    /// Waits until the rollout's own burst of history writes is over (every host that
    /// updated has a record to write): no replica has a host queued and none wrote a
    /// record for longer than the writer's 2 s period (queued hosts are taken out while
    /// their batch is written); at most 20 minutes. Then until every replica has trimmed
    /// its heap since the rollout's end (the trim may come while the writes drain), or
    /// 75 s more. Each replica's RSS then, and whether it trimmed.
    fn settle(&self) -> anyhow::Result<(Vec<u64>, Vec<bool>)> {
        let trims = |r| self.metric(r, "tern_heap_trims_total");
        let before = (0..REPLICAS)
            .map(trims)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let deadline = Instant::now() + Duration::from_secs(1200);
        let mut last_writes = -1.0;
        loop {
            let (mut pending, mut writes) = (0.0, 0.0);
            for r in 0..REPLICAS {
                pending += self.metric(r, "tern_host_history_pending_hosts")?;
                writes += self.metric(r, "tern_host_history_writes_total")?;
            }
            if pending == 0.0 && writes == last_writes {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the rollout's history writes never drained ({pending} hosts queued)"
            );
            last_writes = writes;
            std::thread::sleep(Duration::from_millis(2500));
        }
        let deadline = Instant::now() + Duration::from_secs(75);
        let mut trimmed = vec![false; REPLICAS];
        loop {
            for r in 0..REPLICAS {
                trimmed[r] = trimmed[r] || trims(r)? > before[r];
            }
            if Instant::now() >= deadline || !trimmed.contains(&false) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok((self.rss()?, trimmed))
    }

    /// Each replica's RSS and open connections (from its `/metrics`): whether memory a
    /// group's long polls took is still held once their connections are closed.
    fn memory(&self) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
        let rss = self.rss()?;
        let conns = (0..REPLICAS)
            .map(|r| Ok(self.metric(r, "tern_connections_open")? as u64))
            .collect::<anyhow::Result<_>>()?;
        Ok((rss, conns))
    }

    /// One request per selected host, each to its replica, all replicas at once; `make`
    /// builds host `i`'s request. Closed loop without `rate`; with it, open loop at
    /// that total rate (requests per second, split evenly over the replicas), latency
    /// measured from when each request was due. Every answer must be 2xx.
    fn each_host(
        &self,
        rate: Option<f64>,
        pick: impl Fn(u64) -> bool + Send + Sync + Clone + 'static,
        make: impl Fn(u64) -> Option<Arc<[u8]>> + Send + Sync + Clone + 'static,
        check: Option<fn(&[u8]) -> bool>,
    ) -> anyhow::Result<load::Outcome> {
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
                        rate: rate.map(|r| r / REPLICAS as f64),
                        source,
                        check,
                        gate: None,
                    })
                })
            })
            .collect();
        let mut all = load::Outcome::default();
        for h in handles {
            let o = h
                .join()
                .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
            if o.bad_status > 0 {
                bail!("{} requests refused", o.bad_status);
            }
            all.absorb(o);
        }
        all.latencies_us.sort_unstable();
        all.elapsed = start.elapsed();
        Ok(all)
    }

    /// The selected hosts heartbeat, each on the version it runs.
    fn heartbeats(
        &self,
        rate: Option<f64>,
        pick: impl Fn(u64) -> bool + Send + Sync + Clone + 'static,
        running: &Running,
    ) -> anyhow::Result<load::Outcome> {
        let token: Arc<str> = self.token.as_str().into();
        let running = Arc::new(running.clone());
        self.each_host(
            rate,
            pick,
            move |i| {
                // As tern-update sends it for a host whose agent passes its health check:
                // only a healthy canary proves the target.
                let mut hb = fleet::heartbeat(i, running.version(i));
                hb.healthy = Some(true);
                let body = serde_json::to_vec(&hb).ok()?;
                Some(load::post_json("/v1/agents/heartbeat", &token, &body))
            },
            None,
        )
    }

    /// Every host heartbeats once per `period` in the background, open loop (a third of
    /// the rate per replica, each replica's hosts in turn, over and over) until
    /// [`Background::finish`]; each reports the version `shared` says it runs then.
    fn background(&self, period: Duration, shared: &Arc<Shared>) -> Background {
        let start = Instant::now();
        let rate = self.n as f64 / period.as_secs_f64();
        let n = self.n;
        let handles = (0..REPLICAS)
            .map(|r| {
                let addr = self.replicas[r].server.addr;
                let token: Arc<str> = self.token.as_str().into();
                let shared = Arc::clone(shared);
                std::thread::spawn(move || {
                    // Replica r's hosts: r, r + 3, r + 6, ... below n.
                    let hosts = (n + (REPLICAS - 1 - r) as u64) / REPLICAS as u64;
                    let next = AtomicU64::new(0);
                    let gate = Arc::clone(&shared.gate);
                    let source: load::Source = Arc::new(move || {
                        if hosts == 0 || shared.stop.load(Ordering::Relaxed) {
                            return None;
                        }
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let i = r as u64 + REPLICAS as u64 * (k % hosts);
                        let version = shared
                            .running
                            .read()
                            .unwrap_or_else(PoisonError::into_inner)
                            .version(i);
                        let mut hb = fleet::heartbeat(i, version);
                        hb.healthy = Some(true);
                        let body = serde_json::to_vec(&hb).ok()?;
                        Some(load::post_json("/v1/agents/heartbeat", &token, &body))
                    });
                    load::run(&Load {
                        addr,
                        connections: BACKGROUND_CONNS,
                        duration: Duration::from_secs(7200),
                        rate: Some(rate / REPLICAS as f64),
                        source,
                        check: None,
                        gate: Some(gate),
                    })
                })
            })
            .collect();
        Background {
            handles,
            shared: Arc::clone(shared),
            start,
        }
    }

    /// Every host heartbeats, then the dev clock moves 2 minutes: no host is silent for
    /// three heartbeat intervals (3 minutes) in dev time, so none is forgotten.
    fn advance(&self, leader: usize, running: &Running) -> anyhow::Result<()> {
        self.heartbeats(self.round_rate, |_| true, running)?;
        self.call(
            leader,
            "POST",
            "/v1/dev/clock",
            json!({"advance": "2m"}).to_string().as_bytes(),
        )?;
        Ok(())
    }

    /// The history's first deploy is done: etcd holds a record for every host, and no
    /// replica has a host queued or marked unrecorded. Hosts dropped from a full queue are
    /// queued again by their next heartbeat, so the fleet heartbeats again (the same
    /// state) while some are left. Counted in etcd, not by the replicas' write counters: a
    /// batch that committed while its client gave up waiting (etcd slower than the
    /// store's 3 s) is found written when retried and not counted again.
    fn drain(&self, etcd: &Cluster, running: &Running) -> anyhow::Result<u32> {
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut rounds = 0;
        loop {
            let mut queued = false;
            let mut resend = false;
            for r in 0..REPLICAS {
                let pending = self.metric(r, "tern_host_history_pending_hosts")?;
                let unrecorded = self.metric(r, "tern_host_history_unrecorded_hosts")?;
                queued |= pending > 0.0 || unrecorded > 0.0;
                resend |= pending == 0.0 && unrecorded > 0.0;
            }
            if !queued && etcd.count(HISTORY_KEYS)? >= self.n {
                return Ok(rounds);
            }
            if Instant::now() > deadline {
                bail!("the histories did not drain within an hour");
            }
            if resend {
                self.heartbeats(None, |_| true, running)?;
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
    ///
    /// The leader lease can move between finding the leader and its reconcile (a 5 s
    /// TTL, and etcd slow to answer on a saturated machine): then the new leader is
    /// asked, a few times at most.
    fn reconcile(&self) -> anyhow::Result<Duration> {
        let mut last = Value::Null;
        for _ in 0..5 {
            let leader = self.leader()?;
            for r in (0..REPLICAS).filter(|r| *r != leader) {
                self.call(r, "POST", "/v1/dev/reconcile", b"")?;
            }
            let t = Instant::now();
            let v = self.call(leader, "POST", "/v1/dev/reconcile", b"")?;
            let took = t.elapsed();
            if v["leader"] == true {
                return Ok(took);
            }
            eprintln!(
                "scale: replica {leader} was no longer the leader at its reconcile ({}); asking the new one",
                v["leader_replica"]
            );
            last = v;
        }
        bail!("no replica reconciled as the leader in 5 tries: {last}")
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

    /// The canaries the leader picked for `group`, from the rollout's status as any
    /// operator reads it: each one's hostname gives the simulated host's index, and its
    /// updater_id must be that host's.
    fn canaries(&self, leader: usize, group: &str) -> anyhow::Result<Vec<u64>> {
        let v = self.call(leader, "GET", "/v1/resources/rollout", b"")?;
        let g = v["status"]["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["name"] == group))
            .with_context(|| format!("no group {group} in the rollout: {v}"))?;
        let mut out = Vec::new();
        for c in g["canaries"].as_array().into_iter().flatten() {
            let i: u64 = c["hostname"]
                .as_str()
                .and_then(|h| h.strip_prefix("host-")?.split('.').next()?.parse().ok())
                .with_context(|| format!("a canary of {group} is not a simulated host: {c}"))?;
            ensure!(
                i < self.n
                    && fleet::group_of(i) == group
                    && c["updater_id"] == fleet::updater_id(i).as_str(),
                "canary {c} of {group} is not host {i} of the group"
            );
            out.push(i);
        }
        Ok(out)
    }

    /// Host `i` asks find at its replica until it is told to update; when it was.
    fn until_told(&self, i: u64, group: &str) -> anyhow::Result<Instant> {
        let r = (i % REPLICAS as u64) as usize;
        let path = format!(
            "/v1/webapi/find?group={group}&updater_id={}",
            fleet::updater_id(i)
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, body) =
                load::request(self.replicas[r].server.addr, "GET", &path, None, b"")?;
            ensure!(status == 200, "find for host {i}: {status}");
            if told(&body) {
                return Ok(Instant::now());
            }
            ensure!(
                Instant::now() < deadline,
                "host {i} of {group} was never told to update"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Requests held by long polls, over the replicas.
    fn held(&self) -> anyhow::Result<f64> {
        let mut sum = 0.0;
        for r in 0..REPLICAS {
            sum += self.metric(r, "tern_find_long_poll_held")?;
        }
        Ok(sum)
    }

    /// `hosts` long-poll find at their replicas (each its own connection, as
    /// tern-update's watcher does: a plain find for the ETag, then finds held with
    /// `wait=50&seen=ETAG`, asked again whenever a hold ends or the answer changes
    /// without saying update); returns once every one is held. Joining the handle
    /// gives each host's instant of being told to update.
    fn long_polls(&self, group: &'static str, hosts: &[u64]) -> anyhow::Result<Pollers> {
        let held_before = self.held()?;
        let addrs: Vec<SocketAddr> = self.replicas.iter().map(|r| r.server.addr).collect();
        let hosts = hosts.to_vec();
        let count = hosts.len();
        let handle = std::thread::spawn(move || -> anyhow::Result<Vec<Instant>> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                // Connections open a few hundred at a time, as a fleet's do not all
                // arrive in one instant.
                let gate = Arc::new(Semaphore::new(200));
                let deadline = Instant::now() + Duration::from_secs(1800);
                let tasks: Vec<_> = hosts
                    .into_iter()
                    .map(|i| {
                        let addr = addrs[(i % REPLICAS as u64) as usize];
                        let path = format!(
                            "/v1/webapi/find?group={group}&updater_id={}",
                            fleet::updater_id(i)
                        );
                        tokio::spawn(long_poll(addr, path, Arc::clone(&gate), deadline))
                    })
                    .collect();
                let mut told = Vec::with_capacity(tasks.len());
                for t in tasks {
                    told.push(t.await.context("a long poll panicked")??);
                }
                Ok(told)
            })
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.held()? < held_before + count as f64 {
            if handle.is_finished() {
                match handle.join() {
                    Ok(Err(e)) => return Err(e.context("a long poll failed before the start")),
                    _ => bail!("the long polls ended before the group started"),
                }
            }
            ensure!(
                Instant::now() < deadline,
                "{count} long polls were never all held ({} held)",
                self.held()?
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Pollers { handle, count })
    }
}

struct Pollers {
    handle: std::thread::JoinHandle<anyhow::Result<Vec<Instant>>>,
    count: usize,
}

impl Pollers {
    /// Milliseconds from `t0` until each long-polling host was told to update, sorted.
    fn told_ms(self, t0: Instant) -> anyhow::Result<Vec<f64>> {
        let told = self
            .handle
            .join()
            .map_err(|_| anyhow::anyhow!("the long-poll thread panicked"))??;
        ensure!(
            told.len() == self.count,
            "{} of {} long polls answered",
            told.len(),
            self.count
        );
        let mut ms: Vec<f64> = told
            .iter()
            .map(|t| t.saturating_duration_since(t0).as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        Ok(ms)
    }
}

/// What the background heartbeats read: the version each host runs, changed under the
/// gate (see [`Load::gate`]), and when to stop.
struct Shared {
    running: RwLock<Running>,
    gate: Arc<tokio::sync::RwLock<()>>,
    stop: AtomicBool,
}

impl Shared {
    /// Makes `running` what the background heartbeats report once every one built on
    /// the old state has been answered, so that a host's later heartbeats (background or
    /// the rollout's own rounds, sent after this returns) never reach ternd before one
    /// that reports a version the host has left.
    fn publish(&self, running: &Running) {
        let _writing = self.gate.blocking_write();
        *self.running.write().unwrap_or_else(PoisonError::into_inner) = running.clone();
    }
}

/// The background heartbeats (see [`Fleet::background`]).
struct Background {
    handles: Vec<std::thread::JoinHandle<anyhow::Result<load::Outcome>>>,
    shared: Arc<Shared>,
    start: Instant,
}

impl Background {
    /// Stops the heartbeats and collects what they measured; `elapsed` is the time
    /// from their start until the stop (the rate they were offered over).
    fn finish(self) -> anyhow::Result<load::Outcome> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let elapsed = self.start.elapsed();
        let mut all = load::Outcome::default();
        for h in self.handles {
            let o = h
                .join()
                .map_err(|_| anyhow::anyhow!("a background heartbeat thread panicked"))?
                .context("the background heartbeats")?;
            all.absorb(o);
        }
        all.latencies_us.sort_unstable();
        all.elapsed = elapsed;
        Ok(all)
    }
}

fn mb(bytes: &[u64]) -> Vec<u64> {
    bytes.iter().map(|b| b / 1_000_000).collect()
}

/// Whether a find answer tells the host to update to 1.1.0.
fn told(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| {
        v["auto_update"]["agent_auto_update"] == true
            && v["auto_update"]["agent_version"] == "1.1.0"
    })
}

/// One long-polling host (see [`Fleet::long_polls`]): when it was told to update.
async fn long_poll(
    addr: SocketAddr,
    path: String,
    gate: Arc<Semaphore>,
    deadline: Instant,
) -> anyhow::Result<Instant> {
    let permit = gate.acquire_owned().await?;
    let mut s = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    send_get(&mut s, &path).await?;
    let (status, mut etag, body) = read_answer(&mut s, &mut buf).await?;
    ensure!(status == 200, "find: {status}");
    ensure!(!told(&body), "told to update before its group started");
    let mut permit = Some(permit);
    loop {
        let held = format!("{path}&wait=50&seen={}", etag.replace('"', "%22"));
        send_get(&mut s, &held).await?;
        drop(permit.take());
        let (status, e, body) = read_answer(&mut s, &mut buf).await?;
        ensure!(status == 200, "long-poll find: {status}");
        if told(&body) {
            return Ok(Instant::now());
        }
        etag = e;
        ensure!(Instant::now() < deadline, "never told to update");
    }
}

async fn send_get(s: &mut TcpStream, path: &str) -> anyhow::Result<()> {
    s.write_all(&load::get(path)).await?;
    Ok(())
}

/// One keep-alive response: status, ETag, body.
async fn read_answer(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> anyhow::Result<(u16, String, Vec<u8>)> {
    let r = load::read_into(s, buf).await?;
    let etag = r.header(buf, "etag").unwrap_or_default();
    Ok((r.status, etag, buf[r.head_end..r.head_end + r.len].to_vec()))
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
    /// CPU seconds of every member, summed: what etcd takes of the machine's cores.
    cpu_secs: f64,
}

fn counters(etcd: &Cluster) -> anyhow::Result<EtcdCounters> {
    let (mut client_bytes, mut cpu_secs) = (0.0, 0.0);
    for m in 0..etcd.clients.len() {
        client_bytes += etcd.metric(m, "etcd_network_client_grpc_received_bytes_total")?;
        cpu_secs += etcd.metric(m, "process_cpu_seconds_total")?;
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
        cpu_secs,
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
        "cpu_secs": b.cpu_secs - a.cpu_secs,
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
            .args(["--leader-ttl", "5s"])
            // A canary must have been heard from this long (default 10m); the bench's
            // dev clock moves 2 minutes per step, and the hosts registered at its start.
            .args(["--canary-tenure", "1m"])
            // Every simulated host, long polls included, comes from 127.0.0.1.
            .args(["--max-connections-per-ip", "100000"]);
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
        round_rate: None,
    })
}

pub fn run(opts: &Opts) -> anyhow::Result<Value> {
    let n: u64 = match std::env::var("TERN_BENCH_SCALE_HOSTS") {
        Ok(v) => v.parse().context("TERN_BENCH_SCALE_HOSTS")?,
        Err(_) if opts.quick => 3_000,
        Err(_) => 100_000,
    };
    // Each host heartbeats once per period in the open-loop phase: 30 s as the issue
    // asks; `--quick` shrinks it to 3 s to stay a smoke test.
    let period = Duration::from_secs(if opts.quick { 3 } else { 30 });
    let tmp = tempfile::tempdir()?;
    let etcd = Cluster::start(&tmp.path().join("etcd"), 3, "the scale benchmark")?;
    let mut f = start_replicas(&opts.ternd, tmp.path(), &etcd)
        .context("starting ternd on etcd (is it built with --features tern-server/etcd?)")?;
    f.n = n;
    f.conns = opts.connections.max(REPLICAS);
    f.round_rate = match std::env::var("TERN_BENCH_SCALE_ROUND_RATE") {
        Ok(v) => Some(v.parse().context("TERN_BENCH_SCALE_ROUND_RATE")?).filter(|r: &f64| *r > 0.0),
        Err(_) => None,
    };
    let leader = f.leader()?;
    f.call(leader, "POST", "/v1/resources/config", config().as_bytes())?;
    f.call(leader, "POST", "/v1/resources/version", VERSION.as_bytes())?;
    f.reconcile()?;
    std::thread::sleep(Duration::from_millis(300));
    let me = std::process::id();
    let bench_cpu0 = procs::cpu_time(me)?;
    let t_run = Instant::now();
    let rss0 = f.rss()?;
    let cpu0 = f.cpu()?;
    let e0 = counters(&etcd)?;
    eprintln!("scale: {n} hosts, 3 replicas (leader r{leader}), 3 etcd members");
    let mut running = Running::default();

    // Register every host once.
    let reg = f.heartbeats(None, |_| true, &running)?;
    let wall = reg.elapsed;
    if reg.ok != n {
        bail!("{} of {n} registering heartbeats accepted", reg.ok);
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
    let extra_rounds = f.drain(&etcd, &running)?;
    let drain_secs = t.elapsed().as_secs_f64();
    let e2 = counters(&etcd)?;
    let rss_drained = f.rss()?;
    let cpu_drained = f.cpu()?;
    eprintln!(
        "scale: histories drained in {drain_secs:.1} s ({extra_rounds} extra rounds); etcd lease grants {} for {n} hosts",
        e2.lease_grants - e1.lease_grants
    );

    // A steady round, closed loop: every host reports the same state again.
    let wall_steady = f.heartbeats(None, |_| true, &running)?.elapsed;
    let cpu_steady = f.cpu()?;
    let e3 = counters(&etcd)?;
    let steady_ms_per_1k: Vec<f64> = (0..REPLICAS)
        .map(|r| {
            let hosts = n as f64 / REPLICAS as f64;
            cpu_steady[r].saturating_sub(cpu_drained[r]).as_secs_f64() * 1000.0 / (hosts / 1000.0)
        })
        .collect();

    // Open loop: every host once in `period`, spread evenly (hosts / period per second,
    // each replica a third), latency from when each heartbeat was due.
    let rate = n as f64 / period.as_secs_f64();
    let gen0 = procs::cpu_time(me)?;
    let ol = f.heartbeats(Some(rate), |_| true, &running)?;
    let gen_cpu = procs::cpu_time(me)?.saturating_sub(gen0).as_secs_f64();
    ensure!(ol.ok == n, "{} of {n} open-loop heartbeats accepted", ol.ok);
    let cpu_ol = f.cpu()?;
    let e4 = counters(&etcd)?;
    let ol_secs = ol.elapsed.as_secs_f64();
    let ol_cores: Vec<f64> = (0..REPLICAS)
        .map(|r| cpu_ol[r].saturating_sub(cpu_steady[r]).as_secs_f64() / ol_secs)
        .collect();
    let ol_grants_per_s = (e4.lease_grants - e3.lease_grants) / ol_secs;
    let open_loop = json!({
        "period_secs": period.as_secs(),
        "offered_hb_per_s": rate.round(),
        "achieved_hb_per_s": (n as f64 / ol_secs).round(),
        "secs": ol_secs,
        "latency_p50_ms": ol.quantile_ms(0.5),
        "latency_p99_ms": ol.quantile_ms(0.99),
        "latency_max_ms": ol.quantile_ms(1.0),
        "ternd_cores": ol_cores,
        "generator_cores": gen_cpu / ol_secs,
        "lease_grants_per_s": ol_grants_per_s,
        "etcd": delta(&e3, &e4, n),
    });
    eprintln!(
        "scale: open loop at {rate:.0} hb/s for {ol_secs:.1} s: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; ternd cores {:.2} / {:.2} / {:.2}, generator {:.2}; etcd lease grants {:.2}/s",
        ol.quantile_ms(0.5),
        ol.quantile_ms(0.99),
        ol.quantile_ms(1.0),
        ol_cores[0],
        ol_cores[1],
        ol_cores[2],
        gen_cpu / ol_secs,
        ol_grants_per_s
    );

    // The rollout, every host heartbeating once per `period` in the background
    // throughout, on the version it runs at that moment.
    let shared = Arc::new(Shared {
        running: RwLock::new(running.clone()),
        gate: Arc::default(),
        stop: AtomicBool::new(false),
    });
    let bench_cpu_rollout0 = procs::cpu_time(me)?;
    let bg = f.background(period, &shared);
    let mut reconciles = Vec::new();
    let mut groups = serde_json::Map::new();
    for (k, group) in GROUPS.into_iter().enumerate() {
        let e_before = counters(&etcd)?;
        let hosts = (0..n).filter(|i| fleet::group_of(*i) == group).count() as u64;
        let polling = pollers(n, group);
        let (rss_before, conns_before) = f.memory()?;
        let lp = f.long_polls(group, &polling)?;
        let (rss_held, conns_held) = f.memory()?;
        let via = (leader + 1 + k) % REPLICAS;
        let body = json!({"groups": [group]}).to_string();
        let t0 = Instant::now();
        f.call(via, "POST", "/v1/agents/start-update", body.as_bytes())?;
        let mut canary = Value::Null;
        if CANARIES[k] > 0 {
            f.wait_state(group, &["canary"])?;
            let in_canary = t0.elapsed();
            // The leader picks at its next reconcile: at once here; in a deployment
            // within --active-report-period (10 s) or --report-after-change (2 s).
            let mut picked = Vec::new();
            for _ in 0..5 {
                reconciles.push(f.reconcile()?);
                // Asked of the replica leading now: with a 5 s leader TTL on a loaded
                // machine, leadership may have moved since the start.
                picked = f.canaries(f.leader()?, group)?;
                if !picked.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            ensure!(
                picked.len() == CANARIES[k],
                "{group}: {} canaries picked, not {}: {}",
                picked.len(),
                CANARIES[k],
                f.call(f.leader()?, "GET", "/v1/resources/rollout", b"")?
            );
            let picked_at = t0.elapsed();
            let mut last = t0;
            for &i in &picked {
                last = last.max(f.until_told(i, group)?);
            }
            let canaries_told = last.duration_since(t0);
            // The canaries update and report healthy on the target; the non-leaders'
            // reports carry them to the leader, which moves the group on.
            running.canaries.extend(picked.iter().copied());
            shared.publish(&running);
            let set: Arc<HashSet<u64>> = Arc::new(picked.iter().copied().collect());
            f.heartbeats(f.round_rate, move |i| set.contains(&i), &running)?;
            let mut active = false;
            for _ in 0..5 {
                reconciles.push(f.reconcile()?);
                if f.group_state(group)? == "active" {
                    active = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            ensure!(
                active,
                "{group} never left its canaries: {}",
                f.call(f.leader()?, "GET", "/v1/resources/rollout", b"")?
            );
            canary = json!({
                "canaries": picked,
                "replicas_show_canary_ms": in_canary.as_secs_f64() * 1000.0,
                "picked_ms": picked_at.as_secs_f64() * 1000.0,
                "canaries_told_ms": canaries_told.as_secs_f64() * 1000.0,
            });
        }
        f.wait_state(group, &["active"])?;
        let active_at = t0.elapsed();
        if let Some(c) = canary.as_object_mut() {
            let told = c["canaries_told_ms"].as_f64().unwrap_or(0.0);
            c.insert(
                "canary_phase_ms".into(),
                json!(active_at.as_secs_f64() * 1000.0 - told),
            );
        }
        // RSS only, from /proc: a /metrics scrape walks the inventory and would delay
        // the find round, whose answers are timed from start-update.
        let rss_active = f.rss()?;
        // Every host of the group asks find once, at its replica; each answer is read
        // in full and must say update to 1.1.0, and when each did is counted.
        let g = group;
        let find = f.each_host(
            f.round_rate,
            move |i| fleet::group_of(i) == g,
            move |i| {
                Some(load::get(&format!(
                    "/v1/webapi/find?group={g}&updater_id={}",
                    fleet::updater_id(i)
                )))
            },
            Some(told),
        )?;
        let find_wall = find.elapsed;
        ensure!(
            find.ok == hosts,
            "{} of {hosts} find answers of {group} were 2xx",
            find.ok
        );
        ensure!(
            find.passed == hosts,
            "{} of {hosts} find answers of {group} did not say update to 1.1.0",
            hosts - find.passed
        );
        let mut arrived = find.passed_at.clone();
        arrived.sort_unstable();
        // The 0.99 N-th answer to arrive (N the group's hosts), from start-update.
        let k = ((hosts as f64 * 0.99).ceil() as usize).clamp(1, arrived.len()) - 1;
        let told_99 = arrived[k].saturating_duration_since(t0);
        let told_all = arrived[arrived.len() - 1].saturating_duration_since(t0);
        // The estimate the bench made before it counted, kept to compare.
        let told_99_estimate = active_at + find_wall.mul_f64(0.99);
        let lp_ms = lp.told_ms(t0)?;
        let lp_q = |q: f64| quantile(lp_ms.clone(), q);
        let (rss_found, conns_found) = f.memory()?;
        // The group's hosts update and report; reconcile until it is done.
        running.groups.push(group);
        shared.publish(&running);
        let hb_wall = f
            .heartbeats(f.round_rate, move |i| fleet::group_of(i) == g, &running)?
            .elapsed;
        let mut done = false;
        for _ in 0..10 {
            f.advance(f.leader()?, &running)?;
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
        let (rss_done, conns_done) = f.memory()?;
        eprintln!(
            "scale: {group} ({hosts} hosts): active on every replica after {:.0} ms{}, 99 % told after {:.0} ms counted ({:.0} ms by the old estimate, all {:.0} ms); {} long polls told: p50 {:.0} ms, p99 {:.0} ms; heartbeats on 1.1.0 {:.1} s; RSS MB (open connections) before long polls {:?} ({:?}), held {:?} ({:?}), active {:?}, after find {:?} ({:?}), done {:?} ({:?})",
            active_at.as_secs_f64() * 1000.0,
            if canary.is_null() {
                String::new()
            } else {
                format!(
                    " (canaries told after {:.0} ms, canary phase {:.0} ms)",
                    canary["canaries_told_ms"].as_f64().unwrap_or(f64::NAN),
                    canary["canary_phase_ms"].as_f64().unwrap_or(f64::NAN)
                )
            },
            told_99.as_secs_f64() * 1000.0,
            told_99_estimate.as_secs_f64() * 1000.0,
            told_all.as_secs_f64() * 1000.0,
            lp_ms.len(),
            lp_q(0.5),
            lp_q(0.99),
            hb_wall.as_secs_f64(),
            mb(&rss_before),
            conns_before,
            mb(&rss_held),
            conns_held,
            mb(&rss_active),
            mb(&rss_found),
            conns_found,
            mb(&rss_done),
            conns_done,
        );
        groups.insert(
            group.to_string(),
            json!({
                "hosts": hosts,
                "canary": canary,
                "replicas_show_active_ms": active_at.as_secs_f64() * 1000.0,
                "find_round_ms": find_wall.as_secs_f64() * 1000.0,
                "find_answers": find.ok,
                "find_told": find.passed,
                "told_99pct_ms": told_99.as_secs_f64() * 1000.0,
                "told_all_ms": told_all.as_secs_f64() * 1000.0,
                "told_99pct_estimate_ms": told_99_estimate.as_secs_f64() * 1000.0,
                "rss": {
                    "before_long_polls": rss_before,
                    "long_polls_held": rss_held,
                    "active": rss_active,
                    "after_find_round": rss_found,
                    "done": rss_done,
                },
                "open_connections": {
                    "before_long_polls": conns_before,
                    "long_polls_held": conns_held,
                    "after_find_round": conns_found,
                    "done": conns_done,
                },
                "long_poll": {
                    "hosts": lp_ms.len(),
                    "told_p50_ms": lp_q(0.5),
                    "told_99pct_ms": lp_q(0.99),
                    "told_max_ms": lp_q(1.0),
                },
                "etcd": delta(&e_before, &e_after, hosts),
            }),
        );
    }
    let bg = bg.finish()?;
    let e_end = counters(&etcd)?;
    let bench_cpu_rollout = procs::cpu_time(me)?
        .saturating_sub(bench_cpu_rollout0)
        .as_secs_f64();
    let cpu_end = f.cpu()?;
    let rollout_secs = bg.elapsed.as_secs_f64();
    let rollout_cores: Vec<f64> = (0..REPLICAS)
        .map(|r| cpu_end[r].saturating_sub(cpu_ol[r]).as_secs_f64() / rollout_secs)
        .collect();
    ensure!(
        bg.bad_status == 0,
        "{} of {} background heartbeats during the rollout were not 2xx",
        bg.bad_status,
        bg.bad_status + bg.ok
    );
    let background = json!({
        "period_secs": period.as_secs(),
        "connections_per_replica": BACKGROUND_CONNS,
        "rollout_round_rate": f.round_rate,
        "secs": rollout_secs,
        "sent": bg.ok,
        "bad_status": bg.bad_status,
        "offered_hb_per_s": rate.round(),
        "achieved_hb_per_s": (bg.ok as f64 / rollout_secs).round(),
        "latency_p50_ms": bg.quantile_ms(0.5),
        "latency_p99_ms": bg.quantile_ms(0.99),
        "latency_max_ms": bg.quantile_ms(1.0),
        "ternd_cores": rollout_cores,
        // Where the machine's other cores went meanwhile: three etcd members, and the
        // bench (background heartbeats, the rollout's rounds, long polls).
        "etcd_cores": (e_end.cpu_secs - e4.cpu_secs) / rollout_secs,
        "generator_cores": bench_cpu_rollout / rollout_secs,
    });
    eprintln!(
        "scale: background heartbeats through the rollout ({rollout_secs:.1} s): offered {rate:.0} hb/s, achieved {:.0}, p50 {:.2} ms, p99 {:.1} ms, max {:.0} ms, {} not 2xx; ternd cores {:.2} / {:.2} / {:.2}, etcd {:.2}, the bench {:.2}",
        bg.ok as f64 / rollout_secs,
        bg.quantile_ms(0.5),
        bg.quantile_ms(0.99),
        bg.quantile_ms(1.0),
        bg.bad_status,
        rollout_cores[0],
        rollout_cores[1],
        rollout_cores[2],
        (e_end.cpu_secs - e4.cpu_secs) / rollout_secs,
        bench_cpu_rollout / rollout_secs,
    );
    let rss_end = f.rss()?;
    let run_secs = t_run.elapsed().as_secs_f64();
    // ternd gives a burst's freed heap back once the burst is over, at most once a
    // minute: the rollout's steady state is read once its history writes have drained
    // and every replica has trimmed since, or 75 s after (then nothing was left to
    // trim). Not in a smoke run.
    let (rss_settled, trimmed) = if opts.quick {
        (Vec::new(), Vec::new())
    } else {
        f.settle()?
    };
    if !opts.quick {
        eprintln!(
            "scale: RSS MB at the end {:?}, settled {:?} (trimmed since the end: {trimmed:?})",
            mb(&rss_end),
            mb(&rss_settled)
        );
    }
    let bench_cpu = procs::cpu_time(me)?
        .saturating_sub(bench_cpu0)
        .as_secs_f64();
    let mut keys = serde_json::Map::new();
    for (kind, prefix) in [
        ("all", "/tern/kv/"),
        ("history", HISTORY_KEYS),
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
                "rss_settled": rss_settled.get(r),
                "trimmed_after_end": trimmed.get(r),
                "rss_bytes_per_host": (rss_drained[r].saturating_sub(rss0[r]) as f64 / (n as f64 / REPLICAS as f64)).round(),
                "cpu_register_secs": secs(cpu0[r], cpu_reg[r]),
                "cpu_drain_secs": secs(cpu_reg[r], cpu_drained[r]),
                "cpu_steady_ms_per_1k": steady_ms_per_1k[r],
                "open_loop_cores": ol_cores[r],
                "cpu_rollout_secs": secs(cpu_ol[r], cpu_end[r]),
                "rollout_cores": rollout_cores[r],
                "cpu_total_secs": secs(cpu0[r], cpu_end[r]),
            })
        })
        .collect();
    let history = delta(&e1, &e2, n);
    eprintln!(
        "scale: history first deploy: {} lease grants, {} puts in {} txns for {n} hosts; etcd DB {} MiB at the end; leader reconcile median {:.1} ms; {:.2} lease grants/s over the run ({run_secs:.0} s); the bench used {bench_cpu:.1} s CPU",
        history["lease_grants"],
        history["puts"],
        history["txns"],
        (e_end.db_bytes / 1048576.0).round(),
        median(reconcile_ms.clone()),
        (e_end.lease_grants - e0.lease_grants) / run_secs
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
        "open_loop": open_loop,
        "background_heartbeats": background,
        "history_drain_secs": drain_secs,
        "history_extra_rounds": extra_rounds,
        "etcd_register": delta(&e0, &e1, n),
        "etcd_history_first_deploy": history,
        "etcd_steady_round": delta(&e2, &e3, n),
        "etcd_whole_run": delta(&e0, &e_end, n),
        "lease_grants_per_s_run": (e_end.lease_grants - e0.lease_grants) / run_secs,
        "run_secs": run_secs,
        "bench_cpu_secs": bench_cpu,
        "etcd_db_bytes_end": e_end.db_bytes,
        "etcd_keys_end": keys,
        "groups": groups,
        "leader_reconcile_ms": reconcile_ms,
        "leader_reconcile_median_ms": median(reconcile_ms.clone()),
        "per_replica": per_replica,
        "loadavg": procs::loadavg(),
    }))
}
