//! The offline planner as an operator runs it: the real `ternctl` binary on the
//! bundled examples and on broken files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ternctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ternctl"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_example_replays_with_its_expectations_holding() {
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path().join("scenario.yaml"))
        .filter(|p| p.is_file())
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 6, "{scenarios:?}");
    for s in scenarios {
        let name = s
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let out = ternctl(&["plan", "replay", s.to_str().unwrap()]);
        let text = stdout(&out);
        assert!(
            out.status.success(),
            "{name} failed:\n{text}\n{}",
            stderr(&out)
        );
        assert!(
            text.ends_with("every expectation held\n"),
            "{name}:\n{text}"
        );
        insta::assert_snapshot!(format!("replay-{name}"), text);
    }
}

#[test]
fn a_failed_expectation_fails_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let examples = root().join("examples/01-halt-on-error");
    let scenario = std::fs::read_to_string(examples.join("scenario.yaml"))
        .unwrap()
        .replace(
            "config: config.yaml",
            &format!("config: {}", examples.join("config.yaml").display()),
        )
        .replace(
            "version: version.yaml",
            &format!("version: {}", examples.join("version.yaml").display()),
        )
        .replace(
            "groups: {dev: active/update_in_progress}",
            "groups: {dev: done}",
        );
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, scenario).unwrap();
    let out = ternctl(&["plan", "replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("EXPECTATION FAILED: group dev is active, expected done"),
        "{text}"
    );
    assert!(text.ends_with("1 expectation failed\n"), "{text}");
}

const EX: &str = "examples/01-halt-on-error";

/// `ternctl plan rollout` with example 01's config and version, plus `args`.
fn plan_rollout(args: &[&str]) -> Output {
    let (config, version) = (format!("{EX}/config.yaml"), format!("{EX}/version.yaml"));
    let mut all = vec![
        "plan",
        "rollout",
        "--config",
        &config,
        "--version",
        &version,
    ];
    all.extend_from_slice(args);
    ternctl(&all)
}

/// The rollout example 01 creates on Monday 10:00, written to `dir/rollout.yaml`.
fn created_rollout(dir: &Path) -> PathBuf {
    let out = plan_rollout(&["--now", "2026-11-23T10:00:00Z"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let path = dir.join("rollout.yaml");
    std::fs::write(&path, stdout(&out)).unwrap();
    path
}

#[test]
fn plan_rollout_walks_a_rollout_one_reconcile_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let r0 = created_rollout(dir.path());
    insta::assert_snapshot!("rollout-created", std::fs::read_to_string(&r0).unwrap());

    // At noon dev starts, with reports and agents from files.
    let reports = dir.path().join("reports.yaml");
    std::fs::write(
        &reports,
        "- kind: autoupdate_agent_report\n  metadata: {name: replica-a}\n  spec:\n    timestamp: 2026-11-23T12:04:30Z\n    groups:\n      dev: {versions: {1.0.0: {count: 9, lowest_updater_id: 00000000-0000-4000-8000-000000000001}, 1.1.0: {count: 1}}}\n      '': {versions: {1.0.0: {count: 2}}}\n    omitted: [{reason: version is pinned, count: 1}]\n",
    )
    .unwrap();
    let out = plan_rollout(&[
        "--rollout",
        r0.to_str().unwrap(),
        "--reports",
        reports.to_str().unwrap(),
        "--now",
        "2026-11-23T12:05:00Z",
        "--events",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!("rollout-dev-started", stdout(&out));
    assert!(
        stderr(&out).contains("event: group dev: unstarted -> active (can_start)"),
        "{}",
        stderr(&out)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["status"]["groups"][0]["initial_count"], 10);
    assert_eq!(
        json["status"]["groups"][2]["present_count"], 2,
        "ungrouped hosts count in prod"
    );
}

#[test]
fn without_a_version_there_is_no_rollout_and_that_is_not_an_error() {
    let out = ternctl(&[
        "plan",
        "rollout",
        "--config",
        &format!("{EX}/config.yaml"),
        "--now",
        "2026-11-23T10:00:00Z",
    ]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("no rollout: no autoupdate_version"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn canaries_are_picked_with_the_seed_from_the_agents_file() {
    let dir = tempfile::tempdir().unwrap();
    // A rollout where dev is done and staging's window opens.
    let rollout = created_rollout(dir.path());
    let done = ternctl(&[
        "plan",
        "transition",
        "mark-done",
        "dev",
        "--rollout",
        rollout.to_str().unwrap(),
        "--now",
        "2026-11-23T11:00:00Z",
    ]);
    assert!(done.status.success(), "{}", stderr(&done));
    std::fs::write(&rollout, stdout(&done)).unwrap();
    let agents = dir.path().join("agents.yaml");
    let list: String = (0..8)
        .map(|i| format!("- {{updater_id: u{i}, host_id: h{i}, hostname: staging-{i}, group: staging, version: 1.0.0}}\n"))
        .collect();
    std::fs::write(&agents, list).unwrap();
    let run = |seed: &str| {
        let out = plan_rollout(&[
            "--rollout",
            rollout.to_str().unwrap(),
            "--agents",
            agents.to_str().unwrap(),
            "--now",
            "2026-11-23T14:00:00Z",
            "--seed",
            seed,
            "-o",
            "json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(v["status"]["groups"][1]["state"], "canary");
        v["status"]["groups"][1]["canaries"].clone()
    };
    let a = run("7");
    assert_eq!(a.as_array().unwrap().len(), 2);
    assert_eq!(a, run("7"), "the same seed picks the same canaries");
    let picks: std::collections::HashSet<String> =
        (0..20).map(|s| run(&s.to_string()).to_string()).collect();
    assert!(picks.len() > 3, "seeds should vary the pick: {picks:?}");
}

#[test]
fn plan_find_answers_like_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = created_rollout(dir.path());
    let find = |group: &str| {
        let out = ternctl(&[
            "plan",
            "find",
            "--rollout",
            rollout.to_str().unwrap(),
            "--group",
            group,
            "--updater-id",
            "00000000-0000-4000-8000-000000000001",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap()
    };
    let v = find("dev");
    assert_eq!(v["auto_update"]["agent_version"], "1.0.0");
    assert_eq!(v["auto_update"]["agent_auto_update"], false);
    assert_eq!(v["auto_update"]["agent_update_jitter_seconds"], 60);
    let forced = ternctl(&[
        "plan",
        "transition",
        "start-update",
        "dev",
        "--force",
        "--rollout",
        rollout.to_str().unwrap(),
        "--now",
        "2026-11-23T10:01:00Z",
    ]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    std::fs::write(&rollout, stdout(&forced)).unwrap();
    let v = find("dev");
    assert_eq!(v["auto_update"]["agent_version"], "1.1.0");
    assert_eq!(v["auto_update"]["agent_auto_update"], true);
    assert_eq!(
        find("nosuchgroup")["auto_update"]["agent_auto_update"],
        false,
        "catch-all prod is unstarted"
    );
    let yaml = ternctl(&[
        "plan",
        "find",
        "--rollout",
        rollout.to_str().unwrap(),
        "--group",
        "dev",
        "-o",
        "yaml",
    ]);
    assert!(
        stdout(&yaml).contains("agent_version: 1.1.0"),
        "{}",
        stdout(&yaml)
    );
}

#[test]
fn refused_transitions_exit_1_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = created_rollout(dir.path());
    let cases: [(&[&str], &str); 4] = [
        (
            &["start-update", "qa"],
            "unknown group \"qa\"; the rollout's groups are: dev, staging, prod",
        ),
        (
            &["start-update"],
            "start-update needs at least one group name",
        ),
        (&["mark-done"], "no group is in canary or active"),
        (
            &["rollback"],
            "no group is started and not already rolled back",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["plan", "transition"];
        all.extend_from_slice(args);
        all.extend([
            "--rollout",
            rollout.to_str().unwrap(),
            "--now",
            "2026-11-23T10:01:00Z",
        ]);
        let out = ternctl(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "");
    }
}

#[test]
fn bad_input_names_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad-config.yaml");
    std::fs::write(
        &bad,
        "kind: autoupdate_config\nspec:\n  agents:\n    schedules:\n      regular:\n      - {name: dev, start_hour: 25}\n",
    )
    .unwrap();
    let out = ternctl(&[
        "plan",
        "rollout",
        "--config",
        bad.to_str().unwrap(),
        "--version",
        &format!("{EX}/version.yaml"),
        "--now",
        "2026-11-23T10:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad-config.yaml: invalid autoupdate_config"),
        "{err}"
    );
    assert!(
        err.contains("spec.agents.schedules.regular[0].start_hour: 25 is out of range"),
        "{err}"
    );

    let missing = ternctl(&["plan", "find", "--rollout", "/nonexistent/rollout.yaml"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing)
            .contains("cannot read the autoupdate_agent_rollout file /nonexistent/rollout.yaml")
    );

    let reports = dir.path().join("reports.yaml");
    std::fs::write(
        &reports,
        "- kind: autoupdate_agent_report\n  metadata: {name: r}\n  spec: {timestamp: yesterday}\n",
    )
    .unwrap();
    let out = ternctl(&[
        "plan",
        "rollout",
        "--version",
        &format!("{EX}/version.yaml"),
        "--reports",
        reports.to_str().unwrap(),
        "--now",
        "2026-11-23T10:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("reports.yaml: invalid reports: [0].spec.timestamp"),
        "{}",
        stderr(&out)
    );

    let out = ternctl(&["plan", "rollout", "--now", "monday"]);
    assert_eq!(out.status.code(), Some(2), "a usage error exits 2");
    assert!(
        stderr(&out).contains("\"monday\" is not an RFC 3339 instant"),
        "{}",
        stderr(&out)
    );

    let garbage = dir.path().join("garbage.yaml");
    std::fs::write(&garbage, [0xff, 0xfe, 0x00, b'{']).unwrap();
    let out = ternctl(&["plan", "find", "--rollout", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("garbage.yaml"), "{}", stderr(&out));
}

#[test]
fn an_unknown_transition_is_refused_naming_the_transitions() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = created_rollout(dir.path());
    for kind in ["roll-back", "Rollback", "done"] {
        let out = ternctl(&[
            "plan",
            "transition",
            kind,
            "dev",
            "--rollout",
            rollout.to_str().unwrap(),
            "--now",
            "2026-11-23T10:01:00Z",
        ]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{kind:?}: a usage error exits 2"
        );
        let err = stderr(&out);
        assert!(err.contains(&format!("invalid value '{kind}'")), "{err}");
        assert!(
            err.contains("[possible values: start-update, mark-done, rollback, reset]"),
            "{err}"
        );
        assert_eq!(stdout(&out), "", "{kind:?}: no rollout printed");
    }
}

#[test]
fn a_scenario_with_an_unknown_transition_is_refused_before_replaying() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["roll-back", "Rollback", "abort"] {
        let path = dir.path().join("scenario.yaml");
        std::fs::write(
            &path,
            format!(
                "steps:\n  - at: 2026-11-23T10:00:00Z\n  - at: 2026-11-23T11:00:00Z\n    transition: {{action: {kind}, groups: [dev]}}\n"
            ),
        )
        .unwrap();
        let out = ternctl(&["plan", "replay", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{kind:?}");
        let err = stderr(&out);
        assert!(
            err.contains(
                "scenario.yaml: invalid scenario: steps[1].transition.action: unknown variant"
            ),
            "{err}"
        );
        assert!(err.contains(&format!("`{kind}`")), "{err}");
        assert!(
            err.contains("expected one of `start-update`, `mark-done`, `rollback`"),
            "{err}"
        );
        assert_eq!(stdout(&out), "", "{kind:?}: nothing replayed");
    }
}

/// `ternctl … | head`: a reader that goes away is not an error of ternctl's. Its stdout
/// is a pipe whose read end is already closed, so the first write fails.
#[test]
fn a_closed_stdout_ends_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_ternctl"))
        .args(["plan", "replay", "examples/01-halt-on-error/scenario.yaml"])
        .current_dir(root())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
}

/// Teleport's RFD 169 draft files, as the draft prints them: the planner reads them,
/// says on stderr which field became which, and plans as with Tern's own files.
#[test]
fn the_rfd169_drafts_files_are_planned_as_written() {
    use tern_core::fixtures::rfd169;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("autoupdate_config.yaml");
    let plan = dir.path().join("autoupdate_agent_plan.yaml");
    std::fs::write(&config, rfd169::CONFIG).unwrap();
    std::fs::write(&plan, rfd169::PLAN).unwrap();
    let (c, p) = (config.to_str().unwrap(), plan.to_str().unwrap());
    // Monday 00:05 UTC: dev's window (Mon-Thu at 0) is open.
    let out = ternctl(&[
        "plan",
        "rollout",
        "--config",
        c,
        "--version",
        p,
        "--now",
        "2026-11-23T00:05:00Z",
        "--events",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for line in [
        format!(
            "translated: {c}: spec.agent_autoupdate_mode: enable became spec.agents.mode: enabled"
        ),
        format!(
            "translated: {c}: spec.agent_schedules.regular[1].wait_days: 1 became spec.agents.schedules.regular[1].wait_hours: 24"
        ),
        format!(
            "translated: {p}: spec.current_version: v1 became spec.agents.start_version: 1.0.0 (a version is MAJOR.MINOR.PATCH: the missing numbers are 0)"
        ),
        format!(
            "translated: {p}: status is not kept: the rollout's state is ternd's own (autoupdate_agent_rollout), worked out by its reconcile; `ternctl agents status` shows it"
        ),
    ] {
        assert!(
            err.lines().any(|l| l == line),
            "no line {line:?} in:\n{err}"
        );
    }
    // Both groups have canaries and max_in_flight: nothing reaches all hosts at once.
    assert!(!err.contains("warning:"), "{err}");
    let rollout: serde_yaml_ng::Value = serde_yaml_ng::from_str(&stdout(&out)).unwrap();
    assert_eq!(rollout["spec"]["start_version"], "1.0.0");
    assert_eq!(rollout["spec"]["target_version"], "2.0.0");
    let groups = rollout["status"]["groups"].as_sequence().unwrap();
    assert_eq!(groups[0]["name"], "dev");
    assert_eq!(groups[0]["canary_count"], 5);
    assert_eq!(groups[1]["name"], "prod");
    assert_eq!(groups[1]["config_wait_hours"], 24);

    // The plan is the version; as the rollout it is refused, saying what to give.
    let out = ternctl(&["plan", "find", "--rollout", p, "--group", "dev"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "kind: autoupdate_agent_plan is read as the autoupdate_version: give it as --version"
        ),
        "{}",
        stderr(&out)
    );
}

/// A halt-on-error group with neither canaries nor max_in_flight is said on stderr,
/// counted from the agents file when one is given.
#[test]
fn a_group_that_updates_all_at_once_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        tern_core::fixtures::halt_on_error(&[("dev", 10, 2, 0), ("prod", 14, 0, 0)]),
    )
    .unwrap();
    let agents = dir.path().join("agents.yaml");
    let mut list = String::new();
    for i in 0..240 {
        list.push_str(&format!(
            "- {{updater_id: 00000000-0000-4000-8000-{i:012x}, group: prod, version: 1.0.0}}\n"
        ));
    }
    list.push_str(
        "- {updater_id: 10000000-0000-4000-8000-000000000000, group: dev, version: 1.0.0}\n",
    );
    std::fs::write(&agents, list).unwrap();
    let version = format!("{EX}/version.yaml");
    let c = config.to_str().unwrap();
    let plan = |more: &[&str]| {
        let mut args = vec![
            "plan",
            "rollout",
            "--config",
            c,
            "--version",
            &version,
            "--now",
            "2026-11-23T10:00:00Z",
        ];
        args.extend_from_slice(more);
        let out = ternctl(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let out = plan(&[]);
    assert_eq!(
        stderr(&out),
        "warning: a bad version reaches every host of prod at once: set canary_count or max_in_flight\n"
    );
    let out = plan(&["--agents", agents.to_str().unwrap()]);
    assert_eq!(
        stderr(&out),
        "warning: a bad version reaches all 240 hosts of prod at once: set canary_count or max_in_flight\n"
    );
}
