//! An operator's first week (issue 52) on a real ternd over loopback: new-rollout
//! makes the rollout at once, so that a start-update right after it lands and a halt
//! of the rollout it replaced is gone from status; a group started by hand is counted
//! once the reports can tell; later groups follow within the window when a rollout
//! says so; status says when a group starts, which hosts are pending, that the rollout
//! runs an older copy of the config, and what to do at a halt; the catch-all group
//! says when it answers for a name the rollout lacks; a Teleport revision is named as
//! such; `agents report` keeps the rollout's order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{T0, Ternd, version_yaml};
use serde_json::{Value, json};

/// dev (one canary) and prod, both every day at 10:00 (one-hour windows).
const CONFIG: &str = r#"kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
        - name: dev
          days: ["*"]
          start_hour: 10
          canary_count: 1
        - name: prod
          days: ["*"]
          start_hour: 10
"#;

/// A ternd (dev clock) in `tmp` with [`CONFIG`], and an agent token.
fn configured(tmp: &tempfile::TempDir) -> (Ternd, String) {
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", CONFIG);
    (t, agent)
}

fn group<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["groups"]
        .as_array()
        .or_else(|| v["status"]["groups"].as_array())
        .and_then(|gs| gs.iter().find(|g| g["name"] == name))
        .unwrap_or_else(|| panic!("no group {name}: {v}"))
}

fn new_rollout(t: &Ternd, body: Value) -> Value {
    t.op("POST", "/v1/agents/new-rollout", Some(&body.to_string()))
}

/// `ids` of dev and `prod_ids` of prod on `start`, settled; the rollout `start ->
/// target` with dev in canary from 10:05 and its canary picked: (the canary, the agent
/// token).
fn dev_in_canary(
    t: &Ternd,
    ids: &[&str],
    prod_ids: &[&str],
    start: &str,
    target: &str,
) -> (String, String) {
    let agent = t.new_token("agent");
    t.put_resource("config", CONFIG);
    t.put_resource("version", &version_yaml(start, target, "regular"));
    let beat = || {
        for id in ids {
            t.heartbeat(&agent, id, "dev", start);
        }
        for id in prod_ids {
            t.heartbeat(&agent, id, "prod", start);
        }
    };
    beat();
    t.reconcile();
    t.set_clock("2026-11-23T10:05:00Z");
    beat();
    let r = t.reconcile();
    let canary = r["rollout"]["status"]["groups"][0]["canaries"][0]["updater_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no canary: {r}"))
        .to_string();
    (canary, agent)
}

/// dev's canary rolls `target` back to `start`, and a reconcile a minute later sees it:
/// the rollout halts.
fn roll_back(t: &Ternd, agent: &str, canary: &str, start: &str, target: &str) {
    t.heartbeat_with(
        agent,
        canary,
        "dev",
        start,
        json!({"rollback": true, "failed_version": target}),
    );
    t.advance("1m");
    t.reconcile();
}

/// `new-rollout X && start-update dev`: the rollout to X exists when new-rollout
/// answers, the start lands on it and no reconcile undoes it; status no longer shows
/// the halt of the rollout it replaced, and the alert's end is announced at once.
#[test]
fn a_start_update_right_after_new_rollout_is_not_undone() {
    let (hook, notices) = common::receiver();
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", T0, "--notify-webhook", &hook],
    );
    let (canary, agent) = dev_in_canary(&t, &["c1", "c2"], &["p1"], "1.1.0", "1.2.0");
    roll_back(&t, &agent, &canary, "1.1.0", "1.2.0");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["kind"], "canary_failed", "{st}");
    let n = notices.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(n["event"], "raised", "{n}");

    let v = new_rollout(&t, json!({"version": "1.2.1"}));
    assert_eq!(v["changed"], true, "{v}");
    // No reconcile in between (the dev clock runs none by itself).
    let rollout = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(rollout["spec"]["target_version"], "1.2.1", "{rollout}");
    assert_eq!(rollout["spec"]["start_version"], "1.1.0");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"], json!([]), "the replaced rollout's halt: {st}");
    assert!(st.get("next_steps").is_none(), "{st}");
    assert_eq!(group(&st, "dev")["state"], "unstarted");
    let n = notices.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("cleared"), Some("canary_failed")),
        "{n}"
    );

    let s = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(s["groups"][0]["to"], "canary", "{s}");
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(
        group(&r["rollout"], "dev")["state"],
        "canary",
        "the reconcile undid the start: {r}"
    );
    assert!(
        !r["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "rollout_created"),
        "{r}"
    );

    // The same through a version written as a resource (`apply -f`): the start lands
    // on the rollout of that version.
    t.put_resource("version", &version_yaml("1.1.0", "1.2.2", "regular"));
    let s = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["prod"], "force": true}"#),
    );
    assert_eq!(s["rollout"]["spec"]["target_version"], "1.2.2", "{s}");
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(r["rollout"]["spec"]["target_version"], "1.2.2");
    assert_eq!(group(&r["rollout"], "prod")["state"], "active", "{r}");
}

/// A group started by hand while the replica cannot count its hosts yet (it just
/// started: they are not settled) is counted by the first reconcile that can: its
/// initial count, and the metric, are its hosts, not 0.
#[test]
fn a_group_started_by_hand_gets_its_initial_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, agent) = configured(&tmp);
    new_rollout(&t, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    let s = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"], "force": true}"#),
    );
    assert_eq!(group(&s["rollout"], "dev")["initial_count"], 0, "{s}");
    // Settled, and the replica warmed up: the next reconcile counts the host.
    t.advance("3m");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    let r = t.reconcile();
    assert_eq!(group(&r["rollout"], "dev")["initial_count"], 1, "{r}");
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("tern_rollout_group_agents{group=\"dev\",kind=\"initial\"} 1"),
        "{metrics}"
    );
}

/// A rollout created inside the window with `follow_in_window`: once dev is done,
/// prod starts in the window open now instead of waiting for tomorrow's.
#[test]
fn later_groups_follow_within_the_window_when_the_rollout_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, agent) = configured(&tmp);
    let beat = |version: &str| {
        t.heartbeat(&agent, "d1", "dev", version);
        t.heartbeat(&agent, "p1", "prod", "1.0.0");
    };
    beat("1.0.0");
    t.set_clock("2026-11-23T10:10:00Z");
    beat("1.0.0");
    t.reconcile();
    let v = new_rollout(
        &t,
        json!({"version": "1.1.0", "current_version": "1.0.0", "follow_in_window": true}),
    );
    assert_eq!(
        v["version"]["spec"]["agents"]["follow_in_window"], true,
        "{v}"
    );
    let r = t.reconcile();
    assert_eq!(r["rollout"]["status"]["follow_in_window"], true, "{r}");
    assert_eq!(
        group(&r["rollout"], "dev")["last_update_reason"],
        "rollout_changed_during_window",
        "the first group never follows: {r}"
    );
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"], "force": true}"#),
    );
    t.advance("1m");
    beat("1.1.0");
    let r = t.reconcile();
    assert_eq!(group(&r["rollout"], "dev")["state"], "done", "{r}");
    assert_eq!(group(&r["rollout"], "prod")["state"], "active", "{r}");

    // Off by default: the same without it, prod waits for tomorrow's window.
    let tmp = tempfile::tempdir().unwrap();
    let t2 = Ternd::dev(&tmp.path().join("data"));
    let agent = t2.new_token("agent");
    t2.put_resource("config", CONFIG);
    t2.set_clock("2026-11-23T10:10:00Z");
    for _ in 0..2 {
        t2.heartbeat(&agent, "d1", "dev", "1.0.0");
        t2.heartbeat(&agent, "p1", "prod", "1.0.0");
    }
    new_rollout(&t2, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    t2.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"], "force": true}"#),
    );
    t2.advance("3m");
    t2.heartbeat(&agent, "d1", "dev", "1.1.0");
    t2.heartbeat(&agent, "p1", "prod", "1.0.0");
    let r = t2.reconcile();
    assert_eq!(group(&r["rollout"], "dev")["state"], "done", "{r}");
    assert_eq!(
        group(&r["rollout"], "prod")["last_update_reason"],
        "rollout_changed_during_window",
        "{r}"
    );
    let st = t2.op("GET", "/v1/agents/status", None);
    let starts = group(&st, "prod")["starts"].as_str().unwrap_or_default();
    assert!(starts.starts_with("starts at 2026-11-24 10:00 UTC"), "{st}");
}

/// Status says when the next reconcile starts a group whose window opened since the
/// last one (its reason still reads cannot_start), and lists a moving group's pending
/// hosts with their next run.
#[test]
fn status_says_when_a_group_starts_and_who_is_pending() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, agent) = configured(&tmp);
    let beat = || {
        for id in ["d1", "d2"] {
            t.heartbeat(&agent, id, "dev", "1.0.0");
        }
        t.heartbeat(&agent, "p1", "prod", "1.0.0");
    };
    beat();
    new_rollout(&t, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    t.advance("5m");
    beat();
    let r = t.reconcile();
    assert_eq!(
        group(&r["rollout"], "dev")["last_update_reason"],
        "cannot_start"
    );
    // 10:00: dev's window is open; no reconcile has run since.
    t.set_clock("2026-11-23T10:00:30Z");
    beat();
    let st = t.op("GET", "/v1/agents/status", None);
    let dev = group(&st, "dev");
    assert_eq!(dev["last_update_reason"], "cannot_start", "{st}");
    assert!(dev["window_open_since"].is_string(), "{st}");
    assert_eq!(dev["starts_at"], "2026-11-23T10:00:30Z", "{st}");
    assert!(
        dev["starts"]
            .as_str()
            .unwrap()
            .starts_with("its window is open: the next reconcile starts it"),
        "{st}"
    );
    assert!(group(&st, "prod").get("starts").is_none(), "{st}");
    let r = t.reconcile();
    assert_eq!(group(&r["rollout"], "dev")["state"], "canary", "{r}");

    // dev active (its canary skipped by hand): its hosts not on the target are
    // listed, lowest updater id first, each with its next run.
    t.op(
        "POST",
        "/v1/agents/mark-done",
        Some(r#"{"groups": ["dev"]}"#),
    );
    t.op(
        "POST",
        "/v1/agents/rollback",
        Some(r#"{"groups": ["dev"]}"#),
    );
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"], "force": true}"#),
    );
    t.advance("10s");
    t.heartbeat(&agent, "d2", "dev", "1.1.0");
    let st = t.op("GET", "/v1/agents/status", None);
    let pending = &group(&st, "dev")["pending"];
    assert_eq!(pending["total"], 1, "{st}");
    assert_eq!(pending["hosts"][0]["updater_id"], "d1", "{st}");
    assert_eq!(pending["hosts"][0]["version"], "1.0.0");
    assert_eq!(pending["hosts"][0]["last_seen"], "2026-11-23T10:00:30Z");
    assert_eq!(pending["hosts"][0]["next_run_by"], "2026-11-23T10:01:30Z");
    assert!(pending["replica"].is_string());
    assert!(group(&st, "prod").get("pending").is_none(), "{st}");
}

/// A config changed after the rollout was created: status says the rollout runs the
/// older copy and how to apply the current one; new-rollout of the current target
/// then does, and status says nothing more.
#[test]
fn status_says_when_the_rollout_runs_an_older_config() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", CONFIG);
    new_rollout(&t, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    let st = t.op("GET", "/v1/agents/status", None);
    assert!(st.get("config_outdated").is_none(), "{st}");
    t.advance("1h");
    t.put_resource("config", &CONFIG.replace("          canary_count: 1\n", ""));
    let st = t.op("GET", "/v1/agents/status", None);
    let said = st["config_outdated"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("this rollout uses the config of 2026-11-23 09:00 UTC; `ternctl agents new-rollout 1.1.0` applies the current one")
            && said.contains("dev: canary_count"),
        "{st}"
    );
    // The preview says the rollout starts over; the action does it.
    let p = t.op(
        "POST",
        "/v1/preview/new-rollout",
        Some(r#"{"version": "1.1.0"}"#),
    );
    assert_eq!(p["changes"], true, "{p}");
    assert!(
        p["effects"][0].as_str().unwrap().contains("starts over"),
        "{p}"
    );
    let v = new_rollout(&t, json!({"version": "1.1.0"}));
    assert_eq!(v["changed"], true, "{v}");
    assert!(
        v["note"].as_str().unwrap().contains("config changed"),
        "{v}"
    );
    let st = t.op("GET", "/v1/agents/status", None);
    assert!(st.get("config_outdated").is_none(), "{st}");
    assert_eq!(group(&st["rollout"], "dev")["canary_count"], 0, "{st}");
    // Asked again: nothing changes.
    let v = new_rollout(&t, json!({"version": "1.1.0"}));
    assert_eq!(v["changed"], false, "{v}");
}

/// At a halt the status carries the next steps, the one text ternctl prints and the
/// dashboard shows.
#[test]
fn status_says_what_to_do_at_a_halt() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let (canary, agent) = dev_in_canary(&t, &["c1"], &[], "1.1.0", "1.2.0");
    roll_back(&t, &agent, &canary, "1.1.0", "1.2.0");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(
        st["next_steps"]["title"], "The rollout to 1.2.0 is halted: what now",
        "{st}"
    );
    let steps = st["next_steps"]["steps"].to_string();
    assert!(
        steps.contains("`ternctl agents new-rollout VERSION`")
            && steps.contains("`ternctl agents rollback`"),
        "{steps}"
    );
    assert!(
        group(&st, "dev")["last_update_reason_text"]
            .as_str()
            .unwrap()
            .starts_with("a canary rolled the target back"),
        "{st}"
    );
}

/// A name the rollout lacks (Teleport's Helm chart asks for `stable/cloud`, a typo)
/// is answered by the catch-all group, and find and Teleport's channel path say so in
/// a header and ternd's log; a known group and no group at all are not.
#[test]
fn a_name_answered_by_the_catch_all_group_is_said() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", CONFIG);
    new_rollout(&t, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    let header = |path: &str| {
        let (status, headers, body) = t.raw("GET", path, None, None);
        assert_eq!(status, 200, "{path}: {body}");
        headers
            .get("tern-group-fallback")
            .map(|h| h.to_str().unwrap().to_string())
    };
    assert_eq!(
        header("/v1/webapi/find?group=stable%2Fcloud&updater_id=u1").as_deref(),
        Some("prod")
    );
    assert_eq!(
        header("/v1/webapi/automaticupgrades/channel/stable/cloud/version").as_deref(),
        Some("prod")
    );
    assert_eq!(
        header("/v1/webapi/find?group=prdo").as_deref(),
        Some("prod")
    );
    assert_eq!(header("/v1/webapi/find?group=dev"), None);
    assert_eq!(header("/v1/webapi/find?group=prod"), None);
    assert_eq!(header("/v1/webapi/find"), None);
    let log = tmp.path().join("data.log");
    let fallback_lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("which the rollout lacks"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Said once per name: stable/cloud was asked twice, prdo once.
    common::eventually("the fallbacks in ternd's log", || {
        let lines = fallback_lines();
        lines.len() == 2
            && lines.iter().any(|l| l.contains("stable/cloud"))
            && lines
                .iter()
                .any(|l| l.contains("prdo") && l.contains("prod"))
    });
}

/// A revision as `tctl get` writes it (a UUID) is named as Teleport's when an update
/// is asked at it, with what to do instead; a create ignores it.
#[test]
fn a_teleport_revision_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let with_uuid = CONFIG.replace(
        "  name: autoupdate-config\n",
        "  name: autoupdate-config\n  revision: 3f2504e0-4f89-41d3-9a0c-0305e82c3301\n",
    );
    let (s, v) = t.call(
        "POST",
        "/v1/resources/config",
        Some(&t.token),
        Some(&with_uuid),
    );
    assert_eq!(s, 201, "a create ignores the revision: {v}");
    let (s, v) = t.call(
        "PUT",
        "/v1/resources/config",
        Some(&t.token),
        Some(&with_uuid),
    );
    assert_eq!(s, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("is a Teleport revision (a UUID") && message.contains("force=true"),
        "{message}"
    );
}

/// `agents report` in the rollout's order, then the groups it lacks.
#[test]
fn the_report_keeps_the_rollout_order() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource(
        "config",
        &tern_core::fixtures::halt_on_error(&[("zeta", 10, 0, 0), ("alpha", 12, 0, 0)]),
    );
    new_rollout(&t, json!({"version": "1.1.0", "current_version": "1.0.0"}));
    for (id, g) in [("a1", "alpha"), ("z1", "zeta"), ("t1", "typo"), ("n1", "")] {
        t.heartbeat(&agent, id, g, "1.0.0");
    }
    t.advance("2m");
    for (id, g) in [("a1", "alpha"), ("z1", "zeta"), ("t1", "typo"), ("n1", "")] {
        t.heartbeat(&agent, id, g, "1.0.0");
    }
    t.reconcile();
    let r = t.op("GET", "/v1/agents/report", None);
    assert_eq!(r["order"], json!(["zeta", "alpha", "typo", ""]), "{r}");
}

/// The history (issue 52 item 2): the rollout a canary failed stays once `new-rollout`
/// replaced it, with what happened (dev's transition, its canary failing and why, the
/// alert, who asked for the new rollout) and dev's hosts over time; kept in the store
/// across a restart of ternd.
#[test]
fn the_history_keeps_a_replaced_rollout_and_what_happened() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut t = Ternd::start(&data, &["--dev-clock", T0]);
    let (canary, agent) = dev_in_canary(&t, &["c1", "c2"], &["p1"], "1.1.0", "1.2.0");
    t.heartbeat_with(
        &agent,
        &canary,
        "dev",
        "1.1.0",
        json!({
            "rollback": true, "failed_version": "1.2.0",
            "update_failure": {
                "version": "1.2.0",
                "error": "update to 1.2.0 failed: 1.2.0 the agent is not running (5 checks in a row)",
                "agent_output": "thread 'main' panicked",
            },
        }),
    );
    t.advance("1m");
    t.reconcile();
    new_rollout(&t, json!({"version": "1.2.1"}));

    let history = |t: &Ternd| t.op("GET", "/v1/agents/history", None);
    let replaced = |h: &Value| {
        h["rollouts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rollout"]["target_version"] == "1.2.0")
            .cloned()
    };
    let mut h = Value::Null;
    common::eventually("the replaced rollout in the history", || {
        h = history(&t);
        replaced(&h).is_some_and(|r| r["rollout"]["replaced_by"]["target_version"] == "1.2.1")
    });
    let check = |h: &Value| {
        assert_eq!(
            h["rollouts"][0]["rollout"]["target_version"], "1.2.1",
            "{h}"
        );
        let old = replaced(h).unwrap();
        let events = old["events"].as_array().unwrap();
        let said = |kind: &str, part: &str| {
            events
                .iter()
                .any(|e| e["kind"] == kind && e["message"].as_str().unwrap().contains(part))
        };
        assert!(said("rollout_created", "1.1.0 → 1.2.0"), "{old}");
        assert!(said("group", "dev: unstarted → canary"), "{old}");
        assert!(said("canary_picked", &canary), "{old}");
        assert!(
            said("canary_failed", "not running (5 checks in a row)")
                && said("canary_failed", "panicked"),
            "{old}"
        );
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "alert_raised" && e["to"] == "canary_failed"),
            "{old}"
        );
        assert!(said("rollout_replaced", "1.1.0 → 1.2.1"), "{old}");
        let dev: Vec<&Value> = old["progress"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["group"] == "dev")
            .collect();
        assert!(dev.iter().any(|s| s["failed"] == 1), "{old}");
        // Who asked: the new rollout's history names the operator's action.
        let new = &h["rollouts"][0];
        assert!(
            new["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "action"
                    && e["message"]
                        .as_str()
                        .unwrap()
                        .contains("POST /v1/agents/new-rollout")),
            "{new}"
        );
    };
    check(&h);
    t.stop();
    let t = Ternd::start(&data, &[]);
    check(&history(&t));
}
