//! The four resources, with the field names of the Managed Updates v2 reference so a
//! Teleport user's files work unchanged. User-written specs refuse unknown fields (a
//! typo must not be silently ignored); system resources read leniently so replicas of
//! different versions can share them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::domain::analysis::{AnalysisQuery, AnalysisSpec, AnalysisStatus};
use crate::domain::duration::{GoDuration, Percent};
use crate::domain::version::Version;
use crate::domain::window::{Blackout, CalendarSpec, Day, StartTime, WindowSpec};
use crate::domain::wire::UpdaterStatus;

mod group_copy;
use group_copy::RolloutCopy;

pub const KIND_CONFIG: &str = "autoupdate_config";
pub const KIND_VERSION: &str = "autoupdate_version";
pub const KIND_ROLLOUT: &str = "autoupdate_agent_rollout";
pub(crate) const KIND_REPORT: &str = "autoupdate_agent_report";
pub(crate) const NAME_CONFIG: &str = "autoupdate-config";
pub const NAME_VERSION: &str = "autoupdate-version";
pub(crate) const NAME_ROLLOUT: &str = "autoupdate-agent-rollout";
pub(crate) const RESOURCE_VERSION: &str = "v1";

/// The name the catch-all group gets when a config defines no schedule.
pub(crate) const DEFAULT_GROUP: &str = "default";
/// The start hour of the implicit `default` group.
pub(crate) const DEFAULT_GROUP_START_HOUR: u8 = 12;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    #[serde(default)]
    pub name: String,
    /// Set by the store on every write; used for compare-and-swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Timestamp>,
}

impl Metadata {
    pub(crate) fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ..Self::default()
        }
    }
}

pub(crate) fn default_resource_version() -> String {
    RESOURCE_VERSION.to_string()
}

/// Whether agent updates may happen: the most restrictive of config and version wins.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Ordered by restriction: `Enabled < Suspended < Disabled`.
    #[default]
    #[serde(alias = "enable")]
    Enabled,
    #[serde(alias = "pause", alias = "paused")]
    Suspended,
    #[serde(alias = "disable")]
    Disabled,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Suspended => "suspended",
            Self::Disabled => "disabled",
        }
    }

    /// The most restrictive of the two.
    pub(crate) fn combine(self, other: Mode) -> Mode {
        self.max(other)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    #[default]
    HaltOnError,
    TimeBased,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HaltOnError => "halt-on-error",
            Self::TimeBased => "time-based",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    #[default]
    Regular,
    Immediate,
}

impl Schedule {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Regular => "regular",
            Self::Immediate => "immediate",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupState {
    #[default]
    Unstarted,
    Canary,
    Active,
    Done,
    #[serde(alias = "rollback")]
    Rolledback,
}

impl GroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unstarted => "unstarted",
            Self::Canary => "canary",
            Self::Active => "active",
            Self::Done => "done",
            Self::Rolledback => "rolledback",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    #[default]
    Unspecified,
    Unstarted,
    Active,
    Done,
    Rolledback,
}

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Unstarted => "unstarted",
            Self::Active => "active",
            Self::Done => "done",
            Self::Rolledback => "rolledback",
        }
    }
}

// ---------------------------------------------------------------------------
// autoupdate_config

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoUpdateConfig {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: ConfigSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<AgentsConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window_duration: Option<GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedules: Option<Schedules>,
    /// Whether a host's own group (`tern-update enable --group`) wins over the groups'
    /// `match_labels`; unset: `override`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_group: Option<HostGroup>,
}

/// Who places a host in a group when groups declare `match_labels`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostGroup {
    /// A host presenting a group the rollout has stays in it; the labels place the
    /// others (no group, or an unknown one).
    #[default]
    Override,
    /// The labels place every host they match; a host's own group counts only when no
    /// group's `match_labels` matches it.
    Fallback,
}

impl HostGroup {
    pub(crate) fn is_default(&self) -> bool {
        *self == Self::Override
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedules {
    #[serde(default)]
    pub regular: Vec<GroupConfig>,
}

/// One group of the regular schedule. Integers are signed so that a negative value
/// reaches validation and gets an error naming the field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    /// With `start_hour`, the one window of a group that sets no `windows`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<Day>,
    /// The UTC (or `timezone`) hour that one window opens at; unset is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_hour: Option<i64>,
    /// Several windows instead of `days`/`start_hour` (never both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WindowSpec>,
    /// The IANA zone the windows and blackouts are read in; unset is UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Civil dates on which no window opens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blackouts: Vec<Blackout>,
    /// The server places hosts whose heartbeat labels include all of these in this
    /// group (the first group that matches; see `spec.agents.host_group`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// At most `max_in_flight` hosts per value of a host label (a zone, a rack) update
    /// at once while the group is active, on top of `max_in_flight`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<TopologyLimit>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_hours: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub canary_count: i64,
    /// Host attributes whose distinct values the canaries cover first (`arch`, `os`,
    /// `os_version`, `labels.KEY`), before the rest is picked at random.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary_cover: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Percent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_after: Option<GoDuration>,
    /// Prometheus queries the canaries must pass, besides running the target healthy,
    /// before the group goes active ([`crate::domain::analysis`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisSpec>,
}

impl RolloutCopy for GroupConfig {
    /// In their order (`name` first), as serde reads them.
    fn fields() -> &'static [&'static str] {
        static FIELDS: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
        FIELDS.get_or_init(group_copy::struct_fields::<GroupConfig>)
    }

    /// A rollout writes an unset `start_hour` as `0`, as Teleport does: `0` is unset.
    fn read_back(&mut self) {
        if self.start_hour == Some(0) {
            self.start_hour = None;
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One topology limit of a group: hosts whose label `key` has the same value (hosts
/// without it share the value "") update at most `max_in_flight` at a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyLimit {
    pub key: String,
    pub max_in_flight: u32,
}

impl GroupConfig {
    /// The fields that make up a group's schedule: a rollout names a change to any of
    /// them as one, `window` ([`GroupConfig::differing_fields`]).
    const WINDOW_FIELDS: [&str; 5] = ["days", "start_hour", "windows", "timezone", "blackouts"];

    /// The copy of this group a new rollout keeps, read back as it was written: no
    /// `name` (the rollout group's own), and its schedule in one form. A group that
    /// uses `windows`, `timezone` or `blackouts` keeps its schedule there (`days`
    /// then become a window and stay empty, so that a replica that predates them sees
    /// a window that never opens and holds the group rather than guess); one written
    /// the old way keeps `days` and `start_hour`.
    pub(crate) fn rollout_copy(&self) -> GroupConfig {
        let mut copy = GroupConfig {
            name: String::new(),
            ..self.clone()
        };
        if let Some(calendar) = self.calendar_spec() {
            copy.days = Vec::new();
            copy.start_hour = None;
            copy.windows = calendar.windows;
            copy.timezone = calendar.timezone;
            copy.blackouts = calendar.blackouts;
        }
        copy.read_back();
        copy
    }

    /// The fields in which two copies of a group differ, by their names in the config,
    /// in its order; the schedule's as one, `window`.
    pub(crate) fn differing_fields(&self, other: &GroupConfig) -> Vec<&'static str> {
        // Plain data with string keys: serializing it to a value cannot fail.
        let a = serde_json::to_value(self).unwrap_or_default();
        let b = serde_json::to_value(other).unwrap_or_default();
        let mut differ = Vec::new();
        for &field in <Self as RolloutCopy>::fields() {
            if field == "name" || a.get(field) == b.get(field) {
                continue;
            }
            let named = if Self::WINDOW_FIELDS.contains(&field) {
                "window"
            } else {
                field
            };
            if !differ.contains(&named) {
                differ.push(named);
            }
        }
        differ
    }

    /// The schedule in its new form when the group uses any part of it (`windows`,
    /// `timezone`, `blackouts`); `days`/`start_hour` then become its one window.
    /// `None` for a group written the old way, whose window stays what it always was.
    pub fn calendar_spec(&self) -> Option<CalendarSpec> {
        if self.windows.is_empty() && self.timezone.is_none() && self.blackouts.is_empty() {
            return None;
        }
        let windows = if self.windows.is_empty() {
            let days = if self.days.is_empty() {
                Day::WORKWEEK.to_vec()
            } else {
                self.days.clone()
            };
            // An hour out of range is refused by validation; unvalidated, it never opens.
            u8::try_from(self.start_hour.unwrap_or(0))
                .ok()
                .and_then(|h| StartTime::new(h, 0))
                .map(|start| WindowSpec {
                    days,
                    start,
                    duration: None,
                })
                .into_iter()
                .collect()
        } else {
            self.windows.clone()
        };
        Some(CalendarSpec {
            windows,
            timezone: self.timezone.clone(),
            blackouts: self.blackouts.clone(),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ToolsMode>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolsMode {
    Enabled,
    #[default]
    Disabled,
}

impl Default for AutoUpdateConfig {
    fn default() -> Self {
        Self {
            kind: KIND_CONFIG.to_string(),
            version: default_resource_version(),
            metadata: Metadata::named(NAME_CONFIG),
            spec: ConfigSpec::default(),
        }
    }
}

impl AutoUpdateConfig {
    fn agents(&self) -> Option<&AgentsConfig> {
        self.spec.agents.as_ref()
    }

    /// The config's own `spec.agents.mode`, `None` when unset (see
    /// [`crate::domain::rollout::mode_in_force`] for what an unset mode means).
    pub fn mode(&self) -> Option<Mode> {
        self.agents().and_then(|a| a.mode)
    }

    pub fn strategy(&self) -> Strategy {
        self.agents().and_then(|a| a.strategy).unwrap_or_default()
    }

    pub(crate) fn host_group(&self) -> HostGroup {
        self.agents().and_then(|a| a.host_group).unwrap_or_default()
    }

    pub fn tools_mode(&self) -> ToolsMode {
        self.spec
            .tools
            .as_ref()
            .and_then(|t| t.mode)
            .unwrap_or_default()
    }

    /// The window length of a group: 1h for halt-on-error, the configured duration
    /// (default 1h) for time-based.
    pub fn maintenance_window_duration(&self) -> Option<GoDuration> {
        match self.strategy() {
            Strategy::HaltOnError => None,
            Strategy::TimeBased => Some(
                self.agents()
                    .and_then(|a| a.maintenance_window_duration)
                    .unwrap_or(GoDuration::from_hours(1)),
            ),
        }
    }

    /// The groups of the regular schedule, defaults filled in; a config without a
    /// schedule has one group, `default`.
    pub fn groups(&self) -> Vec<GroupConfig> {
        let configured = self
            .agents()
            .and_then(|a| a.schedules.as_ref())
            .map(|s| s.regular.clone())
            .unwrap_or_default();
        if configured.is_empty() {
            return vec![GroupConfig {
                name: DEFAULT_GROUP.to_string(),
                days: Day::WORKWEEK.to_vec(),
                start_hour: Some(i64::from(DEFAULT_GROUP_START_HOUR)),
                ..GroupConfig::default()
            }];
        }
        configured
            .into_iter()
            .map(|mut g| {
                if g.days.is_empty() && g.windows.is_empty() {
                    g.days = Day::WORKWEEK.to_vec();
                }
                g
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// autoupdate_version

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoUpdateVersion {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: VersionSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<AgentsVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsVersion>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsVersion {
    pub start_version: Version,
    pub target_version: Version,
    #[serde(default)]
    pub schedule: Schedule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Tern's: halt-on-error groups after the first may start within a window that
    /// opened before this rollout began, once the groups before them are done (by
    /// default a group waits for a window that opens after the rollout began). Per
    /// rollout: `ternctl agents new-rollout VERSION --follow-in-window`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow_in_window: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsVersion {
    pub target_version: Version,
}

impl AutoUpdateVersion {
    pub fn new(agents: Option<AgentsVersion>) -> Self {
        Self {
            kind: KIND_VERSION.to_string(),
            version: default_resource_version(),
            metadata: Metadata::named(NAME_VERSION),
            spec: VersionSpec {
                agents,
                tools: None,
            },
        }
    }

    /// The version's own `spec.agents.mode`, `None` when unset.
    pub fn mode(&self) -> Option<Mode> {
        self.spec.agents.as_ref().and_then(|a| a.mode)
    }
}

// ---------------------------------------------------------------------------
// autoupdate_agent_rollout

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoUpdateAgentRollout {
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: RolloutSpec,
    #[serde(default)]
    pub status: RolloutStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutSpec {
    pub start_version: Version,
    pub target_version: Version,
    #[serde(default)]
    pub schedule: Schedule,
    #[serde(default)]
    pub autoupdate_mode: Mode,
    #[serde(default)]
    pub strategy: Strategy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window_duration: Option<GoDuration>,
    /// The config's `host_group` (for groups with `match_labels`).
    #[serde(default, skip_serializing_if = "HostGroup::is_default")]
    pub host_group: HostGroup,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutStatus {
    #[serde(default)]
    pub state: RolloutState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// When set, the reconciler evaluates windows at this instant instead of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_override: Option<Timestamp>,
    #[serde(default)]
    pub groups: Vec<RolloutGroup>,
    /// What needs a human now ([`crate::domain::alert`]); empty when all is well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<Alert>,
    /// The version's `spec.agents.follow_in_window`, as the last reconcile read it:
    /// later halt-on-error groups may start within a window that opened before the
    /// rollout began ([`crate::domain::reconcile`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow_in_window: bool,
}

/// An active alert of a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Stable: one of [`crate::domain::alert::kind`].
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub message: String,
    /// When it was first raised; kept while it holds.
    pub since: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutGroup {
    pub name: String,
    #[serde(default)]
    pub state: GroupState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Timestamp>,
    #[serde(default)]
    pub last_update_reason: String,
    /// The config's group as the rollout began with it ([`GroupConfig::rollout_copy`];
    /// its `name` is empty: the group's is `name`): a rollout never changes its rules
    /// halfway. Written among the group's fields, each as `config_<field>` (but
    /// `canary_count`), Teleport's `config_days`, `config_start_hour`,
    /// `config_wait_hours` and `canary_count` always (`group_copy`).
    #[serde(flatten, with = "group_copy")]
    pub config: GroupConfig,
    /// Who the topology limits admit now, one entry per limit of `config.topology` (in
    /// its order), worked out by the leader from the replicas' reports. A host not
    /// admitted by every entry is not told to update while the group is active.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<TopologyAdmission>,
    /// What the canaries picked cover of `config.canary_cover`, and what they miss,
    /// among the candidates offered when they were picked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary_coverage: Vec<CanaryCoverage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<Canary>,
    /// Where the canary analysis stands ([`crate::domain::analysis`]); none before the first
    /// evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
    /// The most agents seen connected in the group (counted or not: pinned, disabled,
    /// settling) during this rollout, or the one before it: what the group "was",
    /// against which vanished hosts are measured.
    #[serde(default)]
    pub peak_count: u64,
    /// Agents of the group connected now, counted or not ([`GroupReport::uncounted`]).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub connected_count: u64,
    #[serde(default)]
    pub initial_count: u64,
    /// Started (or reset) by hand: `initial_count` is what the last reconcile counted,
    /// and the next reconcile whose reports can tell (live, no replica warming up,
    /// none missing) takes it again from the hosts present then.
    #[serde(default, skip_serializing_if = "is_false")]
    pub initial_count_pending: bool,
    #[serde(default)]
    pub present_count: u64,
    #[serde(default)]
    pub up_to_date_count: u64,
    #[serde(default)]
    pub failed_count: u64,
    /// Hosts of the group whose install of the target failed before the switch, and
    /// how many per kind of failure (`wire::INSTALL_FAILURE_KINDS`).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub refused_count: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused_kinds: BTreeMap<String, u64>,
    /// Share of the group's updater_id space allowed to update (backpressure).
    #[serde(default)]
    pub progress: f64,
}

/// Who one topology limit admits: for each value of its label, the `max_in_flight`
/// hosts not yet on the target with the lowest updater ids (the backpressure order).
/// A host is in flight from admission until it reports the target, so a host that
/// failed on it keeps its place and its zone holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyAdmission {
    pub key: String,
    /// Admitted updater ids, sorted (find looks a host up by binary search).
    #[serde(default)]
    pub admitted: Vec<String>,
    /// Per label value: how many hosts were reported not yet on the target.
    #[serde(default)]
    pub behind: BTreeMap<String, u64>,
    /// Label values with hosts behind that are not tracked yet (past
    /// `MAX_TOPOLOGY_VALUES`): their hosts wait until tracked values finish.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub untracked_values: u64,
}

impl TopologyAdmission {
    pub(crate) fn admits(&self, updater_id: &str) -> bool {
        self.admitted
            .binary_search_by(|a| a.as_str().cmp(updater_id))
            .is_ok()
    }
}

/// One attribute of a group's `canary_cover`: the values its canaries run on, and
/// those the candidates had that no canary has ("" stands for hosts that do not say).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryCoverage {
    pub attribute: String,
    #[serde(default)]
    pub covered: Vec<String>,
    #[serde(default)]
    pub missed: Vec<String>,
}

impl CanaryCoverage {
    /// One line for people: `arch: covers amd64, arm64; misses riscv64`.
    pub fn summary(&self) -> String {
        let list = |v: &[String]| {
            v.iter()
                .map(|s| {
                    if s.is_empty() {
                        "(not said)"
                    } else {
                        s.as_str()
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut line = format!("{}: covers {}", self.attribute, list(&self.covered));
        if !self.missed.is_empty() {
            line.push_str(&format!("; misses {}", list(&self.missed)));
        }
        line
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    pub updater_id: String,
    #[serde(default)]
    pub host_id: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub success: bool,
    /// The canary tried the target and failed: it rolled back, or runs the target
    /// unhealthy. Final for the rollout: a canary that recovers stays failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Why it failed, as its replica last reported it (`ReportSpec::canary_failures`:
    /// the update's error and the agent's last output, or the failed install), at most
    /// [`crate::domain::inventory::MAX_CANARY_REASON_BYTES`]; empty unless failed, and when
    /// its updater does not say.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl AutoUpdateAgentRollout {
    pub fn new(spec: RolloutSpec, status: RolloutStatus) -> Self {
        Self {
            kind: KIND_ROLLOUT.to_string(),
            version: default_resource_version(),
            metadata: Metadata::named(NAME_ROLLOUT),
            spec,
            status,
        }
    }

    pub fn group(&self, name: &str) -> Option<&RolloutGroup> {
        self.status.groups.iter().find(|g| g.name == name)
    }

    /// The group that serves an agent presenting `name`: that group if it exists,
    /// else the last one (the catch-all).
    pub fn serving_group(&self, name: &str) -> Option<&RolloutGroup> {
        self.group(name).or_else(|| self.status.groups.last())
    }
}

// ---------------------------------------------------------------------------
// autoupdate_agent_report

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoUpdateAgentReport {
    #[serde(default = "report_kind")]
    pub kind: String,
    #[serde(default = "default_resource_version")]
    pub version: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: ReportSpec,
}

fn report_kind() -> String {
    KIND_REPORT.to_string()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportSpec {
    pub timestamp: Timestamp,
    #[serde(default)]
    pub groups: BTreeMap<String, GroupReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<Omitted>,
    /// Agents this replica offers as canaries, per rollout group: a bounded random sample
    /// of its settled, enabled agents, only for groups that may pick canaries soon
    /// ([`crate::domain::inventory::canary_candidates`]). Several replicas share one rollout, and
    /// the leader's own inventory holds only the hosts connected to it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub canary_candidates: BTreeMap<String, Vec<ConnectedAgent>>,
    /// Per group that may pick canaries soon and for which this replica offers no
    /// candidate: its host that becomes one first, when its `--canary-tenure` has
    /// passed ([`crate::domain::inventory::canary_eligible`]). Shown while a group waits for
    /// canaries ("0 eligible canaries; host-a eligible at 09:53").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub canary_eligible: BTreeMap<String, CanaryEligible>,
    /// The rollout's canaries (not yet successful) connected to this replica, with the
    /// version they run, so the leader can tell when they reach the target
    /// ([`crate::domain::inventory::canaries_seen`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<ConnectedAgent>,
    /// Why each of `canaries` failed the target, by updater_id, when its updater says
    /// (the update's error and the agent's last output, or the failed install; at
    /// most [`crate::domain::inventory::MAX_CANARY_REASON_BYTES`] each): the leader writes it
    /// into the rollout's canary (`Canary::reason`) so that every view says why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub canary_failures: BTreeMap<String, String>,
    /// Per group with topology limits ([`crate::domain::inventory::topology_report`]): this
    /// replica's hosts not yet on the target, per limit and label value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, Vec<TopologyReport>>,
    /// The replica started too recently for every host connected to it to have
    /// heartbeated and settled (a heartbeat interval plus a report period): its counts
    /// are not yet all of its hosts, so no group starts on them
    /// ([`crate::domain::reason::WAITING_FOR_REPORTS`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub warming_up: bool,
    /// What was cut so that the report fits its bound (`inventory::shrink_report`):
    /// never counts, only details the leader can do without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shrunk: Vec<String>,
}

/// A host that is not a canary candidate yet only because it has not been known for
/// the canary tenure: when it becomes one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryEligible {
    pub updater_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    pub at: Timestamp,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One topology limit of a group as a replica reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyReport {
    pub key: String,
    #[serde(default)]
    pub values: BTreeMap<String, TopologyValueReport>,
}

/// The hosts of one label value not yet on the target: how many, and the lowest
/// updater ids (at most the limit's `max_in_flight`), sorted by backpressure order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyValueReport {
    pub behind: u64,
    #[serde(default)]
    pub lowest: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupReport {
    #[serde(default)]
    pub versions: BTreeMap<String, VersionReport>,
    /// Hosts whose install of a version failed before the switch, per version, per
    /// kind of failure (`wire::INSTALL_FAILURE_KINDS`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, BTreeMap<String, u64>>,
    /// Hosts of the group connected but not counted in `versions` (pinned, disabled,
    /// not settled yet): they have not vanished.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub uncounted: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionReport {
    pub count: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub failed_count: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lowest_updater_id: String,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omitted {
    pub reason: String,
    pub count: u64,
}

impl AutoUpdateAgentReport {
    pub fn new(name: &str, spec: ReportSpec) -> Self {
        Self {
            kind: report_kind(),
            version: default_resource_version(),
            metadata: Metadata::named(name),
            spec,
        }
    }
}

// ---------------------------------------------------------------------------
// the inventory the reconciler reads to pick and check canaries

/// A connected agent, as the server's inventory (or the planner's `--agents` file)
/// knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectedAgent {
    pub updater_id: String,
    #[serde(default)]
    pub host_id: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub group: String,
    pub version: String,
    #[serde(default)]
    pub updater_status: UpdaterStatus,
    /// Whether the agent runs and passes its health check; `None` when its updater
    /// could not tell (a canary passes only on a known healthy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// The version the host's updater tried and rolled back, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    /// The version whose install failed on the host before the switch (not signed,
    /// not as published, missing, no disk…), if any: for a canary, a failed canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_version: Option<String>,
    /// The attributes a group's `canary_cover` names, as this host has them (offered
    /// canary candidates only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}
