//! The global kill switch over HTTP on a real ternd: a writer freezes, every find
//! answer says "do not update" at once, channels give no version, the rollout holds
//! through a window that would start it, and only an operator lifts it; each step is in
//! the audit trail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, three_groups, version_yaml};
use serde_json::json;

#[test]
fn a_freeze_stops_every_update_until_an_operator_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.op(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version": "1.1.0", "critical": true}"#),
    );
    t.reconcile();
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    assert_eq!(t.state_of("dev"), "unstarted");
    let user = t.new_token("user");
    let viewer = t.new_token("viewer");
    let user_id = user.split('_').nth(1).unwrap().to_string();

    // Who may freeze, and what a freeze needs.
    let freeze = |token: &str, body: &str| t.call("PUT", "/v1/freeze", Some(token), Some(body));
    assert_eq!(freeze(&viewer, r#"{"reason": "x"}"#).0, 403);
    let (s, v) = freeze(&user, r#"{"reason": "  "}"#);
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("reason:")
    );
    let (s, v) = freeze(&user, r#"{"reason": "x", "until": "never"}"#);
    assert_eq!(s, 400, "unknown fields are refused: {v}");
    let (s, v) = freeze(&user, r#"{"reason": "incident 42: agents crash on start"}"#);
    assert_eq!((s, v["changed"].clone()), (200, json!(true)), "{v}");
    assert_eq!(v["freeze"]["by"], user_id);
    assert_eq!(v["freeze"]["since"], "2026-11-23T09:00:00Z");

    // 10:05, dev's window: without the freeze dev goes active and d1 is told to update.
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "unstarted", "the rollout holds");
    assert!(!t.find("dev", "d1").1, "find says do not update");
    let (s, v) = t.call("GET", "/v1/channels/stable/version", None, None);
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["error"]["code"], "frozen");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("incident 42"),
        "{v}"
    );
    let status = t.op("GET", "/v1/agents/status", None);
    let modes = &status;
    assert_eq!(modes["mode"], "suspended", "{status}");
    assert_eq!(
        modes["frozen"]["reason"],
        "incident 42: agents crash on start"
    );
    assert!(
        modes["why_stopped"]
            .as_str()
            .unwrap()
            .starts_with("updates of every product are frozen since 2026-11-23T09:00:00Z"),
        "{modes}"
    );
    // Resuming the config does not lift it: only unfreeze does.
    t.op("POST", "/v1/agents/resume", None);
    t.reconcile();
    assert_eq!(t.state_of("dev"), "unstarted");
    assert!(!t.find("dev", "d1").1);

    // A new reason keeps the start and who froze.
    let (_, v) = freeze(&t.token, r#"{"reason": "incident 42, still"}"#);
    assert_eq!(v["freeze"]["by"], user_id, "{v}");
    assert_eq!(v["freeze"]["since"], "2026-11-23T09:00:00Z");

    // A user may freeze but not lift.
    assert_eq!(t.call("DELETE", "/v1/freeze", Some(&user), None).0, 403);
    let v = t.op("DELETE", "/v1/freeze", None);
    assert_eq!(v["changed"], true, "{v}");
    assert!(t.find("dev", "d1").0 == "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));
    let (s, _) = t.call("GET", "/v1/channels/stable/version", None, None);
    assert_eq!(s, 200);
    let v = t.op("DELETE", "/v1/freeze", None);
    assert_eq!(v["changed"], false, "lifting twice is no error: {v}");
    assert_eq!(t.op("GET", "/v1/freeze", None)["freeze"], json!(null));

    // The audit trail has each attempt, with who asked.
    let trail = t.op("GET", "/v1/audit", None);
    let rows: Vec<(String, String, u64)> = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"] == "/v1/freeze")
        .map(|r| {
            (
                r["role"].as_str().unwrap().to_string(),
                r["method"].as_str().unwrap().to_string(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    let row = |role: &str, method: &str, status| (role.to_string(), method.to_string(), status);
    for want in [
        row("viewer", "PUT", 403),
        row("user", "PUT", 400),
        row("user", "PUT", 200),
        row("operator", "PUT", 200),
        row("user", "DELETE", 403),
        row("operator", "DELETE", 200),
    ] {
        assert!(rows.contains(&want), "{want:?} not in {rows:?}");
    }
}
