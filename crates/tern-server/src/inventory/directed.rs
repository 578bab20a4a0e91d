//! The directives' side of the inventory: each host's last install attempt and the
//! instruction still to deliver to it, and the directive pass over the hosts in place
//! (no copy of the inventory: `tern_core::directive::pass` reads each entry through
//! borrowed facts).

use std::collections::BTreeMap;

use jiff::Timestamp;
use tern_core::directive::instruct::InstallInstruction;
use tern_core::directive::pass::{Elsewhere, PassHost, Pause, pass};
use tern_core::directive::report::{Evaluation, MoveCount, NoFitHost};
use tern_core::directive::resource::{ControlSpec, DirectiveSpec, Installer, Target};
use tern_core::directive::select::{HostFacts, Labels, Names};
use tern_core::directive::state::{Attempt, AttemptResult, HostRecord, InstallState, StateTimings};

use super::{Entry, Id, Inventory, Key};

#[derive(Debug, Default)]
pub(crate) struct Directed {
    /// The last attempt this replica recorded (or found recorded) for the host.
    pub(crate) attempt: Option<Attempt>,
    /// Sent with every heartbeat answer until the host reports a result for it, or
    /// the attempt leaves `InstallTriggered`.
    pub(crate) instruction: Option<Box<InstallInstruction>>,
}

/// The instruction to send with this heartbeat's answer; a result for it ends the
/// resending.
pub(super) fn deliver(
    directed: &mut Option<Box<Directed>>,
    result: Option<&AttemptResult>,
) -> Option<Box<InstallInstruction>> {
    let d = directed.as_mut()?;
    let pending = d.instruction.as_ref()?;
    if result.is_some_and(|r| r.attempt_id == pending.attempt_id) {
        d.instruction = None;
        return None;
    }
    Some(pending.clone())
}

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
}

/// An install the pass chose, owned (the store write happens without the lock).
#[derive(Clone, Debug)]
pub struct ChosenInstall {
    pub updater_id: String,
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
}

fn pass_host<'a>(e: &'a Entry, names: &'a super::Names) -> PassHost<'a> {
    let facts = e.facts.as_deref();
    let version = names.get(e.version);
    PassHost {
        facts: HostFacts {
            labels: facts.map_or(Labels::None, |f| Labels::Pairs(&f.labels)),
            group: names.get(e.group),
            version,
            arch: facts.map_or("", |f| &f.arch),
            os: facts.map_or("", |f| &f.os),
            fips: facts.is_some_and(|f| f.fips),
            installers: facts.map_or(Names::Boxed(&[]), |f| Names::Boxed(&f.installers)),
        },
        record: HostRecord {
            version,
            last_seen: e.last_seen,
            connected_since: e.first_seen,
            target: None,
            attempt: e.directed.as_ref().and_then(|d| d.attempt.as_ref()),
            result: facts.and_then(|f| f.install_result.as_ref()),
        },
    }
}

impl Inventory {
    /// One directive pass over this replica's hosts (`tern_core::directive::pass`).
    pub fn directive_pass(&mut self, input: &PassInput<'_>) -> PassSummary {
        let names = &self.names;
        let out = pass(
            self.entries.iter().map(|e| pass_host(e, names)),
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
                    updater_id: entry(*i).updater_id.to_string(),
                    hostname: entry(*i).hostname.to_string(),
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
        };
        let summary = PassSummary {
            evaluation,
            paused: out.paused.clone(),
            chosen: out
                .triggers
                .iter()
                // An updater without an id cannot be told apart from a rebuilt host
                // with the same machine id: it is planned, never triggered.
                .filter(|t| !entry(t.host).updater_id.is_empty())
                .map(|t| ChosenInstall {
                    updater_id: entry(t.host).updater_id.to_string(),
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
        let id = Id::parse(updater_id);
        if id.is_empty() {
            return None;
        }
        let i = self.find(&Key::Updater(&id))?;
        Some(&mut self.entries[i])
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

impl super::AgentRef<'_> {
    /// The host's install state after the last directive pass.
    pub(crate) fn install_state(&self) -> Option<InstallState> {
        self.entry.install_state
    }
}
