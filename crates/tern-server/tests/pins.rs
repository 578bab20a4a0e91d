//! Server-side pins over HTTP on a real ternd: a writer pins one host until a time,
//! find tells it (and only it) not to update, its forecast says until when, and at that
//! time it rejoins its group's rollout with no further write; the leader then removes
//! the lifted pin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Ternd;
use serde_json::json;

#[test]
fn a_pin_holds_one_host_until_the_leader_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::in_devs_window(dir.path());
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.heartbeat(&agent, "d2", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));

    let user = t.new_token("user");
    let viewer = t.new_token("viewer");
    let pin = |token: &str, id: &str, body: &str| {
        t.call(
            "PUT",
            &format!("/v1/inventory/{id}/pin"),
            Some(token),
            Some(body),
        )
    };
    assert_eq!(pin(&viewer, "d1", r#"{"until": "2026-12-01"}"#).0, 403);
    let (s, v) = pin(&user, "d1", r#"{"until": "2026-11-23T10:00:00Z"}"#);
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not in the future"),
        "{v}"
    );
    let (s, v) = pin(&user, "d1", r#"{"until": "soon"}"#);
    assert_eq!(s, 400, "{v}");
    let (s, v) = pin(&user, "d1", r#"{"until": "2026-12-01", "forever": true}"#);
    assert_eq!(s, 400, "unknown fields are refused: {v}");
    let (s, v) = pin(
        &user,
        "d1",
        r#"{"until": "2026-11-23T12:00:00Z", "reason": "customer demo"}"#,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["until"], "2026-11-23T12:00:00Z");
    assert_eq!(v["by"], user.split('_').nth(1).unwrap());

    // At once, d1 alone is held: told the last known-good version (what it would take
    // as a first install), never the target.
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), false));
    assert_eq!(t.find("dev", "d2"), ("1.1.0".into(), true));
    let host = t.op("GET", "/v1/inventory/d1", None);
    assert_eq!(host["forecast"]["outlook"], "pinned", "{host}");
    assert_eq!(host["forecast"]["pinned_until"], "2026-11-23T12:00:00Z");
    let pins = t.op("GET", "/v1/pins", None);
    assert_eq!(pins["pins"].as_array().unwrap().len(), 1, "{pins}");
    assert_eq!(pins["pins"][0]["reason"], "customer demo");

    // 12:00: its time has come; it holds until the leader lifts it (deletes it, by the
    // leader's clock), at its next reconcile: every replica answers alike.
    t.set_clock("2026-11-23T12:00:00Z");
    assert_eq!(t.find("dev", "d1"), ("1.0.0".into(), false));
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.heartbeat(&agent, "d2", "dev", "1.1.0");
    t.reconcile();
    assert_eq!(t.op("GET", "/v1/pins", None)["pins"], json!([]));
    assert_eq!(t.find("dev", "d1"), ("1.1.0".into(), true));

    // Unpinning by hand, and unpinning what is not pinned.
    pin(&user, "d2", r#"{"until": "2026-12-01"}"#);
    assert!(!t.find("dev", "d2").1);
    let (s, _) = t.call("DELETE", "/v1/inventory/d2/pin", Some(&user), None);
    assert_eq!(s, 200);
    assert!(t.find("dev", "d2").1);
    let (s, v) = t.call("DELETE", "/v1/inventory/d2/pin", Some(&user), None);
    assert_eq!(s, 404, "{v}");
}
