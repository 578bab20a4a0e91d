//! The steps of an update, as the release declares them in `lockstep.yaml`, and their
//! expansion into the numbered steps every worker passes together.
//!
//! ```yaml
//! components:
//!   - name: a
//!     kind: stop-everywhere   # stopped on every server, then started on every server
//!     stop: [bin/a, stop]
//!     start: [bin/a, start]
//!     check: [bin/a, check]
//!   - name: b
//!     kind: rolling           # one server at a time, under a named lease
//!     stop: [bin/b, stop]
//!     start: [bin/b, start]
//!   - name: d
//!     kind: leader-only       # run once for the whole cluster
//!     start: [bin/d, upload]
//! ```
//!
//! Commands are argument vectors (no shell), run in the release's directory.
//!
//! A release may ship its own worker (`worker: bin/tern-lockstep`): the worker that
//! installed it replaces itself with that program before the first step, so the new
//! release's steps are run by the new release's worker ([`Plan::worker_to_exec`]).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::domain::codec;
use crate::domain::duration::GoDuration;
use crate::domain::validate::{FieldError, Invalid, ResourceError};

/// The file a release ships at its top level.
pub const PLAN_FILE: &str = "lockstep.yaml";

/// At most this many components (each is one or two steps).
pub(crate) const MAX_COMPONENTS: usize = 64;
/// The timeout of one command when the component names none.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: &str = "5m";

/// `lockstep.yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The release's own `tern-lockstep` (a path inside the release): the worker execs it
    /// before the first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    pub components: Vec<Component>,
}

/// How a component's update is coordinated across the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentKind {
    /// Stopped on every server before any starts the new version, so two versions never
    /// run at once (CKE, Vault in the seed). Two steps.
    StopEverywhere,
    /// Updated one server at a time under a lease named after the component (etcd, Serf).
    Rolling,
    /// Run by one server for the whole cluster, once per version (uploads of contents).
    LeaderOnly,
    /// Updated on each server at its own pace (sabakan, setup-hw).
    Each,
}

impl ComponentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::StopEverywhere => "stop-everywhere",
            ComponentKind::Rolling => "rolling",
            ComponentKind::LeaderOnly => "leader-only",
            ComponentKind::Each => "each",
        }
    }
}

/// One component and its commands; which are required depends on the kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    pub name: String,
    pub kind: ComponentKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Vec<String>>,
    /// Run after `start`; a non-zero exit fails the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    /// Per command (Go duration), default [`DEFAULT_COMMAND_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// What one numbered step does on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `stop` of a stop-everywhere component.
    StopEverywhere,
    /// `install`, `start`, `check` of a stop-everywhere component, once every server
    /// stopped it.
    StartEverywhere,
    /// `stop`, `install`, `start`, `check` holding the component's lease.
    Rolling,
    /// `install`, `start`, `check` on the one server that wins the component's lease and
    /// finds no record for this version; the others wait for the record.
    LeaderOnly,
    /// `stop`, `install`, `start`, `check`, uncoordinated.
    Each,
}

/// One numbered step (1-based, in the order of the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub number: u32,
    /// Index into [`Plan::components`].
    pub component: usize,
    pub action: Action,
}

impl Plan {
    /// Reads and validates `lockstep.yaml`.
    pub fn from_text(text: &str) -> Result<Self, ResourceError> {
        let plan: Plan = codec::from_text(text)?;
        plan.validate()?;
        Ok(plan)
    }

    /// Every problem, each with its field path.
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut errors = Vec::new();
        let mut push = |field: String, value: String, problem: &str| {
            errors.push(FieldError {
                field,
                value,
                problem: problem.to_string(),
            })
        };
        if self.components.is_empty() {
            push(
                "components".into(),
                "[]".into(),
                "is empty: name at least one component",
            );
        }
        if self.components.len() > MAX_COMPONENTS {
            push(
                "components".into(),
                self.components.len().to_string(),
                &format!("components are too many (at most {MAX_COMPONENTS})"),
            );
        }
        if let Some(w) = &self.worker
            && !is_inside_release(w)
        {
            push(
                "worker".into(),
                format!("{w:?}"),
                "is not a path inside the release (e.g. bin/tern-lockstep)",
            );
        }
        let mut seen = HashSet::new();
        for (i, c) in self.components.iter().enumerate() {
            let at = |f: &str| format!("components[{i}].{f}");
            if !is_component_name(&c.name) {
                push(
                    at("name"),
                    format!("{:?}", c.name),
                    "is not a name: 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit",
                );
            } else if !seen.insert(c.name.as_str()) {
                push(
                    at("name"),
                    format!("{:?}", c.name),
                    "is used by an earlier component",
                );
            }
            for (field, argv) in [
                ("stop", &c.stop),
                ("install", &c.install),
                ("start", &c.start),
                ("check", &c.check),
            ] {
                if let Some(argv) = argv {
                    if argv.is_empty() || argv[0].trim().is_empty() {
                        push(
                            at(field),
                            format!("{argv:?}"),
                            "is empty: give a program and its arguments",
                        );
                    } else if argv.iter().any(|a| a.contains('\0')) {
                        push(at(field), format!("{argv:?}"), "contains a NUL byte");
                    }
                }
            }
            let needs: &[(&str, bool)] = match c.kind {
                ComponentKind::StopEverywhere => {
                    &[("stop", c.stop.is_some()), ("start", c.start.is_some())]
                }
                ComponentKind::Rolling | ComponentKind::Each => &[("start", c.start.is_some())],
                ComponentKind::LeaderOnly => &[("start", c.start.is_some())],
            };
            for (field, present) in needs {
                if !present {
                    push(
                        at(field),
                        "(missing)".into(),
                        &format!("is required for a {} component", c.kind.as_str()),
                    );
                }
            }
            if c.kind == ComponentKind::LeaderOnly && c.stop.is_some() {
                push(
                    at("stop"),
                    format!("{:?}", c.stop),
                    "has no meaning for a leader-only component (it runs once, on one server)",
                );
            }
            if let Some(t) = &c.timeout
                && GoDuration::parse_positive(t).is_err()
            {
                push(
                    at("timeout"),
                    format!("{t:?}"),
                    "is not a positive duration (e.g. 90s, 5m)",
                );
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Invalid(errors))
        }
    }

    /// The release's worker to exec before the first step, unless this process already is
    /// it: `running` is what the process that exec'd it said it ran
    /// (`TERN_LOCKSTEP_WORKER_RELEASE`), `release` names this release the same way
    /// (version and digest), so a worker never execs the same release twice.
    pub fn worker_to_exec(&self, running: Option<&str>, release: &str) -> Option<&str> {
        let w = self.worker.as_deref()?;
        (running != Some(release)).then_some(w)
    }

    /// The numbered steps: two for a stop-everywhere component, one for any other.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        for (component, c) in self.components.iter().enumerate() {
            let actions: &[Action] = match c.kind {
                ComponentKind::StopEverywhere => &[Action::StopEverywhere, Action::StartEverywhere],
                ComponentKind::Rolling => &[Action::Rolling],
                ComponentKind::LeaderOnly => &[Action::LeaderOnly],
                ComponentKind::Each => &[Action::Each],
            };
            for action in actions {
                steps.push(Step {
                    number: steps.len() as u32 + 1,
                    component,
                    action: *action,
                });
            }
        }
        steps
    }

    /// The commands a step runs on this server, in order (the leader-only waiter runs
    /// none: it waits for the record).
    pub fn commands(&self, step: &Step) -> Vec<(&'static str, &[String])> {
        let c = &self.components[step.component];
        let pick: &[&'static str] = match step.action {
            Action::StopEverywhere => &["stop"],
            Action::StartEverywhere | Action::LeaderOnly => &["install", "start", "check"],
            Action::Rolling | Action::Each => &["stop", "install", "start", "check"],
        };
        pick.iter()
            .filter_map(|&name| {
                let argv = match name {
                    "stop" => &c.stop,
                    "install" => &c.install,
                    "start" => &c.start,
                    _ => &c.check,
                };
                argv.as_deref().map(|a| (name, a))
            })
            .collect()
    }

    /// A component's command timeout (validated: falls back to the default only for a
    /// plan that skipped [`Plan::validate`]).
    pub fn timeout(&self, component: usize) -> std::time::Duration {
        let text = self.components[component]
            .timeout
            .as_deref()
            .unwrap_or(DEFAULT_COMMAND_TIMEOUT);
        GoDuration::parse_positive(text)
            .map(|d| std::time::Duration::from_secs(d.as_secs()))
            .unwrap_or(std::time::Duration::from_secs(300))
    }
}

/// A relative path that stays inside the release (no `..`, not absolute, not empty).
fn is_inside_release(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path.split('/').all(|part| part != ".." && !part.is_empty())
}

/// A component name: a DNS label (it names a lease and a store key).
pub(crate) fn is_component_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}
