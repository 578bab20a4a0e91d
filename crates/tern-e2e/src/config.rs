//! Resource files for the scenarios (the same YAML an operator writes).

/// A halt-on-error `autoupdate_config`; each group is `(name, start_hour,
/// canary_count, wait_hours)`, every day of the week.
pub fn halt_on_error(groups: &[(&str, u8, u8, u32)]) -> String {
    let mut s = String::from(
        "kind: autoupdate_config\nversion: v1\nmetadata:\n  name: autoupdate-config\nspec:\n  agents:\n    mode: enabled\n    strategy: halt-on-error\n    schedules:\n      regular:\n",
    );
    for (name, hour, canaries, wait) in groups {
        s.push_str(&format!(
            "      - name: {name}\n        days: [\"*\"]\n        start_hour: {hour}\n"
        ));
        if *canaries > 0 {
            s.push_str(&format!("        canary_count: {canaries}\n"));
        }
        if *wait > 0 {
            s.push_str(&format!("        wait_hours: {wait}\n"));
        }
    }
    s
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
