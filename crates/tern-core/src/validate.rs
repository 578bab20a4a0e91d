//! Validation of user-written resources. Every error names the field, the bad value
//! and what would be right.

use std::collections::HashSet;
use std::fmt;

use crate::domain::codec::{self, ParseError};
use crate::domain::duration::GoDuration;
use crate::domain::resource::*;

/// One thing wrong with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub value: String,
    pub problem: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.field, self.value, self.problem)
    }
}

/// Everything wrong with a resource (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Invalid(pub Vec<FieldError>);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("; "))
    }
}

/// Why a resource could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    // Transparent: the inner error is the whole message; as a plain `{0}` with `#[from]`
    // it would also be the source, and `{:#}` would print it twice.
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

pub(crate) struct Errors(pub(crate) Vec<FieldError>);

impl Errors {
    pub(crate) fn push(
        &mut self,
        field: impl Into<String>,
        value: impl fmt::Display,
        problem: &str,
    ) {
        self.0.push(FieldError {
            field: field.into(),
            value: value.to_string(),
            problem: problem.to_string(),
        });
    }

    pub(crate) fn header(
        &mut self,
        kind: &str,
        version: &str,
        name: &str,
        want_kind: &str,
        want_name: &str,
    ) {
        if kind != want_kind {
            self.push(
                "kind",
                format!("{kind:?}"),
                &format!("is not {want_kind:?}"),
            );
        }
        if version != RESOURCE_VERSION {
            self.push("version", format!("{version:?}"), "is not \"v1\"");
        }
        if name != want_name {
            self.push(
                "metadata.name",
                format!("{name:?}"),
                &format!("is not {want_name:?} (this resource is a singleton)"),
            );
        }
    }

    /// A group name: valid, and not used by an earlier group.
    fn group_name<'a>(&mut self, field: String, name: &'a str, seen: &mut HashSet<&'a str>) {
        if !is_valid_group_name(name) {
            self.push(
                field,
                format!("{name:?}"),
                "is not a valid group name (1-64 of letters, digits, '-', '_', '.', starting with a letter or digit)",
            );
        } else if !seen.insert(name) {
            self.push(field, format!("{name:?}"), "is used by an earlier group");
        }
    }

    fn start_hour(&mut self, field: String, hour: i64) {
        if !(0..=23).contains(&hour) {
            self.push(field, hour, "is out of range, expected 0 to 23");
        }
    }

    /// `windows` against `days`/`start_hour`, each window, the zone, the blackouts.
    fn group_schedule(&mut self, at: &dyn Fn(&str) -> String, g: &GroupConfig) {
        if !g.windows.is_empty() {
            const BOTH: &str =
                "cannot be set with windows (a group sets either days and start_hour, or windows)";
            if !g.days.is_empty() {
                let days: Vec<&str> = g.days.iter().map(|d| d.as_str()).collect();
                self.push(at("days"), format!("[{}]", days.join(", ")), BOTH);
            }
            if let Some(hour) = g.start_hour {
                self.push(at("start_hour"), hour, BOTH);
            }
        }
        if g.windows.len() > crate::domain::wire::MAX_CALENDAR_WINDOWS {
            self.push(
                at("windows"),
                format!("({} windows)", g.windows.len()),
                &format!(
                    "are too many, expected at most {}",
                    crate::domain::wire::MAX_CALENDAR_WINDOWS
                ),
            );
        }
        if g.blackouts.len() > crate::domain::wire::MAX_BLACKOUTS {
            self.push(
                at("blackouts"),
                format!("({} entries)", g.blackouts.len()),
                &format!(
                    "are too many, expected at most {} (use ranges)",
                    crate::domain::wire::MAX_BLACKOUTS
                ),
            );
        }
        for (j, w) in g.windows.iter().enumerate() {
            if w.days.is_empty() {
                self.push(
                    at(&format!("windows[{j}].days")),
                    "[]",
                    "must name at least one day (or \"*\")",
                );
            }
            if let Some(d) = w.duration.filter(|d| *d < MIN_WINDOW || *d > MAX_WINDOW) {
                self.push(
                    at(&format!("windows[{j}].duration")),
                    d,
                    "is out of range, expected 10m to 24h",
                );
            }
        }
        if let Some(zone) = &g.timezone
            && crate::domain::window::time_zone(zone).is_err()
        {
            self.push(
                at("timezone"),
                format!("{zone:?}"),
                "is not an IANA time zone (e.g. Europe/Paris, America/New_York, UTC)",
            );
        }
    }

    fn canary_count(&mut self, field: String, count: i64) -> bool {
        let ok = (0..=MAX_CANARY_COUNT).contains(&count);
        if !ok {
            self.push(field, count, "is out of range, expected 0 to 5");
        }
        ok
    }

    pub(crate) fn finish(self) -> Result<(), Invalid> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Invalid(self.0))
        }
    }
}

/// A group name must be usable as a store key and a URL query value.
pub fn is_valid_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Reads and validates a singleton resource; an empty metadata name is taken as the
/// singleton's own.
pub(crate) fn read_singleton<T: serde::de::DeserializeOwned>(
    text: &str,
    name: &str,
    metadata: impl FnOnce(&mut T) -> &mut Metadata,
    validate: impl FnOnce(&T) -> Result<(), Invalid>,
) -> Result<T, ResourceError> {
    let mut resource: T = codec::from_text(text)?;
    let meta = metadata(&mut resource);
    if meta.name.is_empty() {
        meta.name = name.to_string();
    }
    validate(&resource)?;
    Ok(resource)
}

const MIN_WINDOW: GoDuration = GoDuration::from_minutes(10);
const MAX_WINDOW: GoDuration = GoDuration::from_hours(24);
pub(crate) const MAX_CANARY_COUNT: i64 = 5;
/// Labels a group's `match_labels` may require at most.
pub(crate) const MAX_MATCH_LABELS: usize = 16;
/// Topology limits a group may set at most.
pub(crate) const MAX_TOPOLOGY_LIMITS: usize = 2;
/// The most hosts per label value a topology limit may let update at once.
pub(crate) const MAX_TOPOLOGY_IN_FLIGHT: u32 = 100;

impl AutoUpdateConfig {
    /// Reads and validates a config; an empty metadata name is taken as the singleton's.
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        read_singleton(
            text,
            NAME_CONFIG,
            |r: &mut Self| &mut r.metadata,
            Self::validate,
        )
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        e.header(
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_CONFIG,
            NAME_CONFIG,
        );
        let strategy = self.strategy();
        let halt = strategy == Strategy::HaltOnError;
        if let Some(agents) = &self.spec.agents {
            match (strategy, agents.maintenance_window_duration) {
                (Strategy::HaltOnError, Some(d)) => e.push(
                    "spec.agents.maintenance_window_duration",
                    d,
                    "is only valid with strategy time-based (halt-on-error windows last 1h, or the duration a window in `windows` sets)",
                ),
                (Strategy::TimeBased, Some(d)) if d < MIN_WINDOW || d > MAX_WINDOW => e.push(
                    "spec.agents.maintenance_window_duration",
                    d,
                    "is out of range, expected 10m to 24h",
                ),
                _ => {}
            }
            let groups = agents
                .schedules
                .as_ref()
                .map(|s| s.regular.as_slice())
                .unwrap_or_default();
            let mut seen = HashSet::new();
            for (i, g) in groups.iter().enumerate() {
                let at = |f: &str| format!("spec.agents.schedules.regular[{i}].{f}");
                e.group_name(at("name"), &g.name, &mut seen);
                if let Some(hour) = g.start_hour {
                    e.start_hour(at("start_hour"), hour);
                }
                e.group_schedule(&at, g);
                if g.match_labels.len() > MAX_MATCH_LABELS {
                    e.push(
                        at("match_labels"),
                        g.match_labels.len(),
                        &format!("labels; at most {MAX_MATCH_LABELS}"),
                    );
                }
                for (k, v) in &g.match_labels {
                    if !crate::domain::wire::is_label_key(k) {
                        e.push(
                            at("match_labels"),
                            format!("{k:?}"),
                            "is not a label key (1-63 of letters, digits, '.', '-', '_', '/')",
                        );
                    } else if !crate::domain::wire::is_label_value(v) {
                        e.push(
                            at(&format!("match_labels.{k}")),
                            format!("{v:?}"),
                            "is not a label value (at most 128 bytes, no control characters)",
                        );
                    }
                }
                if g.topology.len() > MAX_TOPOLOGY_LIMITS {
                    e.push(
                        at("topology"),
                        g.topology.len(),
                        &format!("limits; at most {MAX_TOPOLOGY_LIMITS}"),
                    );
                }
                let mut keys = HashSet::new();
                for (j, t) in g.topology.iter().enumerate() {
                    let at = |f: &str| at(&format!("topology[{j}].{f}"));
                    if !crate::domain::wire::is_label_key(&t.key) {
                        e.push(
                            at("key"),
                            format!("{:?}", t.key),
                            "is not a label key (1-63 of letters, digits, '.', '-', '_', '/')",
                        );
                    } else if !keys.insert(t.key.as_str()) {
                        e.push(at("key"), format!("{:?}", t.key), "is limited twice");
                    }
                    if t.max_in_flight == 0 || t.max_in_flight > MAX_TOPOLOGY_IN_FLIGHT {
                        e.push(
                            at("max_in_flight"),
                            t.max_in_flight,
                            &format!(
                                "is out of range, expected 1 to {MAX_TOPOLOGY_IN_FLIGHT} hosts per value"
                            ),
                        );
                    }
                }
                if g.wait_hours < 0 {
                    e.push(at("wait_hours"), g.wait_hours, "is negative");
                } else if g.wait_hours > 0 && !halt {
                    e.push(
                        at("wait_hours"),
                        g.wait_hours,
                        "is only valid with strategy halt-on-error",
                    );
                } else if g.wait_hours > 0 && i == 0 {
                    e.push(
                        at("wait_hours"),
                        g.wait_hours,
                        "must be 0 on the first group (there is no previous group to wait for)",
                    );
                }
                if let Some(a) = g.alert_after.filter(|a| a.as_secs() == 0) {
                    e.push(
                        at("alert_after"),
                        a,
                        "is 0: the alert would fire as the group starts (leave it unset for the 4h default)",
                    );
                }
                if e.canary_count(at("canary_count"), g.canary_count) && g.canary_count > 0 && !halt
                {
                    e.push(
                        at("canary_count"),
                        g.canary_count,
                        "is only valid with strategy halt-on-error",
                    );
                }
                if g.canary_cover.len() > crate::domain::canary::MAX_COVER {
                    e.push(
                        at("canary_cover"),
                        g.canary_cover.len(),
                        &format!("attributes; at most {}", crate::domain::canary::MAX_COVER),
                    );
                }
                let mut named = HashSet::new();
                for (j, a) in g.canary_cover.iter().enumerate() {
                    if crate::domain::canary::Attribute::parse(a).is_none() {
                        e.push(
                            at(&format!("canary_cover[{j}]")),
                            format!("{a:?}"),
                            "is not an attribute: arch, os, os_version or labels.KEY",
                        );
                    } else if !named.insert(a.as_str()) {
                        e.push(
                            at(&format!("canary_cover[{j}]")),
                            format!("{a:?}"),
                            "is named twice",
                        );
                    }
                }
                if !g.canary_cover.is_empty() && g.canary_count == 0 {
                    e.push(
                        at("canary_cover"),
                        g.canary_cover.join(", "),
                        "needs canary_count: the group has no canaries to cover anything",
                    );
                }
                if let Some(a) = &g.analysis {
                    validate_analysis(&mut e, &at("analysis"), a);
                    if g.canary_count == 0 {
                        e.push(
                            at("analysis"),
                            format!("{} queries", a.queries.len()),
                            "needs canary_count: the analysis judges the group's canaries",
                        );
                    }
                }
            }
        }
        e.finish()
    }
}

/// A query's name: what reasons and alerts call it.
fn is_query_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A group's `analysis` (`at` is its field path).
fn validate_analysis(e: &mut Errors, at: &str, a: &AnalysisSpec) {
    use crate::domain::analysis::{MAX_PASSES, MAX_QUERIES, MAX_QUERY_BYTES, MIN_INTERVAL_SECS};
    if a.queries.is_empty() || a.queries.len() > MAX_QUERIES {
        e.push(
            format!("{at}.queries"),
            a.queries.len(),
            &format!("queries; expected 1 to {MAX_QUERIES}"),
        );
    }
    if let Some(i) = a.interval.filter(|i| i.as_secs() < MIN_INTERVAL_SECS) {
        e.push(
            format!("{at}.interval"),
            i,
            &format!("is shorter than {MIN_INTERVAL_SECS}s"),
        );
    }
    if let Some(p) = a.passes.filter(|p| !(1..=MAX_PASSES).contains(p)) {
        e.push(
            format!("{at}.passes"),
            p,
            &format!("is out of range, expected 1 to {MAX_PASSES}"),
        );
    }
    let mut names = HashSet::new();
    for (j, q) in a.queries.iter().enumerate() {
        let here = format!("{at}.queries[{j}]");
        let at = |f: &str| format!("{here}.{f}");
        if !is_query_name(&q.name) {
            e.push(
                at("name"),
                format!("{:?}", q.name),
                "is not a query name (1-63 of letters, digits, '_', '-')",
            );
        } else if !names.insert(q.name.as_str()) {
            e.push(at("name"), format!("{:?}", q.name), "is used twice");
        }
        for (field, text) in std::iter::once(("query", Some(&q.query)))
            .chain(std::iter::once(("baseline", q.baseline.as_ref())))
        {
            let Some(text) = text else { continue };
            if text.trim().is_empty() {
                e.push(at(field), "\"\"", "is empty");
            } else if text.len() > MAX_QUERY_BYTES {
                e.push(
                    at(field),
                    format!("{} bytes", text.len()),
                    &format!("is too long; at most {MAX_QUERY_BYTES}"),
                );
            }
            for p in crate::domain::analysis::unknown_placeholders(text) {
                e.push(
                    at(field),
                    p,
                    &format!(
                        "is not a placeholder; known: {}",
                        crate::domain::analysis::PLACEHOLDERS
                            .iter()
                            .map(|p| format!("{{{{{p}}}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        for (field, v) in [
            ("max", q.max),
            ("min", q.min),
            ("max_ratio", q.max_ratio),
            ("tolerance", q.tolerance),
        ] {
            if v.is_some_and(|v| !v.is_finite()) {
                e.push(at(field), v.unwrap_or_default(), "is not a finite number");
            }
        }
        if let (Some(min), Some(max)) = (q.min, q.max)
            && min > max
        {
            e.push(
                at("min"),
                min,
                &format!("is above max ({max}): nothing passes"),
            );
        }
        if q.max_ratio.is_some_and(|r| r <= 0.0) {
            e.push(
                at("max_ratio"),
                q.max_ratio.unwrap_or_default(),
                "must be above 0",
            );
        }
        if q.tolerance.is_some_and(|t| t < 0.0) {
            e.push(
                at("tolerance"),
                q.tolerance.unwrap_or_default(),
                "is negative",
            );
        }
        let compares = q.baseline.is_some();
        if compares && q.max_ratio.is_none() {
            e.push(
                at("max_ratio"),
                "unset",
                "is needed with a baseline: how far above it the canaries may go",
            );
        }
        if !compares && (q.max_ratio.is_some() || q.tolerance.is_some()) {
            e.push(
                at("baseline"),
                "unset",
                "is needed with max_ratio or tolerance: they compare against it",
            );
        }
        if !compares && q.max.is_none() && q.min.is_none() {
            e.push(
                here.clone(),
                format!("{:?}", q.name),
                "judges nothing: set max, min, or baseline with max_ratio",
            );
        }
    }
}

impl AutoUpdateVersion {
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        read_singleton(
            text,
            NAME_VERSION,
            |r: &mut Self| &mut r.metadata,
            Self::validate,
        )
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        e.header(
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_VERSION,
            NAME_VERSION,
        );
        e.finish()
    }
}

impl AutoUpdateAgentRollout {
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        read_singleton(
            text,
            NAME_ROLLOUT,
            |r: &mut Self| &mut r.metadata,
            Self::validate,
        )
    }

    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        e.header(
            &self.kind,
            &self.version,
            &self.metadata.name,
            KIND_ROLLOUT,
            NAME_ROLLOUT,
        );
        if self.spec.strategy == Strategy::TimeBased
            && self.spec.maintenance_window_duration.is_none()
        {
            e.push(
                "spec.maintenance_window_duration",
                "(missing)",
                "is required with strategy time-based",
            );
        }
        let mut seen = HashSet::new();
        for (i, g) in self.status.groups.iter().enumerate() {
            let at = |f: &str| format!("status.groups[{i}].{f}");
            e.group_name(at("name"), &g.name, &mut seen);
            e.start_hour(at("config_start_hour"), g.config.start_hour.unwrap_or(0));
            if let Some(zone) = &g.config.timezone
                && crate::domain::window::time_zone(zone).is_err()
            {
                e.push(
                    at("config_timezone"),
                    format!("{zone:?}"),
                    "is not an IANA time zone",
                );
            }
            if g.config.wait_hours < 0 {
                e.push(at("config_wait_hours"), g.config.wait_hours, "is negative");
            }
            e.canary_count(at("canary_count"), g.config.canary_count);
            if !(0.0..=1.0).contains(&g.progress) {
                e.push(
                    at("progress"),
                    g.progress,
                    "is out of range, expected 0 to 1",
                );
            }
        }
        e.finish()
    }
}

impl AutoUpdateAgentReport {
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut e = Errors(Vec::new());
        if self.kind != KIND_REPORT {
            e.push(
                "kind",
                format!("{:?}", self.kind),
                "is not \"autoupdate_agent_report\"",
            );
        }
        if self.metadata.name.is_empty() {
            e.push(
                "metadata.name",
                "\"\"",
                "is empty (it names the replica that wrote the report)",
            );
        }
        e.finish()
    }
}
