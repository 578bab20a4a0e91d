//! Groups assigned by the server on a real ternd: a host that heartbeats labels and no
//! group is placed in the first group whose `match_labels` it holds, and find, the
//! report and its page all count it there; a host's own group wins under `override`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, version_yaml};
use serde_json::json;

const CONFIG: &str = "kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
        - name: dev
          days: ['*']
          start_hour: 10
          match_labels: {env: dev}
        - name: prod
          days: ['*']
          start_hour: 14
";

#[test]
fn hosts_are_placed_by_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    t.put_resource("config", CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let agent = t.new_token("agent");
    let beat = |id: &str, group: &str, labels: serde_json::Value| {
        t.heartbeat_with(&agent, id, group, "1.0.0", json!({ "labels": labels }));
    };
    beat("labelled", "", json!({"env": "dev", "zone": "a"}));
    beat("unlabelled", "", json!({}));
    beat("own-group", "prod", json!({"env": "dev"}));
    // The answer tells a placed host where it counts; not one that keeps its group.
    let answer = |id: &str, group: &str, labels: serde_json::Value| {
        let body = json!({"updater_id": id, "host_id": format!("host-{id}"), "group": group,
            "version": "1.0.0", "labels": labels});
        let (s, v) = t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        );
        assert_eq!(s, 200, "{v}");
        v
    };
    assert_eq!(
        answer("labelled", "", json!({"env": "dev", "zone": "a"}))["placed_group"],
        "dev"
    );
    assert!(
        answer("own-group", "prod", json!({"env": "dev"}))
            .get("placed_group")
            .is_none()
    );
    let group_of =
        |id: &str| t.op("GET", &format!("/v1/inventory/{id}"), None)["agent"]["group"].clone();
    assert_eq!(group_of("labelled"), "dev");
    assert_eq!(group_of("unlabelled"), "");
    assert_eq!(
        group_of("own-group"),
        "prod",
        "its own known group wins by default"
    );

    // 10:05, dev's window: the labelled host is told to update although it asks find
    // with no group; the others wait for prod (the catch-all).
    t.set_clock("2026-11-23T10:05:00Z");
    beat("labelled", "", json!({"env": "dev", "zone": "a"}));
    beat("unlabelled", "", json!({}));
    beat("own-group", "prod", json!({"env": "dev"}));
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(t.find("", "labelled"), ("1.1.0".into(), true));
    assert!(!t.find("", "unlabelled").1);
    assert!(!t.find("prod", "own-group").1);
    let status = t.op("GET", "/v1/agents/status", None);
    let present = |g: &str| {
        status["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == g)
            .unwrap()["present"]
            .clone()
    };
    assert_eq!(
        (present("dev"), present("prod")),
        (json!(1), json!(2)),
        "{status}"
    );
    let v = t.op("GET", "/v1/inventory/labelled", None);
    assert_eq!(v["forecast"]["serving_group"], "dev", "{v}");
    assert!(
        v["history"][0]["message"]
            .as_str()
            .unwrap()
            .contains("group dev"),
        "{v}"
    );
}

/// find answers a host placed by its labels the same right after a restart (or on a
/// replica it never heartbeated to): from the labels it sends with find, not from one
/// replica's memory of its heartbeats. An updater that sends none is placed as its last
/// heartbeat here placed it (and, before any, by the group it presents).
#[test]
fn find_places_a_host_by_the_labels_it_sends_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut t = Ternd::dev(&data);
    t.put_resource("config", CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let agent = t.new_token("agent");
    // A host that presents no group; its labels place it in dev.
    t.heartbeat_with(&agent, "d1", "", "1.0.0", json!({"labels": {"env": "dev"}}));
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat_with(&agent, "d1", "", "1.0.0", json!({"labels": {"env": "dev"}}));
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    let find = |t: &Ternd, query: &str| {
        let (s, v) = t.call("GET", &format!("/v1/webapi/find?{query}"), None, None);
        assert_eq!(s, 200, "{v}");
        (
            v["auto_update"]["agent_auto_update"].as_bool().unwrap(),
            v["auto_update"]["agent_hold"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    let with_facts = "group=&updater_id=d1&version=1.0.0&label=env%3Ddev";
    let without = "group=&updater_id=d1";
    assert_eq!(find(&t, with_facts), (true, String::new()));
    assert_eq!(
        find(&t, without),
        (true, String::new()),
        "by its heartbeats here"
    );

    // Restarted: nothing in memory. With its labels the host is still placed in dev.
    t.kill9();
    let token = t.token.clone();
    let mut t = Ternd::dev(&data);
    t.token = token;
    assert_eq!(find(&t, with_facts), (true, String::new()));
    // Without facts and before its first heartbeat: the catch-all (prod), not dev.
    assert_eq!(find(&t, without), (false, "group_not_started".into()));
    // Facts past their bounds are not taken: a label key that is not one.
    let bad = "group=&updater_id=d1&version=1.0.0&label=%20bad%20key%3Ddev";
    assert_eq!(find(&t, bad), (false, "group_not_started".into()));
}
