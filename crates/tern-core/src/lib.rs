//! tern-core: the pure domain of Tern. No I/O, no clock, no randomness it is not
//! given: every function takes the instant and the RNG it needs. See ARCHITECTURE.md.
//!
//! - [`resource`]: the four resources and the connected-agent record;
//!   [`validate`] and [`codec`] read them from YAML/JSON with errors naming the field.
//! - [`reconcile`]: one reconcile of the rollout; [`gate`]: the one answer, what a
//!   host may install now on any path and every [`hold`] that stops it;
//!   [`transition`]: manual transitions; [`revocation`]: revoked versions.
//! - [`rollout`]: the vocabulary below them all (groups and the catch-all rule, the
//!   desired spec, windows, rollout state, live reports, events).
//! - [`alert`]: what needs a human, kept in the rollout's status while it holds.
//! - [`invariant`]: the fleet-safety invariant, checked over a trace of what happened,
//!   stated on its own terms (it calls none of the code it judges).
//! - [`forecast`]: when one host will update, from the same rollout and answer.
//! - [`window`], [`canary`], [`backpressure`], [`aggregate`]: the parts they use.
//! - [`wire`]: the updater ↔ server contract, with [`install`] the data of a
//!   directive's install it carries; [`text`]: free text checked or cut down
//!   before it is kept or shown.
//! - `planted` (feature `planted-holes`, tests only): holes of past safety rounds put
//!   back one at a time, to show the invariant's checker convicting each.
//!
//! The modules themselves are private (`domain`); what other crates may use is
//! re-exported below, one namespace per module, item by item. An item missing here
//! is internal: to use it from another crate, add it to its namespace's list.

// The modules' files are `src/<name>.rs` as usual; `domain.rs` declares them, private.
#[path = "domain.rs"]
mod domain;

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(feature = "planted-holes")]
pub mod planted;

/// Summing the replicas' reports into per-group counts, with the catch-all rule (agents in an empty or unknown group count in the last group) and expiry (a report older than two report periods is ignored.
pub mod aggregate {
    pub use crate::domain::aggregate::connected_agents;
}
/// Alerts.
pub mod alert {
    pub use crate::domain::alert::kind;
}
/// Canary analysis.
pub mod analysis {
    pub use crate::domain::analysis::{
        Measured, QueryValues, RenderedQuery, Request, Sample, Vars, render,
    };
}
/// The admin API's requests and answers, declared once.
pub mod api {
    pub use crate::domain::api::{
        AuditRecord, ChangedGroup, Channel, ChannelBody, ClockBody, ClockResponse, Deleted,
        DevReconcileResponse, EventView, Freeze, FreezeBody, FreezeResponse, GroupStatus, HostPin,
        HostResponse, InventoryEntry, InventoryResponse, JoinBody, JoinResponse, ModeResponse,
        Modes, NewRolloutBody, NewRolloutResponse, NewTokenResponse, PendingHosts, PinBody,
        PinsResponse, PreviewResponse, ProductGroup, ProductSummary, ProductsResponse,
        ReconcileResult, ReleaseSignedResponse, ReportResponse, Role, StatusResponse, TokenBody,
        TokenView, TopologyStatus, TopologyValueStatus, TransitionBody, TransitionResponse, WhoAmI,
        parse_until,
    };
}
/// Where a version's tarball lives.
pub mod artifact {
    pub use crate::domain::artifact::{
        DEFAULT_TEMPLATE, TemplateProblem, Vars, checksum_url, render,
    };
}
/// Exponential backoff.
pub mod backoff {
    pub use crate::domain::backoff::Backoff;
}
/// Backpressure.
pub mod backpressure {
    pub use crate::domain::backpressure::{ProgressInput, UpdaterNumeral, progress};
}
/// Canaries.
pub mod canary {
    pub use crate::domain::canary::{
        Attribute, COVER_OFFERS_PER_GROUP, coverage, pick, pick_covering, summary,
    };
}
/// Reading resources from YAML or JSON text and writing them back.
pub mod codec {
    pub use crate::domain::codec::{Format, MAX_DEPTH, from_text, list_from_text, to_text};
}
/// What operators set that holds or steers hosts besides the rollout resources.
pub mod controls {
    pub use crate::domain::controls::Channel;
}
/// The modular upgrade system (Teleport's RFD 90).
pub mod directive {
    /// The install instruction a server hands a host in its heartbeat answer, and what a host checks of it before acting.
    pub mod instruct {
        pub use crate::domain::directive::instruct::{InstallInstruction, render_env};
    }
    /// The notification-only controller's view.
    pub mod notice {
        pub use crate::domain::directive::notice::{VersionNotice, alerts, notices, push, summary};
    }
    /// One pass of the version reconciliation loop, and the plan.
    pub mod pass {
        pub use crate::domain::directive::pass::{
            Elsewhere, Move, PassHost, Pause, RateBucket, pass,
        };
    }
    /// The `releases` version controller's decision.
    pub mod releases {
        pub use crate::domain::directive::releases::{
            RELEASES_DRAFT, ReleaseAsset, ReleaseInfo, ReleasesError, draft, freshness, needs_write,
        };
    }
    /// What replicas report of their directive passes, what an operator reads back (the status, the plan), and how the reports add up.
    pub mod report {
        pub use crate::domain::directive::report::{
            ApplyBody, ApplyResponse, Approval, ControllerStatus, DirectiveReport,
            DirectivesStatus, DryRunCounts, DryRunFailure, Evaluation, MAX_WAITING, MoveCount,
            NO_FIT_SHOWN, Named, NoFitHost, Paused, Pending, PlanBody, PlanEvaluation,
            PlanResponse, ReleasedMove, Sum, TimingView, Waiting, sum,
        };
    }
    /// The resources of the modular upgrade system, in the shape of Tern's other resources (`kind`, `version.
    pub mod resource {
        pub use crate::domain::directive::resource::{
            Advisory, AdvisoryKind, Amount, CONTROL_NAME, ControlSpec, Directive, DirectiveSpec,
            Installer, InstallerSpec, InstallerType, LocalScript, NoticeKind, Notification,
            PackageInstaller, PackageManager, Rate, ReleasesController, Strategy, Target, Timing,
            VersionControlConfig, VersionDirective, Windows,
        };
    }
    /// Which directive governs a host, and which target and installer it gets (RFD 90's rules).
    pub mod select {
        pub use crate::domain::directive::select::{
            HostFacts, Incompatible, Labels, Names, Selection, select,
        };
        // Only `tests/directives.rs` asks it alone; compiled for tests.
        #[cfg(any(test, feature = "fixtures"))]
        pub use crate::domain::directive::select::target_fits;
    }
    /// RFD 90's install states.
    pub mod state {
        pub use crate::domain::directive::state::{
            Attempt, AttemptResult, HostRecord, InstallState, StateTimings, install_state,
            may_trigger,
        };
    }
}
/// Durations written the Go way (`90m`, `1h30m`, `45s`) and percentages (`20%`), the two scalar formats of the resources.
pub mod duration {
    pub use crate::domain::duration::{GoDuration, Percent};
}
/// How far a bad version goes before anything can stop it.
pub mod exposure {
    pub use crate::domain::exposure::{ConfigWarning, all_at_once, hosts_from_reports};
}
/// When will this host update? The dashboard's host page asks it of one host.
pub mod forecast {
    pub use crate::domain::forecast::{DirectedWhen, HostState, Outlook, Verdict, forecast};
}
/// The one answer.
pub mod gate {
    pub use crate::domain::gate::{
        AGENT, Answer, Ask, BACKPRESSURE_JITTER_SECONDS, DEFAULT_JITTER_SECONDS, DirectedInstall,
        DirectedStart, Directive, Fleet, Host, Pins, Recorded, answer, directed_start,
        reads_recorded, rollout_answer, tools,
    };
}
/// A host's history.
pub mod history {
    pub use crate::domain::history::{HostEvent, HostHistory, HostState};
}
/// Why a host may not install now.
pub mod hold {
    pub use crate::domain::hold::{Hold, Holds};
}
/// What a host does with the version it is told to run, whichever way it is told.
pub mod host_update {
    pub use crate::domain::host_update::{
        CriticalAnswer, Decision, FORCED_ATTEMPT_INTERVAL, FindGate, Health, Inputs, Source,
        Trigger, VersionAnswer, WindowState, decide, instruction_waits_for_agents, on_find,
    };
}
/// Identifier formatting shared by every crate that makes ids (the simulator, the replay's deterministic fleet, tests).
pub mod ids {
    pub use crate::domain::ids::{is_uuid, spread, uuid_from_halves, uuid_v4};
}
/// What a heartbeat carries of a directive's install.
pub mod install {
    pub use crate::domain::install::{InstallInstruction, InstallerSpec, InstallerType, Target};
}
/// The fleet-safety invariant as users rely on it, checked over a trace of what happened.
pub mod invariant {
    pub use crate::domain::invariant::{InstallKind, Trace, TraceEvent, Via, Violation, check};
}
/// From the agents a replica has heard from to the report it writes every period.
pub mod inventory {
    pub use crate::domain::inventory::{
        AgentView, CANARY_CANDIDATES_PER_GROUP, FOLDED, InventoryAgent,
        MAX_UNKNOWN_GROUPS_IN_REPORT, MAX_VERSIONS_IN_REPORT, Model, OMITTED_CHANNEL,
        OMITTED_TOO_NEW, bound_report, build_report, canaries_seen, canary_candidates,
        failure_reason, omitted_reason, replica_report, report_of_agents, shrink_report,
        sort_largest_first, topology_report, tracked_values,
    };
}
/// Lock-step updates of a small server cluster (seed 004).
pub mod lockstep {
    /// The steps of an update, as the release declares them in `lockstep.yaml`, and their expansion into the numbered steps every worker passes together.
    pub mod plan {
        pub use crate::domain::lockstep::plan::{Action, PLAN_FILE, Plan, Step};
    }
    /// The coordination protocol of seed 004, as decisions.
    pub mod protocol {
        pub use crate::domain::lockstep::protocol::{
            Artifact, Claim, Halt, Idle, LeaderOnlyRecord, LeaderOnlyResult, ServerId,
            ServerStatus, StatusRecord, UpdateRequest, UpdaterAction, UpdaterIdle, UpdaterView,
            WorkerAction, WorkerView, after_run, claim_message, leader_only_message,
            leader_only_outcome, lock_holder, may_go_on, status_message, trusted, updater_next,
            worker_next,
        };
    }
    /// Which release a lock-step cluster should run.
    pub mod release {
        pub use crate::domain::lockstep::release::{
            Candidate, Environment, ListedRelease, ReleaseVersion, TagPrefix, pick,
        };
    }
}
/// Products.
pub mod product {
    pub use crate::domain::product::{AGENT, UPDATER, is_product_name};
}
/// The stable strings of `last_update_reason`.
pub mod reason {
    pub use crate::domain::reason::{
        AGENTS_VANISHED, ANALYSIS_FAILED, ANALYSIS_HELD, ANALYSIS_PASSED, ANALYSIS_PENDING,
        CAN_START, CANARIES_ARE_ALIVE, CANNOT_START, IN_WINDOW, MANUAL_FORCED_DONE, MANUAL_RESET,
        MANUAL_TRIGGER, NO_CANARY_CANDIDATES, OUTSIDE_WINDOW, PREVIOUS_GROUPS_NOT_DONE,
        REPORTS_MISSING, ROLLOUT_CHANGED_DURING_WINDOW, TOO_MANY_AGENTS_MISSING, UPDATE_COMPLETE,
        UPDATE_IN_PROGRESS, WAIT_HOURS_NOT_ELAPSED, WAITING_FOR_CANARIES, WAITING_FOR_REPORTS,
    };
}
/// One reconcile.
pub mod reconcile {
    pub use crate::domain::reconcile::{
        Needs, Outcome, ReconcileInput, Renewal, Resources, analysis_requests, analysis_vars,
        config_changes, maintenance_schedule, needs, reconcile, reconcile_measured,
        reconcile_reports, reconcile_reports_measured, renew,
    };
}
/// The four resources, with the field names of the Managed Updates v2 reference so a Teleport user's files work unchanged.
pub mod resource {
    pub use crate::domain::resource::{
        AgentsConfig, AgentsVersion, Alert, AnalysisQuery, AnalysisSpec, AutoUpdateAgentReport,
        AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion, Canary, CanaryCoverage,
        CanaryEligible, ConfigSpec, ConnectedAgent, GroupConfig, GroupReport, GroupState,
        KIND_CONFIG, KIND_ROLLOUT, KIND_VERSION, Metadata, Mode, NAME_VERSION, Omitted, ReportSpec,
        RolloutGroup, RolloutSpec, RolloutState, RolloutStatus, Schedule, Schedules, Strategy,
        ToolsConfig, ToolsMode, TopologyLimit, TopologyReport, VersionReport,
    };
}
/// Revoked versions.
pub mod revocation {
    pub use crate::domain::revocation::{Minimum, ReleaseLine, Revocation, Revoked};
}
/// The resource shapes of Teleport's RFD 169 draft (Automatic Updates for Agents), read as written and translated to the resources Tern stores.
pub mod rfd169 {
    pub use crate::domain::rfd169::{KIND_PLAN, Note, Translated, config, version};
}
/// The rollout's vocabulary, below everything that decides.
pub mod rollout {
    pub use crate::domain::rollout::{
        DEFAULT_REPORT_PERIOD, Event, Groups, ReportPeriods, falls_back, frozen_mode, group_window,
        in_motion, mode_in_force, next_report, place, places_by_labels, report_period,
        rollout_state, target_failed,
    };
}
/// A rollout's history.
pub mod rollout_history {
    pub use crate::domain::rollout_history::kind;
    pub use crate::domain::rollout_history::{
        Change, Event, HistoryResponse, Identity, MAX_RECORDS, MAX_ROLLOUTS, RolloutHistory,
        RolloutRecord, Sample, changes, to_prune,
    };
}
/// Strings people wrote or the network sent, made safe to keep and to show.
pub mod text {
    pub use crate::domain::text::{clean, clean_tail, excerpt, hex, one_line};
}
/// Manual transitions an operator applies to a rollout with groups.
pub mod transition {
    pub use crate::domain::transition::{Transition, TransitionError, TransitionKind, apply};
}
/// Validation of user-written resources.
pub mod validate {
    pub use crate::domain::validate::{ResourceError, is_valid_group_name};
}
/// Version policy.
pub mod version {
    pub use crate::domain::version::{Version, VersionError, normalize};
}
/// What the admin API shows and the choices behind its writes, from the resources and the reports.
pub mod views {
    pub use crate::domain::views::{
        NewRollout, PENDING_LISTED, inventory_entry, modes, new_rollout_version, pending,
        pending_host, product_summary, report, status,
    };
}
/// Maintenance windows.
pub mod window {
    pub use crate::domain::window::{
        Blackout, Calendar, CalendarSpec, Day, Recurring, StartTime, WindowSpec, time_zone,
    };
}
/// What travels between `tern-update` and `ternd`.
pub mod wire {
    pub use crate::domain::wire::{
        AgentSchedule, AutoUpdateSettings, DEFAULT_HEARTBEAT_SECONDS, FindFacts, FindResponse,
        Follows, Heartbeat, HeartbeatResponse, HostTrust, INSTALL_FAILURE_KINDS, InstallFailure,
        MAX_AGENT_OUTPUT_BYTES, MAX_UPDATE_ERROR_BYTES, UnknownGroup, UpdateFailure, UpdaterStatus,
    };
}

/// `planted!(Hole)`: whether the planted hole `Hole` (`planted::Hole`) is open here.
/// Without the feature `planted-holes` it is `false`, and the build carries no trace of
/// any hole.
#[cfg(feature = "planted-holes")]
#[macro_export]
macro_rules! planted {
    ($hole:ident) => {
        $crate::planted::open($crate::planted::Hole::$hole)
    };
}

/// `planted!(Hole)`: `false` in this build (no feature `planted-holes`).
#[cfg(not(feature = "planted-holes"))]
#[macro_export]
macro_rules! planted {
    ($hole:ident) => {
        false
    };
}
