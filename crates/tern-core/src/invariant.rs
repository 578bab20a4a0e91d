//! The fleet-safety invariant as users rely on it, checked over a trace of what
//! happened: what the control plane said (each product's rollout, the mode an operator
//! set, a freeze, server pins, the signed minimums, a replica cut off) and what hosts
//! did (started installing a version of a product, by which path, for what reason) and
//! reported (the version they run, healthy or not).
//! Whoever drives a fleet (the end-to-end harness, the simulator with its faults)
//! records a [`Trace`] and ends by asking [`check`]; the answer is the first event that
//! broke a rule, or nothing.
//!
//! **The judge is not the defendant.** No rule here calls the code it judges (the one
//! answer in `gate`, the host's `host_update`, the rollout rules in `rollout`,
//! `backpressure`, `canary`, `reconcile`): each rule is stated on its own terms, over
//! the recorded state and nothing else, so a bug in the code that decides cannot hide
//! in the code that checks. A test holds this module to that (it may name only the
//! resource types, versions and reason strings of the crate), and the planted-holes
//! suite shows each rule convicting a hole put back on purpose.
//!
//! The rules (docs/rollouts.md, "The fleet-safety invariant"):
//! 1. **Stops.** No install of any product by any path while a freeze holds that
//!    product, the host is pinned by the server, the replica serving it is cut off,
//!    or the mode an operator set is not `enabled` (for the rollout a mode set nowhere
//!    is `disabled`; find also stops with no rollout). Under a stop a first install
//!    takes the rollout's start version and nothing else. The one exception is a
//!    person's explicit command on the host (`pin --force-version`).
//! 2. **Revoked is never.** No install, by anyone, of a version below the signed
//!    minimum of its release line.
//! 3. **The rollout's table.** A host following the rollout installs the version its
//!    group's state names (unstarted, rolled back, or a canary group's other hosts: the
//!    start version; its canaries, an active or a done group: the target), or the start
//!    version; a time-based group outside its window (`done`) installs nothing on its
//!    own.
//! 4. **A failed canary contains its version.** Once a canary of group G failed on V,
//!    at most G's `canary_count` hosts of G ever installed V on their own, and no host
//!    of a group after G did.
//! 5. **Canaries first.** In a halt-on-error group with canaries, at most
//!    `canary_count` hosts install the target before its canaries succeeded (or an
//!    operator moved the group by hand). A canary succeeded when the rollout marks it
//!    so and the host's own report said it runs the target, healthy: the rollout's
//!    word alone is not taken where the trace records what hosts reported.
//! 6. **Group order.** Under halt-on-error no group leaves `unstarted` (for canary,
//!    active or done) while an earlier group is not done, unless an operator moved it.
//! 7. **Trust.** A host that pins a release root never installs an unsigned version.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::domain::reason;
use crate::domain::resource::{
    AutoUpdateAgentRollout, GroupState, Mode, RolloutGroup, Schedule, Strategy,
};
use crate::domain::version::{Version, normalize};

/// Why a host started an install.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallKind {
    /// Its own timer or watcher, following what it was told.
    Scheduled,
    /// `update --now`: a person on the host; a stop still holds.
    AskedNow,
    /// Nothing was installed: enrolling the host.
    FirstInstall,
    /// `pin --force-version`: a person's explicit override on the host.
    Forced,
    /// A shortcut of the host's own: an unhealthy agent, or one too far behind.
    Repair,
}

/// By which path the host was told what to install.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// find: the rollout.
    #[default]
    Find,
    /// A channel (seed 001).
    Channel,
    /// A version directive's install instruction.
    Directive,
}

fn agent() -> String {
    "agent".to_string()
}

fn is_agent(p: &str) -> bool {
    p == "agent"
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceEvent {
    /// What the control plane said from `at` on, for one product.
    State {
        at: Timestamp,
        #[serde(default = "agent", skip_serializing_if = "is_agent")]
        product: String,
        /// The product's rollout as the leader wrote it.
        rollout: Option<Box<AutoUpdateAgentRollout>>,
        /// The mode an operator set (config and version combined); `None`: set
        /// nowhere. Absent from older traces: the rollout's own mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<Mode>,
        /// Traces that record `mode` say so: `None` above then means set nowhere.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        mode_recorded: bool,
        /// A freeze holds this product.
        frozen: bool,
        /// The server pins (updater id → until).
        #[serde(default)]
        pins: BTreeMap<String, Timestamp>,
        /// The signed minimums (release line `MAJOR` or `MAJOR.MINOR` → version).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        minimums: BTreeMap<String, String>,
        /// The replica serving the hosts is cut off from its store.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cut_off: bool,
    },
    /// A host started installing `to` (from `from`) at `at`.
    Install {
        at: Timestamp,
        #[serde(default = "agent", skip_serializing_if = "is_agent")]
        product: String,
        /// Its updater id.
        host: String,
        /// The group it presents.
        group: String,
        /// Its labels: where groups' `match_labels` place it.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        labels: BTreeMap<String, String>,
        from: Option<String>,
        to: String,
        kind: InstallKind,
        #[serde(default)]
        via: Via,
        /// Whether the release keys signed `to`, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signed: Option<bool>,
        /// The host pins a release root.
        #[serde(default)]
        pinned_root: bool,
    },
    /// What a host told the control plane it runs at `at`: its version (`None`: no
    /// agent) and whether its agent is healthy (`None`: it cannot tell). Harnesses
    /// record what the host said, a lying host's lie included, each time it changes.
    Report {
        at: Timestamp,
        #[serde(default = "agent", skip_serializing_if = "is_agent")]
        product: String,
        /// Its updater id.
        host: String,
        version: Option<String>,
        healthy: Option<bool>,
    },
}

impl TraceEvent {
    pub fn at(&self) -> Timestamp {
        match self {
            TraceEvent::State { at, .. }
            | TraceEvent::Install { at, .. }
            | TraceEvent::Report { at, .. } => *at,
        }
    }

    /// A state of the agent product, as the simulator and older harnesses record it:
    /// the rollout (its mode the one in force), a freeze, the pins.
    pub fn agent_state(
        at: Timestamp,
        rollout: Option<AutoUpdateAgentRollout>,
        frozen: bool,
        pins: BTreeMap<String, Timestamp>,
    ) -> Self {
        TraceEvent::State {
            at,
            product: agent(),
            rollout: rollout.map(Box::new),
            mode: None,
            mode_recorded: false,
            frozen,
            pins,
            minimums: BTreeMap::new(),
            cut_off: false,
        }
    }
}

/// What happened, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub events: Vec<TraceEvent>,
    /// How long what the control plane says may take to reach the replica answering a
    /// host (its store-contact bound; 0 where every answer is exact): an install is
    /// within the rules when a state of the last `grace_seconds` allowed it.
    #[serde(default)]
    pub grace_seconds: i64,
}

/// The first event that broke the invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// Its index in the trace.
    pub index: usize,
    /// The rule (`stop`, `revoked`, `table`, `canary_containment`, `canaries_first`,
    /// `group_order`, `trust`).
    pub rule: &'static str,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the fleet-safety invariant broke at event {} ({}): {}",
            self.index, self.rule, self.message
        )
    }
}

/// One recorded state of a product, as the rules read it.
#[derive(Clone, Copy)]
struct Said<'t> {
    rollout: Option<&'t AutoUpdateAgentRollout>,
    mode: Option<Mode>,
    frozen: bool,
    pins: &'t BTreeMap<String, Timestamp>,
    minimums: &'t BTreeMap<String, String>,
    cut_off: bool,
}

/// A version a canary failed on, in a group: what rule 4 holds it to.
struct Contained {
    group_index: usize,
    canary_count: u64,
}

/// What the judge keeps per product.
#[derive(Default)]
struct Product<'t> {
    /// Every state said, with when: an install may follow one of the last
    /// `grace_seconds`.
    said: Vec<(Timestamp, Said<'t>)>,
    previous: Option<&'t AutoUpdateAgentRollout>,
    /// version → (group name → containment)
    contained: BTreeMap<String, BTreeMap<String, Contained>>,
    /// Hosts that installed a version in a group.
    installs: BTreeMap<(String, String), BTreeSet<String>>,
    /// Per (rollout, group): whether its canaries passed, and who installed the
    /// target before they did.
    vetted: BTreeMap<(Option<Timestamp>, String), bool>,
    unvetted: BTreeMap<(Option<Timestamp>, String), BTreeSet<String>>,
    /// host → what it reported, in order. Empty when the trace records no reports of
    /// this product.
    reports: BTreeMap<&'t str, Vec<Reported<'t>>>,
}

/// One report of a host, as rule 5 reads it.
struct Reported<'t> {
    at: Timestamp,
    version: Option<&'t str>,
    healthy: Option<bool>,
}

/// Checks `trace` against the invariant; the first violation, if any.
pub fn check(trace: &Trace) -> Result<(), Violation> {
    let mut products: BTreeMap<&str, Product<'_>> = BTreeMap::new();
    for (index, event) in trace.events.iter().enumerate() {
        let violation = |rule, message: String| Violation {
            index,
            rule,
            message,
        };
        match event {
            TraceEvent::State {
                at,
                product,
                rollout,
                mode,
                mode_recorded,
                frozen,
                pins,
                minimums,
                cut_off,
            } => {
                let p = products.entry(product.as_str()).or_default();
                let rollout = rollout.as_deref();
                if let Some(r) = rollout {
                    if let Some(message) = order_broken(r, p.previous) {
                        return Err(violation("group_order", message));
                    }
                    record_canaries(r, p, *at, trace.grace_seconds);
                }
                p.previous = rollout;
                let mode = match (mode_recorded, rollout) {
                    (true, _) => *mode,
                    (false, Some(r)) => Some(r.spec.autoupdate_mode),
                    (false, None) => None,
                };
                p.said.push((
                    *at,
                    Said {
                        rollout,
                        mode,
                        frozen: *frozen,
                        pins,
                        minimums,
                        cut_off: *cut_off,
                    },
                ));
            }
            TraceEvent::Report {
                at,
                product,
                host,
                version,
                healthy,
            } => {
                let p = products.entry(product.as_str()).or_default();
                p.reports.entry(host.as_str()).or_default().push(Reported {
                    at: *at,
                    version: version.as_deref(),
                    healthy: *healthy,
                });
            }
            TraceEvent::Install {
                at,
                product,
                host,
                group,
                labels,
                from,
                to,
                kind,
                via,
                signed,
                pinned_root,
            } => {
                if *pinned_root && *signed == Some(false) {
                    return Err(violation(
                        "trust",
                        format!(
                            "host {host} pins a release root and installed {to}, which the release keys did not sign"
                        ),
                    ));
                }
                let p = products.entry(product.as_str()).or_default();
                let since = at
                    .checked_sub(jiff::SignedDuration::from_secs(trace.grace_seconds))
                    .unwrap_or(*at);
                // The states that may still be what the host was told: the last one
                // at or before `since`, and every one after it.
                let first = p.said.iter().rposition(|(t, _)| *t <= since).unwrap_or(0);
                let (no_pins, no_minimums) = (BTreeMap::new(), BTreeMap::new());
                let nothing_said = Said {
                    rollout: None,
                    mode: None,
                    frozen: false,
                    pins: &no_pins,
                    minimums: &no_minimums,
                    cut_off: false,
                };
                let candidates: Vec<Said<'_>> = if p.said.is_empty() {
                    vec![nothing_said]
                } else {
                    p.said[first..].iter().map(|(_, s)| *s).collect()
                };
                let install = Install {
                    host,
                    group,
                    labels,
                    to,
                    kind: *kind,
                    via: *via,
                };
                let mut refusal = None;
                for s in &candidates {
                    match judge(s, &install) {
                        Ok(()) => {
                            refusal = None;
                            break;
                        }
                        Err(why) => {
                            refusal = Some(why);
                        }
                    }
                }
                if let Some((rule, why)) = refusal {
                    return Err(violation(
                        rule,
                        format!(
                            "host {host} (group {group:?}) started installing {product} {to} (from {}, {kind:?} via {via:?}), but {why}",
                            from.as_deref().unwrap_or("nothing"),
                        ),
                    ));
                }
                if *via != Via::Find || matches!(kind, InstallKind::Forced) {
                    continue;
                }
                let Some(rollout) = p.said.last().and_then(|(_, s)| s.rollout) else {
                    continue;
                };
                let Some((gi, g)) = serving(rollout, placed(rollout, group, labels)) else {
                    continue;
                };
                let to_n = normalize(to);
                p.installs
                    .entry((to_n.clone(), g.name.clone()))
                    .or_default()
                    .insert(host.clone());
                if !moved_by_hand(g)
                    && let Some(message) = containment_broken(rollout, p, &to_n, gi, g, host)
                {
                    return Err(violation("canary_containment", message));
                }
                if *kind != InstallKind::FirstInstall
                    && let Some(message) = canaries_skipped(rollout, p, &to_n, g, host)
                {
                    return Err(violation("canaries_first", message));
                }
            }
        }
    }
    Ok(())
}

/// An install, as the rules read it.
struct Install<'t> {
    host: &'t str,
    group: &'t str,
    labels: &'t BTreeMap<String, String>,
    to: &'t str,
    kind: InstallKind,
    via: Via,
}

/// Rules 1 to 3 for one install against one recorded state: `Err` names the rule and
/// says what the state held.
fn judge(s: &Said<'_>, i: &Install<'_>) -> Result<(), (&'static str, String)> {
    if let Some(why) = revoked(s.minimums, i.to) {
        return Err(("revoked", why));
    }
    if i.kind == InstallKind::Forced {
        return Ok(());
    }
    let mut stops: Vec<String> = Vec::new();
    if s.frozen {
        stops.push("a freeze holds it".into());
    }
    if s.pins.contains_key(i.host) {
        stops.push("the server pins the host".into());
    }
    if s.cut_off {
        stops.push("the replica serving it is cut off from its store".into());
    }
    match (i.via, s.mode) {
        (_, Some(Mode::Enabled)) | (Via::Channel | Via::Directive, None) => {}
        (_, Some(m)) => stops.push(format!("the mode is {}", m.as_str())),
        (Via::Find, None) => stops.push("no mode is set (disabled)".into()),
    }
    if i.via == Via::Find && s.rollout.is_none() {
        stops.push("there is no rollout".into());
    }
    if !stops.is_empty() {
        let stops = stops.join(", ");
        if i.kind != InstallKind::FirstInstall {
            return Err(("stop", stops));
        }
        // Under a stop a first install takes the start version, and only from the
        // rollout (a channel or a directive names no known-good version).
        return match (i.via, s.rollout) {
            (Via::Find, Some(r)) if same(&r.spec.start_version, i.to) => Ok(()),
            (Via::Find, Some(r)) => Err((
                "stop",
                format!(
                    "{stops}, and under a stop a first install takes the start version {}",
                    r.spec.start_version
                ),
            )),
            _ => Err((
                "stop",
                format!("{stops}, and nothing named a known-good version"),
            )),
        };
    }
    let (Via::Find, Some(r)) = (i.via, s.rollout) else {
        return Ok(());
    };
    table(r, i)
}

/// Rule 3: what the rollout's table names a host of the group, restated.
fn table(r: &AutoUpdateAgentRollout, i: &Install<'_>) -> Result<(), (&'static str, String)> {
    let (start, target) = (&r.spec.start_version, &r.spec.target_version);
    if same(start, i.to) {
        // Back to the version the fleet started from: never a spread.
        return Ok(());
    }
    let served = match r.spec.schedule {
        Schedule::Immediate => None,
        Schedule::Regular => serving(r, placed(r, i.group, i.labels)),
    };
    let Some((_, g)) = served else {
        return if same(target, i.to) {
            Ok(())
        } else {
            Err(("table", format!("the rollout names {target}, not {}", i.to)))
        };
    };
    let is_canary = g.canaries.iter().any(|c| c.updater_id == i.host);
    let named = match g.state {
        GroupState::Unstarted | GroupState::Rolledback => start,
        GroupState::Canary if !is_canary => start,
        GroupState::Canary | GroupState::Active | GroupState::Done => target,
    };
    if !same(named, i.to) {
        return Err((
            "table",
            format!(
                "group {} is {} and names {named} to this host",
                g.name,
                g.state.as_str()
            ),
        ));
    }
    if g.state == GroupState::Done
        && r.spec.strategy == Strategy::TimeBased
        && i.kind != InstallKind::AskedNow
        && i.kind != InstallKind::FirstInstall
    {
        return Err((
            "table",
            format!("group {} is outside its window (done, time-based)", g.name),
        ));
    }
    Ok(())
}

/// Rule 2: why `to` is revoked under `minimums`, if it is.
fn revoked(minimums: &BTreeMap<String, String>, to: &str) -> Option<String> {
    if minimums.is_empty() {
        return None;
    }
    let Ok(v) = Version::parse(to) else {
        return Some(format!("{to} is no version, and minimums are signed"));
    };
    for (line, min) in minimums {
        let mut parts = line.trim_start_matches('v').split('.');
        let major = parts.next().and_then(|m| m.parse::<u64>().ok());
        let minor = parts.next().map(|m| m.parse::<u64>().ok());
        let in_line = major == Some(v.0.major)
            && match minor {
                None => true,
                Some(m) => m == Some(v.0.minor),
            };
        if in_line
            && let Ok(min) = Version::parse(min)
            && v < min
        {
            return Some(format!(
                "{to} is below the signed minimum {min} of line {line}"
            ));
        }
    }
    None
}

fn same(v: &Version, text: &str) -> bool {
    normalize(&v.to_string()) == normalize(text)
}

/// The group a host counts in, restated: under `host_group: override` a group it
/// presents that the rollout has; else the first group whose `match_labels` its
/// labels all hold; else the one it presents.
fn placed<'r>(
    r: &'r AutoUpdateAgentRollout,
    presented: &'r str,
    labels: &BTreeMap<String, String>,
) -> &'r str {
    let groups = &r.status.groups;
    if groups.iter().all(|g| g.config.match_labels.is_empty()) {
        return presented;
    }
    let known = groups.iter().any(|g| g.name == presented);
    if known && r.spec.host_group == crate::domain::resource::HostGroup::Override {
        return presented;
    }
    for g in groups {
        if !g.config.match_labels.is_empty()
            && g.config
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        {
            return &g.name;
        }
    }
    presented
}

/// The group serving a host presenting `name`, restated: that group, else the last.
fn serving<'r>(r: &'r AutoUpdateAgentRollout, name: &str) -> Option<(usize, &'r RolloutGroup)> {
    let groups = &r.status.groups;
    groups
        .iter()
        .enumerate()
        .find(|(_, g)| g.name == name)
        .or_else(|| groups.len().checked_sub(1).map(|i| (i, &groups[i])))
}

fn moved_by_hand(g: &RolloutGroup) -> bool {
    matches!(
        g.last_update_reason.as_str(),
        reason::MANUAL_TRIGGER | reason::MANUAL_RESET | reason::MANUAL_FORCED_DONE
    )
}

/// Notes the versions the rollout's canaries failed on, and the groups whose canaries
/// passed: each canary marked a success, and (where the trace records what hosts
/// reported) each one's report of the state's last `grace` seconds naming the target,
/// healthy. A rollout that says its canaries passed is not taken at its word.
fn record_canaries(r: &AutoUpdateAgentRollout, p: &mut Product<'_>, at: Timestamp, grace: i64) {
    let target = normalize(&r.spec.target_version.to_string());
    for (i, g) in r.status.groups.iter().enumerate() {
        if g.canaries.iter().any(|c| c.failed) {
            p.contained
                .entry(target.clone())
                .or_default()
                .entry(g.name.clone())
                .or_insert_with(|| Contained {
                    group_index: i,
                    canary_count: u64::try_from(g.config.canary_count.max(0)).unwrap_or(0),
                });
        }
        let passed = (!g.canaries.is_empty()
            && g.canaries
                .iter()
                .all(|c| c.success && reported_healthy_on(p, &c.updater_id, &target, at, grace)))
            || moved_by_hand(g);
        *p.vetted
            .entry((r.status.start_time, g.name.clone()))
            .or_insert(false) |= passed;
    }
}

/// Whether `host` told the control plane it runs `version` healthy in a report that may
/// still be what it knew at `at`: the last one at or before `at - grace`, or a later
/// one. Always true for a trace that records no reports of the product (older traces,
/// harnesses that see no heartbeats): there the rollout's word is all there is.
fn reported_healthy_on(
    p: &Product<'_>,
    host: &str,
    version: &str,
    at: Timestamp,
    grace: i64,
) -> bool {
    if p.reports.is_empty() {
        return true;
    }
    let Some(reports) = p.reports.get(host) else {
        return false;
    };
    let since = at
        .checked_sub(jiff::SignedDuration::from_secs(grace))
        .unwrap_or(at);
    let first = reports.iter().rposition(|r| r.at <= since).unwrap_or(0);
    reports[first..].iter().any(|r| {
        r.at <= at && r.healthy == Some(true) && r.version.is_some_and(|v| normalize(v) == version)
    })
}

/// Rule 4 for `host`'s install of `version` in group `g` (already counted).
fn containment_broken(
    r: &AutoUpdateAgentRollout,
    p: &Product<'_>,
    version: &str,
    gi: usize,
    g: &RolloutGroup,
    host: &str,
) -> Option<String> {
    let failed = p.contained.get(version)?;
    for (name, c) in failed {
        if *name == g.name {
            let n = p
                .installs
                .get(&(version.to_string(), g.name.clone()))
                .map_or(0, BTreeSet::len) as u64;
            if n > c.canary_count {
                return Some(format!(
                    "{version} failed on a canary of group {name}, and {n} of its hosts installed it (canary_count {})",
                    c.canary_count
                ));
            }
        } else if gi > c.group_index && r.status.groups.len() > gi {
            return Some(format!(
                "{version} failed on a canary of group {name}, and host {host} of the later group {} installed it",
                g.name
            ));
        }
    }
    None
}

/// Rule 5 for `host`'s install of `version` in group `g`.
fn canaries_skipped(
    r: &AutoUpdateAgentRollout,
    p: &mut Product<'_>,
    version: &str,
    g: &RolloutGroup,
    host: &str,
) -> Option<String> {
    if r.spec.strategy != Strategy::HaltOnError
        || r.spec.schedule != Schedule::Regular
        || normalize(&r.spec.target_version.to_string()) != version
        || g.config.canary_count <= 0
    {
        return None;
    }
    let key = (r.status.start_time, g.name.clone());
    if p.vetted.get(&key).copied().unwrap_or(false) {
        return None;
    }
    let hosts = p.unvetted.entry(key).or_default();
    hosts.insert(host.to_string());
    let n = hosts.len() as u64;
    let max = u64::try_from(g.config.canary_count.max(0)).unwrap_or(0);
    (n > max).then(|| {
        format!(
            "{n} hosts of group {} installed {version} before its canaries passed (canary_count {max}): the group skipped its canaries, or went on without each canary's own report of {version}, healthy",
            g.name
        )
    })
}

/// Rule 6 on one state: a halt-on-error group that left unstarted (for canary, active
/// or done) while an earlier group is not done, other than by an operator's hand.
fn order_broken(
    r: &AutoUpdateAgentRollout,
    previous: Option<&AutoUpdateAgentRollout>,
) -> Option<String> {
    if r.spec.strategy != Strategy::HaltOnError || r.spec.schedule == Schedule::Immediate {
        return None;
    }
    let groups = &r.status.groups;
    for (i, g) in groups.iter().enumerate() {
        if !matches!(
            g.state,
            GroupState::Canary | GroupState::Active | GroupState::Done
        ) {
            continue;
        }
        let was = previous
            .filter(|p| p.status.start_time == r.status.start_time)
            .and_then(|p| p.status.groups.iter().find(|x| x.name == g.name))
            .map(|p| p.state);
        // Only a group that just left unstarted is judged (a rollout seen for the
        // first time counts as having been unstarted), and not one an operator moved.
        if was.is_some_and(|s| s != GroupState::Unstarted) || moved_by_hand(g) {
            continue;
        }
        if let Some(e) = groups[..i].iter().find(|e| e.state != GroupState::Done) {
            return Some(format!(
                "group {} is {} while the earlier group {} is {}",
                g.name,
                g.state.as_str(),
                e.name,
                e.state.as_str()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests;
