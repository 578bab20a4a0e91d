//! Rollouts driven end to end against the real ternd with the dev clock and simulated
//! heartbeats.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, three_groups, version_yaml};
use serde_json::json;

/// Each (updater_id, group, version) heartbeats.
fn fleet(t: &Ternd, agent: &str, versions: &[(&str, &str, &str)]) {
    for (id, group, version) in versions {
        t.heartbeat(agent, id, group, version);
    }
}

#[test]
fn halt_on_error_over_three_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    let mut hosts = vec![
        ("d1", "dev", "1.0.0"),
        ("d2", "dev", "1.0.0"),
        ("s1", "staging", "1.0.0"),
        ("s2", "staging", "1.0.0"),
        ("p1", "prod", "1.0.0"),
        ("p2", "prod", "1.0.0"),
        // No group: counted in and served by the catch-all (prod).
        ("x1", "", "1.0.0"),
    ];
    fleet(&t, &agent, &hosts);

    // 09:00: the rollout is created, nothing can start.
    let r = t.reconcile();
    assert_eq!(r["rollout"]["status"]["state"], "unstarted", "{r}");
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), false));

    // 10:01: dev's window is open and its agents have been connected for an hour.
    t.advance("61m");
    fleet(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(t.state_of("staging"), "unstarted");
    let rollout = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(rollout["status"]["groups"][0]["initial_count"], 2);
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    assert_eq!(t.find("staging", "s1"), ("1.0.0".into(), false));

    // dev updates; the next reconcile marks it done. staging waits for its window.
    for h in hosts.iter_mut().filter(|h| h.1 == "dev") {
        h.2 = "1.1.0";
    }
    t.advance("2m");
    fleet(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(t.state_of("dev"), "done");
    assert_eq!(t.state_of("staging"), "unstarted");
    let rollout = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(
        rollout["status"]["groups"][1]["last_update_reason"],
        "cannot_start"
    );

    // 12:01: staging starts, updates, completes.
    t.set_clock("2026-11-23T12:01:00Z");
    fleet(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(t.state_of("staging"), "active");
    assert_eq!(t.find("staging", "s2"), ("1.1.0".into(), true));
    assert_eq!(t.find("prod", "p1"), ("1.0.0".into(), false));
    for h in hosts.iter_mut().filter(|h| h.1 == "staging") {
        h.2 = "1.1.0";
    }
    t.advance("2m");
    fleet(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(t.state_of("staging"), "done");

    // 14:01: prod (with the group-less host) starts and completes.
    t.set_clock("2026-11-23T14:01:00Z");
    fleet(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(t.state_of("prod"), "active");
    let rollout = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(
        rollout["status"]["groups"][2]["initial_count"], 3,
        "the group-less host counts in the catch-all"
    );
    assert_eq!(t.find("", "x1"), ("1.1.0".into(), true));
    for h in hosts.iter_mut().filter(|h| h.1 == "prod" || h.1.is_empty()) {
        h.2 = "1.1.0";
    }
    t.advance("2m");
    fleet(&t, &agent, &hosts);
    let r = t.reconcile();
    assert_eq!(r["rollout"]["status"]["state"], "done", "{r}");

    // Status and report agree with what the agents said.
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["groups"][2]["catch_all"], true);
    assert_eq!(st["groups"][2]["present"], 3);
    assert_eq!(st["groups"][2]["up_to_date"], 3);
    assert_eq!(st["up_to_date"], 7);
    let rep = t.op("GET", "/v1/agents/report", None);
    assert_eq!(rep["total"], 7);
    assert_eq!(rep["groups"]["dev"]["versions"]["1.1.0"], 2);
    assert_eq!(rep["groups"][""]["versions"]["1.1.0"], 1);

    // Metrics reflect it.
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("tern_rollout_state{state=\"done\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("tern_rollout_group_state{group=\"prod\",state=\"done\"} 1"));
    assert!(metrics.contains("tern_inventory_agents{group=\"dev\",version=\"1.1.0\"} 2"));
    assert!(metrics.contains("tern_reconcile_events_total{event=\"group_changed\"}"));
}

const CANARY_CONFIG: &str = r#"kind: autoupdate_config
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
          start_hour: 14
"#;

/// `CANARY_CONFIG` rolling `start -> target`, with the hosts `ids` of dev on `start`
/// heartbeating before and after dev's window opens (10:00): dev is in canary. The
/// canary's updater id and the reconcile's answer.
fn dev_in_canary(
    t: &Ternd,
    agent: &str,
    ids: &[&str],
    start: &str,
    target: &str,
) -> (String, serde_json::Value) {
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml(start, target, "regular"));
    let beat = || {
        for id in ids {
            t.heartbeat(agent, id, "dev", start);
        }
    };
    beat();
    t.reconcile();
    t.set_clock("2026-11-23T10:05:00Z");
    beat();
    let r = t.reconcile();
    let canary = r["rollout"]["status"]["groups"][0]["canaries"][0]["updater_id"]
        .as_str()
        .unwrap()
        .to_string();
    (canary, r)
}

#[test]
fn canary_group_waits_for_its_canary() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "2.0.0", "regular"));
    let ids = ["c1", "c2", "c3"];
    for id in ids {
        t.heartbeat(&agent, id, "dev", "1.0.0");
    }
    t.reconcile();
    t.set_clock("2026-11-23T10:05:00Z");
    for id in ids {
        t.heartbeat(&agent, id, "dev", "1.0.0");
    }
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "canary", "{r}");
    let canaries = dev["canaries"].as_array().unwrap();
    assert_eq!(canaries.len(), 1);
    let canary = canaries[0]["updater_id"].as_str().unwrap().to_string();
    assert!(ids.contains(&canary.as_str()));
    assert_eq!(canaries[0]["hostname"], format!("{canary}.example"));
    let other = ids.iter().find(|i| **i != canary).unwrap();
    assert_eq!(t.find("dev", &canary), ("2.0.0".into(), true));
    assert_eq!(t.find("dev", other), ("1.0.0".into(), false));

    // Still waiting while the canary runs the old version.
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(r["rollout"]["status"]["groups"][0]["state"], "canary");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["groups"][0]["canaries"][0]["success"], false);

    // The canary runs the target but is unhealthy: it failed, the group holds.
    t.heartbeat_with(&agent, &canary, "dev", "2.0.0", json!({"healthy": false}));
    t.advance("1m");
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "canary", "{r}");
    assert_eq!(dev["last_update_reason"], "canary_failed", "{r}");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["groups"][0]["canaries"][0]["success"], false);
    assert_eq!(st["groups"][0]["canaries"][0]["failed"], true);
    assert_eq!(t.find("dev", other), ("1.0.0".into(), false));

    // Rolled the target back: still failed, still holding.
    t.heartbeat_with(
        &agent,
        &canary,
        "dev",
        "1.0.0",
        json!({"rollback": true, "failed_version": "2.0.0"}),
    );
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["last_update_reason"],
        "canary_failed"
    );

    // A failure is final for the rollout: the canary back on the target, saying
    // nothing of its health or even healthy, does not pass; the group holds.
    for healthy in [json!(null), json!(true)] {
        t.heartbeat_with(&agent, &canary, "dev", "2.0.0", json!({"healthy": healthy}));
        t.advance("1m");
        let r = t.reconcile();
        let dev = &r["rollout"]["status"]["groups"][0];
        assert_eq!(dev["state"], "canary", "{r}");
        assert_eq!(dev["last_update_reason"], "canary_failed", "{r}");
        assert_eq!(dev["canaries"][0]["success"], false, "{r}");
        assert_eq!(t.find("dev", other), ("1.0.0".into(), false));
    }
}

/// The tester's run: 1.1.0 -> 1.2.0 halts on a crashing canary; `new-rollout 1.3.0`
/// must keep 1.1.0 as the start (what a rollback returns to), and saying it twice
/// must not reset the rollout.
#[test]
fn new_rollout_after_a_failed_canary_keeps_the_last_good_start() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    let (canary, _) = dev_in_canary(&t, &agent, &["c1", "c2"], "1.1.0", "1.2.0");
    // The canary crashes on 1.2.0 and rolls back.
    t.heartbeat_with(
        &agent,
        &canary,
        "dev",
        "1.1.0",
        json!({"rollback": true, "failed_version": "1.2.0"}),
    );
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["last_update_reason"],
        "canary_failed"
    );

    let body = json!({"version": "1.3.0"}).to_string();
    let v = t.op("POST", "/v1/agents/new-rollout", Some(&body));
    assert_eq!(v["changed"], true);
    assert_eq!(v["start_version"], "1.1.0", "{v}");
    assert_eq!(v["target_version"], "1.3.0");
    assert!(v["note"].as_str().unwrap().contains("1.2.0 failed"), "{v}");
    t.advance("1m");
    let r = t.reconcile();
    let created = r["rollout"]["status"]["start_time"].clone();
    assert_eq!(r["rollout"]["spec"]["start_version"], "1.1.0");

    // Again: nothing changes, the rollout keeps its start time.
    let v = t.op("POST", "/v1/agents/new-rollout", Some(&body));
    assert_eq!(v["changed"], false, "{v}");
    assert_eq!(v["start_version"], "1.1.0");
    t.advance("1m");
    let r = t.reconcile();
    assert_eq!(r["rollout"]["status"]["start_time"], created);
}

/// `ternctl agents reset GROUP` over the API: a group in canary gets its canaries
/// picked again at the next reconcile.
#[test]
fn reset_picks_the_canaries_again() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    let beat = || {
        for id in ["c1", "c2", "c3"] {
            t.heartbeat(&agent, id, "dev", "1.0.0");
        }
    };
    let (_, r) = dev_in_canary(&t, &agent, &["c1", "c2", "c3"], "1.0.0", "2.0.0");
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["canaries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let v = t.op(
        "POST",
        "/v1/agents/reset",
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    assert_eq!(v["groups"][0]["from"], "canary", "{v}");
    assert_eq!(v["groups"][0]["to"], "canary");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["groups"][0]["last_update_reason"], "manual_reset");
    assert!(st["groups"][0].get("canaries").is_none(), "{st}");
    t.advance("1m");
    beat();
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["canaries"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(dev["last_update_reason"], "waiting_for_canaries");
    // A group that is done cannot be reset; no group named is refused.
    let (s, e) = t.call(
        "POST",
        "/v1/agents/reset",
        Some(&t.token),
        Some(&json!({"groups": ["prod"]}).to_string()),
    );
    assert_eq!(s, 400, "{e}");
    let (s, _) = t.call("POST", "/v1/agents/reset", Some(&t.token), Some("{}"));
    assert_eq!(s, 400);
}

#[test]
fn suspend_resume_rollback_start_update_mark_done() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", &three_groups());
    t.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(&json!({"version": "1.1.0", "current_version": "1.0.0"}).to_string()),
    );
    t.reconcile();
    assert_eq!(t.state_of("dev"), "unstarted");

    // start-update --force: straight to active, outside its window.
    let v = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(&json!({"groups": ["dev"], "force": true}).to_string()),
    );
    assert_eq!(v["groups"][0]["name"], "dev");
    assert_eq!(v["groups"][0]["to"], "active");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));

    // suspend: takes effect on find at once, before any reconcile; under a stop find
    // names the last known-good version (a new host installs it), never the target.
    let v = t.op("POST", "/v1/agents/suspend", None);
    assert_eq!(v["mode"], "suspended");
    assert_eq!(v["changed"], true);
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), false));
    let cfg = t.op("GET", "/v1/resources/config", None);
    assert_eq!(cfg["spec"]["agents"]["mode"], "suspended");

    // rollback (no group named: every started group) while suspended: nobody moves.
    let v = t.op("POST", "/v1/agents/rollback", None);
    assert_eq!(v["groups"].as_array().unwrap().len(), 1);
    assert_eq!(v["groups"][0]["name"], "dev");
    assert_eq!(v["mode"], "suspended");
    assert_eq!(t.state_of("dev"), "rolledback");
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), false));

    // resume: the rollback happens.
    let v = t.op("POST", "/v1/agents/resume", None);
    assert_eq!(v["mode"], "enabled");
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), true));

    // A reconcile keeps the manual states.
    t.advance("1m");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "rolledback");

    // start-update on the rolled-back group, then mark-done with no group named.
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    assert_eq!(t.state_of("dev"), "active");
    let v = t.op("POST", "/v1/agents/mark-done", None);
    assert_eq!(v["groups"][0]["name"], "dev");
    assert_eq!(t.state_of("dev"), "done");
    let rollout = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(
        rollout["status"]["groups"][0]["last_update_reason"],
        "manual_forced_done"
    );

    // Refused transitions change nothing.
    let (s, e) = t.call(
        "POST",
        "/v1/agents/start-update",
        Some(&t.token),
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_transition");
    let (s, e) = t.call("POST", "/v1/agents/mark-done", Some(&t.token), None);
    assert_eq!(s, 400, "{e}");
    assert_eq!(t.state_of("dev"), "done");

    // new-rollout without --current-version starts from the current target.
    let v = t.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(&json!({"version": "v1.2.0"}).to_string()),
    );
    assert_eq!(v["start_version"], "1.1.0");
    assert_eq!(v["target_version"], "1.2.0");
    let r = t.reconcile();
    assert_eq!(r["rollout"]["spec"]["start_version"], "1.1.0");
    assert_eq!(r["rollout"]["status"]["groups"][0]["state"], "unstarted");
    let v = t.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(&json!({"version": "1.2.0", "current_version": "1.1.0"}).to_string()),
    );
    assert_eq!(v["changed"], false);
}

#[test]
fn immediate_schedule_updates_everyone() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.5.0", "immediate"));
    let r = t.reconcile();
    assert_eq!(r["rollout"]["spec"]["schedule"], "immediate", "{r}");
    assert!(
        r["rollout"]["status"]["groups"]
            .as_array()
            .is_none_or(|g| g.is_empty())
    );
    for g in ["dev", "prod", "", "unknown"] {
        assert_eq!(t.find(g, "h1"), ("1.5.0".into(), true), "group {g:?}");
    }
    // Under the dev clock no host waits a real-time jitter.
    let (_, v) = t.call("GET", "/v1/webapi/find?group=dev&updater_id=h1", None, None);
    assert_eq!(v["auto_update"]["agent_update_jitter_seconds"], 0, "{v}");
    // Manual transitions do not apply.
    let (s, e) = t.call(
        "POST",
        "/v1/agents/start-update",
        Some(&t.token),
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    assert_eq!(s, 400, "{e}");
    // Suspended: nobody updates.
    t.op("POST", "/v1/agents/suspend", None);
    assert!(!t.find("dev", "h1").1);
}

const TIME_BASED: &str = r#"kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 2h
    schedules:
      regular:
        - name: us-east
          days: ["*"]
          start_hour: 10
        - name: europe
          days: ["*"]
          start_hour: 16
"#;

#[test]
fn time_based_groups_follow_their_windows() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", TIME_BASED);
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    assert_eq!(t.state_of("us-east"), "unstarted");

    // 10:30: us-east's window is open; europe's is not (independent groups).
    t.set_clock("2026-11-23T10:30:00Z");
    t.reconcile();
    assert_eq!(t.state_of("us-east"), "active");
    assert_eq!(t.state_of("europe"), "unstarted");
    assert_eq!(t.find("us-east", "a"), ("1.1.0".into(), true));
    assert_eq!(t.find("europe", "b"), ("1.0.0".into(), false));
    let st = t.op("GET", "/v1/agents/status", None);
    assert!(st["groups"][0]["window_closes"].is_string(), "{st}");
    assert!(st["groups"][1]["next_window"].is_string(), "{st}");

    // 12:30: us-east's window closed: done, no more updates there.
    t.set_clock("2026-11-23T12:30:00Z");
    t.reconcile();
    assert_eq!(t.state_of("us-east"), "done");
    assert_eq!(t.find("us-east", "a"), ("1.1.0".into(), false));

    // 16:10: europe's turn.
    t.set_clock("2026-11-23T16:10:00Z");
    t.reconcile();
    assert_eq!(t.state_of("europe"), "active");
    assert_eq!(t.find("europe", "b"), ("1.1.0".into(), true));

    // Manual transitions apply to time-based groups too: rollback returns europe to
    // 1.0.0 and holds it there; start-update opens it again now, for one window length.
    let v = t.op(
        "POST",
        "/v1/agents/rollback",
        Some(&json!({"groups": ["europe"]}).to_string()),
    );
    assert_eq!(v["groups"][0]["to"], "rolledback", "{v}");
    t.reconcile();
    assert_eq!(t.state_of("europe"), "rolledback");
    assert_eq!(t.find("europe", "b"), ("1.0.0".into(), true));
    t.set_clock("2026-11-23T19:00:00Z");
    let v = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(&json!({"groups": ["europe"]}).to_string()),
    );
    assert_eq!(v["groups"][0]["to"], "active", "{v}");
    t.reconcile();
    assert_eq!(
        t.state_of("europe"),
        "active",
        "outside its window, opened by hand"
    );
    assert_eq!(t.find("europe", "b"), ("1.1.0".into(), true));
}

#[test]
fn restart_mid_rollout_keeps_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::dev(&dir);
    assert!(
        t.stdout.iter().any(|l| l.contains(&t.token)),
        "the first start prints the operator token"
    );
    let agent = t.new_token("agent");
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    let before = t.op("GET", "/v1/resources/rollout", None);
    let token = t.token.clone();
    t.stop();

    // Same data dir, later in the day.
    let t = Ternd::start(&dir, &["--dev-clock", "2026-11-23T10:30:00Z"]);
    assert!(
        !t.stdout.iter().any(|l| l.contains(&token)),
        "the operator token is printed only once"
    );
    assert_eq!(t.token, token);
    let after = t.op("GET", "/v1/resources/rollout", None);
    assert_eq!(before, after, "the rollout survives the restart untouched");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    // The agent token survives too; the inventory is rebuilt from heartbeats.
    t.heartbeat(&agent, "d1", "dev", "1.1.0");
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["state"], "active",
        "a host heard for less than a report period does not count yet"
    );
    t.advance("2m");
    t.heartbeat(&agent, "d1", "dev", "1.1.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "done");
}

/// Alerts are state: a failed canary raises `canary_failed`, kept in the status, shown
/// by the metric and sent to the webhook; it clears (and the webhook hears so) when the
/// canary runs the target healthy.
#[test]
fn a_failed_canary_raises_an_alert_kept_until_it_clears() {
    let (url, notices) = common::receiver();
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--notify-webhook", &url],
    );
    let agent = t.new_token("agent");
    let (canary, _) = dev_in_canary(&t, &agent, &["c1", "c2"], "1.0.0", "2.0.0");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"], json!([]), "{st}");

    t.heartbeat_with(
        &agent,
        &canary,
        "dev",
        "1.0.0",
        json!({"rollback": true, "failed_version": "2.0.0"}),
    );
    t.advance("1m");
    t.reconcile();
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["kind"], "canary_failed", "{st}");
    assert_eq!(st["alerts"][0]["group"], "dev");
    let since = st["alerts"][0]["since"].clone();
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("tern_alerts_active{kind=\"canary_failed\"} 1"),
        "{metrics}"
    );
    let n = notices
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("raised"), Some("canary_failed")),
        "{n}"
    );
    assert_eq!(n["rollout"]["target_version"], "2.0.0");

    // Still failing a minute later: the same alert, the same since, no new notice.
    t.advance("1m");
    t.reconcile();
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["since"], since);

    // The canary runs the target healthy: its failure is final, the alert stays.
    t.heartbeat(&agent, &canary, "dev", "2.0.0");
    t.advance("1m");
    t.reconcile();
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["kind"], "canary_failed", "{st}");
    // The operator resets the group: new canaries, healthy on the target: cleared.
    t.op(
        "POST",
        "/v1/agents/reset",
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    t.advance("1m");
    for id in ["c1", "c2"] {
        t.heartbeat(&agent, id, "dev", "2.0.0");
    }
    t.reconcile();
    t.advance("1m");
    t.reconcile();
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"], json!([]), "{st}");
    let n = notices
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("cleared"), Some("canary_failed")),
        "{n}"
    );
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("tern_alerts_active{kind=\"canary_failed\"} 0"),
        "{metrics}"
    );
}

/// The tester's run on a real ternd: the hosts go silent (their token was revoked)
/// and are forgotten; a later start-update must not skip the canaries for want of
/// candidates. (The dev clock drives expiry: ten silent minutes forget them.)
#[test]
fn hosts_that_vanish_do_not_remove_the_canary_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "2.0.0", "regular"));
    let beat = || {
        for id in ["c1", "c2", "c3"] {
            t.heartbeat(&agent, id, "dev", "1.0.0");
        }
    };
    beat();
    t.reconcile();
    t.advance("2m");
    beat();
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["present_count"], 3,
        "{r}"
    );
    // Silence: every host is forgotten.
    t.advance("10m");
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["present_count"], 0,
        "{r}"
    );
    let v = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(&json!({"groups": ["dev"]}).to_string()),
    );
    assert_eq!(v["groups"][0]["to"], "canary", "{v}");
    t.advance("1m");
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "canary", "{r}");
    assert_eq!(dev["last_update_reason"], "agents_vanished", "{r}");
    // A host still polling find is not told to update: there is no canary.
    assert_eq!(t.find("dev", "c1"), ("1.0.0".into(), false));
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["kind"], "agents_vanished", "{st}");
}

/// A restart is not a vanished fleet: right after ternd restarts its report has seen
/// none of the hosts yet, and no alert is raised from that (before, `agents_vanished`
/// fired and paged at once). Once it has warmed up, hosts that really are gone raise
/// it as before.
#[test]
fn a_restart_raises_no_alert_before_the_hosts_are_observed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut t = Ternd::dev(&data);
    let agent = t.new_token("agent");
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "2.0.0", "regular"));
    let beat = |t: &Ternd| {
        for id in ["c1", "c2", "c3"] {
            t.heartbeat(&agent, id, "dev", "1.0.0");
        }
    };
    beat(&t);
    t.reconcile();
    t.advance("2m");
    beat(&t);
    t.reconcile();
    let v = t.op(
        "POST",
        "/v1/agents/start-update",
        Some(&json!({"groups": ["dev"], "force": true}).to_string()),
    );
    assert_eq!(v["groups"][0]["to"], "active", "{v}");
    t.advance("1m");
    beat(&t);
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["peak_count"], 3, "{r}");
    let now = t.advance("0s");

    t.stop();
    let t = Ternd::start(&data, &["--dev-clock", &now]);
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "active", "{r}");
    assert_eq!(dev["last_update_reason"], "waiting_for_reports", "{r}");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(
        st["alerts"],
        json!([]),
        "no alert from unobserved hosts: {st}"
    );

    // Warmed up (a heartbeat interval and a report period later), nobody came back.
    t.advance("5m");
    t.reconcile();
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(st["alerts"][0]["kind"], "agents_vanished", "{st}");
}

/// A group that waits for canaries says why and until when: its only host is known
/// since 09:55, so with the default 10-minute canary tenure it becomes a candidate at
/// 10:05; the status shows "0 eligible canaries; host-a eligible at 10:05" (ternctl
/// renders `canary_wait`). At 10:05 it is picked.
#[test]
fn a_group_waiting_for_canaries_says_when_a_host_becomes_eligible() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "2.0.0", "regular"));
    t.set_clock("2026-11-23T09:55:00Z");
    let beat = || t.heartbeat_with(&agent, "a1", "dev", "1.0.0", json!({"hostname": "host-a"}));
    beat();
    for _ in 0..5 {
        t.advance("1m");
        beat();
        t.reconcile();
    }
    let st = t.op("GET", "/v1/agents/status", None);
    let dev = &st["groups"][0];
    assert_eq!(dev["state"], "canary", "{st}");
    assert_eq!(dev["last_update_reason"], "waiting_for_canaries", "{st}");
    assert_eq!(dev["eligible_canaries"], 0, "{st}");
    assert_eq!(dev["canary_eligible"]["hostname"], "host-a", "{st}");
    assert_eq!(dev["canary_eligible"]["at"], "2026-11-23T10:05:00Z", "{st}");
    // In words, as ternctl prints it and the dashboard shows it.
    assert!(
        dev["canary_wait"]
            .as_str()
            .unwrap()
            .starts_with("0 eligible canaries; host-a eligible at 10:05 UTC"),
        "{st}"
    );
    // The host page's forecast says the same for the host itself.
    let host = t.op("GET", "/v1/inventory/a1", None);
    let summary = host["forecast"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("waits for canary candidates (none picked yet)")
            && summary.contains("this host may be picked from 2026-11-23 10:05 UTC"),
        "{host}"
    );
    // 10:05: a candidate now, picked.
    for _ in 0..5 {
        t.advance("1m");
        beat();
        t.reconcile();
    }
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["canaries"][0]["updater_id"], "a1", "{r}");
    let st = t.op("GET", "/v1/agents/status", None);
    assert!(st["groups"][0].get("canary_eligible").is_none(), "{st}");
}

/// Host typos are not silent: a heartbeat presenting a group the rollout lacks is told
/// so (with the catch-all serving it), inventory and report flag it, and a metric
/// counts such agents. An empty group is "no group", not a typo.
#[test]
fn an_unknown_group_is_flagged_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "2.0.0", "regular"));
    t.reconcile();
    let beat = |id: &str, group: &str| {
        let body = json!({"updater_id": id, "host_id": format!("h-{id}"), "group": group, "version": "1.0.0"});
        let (s, v) = t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        );
        assert_eq!(s, 200, "{v}");
        v
    };
    let v = beat("u1", "prdo");
    assert_eq!(v["unknown_group"]["group"], "prdo", "{v}");
    assert_eq!(v["unknown_group"]["served_by"], "prod");
    assert_eq!(v["unknown_group"]["groups"], json!(["dev", "prod"]));
    assert!(beat("u2", "dev").get("unknown_group").is_none());
    assert!(
        beat("u3", "").get("unknown_group").is_none(),
        "no group is not a typo"
    );

    let inv = t.op("GET", "/v1/inventory", None);
    assert_eq!(inv["unknown_groups"], json!({"prdo": "prod"}), "{inv}");
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(metrics.contains("tern_agents_unknown_group 1"), "{metrics}");
    t.advance("2m");
    for (id, g) in [("u1", "prdo"), ("u2", "dev"), ("u3", "")] {
        beat(id, g);
    }
    t.reconcile();
    let report = t.op("GET", "/v1/agents/report", None);
    assert_eq!(
        report["unknown_groups"],
        json!({"prdo": "prod"}),
        "{report}"
    );
}

/// `--dev-clock` drives inventory expiry too: advancing it past the silence limit
/// (three heartbeat intervals) forgets hosts that did not heartbeat meanwhile, and a
/// host heard again before the sweep keeps its first_seen.
#[test]
fn the_dev_clock_forgets_silent_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let agent = t.new_token("agent");
    for id in ["quiet", "chatty"] {
        t.heartbeat(&agent, id, "dev", "1.0.0");
    }
    let first = t.op("GET", "/v1/inventory", None);
    assert_eq!(first["agents"].as_array().unwrap().len(), 2);
    // 2 minutes: within the limit (3 × 60 s), nobody is forgotten.
    t.advance("2m");
    let inv = t.op("GET", "/v1/inventory", None);
    assert_eq!(inv["agents"].as_array().unwrap().len(), 2, "{inv}");
    // 10 minutes: only the host that heartbeated after the jump is left, and it keeps
    // its first_seen (heard again before the sweep).
    t.advance("8m");
    t.heartbeat(&agent, "chatty", "dev", "1.0.0");
    let inv = t.op("GET", "/v1/inventory", None);
    let agents = inv["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1, "{inv}");
    assert_eq!(agents[0]["updater_id"], "chatty");
    assert_eq!(agents[0]["first_seen"], first["agents"][0]["first_seen"]);
}

/// `mode: disabled` written while dev is active: find tells the host not to update, the
/// host page's forecast says the fleet is stopped with find's hold, and neither moves
/// through a heartbeat and a reconcile; enabled again, both say update now. The
/// forecast asks the same one answer as find, so the two cannot disagree here.
#[test]
fn mode_disabled_holds_find_and_the_forecast_alike() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::in_devs_window(dir.path());
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    let host = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(host["forecast"]["outlook"], "now", "{host}");

    let disabled = three_groups().replace("mode: enabled", "mode: disabled");
    assert_ne!(disabled, three_groups());
    t.put_resource("config", &disabled);
    for _ in 0..2 {
        let (version, update) = t.find("dev", "d1");
        assert!(!update && version != "1.1.0", "find: {version} {update}");
        let host = t.op("GET", "/v1/inventory/d1", None);
        let forecast = &host["forecast"];
        assert_eq!(forecast["outlook"], "stopped", "{host}");
        assert_eq!(forecast["hold"], "mode_disabled", "{host}");
        assert_eq!(forecast["find_update"], false, "{host}");
        assert_eq!(forecast["find_version"], version.as_str(), "{host}");
        t.advance("5m");
        t.heartbeat(&agent, "d1", "dev", "1.0.0");
        t.reconcile();
    }

    t.put_resource("config", &three_groups());
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    let host = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(host["forecast"]["outlook"], "now", "{host}");
}
