#![cfg(feature = "etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Several `ternd` replicas on a real 3-member etcd cluster, with the shared dev clock and
//! simulated agents heartbeating to different replicas: a rollout over three groups
//! (canaries connected to a non-leader), the leader killed mid-rollout, an etcd member
//! lost, all of etcd down and back, and a replica paused past its lease (fencing).
//!
//! Needs `etcd` (Debian: etcd-server); run with `--features tern-server/etcd`. Every
//! process is started here and killed on drop (also when a test panics).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{T0, Ternd, version_yaml};
use serde_json::{Value, json};
use tern_testing::etcd::EtcdCluster;

/// The leader lease TTL the replicas run with.
const TTL: Duration = Duration::from_secs(3);

/// halt-on-error over dev (10h), staging (12h, 2 canaries), prod (14h), every day.
fn config() -> String {
    tern_core::fixtures::dev_staging_prod(2)
}

use tern_testing::eventually_within as eventually;

/// One host: which replica it heartbeats to, its group and version; with `updater`,
/// its tern-update heartbeats the `updater` product too, at the same version.
#[derive(Clone, Debug)]
struct Host {
    id: String,
    group: &'static str,
    version: &'static str,
    replica: usize,
    updater: bool,
}

/// A 3-member etcd cluster and three ternd replicas on it.
struct Ha {
    rt: tokio::runtime::Runtime,
    etcd: EtcdCluster,
    _tmp: tempfile::TempDir,
    dirs: Vec<std::path::PathBuf>,
    replicas: Vec<Option<Ternd>>,
    token: String,
    agent: String,
    hosts: Vec<Host>,
    /// Flags every replica runs with besides the harness's own.
    extra: Vec<String>,
}

impl Ha {
    /// Starts etcd, then the three replicas at once on the fresh store.
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`Ha::start`], every replica with `extra` flags too.
    fn start_with(extra: &[&str]) -> Self {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let etcd = rt.block_on(EtcdCluster::start(3));
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = (0..3).map(|i| tmp.path().join(format!("r{i}"))).collect();
        let backend = format!("etcd:{}", etcd.endpoints().join(","));
        let starting: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(i, dir)| {
                let (dir, backend, extra) = (dir.clone(), backend.clone(), extra.clone());
                std::thread::spawn(move || Self::spawn(&dir, &backend, i, &extra))
            })
            .collect();
        let mut replicas: Vec<Option<Ternd>> = starting
            .into_iter()
            .map(|h| Some(h.join().unwrap()))
            .collect();
        // Exactly one replica initialised the store and holds the operator token.
        let tokens: Vec<String> = replicas
            .iter()
            .map(|r| r.as_ref().unwrap().token.clone())
            .filter(|t| !t.is_empty())
            .collect();
        assert_eq!(
            tokens.len(),
            1,
            "one operator token, written by one replica"
        );
        let token = tokens[0].clone();
        for r in replicas.iter_mut().flatten() {
            r.token = token.clone();
        }
        let mut ha = Ha {
            rt,
            etcd,
            _tmp: tmp,
            dirs,
            replicas,
            token,
            agent: String::new(),
            hosts: Vec::new(),
            extra,
        };
        ha.agent = ha.any().new_token("agent");
        ha
    }

    fn spawn(dir: &std::path::Path, backend: &str, i: usize, extra: &[String]) -> Ternd {
        let id = format!("r{i}");
        let mut args = vec![
            "--backend",
            backend,
            "--replica-id",
            &id,
            "--dev-clock",
            T0,
            "--leader-ttl",
            "3s",
        ];
        args.extend(extra.iter().map(String::as_str));
        Ternd::start(dir, &args)
    }

    /// Restarts replica `i` on its data dir (it keeps its id).
    fn restart(&mut self, i: usize) {
        let backend = format!("etcd:{}", self.etcd.endpoints().join(","));
        let mut t = Self::spawn(&self.dirs[i], &backend, i, &self.extra);
        t.token = self.token.clone();
        self.replicas[i] = Some(t);
    }

    fn r(&self, i: usize) -> &Ternd {
        self.replicas[i].as_ref().expect("replica is down")
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| self.replicas[*i].is_some())
            .collect()
    }

    fn any(&self) -> &Ternd {
        self.r(self.live()[0])
    }

    fn metrics(&self, i: usize) -> String {
        self.r(i).raw("GET", "/metrics", None, None).2
    }

    fn metric(&self, i: usize, line_prefix: &str) -> u64 {
        metric_in(&self.metrics(i), line_prefix)
    }

    /// How much replica `i` has logged: a mark for [`Ha::wait_logged`].
    fn log_mark(&self, i: usize) -> usize {
        std::fs::metadata(self.dirs[i].with_extension("log")).map_or(0, |m| m.len() as usize)
    }

    /// Waits until replica `i` logs, after `mark`, a line holding `needle`.
    fn wait_logged(&self, i: usize, mark: usize, needle: &str) {
        let log = self.dirs[i].with_extension("log");
        eventually(needle, TTL * 3, || {
            let bytes = std::fs::read(&log).unwrap_or_default();
            String::from_utf8_lossy(bytes.get(mark..).unwrap_or_default()).contains(needle)
        });
    }

    fn is_leader(&self, i: usize) -> bool {
        self.metrics(i).contains("\ntern_leader 1\n")
    }

    /// The one live replica holding the lease (waits until exactly one does).
    fn leader(&self, patience: Duration) -> usize {
        let mut found = None;
        eventually("exactly one leader", patience, || {
            let leaders: Vec<usize> = self
                .live()
                .into_iter()
                .filter(|i| self.is_leader(*i))
                .collect();
            found = (leaders.len() == 1).then(|| leaders[0]);
            found.is_some()
        });
        found.unwrap()
    }

    fn heartbeats(&self) {
        for h in &self.hosts {
            self.r(h.replica)
                .heartbeat(&self.agent, &h.id, h.group, h.version);
            if h.updater {
                self.r(h.replica).heartbeat_with(
                    &self.agent,
                    &h.id,
                    h.group,
                    h.version,
                    json!({"product": "updater"}),
                );
            }
        }
    }

    fn set_version(&mut self, pred: impl Fn(&Host) -> bool, version: &'static str) {
        for h in self.hosts.iter_mut().filter(|h| pred(h)) {
            h.version = version;
        }
    }

    /// Moves the shared dev clock on replica `via` and waits until every replica runs at
    /// the new time.
    fn clock(&self, via: usize, body: Value) {
        let live = self.live();
        let via = if live.contains(&via) {
            via
        } else {
            live[via % live.len()]
        };
        let now = self
            .r(via)
            .op("POST", "/v1/dev/clock", Some(&body.to_string()))["now"]
            .as_str()
            .unwrap()
            .to_string();
        eventually(
            "every replica at the shared time",
            Duration::from_secs(10),
            || {
                self.live()
                    .into_iter()
                    .all(|i| self.r(i).op("GET", "/v1/dev/clock", None)["now"] == now.as_str())
            },
        );
    }

    /// The group states every live replica's find snapshot holds (from /metrics).
    fn snapshot_states(&self, i: usize) -> Vec<String> {
        self.metrics(i)
            .lines()
            .filter(|l| l.starts_with("tern_rollout_group_state{"))
            .map(str::to_string)
            .collect()
    }

    /// Waits until every live replica's snapshot shows the stored rollout.
    fn converged(&self) {
        eventually("every snapshot up to date", Duration::from_secs(10), || {
            let states: Vec<_> = self
                .live()
                .iter()
                .map(|i| self.snapshot_states(*i))
                .collect();
            states.windows(2).all(|w| w[0] == w[1])
        });
    }

    /// Heartbeats, every replica writes its report, then the leader reconciles. Returns
    /// the leader's answer.
    ///
    /// The leader can lose its lease between being seen and reconciling (its renewal
    /// missed the local deadline while etcd elected a new member leader, on a loaded
    /// machine): it then answers `leader: false` and writes nothing, and the round is
    /// tried again with whoever leads next, a few times at most.
    fn round(&self) -> Value {
        self.converged();
        self.heartbeats();
        for attempt in 1..=3 {
            let leader = self.leader(TTL * 3);
            for i in self.live().into_iter().filter(|i| *i != leader) {
                let v = self.r(i).reconcile();
                assert_eq!(v["leader"], false, "replica {i} is not the leader: {v}");
                let msg = v["message"].as_str().unwrap_or_default();
                assert!(
                    msg.contains(&format!("\"r{leader}\""))
                        && msg.contains("holds the leader lease"),
                    "a non-leader names the leader: {v}"
                );
            }
            let v = self.r(leader).reconcile();
            if v["leader"] == true {
                self.converged();
                return v;
            }
            eprintln!("attempt {attempt}: replica {leader} lost its lease before reconciling: {v}");
        }
        panic!("no replica reconciled as the leader in three attempts");
    }

    fn states(&self) -> BTreeMap<String, String> {
        self.any().group_states().into_iter().collect()
    }

    fn state_of(&self, g: &str) -> String {
        self.states()[g].clone()
    }

    /// `group_changed` events counted by replica `i`.
    fn group_changes(&self, i: usize) -> u64 {
        self.metric(i, "tern_reconcile_events_total{event=\"group_changed\"}")
    }
}

fn metric_in(text: &str, line_prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Six hosts per group; staging (the canary group) on `staging_on`, the others spread.
fn fleet(staging_on: usize) -> Vec<Host> {
    let mut hosts = Vec::new();
    for (g, group) in ["dev", "staging", "prod"].into_iter().enumerate() {
        for n in 0..6 {
            hosts.push(Host {
                id: format!("{group}-{n}"),
                group,
                version: "1.0.0",
                replica: if group == "staging" {
                    staging_on
                } else {
                    (g + n) % 3
                },
                updater: false,
            });
        }
    }
    hosts
}

/// Puts the config and version and drives dev to done; staging is next.
fn through_dev(ha: &mut Ha) {
    ha.any().put_resource("config", &config());
    ha.any()
        .put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    let v = ha.round();
    assert_eq!(v["rollout"]["status"]["state"], "unstarted", "{v}");
    ha.clock(1, json!({"set": "2026-11-23T10:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "active");
    ha.set_version(|h| h.group == "dev", "1.1.0");
    ha.clock(2, json!({"advance": "2m"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "done");
}

/// 12:01: staging starts in canary; returns its canaries.
fn staging_canaries(ha: &mut Ha, staging_on: usize) -> Vec<String> {
    ha.clock(0, json!({"set": "2026-11-23T12:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("staging"), "canary");
    let rollout = ha.any().op("GET", "/v1/resources/rollout", None);
    let canaries: Vec<String> = rollout["status"]["groups"][1]["canaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["updater_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(canaries.len(), 2, "{rollout}");
    for c in &canaries {
        assert!(
            c.starts_with("staging-"),
            "canaries come from the group: {c}"
        );
        // Every replica tells the canaries (only) to update.
        for i in ha.live() {
            assert_eq!(ha.r(i).find("staging", c), ("1.1.0".into(), true));
        }
    }
    let other = (0..6)
        .map(|n| format!("staging-{n}"))
        .find(|id| !canaries.contains(id))
        .unwrap();
    assert_eq!(
        ha.r(staging_on).find("staging", &other),
        ("1.0.0".into(), false)
    );
    canaries
}

/// Canaries update → staging active → staging done → prod → done.
fn finish(ha: &mut Ha, canaries: &[String]) {
    let c = canaries.to_vec();
    ha.set_version(|h| c.contains(&h.id), "1.1.0");
    ha.clock(0, json!({"advance": "2m"}));
    ha.round();
    assert_eq!(
        ha.state_of("staging"),
        "active",
        "the canaries' replica reported them updated"
    );
    ha.set_version(|h| h.group == "staging", "1.1.0");
    ha.clock(1, json!({"advance": "2m"}));
    ha.round();
    assert_eq!(ha.state_of("staging"), "done");
    ha.clock(2, json!({"set": "2026-11-23T14:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("prod"), "active");
    ha.set_version(|h| h.group == "prod", "1.1.0");
    ha.clock(0, json!({"advance": "2m"}));
    let v = ha.round();
    assert_eq!(v["rollout"]["status"]["state"], "done", "{v}");
    for i in ha.live() {
        assert_eq!(ha.r(i).find("prod", "prod-0"), ("1.1.0".into(), true));
    }
}

/// Transitions of a full rollout: dev unstarted→active→done (2), staging
/// unstarted→canary→active→done (3), prod (2).
const TRANSITIONS: u64 = 7;

/// The updater product's rollout on the same replicas, beside the agent's: its own
/// reports (staging's hosts, and so its canaries, on a non-leader), reconciled by the
/// leader, served alike by every replica.
#[test]
fn a_rollout_over_three_groups_completes_with_canaries_on_a_non_leader() {
    let mut ha = Ha::start();
    let leader = ha.leader(TTL * 3);
    let staging_on = (leader + 1) % 3;
    ha.hosts = fleet(staging_on);
    for h in &mut ha.hosts {
        h.updater = true;
    }
    // The shared config first: a rollout is made from the config of its time.
    ha.any().put_resource("config", &config());
    ha.r(staging_on).op(
        "POST",
        "/v1/agents/new-rollout?product=updater",
        Some(r#"{"version": "1.1.0", "current_version": "1.0.0"}"#),
    );
    through_dev(&mut ha);
    let canaries = staging_canaries(&mut ha, staging_on);
    // The leader has none of staging's hosts: the canaries came from staging_on's report.
    let inv = ha.r(leader).op("GET", "/v1/inventory", None);
    assert!(
        !inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["group"] == "staging"),
        "{inv}"
    );
    let reports = ha.any().op("GET", "/v1/resources/reports", None);
    assert_eq!(
        reports.as_array().unwrap().len(),
        3,
        "one report per replica: {reports}"
    );
    let reports = ha
        .any()
        .op("GET", "/v1/resources/reports?product=updater", None);
    assert_eq!(reports.as_array().unwrap().len(), 3, "{reports}");
    let updater = ha
        .any()
        .op("GET", "/v1/resources/rollout?product=updater", None);
    assert_eq!(updater["status"]["groups"][0]["state"], "done", "{updater}");
    assert_eq!(
        updater["status"]["groups"][1]["state"], "canary",
        "{updater}"
    );
    let updater_canaries: Vec<String> = updater["status"]["groups"][1]["canaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["updater_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(updater_canaries.len(), 2, "{updater}");
    for c in &updater_canaries {
        for i in ha.live() {
            let (s, v) = ha.r(i).call(
                "GET",
                &format!("/v1/webapi/find?group=staging&updater_id={c}&product=updater"),
                None,
                None,
            );
            assert_eq!(s, 200);
            assert_eq!(
                v["auto_update"]["agent_auto_update"], true,
                "replica {i}: {v}"
            );
        }
    }
    finish(&mut ha, &canaries);
    // The updater's canaries may be other hosts than the agent's: it may take a few
    // more rounds (every host runs 1.1.0 by now) to finish.
    for _ in 0..6 {
        let r = ha
            .any()
            .op("GET", "/v1/resources/rollout?product=updater", None);
        if r["status"]["state"] == "done" {
            break;
        }
        ha.clock(1, json!({"advance": "1m"}));
        ha.round();
    }
    let r = ha
        .any()
        .op("GET", "/v1/resources/rollout?product=updater", None);
    assert_eq!(r["status"]["state"], "done", "{r}");
    ha.converged();
    // One leader did everything, once: the agent's transitions and the updater's.
    let total: u64 = ha.live().iter().map(|i| ha.group_changes(*i)).sum();
    assert_eq!(total, 2 * TRANSITIONS);
    assert_eq!(ha.group_changes(leader), 2 * TRANSITIONS);
}

#[test]
fn the_leader_killed_mid_rollout_is_replaced_within_the_lease_ttl() {
    let mut ha = Ha::start();
    let first = ha.leader(TTL * 3);
    let staging_on = (first + 1) % 3;
    ha.hosts = fleet(staging_on);
    through_dev(&mut ha);
    let canaries = staging_canaries(&mut ha, staging_on);
    let before = ha.group_changes(first);
    let rollout_before = ha.any().op("GET", "/v1/resources/rollout", None);

    // kill -9 the leader with staging in canary.
    ha.replicas[first].as_mut().unwrap().kill9();
    ha.replicas[first] = None;
    let killed = Instant::now();
    let next = ha.leader(TTL * 3);
    let took = killed.elapsed();
    assert_ne!(next, first);
    assert!(
        took <= TTL + Duration::from_secs(2),
        "a new leader within the lease TTL ({TTL:?}) plus the campaign poll: took {took:?}"
    );
    // find keeps answering from the survivors, as before.
    for i in ha.live() {
        assert_eq!(
            ha.r(i).find("staging", &canaries[0]),
            ("1.1.0".into(), true)
        );
        assert_eq!(ha.r(i).find("dev", "dev-0"), ("1.1.0".into(), true));
    }
    // Nothing changed hands but the lease: the rollout is as the old leader left it.
    let rollout_after = ha.any().op("GET", "/v1/resources/rollout", None);
    assert_eq!(rollout_before["status"], rollout_after["status"]);
    // The hosts of the dead replica reconnect to the survivors.
    let survivors = ha.live();
    for (n, h) in ha.hosts.iter_mut().enumerate() {
        if h.replica == first {
            h.replica = survivors[n % survivors.len()];
        }
    }
    ha.clock(next, json!({"advance": "1m"}));
    finish(&mut ha, &canaries);
    // Every transition happened exactly once: the dead leader's before the kill, the
    // rest on the new leader.
    let after: u64 = ha.live().iter().map(|i| ha.group_changes(*i)).sum();
    assert_eq!(
        before + after,
        TRANSITIONS,
        "before {before}, after {after}"
    );
    let rollout = ha.any().op("GET", "/v1/resources/rollout", None);
    for g in rollout["status"]["groups"].as_array().unwrap() {
        assert_eq!(g["state"], "done", "{g}");
    }
    let ids = |r: &Value| -> Vec<String> {
        r["status"]["groups"][1]["canaries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["updater_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ids(&rollout),
        ids(&rollout_before),
        "the canaries were not picked again"
    );

    // The killed replica comes back as a follower and serves the same answers.
    ha.restart(first);
    ha.converged();
    assert_eq!(ha.r(first).find("prod", "prod-1"), ("1.1.0".into(), true));
    assert_eq!(ha.leader(TTL * 3), next);
}

#[test]
fn one_etcd_member_killed_service_continues() {
    let mut ha = Ha::start();
    let leader = ha.leader(TTL * 3);
    ha.hosts = fleet((leader + 1) % 3);
    ha.any().put_resource("config", &config());
    ha.any()
        .put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    ha.round();
    ha.etcd.kill(0);
    // find never needs the store.
    for i in ha.live() {
        assert_eq!(ha.r(i).find("dev", "dev-3"), ("1.0.0".into(), false));
    }
    // If the killed member led the etcd cluster, requests fail (503) until the others
    // elect a leader (about a second; longer on a loaded machine): clients retry.
    eventually(
        "the store answers without the member",
        Duration::from_secs(20),
        || {
            ha.live().iter().all(|i| {
                let t = ha.r(*i);
                t.call("GET", "/v1/resources/version", Some(&t.token), None)
                    .0
                    == 200
            })
        },
    );
    // Admin writes, heartbeats, reports, reconciles and find all go on.
    ha.clock(1, json!({"set": "2026-11-23T10:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "active");
    for i in ha.live() {
        assert_eq!(ha.r(i).find("dev", "dev-3"), ("1.1.0".into(), true));
    }
    let v = ha.r(2).op("POST", "/v1/agents/suspend", None);
    assert_eq!(v["mode"], "suspended");
    eventually(
        "every replica serves the suspension",
        Duration::from_secs(10),
        || {
            ha.live()
                .iter()
                .all(|i| ha.r(*i).find("dev", "dev-3") == ("1.0.0".into(), false))
        },
    );
    ha.r(0).op("POST", "/v1/agents/resume", None);
    ha.set_version(|h| h.group == "dev", "1.1.0");
    ha.clock(0, json!({"advance": "2m"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "done");
    // The member comes back and catches up.
    ha.rt.block_on(ha.etcd.restart(0));
    ha.round();
}

#[test]
fn all_of_etcd_down_find_serves_the_snapshot_and_everything_resumes() {
    let mut ha = Ha::start();
    let leader = ha.leader(TTL * 3);
    ha.hosts = fleet((leader + 1) % 3);
    ha.any().put_resource("config", &config());
    ha.any()
        .put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    ha.round();
    ha.clock(1, json!({"set": "2026-11-23T10:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "active");
    // Every replica has checked the operator token (cached for when the store is down).
    for i in ha.live() {
        ha.r(i).op("GET", "/v1/inventory", None);
    }

    for m in 0..3 {
        ha.etcd.kill(m);
    }
    for i in ha.live() {
        let t = ha.r(i);
        // find answers from the last snapshot.
        assert_eq!(t.find("dev", "dev-0"), ("1.1.0".into(), true));
        assert_eq!(t.find("staging", "staging-0"), ("1.0.0".into(), false));
        // Admin writes fail with a clear 503.
        let started = Instant::now();
        let (s, v) = t.call("POST", "/v1/agents/suspend", Some(&t.token), None);
        assert_eq!(s, 503, "{v}");
        assert_eq!(v["error"]["code"], "store_unavailable", "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the 503 comes within the etcd request timeout"
        );
        let (s, v) = t.call("POST", "/v1/dev/reconcile", Some(&t.token), None);
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (503, Some("store_unavailable")),
            "{v}"
        );
    }
    // Heartbeats are taken into memory, including from a host never seen before.
    ha.heartbeats();
    ha.hosts.push(Host {
        id: "late-0".into(),
        group: "dev",
        version: "1.0.0",
        replica: 2,
        updater: false,
    });
    ha.heartbeats();
    let inv = ha.r(2).op("GET", "/v1/inventory", None);
    assert!(
        inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["updater_id"] == "late-0")
    );
    // The leader cannot renew: it stops leading within its lease TTL.
    eventually("no replica leads without etcd", TTL * 3, || {
        ha.live().iter().all(|i| !ha.is_leader(*i))
    });

    // etcd comes back on its data dirs.
    for m in 0..3 {
        ha.etcd.restart_no_wait(m);
    }
    for m in 0..3 {
        ha.rt.block_on(ha.etcd.wait_ready(m));
    }
    eventually("admin writes work again", Duration::from_secs(30), || {
        let t = ha.r(0);
        t.call("POST", "/v1/agents/suspend", Some(&t.token), None).0 == 200
    });
    eventually(
        "every replica serves the suspension (watches resumed)",
        Duration::from_secs(30),
        || {
            ha.live()
                .iter()
                .all(|i| ha.r(*i).find("dev", "dev-0") == ("1.0.0".into(), false))
        },
    );
    ha.r(1).op("POST", "/v1/agents/resume", None);
    // A leader again; the rollout goes on with the host heard during the outage.
    ha.leader(Duration::from_secs(30));
    ha.set_version(|h| h.group == "dev", "1.1.0");
    ha.clock(0, json!({"advance": "2m"}));
    let v = ha.round();
    assert_eq!(ha.state_of("dev"), "done", "{v}");
    let report = ha.any().op("GET", "/v1/agents/report", None);
    assert_eq!(
        report["total"], 19,
        "18 hosts and the one heard during the outage: {report}"
    );
}

/// What a replica answers hosts following a channel (tern-update's channel mode,
/// Teleport's own updaters) and rollout hosts, from its store or without it.
fn channel_answers(t: &Ternd) -> (String, String, String) {
    let (s, _, body) = t.raw("GET", "/v1/channels/stable/version", None, None);
    let plain = if s == 200 {
        body
    } else {
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        format!("{s} {}", v["error"]["code"].as_str().unwrap_or("?"))
    };
    let teleport = |path: &str| {
        let (s, h, body) = t.raw("GET", path, None, None);
        assert_eq!(s, 200, "{path}: {body}");
        let hold = h
            .get("tern-hold")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        format!("{body} {hold}").trim().to_string()
    };
    (
        plain,
        teleport("/v1/webapi/automaticupgrades/channel/stable/version"),
        teleport("/webapi/automaticupgrades/channel/dev/version"),
    )
}

/// find's hold for a host (empty: it updates now).
fn find_hold(t: &Ternd, group: &str, id: &str) -> String {
    let (s, v) = t.call(
        "GET",
        &format!("/v1/webapi/find?group={group}&updater_id={id}"),
        None,
        None,
    );
    assert_eq!(s, 200, "find: {v}");
    v["auto_update"]["agent_hold"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A replica that has not reached its store for longer than `--store-contact-bound`
/// cannot know whether a freeze was written meanwhile: it tells no host to update,
/// whichever way the host asks (find, a ternd channel, Teleport's channel paths).
/// Before the fix, the channel paths kept answering the channel's version.
#[test]
fn a_replica_cut_off_from_its_store_tells_no_host_to_update_by_any_path() {
    let mut ha = Ha::start_with(&["--store-contact-bound", "4s"]);
    let leader = ha.leader(TTL * 3);
    ha.hosts = fleet((leader + 1) % 3);
    ha.any().put_resource("config", &config());
    ha.any()
        .put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    ha.any().op(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version":"1.1.0","critical":true}"#),
    );
    ha.round();
    ha.clock(1, json!({"set": "2026-11-23T10:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("dev"), "active");
    let updating = (
        "1.1.0".to_string(),
        "v1.1.0".to_string(),
        "v1.1.0".to_string(),
    );
    eventually(
        "every replica serves the channel and the group",
        Duration::from_secs(10),
        || {
            ha.live()
                .iter()
                .all(|i| channel_answers(ha.r(*i)) == updating)
        },
    );
    // Still in contact after more than the bound: the probe loop keeps it. Each replica
    // probes every second (a quarter of the bound, sleeping between probes): six more
    // answered probes span more than the bound.
    let probes: Vec<(usize, u64)> = ha
        .live()
        .into_iter()
        .map(|i| (i, ha.metric(i, "tern_store_probes_total ")))
        .collect();
    eventually(
        "six more store probes on every replica",
        Duration::from_secs(30),
        || {
            probes
                .iter()
                .all(|(i, n)| ha.metric(*i, "tern_store_probes_total ") >= n + 6)
        },
    );
    for i in ha.live() {
        assert_eq!(channel_answers(ha.r(i)), updating, "replica {i}");
        assert_eq!(find_hold(ha.r(i), "dev", "dev-0"), "", "replica {i}");
    }

    for m in 0..3 {
        ha.etcd.kill(m);
    }
    let held = (
        "503 replica_cut_off".to_string(),
        "none replica_cut_off".to_string(),
        "none replica_cut_off".to_string(),
    );
    eventually(
        "every replica cut off holds every host",
        Duration::from_secs(20),
        || {
            ha.live()
                .iter()
                .all(|i| find_hold(ha.r(*i), "dev", "dev-0") == "replica_cut_off")
        },
    );
    for i in ha.live() {
        assert_eq!(channel_answers(ha.r(i)), held, "replica {i}");
    }

    for m in 0..3 {
        ha.etcd.restart_no_wait(m);
    }
    for m in 0..3 {
        ha.rt.block_on(ha.etcd.wait_ready(m));
    }
    eventually(
        "back in contact, every replica answers again",
        Duration::from_secs(30),
        || {
            ha.live().iter().all(|i| {
                channel_answers(ha.r(*i)) == updating
                    && find_hold(ha.r(*i), "dev", "dev-0").is_empty()
            })
        },
    );
}

#[test]
fn a_replica_paused_past_its_lease_does_not_lead_after_resuming() {
    let mut ha = Ha::start();
    let paused = ha.leader(TTL * 3);
    ha.hosts = fleet((paused + 1) % 3);
    through_dev(&mut ha);
    let acquired_before = ha.metric(paused, "tern_leader_acquired_total ");
    let changes_before = ha.group_changes(paused);

    // Partition the leader from etcd (and everyone) by stopping it past its lease.
    ha.r(paused).signal("STOP");
    let others: Vec<usize> = ha.live().into_iter().filter(|i| *i != paused).collect();
    let mut next = None;
    eventually("another replica leads", TTL * 3, || {
        next = others.iter().copied().find(|i| ha.is_leader(*i));
        next.is_some()
    });
    let next = next.unwrap();
    // Another replica took the lease: it ran out in the store, and the paused replica's
    // local deadline, measured from before its last renewal was sent, before that.
    let mark = ha.log_mark(paused);
    ha.r(paused).signal("CONT");

    // At once, it no longer counts itself the leader (its local deadline passed) …
    assert!(!ha.is_leader(paused), "the resumed replica must not lead");
    // … and a reconcile sent to it reconciles nothing and names the leader.
    let v = ha.r(paused).reconcile();
    assert_eq!(v["leader"], false, "{v}");
    assert_eq!(v["leader_replica"], format!("r{next}"), "{v}");
    // Staging's transitions are made by the new leader only.
    ha.clock(paused, json!({"set": "2026-11-23T12:01:00Z"}));
    ha.round();
    assert_eq!(ha.state_of("staging"), "canary");
    // It campaigned since it resumed, and found the lease taken.
    ha.wait_logged(paused, mark, "no longer the reconcile leader");
    assert!(!ha.is_leader(paused));
    assert!(ha.is_leader(next));
    assert_eq!(
        ha.metric(paused, "tern_leader_acquired_total "),
        acquired_before
    );
    assert_eq!(
        ha.group_changes(paused),
        changes_before,
        "the paused replica wrote nothing"
    );
    let total: u64 = ha.live().iter().map(|i| ha.group_changes(*i)).sum();
    assert_eq!(
        total,
        2 + 1,
        "dev's two transitions, then staging to canary, once each"
    );
}
