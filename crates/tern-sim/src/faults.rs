//! The control plane under faults, seeded and replayable (FoundationDB-style
//! deterministic simulation): a small fleet, several ternd replicas with their own
//! memory, a store, a leader, and an operator, all driven through the same core
//! functions ternd and tern-update call (`inventory::replica_report`,
//! `reconcile::reconcile_reports`, `find::answer`, `host_update::on_find`), while a
//! seeded schedule injects faults:
//!
//! - a replica crashes and restarts (its memory of the hosts is gone; it warms up);
//! - a replica's report writes fail, or its reports come late;
//! - the store is unavailable to everyone for a while;
//! - a replica is cut off from the store (it can neither report, lead, nor learn what
//!   changed; past its store-contact bound it tells nobody to update);
//! - some hosts are cut off from some replicas (they heartbeat and ask elsewhere, or
//!   nowhere);
//! - a replica's clock jumps;
//! - hosts vanish and return;
//! - hosts lie within what their own credential allows (a rolled-back host says it
//!   runs the target, healthy);
//! - (always) half the hosts of the label-placed groups present another group, so that
//!   a replica that answers by what it remembers of a host, rather than by the labels
//!   the host sends, answers for the wrong group after a restart or a partition;
//! - and, interleaved, an operator's freezes, suspends and server pins;
//! - and the paths the rollout does not drive ([`paths`], a second seeded stream so
//!   that the faults above stay as they were): hosts enrolling (first installs),
//!   agents turning unhealthy (repairs), `update --now` on a host, directives (some
//!   naming a revoked version), a channel and the hosts that follow it, the updater's
//!   own releases (native or `local-script`), an operator disabling the rollout and
//!   revoking the start version.
//!
//! The target version is broken on some seeds (it fails on every host that installs
//! it). Every run records a [`Trace`] and ends with [`invariant::check`]: a failing
//! seed prints the command that replays it.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use tern_core::controls::Channel;
use tern_core::gate;
use tern_core::host_update::{self, Health};
use tern_core::install::{InstallInstruction, InstallerSpec, InstallerType, Target};
use tern_core::invariant::{self, InstallKind, Trace, TraceEvent, Via, Violation};
use tern_core::inventory::{self, InventoryAgent};
use tern_core::reconcile::{self, Outcome, Resources};
use tern_core::resource::{
    AutoUpdateAgentReport, AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion,
};
use tern_core::revocation::{Minimum, ReleaseLine, Revocation};
use tern_core::version::{Version, normalize};
use tern_core::wire::{Heartbeat, UpdaterStatus};

/// Seconds between two steps of the simulation.
const STEP: i64 = 10;
/// A replica's report period, and the leader's reconcile period.
const REPORT_PERIOD: i64 = 60;
/// A host's updater timer.
const POLL: i64 = 60;
/// A replica forgets a host silent this long (three missed heartbeats).
const SILENCE: i64 = 180;
/// A replica that has not reached its store for this long tells nobody to update
/// (ternd's `--store-contact-bound`).
pub const CUT_OFF_AFTER: i64 = 30;
/// The fleet's freeze, while the store holds one (every product).
static FREEZE: tern_core::api::Freeze = tern_core::api::Freeze {
    reason: String::new(),
    since: jiff::Timestamp::UNIX_EPOCH,
    by: String::new(),
    products: Vec::new(),
};
/// How long a canary candidate must have been heard from.
const CANARY_TENURE: i64 = 600;

/// One run's knobs: the seed decides everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultParams {
    pub seed: u64,
    pub hosts: usize,
    pub replicas: usize,
    /// Simulated hours.
    pub hours: i64,
}

impl Default for FaultParams {
    fn default() -> Self {
        Self {
            seed: 0,
            hosts: 24,
            replicas: 3,
            hours: 72,
        }
    }
}

/// What one run did.
#[derive(Debug)]
pub struct FaultRun {
    pub params: FaultParams,
    /// The target fails on every host on this seed.
    pub broken_target: bool,
    /// The faults and operator actions, in order, for people.
    pub log: Vec<String>,
    pub trace: Trace,
    /// The first violation of the fleet-safety invariant, if any.
    pub violation: Option<Violation>,
    /// Per group, how many hosts ever installed the target on their own.
    pub reached: BTreeMap<String, usize>,
    /// The rollout's state at the end.
    pub final_state: String,
}

impl FaultRun {
    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo xtask sim --faults --seed {} --hosts {} --replicas {} --hours {}",
            self.params.seed, self.params.hosts, self.params.replicas, self.params.hours
        )
    }
}

/// (name, start hour, canaries). staging and prod place their hosts by the label
/// `ring` (`match_labels`, with `host_group: fallback`: the labels win over the group a
/// host presents), so that a host presenting another group counts where its labels
/// say, on every replica, after a restart too.
const GROUPS: [(&str, u8, u8); 3] = [("dev", 10, 1), ("staging", 12, 2), ("prod", 14, 0)];
const PLACED_BY_LABEL: [&str; 2] = ["staging", "prod"];

fn config(mode: &str) -> AutoUpdateConfig {
    let mut text = format!(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: {mode}\n    strategy: halt-on-error\n    host_group: fallback\n    schedules:\n      regular:\n"
    );
    for (name, hour, canaries) in GROUPS {
        text.push_str(&format!(
            "      - name: {name}\n        days: ['*']\n        start_hour: {hour}\n        canary_count: {canaries}\n"
        ));
        if PLACED_BY_LABEL.contains(&name) {
            text.push_str(&format!("        match_labels: {{ring: {name}}}\n"));
        }
    }
    // Built from constants: always valid.
    AutoUpdateConfig::from_text(&text).unwrap_or_default()
}

fn version(target: &str) -> Option<AutoUpdateVersion> {
    AutoUpdateVersion::from_text(&format!(
        "kind: autoupdate_version\nversion: v1\nmetadata:\n  name: autoupdate-version\nspec:\n  agents:\n    start_version: 1.0.0\n    target_version: {target}\n    schedule: regular\n"
    ))
    .ok()
}

struct Host {
    id: String,
    /// The group it belongs in (its labels place it there).
    group: &'static str,
    /// The group it presents: its own, or (for half the hosts of label-placed groups)
    /// the first group, as an image baked with a default group would.
    presented: &'static str,
    labels: BTreeMap<String, String>,
    version: String,
    skip: Option<String>,
    rollback: bool,
    phase: i64,
    /// Replica it prefers (the load balancer's choice while it is reachable).
    home: usize,
    liar: bool,
    online: bool,
    /// Nothing is installed yet (a host enrolling: its first install is to come).
    installed: bool,
    /// Its agent is unhealthy from `ill_from` until `unhealthy_until` (the updater may
    /// repair it).
    unhealthy_until: i64,
    ill_from: i64,
    last_forced: Option<Timestamp>,
    /// A person on the host ran `update --now`; its next run acts on it.
    asked_now: bool,
    /// The updater's own version.
    updater: String,
    /// What it last reported (version, healthy), as the trace holds it.
    reported: Option<(String, Option<bool>)>,
}

struct Replica {
    alive: bool,
    started: i64,
    /// Its hosts: updater id → what it heard.
    inventory: BTreeMap<String, InventoryAgent>,
    /// What it serves find from: the rollout (mode in force), a freeze, the pins.
    rollout: Option<AutoUpdateAgentRollout>,
    frozen: bool,
    pins: BTreeMap<String, Timestamp>,
    /// What it serves the other paths from (minimums, channel, directive).
    paths: Said,
    /// When it last reached the store.
    contact: i64,
    /// The store revision its snapshot is from.
    seen: u64,
    clock_skew: i64,
}

#[derive(Default)]
struct Faults {
    /// Until when, per replica.
    crashed: BTreeMap<usize, i64>,
    write_fails: BTreeMap<usize, i64>,
    late: BTreeMap<usize, i64>,
    cut_off: BTreeMap<usize, i64>,
    store_down_until: i64,
    /// (host, replica) pairs that cannot talk, until.
    host_partitions: BTreeMap<(usize, usize), i64>,
    vanished: BTreeMap<usize, i64>,
}

struct Store {
    /// Bumped at every change of what find serves from (the replicas' watch).
    revision: u64,
    reports: BTreeMap<String, (i64, AutoUpdateAgentReport)>,
    rollout: Option<AutoUpdateAgentRollout>,
    frozen: bool,
    suspended: bool,
    pins: BTreeMap<String, Timestamp>,
    /// What the other paths are told, and the mode switched off.
    paths: Said,
}

struct World {
    p: FaultParams,
    rng: ChaCha8Rng,
    start: Timestamp,
    now: i64,
    hosts: Vec<Host>,
    replicas: Vec<Replica>,
    store: Store,
    faults: Faults,
    enabled: AutoUpdateConfig,
    suspended: AutoUpdateConfig,
    disabled: AutoUpdateConfig,
    /// The paths the rollout does not drive, played from a second seeded stream.
    other: Paths,
    version: Option<AutoUpdateVersion>,
    target: String,
    broken: bool,
    trace: Trace,
    log: Vec<String>,
    reached: BTreeMap<String, BTreeSet<String>>,
    /// The target degrades on this seed: its canaries fall ill as soon as their health
    /// check is over ([`World::degrading`]).
    degrades: bool,
}

fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
}

impl World {
    fn new(p: FaultParams) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
        let broken = chance(&mut rng, 0.6);
        let target = if broken { "1.2.0" } else { "1.1.0" }.to_string();
        let hosts = (0..p.hosts)
            .map(|i| {
                let mut b = [0u8; 16];
                rng.fill_bytes(&mut b);
                let group = GROUPS[i % GROUPS.len()].0;
                let by_label = PLACED_BY_LABEL.contains(&group);
                Host {
                    id: tern_core::ids::uuid_v4(b),
                    group,
                    presented: if by_label && (i / GROUPS.len()) % 2 == 1 {
                        GROUPS[0].0
                    } else {
                        group
                    },
                    labels: if by_label {
                        BTreeMap::from([("ring".to_string(), group.to_string())])
                    } else {
                        BTreeMap::new()
                    },
                    version: "1.0.0".into(),
                    skip: None,
                    rollback: false,
                    phase: i64::try_from(below(&mut rng, POLL as u64)).unwrap_or(0),
                    home: i % p.replicas.max(1),
                    liar: chance(&mut rng, 0.05),
                    online: true,
                    installed: true,
                    unhealthy_until: 0,
                    ill_from: 0,
                    last_forced: None,
                    asked_now: false,
                    updater: UPDATER_START.into(),
                    reported: None,
                }
            })
            .collect();
        let replicas = (0..p.replicas.max(1))
            .map(|_| Replica {
                alive: true,
                started: -86_400,
                inventory: BTreeMap::new(),
                rollout: None,
                frozen: false,
                pins: BTreeMap::new(),
                paths: Said::default(),
                contact: 0,
                seen: 0,
                clock_skew: 0,
            })
            .collect();
        // Monday 06:00 UTC: before every group's window.
        let start = Timestamp::from_second(1_795_413_600).unwrap_or(Timestamp::UNIX_EPOCH);
        World {
            p,
            rng,
            start,
            now: 0,
            hosts,
            replicas,
            store: Store {
                revision: 1,
                reports: BTreeMap::new(),
                rollout: None,
                frozen: false,
                suspended: false,
                pins: BTreeMap::new(),
                paths: Said::new(),
            },
            faults: Faults::default(),
            enabled: config("enabled"),
            suspended: config("suspended"),
            disabled: config("disabled"),
            other: Paths::new(p.seed),
            version: version("1.0.0"),
            target,
            broken,
            trace: Trace {
                events: Vec::new(),
                grace_seconds: CUT_OFF_AFTER + STEP,
            },
            log: Vec::new(),
            reached: BTreeMap::new(),
            degrades: Self::degrading(p.seed),
        }
    }

    /// On some seeds the target degrades: a canary that comes up on it falls ill as
    /// soon as its health check is over. From a stream of its own, so that the other
    /// seeds play exactly as before.
    fn degrading(seed: u64) -> bool {
        chance(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x6465_6772_6164), 0.5)
    }

    fn ts(&self, t: i64) -> Timestamp {
        self.start
            .checked_add(SignedDuration::from_secs(t))
            .unwrap_or(self.start)
    }

    fn say(&mut self, what: String) {
        let at = self.ts(self.now);
        self.log.push(format!("{at} {what}"));
    }

    fn active<K: Ord>(map: &BTreeMap<K, i64>, k: K, now: i64) -> bool {
        map.get(&k).is_some_and(|until| now < *until)
    }

    fn store_up(&self) -> bool {
        self.now >= self.faults.store_down_until
    }

    fn reaches_store(&self, r: usize) -> bool {
        self.replicas[r].alive
            && self.store_up()
            && !Self::active(&self.faults.cut_off, r, self.now)
    }

    /// The seeded schedule: each step, maybe one more fault or operator action.
    fn inject(&mut self) {
        let n = self.p.replicas;
        let hosts = self.hosts.len();
        if !chance(&mut self.rng, 0.012) {
            return;
        }
        let lasting = |rng: &mut ChaCha8Rng, min: i64, max: i64| {
            min + i64::try_from(below(rng, u64::try_from(max - min).unwrap_or(1))).unwrap_or(0)
        };
        let now = self.now;
        match below(&mut self.rng, 12) {
            0 => {
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let d = lasting(&mut self.rng, 30, 900);
                self.faults.crashed.insert(r, now + d);
                self.replicas[r].alive = false;
                self.replicas[r].inventory.clear();
                self.say(format!("replica {r} crashes for {d}s"));
            }
            1 => {
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let d = lasting(&mut self.rng, 60, 1800);
                self.faults.write_fails.insert(r, now + d);
                self.say(format!("replica {r}'s report writes fail for {d}s"));
            }
            2 => {
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let d = lasting(&mut self.rng, 120, 1800);
                self.faults.late.insert(r, now + d);
                self.say(format!("replica {r}'s reports are late for {d}s"));
            }
            3 => {
                let d = lasting(&mut self.rng, 30, 600);
                self.faults.store_down_until = now + d;
                self.say(format!("the store is unavailable for {d}s"));
            }
            4 => {
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let d = lasting(&mut self.rng, 30, 1200);
                self.faults.cut_off.insert(r, now + d);
                self.say(format!("replica {r} is cut off from the store for {d}s"));
            }
            5 => {
                let d = lasting(&mut self.rng, 60, 3600);
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let k = 1 + usize::try_from(below(&mut self.rng, (hosts / 2) as u64)).unwrap_or(0);
                for _ in 0..k {
                    let h = usize::try_from(below(&mut self.rng, hosts as u64)).unwrap_or(0);
                    self.faults.host_partitions.insert((h, r), now + d);
                }
                self.say(format!("{k} hosts are cut off from replica {r} for {d}s"));
            }
            6 => {
                let r = usize::try_from(below(&mut self.rng, n as u64)).unwrap_or(0);
                let jump = lasting(&mut self.rng, -3600, 3600);
                self.replicas[r].clock_skew = jump;
                self.say(format!("replica {r}'s clock jumps {jump:+}s"));
            }
            7 => {
                let d = lasting(&mut self.rng, 300, 7200);
                let all = chance(&mut self.rng, 0.3);
                let k = if all {
                    hosts
                } else {
                    1 + usize::try_from(below(&mut self.rng, (hosts / 3) as u64)).unwrap_or(0)
                };
                for i in 0..k {
                    let h = if all {
                        i
                    } else {
                        usize::try_from(below(&mut self.rng, hosts as u64)).unwrap_or(0)
                    };
                    self.faults.vanished.insert(h, now + d);
                }
                self.say(format!("{k} hosts go silent for {d}s"));
            }
            8 => {
                // The operator's write fails while the store is down.
                if self.store_up() {
                    self.store.frozen = !self.store.frozen;
                    let what = if self.store.frozen {
                        "freezes"
                    } else {
                        "unfreezes"
                    };
                    self.say(format!("the operator {what} the fleet"));
                }
            }
            9 => {
                if self.store_up() {
                    self.store.suspended = !self.store.suspended;
                    let what = if self.store.suspended {
                        "suspends"
                    } else {
                        "resumes"
                    };
                    self.say(format!("the operator {what} the rollout"));
                }
            }
            10 => {
                if self.store_up() {
                    let h = usize::try_from(below(&mut self.rng, hosts as u64)).unwrap_or(0);
                    let hours = 1 + i64::try_from(below(&mut self.rng, 6)).unwrap_or(0);
                    let until = self.ts(now + hours * 3600);
                    let id = self.hosts[h].id.clone();
                    self.store.pins.insert(id, until);
                    self.say(format!("the operator pins host {h} for {hours}h"));
                }
            }
            _ => {
                // The operator rolls out the target (again, after a freeze or a halt).
                if self.store_up()
                    && self.version.as_ref().is_some_and(|v| {
                        v.spec
                            .agents
                            .as_ref()
                            .is_some_and(|a| a.target_version.to_string() != self.target)
                    })
                {
                    self.version = version(&self.target);
                    self.say(format!("the operator rolls out {}", self.target));
                }
            }
        }
        self.record_state();
    }

    /// Faults that ended come back to normal.
    fn heal(&mut self) {
        let now = self.now;
        let ended: Vec<usize> = self
            .faults
            .crashed
            .iter()
            .filter(|(_, until)| now >= **until)
            .map(|(r, _)| *r)
            .collect();
        for r in ended {
            self.faults.crashed.remove(&r);
            let rep = &mut self.replicas[r];
            rep.alive = true;
            rep.started = now;
            rep.inventory.clear();
            // It has not reached its store since it started: what it held before is no
            // snapshot to serve (a freeze may have been written meanwhile), so it is
            // cut off until it syncs.
            rep.contact = now - CUT_OFF_AFTER - 1;
            rep.seen = 0;
            self.say(format!("replica {r} restarts with an empty memory"));
        }
        for (h, until) in self.faults.vanished.clone() {
            if now >= until {
                self.faults.vanished.remove(&h);
            }
        }
        for (i, h) in self.hosts.iter_mut().enumerate() {
            h.online = !Self::active(&self.faults.vanished, i, now);
        }
    }

    /// What the store says now, for the trace (and the replicas' watch).
    fn record_state(&mut self) {
        self.store.revision += 1;
        let frozen = self.store.frozen;
        let mode = tern_core::rollout::mode_in_force(Some(self.config()), self.version.as_ref());
        let rollout = self.store.rollout.clone().map(|mut r| {
            r.spec.autoupdate_mode = mode;
            r
        });
        let at = self.ts(self.now);
        self.trace.events.push(TraceEvent::State {
            at,
            product: gate::AGENT.into(),
            rollout: rollout.map(Box::new),
            mode: None,
            mode_recorded: false,
            frozen,
            pins: self.store.pins.clone(),
            minimums: self.store.paths.minimums.clone(),
            cut_off: false,
        });
        // The updater's own releases: its ternd sets no mode and runs no rollout (a
        // directive carries them); the agents' freeze and pins hold them too.
        self.trace.events.push(TraceEvent::State {
            at,
            product: UPDATER.into(),
            rollout: None,
            mode: None,
            mode_recorded: true,
            frozen,
            pins: self.store.pins.clone(),
            minimums: BTreeMap::new(),
            cut_off: false,
        });
    }

    fn config(&self) -> &AutoUpdateConfig {
        if self.store.paths.disabled {
            &self.disabled
        } else if self.store.suspended {
            &self.suspended
        } else {
            &self.enabled
        }
    }

    /// Replicas that reach the store learn what it says (their watch).
    fn sync(&mut self) {
        let frozen = self.store.frozen;
        let mode = tern_core::rollout::mode_in_force(Some(self.config()), self.version.as_ref());
        for r in 0..self.replicas.len() {
            if !self.reaches_store(r) {
                continue;
            }
            let rep = &mut self.replicas[r];
            rep.contact = self.now;
            if rep.seen == self.store.revision {
                continue;
            }
            rep.seen = self.store.revision;
            rep.rollout = self.store.rollout.clone().map(|mut ro| {
                ro.spec.autoupdate_mode = mode;
                ro
            });
            rep.frozen = frozen;
            rep.pins = self.store.pins.clone();
            rep.paths = self.store.paths.clone();
        }
    }

    /// Hosts whose timer runs now ask find (of a replica they reach) and act; then,
    /// of the same replica, a directive naming them, and the agents' stop before the
    /// updater's own release.
    fn hosts_act(&mut self) {
        for i in 0..self.hosts.len() {
            let h = &self.hosts[i];
            if !h.online || (self.now + h.phase) % POLL >= STEP {
                continue;
            }
            let reachable = |r: usize| {
                self.replicas[r].alive
                    && !Self::active(&self.faults.host_partitions, (i, r), self.now)
            };
            let n = self.replicas.len();
            let Some(r) = (0..n).map(|k| (h.home + k) % n).find(|r| reachable(*r)) else {
                continue;
            };
            let rep = &self.replicas[r];
            let replica_now = self.ts(self.now + rep.clock_skew);
            // As ternd: the one answer, placed by the labels the host sends with find,
            // never by what this replica remembers of it.
            let active = h.installed.then_some(h.version.as_str());
            let facts = tern_core::wire::FindFacts {
                version: active.unwrap_or_default().to_string(),
                labels: h.labels.clone(),
                ..Default::default()
            };
            let fleet = gate::Fleet {
                freeze: rep.frozen.then_some(&FREEZE),
                pins: &rep.pins,
                revocation: &rep.paths.revocation,
                cut_off: self.now - rep.contact > CUT_OFF_AFTER,
                ..gate::Fleet::new(rep.rollout.as_ref(), replica_now)
            };
            let mut asking = gate::Host::new(gate::AGENT, h.presented, &h.id);
            asking.facts = Some(&facts);
            let answer = gate::answer(&fleet, &asking, gate::Ask::Find);
            let settings = answer.settings();
            let health = if self.ill(h) {
                Health::Unhealthy("the agent crash-loops".into())
            } else {
                Health::Healthy
            };
            let decision = host_update::decide(&host_update::Inputs {
                source: host_update::Source::Find {
                    gate: host_update::FindGate::of(&settings),
                    version: settings.agent_version.clone(),
                },
                active,
                skip: h.skip.as_deref(),
                health,
                last_forced_attempt: h.last_forced,
                asked_now: h.asked_now,
                now: self.ts(self.now),
            });
            let directed = directed(&fleet, rep.paths.directive.as_ref(), h);
            let updater = self.other.updater_goes(h, &settings);
            self.hosts[i].asked_now = false;
            if let host_update::Decision::Update { target, trigger } = decision {
                let kind = kind(&trigger);
                if kind == InstallKind::Repair {
                    self.hosts[i].last_forced = Some(self.ts(self.now));
                }
                self.install(i, target, kind, Via::Find);
            } else if let Some(version) = directed {
                self.install(i, version, InstallKind::Scheduled, Via::Directive);
            }
            if let Some(version) = updater {
                self.updater_install(i, version);
            }
            if self.hosts[i].installed {
                self.heartbeat(i, r);
            }
        }
    }

    /// Host `i` starts installing the agent's `target`, and it comes up, or (the
    /// broken target) crashes and is rolled back and skipped.
    fn install(&mut self, i: usize, target: String, kind: InstallKind, via: Via) {
        let h = &self.hosts[i];
        self.trace.events.push(TraceEvent::Install {
            at: self.ts(self.now),
            product: gate::AGENT.into(),
            host: h.id.clone(),
            group: h.presented.to_string(),
            labels: h.labels.clone(),
            from: h.installed.then(|| h.version.clone()),
            to: target.clone(),
            kind,
            via,
            signed: None,
            pinned_root: false,
        });
        if target == self.target && via == Via::Find {
            self.reached
                .entry(h.group.to_string())
                .or_default()
                .insert(h.id.clone());
        }
        let degrades = self.degrades && self.judges_as_canary(i);
        let host = &mut self.hosts[i];
        if self.broken && target == self.target {
            // It crashes on start: rolled back (a first install has nothing to roll
            // back to: still nothing installed), skipped from now on.
            host.skip = Some(target);
            host.rollback = host.installed;
        } else {
            host.version = target;
            host.installed = true;
            host.rollback = false;
            // A new version that comes up is a healthy agent.
            host.unhealthy_until = host.unhealthy_until.min(self.now);
            if degrades && host.version == self.target {
                // …until, on a release that degrades, a canary falls ill as soon as its
                // health check is over: its first report says so.
                host.ill_from = self.now;
                host.unhealthy_until = self.now + 3600;
            }
        }
    }

    /// Whether host `i`'s agent is unhealthy now.
    fn ill(&self, h: &Host) -> bool {
        h.ill_from <= self.now && self.now < h.unhealthy_until
    }

    /// Whether some replica's rollout holds host `i` as a canary not yet passed.
    fn judges_as_canary(&self, i: usize) -> bool {
        let id = &self.hosts[i].id;
        self.replicas.iter().any(|r| {
            r.rollout.as_ref().is_some_and(|ro| {
                ro.status
                    .groups
                    .iter()
                    .flat_map(|g| &g.canaries)
                    .any(|c| c.updater_id == *id && !c.success)
            })
        })
    }

    fn heartbeat(&mut self, i: usize, r: usize) {
        let h = &self.hosts[i];
        let lying = h.liar && h.rollback;
        // As ternd: the heartbeat counts in the group its labels place it in.
        let group = match self.replicas[r].rollout.as_ref() {
            Some(ro) => tern_core::rollout::place(ro, h.presented, &h.labels),
            None => h.presented,
        }
        .to_string();
        let hb = Heartbeat {
            updater_id: h.id.clone(),
            host_id: format!("host-{i}"),
            hostname: format!("host-{i}.sim"),
            group,
            labels: h.labels.clone(),
            version: if lying {
                self.target.clone()
            } else {
                h.version.clone()
            },
            updater_status: UpdaterStatus::Enabled,
            rollback: h.rollback && !lying,
            failed_version: if lying { None } else { h.skip.clone() },
            healthy: Some(lying || !self.ill(h)),
            ..Heartbeat::default()
        };
        // The judge reads what hosts said (rule 5: a canary passes on its own healthy
        // report of the target), not what the rollout made of it.
        let said = (hb.version.clone(), hb.healthy);
        if self.hosts[i].reported.as_ref() != Some(&said) {
            self.trace.events.push(TraceEvent::Report {
                at: self.ts(self.now),
                product: gate::AGENT.into(),
                host: hb.updater_id.clone(),
                version: Some(said.0.clone()).filter(|v| !v.is_empty()),
                healthy: said.1,
            });
            self.hosts[i].reported = Some(said);
        }
        let now = self.ts(self.now + self.replicas[r].clock_skew);
        let rep = &mut self.replicas[r];
        let first_seen = rep
            .inventory
            .get(&hb.updater_id)
            .map_or(now, |a| a.first_seen);
        rep.inventory.insert(
            hb.updater_id.clone(),
            InventoryAgent {
                heartbeat: hb,
                first_seen,
                last_seen: now,
            },
        );
    }

    /// Every report period: replicas report, the leader reconciles.
    fn report_and_reconcile(&mut self) {
        if self.now % REPORT_PERIOD != 0 {
            return;
        }
        let period = SignedDuration::from_secs(REPORT_PERIOD);
        for r in 0..self.replicas.len() {
            if !self.replicas[r].alive {
                continue;
            }
            let skew = self.replicas[r].clock_skew;
            let now = self.ts(self.now + skew);
            let silence = self.ts(self.now + skew - SILENCE);
            self.replicas[r]
                .inventory
                .retain(|_, a| a.last_seen >= silence);
            let late =
                Self::active(&self.faults.late, r, self.now) && (self.now / REPORT_PERIOD) % 3 != 0;
            if !self.reaches_store(r) || Self::active(&self.faults.write_fails, r, self.now) || late
            {
                continue;
            }
            let rep = &self.replicas[r];
            let needs = rep.rollout.as_ref().map(reconcile::needs);
            let agents: Vec<&InventoryAgent> = rep.inventory.values().collect();
            let mut spec = inventory::replica_report(
                now,
                agents.iter().copied(),
                |id| rep.inventory.get(id),
                |id| rep.pins.get(id).is_some_and(|until| now < *until),
                needs.as_ref(),
                period,
                SignedDuration::from_secs(CANARY_TENURE),
                &mut self.rng,
            );
            spec.warming_up = self.now - rep.started < POLL + REPORT_PERIOD;
            let name = format!("replica-{r}");
            self.store.reports.insert(
                name.clone(),
                (self.now, AutoUpdateAgentReport::new(&name, spec)),
            );
        }
        // Reports expire from the store after an hour.
        let now = self.now;
        self.store.reports.retain(|_, (at, _)| now - *at < 3600);
        let Some(leader) = (0..self.replicas.len()).find(|r| self.reaches_store(*r)) else {
            return;
        };
        let reports: Vec<AutoUpdateAgentReport> = self
            .store
            .reports
            .values()
            .map(|(_, r)| r.clone())
            .collect();
        let leader_now = self.ts(self.now + self.replicas[leader].clock_skew);
        let config = self.config().clone();
        let outcome = reconcile::reconcile_reports(
            leader_now,
            Resources {
                config: Some(&config),
                version: self.version.as_ref(),
                rollout: self.store.rollout.as_ref(),
                frozen: self.store.frozen,
            },
            &reports,
            period,
            &mut self.rng,
        );
        let next = match outcome {
            Outcome::Rollout { rollout, .. } => Some(*rollout),
            Outcome::NoRollout { .. } => None,
        };
        // The leader lifts the pins whose time has come, by its clock.
        let pins = self.store.pins.len();
        self.store.pins.retain(|_, until| leader_now < *until);
        if next != self.store.rollout || pins != self.store.pins.len() {
            self.store.rollout = next;
            self.record_state();
        }
    }

    fn step(&mut self) {
        self.heal();
        self.inject();
        self.inject_paths();
        self.sync();
        self.report_and_reconcile();
        self.sync();
        self.hosts_act();
        self.channel_hosts_act();
        self.now += STEP;
    }
}

/// One seeded run: the fleet through the rollout of its target (broken on some seeds)
/// under that seed's faults, checked against the fleet-safety invariant.
pub fn run(p: FaultParams) -> FaultRun {
    let mut w = World::new(p);
    w.record_state();
    // The fleet settles on 1.0.0 for an hour, then the target is rolled out.
    let settle = 3600;
    let end = p.hours.max(2) * 3600;
    while w.now < end {
        if w.now == settle {
            w.version = version(&w.target);
            let target = w.target.clone();
            w.say(format!("the operator rolls out {target}"));
            w.record_state();
        }
        w.step();
    }
    let violation = invariant::check(&w.trace).err();
    let final_state = w
        .store
        .rollout
        .as_ref()
        .map(|r: &AutoUpdateAgentRollout| {
            r.status
                .groups
                .iter()
                .map(|g| format!("{} {}", g.name, g.state.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "no rollout".into());
    FaultRun {
        params: p,
        broken_target: w.broken,
        log: w.log,
        trace: w.trace,
        violation,
        reached: w.reached.into_iter().map(|(g, s)| (g, s.len())).collect(),
        final_state,
    }
}

/// Runs `seeds` seeds from `first`; the runs that broke the invariant, and how many
/// simulated fleet-hours went by.
pub fn run_many(first: u64, seeds: u64, base: FaultParams) -> (Vec<FaultRun>, f64) {
    let mut failed = Vec::new();
    let mut hours = 0.0;
    for seed in first..first.saturating_add(seeds) {
        let run = run(FaultParams { seed, ..base });
        hours += run.params.hours as f64;
        if run.violation.is_some() {
            failed.push(run);
        }
    }
    (failed, hours)
}

// The other paths.
// The paths the rollout does not drive, played beside it from a second seeded stream
// (so that the faults and the operator's actions of [`super`] stay what they were for
// a seed): hosts enrolling (first installs), agents turning unhealthy (repairs), a
// person running `update --now`, version directives (some naming a revoked
// version), a channel and the hosts that follow it, the updater's own releases
// (tern-update's installer or a `local-script`), an operator disabling the rollout,
// and the signed minimum rising past the start version. Each asks the same one answer
// (`gate::answer`) and host decision (`host_update`) ternd and tern-update do, and
// every install it starts enters the trace the invariant judges.
//
// What it leaves out: directive selection by labels and facts (a directive here
// names its hosts, and find does not hold them for it), channel hosts' heartbeats
// (they do not count in the rollout), maintenance windows (a channel host installs
// when the channel serves it a version).
/// The updater's own product.
const UPDATER: &str = "tern-update";
/// The updater's version on every host at the start.
const UPDATER_START: &str = "1.0.0";
/// A version below the signed minimum of its line from the start: what an operator's
/// mistake names (a directive, the channel). Newer than the start version, so that a
/// channel host would take it (a major downgrade it refuses on its own).
const REVOKED: &str = "1.5.3";
/// At most this many hosts enroll per run.
const ENROLMENTS: usize = 12;

/// What the store says to the paths other than the rollout (replicas keep a copy).
#[derive(Clone, Default)]
struct Said {
    /// The signed minimums (release line → version), for the trace.
    minimums: BTreeMap<String, String>,
    revocation: Revocation,
    channel: Option<Channel>,
    directive: Option<Directed>,
    /// The operator set the agents' mode to `disabled`.
    disabled: bool,
}

/// An active directive: install `version` on these hosts.
#[derive(Clone)]
struct Directed {
    version: Version,
    hosts: BTreeSet<String>,
}

impl Said {
    /// What the store says at the start: `1.5.x` below `1.5.4` is revoked.
    fn new() -> Self {
        let mut said = Self::default();
        said.sign("1.5", "1.5.4");
        said
    }

    fn sign(&mut self, line: &str, minimum: &str) {
        self.minimums.insert(line.into(), minimum.into());
        self.revocation = Revocation::new(
            self.minimums
                .iter()
                .filter_map(|(l, m)| {
                    Some(Minimum {
                        line: ReleaseLine::parse(l).ok()?,
                        version: Version::parse(m).ok()?,
                    })
                })
                .collect(),
        );
    }
}

/// A host that follows the channel instead of the rollout.
struct ChannelHost {
    id: String,
    version: String,
    skip: Option<String>,
    phase: i64,
    home: usize,
}

/// One of the updater's own releases, as its ternd hands it out in a directive.
struct Release {
    version: String,
    /// Installed by the operator's `local-script`, not by tern-update's own installer.
    script: bool,
}

impl Release {
    fn instruction(&self) -> InstallInstruction {
        InstallInstruction {
            attempt_id: format!("updater-{}", self.version),
            installer_name: if self.script { "script" } else { "tern-update" }.into(),
            installer: InstallerSpec {
                installer_type: if self.script {
                    InstallerType::LocalScript
                } else {
                    InstallerType::TernUpdate
                },
                enabled: true,
                local_script: None,
                package: None,
            },
            target: Target {
                version: self.version.clone(),
                arch: None,
                fips: None,
                size: None,
                sha256: None,
            },
            dry_run: false,
            directive: String::new(),
        }
    }
}

/// The state of the other paths' actors.
struct Paths {
    rng: ChaCha8Rng,
    channel_hosts: Vec<ChannelHost>,
    release: Option<Release>,
    releases: u32,
    enrolled: usize,
    /// On some seeds the release keys revoke the start version at this second.
    revoke_start_at: Option<i64>,
}

fn id(rng: &mut ChaCha8Rng) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    tern_core::ids::uuid_v4(b)
}

impl Paths {
    fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7061_7468_7321);
        let channel_hosts = (0..3)
            .map(|k| ChannelHost {
                id: id(&mut rng),
                version: "1.0.0".into(),
                skip: None,
                phase: i64::try_from(below(&mut rng, POLL as u64)).unwrap_or(0),
                home: k,
            })
            .collect();
        let revoke_start_at = chance(&mut rng, 0.3)
            .then(|| 3600 * (12 + i64::try_from(below(&mut rng, 20)).unwrap_or(0)));
        Self {
            revoke_start_at,
            rng,
            channel_hosts,
            release: None,
            releases: 0,
            enrolled: 0,
        }
    }

    /// The updater's release this host goes to now, if any: unless the agents' ternd
    /// stops the whole host (its answer, `settings`), for an instruction that waits
    /// for it.
    fn updater_goes(
        &self,
        h: &Host,
        settings: &tern_core::wire::AutoUpdateSettings,
    ) -> Option<String> {
        let release = self.release.as_ref().filter(|r| r.version != h.updater)?;
        let held = host_update::instruction_waits_for_agents(&release.instruction())
            && host_update::FindGate::of(settings).stops_every_product();
        (!held).then(|| release.version.clone())
    }
}

/// What the host records as why it installs.
fn kind(trigger: &host_update::Trigger) -> InstallKind {
    use host_update::Trigger;
    match trigger {
        Trigger::NotInstalled => InstallKind::FirstInstall,
        Trigger::Unhealthy(_) | Trigger::Incompatible => InstallKind::Repair,
        Trigger::AskedNow => InstallKind::AskedNow,
        Trigger::Forced => InstallKind::Forced,
        Trigger::Rollout | Trigger::Critical | Trigger::Window => InstallKind::Scheduled,
    }
}

/// The directive's install for this host, if one names it and the one answer lets it
/// go now.
fn directed(fleet: &gate::Fleet<'_>, directive: Option<&Directed>, h: &Host) -> Option<String> {
    let d = directive?;
    let version = normalize(&d.version.to_string());
    if !h.installed
        || !d.hosts.contains(&h.id)
        || h.version == version
        || h.skip.as_deref() == Some(version.as_str())
    {
        return None;
    }
    let answer = gate::answer(
        fleet,
        &gate::Host::new(gate::AGENT, h.presented, &h.id),
        gate::Ask::Directed(gate::DirectedInstall {
            target: &d.version,
            timing: tern_core::directive::resource::Timing::default(),
        }),
    );
    answer.update().then_some(version)
}

impl World {
    /// Each step, maybe one action on the other paths.
    fn inject_paths(&mut self) {
        if self.other.revoke_start_at == Some(self.now) {
            self.store.paths.sign("1.0", "1.0.1");
            self.say("the release keys sign minimum 1.0.1: 1.0.0 is revoked".into());
            self.record_state();
        }
        self.incident();
        if !chance(&mut self.other.rng, 0.01) || !self.store_up() {
            return;
        }
        // The stream is lent out while the action reads and changes the world.
        let mut rng = std::mem::replace(&mut self.other.rng, ChaCha8Rng::seed_from_u64(0));
        let changed = self.path_action(&mut rng);
        self.other.rng = rng;
        if changed {
            self.record_state();
        }
    }

    /// An incident seldom comes alone: while a replica is cut off from the store past
    /// its bound, the operator may freeze the fleet, and the updater's ternd (another
    /// server) may release meanwhile. The cut-off replica never hears of the freeze:
    /// only its cut-off hold keeps its hosts from installing.
    fn incident(&mut self) {
        let now = self.now;
        let stale = (0..self.replicas.len()).any(|r| {
            self.replicas[r].alive
                && Self::active(&self.faults.cut_off, r, now)
                && now - self.replicas[r].contact > CUT_OFF_AFTER
        });
        if !stale || self.store.frozen || !self.store_up() || !chance(&mut self.other.rng, 0.05) {
            return;
        }
        self.store.frozen = true;
        self.say("the operator freezes the fleet while a replica is cut off".into());
        self.record_state();
        if chance(&mut self.other.rng, 0.5) {
            let mut rng = std::mem::replace(&mut self.other.rng, ChaCha8Rng::seed_from_u64(0));
            self.release(&mut rng);
            self.other.rng = rng;
        }
    }

    fn release(&mut self, rng: &mut ChaCha8Rng) {
        self.other.releases += 1;
        let release = Release {
            version: format!("1.{}.0", self.other.releases),
            script: chance(rng, 0.5),
        };
        let how = if release.script {
            "a local-script"
        } else {
            "its own installer"
        };
        self.say(format!(
            "the updater's ternd releases tern-update {} ({how})",
            release.version
        ));
        self.other.release = Some(release);
    }

    /// One action; whether it changed what the store says.
    fn path_action(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let now = self.now;
        let hosts = self.hosts.len() as u64;
        match below(rng, 9) {
            0 if self.other.enrolled < ENROLMENTS => {
                self.other.enrolled += 1;
                let g = usize::try_from(below(rng, GROUPS.len() as u64)).unwrap_or(0);
                let group = GROUPS[g].0;
                let host = Host {
                    id: id(rng),
                    group,
                    presented: group,
                    labels: if PLACED_BY_LABEL.contains(&group) {
                        BTreeMap::from([("ring".to_string(), group.to_string())])
                    } else {
                        BTreeMap::new()
                    },
                    version: String::new(),
                    skip: None,
                    rollback: false,
                    phase: i64::try_from(below(rng, POLL as u64)).unwrap_or(0),
                    home: usize::try_from(below(rng, self.replicas.len() as u64)).unwrap_or(0),
                    liar: false,
                    online: true,
                    installed: false,
                    unhealthy_until: 0,
                    ill_from: 0,
                    last_forced: None,
                    asked_now: false,
                    updater: UPDATER_START.into(),
                    reported: None,
                };
                self.say(format!("host {} enrolls in {group}", self.hosts.len()));
                self.hosts.push(host);
                return false;
            }
            1 => {
                let h = usize::try_from(below(rng, hosts)).unwrap_or(0);
                let d = 1800 + i64::try_from(below(rng, 9000)).unwrap_or(0);
                self.hosts[h].unhealthy_until = now + d;
                self.hosts[h].ill_from = now;
                self.say(format!("host {h}'s agent is unhealthy for {d}s"));
                return false;
            }
            2 => {
                let h = usize::try_from(below(rng, hosts)).unwrap_or(0);
                self.hosts[h].asked_now = true;
                self.say(format!("a person runs `update --now` on host {h}"));
                return false;
            }
            3 => {
                if self.store.paths.directive.take().is_some() {
                    self.say("the operator ends the directive".into());
                } else {
                    let version = if chance(rng, 0.3) {
                        REVOKED.to_string()
                    } else {
                        self.target.clone()
                    };
                    let k = 1 + below(rng, 3);
                    let chosen: BTreeSet<String> = (0..k)
                        .map(|_| {
                            let h = usize::try_from(below(rng, hosts)).unwrap_or(0);
                            self.hosts[h].id.clone()
                        })
                        .collect();
                    self.say(format!(
                        "the operator directs {version} onto {} hosts",
                        chosen.len()
                    ));
                    self.store.paths.directive =
                        Version::parse(&version).ok().map(|version| Directed {
                            version,
                            hosts: chosen,
                        });
                }
            }
            4 => {
                let version = match below(rng, 3) {
                    0 => REVOKED.to_string(),
                    1 => "1.0.0".to_string(),
                    _ => self.target.clone(),
                };
                self.say(format!("the operator sets the channel to {version}"));
                self.store.paths.channel = Some(Channel {
                    name: "stable".into(),
                    version,
                    critical: false,
                    updated: None,
                });
            }
            5 => {
                let c = usize::try_from(below(rng, 3)).unwrap_or(0);
                let hours = 1 + i64::try_from(below(rng, 6)).unwrap_or(0);
                let until = self.ts(now + hours * 3600);
                let id = self.other.channel_hosts[c].id.clone();
                self.store.pins.insert(id, until);
                self.say(format!("the operator pins channel host {c} for {hours}h"));
            }
            6 => {
                self.store.paths.disabled = !self.store.paths.disabled;
                let what = if self.store.paths.disabled {
                    "disables"
                } else {
                    "re-enables"
                };
                self.say(format!("the operator {what} agent updates"));
            }
            7 => {
                self.release(rng);
                return false;
            }
            _ => return false,
        }
        true
    }

    /// The updater of host `i` starts installing its own release `version`.
    fn updater_install(&mut self, i: usize, version: String) {
        let h = &self.hosts[i];
        self.trace.events.push(TraceEvent::Install {
            at: self.ts(self.now),
            product: UPDATER.into(),
            host: h.id.clone(),
            group: h.presented.to_string(),
            labels: h.labels.clone(),
            from: Some(h.updater.clone()),
            to: version.clone(),
            kind: InstallKind::Scheduled,
            via: Via::Directive,
            signed: None,
            pinned_root: false,
        });
        self.hosts[i].updater = version;
    }

    /// Channel hosts whose timer runs now ask the channel of a replica and act.
    fn channel_hosts_act(&mut self) {
        let n = self.replicas.len();
        for c in 0..self.other.channel_hosts.len() {
            let h = &self.other.channel_hosts[c];
            if (self.now + h.phase) % POLL >= STEP {
                continue;
            }
            let Some(r) = (0..n)
                .map(|k| (h.home + k) % n)
                .find(|r| self.replicas[*r].alive)
            else {
                continue;
            };
            let rep = &self.replicas[r];
            let Some(channel) = rep.paths.channel.as_ref() else {
                continue;
            };
            let fleet = gate::Fleet {
                freeze: rep.frozen.then_some(&FREEZE),
                pins: &rep.pins,
                revocation: &rep.paths.revocation,
                cut_off: self.now - rep.contact > CUT_OFF_AFTER,
                ..gate::Fleet::new(rep.rollout.as_ref(), self.ts(self.now + rep.clock_skew))
            };
            let answer = gate::answer(
                &fleet,
                &gate::Host::new(gate::AGENT, "", &h.id),
                gate::Ask::Channel(channel),
            );
            let Some(version) = answer.version.clone().filter(|_| answer.update()) else {
                continue;
            };
            let decision = host_update::decide(&host_update::Inputs {
                source: host_update::Source::Channel {
                    version: host_update::VersionAnswer::Version(version),
                    critical: host_update::CriticalAnswer::Other(String::new()),
                    window: host_update::WindowState::Open,
                },
                active: Some(&h.version),
                skip: h.skip.as_deref(),
                health: host_update::Health::Healthy,
                last_forced_attempt: None,
                asked_now: false,
                now: self.ts(self.now),
            });
            let host_update::Decision::Update { target, trigger } = decision else {
                continue;
            };
            self.trace.events.push(TraceEvent::Install {
                at: self.ts(self.now),
                product: gate::AGENT.into(),
                host: h.id.clone(),
                group: String::new(),
                labels: BTreeMap::new(),
                from: Some(h.version.clone()),
                to: target.clone(),
                kind: kind(&trigger),
                via: Via::Channel,
                signed: None,
                pinned_root: false,
            });
            let host = &mut self.other.channel_hosts[c];
            if self.broken && target == self.target {
                host.skip = Some(target);
            } else {
                host.version = target;
            }
        }
    }
}
