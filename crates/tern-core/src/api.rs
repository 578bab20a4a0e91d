//! The admin API's requests and answers, declared once: ternd serves them, ternctl and
//! the end-to-end harness read them. The updater's contract is [`crate::domain::wire`], which
//! is forgiving on purpose; this one is strict: a field ternd always sends has no
//! default here, so a renamed or missing field fails loudly in the reader.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::domain::controls::{Channel, Freeze};
pub use crate::domain::exposure::ConfigWarning;
use crate::domain::resource::{
    Alert, AutoUpdateAgentRollout, AutoUpdateVersion, Canary, GroupState, Mode, Omitted,
};
use crate::domain::rollout::Event;
use crate::domain::wire::UpdaterStatus;

/// The mode in force and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Modes {
    /// The mode in force: see [`crate::domain::rollout::mode_in_force`].
    pub mode: Mode,
    /// The autoupdate_config's own mode; `None` when it sets none.
    pub config_mode: Option<Mode>,
    /// The autoupdate_version's own mode; `None` when it sets none.
    pub version_mode: Option<Mode>,
    /// Why agent updates do not move, for people; `None` when they are enabled.
    pub why_stopped: Option<String>,
    /// The global freeze, while one holds (`ternctl agents freeze`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Freeze>,
}

/// A server-side pin of one host (`ternctl inventory pin`): find never tells it to
/// update before `until`; then it rejoins its group's rollout by itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPin {
    pub updater_id: String,
    pub until: Timestamp,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The token id that pinned, and when.
    pub by: String,
    pub since: Timestamp,
    /// The products it holds; empty: every product the host runs (a host uses one
    /// updater id for all its products on a ternd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<String>,
}

impl HostPin {
    /// Whether it holds `product`'s installs.
    pub fn holds(&self, product: &str) -> bool {
        self.products.is_empty() || self.products.iter().any(|p| p == product)
    }
}

/// The body of `PUT /v1/inventory/{updater_id}/pin`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    /// An RFC 3339 instant, or a date (`2026-12-01`: the pin lifts at its start, 00:00
    /// UTC).
    pub until: String,
    #[serde(default)]
    pub reason: String,
    /// The products it holds (each a product ternd serves); empty or absent: every
    /// product.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<String>,
}

/// `GET /v1/pins`: every server-side pin, lifted ones included until they are cleaned
/// up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinsResponse {
    pub now: Timestamp,
    pub pins: Vec<HostPin>,
}

/// When a pin lifts, from what an operator typed: an RFC 3339 instant, or a date (its
/// start, 00:00 UTC). It must be after `now`: a pin that has lifted already is a typo.
pub fn parse_until(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    let t = text.trim();
    let until = match t.parse::<Timestamp>() {
        Ok(ts) => ts,
        Err(_) => match t.parse::<jiff::civil::Date>() {
            Ok(d) => d
                .to_zoned(jiff::tz::TimeZone::UTC)
                .map_err(|e| format!("until: {t:?}: {e}"))?
                .timestamp(),
            Err(_) => {
                return Err(format!(
                    "until: {:?} is neither a date (2026-12-01) nor an RFC 3339 instant (2026-12-01T08:00:00Z)",
                    t.chars().take(64).collect::<String>()
                ));
            }
        },
    };
    if until <= now {
        return Err(format!(
            "until: {until} is not in the future (now is {now}): the pin would lift at once"
        ));
    }
    Ok(until)
}

/// The body of `PUT /v1/freeze`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreezeBody {
    pub reason: String,
    /// The products it holds (each a product ternd serves); empty or absent: every
    /// product. A freeze in force is only ever widened by another: naming fewer
    /// products does not lift it for the others (`unfreeze` does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<String>,
}

/// `GET|PUT|DELETE /v1/freeze`: the freeze now (`None`: none holds), and whether the
/// request changed anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeResponse {
    pub freeze: Option<Freeze>,
    pub changed: bool,
}

/// `GET /v1/products`: every product this ternd serves, the agent first, then by
/// name, each with its rollout at a glance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProductsResponse {
    pub now: Timestamp,
    /// The most products a ternd serves (the agent and the updater included).
    pub max_products: usize,
    pub products: Vec<ProductSummary>,
}

/// One product's rollout at a glance (`views::product_summary`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProductSummary {
    pub name: String,
    /// The agent or the updater: served whether or not it has a version resource.
    pub builtin: bool,
    /// It runs under an autoupdate_config of its own; otherwise the shared one's
    /// groups, windows and mode apply (for a product other than the agent, without
    /// the groups' canary analysis).
    pub own_config: bool,
    /// The mode in force for it (a freeze of it included), and why it does not move.
    pub mode: Mode,
    pub why_stopped: Option<String>,
    pub start_version: Option<String>,
    pub target_version: Option<String>,
    /// The rollout's state; `None` without a rollout (`no_rollout_reason` says why).
    pub state: Option<crate::domain::resource::RolloutState>,
    pub no_rollout_reason: Option<String>,
    pub groups: Vec<ProductGroup>,
    /// Hosts in the live reports of this product.
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    /// The kinds of its rollout's active alerts, oldest first.
    pub alerts: Vec<String>,
}

/// One group of a [`ProductSummary`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProductGroup {
    pub name: String,
    pub state: GroupState,
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
}

/// `POST /v1/agents/suspend|resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeResponse {
    #[serde(flatten)]
    pub modes: Modes,
    /// False when the config already had that mode.
    pub changed: bool,
}

/// An event, as the API and logs show it: its stable kind and its line for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    pub kind: String,
    pub message: String,
}

impl From<&Event> for EventView {
    fn from(e: &Event) -> Self {
        Self {
            kind: e.kind().to_string(),
            message: e.to_string(),
        }
    }
}

/// The body of `POST /v1/agents/{start-update,mark-done,rollback}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionBody {
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub force: bool,
}

/// A group a transition changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedGroup {
    pub name: String,
    pub from: GroupState,
    pub to: GroupState,
}

/// The answer to a manual transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransitionResponse {
    /// The groups that changed, with their new state.
    pub groups: Vec<ChangedGroup>,
    pub events: Vec<EventView>,
    #[serde(flatten)]
    pub modes: Modes,
    pub rollout: AutoUpdateAgentRollout,
}

/// The body of `POST /v1/agents/new-rollout`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRolloutBody {
    /// The version to roll out.
    #[serde(default)]
    pub version: String,
    /// The version the fleet runs now, when it is not the current target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// Later halt-on-error groups follow within the window open now once the earlier
    /// ones are done (`spec.agents.follow_in_window`). Unset: off for a new target,
    /// kept for the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_in_window: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewRolloutResponse {
    pub start_version: String,
    pub target_version: String,
    /// False when the autoupdate_version already asked for exactly this.
    pub changed: bool,
    /// Why the start version is not the last target (it failed), or why nothing
    /// changed.
    pub note: Option<String>,
    pub version: AutoUpdateVersion,
    /// What ternd could see is missing of the target's artifacts
    /// (`--artifact-url-template`): the rollout is written anyway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `GET /v1/releases/signed?version=V`: whether the signed release repository ternd
/// verifies against (`ternd start --trust-root`) signs a version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReleaseSignedResponse {
    /// False when no check was made (then `signed` is None): ternd has no release
    /// repository configured, or could not refresh it (`detail` says why).
    pub verified: bool,
    pub signed: Option<bool>,
    /// Signed, but below the signed minimum version of its release line: the release
    /// keys revoked it (`detail` names the minimum).
    pub revoked: bool,
    /// The targets metadata version looked at, or why the check could not be made.
    pub detail: String,
}

/// One group of `GET /v1/agents/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub name: String,
    pub state: GroupState,
    /// The last group also serves agents with no group or an unknown one.
    pub catch_all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    pub last_update_reason: String,
    /// `last_update_reason` in a sentence ([`crate::domain::reason::sentence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_reason_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Timestamp>,
    /// Connected agents now (from the live reports).
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    /// Agents whose install of the target failed before the switch, per kind
    /// (`wire::INSTALL_FAILURE_KINDS`); empty when none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, u64>,
    /// Agents when the group started.
    pub initial: u64,
    pub progress: f64,
    pub canary_count: i64,
    /// Sent only when the group has canaries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<Canary>,
    /// What its canaries cover of its `canary_cover`, and what they miss.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary_coverage: Vec<crate::domain::resource::CanaryCoverage>,
    /// When the open window opened, if it is open now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_open_since: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_closes: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Timestamp>,
    /// Its topology limits and how each label value stands (only with limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<TopologyStatus>,
    /// While it waits for canaries (in canary, none picked yet): how many hosts the
    /// live reports offer as candidates (each replica offers at most a sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_canaries: Option<u64>,
    /// With no candidate: the host that becomes one first, once known for the
    /// canary tenure (`ternd start --canary-tenure`), and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_eligible: Option<crate::domain::resource::CanaryEligible>,
    /// The two above in words ([`GroupStatus::canary_wait`]), as ternctl prints them,
    /// for the dashboard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_wait: Option<String>,
    /// An unstarted group that may start: the first instant it may, by the
    /// reconcile's rule (now or past: at the next reconcile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<Timestamp>,
    /// When the reconcile starts it, in words ("the next reconcile starts it…"): the
    /// reason above is the last reconcile's, and a window may have opened since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<String>,
    /// A group in canary or active: its hosts not yet on the target healthy, as the
    /// replica that answered knows them (each replica lists its own hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingHosts>,
}

/// The hosts of a group in canary or active that do not run the target healthy yet,
/// among those one replica hears from: how many, and the first of them in the
/// backpressure order (lowest updater id first), each with its next run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingHosts {
    /// The replica whose hosts these are.
    pub replica: String,
    pub total: u64,
    /// The first few, lowest updater id first.
    pub hosts: Vec<PendingHost>,
}

/// One host of [`PendingHosts`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingHost {
    pub updater_id: String,
    pub hostname: String,
    /// The version it runs.
    pub version: String,
    /// Rolled back, or runs unhealthy.
    pub failed: bool,
    /// Its last run (heartbeat).
    pub last_seen: Timestamp,
    /// When its next run is due at the latest (each run heartbeats, and ternd asks for
    /// one every heartbeat interval); it is forgotten if silent for three.
    pub next_run_by: Timestamp,
}

impl PendingHosts {
    /// One line per host for people, and how many more there are.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .hosts
            .iter()
            .map(|h| {
                let name = if h.hostname.is_empty() {
                    h.updater_id.clone()
                } else {
                    format!("{} ({})", h.hostname, h.updater_id)
                };
                format!(
                    "{name} runs {}{}; last run {}, next run by {}",
                    h.version,
                    if h.failed { ", failed" } else { "" },
                    h.last_seen.strftime("%H:%M:%S UTC"),
                    h.next_run_by.strftime("%H:%M:%S UTC"),
                )
            })
            .collect();
        let more = self.total.saturating_sub(self.hosts.len() as u64);
        if more > 0 {
            lines.push(format!("and {more} more (ternctl inventory ls)"));
        }
        lines
    }
}

/// What an operator can do at a halt, as `agents status` and the dashboard both say
/// it ([`crate::domain::views::next_steps`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextSteps {
    pub title: String,
    /// One sentence each; commands in `backquotes`.
    pub steps: Vec<String>,
}

impl GroupStatus {
    /// Why a group in canary has picked none yet, for people: "0 eligible canaries;
    /// host-a eligible at 09:53 UTC", or `None` when it is not waiting for candidates.
    pub fn canary_wait(&self) -> Option<String> {
        let n = self.eligible_canaries?;
        if n > 0 {
            return Some(format!(
                "{n} eligible canar{}; picked at the next reconcile",
                if n == 1 { "y" } else { "ies" }
            ));
        }
        Some(match &self.canary_eligible {
            Some(e) => format!(
                "0 eligible canaries; {} eligible at {} UTC (a host must be known for the canary tenure, `ternd start --canary-tenure`, before it may be a canary)",
                if e.hostname.is_empty() {
                    &e.updater_id
                } else {
                    &e.hostname
                },
                e.at.strftime("%H:%M")
            ),
            None => "0 eligible canaries: no enabled host of the group is connected".to_string(),
        })
    }

    /// How its canaries stand, for people: see [`crate::domain::canary::summary`].
    pub fn canary_summary(&self) -> String {
        crate::domain::canary::summary(&self.canaries, self.canary_count)
    }
}

/// One topology limit of a group in `GET /v1/agents/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyStatus {
    pub key: String,
    pub max_in_flight: u32,
    /// Per label value ("" for hosts without the label): hosts not yet on the target,
    /// and how many of them may update now.
    pub values: BTreeMap<String, TopologyValueStatus>,
    /// Values with hosts behind that wait until tracked values finish.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untracked_values: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyValueStatus {
    pub behind: u64,
    pub admitted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TopologyStatus {
    /// From a group's limit and the leader's admission for it.
    pub fn of(
        limit: &crate::domain::resource::TopologyLimit,
        admission: Option<&crate::domain::resource::TopologyAdmission>,
    ) -> Self {
        let values = admission
            .map(|a| {
                a.behind
                    .iter()
                    .map(|(v, &behind)| {
                        let admitted = behind.min(u64::from(limit.max_in_flight));
                        (v.clone(), TopologyValueStatus { behind, admitted })
                    })
                    .collect()
            })
            .unwrap_or_default();
        TopologyStatus {
            key: limit.key.clone(),
            max_in_flight: limit.max_in_flight,
            values,
            untracked_values: admission.map_or(0, |a| a.untracked_values),
        }
    }

    /// One line for people: `zone, at most 2 at once: eu-1 2/5, eu-2 1/1`.
    pub fn summary(&self) -> String {
        let mut line = format!("{}, at most {} at once: ", self.key, self.max_in_flight);
        if self.values.is_empty() {
            line.push_str("no host behind");
        }
        let values: Vec<String> = self
            .values
            .iter()
            .map(|(v, s)| {
                let name = if v.is_empty() {
                    "(no label)"
                } else {
                    v.as_str()
                };
                format!("{name} {}/{}", s.admitted, s.behind)
            })
            .collect();
        line.push_str(&values.join(", "));
        if self.untracked_values > 0 {
            line.push_str(&format!(
                "; {} more values wait for these to finish",
                self.untracked_values
            ));
        }
        line
    }
}

/// `GET /v1/agents/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusResponse {
    pub now: Timestamp,
    #[serde(flatten)]
    pub modes: Modes,
    pub rollout: Option<AutoUpdateAgentRollout>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rollout_reason: Option<String>,
    pub groups: Vec<GroupStatus>,
    /// All agents in the live reports.
    pub present: u64,
    pub up_to_date: u64,
    pub failed: u64,
    pub omitted: Vec<Omitted>,
    pub live_reports: usize,
    /// The rollout's active alerts (what needs a human), oldest first.
    pub alerts: Vec<Alert>,
    /// What the config in force risks ([`crate::domain::exposure`]): its halt-on-error groups
    /// that send a new version to all their hosts at once, counted from the live
    /// reports.
    pub config_warnings: Vec<ConfigWarning>,
    /// The rollout runs an older copy of the config's groups: since when, what
    /// differs, and how to apply the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_outdated: Option<String>,
    /// At a halt: what to do next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_steps: Option<NextSteps>,
}

impl StatusResponse {
    pub fn group(&self, name: &str) -> Option<&GroupStatus> {
        self.groups.iter().find(|g| g.name == name)
    }
}

/// One group of `GET /v1/agents/report`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersions {
    pub versions: BTreeMap<String, u64>,
    pub total: u64,
    pub failed: u64,
}

/// `GET /v1/agents/report`: the sum of the live reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportResponse {
    pub now: Timestamp,
    /// Replicas whose report is live.
    pub replicas: Vec<String>,
    /// Agents per group (as the agents present it; "" = no group) and version.
    pub groups: BTreeMap<String, GroupVersions>,
    /// The keys of `groups` in the rollout's order, then the groups it lacks (by name,
    /// "" last): the order to show them in.
    pub order: Vec<String>,
    pub total: u64,
    pub omitted: Vec<Omitted>,
    /// Groups agents present that the rollout lacks, each with the catch-all group
    /// serving them instead.
    pub unknown_groups: BTreeMap<String, String>,
}

/// One agent of `GET /v1/inventory`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryEntry {
    pub updater_id: String,
    pub host_id: String,
    pub hostname: String,
    pub group: String,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updater_version: Option<String>,
    pub updater_status: UpdaterStatus,
    /// `None`: its updater cannot tell.
    #[serde(default)]
    pub healthy: Option<bool>,
    /// Which way it is told its version: rollout, channel or directive.
    #[serde(default)]
    pub model: crate::domain::inventory::Model,
    pub rollback: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    /// Its last install that failed before the switch, until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_failure: Option<crate::domain::wire::InstallFailure>,
    /// Its last update that switched and failed (why, and the agent's last output),
    /// until one succeeds; cleaned of control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_failure: Option<crate::domain::wire::UpdateFailure>,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    /// Connected for one report period.
    pub settled: bool,
    /// Counted in this replica's report; otherwise it is under the report's `omitted`.
    pub counted: bool,
    /// The host's facts (labels, build, installer types), when its updater sends them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arch: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub os: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub os_version: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fips: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installers: Vec<String>,
    /// Its install state under the active directive (`None`: no directive governs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_state: Option<crate::domain::directive::state::InstallState>,
    /// The outcome of the last install a directive asked of it, as the host reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_result: Option<crate::domain::directive::state::AttemptResult>,
    /// Whether it pins a release root, and which version (`None`: its updater does
    /// not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<crate::domain::wire::HostTrust>,
}

/// `GET /v1/inventory`: the agents connected to one replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryResponse {
    pub replica: String,
    pub now: Timestamp,
    pub agents: Vec<InventoryEntry>,
    /// Groups agents present that the rollout lacks, each with the catch-all group
    /// serving them instead.
    pub unknown_groups: BTreeMap<String, String>,
    /// How many agents match the filters (all pages together).
    pub matched: u64,
    /// Pass as `cursor` for the next page; `None` on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/inventory/{updater_id}`: one host and when it will update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostResponse {
    pub replica: String,
    pub now: Timestamp,
    pub agent: InventoryEntry,
    pub forecast: crate::domain::forecast::Forecast,
    /// What changed on the host, newest first, as the replicas heard it (the newest
    /// `history::MAX_EVENTS`).
    pub history: Vec<crate::domain::history::HostEvent>,
    /// Why `history` could not be read (the store failed); the rest of the answer stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_error: Option<String>,
}

/// `GET /v1/whoami`: the token that asks, and what its role may do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub token_id: String,
    pub role: Role,
    /// Who the token is for (docs/security.md, "Principals").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub principal: String,
    /// Status, inventory, resources.
    pub read: bool,
    /// Suspend, resume, the manual transitions, the config.
    pub write: bool,
    /// New-rollout, tokens, channels.
    pub operator: bool,
}

/// `POST /v1/preview/{action}`: what the action would do now, computed by the same
/// core functions the action runs, written nowhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewResponse {
    pub action: String,
    /// One line per effect, for people.
    pub effects: Vec<String>,
    /// Groups whose state would change (transitions).
    pub groups: Vec<ChangedGroup>,
    pub events: Vec<EventView>,
    /// The modes after the action (suspend, resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Modes>,
    /// The versions the rollout would move between (new-rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// False when the action would change nothing.
    pub changes: bool,
}

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, including the autoupdate_version, tokens and channels.
    Operator,
    /// The config, suspend/resume and the manual transitions; not the version.
    User,
    /// Read only.
    Viewer,
    /// Updaters: heartbeats only. A host credential (from `POST /v1/agents/join`) is an
    /// agent token bound to one updater_id; an unbound agent token is the shared token
    /// of earlier releases, still accepted (see docs/security.md, migration).
    Agent,
    /// Join tokens: exchanged by `tern-update enable` for a host credential, nothing
    /// else; limited in uses and time.
    Join,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Operator,
        Role::User,
        Role::Viewer,
        Role::Agent,
        Role::Join,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::User => "user",
            Self::Viewer => "viewer",
            Self::Agent => "agent",
            Self::Join => "join",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a role (operator, user, viewer, agent or join)")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRole(s.to_string()))
    }
}

/// The body of `POST /v1/tokens`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub description: String,
    /// How many hosts may join with it (join tokens; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u64>,
    /// How long it is valid, e.g. `24h` (join tokens: default 24h; others: forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// The person or system it is for (docs/security.md, "Principals"); default: the
    /// minting token's own principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// An agent token for a controller that heartbeats for many workloads (the
    /// Kubernetes controller): shared by design, so still accepted where ternd refuses
    /// the shared agent tokens of earlier releases (`--shared-agent-token refuse`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub controller: bool,
}

/// The body of `POST /v1/agents/join`: who is joining.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinBody {
    pub updater_id: String,
    #[serde(default)]
    pub host_id: String,
    #[serde(default)]
    pub hostname: String,
}

/// `POST /v1/agents/join`: the host credential, in clear, shown once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinResponse {
    /// An agent token bound to `updater_id`: heartbeats for any other id are refused.
    pub token: String,
    pub id: String,
    pub updater_id: String,
}

/// A token as listed: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    pub id: String,
    pub role: Role,
    pub created: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Timestamp>,
    /// Joins left (join tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<u64>,
    /// The updater a host credential belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updater_id: Option<String>,
    /// Sent only when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Who the token is for, set when it was minted (tokens of earlier releases:
    /// `token:<id>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub principal: String,
    /// The token that minted it (none for the bootstrap token and earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minted_by: Option<String>,
    /// A controller's agent token ([`TokenBody::controller`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub controller: bool,
}

/// One admin write (or refused attempt) in the audit trail (`GET /v1/audit`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub time: Timestamp,
    /// The id of the token that sent it (never the token).
    pub token_id: String,
    pub role: Role,
    pub method: String,
    /// The path and query, e.g. `/v1/resources/config?force=true`.
    pub path: String,
    /// The HTTP status answered: 2xx done, 403 refused for the role, 4xx/5xx failed.
    pub status: u16,
    /// The replica that served it.
    pub replica: String,
}

/// `POST /v1/tokens`: the token in clear, shown once (ternd keeps only its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTokenResponse {
    pub token: String,
    #[serde(flatten)]
    pub view: TokenView,
}

/// The body of `PUT /v1/channels/{name}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub critical: bool,
}

/// What one reconcile did (`POST /v1/dev/reconcile`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReconcileResult {
    /// False when another replica holds the leader lease (nothing was reconciled here).
    pub leader: bool,
    pub rollout: Option<AutoUpdateAgentRollout>,
    pub events: Vec<EventView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_rollout_reason: Option<String>,
    /// When this replica did not lead: the replica holding the lease, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_replica: Option<String>,
    /// Why nothing was reconciled here, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `POST /v1/dev/reconcile`: the dev clock's instant and what the reconcile did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DevReconcileResponse {
    pub now: Timestamp,
    #[serde(flatten)]
    pub result: ReconcileResult,
}

/// The body of `POST /v1/dev/clock`: exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockBody {
    /// RFC 3339 instant to set the clock to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// Duration to move the clock forward by (`20s`, `90m`, `1h30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance: Option<String>,
}

/// `GET|POST /v1/dev/clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockResponse {
    pub now: Timestamp,
}

/// `DELETE` answers: what was deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_print() {
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
        assert_eq!(
            "root".parse::<Role>().unwrap_err().to_string(),
            "\"root\" is not a role (operator, user, viewer, agent or join)"
        );
    }

    #[test]
    fn a_missing_field_the_server_always_sends_is_an_error() {
        let json = r#"{"replica":"r1","now":"2026-11-23T10:00:00Z","agents":[{"updater_id":"u"}]}"#;
        let err = serde_json::from_str::<InventoryResponse>(json).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    #[test]
    fn request_bodies_refuse_unknown_fields() {
        let err = serde_json::from_str::<TransitionBody>(r#"{"group": ["dev"]}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `group`"), "{err}");
    }
}

#[cfg(test)]
mod until_tests {
    use super::*;

    #[test]
    fn until_is_an_instant_or_the_start_of_a_date_and_in_the_future() {
        let now: Timestamp = "2026-11-24T10:00:00Z".parse().unwrap();
        let ts = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(
            parse_until("2026-12-01", now),
            Ok(ts("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            parse_until(" 2026-11-24T12:30:00+01:00 ", now),
            Ok(ts("2026-11-24T11:30:00Z"))
        );
        let past = parse_until("2026-11-24T10:30:00+01:00", now).unwrap_err();
        assert!(past.contains("not in the future"), "{past}");
        assert!(
            parse_until("2026-11-24", now).is_err(),
            "today's start has passed"
        );
        let bad = parse_until("next tuesday", now).unwrap_err();
        assert!(
            bad.starts_with("until: \"next tuesday\" is neither"),
            "{bad}"
        );
    }
}
