//! Builders shared by the core's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::*;
use tern_core::rollout::{DEFAULT_REPORT_PERIOD, Event};
use tern_core::version::Version;
use tern_core::wire::UpdaterStatus;

pub fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

pub fn config(yaml: &str) -> AutoUpdateConfig {
    AutoUpdateConfig::from_text(yaml).unwrap()
}

/// A halt-on-error config: dev every day at 12, staging every day at 14 (2 canaries),
/// prod Mon–Thu at 16 after 24h.
pub fn three_groups_config() -> String {
    use tern_core::fixtures::{group, halt_on_error_config};
    halt_on_error_config(
        "enabled",
        &[
            group("dev", 12),
            group("staging", 14).canaries(2),
            group("prod", 16)
                .days(&["Mon", "Tue", "Wed", "Thu"])
                .wait(24),
        ],
    )
}

pub const TIME_BASED: &str = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 2h
    schedules:
      regular:
      - {name: us-east, days: ["*"], start_hour: 4}
      - {name: europe, days: ["*"], start_hour: 12}
"#;

pub fn version(start: &str, target: &str) -> AutoUpdateVersion {
    AutoUpdateVersion::new(Some(AgentsVersion {
        start_version: Version::parse(start).unwrap(),
        target_version: Version::parse(target).unwrap(),
        schedule: Schedule::Regular,
        mode: None,
        follow_in_window: false,
    }))
}

/// A deterministic UUID-shaped updater id for agent `i` of `group`, spread over the
/// whole id space like random UUIDs are.
pub fn uid(group: &str, i: usize) -> String {
    let seed = group.bytes().fold(i as u64, |h, b| {
        h.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    let spread = tern_core::ids::spread;
    tern_core::ids::uuid_from_halves(spread(seed), spread(seed ^ 0xdead_beef))
}

pub fn agent(group: &str, i: usize, version: &str) -> ConnectedAgent {
    ConnectedAgent {
        updater_id: uid(group, i),
        host_id: format!("host-{group}-{i}"),
        hostname: format!("{group}-{i}.example"),
        group: group.to_string(),
        version: version.to_string(),
        updater_status: UpdaterStatus::Enabled,
        healthy: Some(true),
        failed_version: None,
        refused_version: None,
        attributes: Default::default(),
    }
}

/// `n` agents of `group` on `version`.
pub fn fleet(group: &str, n: usize, version: &str) -> Vec<ConnectedAgent> {
    (0..n).map(|i| agent(group, i, version)).collect()
}

/// The report one replica writes at `at` for these agents.
pub fn report_of(at: Timestamp, agents: &[ConnectedAgent]) -> AutoUpdateAgentReport {
    let inv: Vec<tern_core::inventory::InventoryAgent> = agents
        .iter()
        .map(|a| tern_core::inventory::InventoryAgent {
            heartbeat: tern_core::wire::Heartbeat {
                updater_id: a.updater_id.clone(),
                host_id: a.host_id.clone(),
                hostname: a.hostname.clone(),
                group: a.group.clone(),
                version: a.version.clone(),
                updater_status: a.updater_status,
                ..Default::default()
            },
            first_seen: Timestamp::UNIX_EPOCH,
            last_seen: at,
        })
        .collect();
    AutoUpdateAgentReport::new(
        "replica-1",
        tern_core::inventory::build_report(at, &inv, DEFAULT_REPORT_PERIOD),
    )
}

pub struct World {
    pub config: Option<AutoUpdateConfig>,
    pub version: Option<AutoUpdateVersion>,
    pub rollout: Option<AutoUpdateAgentRollout>,
    pub agents: Vec<ConnectedAgent>,
    pub rng: ChaCha8Rng,
    /// Events of the last reconcile.
    pub events: Vec<Event>,
    /// A global freeze holds.
    pub frozen: bool,
}

impl World {
    pub fn new(config: Option<AutoUpdateConfig>, version: AutoUpdateVersion) -> Self {
        Self {
            config,
            version: Some(version),
            rollout: None,
            agents: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(42),
            events: Vec::new(),
            frozen: false,
        }
    }

    /// One reconcile at `now`, with a fresh report of the current agents (a live
    /// replica's: with no agent, it says there is none).
    pub fn reconcile(&mut self, now: &str) -> &AutoUpdateAgentRollout {
        let now = ts(now);
        let reports = vec![report_of(now, &self.agents)];
        self.reconcile_with(now, &reports)
    }

    pub fn reconcile_with(
        &mut self,
        now: Timestamp,
        reports: &[AutoUpdateAgentReport],
    ) -> &AutoUpdateAgentRollout {
        let input = ReconcileInput {
            config: self.config.as_ref(),
            version: self.version.as_ref(),
            rollout: self.rollout.as_ref(),
            reports,
            agents: &self.agents,
            report_period: DEFAULT_REPORT_PERIOD,
            frozen: self.frozen,
        };
        match reconcile::reconcile(now, &input, &mut self.rng) {
            Outcome::Rollout { rollout, events } => {
                self.events = events;
                self.rollout = Some(*rollout);
            }
            Outcome::NoRollout { why } => panic!("unexpected NoRollout: {why}"),
        }
        self.rollout.as_ref().unwrap()
    }

    pub fn rollout(&self) -> &AutoUpdateAgentRollout {
        self.rollout.as_ref().unwrap()
    }

    pub fn group(&self, name: &str) -> &RolloutGroup {
        self.rollout().group(name).unwrap()
    }

    pub fn state(&self, name: &str) -> (GroupState, String) {
        let g = self.group(name);
        (g.state, g.last_update_reason.clone())
    }

    /// Every agent of `group` that find tells to update now moves to what it is told.
    pub fn agents_follow_find(&mut self, group: &str) {
        let rollout = self.rollout.clone().unwrap();
        for a in self.agents.iter_mut().filter(|a| a.group == group) {
            let d = tern_core::gate::rollout_answer(Some(&rollout), &a.group, &a.updater_id);
            if d.update() {
                a.version = d.version.unwrap().to_string();
            }
        }
    }

    pub fn set_versions(&mut self, group: &str, count: usize, version: &str) {
        for a in self
            .agents
            .iter_mut()
            .filter(|a| a.group == group)
            .take(count)
        {
            a.version = version.to_string();
        }
    }
}

pub fn report_period() -> SignedDuration {
    DEFAULT_REPORT_PERIOD
}
