//! Resource files as an operator writes them, built from a few numbers: the configs
//! and versions the tests of every crate, the demo and the end-to-end scenarios use
//! (one builder instead of a YAML copy per test file). Behind the `fixtures` feature:
//! not part of the library a server or updater links.

/// One group of a halt-on-error config: `name`, its window's `start_hour`, every day
/// unless [`Group::days`] says otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a> {
    pub name: &'a str,
    pub start_hour: u8,
    pub canary_count: u8,
    pub wait_hours: u32,
    pub days: &'a [&'a str],
}

/// A group that starts at `start_hour` every day, without canaries or wait.
pub fn group(name: &str, start_hour: u8) -> Group<'_> {
    Group {
        name,
        start_hour,
        canary_count: 0,
        wait_hours: 0,
        days: &["*"],
    }
}

impl<'a> Group<'a> {
    pub fn canaries(self, canary_count: u8) -> Self {
        Self {
            canary_count,
            ..self
        }
    }
    pub fn wait(self, wait_hours: u32) -> Self {
        Self { wait_hours, ..self }
    }
    pub fn days(self, days: &'a [&'a str]) -> Self {
        Self { days, ..self }
    }
}

/// A halt-on-error `autoupdate_config` with `mode` (`enabled`, `suspended`, …).
pub fn halt_on_error_config(mode: &str, groups: &[Group<'_>]) -> String {
    let mut s = format!(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: {mode}\n    strategy: halt-on-error\n    schedules:\n      regular:\n"
    );
    for g in groups {
        let days: Vec<String> = g.days.iter().map(|d| format!("{d:?}")).collect();
        s.push_str(&format!(
            "      - name: {}\n        days: [{}]\n        start_hour: {}\n",
            g.name,
            days.join(", "),
            g.start_hour
        ));
        if g.canary_count > 0 {
            s.push_str(&format!("        canary_count: {}\n", g.canary_count));
        }
        if g.wait_hours > 0 {
            s.push_str(&format!("        wait_hours: {}\n", g.wait_hours));
        }
    }
    s
}

/// A halt-on-error `autoupdate_config`, mode enabled; each group is `(name,
/// start_hour, canary_count, wait_hours)`, every day of the week.
pub fn halt_on_error(groups: &[(&str, u8, u8, u32)]) -> String {
    let groups: Vec<Group<'_>> = groups
        .iter()
        .map(|&(name, hour, canaries, wait)| group(name, hour).canaries(canaries).wait(wait))
        .collect();
    halt_on_error_config("enabled", &groups)
}

/// The three groups most tests use: dev at 10, staging at 12 with `staging_canaries`,
/// prod at 14, every day.
pub fn dev_staging_prod(staging_canaries: u8) -> String {
    halt_on_error(&[
        ("dev", 10, 0, 0),
        ("staging", 12, staging_canaries, 0),
        ("prod", 14, 0, 0),
    ])
}

/// A time-based `autoupdate_config`: `(name, start_hour)` groups, every day, windows
/// of `window` (e.g. `1h`).
pub fn time_based(window: &str, groups: &[(&str, u8)]) -> String {
    let mut s = format!(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: enabled\n    strategy: time-based\n    maintenance_window_duration: {window}\n    schedules:\n      regular:\n"
    );
    for (name, hour) in groups {
        s.push_str(&format!(
            "      - name: {name}\n        days: [\"*\"]\n        start_hour: {hour}\n"
        ));
    }
    s
}

/// An `autoupdate_version`; `schedule` is `regular` or `immediate`.
pub fn version(start: &str, target: &str, schedule: &str) -> String {
    format!(
        "kind: autoupdate_version\nversion: v1\nmetadata:\n  name: autoupdate-version\nspec:\n  agents:\n    start_version: {start}\n    target_version: {target}\n    schedule: {schedule}\n"
    )
}

/// An `autoupdate_version` that sets `mode: enabled` itself, for a store with no
/// config (a mode set in neither resource means disabled).
pub fn enabled_version(start: &str, target: &str, schedule: &str) -> String {
    format!("{}    mode: enabled\n", version(start, target, schedule))
}

/// A connected agent with updates enabled and known healthy, its host named after its
/// updater id.
#[cfg(test)]
pub(crate) fn connected_agent(
    updater_id: &str,
    group: &str,
    version: &str,
) -> crate::domain::resource::ConnectedAgent {
    crate::domain::resource::ConnectedAgent {
        updater_id: updater_id.into(),
        host_id: format!("host-{updater_id}"),
        hostname: format!("{updater_id}.example"),
        group: group.into(),
        version: version.into(),
        updater_status: crate::domain::wire::UpdaterStatus::Enabled,
        healthy: Some(true),
        failed_version: None,
        refused_version: None,
        attributes: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource::{AutoUpdateConfig, AutoUpdateVersion};

    #[test]
    fn the_files_parse_as_what_they_say() {
        let c = AutoUpdateConfig::from_text(&halt_on_error_config(
            "suspended",
            &[
                group("dev", 10),
                group("prod", 16).canaries(2).wait(24).days(&["Mon", "Tue"]),
            ],
        ))
        .unwrap();
        let groups = c.groups();
        assert_eq!(groups.len(), 2);
        assert_eq!((groups[1].canary_count, groups[1].wait_hours), (2, 24));
        assert_eq!(groups[1].days.len(), 2);
        assert_eq!(c.mode().map(|m| m.as_str()), Some("suspended"));
        assert_eq!(
            AutoUpdateConfig::from_text(&dev_staging_prod(2))
                .unwrap()
                .groups()[1]
                .canary_count,
            2
        );
        AutoUpdateVersion::from_text(&version("1.0.0", "1.1.0", "regular")).unwrap();
        AutoUpdateConfig::from_text(&time_based("2h", &[("a", 4)])).unwrap();
    }
}

/// The example files of Teleport's RFD 169 draft, byte for byte as the draft prints
/// them (the first two indented as the draft's list item indents them): what
/// [`crate::domain::rfd169`] must accept as written.
pub mod rfd169 {
    /// The draft's `autoupdate_config` example (`dev` then `prod`, `wait_days: 1`).
    pub const CONFIG: &str = include_str!("../tests/rfd169-files/config.yaml");
    /// The draft's default `autoupdate_config` (one group, `jitter_seconds: 5`).
    pub const CONFIG_DEFAULT: &str = include_str!("../tests/rfd169-files/config-default.yaml");
    /// The draft's `autoupdate_agent_plan` example, `current_version: v1`, with its status.
    pub const PLAN: &str = include_str!("../tests/rfd169-files/plan.yaml");
    /// The draft's plan whose canary has not come back (its "failure mode 1").
    pub const PLAN_CANARY_FAILING: &str =
        include_str!("../tests/rfd169-files/plan-canary-failing.yaml");
}
