//! The updater's decisions that need no I/O: whether to update, how to treat the DB on
//! a switch, and which versions to delete.

use std::cmp::Ordering;
use std::time::Duration;

use jiff::Timestamp;

use tern_core::host_update::{self, Health, Inputs, Source, Trigger, VersionAnswer};

pub use crate::error::DowngradeRefused;
use crate::layout::version_name;
use crate::state::{Spec, Status};

/// The wait after the first update that failed because of the host's environment; it
/// doubles with each failure in a row, up to [`BACKOFF_MAX`].
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_secs(120);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// How long the timer's runs wait after `attempts` environment failures in a row.
pub(crate) fn backoff(attempts: u32) -> Duration {
    tern_core::backoff::Backoff::new(BACKOFF_FIRST, BACKOFF_MAX).after(attempts)
}

/// Why an update the server asks for waits: the last ones failed because of this host
/// and the backoff is not over. `--now` and a forced version do not wait.
pub(crate) fn backing_off(status: &Status, now: Timestamp, asked_now: bool) -> Option<String> {
    let f = status.environment_failure.as_ref()?;
    if asked_now || now >= f.retry_after {
        return None;
    }
    Some(format!(
        "backing off: updating to {} failed {} time(s) in a row because of this host, not of the version ({}); the next attempt is after {} (`tern-update update --now` tries now)",
        f.target, f.attempts, f.error, f.retry_after
    ))
}

/// Compares versions as semver when both parse, else as strings.
pub(crate) fn compare(a: &str, b: &str) -> Ordering {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing to do (exit 0); the string says why.
    Nothing(String),
    Update {
        target: String,
        trigger: Trigger,
    },
    /// The operator's configuration forbids it (pinned, disabled), or the source asks
    /// for what this host must not do; says how to undo.
    Refused(String),
}

/// What `update` does with find's answer when nothing is known of the agent's health.
/// `now` is `update --now`: act even outside the window. A host with no active version
/// installs whatever the server says.
#[cfg(test)]
pub(crate) fn decide(
    spec: &Spec,
    status: &Status,
    find: &tern_core::wire::AutoUpdateSettings,
    now: bool,
) -> Decision {
    let source = Source::Find {
        version: find.agent_version.clone(),
        gate: host_update::FindGate::of(find),
    };
    decide_source(spec, status, source, Health::Unknown, Timestamp::now(), now)
}

/// The decision for either mode: the host's own switches first (disabled, pinned),
/// then tern-core's rules for the version the source names. `asked_now` is
/// `update --now`: a person on the host asks not to wait for the window or the turn.
pub(crate) fn decide_source(
    spec: &Spec,
    status: &Status,
    source: Source,
    health: Health,
    clock: Timestamp,
    asked_now: bool,
) -> Decision {
    if !spec.enabled {
        return Decision::Refused(
            "automatic updates are disabled on this host; run `tern-update enable` to turn them back on".into(),
        );
    }
    if spec.pinned {
        let v = spec
            .pinned_version
            .as_deref()
            .or(status.active.as_deref())
            .unwrap_or("?");
        return Decision::Refused(match spec.pinned_until {
            Some(t) => format!(
                "the version is pinned to {v} until {t}; then it follows the server again (`tern-update unpin` lifts it sooner)"
            ),
            None => format!(
                "the version is pinned to {v}; run `tern-update unpin` to follow the server again"
            ),
        });
    }
    // The name the host installs it under (an install made under tern-update's
    // earlier naming keeps its name).
    let named = match &source {
        Source::Find { version, .. } => version_name(version, status),
        Source::Channel {
            version: VersionAnswer::Version(v),
            ..
        } => version_name(&v.to_string(), status),
        Source::Channel { .. } => String::new(),
    };
    let source = match source {
        Source::Find { gate, .. } => Source::Find {
            version: named.clone(),
            gate,
        },
        channel => channel,
    };
    let inputs = Inputs {
        source,
        active: status.active.as_deref(),
        skip: status.skip.as_deref(),
        health,
        last_forced_attempt: status.last_forced_attempt,
        asked_now,
        now: clock,
    };
    match host_update::decide(&inputs) {
        host_update::Decision::Update { target, trigger } => Decision::Update {
            target: if named.is_empty() { target } else { named },
            trigger,
        },
        host_update::Decision::Hold(why) => Decision::Nothing(why),
        // The shared decision says why; how to override it is this program's own.
        host_update::Decision::Wait(why) if !asked_now => {
            Decision::Nothing(format!("{why} (use `update --now` to update anyway)"))
        }
        host_update::Decision::Wait(why) => Decision::Nothing(why),
        host_update::Decision::Refused(why) => Decision::Refused(why),
    }
}

/// What happens to the agent's DB on a switch from `active` to `target`. `E` says why
/// the target's own backup is unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DbPlan<E> {
    /// No DB configured or present.
    None,
    /// Back up the active version's DB; keep the live DB (upgrade, or roll-forward to a
    /// version whose own backup is missing or unusable).
    BackupOnly,
    /// Back up, stop, restore the target's own backup, start (downgrade, or roll-forward
    /// to the exact version the backup was made by).
    BackupAndRestore,
    Refuse(DowngradeRefused<E>),
}

/// Seed 000's downgrade rules: a downgrade needs a valid backup made by the target
/// version, or it is refused; a roll-forward restores the target's backup only when it
/// is valid; otherwise the live DB migrates forward.
pub(crate) fn db_plan<E: Clone>(
    active: Option<&str>,
    target: &str,
    db_exists: bool,
    target_backup: &Result<(), E>,
) -> DbPlan<E> {
    let Some(active) = active else {
        return DbPlan::None;
    };
    if !db_exists {
        return DbPlan::None;
    }
    let downgrade = compare(target, active) == Ordering::Less;
    match (downgrade, target_backup) {
        (_, Ok(())) => DbPlan::BackupAndRestore,
        (true, Err(why)) => DbPlan::Refuse(DowngradeRefused {
            from: active.to_string(),
            to: target.to_string(),
            backup: why.clone(),
        }),
        (false, Err(_)) => DbPlan::BackupOnly,
    }
}

/// Versions to delete after a successful switch: all but active (and backup when keep ≥ 2).
pub(crate) fn to_remove(
    installed: &[String],
    active: &str,
    backup: Option<&str>,
    keep: u32,
) -> Vec<String> {
    installed
        .iter()
        .filter(|v| v.as_str() != active && (keep < 2 || Some(v.as_str()) != backup))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(enabled: bool, pinned: bool) -> Spec {
        Spec {
            enabled,
            pinned,
            ..Spec::default()
        }
    }
    fn status(active: Option<&str>, skip: Option<&str>) -> Status {
        Status {
            active: active.map(str::to_string),
            skip: skip.map(str::to_string),
            ..Status::default()
        }
    }
    fn find(v: &str, go: bool) -> tern_core::wire::AutoUpdateSettings {
        tern_core::wire::AutoUpdateSettings {
            agent_version: v.into(),
            agent_auto_update: go,
            ..Default::default()
        }
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn decisions() {
        use Decision as D;
        let upd = |t: &str| D::Update {
            target: t.into(),
            trigger: Trigger::Rollout,
        };
        let cases: Vec<(
            Spec,
            Status,
            tern_core::wire::AutoUpdateSettings,
            bool,
            &str,
            Option<D>,
        )> = vec![
            (
                spec(false, false),
                status(Some("1.0.0"), None),
                find("2.0.0", true),
                false,
                "enable",
                None,
            ),
            (
                spec(true, true),
                status(Some("1.0.0"), None),
                find("2.0.0", true),
                true,
                "unpin",
                None,
            ),
            (
                spec(true, false),
                status(None, None),
                find("v2.0.0", false),
                false,
                "",
                Some(upd("2.0.0")),
            ),
            (
                spec(true, false),
                status(Some("1.0.0"), None),
                find("2.0.0", true),
                false,
                "",
                Some(upd("2.0.0")),
            ),
            (
                spec(true, false),
                status(Some("1.0.0"), None),
                find("2.0.0", false),
                false,
                "but not now",
                None,
            ),
            (
                spec(true, false),
                status(Some("1.0.0"), None),
                find("2.0.0", false),
                true,
                "",
                Some(upd("2.0.0")),
            ),
            (
                spec(true, false),
                status(Some("2.0.0"), None),
                find("2.0.0", true),
                false,
                "already",
                None,
            ),
            (
                spec(true, false),
                status(Some("1.0.0"), Some("2.0.0")),
                find("2.0.0", true),
                true,
                "skipped",
                None,
            ),
            (
                spec(true, false),
                status(Some("1.0.0"), Some("2.0.0")),
                find("2.0.1", true),
                false,
                "",
                Some(upd("2.0.1")),
            ),
            (
                spec(true, false),
                status(Some("2.0.0"), None),
                find("1.0.0", true),
                false,
                "",
                Some(upd("1.0.0")),
            ),
            (
                spec(true, false),
                status(Some("2.0.0"), None),
                find("", true),
                false,
                "no agent version",
                None,
            ),
        ];
        for (i, (sp, st, f, now, msg, want)) in cases.into_iter().enumerate() {
            let got = decide(&sp, &st, &f, now);
            match want {
                Some(D::Update { target, .. }) => {
                    assert!(
                        matches!(&got, D::Update { target: t, .. } if *t == target),
                        "case {i}: {got:?}"
                    );
                }
                Some(w) => assert_eq!(got, w, "case {i}"),
                None => match got {
                    D::Nothing(m) | D::Refused(m) => assert!(m.contains(msg), "case {i}: {m}"),
                    other => panic!("case {i}: {other:?}"),
                },
            }
        }
    }

    #[test]
    fn a_version_installed_under_its_old_name_is_current() {
        let got = decide(
            &spec(true, false),
            &status(Some("1.2"), None),
            &find("v1.2", true),
            true,
        );
        assert_eq!(got, Decision::Nothing("already on 1.2".into()));
    }

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        let mins = |a| backoff(a).as_secs() / 60;
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(mins), [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(0), BACKOFF_FIRST);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn backing_off_until_retry_after() {
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let mut st = status(Some("1.0.0"), None);
        assert_eq!(backing_off(&st, t("2026-01-01T00:00:00Z"), false), None);
        st.environment_failure = Some(crate::state::EnvironmentFailure {
            target: "2.0.0".into(),
            time: t("2026-01-01T00:00:00Z"),
            attempts: 1,
            retry_after: t("2026-01-01T00:02:00Z"),
            error: "boom".into(),
        });
        let why = backing_off(&st, t("2026-01-01T00:01:00Z"), false).unwrap();
        assert!(why.contains("2.0.0") && why.contains("--now"), "{why}");
        assert_eq!(backing_off(&st, t("2026-01-01T00:01:00Z"), true), None);
        assert_eq!(backing_off(&st, t("2026-01-01T00:02:00Z"), false), None);
    }

    #[test]
    fn db_rules() {
        let ok: Result<(), String> = Ok(());
        let bad: Result<(), String> = Err("no backup.yaml".into());
        assert_eq!(db_plan(None, "1.0.0", true, &bad), DbPlan::None);
        assert_eq!(db_plan(Some("1.0.0"), "2.0.0", false, &bad), DbPlan::None);
        assert_eq!(
            db_plan(Some("1.0.0"), "2.0.0", true, &bad),
            DbPlan::BackupOnly
        );
        // v1 -> v2 -> v1 -> v2: the DB from v2 comes back.
        assert_eq!(
            db_plan(Some("1.0.0"), "2.0.0", true, &ok),
            DbPlan::BackupAndRestore
        );
        assert_eq!(
            db_plan(Some("2.0.0"), "1.0.0", true, &ok),
            DbPlan::BackupAndRestore
        );
        assert!(
            matches!(db_plan(Some("2.0.0"), "1.0.0", true, &bad), DbPlan::Refuse(m) if m.to_string().contains("no valid backup"))
        );
        assert_eq!(db_plan(Some("2.0.0"), "1.0.0", false, &bad), DbPlan::None);
    }

    #[test]
    fn cleanup() {
        let all: Vec<String> = ["1", "2", "3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(to_remove(&all, "3", Some("2"), 2), vec!["1".to_string()]);
        assert_eq!(
            to_remove(&all, "3", Some("2"), 1),
            vec!["1".to_string(), "2".to_string()]
        );
        assert_eq!(
            to_remove(&all, "3", None, 2),
            vec!["1".to_string(), "2".to_string()]
        );
        assert!(compare("1.10.0", "1.9.0").is_gt());
        assert!(compare("2.0.0-rc.1", "2.0.0").is_lt());
    }
}
