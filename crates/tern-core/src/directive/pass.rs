//! One pass of the version reconciliation loop, and the plan: for every host of a
//! replica, what the directive wants (`select`), where the host stands (`state`), which
//! hosts may be triggered now (settled, needing an install, within the rate), and whether
//! faults or churn pause the loop. The same pass, without its triggers, is the plan an
//! operator reads before `apply`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;

use super::resource::{Amount, ControlSpec, DirectiveSpec, Installer, Rate, Target};
use super::select::{HostFacts, Prepared, Selection};
use super::state::{HostRecord, InstallState, StateTimings, install_state, may_trigger};
use crate::domain::version::Version;

/// One host as the pass sees it.
#[derive(Clone, Debug)]
pub struct PassHost<'a> {
    pub facts: HostFacts<'a>,
    /// Its record; `target` is filled by the pass from the selection.
    pub record: HostRecord<'a>,
    /// Counted and planned, never chosen in this pass (a dry run already sent to it for
    /// the plan being evaluated).
    pub hold: bool,
}

/// An install the loop triggers (after recording the attempt).
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger<'a> {
    /// The host's position in the pass's input.
    pub host: usize,
    pub directive: &'a str,
    pub target: &'a Target,
    pub installer: &'a Installer,
}

/// Why the loop triggers nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pause {
    /// More hosts in a fault state than `fault_limit` allows.
    Faults { count: u64, limit: u64 },
    /// More hosts churned during an install than `churn_limit` allows.
    Churn { count: u64, limit: u64 },
}

impl std::fmt::Display for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pause::Faults { count, limit } => write!(
                f,
                "{count} hosts failed their install (fault limit {limit}): installs paused"
            ),
            Pause::Churn { count, limit } => write!(
                f,
                "{count} hosts went offline during their install (churn limit {limit}): installs paused"
            ),
        }
    }
}

/// A planned move, for the plan's table (borrowed: a pass over 100k hosts allocates
/// per distinct move, not per host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Move<'a> {
    pub directive: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub installer: &'a str,
}

/// At most this many hosts no target fits are kept with their reasons (all are counted).
pub(crate) const NO_FIT_EXAMPLES: usize = 20;

/// Counts of governed hosts per state, from elsewhere (the other replicas' last
/// reports): the fault and churn limits are the fleet's, not one replica's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Elsewhere {
    pub governed: u64,
    pub states: BTreeMap<InstallState, u64>,
}

/// What a pass found and decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassOutcome<'a> {
    /// Hosts a directive selects.
    pub governed: u64,
    /// Hosts no directive selects (the rollout, if any, governs them).
    pub unaffected: u64,
    /// How many selected hosts no (target, installer) fits.
    pub no_fit: u64,
    /// The first [`NO_FIT_EXAMPLES`] of them: position and reasons.
    pub no_fit_examples: Vec<(usize, Vec<String>)>,
    /// Every governed host's state.
    pub states: BTreeMap<InstallState, u64>,
    /// Per host, its state (same order as the input; `None` when ungoverned).
    pub host_states: Vec<Option<InstallState>>,
    /// Hosts that should move, grouped (whatever their state).
    pub moves: BTreeMap<Move<'a>, u64>,
    /// Governed hosts per version they run.
    pub versions: Vec<(&'a str, u64)>,
    /// Hosts not on the target that fits them, by (version, target), whether or not an
    /// installer can move them (what the notification view calls outdated).
    pub behind: BTreeMap<(&'a str, &'a str), u64>,
    /// Hosts that need an install and may be triggered (settled), before the rate.
    pub eligible: u64,
    pub paused: Option<Pause>,
    /// The installs to trigger now (empty when paused or out of budget).
    pub triggers: Vec<Trigger<'a>>,
    /// The installs the budget allowed but the pause or `enabled: false` holds back. A
    /// dry run still sends them: it changes nothing on the host.
    pub held: Vec<Trigger<'a>>,
}

/// Runs one pass over `hosts`. `budget` is how many installs the rate allows now
/// ([`RateBucket`]); `elsewhere` adds the rest of the fleet to the fault and churn counts.
#[allow(clippy::too_many_arguments)]
pub fn pass<'a>(
    hosts: impl IntoIterator<Item = PassHost<'a>>,
    spec: &'a DirectiveSpec,
    installers: &'a BTreeMap<String, Installer>,
    control: &ControlSpec,
    timings: &StateTimings,
    now: Timestamp,
    budget: u64,
    elsewhere: &Elsewhere,
) -> PassOutcome<'a> {
    let mut out = PassOutcome::default();
    let mut candidates = Vec::new();
    let budget = usize::try_from(budget).unwrap_or(usize::MAX);
    let prepared = Prepared::new(spec, installers);
    // Hosts share a few versions (a server interns them: one text, one address), so
    // each is parsed once per pass, and found by its address among the first few.
    let mut versions: HashMap<&'a str, usize> = HashMap::new();
    let mut parsed: Vec<(&'a str, Option<Version>)> = Vec::new();
    // Moves counted by positions (directive, target, version slot, installer address):
    // integer compares only, so counting costs little per host.
    let mut moves: BTreeMap<(usize, usize, usize, usize), (&'a str, u64)> = BTreeMap::new();
    let mut governed_per_slot: Vec<u64> = Vec::new();
    let mut behind_per_slot: BTreeMap<(usize, &'a str), u64> = BTreeMap::new();
    for (i, h) in hosts.into_iter().enumerate() {
        let v = h.facts.version;
        let slot = match parsed.iter().take(8).position(|(t, _)| std::ptr::eq(*t, v)) {
            Some(slot) => slot,
            None => *versions.entry(v).or_insert_with(|| {
                parsed.push((v, Version::parse(v).ok()));
                parsed.len() - 1
            }),
        };
        let have = parsed[slot].1.as_ref();
        let sel = prepared.select(&h.facts, have);
        let target = match &sel {
            Selection::Unmatched => {
                out.unaffected += 1;
                out.host_states.push(None);
                continue;
            }
            Selection::AtTarget { target, .. } | Selection::Install { target, .. } => {
                Some(target.version.as_str())
            }
            Selection::NoFit {
                reasons,
                target: fitting,
                ..
            } => {
                if let Some(t) = fitting {
                    *behind_per_slot
                        .entry((slot, t.version.as_str()))
                        .or_default() += 1;
                }
                out.no_fit += 1;
                if out.no_fit_examples.len() < NO_FIT_EXAMPLES {
                    out.no_fit_examples.push((i, reasons.clone()));
                }
                None
            }
        };
        out.governed += 1;
        if governed_per_slot.len() <= slot {
            governed_per_slot.resize(slot + 1, 0);
        }
        governed_per_slot[slot] += 1;
        let record = HostRecord {
            target,
            ..h.record.clone()
        };
        let state = install_state(&record, now, timings);
        *out.states.entry(state).or_default() += 1;
        out.host_states.push(Some(state));
        if let Selection::Install {
            directive,
            target,
            installer,
        } = sel
        {
            let di = spec
                .directives
                .iter()
                .position(|d| std::ptr::eq(d, directive))
                .unwrap_or(0);
            let ti = directive
                .targets
                .iter()
                .position(|t| std::ptr::eq(t, target))
                .unwrap_or(0);
            *behind_per_slot
                .entry((slot, target.version.as_str()))
                .or_default() += 1;
            let key = (di, ti, slot, std::ptr::from_ref(installer) as usize);
            moves.entry(key).or_insert((&installer.metadata.name, 0)).1 += 1;
            if may_trigger(state, &record, now, timings) {
                out.eligible += 1;
                // Only as many as the budget: the rest wait for a later pass.
                if candidates.len() < budget && !h.hold {
                    candidates.push(Trigger {
                        host: i,
                        directive: &directive.name,
                        target,
                        installer,
                    });
                }
            }
        }
    }
    for ((di, ti, slot, _), (installer, n)) in moves {
        let d = &spec.directives[di];
        *out.moves
            .entry(Move {
                directive: &d.name,
                from: parsed[slot].0,
                to: &d.targets[ti].version,
                installer,
            })
            .or_default() += n;
    }
    out.behind = behind_per_slot
        .into_iter()
        .map(|((slot, to), n)| ((parsed[slot].0, to), n))
        .collect();
    out.versions = parsed
        .iter()
        .zip(governed_per_slot)
        .filter(|(_, n)| *n > 0)
        .map(|((text, _), n)| (*text, n))
        .collect();
    let count = |pred: fn(InstallState) -> bool| -> u64 {
        out.states
            .iter()
            .chain(&elsewhere.states)
            .filter(|(s, _)| pred(**s))
            .map(|(_, n)| n)
            .sum()
    };
    let faults = count(InstallState::is_fault);
    let churned = count(|s| s == InstallState::ChurnedDuringInstall);
    let governed = out.governed + elsewhere.governed;
    let limit = |text: &str| Amount::parse(text).map_or(0, |a| a.of(governed));
    let fault_limit = limit(&control.rolling_install.fault_limit);
    let churn_limit = limit(&control.rolling_install.churn_limit);
    out.paused = if faults > fault_limit {
        Some(Pause::Faults {
            count: faults,
            limit: fault_limit,
        })
    } else if churned > churn_limit {
        Some(Pause::Churn {
            count: churned,
            limit: churn_limit,
        })
    } else {
        None
    };
    if out.paused.is_none() && control.enabled {
        out.triggers = candidates;
    } else {
        out.held = candidates;
    }
    out
}

/// The rate as a token bucket carried from pass to pass: it fills at `rate` (a share of
/// the governed hosts per hour or minute) and holds at most a minute's worth (at least
/// one install), so installs are spread, never released in one burst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateBucket {
    /// Millionths of an install.
    micros: u64,
    last: Option<Timestamp>,
}

impl RateBucket {
    /// Fills the bucket up to `now`; returns how many whole installs it holds.
    pub fn fill(&mut self, rate: &Rate, governed: u64, now: Timestamp) -> u64 {
        let per_period = rate.amount.of(governed);
        let period_us = rate.per.as_micros().max(1) as u64;
        let elapsed = self.last.map_or(Duration::ZERO, |last| {
            let d = now.duration_since(last);
            if d.is_negative() {
                Duration::ZERO
            } else {
                d.unsigned_abs()
            }
        });
        if self.last.is_none() {
            // A loop that just started may install one host at once.
            self.micros = 1_000_000;
        }
        self.last = Some(now);
        // installs × 1e6 per microsecond of elapsed time, in u128 so nothing overflows.
        let added =
            u128::from(per_period) * elapsed.as_micros() * 1_000_000 / u128::from(period_us);
        let cap_per_minute =
            u128::from(per_period) * 60_000_000 * 1_000_000 / u128::from(period_us);
        let cap = cap_per_minute.max(1_000_000);
        let filled = (u128::from(self.micros) + added).min(cap);
        self.micros = u64::try_from(filled).unwrap_or(u64::MAX);
        self.micros / 1_000_000
    }

    /// Takes `n` installs (the triggers of a pass).
    pub fn take(&mut self, n: u64) {
        self.micros = self.micros.saturating_sub(n * 1_000_000);
    }
}
