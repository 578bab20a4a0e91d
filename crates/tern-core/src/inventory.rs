//! From the agents a replica has heard from to the report it writes every period.
//! Pure: the server keeps the inventory in memory and calls [`build_report`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::backpressure::UpdaterNumeral;
use crate::resource::{ConnectedAgent, GroupReport, Omitted, ReportSpec};
use crate::version::normalize;
use crate::wire::{Heartbeat, UpdaterStatus};

/// Omitted reasons (stable strings, shown by `agents report`).
pub const OMITTED_DISABLED: &str = "updates disabled";
pub const OMITTED_PINNED: &str = "version is pinned";
pub const OMITTED_NO_UPDATER_ID: &str = "no updater id";
pub const OMITTED_TOO_NEW: &str = "connected for less than one report period";

/// One agent as a replica knows it: its last heartbeat and when it was first and last
/// heard from in this connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryAgent {
    pub heartbeat: Heartbeat,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
}

impl InventoryAgent {
    /// Whether the agent counts: connected for at least one report period, so that an
    /// agent moving between replicas is not counted twice.
    pub fn settled(&self, now: Timestamp, report_period: SignedDuration) -> bool {
        now.duration_since(self.first_seen) >= report_period
    }

    /// Counted as failed: rolled back, or not healthy.
    pub fn failed(&self) -> bool {
        self.heartbeat.rollback || !self.heartbeat.healthy
    }

    pub fn connected(&self) -> ConnectedAgent {
        let hb = &self.heartbeat;
        ConnectedAgent {
            updater_id: hb.updater_id.clone(),
            host_id: hb.host_id.clone(),
            hostname: hb.hostname.clone(),
            group: hb.group.clone(),
            version: hb.version.clone(),
            updater_status: hb.updater_status,
        }
    }
}

/// The report of one replica at `now`: settled agents with updates enabled, counted
/// per group and version; everyone else under `omitted` with the reason.
pub fn build_report<'a>(
    now: Timestamp,
    agents: impl IntoIterator<Item = &'a InventoryAgent>,
    report_period: SignedDuration,
) -> ReportSpec {
    let mut groups: BTreeMap<String, GroupReport> = BTreeMap::new();
    let mut omitted: BTreeMap<&'static str, u64> = BTreeMap::new();
    for agent in agents {
        let hb = &agent.heartbeat;
        let skip = if hb.updater_id.is_empty() {
            Some(OMITTED_NO_UPDATER_ID)
        } else if hb.updater_status == UpdaterStatus::Disabled {
            Some(OMITTED_DISABLED)
        } else if hb.updater_status == UpdaterStatus::Pinned {
            Some(OMITTED_PINNED)
        } else if !agent.settled(now, report_period) {
            Some(OMITTED_TOO_NEW)
        } else {
            None
        };
        if let Some(reason) = skip {
            *omitted.entry(reason).or_default() += 1;
            continue;
        }
        let entry = groups
            .entry(hb.group.clone())
            .or_default()
            .versions
            .entry(normalize(&hb.version))
            .or_default();
        entry.count += 1;
        if agent.failed() {
            entry.failed_count += 1;
        }
        if entry.lowest_updater_id.is_empty()
            || UpdaterNumeral::of(&hb.updater_id) < UpdaterNumeral::of(&entry.lowest_updater_id)
        {
            entry.lowest_updater_id = hb.updater_id.clone();
        }
    }
    ReportSpec {
        timestamp: now,
        groups,
        omitted: omitted
            .into_iter()
            .map(|(reason, count)| Omitted {
                reason: reason.to_string(),
                count,
            })
            .collect(),
    }
}
