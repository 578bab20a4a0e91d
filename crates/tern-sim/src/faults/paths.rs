//! The paths the rollout does not drive, played beside it from a second seeded stream
//! (so that the faults and the operator's actions of [`super`] stay what they were for
//! a seed): hosts enrolling (first installs), agents turning unhealthy (repairs), a
//! person running `update --now`, version directives (some naming a revoked
//! version), a channel and the hosts that follow it, the updater's own releases
//! (tern-update's installer or a `local-script`), an operator disabling the rollout,
//! and the signed minimum rising past the start version. Each asks the same one answer
//! (`gate::answer`) and host decision (`host_update`) ternd and tern-update do, and
//! every install it starts enters the trace the invariant judges.
//!
//! What it leaves out: directive selection by labels and facts (a directive here
//! names its hosts, and find does not hold them for it), channel hosts' heartbeats
//! (they do not count in the rollout), maintenance windows (a channel host installs
//! when the channel serves it a version).

use super::{
    BTreeMap, BTreeSet, ChaCha8Rng, FREEZE, GROUPS, Host, InstallKind, PLACED_BY_LABEL, POLL,
    RngCore, STEP, SeedableRng, TraceEvent, Via, World, below, chance, gate, host_update,
};
use tern_core::controls::Channel;
use tern_core::install::{InstallInstruction, InstallerSpec, InstallerType, Target};
use tern_core::revocation::{Minimum, ReleaseLine, Revocation};
use tern_core::version::{Version, normalize};

/// The updater's own product.
pub(super) const UPDATER: &str = "tern-update";
/// The updater's version on every host at the start.
pub(super) const UPDATER_START: &str = "1.0.0";
/// A version below the signed minimum of its line from the start: what an operator's
/// mistake names (a directive, the channel). Newer than the start version, so that a
/// channel host would take it (a major downgrade it refuses on its own).
const REVOKED: &str = "1.5.3";
/// At most this many hosts enroll per run.
const ENROLMENTS: usize = 12;

/// What the store says to the paths other than the rollout (replicas keep a copy).
#[derive(Clone, Default)]
pub(super) struct Said {
    /// The signed minimums (release line → version), for the trace.
    pub(super) minimums: BTreeMap<String, String>,
    pub(super) revocation: Revocation,
    pub(super) channel: Option<Channel>,
    pub(super) directive: Option<Directed>,
    /// The operator set the agents' mode to `disabled`.
    pub(super) disabled: bool,
}

/// An active directive: install `version` on these hosts.
#[derive(Clone)]
pub(super) struct Directed {
    version: Version,
    hosts: BTreeSet<String>,
}

impl Said {
    /// What the store says at the start: `1.5.x` below `1.5.4` is revoked.
    pub(super) fn new() -> Self {
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
        }
    }
}

/// The state of the other paths' actors.
pub(super) struct Paths {
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
    pub(super) fn new(seed: u64) -> Self {
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
    pub(super) fn updater_goes(
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
pub(super) fn kind(trigger: &host_update::Trigger) -> InstallKind {
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
pub(super) fn directed(
    fleet: &gate::Fleet<'_>,
    directive: Option<&Directed>,
    h: &Host,
) -> Option<String> {
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
            not_before: None,
        }),
    );
    answer.update().then_some(version)
}

impl World {
    /// Each step, maybe one action on the other paths.
    pub(super) fn inject_paths(&mut self) {
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
                && now - self.replicas[r].contact > super::CUT_OFF_AFTER
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
                    last_forced: None,
                    asked_now: false,
                    updater: UPDATER_START.into(),
                };
                self.say(format!("host {} enrolls in {group}", self.hosts.len()));
                self.hosts.push(host);
                return false;
            }
            1 => {
                let h = usize::try_from(below(rng, hosts)).unwrap_or(0);
                let d = 1800 + i64::try_from(below(rng, 9000)).unwrap_or(0);
                self.hosts[h].unhealthy_until = now + d;
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
    pub(super) fn updater_install(&mut self, i: usize, version: String) {
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
    pub(super) fn channel_hosts_act(&mut self) {
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
                cut_off: self.now - rep.contact > super::CUT_OFF_AFTER,
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
