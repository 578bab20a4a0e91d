//! The fleet-safety invariant as users rely on it, checked over a trace of what
//! happened: what the control plane said (the rollout with the mode in force, a freeze,
//! server pins) and what hosts did (started installing a version, for what reason).
//! Whoever drives a fleet (the end-to-end harness, the simulator with its faults)
//! records a [`Trace`] and ends by asking [`check`]; the answer is the first event that
//! broke a rule, or nothing.
//!
//! The rules (docs/rollouts.md, "The fleet-safety invariant"):
//! 1. **The gate.** A host's own install (its timer, or `update --now`) starts only
//!    where find's answer at that moment lets it: told to update to that version, or a
//!    repair the answer allows ([`crate::find::Hold::allows_repair`]), or, for
//!    `update --now`, a schedule hold. So never while the fleet is frozen, the mode in
//!    force is not enabled, or the host's pin holds; never outside the group's order,
//!    canaries, window, backpressure budget or topology limit.
//! 2. **A failed canary contains its version.** Once a canary of group G failed on
//!    version V, at most G's `canary_count` hosts of G ever installed V on their own, and
//!    no host of a group after G did.
//! 3. **Group order.** Under halt-on-error no group is in canary, active or done while
//!    an earlier group is not done, unless an operator started it by hand.
//! 4. **Trust.** A host that pins a release root never installs an unsigned version.
//! 5. **Canaries first.** In a halt-on-error group with canaries, at most
//!    `canary_count` hosts install the target before its canaries succeeded (or an
//!    operator moved the group by hand): a group never skips its canaries while it has
//!    hosts.
//!
//! First installs (enrolling a host) and an operator's explicit override on the host
//! (`pin --force-version`) are recorded but not held to rules 1 and 2.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::find::{self, FindInputs};
use crate::reason;
use crate::resource::{AutoUpdateAgentRollout, GroupState, Schedule, Strategy};
use crate::version::normalize;

/// Why a host started an install.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallKind {
    /// Its own timer or watcher, following find.
    Scheduled,
    /// `update --now`: a person on the host; a stop still holds.
    AskedNow,
    /// Nothing was installed: enrolling the host.
    FirstInstall,
    /// `pin --force-version`: an operator's explicit override on the host.
    Forced,
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceEvent {
    /// What the control plane said from `at` on: the rollout find serves (its mode the
    /// mode in force), whether a freeze holds, the server pins (updater id → until).
    State {
        at: Timestamp,
        rollout: Option<Box<AutoUpdateAgentRollout>>,
        frozen: bool,
        #[serde(default)]
        pins: BTreeMap<String, Timestamp>,
    },
    /// A host started installing `to` (from `from`) at `at`.
    Install {
        at: Timestamp,
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
        /// Whether the release keys signed `to`, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signed: Option<bool>,
        /// The host pins a release root.
        #[serde(default)]
        pinned_root: bool,
    },
}

impl TraceEvent {
    pub fn at(&self) -> Timestamp {
        match self {
            TraceEvent::State { at, .. } | TraceEvent::Install { at, .. } => *at,
        }
    }
}

/// What happened, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub events: Vec<TraceEvent>,
    /// How long what the control plane says may take to reach the replica answering a
    /// host (its store-contact bound; 0 where every answer is exact): an install is
    /// within the gate when a state of the last `grace_seconds` allowed it.
    #[serde(default)]
    pub grace_seconds: i64,
}

/// The first event that broke the invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// Its index in the trace.
    pub index: usize,
    /// The rule (`gate`, `canary_containment`, `group_order`, `trust`).
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

/// A version a canary failed on, in a group: what rule 2 holds it to.
struct Contained {
    group_index: usize,
    canary_count: u64,
}

/// Checks `trace` against the invariant; the first violation, if any.
pub fn check(trace: &Trace) -> Result<(), Violation> {
    // The control plane's last word: rollout, freeze, pins.
    type Said<'t> = (
        Option<&'t AutoUpdateAgentRollout>,
        bool,
        &'t BTreeMap<String, Timestamp>,
    );
    let mut state: Option<Said<'_>> = None;
    // Every state said, with when: the gate may take one of the last `grace_seconds`.
    let mut said: Vec<(Timestamp, Said<'_>)> = Vec::new();
    // version → (group name → containment)
    let mut contained: BTreeMap<String, BTreeMap<String, Contained>> = BTreeMap::new();
    // Installs of each version per group, before or after a failure was seen.
    let mut installs: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut previous: Option<&AutoUpdateAgentRollout> = None;
    // Per (rollout, group): whether its canaries passed, and who installed the target
    // before they did.
    let mut vetted: BTreeMap<(Option<Timestamp>, String), bool> = BTreeMap::new();
    let mut unvetted: BTreeMap<(Option<Timestamp>, String), BTreeSet<String>> = BTreeMap::new();
    for (index, event) in trace.events.iter().enumerate() {
        let violation = |rule, message: String| Violation {
            index,
            rule,
            message,
        };
        match event {
            TraceEvent::State {
                rollout,
                frozen,
                pins,
                ..
            } => {
                if let Some(r) = rollout.as_deref() {
                    if let Some(message) = order_broken(r, previous) {
                        return Err(violation("group_order", message));
                    }
                    failed_canaries(r, &mut contained);
                    for g in &r.status.groups {
                        let passed = (!g.canaries.is_empty()
                            && g.canaries.iter().all(|c| c.success))
                            || matches!(
                                g.last_update_reason.as_str(),
                                reason::MANUAL_TRIGGER
                                    | reason::MANUAL_RESET
                                    | reason::MANUAL_FORCED_DONE
                            );
                        let v = vetted
                            .entry((r.status.start_time, g.name.clone()))
                            .or_insert(false);
                        *v |= passed;
                    }
                    previous = Some(r);
                } else {
                    previous = None;
                }
                state = Some((rollout.as_deref(), *frozen, pins));
                said.push((event.at(), (rollout.as_deref(), *frozen, pins)));
            }
            TraceEvent::Install {
                at,
                host,
                group,
                labels,
                from,
                to,
                kind,
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
                if matches!(kind, InstallKind::FirstInstall | InstallKind::Forced) {
                    continue;
                }
                let empty = BTreeMap::new();
                let (rollout, _, _) = state.unwrap_or((None, false, &empty));
                let since = at
                    .checked_sub(jiff::SignedDuration::from_secs(trace.grace_seconds))
                    .unwrap_or(*at);
                // The states that may still be what the host was told: the last one
                // before `since`, and every one after it.
                let first = said.iter().rposition(|(t, _)| *t <= since).unwrap_or(0);
                let candidates: Vec<Said<'_>> = if said.is_empty() {
                    vec![(None, false, &empty)]
                } else {
                    said[first..].iter().map(|(_, s)| *s).collect()
                };
                let mut refusal = None;
                for (r, frozen, pins) in candidates {
                    match gate(r, frozen, pins, group, labels, host, to, *kind, *at) {
                        Ok(()) => {
                            refusal = None;
                            break;
                        }
                        Err(why) => refusal = Some(why),
                    }
                }
                if let Some(why) = refusal {
                    return Err(violation(
                        "gate",
                        format!(
                            "host {host} (group {group:?}) started installing {to} (from {}) on its own ({kind:?}), but {why}",
                            from.as_deref().unwrap_or("nothing"),
                        ),
                    ));
                }
                let group = match rollout {
                    Some(r) if crate::rollout::places_by_labels(r) => {
                        crate::rollout::place(r, group, labels).to_string()
                    }
                    _ => group.clone(),
                };
                let to_n = normalize(to);
                let serving = rollout
                    .and_then(|r| r.serving_group(&group))
                    .map_or_else(|| group.clone(), |g| g.name.clone());
                installs
                    .entry((to_n.clone(), serving.clone()))
                    .or_default()
                    .insert(host.clone());
                let by_hand = rollout.and_then(|r| r.group(&serving)).is_some_and(|g| {
                    matches!(
                        g.last_update_reason.as_str(),
                        reason::MANUAL_TRIGGER | reason::MANUAL_RESET | reason::MANUAL_FORCED_DONE
                    )
                });
                if !by_hand
                    && let Some(message) =
                        containment_broken(rollout, &contained, &installs, &to_n, &serving, host)
                {
                    return Err(violation("canary_containment", message));
                }
                if let Some(r) = rollout
                    && r.spec.strategy == Strategy::HaltOnError
                    && r.spec.schedule == Schedule::Regular
                    && normalize(&r.spec.target_version.to_string()) == to_n
                    && let Some(g) = r.group(&serving)
                    && g.canary_count > 0
                {
                    let key = (r.status.start_time, serving.clone());
                    if !vetted.get(&key).copied().unwrap_or(false) {
                        let hosts = unvetted.entry(key).or_default();
                        hosts.insert(host.clone());
                        let n = hosts.len() as u64;
                        let max = u64::try_from(g.canary_count.max(0)).unwrap_or(0);
                        if n > max {
                            return Err(violation(
                                "canaries_first",
                                format!(
                                    "{n} hosts of group {serving} installed {to} before its canaries passed (canary_count {max}): the group skipped its canaries"
                                ),
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Rule 1 for one install against one state: `Err` says what find answered.
#[allow(clippy::too_many_arguments)]
fn gate(
    rollout: Option<&AutoUpdateAgentRollout>,
    frozen: bool,
    pins: &BTreeMap<String, Timestamp>,
    group: &str,
    labels: &BTreeMap<String, String>,
    host: &str,
    to: &str,
    kind: InstallKind,
    at: Timestamp,
) -> Result<(), String> {
    let group = match rollout {
        Some(r) if crate::rollout::places_by_labels(r) => crate::rollout::place(r, group, labels),
        _ => group,
    };
    let answer = find::answer(&FindInputs {
        rollout,
        frozen,
        group,
        updater_id: host,
        governed_by_directive: false,
        pinned_until: pins.get(host).copied(),
        cut_off: false,
        now: at,
    });
    let named = answer.version.as_ref().map(ToString::to_string);
    let allowed = named.as_deref() == Some(normalize(to).as_str())
        && match answer.hold {
            None => true,
            Some(h) if h.allows_repair() => true,
            Some(h) => kind == InstallKind::AskedNow && !h.is_stop(),
        };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "find said {} with hold {}",
            named.as_deref().unwrap_or("no version"),
            answer.hold.map_or("none", |h| h.code())
        ))
    }
}

/// Records the versions the rollout's canaries failed on.
fn failed_canaries(
    r: &AutoUpdateAgentRollout,
    contained: &mut BTreeMap<String, BTreeMap<String, Contained>>,
) {
    let target = normalize(&r.spec.target_version.to_string());
    for (i, g) in r.status.groups.iter().enumerate() {
        if !g.canaries.iter().any(|c| c.failed) {
            continue;
        }
        contained
            .entry(target.clone())
            .or_default()
            .entry(g.name.clone())
            .or_insert_with(|| Contained {
                group_index: i,
                canary_count: u64::try_from(g.canary_count.max(0)).unwrap_or(0),
            });
    }
}

/// Whether `host`'s install of `version` in `group` (already in `installs`) breaks
/// rule 2.
fn containment_broken(
    rollout: Option<&AutoUpdateAgentRollout>,
    contained: &BTreeMap<String, BTreeMap<String, Contained>>,
    installs: &BTreeMap<(String, String), BTreeSet<String>>,
    version: &str,
    group: &str,
    host: &str,
) -> Option<String> {
    let failed = contained.get(version)?;
    let index_of =
        |name: &str| rollout.and_then(|r| r.status.groups.iter().position(|g| g.name == name));
    for (name, c) in failed {
        if name == group {
            let n = installs
                .get(&(version.to_string(), group.to_string()))
                .map_or(0, BTreeSet::len) as u64;
            if n > c.canary_count {
                return Some(format!(
                    "{version} failed on a canary of group {name}, and {n} of its hosts installed it (canary_count {})",
                    c.canary_count
                ));
            }
        } else if index_of(group).is_some_and(|gi| gi > c.group_index) {
            return Some(format!(
                "{version} failed on a canary of group {name}, and host {host} of the later group {group} installed it"
            ));
        }
    }
    None
}

/// Rule 3 on one state: a halt-on-error group that started (canary, active, done)
/// while an earlier group is not done, other than by an operator's hand.
fn order_broken(
    r: &AutoUpdateAgentRollout,
    previous: Option<&AutoUpdateAgentRollout>,
) -> Option<String> {
    if r.spec.strategy != Strategy::HaltOnError || r.spec.schedule == Schedule::Immediate {
        return None;
    }
    let groups = &r.status.groups;
    for (i, g) in groups.iter().enumerate() {
        if !matches!(g.state, GroupState::Canary | GroupState::Active) {
            continue;
        }
        let was = previous
            .filter(|p| p.status.start_time == r.status.start_time)
            .and_then(|p| p.group(&g.name))
            .map(|p| p.state);
        // Only a group that just left unstarted is judged, and not one an operator
        // moved (start-update, reset).
        if was.is_some_and(|s| s != GroupState::Unstarted)
            || matches!(
                g.last_update_reason.as_str(),
                reason::MANUAL_TRIGGER | reason::MANUAL_RESET
            )
        {
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
mod tests {
    use super::*;
    use crate::resource::{Canary, Mode, RolloutGroup, RolloutSpec, RolloutStatus};
    use crate::version::Version;
    use crate::window::Day;

    fn at(m: i64) -> Timestamp {
        Timestamp::from_second(1_795_420_800 + m * 60).unwrap()
    }

    fn rollout(dev: GroupState, prod: GroupState, mode: Mode) -> Box<AutoUpdateAgentRollout> {
        let group = |name: &str, state| RolloutGroup {
            name: name.into(),
            state,
            canary_count: 1,
            config_days: vec![Day::parse("*").unwrap()],
            ..RolloutGroup::default()
        };
        Box::new(AutoUpdateAgentRollout::new(
            RolloutSpec {
                start_version: Version::parse("1.0.0").unwrap(),
                target_version: Version::parse("1.1.0").unwrap(),
                schedule: Schedule::Regular,
                autoupdate_mode: mode,
                strategy: Strategy::HaltOnError,
                maintenance_window_duration: None,
                host_group: Default::default(),
            },
            RolloutStatus {
                start_time: Some(at(0)),
                groups: vec![group("dev", dev), group("prod", prod)],
                ..RolloutStatus::default()
            },
        ))
    }

    fn state(r: Box<AutoUpdateAgentRollout>, frozen: bool, m: i64) -> TraceEvent {
        TraceEvent::State {
            at: at(m),
            rollout: Some(r),
            frozen,
            pins: BTreeMap::new(),
        }
    }

    fn install(host: &str, group: &str, to: &str, kind: InstallKind, m: i64) -> TraceEvent {
        TraceEvent::Install {
            at: at(m),
            host: host.into(),
            group: group.into(),
            labels: BTreeMap::new(),
            from: Some("1.0.0".into()),
            to: to.into(),
            kind,
            signed: None,
            pinned_root: false,
        }
    }

    #[test]
    fn installs_where_find_allows_them_hold() {
        let t = Trace {
            grace_seconds: 0,
            events: vec![
                state(
                    rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled),
                    false,
                    1,
                ),
                install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
                install("b", "prod", "1.1.0", InstallKind::Forced, 3),
                // update --now installs what find names (prod's start version), not
                // the target: not its turn, but no stop.
                install("c", "prod", "1.0.0", InstallKind::AskedNow, 4),
            ],
        };
        assert_eq!(check(&t), Ok(()));
    }

    #[test]
    fn an_install_through_a_freeze_or_an_unstarted_group_is_caught() {
        let frozen = Trace {
            grace_seconds: 0,
            events: vec![
                state(
                    rollout(GroupState::Active, GroupState::Unstarted, Mode::Suspended),
                    true,
                    1,
                ),
                install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
            ],
        };
        let v = check(&frozen).unwrap_err();
        assert_eq!((v.index, v.rule), (1, "gate"));
        assert!(v.message.contains("frozen"), "{v}");
        // --now does not go through a stop either.
        let mut now = frozen.clone();
        now.events[1] = install("a", "dev", "1.1.0", InstallKind::AskedNow, 2);
        assert_eq!(check(&now).unwrap_err().rule, "gate");
        let unstarted = Trace {
            grace_seconds: 0,
            events: vec![
                state(
                    rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled),
                    false,
                    1,
                ),
                install("b", "prod", "1.1.0", InstallKind::Scheduled, 2),
            ],
        };
        assert!(
            check(&unstarted)
                .unwrap_err()
                .message
                .contains("group_not_started")
        );
    }

    #[test]
    fn a_failed_canary_contains_its_version() {
        let mut failed = rollout(GroupState::Canary, GroupState::Unstarted, Mode::Enabled);
        failed.status.groups[0].canaries = vec![Canary {
            updater_id: "a".into(),
            failed: true,
            ..Canary::default()
        }];
        let mut canary = failed.clone();
        canary.status.groups[0].canaries[0].failed = false;
        let ok = Trace {
            grace_seconds: 0,
            events: vec![
                state(canary.clone(), false, 1),
                install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
                state(failed.clone(), false, 3),
            ],
        };
        assert_eq!(check(&ok), Ok(()));
        // A reconcile that (wrongly) takes dev as done lets prod start; a prod host
        // installs the failed version: the gate allows it, containment does not.
        let mut wrong = failed.clone();
        wrong.status.groups[0].state = GroupState::Done;
        wrong.status.groups[1].state = GroupState::Active;
        let mut broken = ok.clone();
        broken.events.push(state(wrong.clone(), false, 4));
        broken
            .events
            .push(install("p", "prod", "1.1.0", InstallKind::Scheduled, 5));
        let v = check(&broken).unwrap_err();
        assert_eq!((v.index, v.rule), (4, "canary_containment"), "{v}");
        // Within dev: a second dev host, with dev active (not by hand), is one too many.
        let mut second = ok.clone();
        wrong.status.groups[1].state = GroupState::Unstarted;
        wrong.status.groups[0].state = GroupState::Active;
        second.events.push(state(wrong.clone(), false, 4));
        second
            .events
            .push(install("b", "dev", "1.1.0", InstallKind::Scheduled, 5));
        assert_eq!(check(&second).unwrap_err().rule, "canary_containment");
        // An operator who forced it (start-update --force) decided so.
        wrong.status.groups[0].last_update_reason = reason::MANUAL_TRIGGER.into();
        second.events[3] = state(wrong, false, 4);
        assert_eq!(check(&second), Ok(()));
    }

    #[test]
    fn a_group_that_skips_its_canaries_is_caught() {
        // dev (canary_count 1) goes active with no canary (as for want of
        // candidates) and two of its hosts install the target.
        let mut skipped = rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled);
        skipped.status.groups[0].last_update_reason = reason::NO_CANARY_CANDIDATES.into();
        let t = Trace {
            grace_seconds: 0,
            events: vec![
                state(skipped, false, 1),
                install("a", "dev", "1.1.0", InstallKind::Scheduled, 2),
                install("b", "dev", "1.1.0", InstallKind::Scheduled, 3),
            ],
        };
        let v = check(&t).unwrap_err();
        assert_eq!((v.index, v.rule), (2, "canaries_first"), "{v}");
        // After a canary that passed: fine.
        let mut vetted = rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled);
        vetted.status.groups[0].canaries = vec![Canary {
            updater_id: "c".into(),
            success: true,
            ..Canary::default()
        }];
        let mut ok = t.clone();
        ok.events[0] = state(vetted, false, 1);
        assert_eq!(check(&ok), Ok(()));
    }

    #[test]
    fn a_group_started_before_the_previous_is_done_is_caught() {
        let t = Trace {
            grace_seconds: 0,
            events: vec![
                state(
                    rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled),
                    false,
                    1,
                ),
                state(
                    rollout(GroupState::Active, GroupState::Active, Mode::Enabled),
                    false,
                    2,
                ),
            ],
        };
        let v = check(&t).unwrap_err();
        assert_eq!((v.index, v.rule), (1, "group_order"));
    }

    #[test]
    fn a_pinned_host_never_installs_an_unsigned_version() {
        let mut t = Trace {
            grace_seconds: 0,
            events: vec![
                state(
                    rollout(GroupState::Active, GroupState::Unstarted, Mode::Enabled),
                    false,
                    1,
                ),
                TraceEvent::Install {
                    at: at(2),
                    host: "a".into(),
                    group: "dev".into(),
                    labels: BTreeMap::new(),
                    from: Some("1.0.0".into()),
                    to: "1.1.0".into(),
                    kind: InstallKind::Forced,
                    signed: Some(false),
                    pinned_root: true,
                },
            ],
        };
        assert_eq!(check(&t).unwrap_err().rule, "trust");
        if let TraceEvent::Install { signed, .. } = &mut t.events[1] {
            *signed = Some(true);
        }
        assert_eq!(check(&t), Ok(()));
    }
}
