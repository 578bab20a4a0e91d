//! What replicas report of their directive passes, what an operator reads back (the
//! status, the plan), and how the reports add up. Each replica sees only its own hosts,
//! so the fleet's view is the sum of the live reports.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::state::InstallState;

/// One planned move and how many hosts make it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveCount {
    pub directive: String,
    pub from: String,
    pub to: String,
    pub installer: String,
    pub hosts: u64,
}

/// A host no target fits, with why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoFitHost {
    pub updater_id: String,
    pub hostname: String,
    pub reasons: Vec<String>,
}

/// One directive evaluated over a set of hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Evaluation {
    pub governed: u64,
    pub unaffected: u64,
    pub no_fit: u64,
    pub no_fit_examples: Vec<NoFitHost>,
    pub states: BTreeMap<InstallState, u64>,
    pub moves: Vec<MoveCount>,
    /// Hosts that need an install and could be triggered now (settled), before the rate.
    pub eligible: u64,
    /// The governed hosts the rollout would move if the directive stopped governing
    /// them (deactivated): from the version they run to the one find would name.
    pub released: Vec<ReleasedMove>,
}

/// Governed hosts on `from` that the rollout names `to` for: where they go once no
/// directive governs them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReleasedMove {
    pub from: String,
    pub to: String,
    pub hosts: u64,
}

impl ReleasedMove {
    /// Whether the move is to an older version (compared as versions; as text when
    /// either is not one).
    pub fn is_downgrade(&self) -> bool {
        match (
            crate::domain::version::Version::parse(&self.from),
            crate::domain::version::Version::parse(&self.to),
        ) {
            (Ok(f), Ok(t)) => t < f,
            _ => false,
        }
    }
}

/// At most this many hosts no target fits are shown with their reasons.
pub const NO_FIT_SHOWN: usize = 20;

impl Evaluation {
    /// Adds `other` (another replica's hosts).
    pub fn add(&mut self, other: &Evaluation) {
        self.governed += other.governed;
        self.unaffected += other.unaffected;
        self.no_fit += other.no_fit;
        for h in &other.no_fit_examples {
            if self.no_fit_examples.len() < NO_FIT_SHOWN {
                self.no_fit_examples.push(h.clone());
            }
        }
        for (s, n) in &other.states {
            *self.states.entry(*s).or_default() += n;
        }
        for m in &other.moves {
            match self.moves.iter_mut().find(|x| {
                (&x.directive, &x.from, &x.to, &x.installer)
                    == (&m.directive, &m.from, &m.to, &m.installer)
            }) {
                Some(x) => x.hosts += m.hosts,
                None => self.moves.push(m.clone()),
            }
        }
        self.moves.sort_by(|a, b| {
            (&a.directive, &a.from, &a.to, &a.installer).cmp(&(
                &b.directive,
                &b.from,
                &b.to,
                &b.installer,
            ))
        });
        self.eligible += other.eligible;
        for m in &other.released {
            match self
                .released
                .iter_mut()
                .find(|x| (&x.from, &x.to) == (&m.from, &m.to))
            {
                Some(x) => x.hosts += m.hosts,
                None => self.released.push(m.clone()),
            }
        }
        self.released.sort();
    }

    /// Hosts that should move.
    pub fn moving(&self) -> u64 {
        self.moves.iter().map(|m| m.hosts).sum()
    }
}

/// `/tern/directives/reports/<replica>`: a replica's last pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DirectiveReport {
    pub replica: String,
    pub at: Option<Timestamp>,
    /// The active directive's revision the pass used (`None`: no active directive).
    pub active_revision: Option<String>,
    pub active: Evaluation,
    /// Installs this replica triggered in this pass.
    pub triggered: u64,
    /// The pending directive, evaluated without triggering anything.
    pub plan: Option<PlanEvaluation>,
    /// The notification controller's flags over this replica's hosts.
    pub notices: Vec<super::notice::VersionNotice>,
    /// Hosts the pass chose that something held, and when each may start (at most
    /// [`MAX_WAITING`]).
    pub waiting: Vec<Waiting>,
}

/// How many held hosts a replica's report lists.
pub const MAX_WAITING: usize = 100;

/// A host the active directive chose that something holds: what, and when it may start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Waiting {
    pub updater_id: String,
    pub group: String,
    pub directive: String,
    pub target: String,
    /// The holds' codes (`not_yet`, `outside_window`, `expired`, or a stop's).
    pub holds: Vec<String>,
    /// When its install may start; `None`: no clock lifts what holds it (a stop, or
    /// its `not_after` comes first).
    pub starts_at: Option<Timestamp>,
}

/// The active directive's time rules, as `version-control status` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimingView {
    pub config_id: Option<String>,
    pub not_before: Option<Timestamp>,
    pub not_after: Option<Timestamp>,
    /// The directives whose installs keep to the hosts' windows, and those that do not.
    pub keep_windows: Vec<String>,
    pub ignore_windows: Vec<String>,
}

impl TimingView {
    pub fn of(spec: &super::resource::DirectiveSpec) -> Self {
        let (keep, ignore): (Vec<_>, Vec<_>) =
            spec.directives.iter().partition(|d| d.keeps_windows());
        TimingView {
            config_id: spec.config_id.clone(),
            not_before: spec.not_before,
            not_after: spec.not_after,
            keep_windows: keep.into_iter().map(|d| d.name.clone()).collect(),
            ignore_windows: ignore.into_iter().map(|d| d.name.clone()).collect(),
        }
    }
}

/// `/tern/directives/controllers/<name>`: what a built-in version controller did last.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerStatus {
    pub name: String,
    pub replica: String,
    pub last_run: Option<Timestamp>,
    pub last_success: Option<Timestamp>,
    /// The last run's error (`None` when it succeeded).
    pub error: Option<String>,
    /// Each directive's target version, as last drafted.
    pub targets: BTreeMap<String, String>,
    /// When the draft was last written (it is rewritten only when it changes, or to
    /// refresh its `stale_after`).
    pub draft_written: Option<Timestamp>,
    /// Releases and directives left out, and why.
    pub notes: Vec<String>,
}

/// The pending directive as one replica evaluated it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanEvaluation {
    /// The pending's nonce: a report for an older plan does not count for a newer one.
    pub nonce: String,
    pub evaluation: Evaluation,
    /// A dry-run plan: the checks this replica's hosts were sent and what they answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunCounts>,
}

/// A host whose dry run failed, with the error it reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DryRunFailure {
    pub updater_id: String,
    pub hostname: String,
    pub error: String,
}

/// The dry runs of one plan: sent, and answered either way (the rest are still out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DryRunCounts {
    pub sent: u64,
    pub passed: u64,
    pub failed: u64,
    /// The first [`NO_FIT_SHOWN`] failures, with their errors.
    pub failures: Vec<DryRunFailure>,
}

impl DryRunCounts {
    pub fn add(&mut self, other: &DryRunCounts) {
        self.sent += other.sent;
        self.passed += other.passed;
        self.failed += other.failed;
        for f in &other.failures {
            if self.failures.len() < NO_FIT_SHOWN {
                self.failures.push(f.clone());
            }
        }
    }

    /// Sent and not answered yet.
    pub fn waiting(&self) -> u64 {
        self.sent.saturating_sub(self.passed + self.failed)
    }
}

/// One approval of a pending directive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The token that applied (a second approver must use another token).
    pub token_id: String,
    pub at: Timestamp,
    /// Its principal: a second approver must be another principal.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub principal: String,
    /// The tokens that minted it, nearest first: none of them can be a second approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minted_by: Vec<String>,
    /// Whom its token speaks for (the principal at the root of its chain): a second
    /// approver must speak for someone else. Empty in approvals of earlier releases.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub speaks_for: String,
}

/// `/tern/directives/pending`: a draft planned for promotion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub draft: String,
    /// The draft's revision when planned: a draft changed since is not applied.
    pub draft_revision: String,
    /// Given to `apply`, so an operator applies the plan they read.
    pub nonce: String,
    pub planned_at: Timestamp,
    pub expires_at: Timestamp,
    pub planned_by: String,
    pub approvals_needed: u8,
    #[serde(default)]
    pub approvals: Vec<Approval>,
    /// Ask installers to check without changing anything.
    #[serde(default)]
    pub dry_run: bool,
}

/// `/tern/directives/paused`: the fault or churn limit stopped the installs; only an
/// operator lifts it (`ternctl version-control resume`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    pub reason: String,
    pub since: Timestamp,
    pub replica: String,
}

/// `GET /v1/directives/plan`: the pending directive summed over the live reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanResponse {
    pub pending: Pending,
    /// Live replicas, and how many of them evaluated this plan.
    pub replicas: u64,
    pub evaluated_by: u64,
    pub evaluation: Evaluation,
    /// A dry-run plan: its checks over the replicas that evaluated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunCounts>,
    /// What the active directive does now, for comparison.
    pub active: Evaluation,
    /// What the limits allow now.
    pub enabled: bool,
    pub rate: String,
    pub paused: Option<Paused>,
}

/// A name and the revision it was read at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    pub revision: String,
}

/// `GET /v1/directives`: the system at a glance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectivesStatus {
    /// `None`: no version_control_config, the loop does nothing.
    pub enabled: Option<bool>,
    pub active: Option<Named>,
    pub drafts: Vec<Named>,
    pub installers: Vec<String>,
    pub pending: Option<Pending>,
    pub paused: Option<Paused>,
    pub replicas: u64,
    /// The active directive over every live replica's hosts.
    pub fleet: Evaluation,
    /// Installs triggered in the replicas' last passes.
    pub triggered: u64,
    /// The notification controller's flags, over every live replica's hosts.
    #[serde(default)]
    pub notices: Vec<super::notice::VersionNotice>,
    /// The built-in version controllers.
    #[serde(default)]
    pub controllers: Vec<ControllerStatus>,
    /// The active directive's `stale_after` has passed.
    #[serde(default)]
    pub stale: bool,
    /// The active directive's time rules.
    #[serde(default)]
    pub timing: Option<TimingView>,
    /// Hosts the replicas' last passes chose that something held, soonest first.
    #[serde(default)]
    pub waiting: Vec<Waiting>,
}

/// `POST /v1/directives/apply` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApplyBody {
    pub nonce: String,
}

/// `POST /v1/directives/apply` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResponse {
    /// The draft is now the active directive.
    pub applied: bool,
    pub approvals: u8,
    pub approvals_needed: u8,
    pub message: String,
}

/// `POST /v1/directives/plan` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanBody {
    pub draft: String,
    pub dry_run: bool,
}

/// Sums the reports: the active directive over every replica, and the plan over those
/// that evaluated `nonce` (with how many did).
pub fn sum<'a>(reports: impl IntoIterator<Item = &'a DirectiveReport>, nonce: Option<&str>) -> Sum {
    let mut out = Sum::default();
    for r in reports {
        out.replicas += 1;
        out.active.add(&r.active);
        for n in &r.notices {
            super::notice::push(&mut out.notices, n.clone());
        }
        if let (Some(p), Some(n)) = (&r.plan, nonce)
            && p.nonce == n
        {
            out.evaluated_by += 1;
            out.plan.add(&p.evaluation);
            if let Some(d) = &p.dry_run {
                out.dry_run.get_or_insert_default().add(d);
            }
        }
    }
    out.notices.sort();
    out
}

/// The reports added up ([`sum`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sum {
    /// The active directive over every replica.
    pub active: Evaluation,
    /// The plan over the replicas that evaluated it.
    pub plan: Evaluation,
    pub dry_run: Option<DryRunCounts>,
    /// The notification controller's flags over every replica.
    pub notices: Vec<super::notice::VersionNotice>,
    pub replicas: u64,
    pub evaluated_by: u64,
}
