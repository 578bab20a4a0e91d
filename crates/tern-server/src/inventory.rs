//! The agents this replica has heard from, in memory. Keyed by updater_id (or host_id
//! for an updater without an id). Timestamps come from the server clock; expiry is by
//! real (monotonic) silence, so jumping a dev clock forward does not forget agents and a
//! wall-clock step does not either.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tern_core::canary::Interest;
use tern_core::inventory::{InventoryAgent, build_report};
use tern_core::resource::{AutoUpdateAgentRollout, ConnectedAgent, ReportSpec};
use tern_core::wire::Heartbeat;

#[derive(Debug, Clone)]
struct Entry {
    agent: InventoryAgent,
    heard: Instant,
}

#[derive(Debug, Default)]
pub struct Inventory {
    agents: HashMap<String, Entry>,
}

/// The inventory key of a heartbeat, or `None` when it identifies nothing.
pub fn key_of(hb: &Heartbeat) -> Option<String> {
    if !hb.updater_id.is_empty() {
        Some(format!("u:{}", hb.updater_id))
    } else if !hb.host_id.is_empty() {
        Some(format!("h:{}", hb.host_id))
    } else {
        None
    }
}

impl Inventory {
    /// Records a heartbeat. The first heartbeat of a connection sets `first_seen`; later
    /// ones (even with another group or version) keep it, unless the agent had been
    /// forgotten (silent for `max_silence`).
    pub fn heartbeat(
        &mut self,
        key: String,
        hb: Heartbeat,
        now: Timestamp,
        at: Instant,
        max_silence: Duration,
    ) {
        match self.agents.get_mut(&key) {
            Some(e) if at.saturating_duration_since(e.heard) <= max_silence => {
                e.agent.heartbeat = hb;
                e.agent.last_seen = now;
                e.heard = at;
            }
            _ => {
                self.agents.insert(
                    key,
                    Entry {
                        agent: InventoryAgent {
                            heartbeat: hb,
                            first_seen: now,
                            last_seen: now,
                        },
                        heard: at,
                    },
                );
            }
        }
    }

    /// Forgets agents silent for longer than `max_silence`; returns how many.
    pub fn expire(&mut self, at: Instant, max_silence: Duration) -> usize {
        let before = self.agents.len();
        self.agents
            .retain(|_, e| at.saturating_duration_since(e.heard) <= max_silence);
        before - self.agents.len()
    }

    pub fn len(&self) -> usize {
        self.agents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    pub fn agents(&self) -> impl Iterator<Item = &InventoryAgent> {
        self.agents.values().map(|e| &e.agent)
    }

    pub fn report(&self, now: Timestamp, period: SignedDuration) -> ReportSpec {
        build_report(now, self.agents(), period)
    }

    /// Settled agents (connected for one report period), for canary selection.
    pub fn connected(&self, now: Timestamp, period: SignedDuration) -> Vec<ConnectedAgent> {
        let mut v: Vec<ConnectedAgent> = self
            .agents()
            .filter(|a| a.settled(now, period))
            .map(InventoryAgent::connected)
            .collect();
        v.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
        v
    }

    /// This replica's canary candidates for its report
    /// ([`tern_core::inventory::canary_candidates`]): nothing is scanned unless a group of
    /// the rollout may pick canaries soon.
    pub fn canary_candidates<R: rand_core::RngCore + ?Sized>(
        &self,
        rollout: Option<&AutoUpdateAgentRollout>,
        now: Timestamp,
        period: SignedDuration,
        rng: &mut R,
    ) -> BTreeMap<String, Vec<ConnectedAgent>> {
        tern_core::inventory::canary_candidates(
            self.agents(),
            rollout,
            now,
            period,
            tern_core::inventory::CANARY_CANDIDATES_PER_GROUP,
            rng,
        )
    }

    /// The rollout's unsuccessful canaries connected here, looked up by updater_id
    /// ([`tern_core::inventory::canaries_seen`]).
    pub fn canaries_seen(&self, rollout: Option<&AutoUpdateAgentRollout>) -> Vec<ConnectedAgent> {
        tern_core::inventory::canaries_seen(rollout, |id| {
            self.agents.get(&format!("u:{id}")).map(|e| &e.agent)
        })
    }

    /// The settled agents a reconcile can use ([`tern_core::canary::interest`]): the
    /// canaries by updater_id, and every agent of a group that may pick canaries. With
    /// no such group (most reconciles) this looks up a few ids, whatever the fleet size.
    pub fn connected_for(
        &self,
        interest: &Interest,
        now: Timestamp,
        period: SignedDuration,
    ) -> Vec<ConnectedAgent> {
        let mut v: Vec<ConnectedAgent> = if interest.groups.is_empty() {
            interest
                .canaries
                .iter()
                .filter_map(|id| self.agents.get(&format!("u:{id}")))
                .map(|e| &e.agent)
                .filter(|a| a.settled(now, period))
                .map(InventoryAgent::connected)
                .collect()
        } else {
            self.agents()
                .filter(|a| interest.wants(&a.heartbeat.group, &a.heartbeat.updater_id))
                .filter(|a| a.settled(now, period))
                .map(InventoryAgent::connected)
                .collect()
        };
        v.sort_by(|a, b| a.updater_id.cmp(&b.updater_id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(id: &str, group: &str, version: &str) -> Heartbeat {
        Heartbeat {
            updater_id: id.into(),
            group: group.into(),
            version: version.into(),
            ..Heartbeat::default()
        }
    }

    #[test]
    fn first_seen_survives_changes_but_not_forgetting() {
        let mut inv = Inventory::default();
        let t0: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-11-23T10:01:00Z".parse().unwrap();
        let at = Instant::now();
        let silence = Duration::from_secs(180);
        inv.heartbeat("u:a".into(), hb("a", "dev", "1.0.0"), t0, at, silence);
        inv.heartbeat(
            "u:a".into(),
            hb("a", "prod", "1.1.0"),
            t1,
            at + Duration::from_secs(60),
            silence,
        );
        let a = inv.agents().next().unwrap().clone();
        assert_eq!(a.first_seen, t0);
        assert_eq!(a.last_seen, t1);
        assert_eq!(a.heartbeat.group, "prod");
        // Silent too long: a new connection.
        inv.heartbeat(
            "u:a".into(),
            hb("a", "prod", "1.1.0"),
            t1,
            at + Duration::from_secs(600),
            silence,
        );
        assert_eq!(inv.agents().next().unwrap().first_seen, t1);
        assert_eq!(inv.expire(at + Duration::from_secs(600), silence), 0);
        assert_eq!(inv.expire(at + Duration::from_secs(900), silence), 1);
        assert!(inv.is_empty());
    }
}
