//! The resource shapes of Teleport's RFD 169 draft (Automatic Updates for Agents),
//! read as written and translated to the resources Tern stores. The draft wrote the
//! config as `spec.agent_autoupdate_mode` and `spec.agent_schedules.regular` (with
//! `wait_days`, `alert_after_hours`, per-group `jitter_seconds`), and what Tern calls
//! the autoupdate_version as an `autoupdate_agent_plan` (`current_version` or
//! `start_version`, `target_version`, `schedule`, `strategy`, `autoupdate_mode`, and a
//! `status` its server owned). Every translation says which field became which
//! ([`Note`]); a field with no meaning in Tern is refused, naming the field and what to
//! write instead; the result is validated as any resource is, its errors named by the
//! draft's fields. ternctl (`plan`, `create`, `apply`) and ternd's resource endpoints
//! call these same functions. Tern's own shapes go through unchanged, without notes.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::domain::codec::{self, ParseError};
use crate::domain::duration::{GoDuration, Percent};
use crate::domain::resource::{
    AgentsConfig, AgentsVersion, AutoUpdateConfig, AutoUpdateVersion, ConfigSpec, GroupConfig,
    KIND_CONFIG, KIND_VERSION, Metadata, Mode, NAME_CONFIG, NAME_VERSION, Schedule, Schedules,
    VersionSpec, default_resource_version,
};
use crate::domain::validate::{FieldError, Invalid, ResourceError};
use crate::domain::version::Version;
use crate::domain::window::Day;

/// The draft's name of what Tern calls the autoupdate_version.
pub const KIND_PLAN: &str = "autoupdate_agent_plan";

/// The draft's defaults for a group, which the draft's reference documents and which
/// differ from Tern's for a group that leaves them out.
const DRAFT_CANARY_COUNT: i64 = 5;
const DRAFT_MAX_IN_FLIGHT: Percent = Percent::from_percent(20);

/// One thing the translation did: a draft field that became a Tern field, a draft
/// default written out, or a field not kept and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note(String);

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A resource as Tern stores it, and what its translation from the draft did (empty
/// for a file already in Tern's shape).
#[derive(Clone, Debug, PartialEq)]
pub struct Translated<T> {
    pub resource: T,
    pub notes: Vec<Note>,
}

impl<T> Translated<T> {
    /// Whether the file was in the draft's shape.
    pub fn was_translated(&self) -> bool {
        !self.notes.is_empty()
    }
}

/// Reads an autoupdate_config in Tern's shape or the draft's.
pub fn config(text: &str) -> Result<Translated<AutoUpdateConfig>, ResourceError> {
    let head = head(text)?;
    let draft_keys: Vec<&str> = ["agent_autoupdate_mode", "agent_schedules"]
        .into_iter()
        .filter(|k| head.spec_keys.iter().any(|s| s == k))
        .collect();
    if head.kind != KIND_CONFIG || draft_keys.is_empty() {
        return AutoUpdateConfig::from_text(text).map(|resource| Translated {
            resource,
            notes: Vec::new(),
        });
    }
    if head.spec_keys.iter().any(|k| k == "agents") {
        return Err(invalid(
            format!("spec.{}", draft_keys[0]),
            "(set)",
            "cannot be mixed with spec.agents: write the file in one shape (spec.agents.mode and spec.agents.schedules, or the draft's fields alone)",
        ));
    }
    let draft: Draft<DraftConfigSpec> = codec::from_text(text)?;
    if draft.status.is_some() {
        return Err(invalid(
            "status",
            "(set)",
            "is not part of an autoupdate_config: remove it",
        ));
    }
    let mut t = Trail::default();
    let mode = draft.spec.agent_autoupdate_mode.map(|m| {
        t.became(
            "spec.agent_autoupdate_mode",
            &m.written,
            "spec.agents.mode",
            m.mode.as_str(),
        );
        m.mode
    });
    let regular = match draft.spec.agent_schedules {
        Some(schedules) => {
            let mut regular = None;
            for (name, groups) in schedules {
                if name != "regular" {
                    return Err(invalid(
                        format!("spec.agent_schedules.{name}"),
                        format!("({} groups)", groups.len()),
                        "is not a schedule Tern has: only regular (write the groups under spec.agent_schedules.regular)",
                    ));
                }
                regular = Some(groups);
            }
            regular.unwrap_or_default()
        }
        None => {
            t.note(
                "spec.agent_schedules: unset: the draft's default resource became spec.agents.schedules.regular: one group \"default\", Mon-Thu at 0:00 UTC, canary_count 5, max_in_flight 20%",
            );
            vec![DraftGroup {
                name: "default".to_string(),
                days: Some(Day::WORKWEEK.to_vec()),
                start_hour: Some(0),
                canary_count: Some(DRAFT_CANARY_COUNT),
                max_in_flight: Some(DRAFT_MAX_IN_FLIGHT),
                ..DraftGroup::default()
            }]
        }
    };
    if !regular.is_empty() {
        t.note(
            "spec.agent_schedules.regular became spec.agents.schedules.regular (strategy halt-on-error: the groups update in order)",
        );
    }
    let groups = regular
        .into_iter()
        .enumerate()
        .map(|(i, g)| t.group(i, g))
        .collect::<Result<Vec<_>, _>>()?;
    let resource = AutoUpdateConfig {
        kind: KIND_CONFIG.to_string(),
        version: draft.version.unwrap_or_else(default_resource_version),
        metadata: named(draft.metadata, NAME_CONFIG),
        spec: ConfigSpec {
            agents: Some(AgentsConfig {
                mode,
                schedules: Some(Schedules { regular: groups }),
                ..AgentsConfig::default()
            }),
            tools: None,
        },
    };
    t.finish(resource, AutoUpdateConfig::validate)
}

/// Reads an autoupdate_version, or the draft's autoupdate_agent_plan as one.
pub fn version(text: &str) -> Result<Translated<AutoUpdateVersion>, ResourceError> {
    let head = head(text)?;
    if head.kind != KIND_PLAN {
        return AutoUpdateVersion::from_text(text).map(|resource| Translated {
            resource,
            notes: Vec::new(),
        });
    }
    let plan: Draft<DraftPlanSpec> = codec::from_text(text)?;
    let mut t = Trail::default();
    t.note("kind: autoupdate_agent_plan became kind: autoupdate_version");
    let spec = plan.spec;
    let start = match (spec.current_version, spec.start_version) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec.current_version",
                "(set)",
                "cannot be set with spec.start_version: they name the same version (keep one)",
            ));
        }
        (Some(v), None) => t.version("spec.current_version", &v, "spec.agents.start_version")?,
        (None, Some(v)) => t.version("spec.start_version", &v, "spec.agents.start_version")?,
        (None, None) => {
            return Err(invalid(
                "spec.current_version",
                "(missing)",
                "is required: the version hosts run before their group's window (or spec.start_version)",
            ));
        }
    };
    let target = t.version(
        "spec.target_version",
        &spec.target_version,
        "spec.agents.target_version",
    )?;
    let schedule = spec.schedule.unwrap_or_default();
    if spec.schedule.is_some() {
        t.became(
            "spec.schedule",
            schedule.as_str(),
            "spec.agents.schedule",
            schedule.as_str(),
        );
    }
    let mode = spec.autoupdate_mode.map(|m| {
        t.became(
            "spec.autoupdate_mode",
            &m.written,
            "spec.agents.mode",
            m.mode.as_str(),
        );
        m.mode
    });
    if let Some(s) = spec.strategy {
        t.note(format!(
            "spec.strategy: {} is not kept: Tern's strategy is the autoupdate_config's spec.agents.strategy (halt-on-error, the default, updates the groups in order; a group's max_in_flight applies under it whatever the plan's strategy)",
            s.as_str()
        ));
    }
    if plan.status.is_some() {
        t.note(
            "status is not kept: the rollout's state is ternd's own (autoupdate_agent_rollout), worked out by its reconcile; `ternctl agents status` shows it",
        );
    }
    let metadata = match plan.metadata {
        Some(m) if m.name == "autoupdate-agent-plan" => {
            t.note("metadata.name: autoupdate-agent-plan became metadata.name: autoupdate-version");
            Metadata {
                name: String::new(),
                ..m
            }
        }
        other => other.unwrap_or_default(),
    };
    let resource = AutoUpdateVersion {
        kind: KIND_VERSION.to_string(),
        version: plan.version.unwrap_or_else(default_resource_version),
        metadata: named(Some(metadata), NAME_VERSION),
        spec: VersionSpec {
            agents: Some(AgentsVersion {
                start_version: start,
                target_version: target,
                schedule,
                mode,
                // Tern's own: a later group follows within the window only when asked.
                follow_in_window: false,
            }),
            tools: None,
        },
    };
    t.finish(resource, AutoUpdateVersion::validate)
}

/// What `kind` a resource file says it is, and its `spec`'s keys.
struct Head {
    kind: String,
    spec_keys: Vec<String>,
}

fn head(text: &str) -> Result<Head, ParseError> {
    let doc: serde_yaml_ng::Value = codec::from_text(text)?;
    let kind = doc
        .get("kind")
        .and_then(serde_yaml_ng::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let spec_keys = doc
        .get("spec")
        .and_then(serde_yaml_ng::Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Head { kind, spec_keys })
}

fn invalid(field: impl Into<String>, value: impl fmt::Display, problem: &str) -> ResourceError {
    ResourceError::Invalid(Invalid(vec![FieldError {
        field: field.into(),
        value: value.to_string(),
        problem: problem.to_string(),
    }]))
}

fn named(metadata: Option<Metadata>, name: &str) -> Metadata {
    let mut m = metadata.unwrap_or_default();
    if m.name.is_empty() {
        m.name = name.to_string();
    }
    m
}

/// What a translation did, kept to write its notes and to name the draft's fields in
/// the errors validation finds in the translated resource.
#[derive(Default)]
struct Trail {
    notes: Vec<Note>,
    /// (Tern field, draft field, value as written in the draft).
    fields: Vec<(String, String, String)>,
}

impl Trail {
    fn note(&mut self, text: impl Into<String>) {
        self.notes.push(Note(text.into()));
    }

    fn became(
        &mut self,
        draft: &str,
        written: impl fmt::Display,
        tern: &str,
        value: impl fmt::Display,
    ) {
        self.note(format!("{draft}: {written} became {tern}: {value}"));
        self.fields
            .push((tern.to_string(), draft.to_string(), written.to_string()));
    }

    /// A version: the draft's examples write `v1`; a version is MAJOR.MINOR.PATCH, so
    /// one or two numbers are completed with zeros, and the note says so.
    fn version(
        &mut self,
        draft: &str,
        written: &str,
        tern: &str,
    ) -> Result<Version, ResourceError> {
        let bare = written.trim().trim_start_matches('v');
        let parts: Vec<&str> = bare.split('.').collect();
        let numbers = |p: &[&str]| {
            p.iter()
                .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        };
        let full = match parts.len() {
            1 | 2 if numbers(&parts) => {
                let mut full = parts.join(".");
                for _ in parts.len()..3 {
                    full.push_str(".0");
                }
                full
            }
            _ => written.to_string(),
        };
        let v = Version::parse(&full).map_err(|e| {
            invalid(
                draft,
                format!("{written:?}"),
                &format!("is not a version: {}", e.reason),
            )
        })?;
        if full == written.trim() || full == bare {
            self.became(draft, written, tern, &v);
        } else {
            self.note(format!(
                "{draft}: {written} became {tern}: {v} (a version is MAJOR.MINOR.PATCH: the missing numbers are 0)"
            ));
            self.fields
                .push((tern.to_string(), draft.to_string(), written.to_string()));
        }
        Ok(v)
    }

    /// One group of the draft's regular schedule, the `i`th.
    fn group(&mut self, i: usize, g: DraftGroup) -> Result<GroupConfig, ResourceError> {
        let draft = |f: &str| format!("spec.agent_schedules.regular[{i}].{f}");
        let tern = |f: &str| format!("spec.agents.schedules.regular[{i}].{f}");
        let mut out = GroupConfig {
            name: g.name.clone(),
            ..GroupConfig::default()
        };
        self.fields
            .push((tern("name"), draft("name"), g.name.clone()));
        match g.days {
            Some(days) => {
                self.fields
                    .push((tern("days"), draft("days"), day_list(&days)));
                out.days = days;
            }
            None => {
                self.note(format!(
                    "{}: unset: the draft's default [\"*\"] (every day) became {}: [\"*\"] (Tern's own default is Mon-Thu)",
                    draft("days"),
                    tern("days")
                ));
                out.days = vec![Day::All];
            }
        }
        if let Some(h) = g.start_hour {
            self.fields
                .push((tern("start_hour"), draft("start_hour"), h.to_string()));
            out.start_hour = Some(h);
        }
        if let Some(d) = g.wait_days {
            let hours = d.saturating_mul(24);
            self.became(&draft("wait_days"), d, &tern("wait_hours"), hours);
            out.wait_hours = hours;
        }
        match (g.alert_after, g.alert_after_hours) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    draft("alert_after_hours"),
                    "(set)",
                    &format!("cannot be set with {}: keep one", draft("alert_after")),
                ));
            }
            (Some(a), None) => {
                self.fields
                    .push((tern("alert_after"), draft("alert_after"), a.to_string()));
                out.alert_after = Some(a);
            }
            (None, Some(h)) => {
                let Ok(hours) = u64::try_from(h) else {
                    return Err(invalid(draft("alert_after_hours"), h, "is negative"));
                };
                let d = GoDuration::from_hours(hours);
                self.became(&draft("alert_after_hours"), h, &tern("alert_after"), d);
                out.alert_after = Some(d);
            }
            (None, None) => {}
        }
        if let Some(j) = g.jitter_seconds {
            self.note(format!(
                "{}: {j} is not kept: ternd's find sets the jitter hosts wait before they update (60 s, 10 s in a group with max_in_flight); no field of Tern sets it per group",
                draft("jitter_seconds")
            ));
        }
        match g.canary_count {
            Some(c) => {
                self.fields
                    .push((tern("canary_count"), draft("canary_count"), c.to_string()));
                out.canary_count = c;
            }
            None => {
                self.note(format!(
                    "{}: unset: the draft's default {DRAFT_CANARY_COUNT} became {}: {DRAFT_CANARY_COUNT} (Tern's own default is 0)",
                    draft("canary_count"),
                    tern("canary_count")
                ));
                out.canary_count = DRAFT_CANARY_COUNT;
            }
        }
        match g.max_in_flight {
            Some(m) => {
                self.fields
                    .push((tern("max_in_flight"), draft("max_in_flight"), m.to_string()));
                out.max_in_flight = Some(m);
            }
            None => {
                self.note(format!(
                    "{}: unset: the draft's default {DRAFT_MAX_IN_FLIGHT} became {}: {DRAFT_MAX_IN_FLIGHT} (Tern's own default is none)",
                    draft("max_in_flight"),
                    tern("max_in_flight")
                ));
                out.max_in_flight = Some(DRAFT_MAX_IN_FLIGHT);
            }
        }
        Ok(out)
    }

    /// Validates the translated resource; its errors name the draft's fields and
    /// values where the translation made the field.
    fn finish<T>(
        self,
        resource: T,
        validate: fn(&T) -> Result<(), Invalid>,
    ) -> Result<Translated<T>, ResourceError> {
        if let Err(Invalid(errors)) = validate(&resource) {
            let errors = errors
                .into_iter()
                .map(
                    |e| match self.fields.iter().find(|(tern, ..)| *tern == e.field) {
                        Some((_, draft, written)) => FieldError {
                            field: draft.clone(),
                            value: written.clone(),
                            problem: e.problem,
                        },
                        None => e,
                    },
                )
                .collect();
            return Err(ResourceError::Invalid(Invalid(errors)));
        }
        Ok(Translated {
            resource,
            notes: self.notes,
        })
    }
}

fn day_list(days: &[Day]) -> String {
    let names: Vec<&str> = days.iter().map(|d| d.as_str()).collect();
    format!("[{}]", names.join(", "))
}

/// A mode as the draft wrote it (`enable`, `pause`, `paused`…), and what it means.
struct DraftMode {
    written: String,
    mode: Mode,
}

impl<'de> Deserialize<'de> for DraftMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let written = String::deserialize(d)?;
        let mode = Mode::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(
            written.trim(),
        ))?;
        Ok(Self { written, mode })
    }
}

/// A draft resource: its `kind` (already read by [`head`]), header and `spec`; a
/// `status` only the plan has (its server's to write: read only to say it is not kept).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Draft<S> {
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    spec: S,
    #[serde(default)]
    status: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DraftConfigSpec {
    #[serde(default)]
    agent_autoupdate_mode: Option<DraftMode>,
    #[serde(default)]
    agent_schedules: Option<BTreeMap<String, Vec<DraftGroup>>>,
}

/// One group of the draft's `agent_schedules.regular`. Integers are signed so that a
/// negative value reaches validation and gets an error naming the field.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DraftGroup {
    name: String,
    #[serde(default)]
    days: Option<Vec<Day>>,
    #[serde(default)]
    start_hour: Option<i64>,
    #[serde(default)]
    wait_days: Option<i64>,
    /// The draft's examples write `alert_after: 4h`, its reference `alert_after_hours: 4`.
    #[serde(default)]
    alert_after: Option<GoDuration>,
    #[serde(default)]
    alert_after_hours: Option<i64>,
    #[serde(default)]
    jitter_seconds: Option<i64>,
    #[serde(default)]
    canary_count: Option<i64>,
    #[serde(default)]
    max_in_flight: Option<Percent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DraftPlanSpec {
    #[serde(default)]
    current_version: Option<String>,
    #[serde(default)]
    start_version: Option<String>,
    target_version: String,
    #[serde(default)]
    schedule: Option<Schedule>,
    #[serde(default)]
    strategy: Option<DraftStrategy>,
    #[serde(default)]
    autoupdate_mode: Option<DraftMode>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum DraftStrategy {
    Grouped,
    Backpressure,
}

impl DraftStrategy {
    fn as_str(self) -> &'static str {
        match self {
            Self::Grouped => "grouped",
            Self::Backpressure => "backpressure",
        }
    }
}
