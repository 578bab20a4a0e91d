//! What the dashboard reads and shows, over HTTP on a real ternd: its page and files
//! (types, policy, caching), `GET /v1/whoami`, the planner's previews (which write
//! nothing), the inventory's filters and pages, and one host with its forecast.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, eventually, three_groups, version_yaml};
use serde_json::json;

#[test]
fn the_page_and_its_files_carry_types_policy_and_validators() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    let (s, h, body) = t.raw("GET", "/", None, None);
    assert_eq!(s, 200);
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-cache");
    assert!(body.contains("/dashboard/app.js"));
    for (file, ty) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("app.css", "text/css; charset=utf-8"),
    ] {
        let (s, h, _) = t.raw("GET", &format!("/dashboard/{file}"), None, None);
        assert_eq!((s, h["content-type"].to_str().unwrap()), (200, ty));
    }
    let (s, _, body) = t.raw("GET", "/dashboard/..%2FCargo.toml", None, None);
    assert_eq!(s, 404, "{body}");
    // Any other unknown path is still the API's JSON 404.
    let (s, v) = t.call("GET", "/nope", None, None);
    assert_eq!(s, 404);
    assert_eq!(v["error"]["code"], "not_found", "{v}");
}

#[test]
fn whoami_names_the_role_and_its_rights() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    let me = t.op("GET", "/v1/whoami", None);
    assert_eq!(
        (
            me["role"].clone(),
            me["write"].clone(),
            me["operator"].clone()
        ),
        (json!("operator"), json!(true), json!(true))
    );
    let viewer = t.new_token("viewer");
    let (s, v) = t.call("GET", "/v1/whoami", Some(&viewer), None);
    assert_eq!(s, 200);
    assert_eq!(
        (v["role"].clone(), v["read"].clone(), v["write"].clone()),
        (json!("viewer"), json!(true), json!(false))
    );
    assert_eq!(v["token_id"], viewer.split('_').nth(1).unwrap());
    let user = t.new_token("user");
    let v = t.call("GET", "/v1/whoami", Some(&user), None).1;
    assert_eq!(
        (v["write"].clone(), v["operator"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(t.call("GET", "/v1/whoami", None, None).0, 401);
}

#[test]
fn previews_tell_what_an_action_would_do_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::in_devs_window(dir.path());
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    let before = t.op("GET", "/v1/resources/rollout", None);

    let p = t.op(
        "POST",
        "/v1/preview/rollback",
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(
        p["groups"],
        json!([{"name": "dev", "from": "active", "to": "rolledback"}])
    );
    assert!(p["changes"].as_bool().unwrap());
    let p = t.op(
        "POST",
        "/v1/preview/start-update",
        Some(r#"{"groups": ["prod"], "force": true}"#),
    );
    assert_eq!(p["groups"][0]["name"], "prod", "{p}");
    // Refused as the action would be, with the same error.
    let (s, v) = t.call(
        "POST",
        "/v1/preview/rollback",
        Some(&t.token),
        Some(r#"{"groups": ["nope"]}"#),
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("unknown_group")),
        "{v}"
    );
    let (s, v) = t.call("POST", "/v1/preview/undo", Some(&t.token), Some("{}"));
    assert_eq!(s, 400, "{v}");

    let p = t.op("POST", "/v1/preview/suspend", Some("{}"));
    assert_eq!(p["modes"]["mode"], "suspended", "{p}");
    assert!(p["changes"].as_bool().unwrap());
    let p = t.op("POST", "/v1/preview/resume", Some("{}"));
    assert!(!p["changes"].as_bool().unwrap(), "already enabled: {p}");
    let p = t.op(
        "POST",
        "/v1/preview/new-rollout",
        Some(r#"{"version": "1.2.0"}"#),
    );
    assert_eq!(
        (p["start_version"].clone(), p["target_version"].clone()),
        (json!("1.1.0"), json!("1.2.0")),
        "{p}"
    );
    let (s, v) = t.call(
        "POST",
        "/v1/preview/new-rollout",
        Some(&t.token),
        Some(r#"{"version": "not-a-version"}"#),
    );
    assert_eq!(s, 400, "{v}");

    // A viewer may preview (it reads); nothing of it was written.
    let viewer = t.new_token("viewer");
    let (s, _) = t.call("POST", "/v1/preview/suspend", Some(&viewer), Some("{}"));
    assert_eq!(s, 200);
    assert_eq!(t.op("GET", "/v1/resources/rollout", None), before);
    assert_eq!(t.op("GET", "/v1/agents/status", None)["mode"], "enabled");
}

#[test]
fn the_inventory_filters_and_pages_without_losing_a_host() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let agent = t.new_token("agent");
    let mut ids = Vec::new();
    for i in 0..23 {
        let group = ["dev", "prod", "prdo"][i % 3];
        let version = if i % 2 == 0 { "1.1.0" } else { "1.0.0" };
        let id = format!("host-{i:02}");
        if i == 4 {
            t.heartbeat_with(&agent, &id, group, version, json!({"rollback": true}));
        } else {
            t.heartbeat(&agent, &id, group, version);
        }
        ids.push(id);
    }
    // Pages of 5 in order, every host once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/inventory?limit=5&cursor={c}"),
            None => "/v1/inventory?limit=5".to_string(),
        };
        let v = t.op("GET", &path, None);
        assert_eq!(v["matched"], 23);
        let page = v["agents"].as_array().unwrap();
        assert!(page.len() <= 5);
        seen.extend(page.iter().map(|a| {
            (
                a["group"].as_str().unwrap().to_string(),
                a["hostname"].as_str().unwrap().to_string(),
            )
        }));
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 23);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pages are in (group, hostname) order");

    let v = t.op("GET", "/v1/inventory?group=prod&version=1.1.0", None);
    assert!(
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["group"] == "prod" && a["version"] == "1.1.0")
    );
    assert_eq!(v["matched"], v["agents"].as_array().unwrap().len());
    let v = t.op("GET", "/v1/inventory?state=unknown-group", None);
    assert_eq!(v["matched"], 7, "{v}");
    assert_eq!(v["unknown_groups"], json!({"prdo": "prod"}));
    let v = t.op("GET", "/v1/inventory?state=failed", None);
    assert_eq!(v["agents"][0]["updater_id"], "host-04", "{v}");
    assert_eq!(v["matched"], 1);
    let v = t.op("GET", "/v1/inventory?state=up-to-date", None);
    assert_eq!(v["matched"], 12);
    // Without a limit, every host as before.
    assert_eq!(
        t.op("GET", "/v1/inventory", None)["agents"]
            .as_array()
            .unwrap()
            .len(),
        23
    );

    for (bad, names) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("cursor=zz", "cursor"),
        ("cursor=00", "cursor"),
        ("state=sleepy", "state"),
    ] {
        let (s, v) = t.call("GET", &format!("/v1/inventory?{bad}"), Some(&t.token), None);
        assert_eq!(s, 400, "{bad}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(names), "{bad}: {msg}");
    }
}

#[test]
fn a_host_and_when_it_will_update() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.heartbeat(&agent, "p1", "prod", "1.0.0");
    t.heartbeat(&agent, "x1", "prdo", "1.0.0");
    // 09:00: dev's window opens at 10:00.
    let v = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(v["agent"]["group"], "dev");
    assert_eq!(v["forecast"]["outlook"], "at_window", "{v}");
    assert_eq!(v["forecast"]["starts_at"], "2026-11-23T10:00:00Z");
    let v = t.op("GET", "/v1/inventory/p1", None);
    assert_eq!(v["forecast"]["outlook"], "after_earlier_groups");
    assert_eq!(v["forecast"]["waiting_for"], json!(["dev", "staging"]));
    let v = t.op("GET", "/v1/inventory/x1", None);
    assert_eq!(v["forecast"]["unknown_group"], true);
    assert_eq!(v["forecast"]["serving_group"], "prod");
    // Once dev is active, find tells d1 to update: so does the forecast (d1 heartbeats
    // again: a host silent for an hour of dev time is forgotten).
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    let v = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(v["forecast"]["outlook"], "now", "{v}");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    let (s, v) = t.call("GET", "/v1/inventory/nobody", Some(&t.token), None);
    assert_eq!(s, 404, "{v}");
}

fn history_kinds(v: &serde_json::Value) -> Vec<String> {
    v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

/// A host's history is kept in the store: it continues across a restart, a `kill -9`
/// with changes not yet written, and is written in the background without anyone
/// reading it.
#[test]
fn a_hosts_history_survives_restarts_and_is_written_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ternd");
    let mut t = Ternd::dev(&data);
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.1.0");
    t.set_clock("2026-11-23T10:10:00Z");
    let rolled_back = json!({"rollback": true, "failed_version": "1.1.0", "healthy": false});
    t.heartbeat_with(&agent, "d1", "dev", "1.0.0", rolled_back.clone());
    let v = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(
        history_kinds(&v),
        ["unhealthy", "rolled_back", "updated", "first_seen"],
        "{v}"
    );
    let first = v["replica"].clone();
    assert_eq!(
        v["history"][1]["message"],
        "rolled back from 1.1.0 to 1.0.0"
    );
    assert_eq!(v["history"][1]["time"], "2026-11-23T10:10:00Z");
    assert_eq!(v["history"][2]["message"], "version 1.0.0 → 1.1.0");
    assert_eq!(v["history"][2]["time"], "2026-11-23T10:05:00Z");
    assert_eq!(v["history"][3]["replica"], first);

    // Another host, never looked at: the background writer stores its history (d1's
    // three changes were one write, made when its page was read).
    let writes = |t: &Ternd| {
        let (_, _, m) = t.raw("GET", "/metrics", None, None);
        m.lines()
            .find_map(|l| l.strip_prefix("tern_host_history_writes_total "))
            .map(|n| n.trim().parse::<u64>().unwrap())
    };
    assert_eq!(writes(&t), Some(1));
    t.heartbeat(&agent, "d2", "dev", "1.0.0");
    eventually("d2's history is written", || writes(&t) == Some(2));
    // Two hosts are no burst (4,096 in one flush are): the heap is not trimmed.
    let (_, _, m) = t.raw("GET", "/metrics", None, None);
    assert!(m.lines().any(|l| l == "tern_heap_trims_total 0"), "{m}");

    // A restart: the host reports what is stored already, so nothing is added (the
    // new replica does not start the history again).
    t.stop();
    let mut t = Ternd::dev(&data);
    t.heartbeat_with(&agent, "d1", "dev", "1.0.0", rolled_back.clone());
    t.heartbeat(&agent, "d2", "dev", "1.0.0");
    let v = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(history_kinds(&v).len(), 4, "{v}");
    let v2 = t.op("GET", "/v1/inventory/d2", None);
    assert_eq!(history_kinds(&v2), ["first_seen"], "{v2}");

    // A change heard just before a kill -9 may not be written; the next heartbeat to the
    // restarted replica is compared with the stored state, so the change is kept.
    t.set_clock("2026-11-23T10:20:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.1.1");
    t.kill9();
    let t = Ternd::dev(&data);
    t.heartbeat(&agent, "d1", "dev", "1.1.1");
    let v = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(
        history_kinds(&v)[..2],
        ["healthy".to_string(), "updated".to_string()],
        "{v}"
    );
    assert_eq!(v["history"][1]["message"], "version 1.0.0 → 1.1.1");
    assert_eq!(v["history"].as_array().unwrap().len(), 6);
}
