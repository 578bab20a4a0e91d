//! The directives' side of the inventory: each host's last install attempt and the
//! instruction still to deliver to it, and the directive pass over the hosts in place
//! (no copy of the inventory: `tern_core::directive::pass` reads each entry through
//! borrowed facts).

use std::collections::BTreeMap;

use jiff::Timestamp;
use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::pass::{Elsewhere, PassHost, Pause, pass};
use tern_core::directive::report::{
    DryRunCounts, DryRunFailure, Evaluation, MoveCount, NO_FIT_SHOWN, NoFitHost,
};
use tern_core::directive::resource::{ControlSpec, DirectiveSpec, Installer, Target};
use tern_core::directive::select::{HostFacts, Labels, Names};
use tern_core::directive::state::{Attempt, HostRecord, InstallState, StateTimings};

use super::pending::DryRun;
use super::{ATTEMPT_CHECKED, Entry, IdRef, Inventory, Key};

/// What a pass reads besides the hosts.
pub struct PassInput<'r> {
    pub spec: &'r DirectiveSpec,
    pub installers: &'r BTreeMap<String, Installer>,
    pub control: &'r ControlSpec,
    pub timings: StateTimings,
    pub now: Timestamp,
    pub budget: u64,
    pub elsewhere: &'r Elsewhere,
    /// Keep each host's state (the active directive's pass); a plan of a draft does not.
    pub record_states: bool,
    /// A dry-run plan's nonce: hosts already sent its dry run are not chosen again.
    pub dry_run: Option<&'r str>,
    /// Work out the notification controller's flags (`tern_core::directive::notice`).
    pub notices: bool,
    /// The rollout find serves (the active pass only): where the governed hosts would
    /// go if no directive governed them (`Evaluation::released`).
    pub release_to: Option<ReleaseTo<'r>>,
}

/// The fleet the one answer reads, for what find would answer a host no directive
/// governed ([`PassInput::release_to`]).
#[derive(Clone, Copy)]
pub struct ReleaseTo<'r> {
    pub fleet: tern_core::gate::Fleet<'r>,
}

/// An install the pass chose, owned (the store write happens without the lock).
#[derive(Clone, Debug)]
pub struct ChosenInstall {
    pub updater_id: String,
    /// The group it counts in (for the one answer's stops).
    pub group: String,
    pub from_version: String,
    pub directive: String,
    pub installer_name: String,
    pub installer: tern_core::directive::resource::InstallerSpec,
    pub target: Target,
}

/// What a pass found, owned.
#[derive(Clone, Debug, Default)]
pub struct PassSummary {
    pub evaluation: Evaluation,
    pub paused: Option<Pause>,
    pub chosen: Vec<ChosenInstall>,
    pub notices: Vec<tern_core::directive::notice::VersionNotice>,
}

/// A host's facts as a directive selects by them.
fn host_facts<'a>(e: &'a Entry, names: &'a super::Names) -> HostFacts<'a> {
    let facts = e.facts.as_deref();
    HostFacts {
        labels: facts.map_or(Labels::None, |f| Labels::Pairs(&f.labels)),
        group: names.get(e.group),
        version: names.get(e.version),
        arch: facts.map_or("", |f| &f.arch),
        os: facts.map_or("", |f| &f.os),
        fips: facts.is_some_and(|f| f.fips),
        installers: facts.map_or(Names::Boxed(&[]), |f| Names::Boxed(&f.installers)),
    }
}

fn pass_host<'a>(e: &'a Entry, names: &'a super::Names, dry_run: Option<&str>) -> PassHost<'a> {
    let facts = e.facts.as_deref();
    let version = names.get(e.version);
    PassHost {
        facts: host_facts(e, names),
        record: HostRecord {
            version,
            last_seen: e.last_seen(),
            connected_since: e.first_seen(),
            target: None,
            attempt: e.directed.as_ref().and_then(|d| d.attempt.as_ref()),
            result: facts.and_then(|f| f.install_result.as_ref()),
        },
        hold: dry_run.is_some_and(|nonce| {
            e.directed
                .as_ref()
                .and_then(|d| d.dry_run.as_ref())
                .is_some_and(|d| d.nonce == nonce)
        }),
    }
}

impl Inventory {
    /// The hosts `states` says a directive governs, by the version they run and the
    /// one find would name them once released.
    fn released(
        &self,
        states: &[Option<InstallState>],
        to: ReleaseTo<'_>,
        now: Timestamp,
    ) -> Vec<tern_core::directive::report::ReleasedMove> {
        let mut moves: BTreeMap<(&str, String), u64> = BTreeMap::new();
        for (e, _) in self
            .entries
            .iter()
            .zip(states)
            .filter(|(_, state)| state.is_some())
        {
            let updater_id = e.uid(&self.hostnames).to_string();
            // Released: no directive governs it any more.
            let fleet = tern_core::gate::Fleet {
                directive: None,
                now,
                ..to.fleet
            };
            let answer = tern_core::gate::answer(
                &fleet,
                &tern_core::gate::Host::new(
                    tern_core::gate::AGENT,
                    self.names.get(e.group),
                    &updater_id,
                ),
                tern_core::gate::Ask::Find,
            );
            let from = self.names.get(e.version);
            if let Some(v) = answer.version.map(|v| v.to_string())
                && tern_core::version::normalize(from) != v
            {
                *moves.entry((from, v)).or_default() += 1;
            }
        }
        moves
            .into_iter()
            .map(
                |((from, to), hosts)| tern_core::directive::report::ReleasedMove {
                    from: from.to_string(),
                    to,
                    hosts,
                },
            )
            .collect()
    }

    /// One directive pass over this replica's hosts (`tern_core::directive::pass`).
    pub fn directive_pass(&mut self, input: &PassInput<'_>) -> PassSummary {
        let names = &self.names;
        let out = pass(
            self.entries
                .iter()
                .map(|e| pass_host(e, names, input.dry_run)),
            input.spec,
            input.installers,
            input.control,
            &input.timings,
            input.now,
            input.budget,
            input.elsewhere,
        );
        let entry = |i: usize| &self.entries[i];
        let evaluation = Evaluation {
            governed: out.governed,
            unaffected: out.unaffected,
            no_fit: out.no_fit,
            no_fit_examples: out
                .no_fit_examples
                .iter()
                .map(|(i, reasons)| NoFitHost {
                    updater_id: entry(*i).uid(&self.hostnames).to_string(),
                    hostname: self.hostnames.get(entry(*i).hostname).to_string(),
                    reasons: reasons.clone(),
                })
                .collect(),
            states: out.states.clone(),
            moves: out
                .moves
                .iter()
                .map(|(m, n)| MoveCount {
                    directive: m.directive.to_string(),
                    from: m.from.to_string(),
                    to: m.to.to_string(),
                    installer: m.installer.to_string(),
                    hosts: *n,
                })
                .collect(),
            eligible: out.eligible,
            released: match input.release_to {
                Some(to) => self.released(&out.host_states, to, input.now),
                None => Vec::new(),
            },
        };
        let summary = PassSummary {
            notices: if input.notices {
                tern_core::directive::notice::notices(input.spec, &out)
            } else {
                Vec::new()
            },
            evaluation,
            paused: out.paused.clone(),
            chosen: out
                .triggers
                .iter()
                // A dry run sends what the budget allows whatever holds installs back.
                .chain(input.dry_run.map_or(&[][..], |_| &out.held[..]))
                // An updater without an id cannot be told apart from a rebuilt host
                // with the same machine id: it is planned, never triggered.
                .filter(|t| !entry(t.host).updater_id.is_empty())
                .map(|t| ChosenInstall {
                    updater_id: entry(t.host).uid(&self.hostnames).to_string(),
                    group: names.get(entry(t.host).group).to_string(),
                    from_version: names.get(entry(t.host).version).to_string(),
                    directive: t.directive.to_string(),
                    installer_name: t.installer.metadata.name.clone(),
                    installer: t.installer.spec.clone(),
                    target: t.target.clone(),
                })
                .collect(),
        };
        if input.record_states {
            let states = out.host_states;
            for (e, state) in self.entries.iter_mut().zip(states) {
                e.install_state = state;
                // Past InstallTriggered, an undelivered instruction is stale.
                if state != Some(InstallState::InstallTriggered)
                    && let Some(d) = e.directed.as_mut()
                {
                    d.instruction = None;
                }
            }
        }
        summary
    }

    fn by_updater_mut(&mut self, updater_id: &str) -> Option<&mut Entry> {
        let id = IdRef::parse(updater_id);
        if id.is_empty() {
            return None;
        }
        let i = self.find(&Key::Updater(id))?;
        Some(&mut self.entries[i])
    }

    /// The updater ids of the hosts whose attempt record this replica has not read yet.
    pub(crate) fn unchecked_attempts(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| !e.attempt_checked() && !e.updater_id.is_empty())
            .map(|e| e.uid(&self.hostnames).to_string())
            .collect()
    }

    /// The attempt records of `checked` were read; `found` holds those that exist and
    /// are adopted (unless this replica already knows a newer attempt).
    pub(crate) fn attempts_checked(
        &mut self,
        checked: &[String],
        found: &std::collections::HashMap<String, Attempt>,
    ) {
        for id in checked {
            let Some(e) = self.by_updater_mut(id) else {
                continue;
            };
            e.set_flag(ATTEMPT_CHECKED, true);
            if let Some(a) = found.get(id) {
                let d = e.directed.get_or_insert_default();
                if d.attempt.as_ref().is_none_or(|mine| mine.at < a.at) {
                    d.attempt = Some(a.clone());
                }
            }
        }
    }

    /// Records that `attempt` is the host's last (found in the store, made by another
    /// replica or before a restart): its state follows from it from the next pass.
    pub(crate) fn adopt_attempt(&mut self, updater_id: &str, attempt: Attempt) {
        if let Some(e) = self.by_updater_mut(updater_id) {
            e.directed.get_or_insert_default().attempt = Some(attempt);
        }
    }

    /// The attempt is recorded in the store: the host gets `instruction` with its next
    /// heartbeat answers. Whether the host is still here.
    pub(crate) fn trigger(
        &mut self,
        updater_id: &str,
        attempt: Attempt,
        instruction: InstallInstruction,
    ) -> bool {
        let Some(e) = self.by_updater_mut(updater_id) else {
            return false;
        };
        let d = e.directed.get_or_insert_default();
        d.attempt = Some(attempt);
        d.instruction = Some(Box::new(instruction));
        e.install_state = Some(InstallState::InstallTriggered);
        true
    }
}

impl Inventory {
    /// A dry run is recorded in the store for the host (by this replica, or found there):
    /// it gets `instruction`, if any, with its next heartbeat answers.
    pub(crate) fn send_dry_run(
        &mut self,
        updater_id: &str,
        nonce: &str,
        attempt_id: &str,
        instruction: Option<InstallInstruction>,
    ) {
        if let Some(e) = self.by_updater_mut(updater_id) {
            e.directed.get_or_insert_default().dry_run = Some(DryRun {
                nonce: nonce.to_string(),
                attempt_id: attempt_id.to_string(),
                instruction: instruction.map(Box::new),
            });
        }
    }

    /// The dry runs of plan `nonce` on this replica's hosts; dry runs of other plans are
    /// dropped (their plan was applied, cancelled or replaced).
    pub(crate) fn dry_run_counts(&mut self, nonce: Option<&str>) -> DryRunCounts {
        let mut out = DryRunCounts::default();
        let hostnames = &self.hostnames;
        for e in &mut self.entries {
            let Some(d) = e.directed.as_mut() else {
                continue;
            };
            let Some(dry) = &d.dry_run else { continue };
            if Some(dry.nonce.as_str()) != nonce {
                d.dry_run = None;
                continue;
            }
            out.sent += 1;
            let result = e
                .facts
                .as_deref()
                .and_then(|f| f.install_result.as_ref())
                .filter(|r| r.attempt_id == dry.attempt_id);
            match result {
                Some(r) if r.success => out.passed += 1,
                Some(r) => {
                    out.failed += 1;
                    if out.failures.len() < NO_FIT_SHOWN {
                        out.failures.push(DryRunFailure {
                            updater_id: e.uid(hostnames).to_string(),
                            hostname: hostnames.get(e.hostname).to_string(),
                            error: r.error.clone(),
                        });
                    }
                }
                None => {}
            }
        }
        out
    }
}

impl super::AgentRef<'_> {
    /// The host's install state after the last directive pass.
    pub(crate) fn install_state(&self) -> Option<InstallState> {
        self.entry.install_state
    }

    /// Its facts as the directive pass selects by them.
    pub(crate) fn directive_facts(&self) -> HostFacts<'_> {
        host_facts(self.entry, self.names)
    }
}
