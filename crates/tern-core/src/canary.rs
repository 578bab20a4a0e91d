//! Canaries: a few connected agents of a group, picked at random, that update first.
//! The group moves on only when every canary runs the target version.

use std::collections::HashSet;

use jiff::Timestamp;
use rand_core::RngCore;

use crate::reconcile::{desired_spec, group_window};
use crate::resource::{
    AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Canary, ConnectedAgent,
    GroupState, Mode, Schedule, Strategy,
};
use crate::version::normalize;
use crate::wire::UpdaterStatus;

/// Whether an agent presenting `agent_group` is served by `group`: its own group, or
/// the catch-all (last) group for an empty or unknown group name.
pub fn belongs_to(agent_group: &str, group: &str, all_groups: &[&str]) -> bool {
    if agent_group == group {
        return true;
    }
    let is_catch_all = all_groups.last() == Some(&group);
    is_catch_all && !all_groups.contains(&agent_group)
}

/// The agents that may serve as canaries for `group`: connected, with updates enabled
/// (a pinned or disabled updater would never update), deduplicated by updater_id and
/// sorted so that a seeded pick is reproducible whatever order the inventory comes in.
/// Agents not yet on the target come first: a canary already on it proves nothing.
pub fn candidates<'a>(
    agents: &'a [ConnectedAgent],
    group: &str,
    all_groups: &[&str],
    target: &str,
) -> Vec<&'a ConnectedAgent> {
    let target = normalize(target);
    let mut seen = HashSet::new();
    let mut eligible: Vec<&ConnectedAgent> = agents
        .iter()
        .filter(|a| !a.updater_id.is_empty())
        .filter(|a| a.updater_status == UpdaterStatus::Enabled)
        .filter(|a| belongs_to(&a.group, group, all_groups))
        .collect();
    eligible.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
    eligible.retain(|a| seen.insert(a.updater_id.as_str()));
    let (behind, current): (Vec<_>, Vec<_>) = eligible
        .into_iter()
        .partition(|a| normalize(&a.version) != target);
    if behind.is_empty() { current } else { behind }
}

/// The connected agents a reconcile can use. The reconcile reads agents for two things
/// only: picking the canaries of a group (among every agent the group serves) and
/// checking canaries already picked (by updater_id). Passing just these agents gives
/// the same outcome as passing every connected agent, so a server with a million agents
/// hands over none of them on most reconciles. It assumes an updater_id presents one
/// group, as in a replica's inventory (keyed by updater_id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Groups that may pick canaries in this reconcile.
    pub groups: Vec<String>,
    /// Every group of the rollout the reconcile will work on, in order (for the
    /// catch-all rule of [`belongs_to`]).
    pub all_groups: Vec<String>,
    /// Updater ids of the canaries already picked (possibly in a rollout about to be
    /// replaced: a superset is harmless).
    pub canaries: Vec<String>,
}

impl Interest {
    /// Whether the reconcile may need an agent presenting `group` and `updater_id`.
    pub fn wants(&self, group: &str, updater_id: &str) -> bool {
        self.canaries.iter().any(|c| c == updater_id) || self.wants_group(group)
    }

    /// Whether every agent presenting `group` may be needed (to pick canaries from).
    pub fn wants_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| {
            g == group
                || (self.all_groups.last() == Some(g)
                    && !self.all_groups.iter().any(|a| a == group))
        })
    }
}

/// Which agents the reconcile at `now` over these resources can use (see [`Interest`]).
/// Conservative where cheap: it may name a group that will not pick canaries after all,
/// never the other way round.
///
/// A group may pick canaries when it is in `canary` with none yet (after a manual
/// start-update, or when no candidate was connected before), or when it is the
/// unstarted group that could start now under halt-on-error: `canary_count > 0`, its
/// window open, and every earlier group already past `unstarted` (an earlier group
/// still unstarted cannot become done in this reconcile). A rollout about to be
/// created (none yet, or a spec change) can start at most its first group.
pub fn interest(
    now: Timestamp,
    config: Option<&AutoUpdateConfig>,
    version: Option<&AutoUpdateVersion>,
    rollout: Option<&AutoUpdateAgentRollout>,
) -> Interest {
    let mut out = Interest::default();
    if let Some(r) = rollout {
        for g in &r.status.groups {
            out.canaries
                .extend(g.canaries.iter().map(|c| c.updater_id.clone()));
        }
        out.all_groups = r.status.groups.iter().map(|g| g.name.clone()).collect();
    }
    let Some(desired) = version.and_then(|v| desired_spec(config, v).ok()) else {
        return out;
    };
    if desired.autoupdate_mode != Mode::Enabled
        || desired.strategy != Strategy::HaltOnError
        || desired.schedule == Schedule::Immediate
    {
        return out;
    }
    let current = rollout.filter(|r| {
        r.spec.start_version == desired.start_version
            && r.spec.target_version == desired.target_version
            && r.spec.schedule == desired.schedule
            && r.spec.strategy == desired.strategy
    });
    let Some(r) = current else {
        // A fresh rollout: its groups come from the config.
        let default_config = AutoUpdateConfig::default();
        let groups = config.unwrap_or(&default_config).groups();
        out.all_groups = groups.iter().map(|g| g.name.clone()).collect();
        if let Some(first) = groups.first().filter(|g| g.canary_count > 0) {
            out.groups.push(first.name.clone());
        }
        return out;
    };
    let eval_now = r.status.time_override.unwrap_or(now);
    let groups = &r.status.groups;
    for (i, g) in groups.iter().enumerate() {
        let picks = match g.state {
            GroupState::Canary => g.canaries.is_empty(),
            GroupState::Unstarted => {
                g.canary_count > 0
                    && groups[..i].iter().all(|p| {
                        matches!(
                            p.state,
                            GroupState::Canary | GroupState::Active | GroupState::Done
                        )
                    })
                    && group_window(&desired, g).is_open(eval_now)
            }
            GroupState::Active | GroupState::Done | GroupState::Rolledback => false,
        };
        if picks {
            out.groups.push(g.name.clone());
        }
    }
    out
}

/// Picks up to `count` of `candidates` uniformly at random.
pub fn pick<R: RngCore + ?Sized>(
    candidates: &[&ConnectedAgent],
    count: usize,
    rng: &mut R,
) -> Vec<Canary> {
    let mut pool: Vec<&ConnectedAgent> = candidates.to_vec();
    let n = count.min(pool.len());
    for i in 0..n {
        let remaining = (pool.len() - i) as u64;
        // The modulo bias is below 2^-40 for any realistic fleet size.
        let j = i + (rng.next_u64() % remaining) as usize;
        pool.swap(i, j);
    }
    pool.truncate(n);
    pool.into_iter()
        .map(|a| Canary {
            updater_id: a.updater_id.clone(),
            host_id: a.host_id.clone(),
            hostname: a.hostname.clone(),
            success: false,
        })
        .collect()
}

/// Marks canaries that now run the target as successful. Success is sticky: a canary
/// that later disconnects or moves on stays successful.
pub fn refresh_success(canaries: &mut [Canary], agents: &[ConnectedAgent], target: &str) {
    let target = normalize(target);
    for c in canaries.iter_mut().filter(|c| !c.success) {
        c.success = agents
            .iter()
            .any(|a| a.updater_id == c.updater_id && normalize(&a.version) == target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    fn agent(id: &str, group: &str, version: &str) -> ConnectedAgent {
        ConnectedAgent {
            updater_id: id.into(),
            host_id: format!("host-{id}"),
            hostname: format!("{id}.example"),
            group: group.into(),
            version: version.into(),
            updater_status: UpdaterStatus::Enabled,
        }
    }

    const GROUPS: &[&str] = &["dev", "prod"];

    #[test]
    fn catch_all_serves_empty_and_unknown_groups() {
        assert!(belongs_to("", "prod", GROUPS));
        assert!(belongs_to("nope", "prod", GROUPS));
        assert!(!belongs_to("dev", "prod", GROUPS));
        assert!(!belongs_to("", "dev", GROUPS));
        assert!(belongs_to("dev", "dev", GROUPS));
    }

    #[test]
    fn candidates_are_deduplicated_enabled_and_behind_first() {
        let mut pinned = agent("p", "dev", "1.0.0");
        pinned.updater_status = UpdaterStatus::Pinned;
        let agents = vec![
            agent("b", "dev", "1.0.0"),
            agent("a", "dev", "1.0.0"),
            agent("a", "dev", "1.0.0"), // the same updater seen by two replicas
            agent("c", "dev", "2.0.0"), // already on target
            agent("d", "prod", "1.0.0"),
            pinned,
        ];
        let ids: Vec<&str> = candidates(&agents, "dev", GROUPS, "2.0.0")
            .iter()
            .map(|a| a.updater_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b"]);
        // When every agent is on the target, those are the only candidates.
        let all_current = vec![agent("c", "dev", "v2.0.0")];
        assert_eq!(candidates(&all_current, "dev", GROUPS, "2.0.0").len(), 1);
    }

    #[test]
    fn pick_is_bounded_seeded_and_unique() {
        let agents: Vec<ConnectedAgent> = (0..20)
            .map(|i| agent(&format!("u{i:02}"), "dev", "1.0.0"))
            .collect();
        let cands = candidates(&agents, "dev", GROUPS, "2.0.0");
        let a = pick(&cands, 5, &mut ChaCha8Rng::seed_from_u64(7));
        let b = pick(&cands, 5, &mut ChaCha8Rng::seed_from_u64(7));
        assert_eq!(a, b, "same seed, same canaries");
        assert_eq!(a.len(), 5);
        let unique: HashSet<_> = a.iter().map(|c| &c.updater_id).collect();
        assert_eq!(unique.len(), 5);
        // Fewer candidates than canaries wanted: take them all.
        assert_eq!(
            pick(&cands[..2], 5, &mut ChaCha8Rng::seed_from_u64(1)).len(),
            2
        );
        // Different seeds spread the choice.
        let firsts: HashSet<String> = (0..30)
            .map(|s| {
                pick(&cands, 1, &mut ChaCha8Rng::seed_from_u64(s))[0]
                    .updater_id
                    .clone()
            })
            .collect();
        assert!(firsts.len() > 5, "{firsts:?}");
    }

    #[test]
    fn success_is_sticky() {
        let mut canaries = vec![Canary {
            updater_id: "a".into(),
            ..Canary::default()
        }];
        refresh_success(&mut canaries, &[agent("a", "dev", "1.0.0")], "2.0.0");
        assert!(!canaries[0].success);
        refresh_success(&mut canaries, &[agent("a", "dev", "v2.0.0")], "2.0.0");
        assert!(canaries[0].success);
        refresh_success(&mut canaries, &[], "2.0.0");
        assert!(
            canaries[0].success,
            "a canary that disconnects stays successful"
        );
    }

    fn resources(
        groups: &[(&str, u32, u32)],
        mode: &str,
        target: &str,
    ) -> (AutoUpdateConfig, AutoUpdateVersion) {
        let mut cfg = format!(
            "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: {mode}\n    strategy: halt-on-error\n    schedules:\n      regular:\n"
        );
        for (name, hour, canaries) in groups {
            cfg += &format!(
                "      - name: {name}\n        days: [\"*\"]\n        start_hour: {hour}\n        canary_count: {canaries}\n"
            );
        }
        let ver = format!(
            "kind: autoupdate_version\nversion: v1\nmetadata:\n  name: autoupdate-version\nspec:\n  agents:\n    start_version: v1.0.0\n    target_version: {target}\n    schedule: regular\n"
        );
        (
            AutoUpdateConfig::from_text(&cfg).unwrap(),
            AutoUpdateVersion::from_text(&ver).unwrap(),
        )
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn rollout_at(
        config: &AutoUpdateConfig,
        version: &AutoUpdateVersion,
        now: Timestamp,
        agents: &[ConnectedAgent],
    ) -> AutoUpdateAgentRollout {
        use crate::reconcile::{Outcome, ReconcileInput, reconcile};
        let input = ReconcileInput {
            config: Some(config),
            version: Some(version),
            rollout: None,
            reports: &[],
            agents,
            report_period: crate::reconcile::DEFAULT_REPORT_PERIOD,
        };
        match reconcile(now, &input, &mut ChaCha8Rng::seed_from_u64(0)) {
            Outcome::Rollout { rollout, .. } => *rollout,
            Outcome::NoRollout { why } => panic!("{why}"),
        }
    }

    #[test]
    fn interest_names_only_groups_that_can_pick_canaries() {
        let (config, version) = resources(
            &[("dev", 12, 0), ("staging", 14, 2), ("prod", 16, 1)],
            "enabled",
            "v1.1.0",
        );
        // No rollout yet: the first group could start, but it has no canaries.
        let i = interest(
            at("2026-11-23T11:00:00Z"),
            Some(&config),
            Some(&version),
            None,
        );
        assert!(i.groups.is_empty() && i.canaries.is_empty(), "{i:?}");
        let mut r = rollout_at(&config, &version, at("2026-11-23T11:00:00Z"), &[]);
        // dev active, staging unstarted outside its window: nothing to pick.
        r.status.groups[0].state = GroupState::Active;
        let i = interest(
            at("2026-11-23T12:30:00Z"),
            Some(&config),
            Some(&version),
            Some(&r),
        );
        assert!(i.groups.is_empty(), "{i:?}");
        // staging's window open and dev past unstarted: staging may pick.
        let i = interest(
            at("2026-11-23T14:10:00Z"),
            Some(&config),
            Some(&version),
            Some(&r),
        );
        assert_eq!(i.groups, ["staging"]);
        // prod is the catch-all: an unknown group counts in it, not in staging.
        assert!(i.wants("staging", "x") && !i.wants("", "x") && !i.wants("nope", "x"));
        // staging in canary with its canaries picked: only those, by id.
        r.status.groups[1].state = GroupState::Canary;
        r.status.groups[1].canaries = vec![Canary {
            updater_id: "c1".into(),
            ..Canary::default()
        }];
        let i = interest(
            at("2026-11-23T14:10:00Z"),
            Some(&config),
            Some(&version),
            Some(&r),
        );
        assert!(i.groups.is_empty());
        assert!(i.wants("prod", "c1") && !i.wants("staging", "c2"));
        // A canary group without canaries (manual start-update) picks, whatever the hour.
        r.status.groups[2].state = GroupState::Canary;
        let i = interest(
            at("2026-11-23T03:00:00Z"),
            Some(&config),
            Some(&version),
            Some(&r),
        );
        assert_eq!(i.groups, ["prod"]);
        assert!(i.wants("", "anyone") && i.wants("nope", "anyone"));
        // Suspended: nothing is picked, canaries are still checked.
        let (suspended, _) = resources(
            &[("dev", 12, 0), ("staging", 14, 2), ("prod", 16, 1)],
            "suspended",
            "v1.1.0",
        );
        let i = interest(
            at("2026-11-23T03:00:00Z"),
            Some(&suspended),
            Some(&version),
            Some(&r),
        );
        assert!(i.groups.is_empty() && i.canaries == ["c1"]);
    }

    /// The reconcile gives the same outcome with every connected agent and with only
    /// those [`interest`] wants, over random fleets, configs, states and instants.
    #[test]
    fn filtered_agents_reconcile_like_all_agents() {
        use crate::reconcile::{Outcome, ReconcileInput, reconcile};
        use rand_core::RngCore;
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let mut below = |n: u64| rng.next_u64() % n;
        let names = ["dev", "staging", "prod", "", "other"];
        let mut compared = 0;
        let mut picked = 0;
        for case in 0..300 {
            let n_groups = 1 + below(3) as usize;
            let groups: Vec<(&str, u32, u32)> = (0..n_groups)
                .map(|i| (names[i], below(24) as u32, below(3) as u32))
                .collect();
            let mode = if below(6) == 0 {
                "suspended"
            } else {
                "enabled"
            };
            let (config, version) = resources(&groups, mode, "v1.1.0");
            let (_, other_version) = resources(&groups, mode, "v1.2.0");
            let agents: Vec<ConnectedAgent> = (0..below(40))
                .map(|i| {
                    // An updater id presents one group (a replica's inventory is keyed
                    // by updater id); the same id may appear twice, as after a restart.
                    let id = below(30);
                    let mut a = agent(
                        &format!("u{id:02}"),
                        names[(id % 5) as usize],
                        if below(2) == 0 { "1.0.0" } else { "v1.1.0" },
                    );
                    a.host_id = format!("h{i}");
                    if below(8) == 0 {
                        a.updater_status = UpdaterStatus::Pinned;
                    }
                    a
                })
                .collect();
            let mut now = at("2026-11-23T00:00:00Z")
                .saturating_add(jiff::SignedDuration::from_mins(below(24 * 60) as i64))
                .unwrap();
            let mut rollout: Option<AutoUpdateAgentRollout> = None;
            for step in 0..12 {
                let v = if below(10) == 0 {
                    &other_version
                } else {
                    &version
                };
                if let Some(r) = rollout.as_mut() {
                    // Manual moves the reconcile must cope with.
                    let g = below(r.status.groups.len().max(1) as u64) as usize;
                    if let Some(group) = r.status.groups.get_mut(g) {
                        match below(8) {
                            0 => {
                                group.state = GroupState::Canary;
                                group.canaries.clear();
                            }
                            1 => group.state = GroupState::Done,
                            2 => group.state = GroupState::Unstarted,
                            _ => {}
                        }
                    }
                }
                let interest = interest(now, Some(&config), Some(v), rollout.as_ref());
                let wanted: Vec<ConnectedAgent> = agents
                    .iter()
                    .filter(|a| interest.wants(&a.group, &a.updater_id))
                    .cloned()
                    .collect();
                let input = ReconcileInput {
                    config: Some(&config),
                    version: Some(v),
                    rollout: rollout.as_ref(),
                    reports: &[],
                    agents: &agents,
                    report_period: crate::reconcile::DEFAULT_REPORT_PERIOD,
                };
                let seed = case * 100 + step;
                let full = reconcile(now, &input, &mut ChaCha8Rng::seed_from_u64(seed));
                let filtered = reconcile(
                    now,
                    &ReconcileInput {
                        agents: &wanted,
                        ..input
                    },
                    &mut ChaCha8Rng::seed_from_u64(seed),
                );
                assert_eq!(full, filtered, "case {case} step {step}: {interest:?}");
                compared += 1;
                if let Outcome::Rollout { rollout: r, events } = full {
                    picked += events
                        .iter()
                        .filter(|e| matches!(e, crate::reconcile::Event::CanariesPicked { .. }))
                        .count();
                    rollout = Some(*r);
                }
                now = now
                    .saturating_add(jiff::SignedDuration::from_mins(below(240) as i64))
                    .unwrap();
            }
        }
        assert!(
            compared > 3000 && picked > 50,
            "{compared} compared, {picked} picks"
        );
    }
}
