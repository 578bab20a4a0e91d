//! The one answer: may this host install, now, for this product and this path, and if
//! not, every reason why ([`answer`]). find, its long poll, channels, Teleport's
//! paths, heartbeat instructions, the directive pass, the updater's own releases,
//! tern-kube-update (through find), the forecast, `ternctl plan` and the simulator all
//! ask it; whoever serves a host parses, asks and serialises, and decides nothing of
//! its own.
//!
//! It takes a view of the fleet ([`Fleet`]: the product's config, version and
//! rollout, a freeze, the server pins, the signed minimums and the trust requirement,
//! whether the replica answering is cut off from its store, the active directive) and
//! what a host asks ([`Host`], [`Ask`]), and returns an [`Answer`]: the version and
//! every [`Hold`] that applies. The stops ([`Hold::is_stop`]) are stated once, here,
//! for every path:
//!
//! - a freeze (of every product, or of the one asked), a server pin of the host, the
//!   replica cut off from its store, a revoked version, the trust requirement;
//! - the mode in force, when it is not `enabled`: always for the rollout (a mode set
//!   nowhere is `disabled`), and for channels and directives when an operator set it
//!   in a resource (their own switches govern them otherwise);
//! - for the rollout also no rollout, and a directive governing the host.
//!
//! Under any stop the version named is the last known-good one (the rollout's start
//! version, unless it is revoked), never the target: a host with nothing installed
//! may take it, nothing else may install. The schedule holds (the group's turn,
//! canaries, backpressure, topology, window) are the rollout table's
//! ([`table`]).

mod table;

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::domain::controls::{Channel, Freeze};
use crate::domain::directive::resource::{DirectiveSpec, Installer, Timing};
use crate::domain::directive::select::{self, HostFacts, Labels, Names};
use crate::domain::hold::{Hold, Holds};
use crate::domain::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Mode};
use crate::domain::revocation::Revocation;
use crate::domain::rollout;
use crate::domain::version::Version;
use crate::domain::wire::{AutoUpdateSettings, FindFacts};

pub use table::{BACKPRESSURE_JITTER_SECONDS, DEFAULT_JITTER_SECONDS};

pub use crate::domain::product::AGENT;

/// Server pins of single hosts: when the pin of `updater_id` lifts, if one holds it
/// for `product`.
pub trait Pins: Sync {
    fn until(&self, updater_id: &str, product: &str) -> Option<Timestamp>;
}

/// No pins.
pub struct NoPins;

impl Pins for NoPins {
    fn until(&self, _: &str, _: &str) -> Option<Timestamp> {
        None
    }
}

/// Pins of every product, by updater id.
impl Pins for BTreeMap<String, Timestamp> {
    fn until(&self, updater_id: &str, _: &str) -> Option<Timestamp> {
        self.get(updater_id).copied()
    }
}

/// The active version directive and the installers it may name.
#[derive(Clone, Copy, Debug)]
pub struct Directive<'a> {
    pub spec: &'a DirectiveSpec,
    pub installers: &'a BTreeMap<String, Installer>,
}

impl Directive<'_> {
    /// Whether it governs a host with these facts (any selection but none: at its
    /// target, to install, or no target fitting).
    pub fn governs(&self, facts: &HostFacts<'_>) -> bool {
        !matches!(
            select::select(self.spec, self.installers, facts),
            select::Selection::Unmatched
        )
    }
}

/// What the answer depends on besides the host, as a replica holds it in memory.
#[derive(Clone, Copy)]
pub struct Fleet<'a> {
    /// The product's config and version resources (the agent's: Teleport's files).
    pub config: Option<&'a AutoUpdateConfig>,
    pub version: Option<&'a AutoUpdateVersion>,
    /// The product's rollout, as the leader last wrote it.
    pub rollout: Option<&'a AutoUpdateAgentRollout>,
    /// The global freeze, while one holds.
    pub freeze: Option<&'a Freeze>,
    /// The server pins. A pin holds while it exists: the leader lifts it (deletes it)
    /// once its time has come by the leader's clock, so every replica answers alike.
    pub pins: &'a dyn Pins,
    /// The signed minimums (empty: nothing is known revoked).
    pub revocation: &'a Revocation,
    /// `--require-trust`: only hosts that pin the release root are served.
    pub require_trust: bool,
    /// The replica answering has not reached its store for longer than it may serve
    /// from memory: a freeze, a suspend or a pin written meanwhile would not be in its
    /// answer, so it tells nobody to install.
    pub cut_off: bool,
    /// The active version directive.
    pub directive: Option<Directive<'a>>,
    /// Jitter is asked of hosts (a dev clock asks none: time moves only when told).
    pub jitter: bool,
    pub now: Timestamp,
}

impl<'a> Fleet<'a> {
    /// A fleet of one rollout and nothing else (no freeze, pin, revocation or
    /// directive; the mode the rollout was reconciled under): what the planner, the
    /// simulator and tests start from.
    pub fn new(rollout: Option<&'a AutoUpdateAgentRollout>, now: Timestamp) -> Self {
        Self {
            config: None,
            version: None,
            rollout,
            freeze: None,
            pins: &NoPins,
            revocation: Revocation::none(),
            require_trust: false,
            cut_off: false,
            directive: None,
            jitter: true,
            now,
        }
    }

    /// The mode in force, and whether an operator set it: from the config and version
    /// when the view holds either, else the mode the rollout was reconciled under.
    pub fn mode(&self) -> (Mode, bool) {
        match (self.config, self.version, self.rollout) {
            (None, None, Some(r)) => (r.spec.autoupdate_mode, true),
            (config, version, _) => (
                rollout::mode_in_force(config, version),
                rollout::config_mode(config).is_some() || rollout::version_mode(version).is_some(),
            ),
        }
    }
}

/// What this replica recorded of a host that sends no facts with its request (an
/// updater that predates them): where its heartbeats placed it, and whether the
/// replica's last directive pass found a directive governing it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recorded<'a> {
    pub placed_group: Option<&'a str>,
    pub governed: bool,
}

/// The host asking.
#[derive(Clone, Copy, Debug)]
pub struct Host<'a> {
    /// The product it asks for ([`AGENT`] unless it names another).
    pub product: &'a str,
    /// May be empty (Teleport's channel path, an updater without an id): such a host
    /// is admitted by backpressure only once progress is complete, and no pin finds it.
    pub updater_id: &'a str,
    /// The group it presents (may be empty).
    pub group: &'a str,
    /// What it says of itself with the request, when it says it.
    pub facts: Option<&'a FindFacts>,
    /// What this replica knows of it otherwise.
    pub recorded: Recorded<'a>,
    /// It pins the release root (it verifies what it installs).
    pub pins_root: bool,
}

impl<'a> Host<'a> {
    /// A host of `product` known by its group and updater id alone.
    pub fn new(product: &'a str, group: &'a str, updater_id: &'a str) -> Self {
        Self {
            product,
            updater_id,
            group,
            facts: None,
            recorded: Recorded::default(),
            pins_root: false,
        }
    }
}

/// A directive's install, with its time rules.
#[derive(Clone, Copy, Debug)]
pub struct DirectedInstall<'a> {
    pub target: &'a Version,
    pub timing: Timing,
}

/// What the host asks.
#[derive(Clone, Copy, Debug)]
pub enum Ask<'a> {
    /// find: which version to run, and whether to install it now (the rollout).
    Find,
    /// A channel's version (seed 001), for a host following it.
    Channel(&'a Channel),
    /// A directive's install of its target on this host.
    Directed(DirectedInstall<'a>),
}

/// The answer for one host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Answer {
    /// The version to run. Under a stop the last known-good one (never the target), or
    /// none; `None` also when there is no rollout or a directive governs the host.
    pub version: Option<Version>,
    /// Every hold that applies; none: install `version` now.
    pub holds: Holds,
    /// A host told to install waits a random part of this.
    pub jitter_seconds: u64,
    /// A channel's `critical` (its hosts install outside their window).
    pub critical: bool,
}

impl Answer {
    /// Whether the host is told to install `version` now.
    pub fn update(&self) -> bool {
        self.holds.is_empty() && self.version.is_some()
    }

    /// The hold to name first.
    pub fn hold(&self) -> Option<Hold> {
        self.holds.first()
    }

    /// The agent half of find's response.
    pub fn settings(&self) -> AutoUpdateSettings {
        AutoUpdateSettings {
            agent_version: self
                .version
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            agent_auto_update: self.update(),
            agent_update_jitter_seconds: self.jitter_seconds,
            agent_hold: self
                .hold()
                .map(|h| h.code().to_string())
                .unwrap_or_default(),
            agent_holds: if crate::planted!(FirstHoldOnly) {
                self.holds.codes().into_iter().take(1).collect()
            } else {
                self.holds.codes()
            },
            ..AutoUpdateSettings::default()
        }
    }
}

/// The one answer.
pub fn answer(fleet: &Fleet<'_>, host: &Host<'_>, ask: Ask<'_>) -> Answer {
    let mut holds = host_stops(fleet, host);
    let (mode, mode_set) = fleet.mode();
    match ask {
        Ask::Find => find(fleet, host, holds, mode),
        Ask::Channel(channel) => {
            if crate::planted!(PinSkipsChannel) {
                holds = holds.iter().filter(|h| *h != Hold::Pinned).collect();
            }
            if mode_set {
                add_mode(&mut holds, mode);
            }
            let version = Version::parse(&channel.version).ok();
            if version
                .as_ref()
                .is_none_or(|v| fleet.revocation.revokes(v) && !crate::planted!(RevokedChannel))
            {
                holds.add(Hold::Revoked);
            }
            Answer {
                version: version.filter(|_| !holds.stops()),
                holds,
                jitter_seconds: 0,
                critical: channel.critical,
            }
        }
        Ask::Directed(install) => {
            if crate::planted!(PinSkipsDirective) {
                holds = holds.iter().filter(|h| *h != Hold::Pinned).collect();
            }
            if crate::planted!(FreezeSkipsDirective) {
                holds = holds.iter().filter(|h| *h != Hold::Frozen).collect();
            }
            if mode_set {
                add_mode(&mut holds, mode);
            }
            if fleet.revocation.revokes(install.target) && !crate::planted!(RevokedDirective) {
                holds.add(Hold::Revoked);
            }
            let timing = install.timing;
            if timing.not_before.is_some_and(|t| fleet.now < t) {
                holds.add(Hold::NotYet);
            }
            if timing.not_after.is_some_and(|t| fleet.now >= t) {
                holds.add(Hold::Expired);
            }
            if timing.keep_windows
                && host_window(fleet, host).is_some_and(|w| !w.is_open(fleet.now))
            {
                holds.add(Hold::OutsideWindow);
            }
            Answer {
                version: (!holds.stops()).then(|| install.target.clone()),
                holds,
                jitter_seconds: 0,
                critical: false,
            }
        }
    }
}

/// find's answer from a rollout alone, for a host of the agent presenting `group`
/// with `updater_id`: what the planner, the simulator and tests ask when nothing else
/// (a freeze, a pin, a directive) is in their fleet. The mode is the rollout's.
pub fn rollout_answer(
    rollout: Option<&AutoUpdateAgentRollout>,
    group: &str,
    updater_id: &str,
) -> Answer {
    answer(
        &Fleet::new(rollout, Timestamp::UNIX_EPOCH),
        &Host::new(AGENT, group, updater_id),
        Ask::Find,
    )
}

/// The maintenance window of the group that serves `host` in the rollout, when there
/// is one: the hosts' windows a directive's installs keep to.
fn host_window(fleet: &Fleet<'_>, host: &Host<'_>) -> Option<crate::domain::window::Calendar> {
    let rollout = fleet.rollout?;
    let group = rollout.serving_group(host.group)?;
    Some(crate::domain::rollout::group_window(&rollout.spec, group))
}

/// When a directive's install on `host` may start, given the answer for it now: now
/// (no hold), an instant (only its `not_before` or its group's window hold it), or
/// never (its `not_after` comes first, or another hold that no clock lifts: a stop
/// lifts when a person lifts it).
pub fn directed_start(
    fleet: &Fleet<'_>,
    host: &Host<'_>,
    timing: Timing,
    answer: &Answer,
) -> DirectedStart {
    let timed = Holds::of([Hold::NotYet, Hold::OutsideWindow, Hold::Expired]);
    if answer.holds.is_empty() {
        return DirectedStart::Now;
    }
    if answer.holds.iter().any(|h| !timed.contains(h)) {
        return DirectedStart::Held(answer.holds);
    }
    if answer.holds.contains(Hold::Expired) {
        return DirectedStart::Never;
    }
    let mut at = timing.not_before.map_or(fleet.now, |t| t.max(fleet.now));
    if timing.keep_windows
        && let Some(window) = host_window(fleet, host)
        && !window.is_open(at)
    {
        match window.next_open(at) {
            Some(open) => at = open,
            None => return DirectedStart::Never,
        }
    }
    if timing.not_after.is_some_and(|t| at >= t) {
        return DirectedStart::Never;
    }
    DirectedStart::At(at)
}

/// [`directed_start`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectedStart {
    Now,
    At(Timestamp),
    /// Its time rules leave it no instant to start.
    Never,
    /// Holds no clock lifts (a stop, a revoked target).
    Held(Holds),
}

/// The stops that hold a host on every path: the trust requirement, a freeze, its pin,
/// the replica cut off.
fn host_stops(fleet: &Fleet<'_>, host: &Host<'_>) -> Holds {
    let mut holds = Holds::NONE;
    if fleet.require_trust && !host.pins_root {
        holds.add(Hold::TrustRequired);
    }
    if fleet.freeze.is_some_and(|f| f.holds(host.product)) {
        holds.add(Hold::Frozen);
    }
    if !host.updater_id.is_empty() && fleet.pins.until(host.updater_id, host.product).is_some() {
        holds.add(Hold::Pinned);
    }
    if fleet.cut_off && !crate::planted!(CutOffIgnored) {
        holds.add(Hold::CutOff);
    }
    holds
}

fn add_mode(holds: &mut Holds, mode: Mode) {
    match mode {
        Mode::Enabled => {}
        Mode::Suspended => holds.add(Hold::ModeSuspended),
        Mode::Disabled => holds.add(Hold::ModeDisabled),
    }
}

/// find's answer: the rollout table for the group the host counts in, then the stops.
fn find(fleet: &Fleet<'_>, host: &Host<'_>, mut holds: Holds, mode: Mode) -> Answer {
    let group = counted_group(fleet.rollout, host);
    if governed_by_directive(fleet, host, group) {
        holds.add(Hold::Directive);
    }
    let Some(rollout) = fleet.rollout else {
        holds.add(Hold::NoRollout);
        return Answer {
            version: None,
            holds,
            jitter_seconds: jitter(fleet, DEFAULT_JITTER_SECONDS),
            critical: false,
        };
    };
    add_mode(&mut holds, mode);
    let row = table::row(rollout, group, host.updater_id);
    if let Some(h) = row.hold {
        holds.add(h);
    }
    if fleet.revocation.revokes(&row.version) {
        holds.add(Hold::Revoked);
    }
    let version = if holds.contains(Hold::Directive) {
        None
    } else if holds.stops() && !crate::planted!(FirstInstallTakesTarget) {
        let good = known_good(rollout, fleet.revocation);
        if good.is_none() {
            // The stop names no version because the known-good one is itself revoked:
            // a host installing nothing says why.
            holds.add(Hold::Revoked);
        }
        good
    } else {
        Some(row.version)
    };
    Answer {
        version,
        holds,
        jitter_seconds: jitter(fleet, row.jitter_seconds),
        critical: false,
    }
}

fn jitter(fleet: &Fleet<'_>, seconds: u64) -> u64 {
    if fleet.jitter { seconds } else { 0 }
}

/// The fleet's last known-good version: the rollout's start version, unless revoked.
pub fn known_good(rollout: &AutoUpdateAgentRollout, revocation: &Revocation) -> Option<Version> {
    let start = &rollout.spec.start_version;
    (!revocation.revokes(start) || crate::planted!(RevokedStart)).then(|| start.clone())
}

/// The group a host counts in: where the groups' `match_labels` place it, by the
/// labels it sends (so that every replica places it alike, before its first heartbeat
/// to it too), else where this replica's heartbeats placed it, else the one it
/// presents.
pub fn counted_group<'a>(rollout: Option<&'a AutoUpdateAgentRollout>, host: &Host<'a>) -> &'a str {
    match rollout {
        Some(r) if rollout::places_by_labels(r) => match host.facts {
            Some(f) if !crate::planted!(PlacedByMemory) => rollout::place(r, host.group, &f.labels),
            _ => host.recorded.placed_group.unwrap_or(host.group),
        },
        _ => host.group,
    }
}

/// Whether the answer for `host` reads what the replica answering recorded of it
/// ([`Host::recorded`]): only for an updater that sends no facts but names itself, and
/// only where the rollout places hosts by labels ([`counted_group`]) or a directive is
/// active (`governed_by_directive`). A server looks its memory up only then.
pub fn reads_recorded(fleet: &Fleet<'_>, host: &Host<'_>) -> bool {
    host.facts.is_none()
        && !host.updater_id.is_empty()
        && (fleet.rollout.is_some_and(rollout::places_by_labels) || fleet.directive.is_some())
}

/// Whether the active directive governs the host: by the facts it sends, as every
/// replica holds the directive; from an updater that sends none, by this replica's
/// last pass over it.
fn governed_by_directive(fleet: &Fleet<'_>, host: &Host<'_>, group: &str) -> bool {
    let Some(directive) = fleet.directive else {
        return false;
    };
    match host.facts {
        Some(f) => directive.governs(&HostFacts {
            labels: Labels::Map(&f.labels),
            group,
            version: &f.version,
            arch: &f.arch,
            os: &f.os,
            fips: f.fips,
            installers: Names::Strings(&f.installers),
        }),
        None => !host.updater_id.is_empty() && host.recorded.governed,
    }
}

/// The tools' version (`tools_version`, `tools_auto_update`): the version resource's
/// own tools target, else the agents' target once no canary or group has failed it
/// (a target halted at its canary is not handed to clients), else the start version;
/// never a revoked one. Clients update automatically only when the config's tools mode
/// is enabled and no freeze of every product holds.
pub fn tools(fleet: &Fleet<'_>) -> (Option<Version>, bool) {
    let named = fleet
        .version
        .and_then(|v| v.spec.tools.as_ref())
        .map(|t| t.target_version.clone());
    let version = named
        .or_else(|| {
            let r = fleet.rollout?;
            if rollout::target_failed(r).is_some() {
                Some(r.spec.start_version.clone())
            } else {
                Some(r.spec.target_version.clone())
            }
        })
        .or_else(|| {
            fleet
                .version
                .and_then(|v| v.spec.agents.as_ref())
                .map(|a| a.target_version.clone())
        })
        .filter(|v| !fleet.revocation.revokes(v));
    let auto = version.is_some()
        && fleet
            .config
            .is_some_and(|c| c.tools_mode() == crate::domain::resource::ToolsMode::Enabled)
        && fleet.freeze.is_none_or(|f| !f.holds("tools"))
        && !fleet.cut_off;
    (version, auto)
}
