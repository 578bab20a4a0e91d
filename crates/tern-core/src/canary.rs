//! Canaries: a few connected agents of a group, picked at random (or, with
//! `canary_cover`, to cover the distinct values of host attributes first), that
//! update first. The group moves on only when every canary runs the target version
//! and is healthy; a canary that rolled the target back, or runs it unhealthy, has
//! failed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rand_core::RngCore;

use crate::domain::resource::{Canary, CanaryCoverage, ConnectedAgent};
use crate::domain::rollout::Groups;
use crate::domain::version::normalize;
use crate::domain::wire::UpdaterStatus;

/// The agents that may serve as canaries for `group`: connected, with updates enabled
/// (a pinned or disabled updater would never update), deduplicated by updater_id and
/// sorted so that a seeded pick is reproducible whatever order the inventory comes in.
/// Agents not yet on the target come first: a canary already on it proves nothing.
pub fn candidates<'a>(
    agents: &'a [ConnectedAgent],
    group: &str,
    groups: &Groups,
    target: &str,
) -> Vec<&'a ConnectedAgent> {
    let target = normalize(target);
    let mut seen = HashSet::new();
    let mut eligible: Vec<&ConnectedAgent> = agents
        .iter()
        .filter(|a| !a.updater_id.is_empty())
        .filter(|a| a.updater_status == UpdaterStatus::Enabled)
        .filter(|a| groups.serves(group, &a.group))
        .collect();
    eligible.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
    eligible.retain(|a| seen.insert(a.updater_id.as_str()));
    let (behind, current): (Vec<_>, Vec<_>) = eligible
        .into_iter()
        .partition(|a| normalize(&a.version) != target);
    if behind.is_empty() { current } else { behind }
}

/// A host attribute canaries may be chosen to cover (`canary_cover`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribute<'a> {
    Arch,
    Os,
    /// `ID-VERSION_ID` of the host's os-release.
    OsVersion,
    /// `labels.KEY`: the host's label KEY.
    Label(&'a str),
}

impl<'a> Attribute<'a> {
    /// Reads `arch`, `os`, `os_version` or `labels.KEY`; `None` for anything else.
    pub fn parse(name: &'a str) -> Option<Self> {
        match name {
            "arch" => Some(Self::Arch),
            "os" => Some(Self::Os),
            "os_version" => Some(Self::OsVersion),
            _ => name
                .strip_prefix("labels.")
                .filter(|k| crate::domain::wire::is_label_key(k))
                .map(Self::Label),
        }
    }
}

/// Attributes a group's `canary_cover` may name at most.
pub(crate) const MAX_COVER: usize = 4;
/// Values of one attribute a coverage keeps at most (the first by name): what a
/// status shows, not what a pick considers.
pub(crate) const MAX_COVERAGE_VALUES: usize = 32;
/// Candidates a replica offers per group for coverage, on top of its random sample:
/// one per new attribute value it holds, at most this many.
pub const COVER_OFFERS_PER_GROUP: usize = 64;

/// The value `agent` has for each attribute of `cover` ("" when it does not say).
fn values<'a>(
    agent: &'a ConnectedAgent,
    cover: &'a [String],
) -> impl Iterator<Item = (usize, &'a str)> {
    cover
        .iter()
        .enumerate()
        .map(|(i, a)| (i, agent.attributes.get(a).map_or("", String::as_str)))
}

/// Picks up to `want` of `candidates`: while some value of a `cover` attribute is not
/// yet on a picked canary, the candidate bringing the most such values, the rarest
/// first among equals (ties at random); then uniformly at random. Without `cover`,
/// [`pick`].
pub fn pick_covering<R: RngCore + ?Sized>(
    candidates: &[&ConnectedAgent],
    want: usize,
    cover: &[String],
    rng: &mut R,
) -> Vec<Canary> {
    if cover.is_empty() {
        return pick(candidates, want, rng);
    }
    let mut pool: Vec<&ConnectedAgent> = candidates.to_vec();
    // A random order: the first of equal candidates is a random one, and what is left
    // once everything is covered is a uniform sample.
    let all = pool.len();
    sample(&mut pool, all, rng);
    // How many candidates have each value: among hosts bringing as many new values,
    // the one whose values are rarest goes first (a random pick misses those most).
    let mut count: HashMap<(usize, &str), u32> = HashMap::new();
    for a in &pool {
        for v in values(a, cover) {
            *count.entry(v).or_default() += 1;
        }
    }
    let mut covered: HashSet<(usize, &str)> = HashSet::new();
    let mut chosen: Vec<&ConnectedAgent> = Vec::new();
    while chosen.len() < want && !pool.is_empty() {
        // (new values, their rarity: the sum of 1/candidates having each)
        let gain = |a: &ConnectedAgent| {
            values(a, cover)
                .filter(|p| !covered.contains(p))
                .fold((0usize, 0f64), |(n, r), p| {
                    (
                        n + 1,
                        r + 1.0 / f64::from(count.get(&p).copied().unwrap_or(1)),
                    )
                })
        };
        let mut best = (0, (0usize, 0f64));
        for (i, a) in pool.iter().enumerate() {
            let g = gain(a);
            if g.0 > best.1.0 || (g.0 == best.1.0 && g.0 > 0 && g.1 > best.1.1) {
                best = (i, g);
            }
        }
        if best.1.0 == 0 {
            let rest = want - chosen.len();
            chosen.extend(pool.iter().take(rest));
            break;
        }
        let a = pool.remove(best.0);
        covered.extend(values(a, cover));
        chosen.push(a);
    }
    chosen.into_iter().map(canary_of).collect()
}

/// What `canaries` cover of each `cover` attribute, and what they miss, among the
/// values `candidates` have (at most [`MAX_COVERAGE_VALUES`] per attribute).
pub fn coverage(
    canaries: &[Canary],
    candidates: &[&ConnectedAgent],
    cover: &[String],
) -> Vec<CanaryCoverage> {
    let picked: HashSet<&str> = canaries.iter().map(|c| c.updater_id.as_str()).collect();
    let mut seen: Vec<BTreeMap<&str, bool>> = vec![BTreeMap::new(); cover.len()];
    for a in candidates {
        let on_canary = picked.contains(a.updater_id.as_str());
        for (i, v) in values(a, cover) {
            *seen[i].entry(v).or_default() |= on_canary;
        }
    }
    cover
        .iter()
        .zip(seen)
        .map(|(attribute, values)| {
            let (covered, missed): (BTreeSet<&str>, BTreeSet<&str>) = values
                .iter()
                .take(MAX_COVERAGE_VALUES)
                .map(|(v, c)| (*v, *c))
                .fold(
                    (BTreeSet::new(), BTreeSet::new()),
                    |(mut c, mut m), (v, on)| {
                        if on {
                            c.insert(v);
                        } else {
                            m.insert(v);
                        }
                        (c, m)
                    },
                );
            CanaryCoverage {
                attribute: attribute.clone(),
                covered: covered.into_iter().map(str::to_string).collect(),
                missed: missed.into_iter().map(str::to_string).collect(),
            }
        })
        .collect()
}

/// What a replica offers for a group with `cover`: from `pool` in a random order,
/// every host that brings a value not yet offered (at most
/// [`COVER_OFFERS_PER_GROUP`]), then up to `per_group` more at random.
pub(crate) fn offer_covering<R: RngCore + ?Sized>(
    pool: &mut Vec<&ConnectedAgent>,
    cover: &[String],
    per_group: usize,
    rng: &mut R,
) {
    let all = pool.len();
    sample(pool, all, rng);
    let mut offered: HashSet<(usize, String)> = HashSet::new();
    let (mut covering, mut rest) = (Vec::new(), Vec::new());
    for a in pool.drain(..) {
        let new = covering.len() < COVER_OFFERS_PER_GROUP
            && values(a, cover).any(|(i, v)| !offered.contains(&(i, v.to_string())));
        if new {
            offered.extend(values(a, cover).map(|(i, v)| (i, v.to_string())));
            covering.push(a);
        } else {
            rest.push(a);
        }
    }
    rest.truncate(per_group);
    covering.extend(rest);
    *pool = covering;
}

fn canary_of(a: &ConnectedAgent) -> Canary {
    Canary {
        updater_id: a.updater_id.clone(),
        host_id: a.host_id.clone(),
        hostname: a.hostname.clone(),
        success: false,
        failed: false,
        reason: String::new(),
    }
}

/// Picks up to `count` of `candidates` uniformly at random.
pub fn pick<R: RngCore + ?Sized>(
    candidates: &[&ConnectedAgent],
    count: usize,
    rng: &mut R,
) -> Vec<Canary> {
    let mut pool: Vec<&ConnectedAgent> = candidates.to_vec();
    sample(&mut pool, count, rng);
    pool.into_iter().map(canary_of).collect()
}

/// Keeps `count` of `pool` picked uniformly at random (a partial Fisher–Yates
/// shuffle: the first `count` places), in the order picked.
pub(crate) fn sample<T, R: RngCore + ?Sized>(pool: &mut Vec<T>, count: usize, rng: &mut R) {
    let n = count.min(pool.len());
    for i in 0..n {
        let remaining = (pool.len() - i) as u64;
        // The modulo bias is below 2^-40 for any realistic fleet size.
        let j = i + (rng.next_u64() % remaining) as usize;
        pool.swap(i, j);
    }
    pool.truncate(n);
}

/// Updates each canary from what its agent reports now. A canary succeeds when it runs
/// the target, healthy, and has not rolled the target back; success is sticky (a
/// canary that later disconnects or moves on stays successful). It has failed when it
/// rolled the target back or runs it unhealthy, and failure is final for the rollout: a
/// canary that recovers does not pass, so a version that failed on a canary never
/// reaches more of its group than the canaries (its group holds until an operator
/// acts). A canary not seen now keeps what was last known of it.
pub fn refresh(canaries: &mut [Canary], agents: &[ConnectedAgent], target: &str) {
    let target = normalize(target);
    let target = target.as_str();
    let is_target = |v: &Option<String>| v.as_deref().is_some_and(|v| normalize(v) == target);
    // Rolled the target back, or could not even install it (not signed, missing…).
    let rejected_target =
        |a: &ConnectedAgent| is_target(&a.failed_version) || is_target(&a.refused_version);
    for c in canaries.iter_mut().filter(|c| !c.success && !c.failed) {
        let mut seen = agents
            .iter()
            .filter(|a| a.updater_id == c.updater_id)
            .peekable();
        if seen.peek().is_none() {
            continue;
        }
        let (mut ok, mut failed) = (false, false);
        for a in seen {
            let on_target = normalize(&a.version) == target;
            // Only a known healthy proves the target: a host that cannot tell its
            // agent's health (an absent `healthy`) proves nothing.
            let healthy = a.healthy == Some(true) || crate::planted!(UnhealthyCanaryPasses);
            ok |= on_target && healthy && !rejected_target(a);
            failed |= rejected_target(a) || (on_target && a.healthy == Some(false));
        }
        c.success = ok;
        c.failed = failed && !ok;
    }
}

/// Says why each failed canary failed, from the reasons the replicas reported
/// (`ReportSpec::canary_failures`, by updater_id): a failed canary no replica gives a
/// reason for now keeps the one last known; a canary that has not failed has none.
pub fn attach_reasons(canaries: &mut [Canary], reasons: &BTreeMap<String, String>) {
    for c in canaries {
        if !c.failed {
            c.reason.clear();
        } else if let Some(r) = reasons.get(&c.updater_id) {
            c.reason.clone_from(r);
        }
    }
}

/// How a group's canaries stand, for people: `1/2 ok`, `0/1 ok, 1 failed`. Before
/// they are picked, the total is the configured `canary_count`.
pub fn summary(canaries: &[Canary], canary_count: i64) -> String {
    let total = if canaries.is_empty() {
        usize::try_from(canary_count.max(0)).unwrap_or(0)
    } else {
        canaries.len()
    };
    let ok = canaries.iter().filter(|c| c.success).count();
    match canaries.iter().filter(|c| c.failed).count() {
        0 => format!("{ok}/{total} ok"),
        failed => format!("{ok}/{total} ok, {failed} failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    use crate::fixtures::connected_agent as agent;

    fn groups() -> Groups {
        Groups::new(vec!["dev".into(), "prod".into()])
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
        let ids: Vec<&str> = candidates(&agents, "dev", &groups(), "2.0.0")
            .iter()
            .map(|a| a.updater_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b"]);
        // When every agent is on the target, those are the only candidates.
        let all_current = vec![agent("c", "dev", "v2.0.0")];
        assert_eq!(candidates(&all_current, "dev", &groups(), "2.0.0").len(), 1);
    }

    #[test]
    fn pick_is_bounded_seeded_and_unique() {
        let agents: Vec<ConnectedAgent> = (0..20)
            .map(|i| agent(&format!("u{i:02}"), "dev", "1.0.0"))
            .collect();
        let cands = candidates(&agents, "dev", &groups(), "2.0.0");
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
    fn a_canary_succeeds_only_on_the_target_healthy_and_not_rolled_back() {
        let fresh = || {
            vec![Canary {
                updater_id: "a".into(),
                ..Canary::default()
            }]
        };
        // Still updating: neither.
        let mut c = fresh();
        refresh(&mut c, &[agent("a", "dev", "1.0.0")], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (false, false));
        // On the target but unhealthy: failed, not a success.
        let mut sick = agent("a", "dev", "2.0.0");
        sick.healthy = Some(false);
        refresh(&mut c, &[sick], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (false, true));
        // Rolled the target back: failed, whatever its health on the old version.
        let mut back = agent("a", "dev", "1.0.0");
        back.failed_version = Some("v2.0.0".into());
        let mut c = fresh();
        refresh(&mut c, &[back.clone()], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (false, true));
        // Not seen this time: what was known is kept.
        refresh(&mut c, &[], "2.0.0");
        assert!(c[0].failed);
        // A rollback of some other version says nothing about this target.
        back.failed_version = Some("1.5.0".into());
        let mut c = fresh();
        refresh(&mut c, &[back], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (false, false));
        // Healthy on the target: success…
        let mut c = fresh();
        refresh(&mut c, &[agent("a", "dev", "2.0.0")], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (true, false));
        // …but not once it failed: a canary that recovers stays failed, and the
        // version stays contained (the fault simulator's degrading release).
        let mut c = fresh();
        c[0].failed = true;
        refresh(&mut c, &[agent("a", "dev", "2.0.0")], "2.0.0");
        assert_eq!((c[0].success, c[0].failed), (false, true));
    }

    #[test]
    fn success_is_sticky() {
        let mut canaries = vec![Canary {
            updater_id: "a".into(),
            ..Canary::default()
        }];
        refresh(&mut canaries, &[agent("a", "dev", "1.0.0")], "2.0.0");
        assert!(!canaries[0].success);
        refresh(&mut canaries, &[agent("a", "dev", "v2.0.0")], "2.0.0");
        assert!(canaries[0].success);
        refresh(&mut canaries, &[], "2.0.0");
        assert!(
            canaries[0].success,
            "a canary that disconnects stays successful"
        );
    }
}
