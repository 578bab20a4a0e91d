//! Who may call each endpoint. The router sets every route's access level in one place
//! (`routes::router`); this test walks every route it serves
//! (`tern_server::route_table`), on a real ternd over HTTP, with no token and with a
//! token of each role, and checks the answer: 401 without a token, 403 for a role the
//! level excludes, neither otherwise. It also holds the table itself, so that a level
//! changed by accident is seen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Ternd;
use tern_server::{Access, AppState, DevClock, Role, RouteAccess, Settings, route_table};
use tern_store::MemoryStore;

/// The routes of a ternd started with `--dev-clock`.
fn served_routes() -> Vec<RouteAccess> {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        data_dir: dir.path().to_path_buf(),
        replica_id: "table".into(),
        report_period: jiff::SignedDuration::from_secs(60),
        active_report_period: None,
        report_after_change: None,
        heartbeat_interval: Duration::from_secs(60),
        find_rate: 0.0,
        find_burst: 1,
        heartbeat_rate: 0.0,
        heartbeat_burst: 1,
        leader_ttl: Duration::from_secs(60),
        edition: "community".into(),
        public_max_age: 5,
        max_agents: 1_000,
        max_shared_token_hosts: 10_000,
        store_contact_bound: std::time::Duration::from_secs(30),
        canary_tenure: jiff::SignedDuration::from_mins(10),
        directive_period: std::time::Duration::from_secs(10),
        release_trust: None,
        long_poll: Default::default(),
        prometheus: None,
        security: Default::default(),
        artifact_check: None,
    };
    let clock = Arc::new(DevClock::new("2026-11-23T10:00:00Z".parse().unwrap()));
    let state = AppState::new(Arc::new(MemoryStore::new()), clock, settings);
    route_table(&state)
}

#[test]
fn every_route_has_the_access_level_of_the_table() {
    use Access::*;
    let expected: &[(&str, &str, Access)] = &[
        ("GET", "/", Public),
        ("GET", "/dashboard/{file}", Public),
        ("GET", "/healthz", Public),
        ("GET", "/readyz", Public),
        ("GET", "/metrics", Public),
        ("GET", "/v1/webapi/find", Public),
        ("GET", "/webapi/find", Public),
        ("GET", "/webapi/ping", Public),
        ("GET", "/v1/webapi/ping", Public),
        (
            "GET",
            "/v1/webapi/automaticupgrades/channel/{*request}",
            Public,
        ),
        (
            "GET",
            "/webapi/automaticupgrades/channel/{*request}",
            Public,
        ),
        ("GET", "/v1/channels/{name}/{what}", Public),
        ("GET", "/v1/{name}/{what}", Public),
        ("GET", "/v1/agents/schedule", Public),
        ("GET", "/install.sh", Public),
        ("GET", "/downloads/tern-update/{file}", Public),
        ("POST", "/v1/agents/heartbeat", Agent),
        ("POST", "/v1/agents/join", Join),
        ("GET", "/v1/agents/status", Read),
        ("GET", "/v1/agents/report", Read),
        ("GET", "/v1/products", Read),
        ("GET", "/v1/agents/history", Read),
        ("POST", "/v1/agents/reset", Write),
        ("POST", "/v1/agents/start-update", Write),
        ("POST", "/v1/agents/mark-done", Write),
        ("POST", "/v1/agents/rollback", Write),
        ("POST", "/v1/agents/suspend", Write),
        ("POST", "/v1/agents/resume", Write),
        ("POST", "/v1/agents/new-rollout", Operator),
        ("POST", "/v1/agents/{action}", Write),
        ("GET", "/v1/freeze", Read),
        ("PUT", "/v1/freeze", Write),
        ("DELETE", "/v1/freeze", Operator),
        ("GET", "/v1/inventory", Read),
        ("GET", "/v1/inventory/{updater_id}", Read),
        ("DELETE", "/v1/inventory/{updater_id}", Operator),
        ("PUT", "/v1/inventory/{updater_id}/pin", Write),
        ("DELETE", "/v1/inventory/{updater_id}/pin", Write),
        ("GET", "/v1/pins", Read),
        ("GET", "/v1/whoami", Read),
        ("POST", "/v1/preview/{action}", Read),
        ("GET", "/v1/tokens", Operator),
        ("POST", "/v1/tokens", Operator),
        ("DELETE", "/v1/tokens/{id}", Operator),
        ("GET", "/v1/audit", Read),
        ("GET", "/v1/releases/signed", Read),
        ("GET", "/v1/channels", Read),
        ("PUT", "/v1/channels/{name}", Operator),
        ("DELETE", "/v1/channels/{name}", Operator),
        ("GET", "/v1/resources/{kind}", Read),
        ("GET", "/v1/dev/clock", Read),
        ("POST", "/v1/dev/clock", Operator),
        ("POST", "/v1/dev/reconcile", Operator),
        ("POST", "/v1/dev/directives", Operator),
        ("POST", "/v1/dev/controllers", Operator),
        ("GET", "/v1/directives", Read),
        ("GET", "/v1/directives/installers", Read),
        ("GET", "/v1/directives/installers/{name}", Read),
        ("PUT", "/v1/directives/installers/{name}", Operator),
        ("DELETE", "/v1/directives/installers/{name}", Operator),
        ("GET", "/v1/directives/config", Read),
        ("PUT", "/v1/directives/config", Operator),
        ("GET", "/v1/directives/active", Read),
        ("DELETE", "/v1/directives/active", Operator),
        ("GET", "/v1/directives/drafts/{name}", Read),
        ("PUT", "/v1/directives/drafts/{name}", Operator),
        ("DELETE", "/v1/directives/drafts/{name}", Operator),
        ("GET", "/v1/directives/plan", Read),
        ("POST", "/v1/directives/plan", Operator),
        ("DELETE", "/v1/directives/plan", Operator),
        ("POST", "/v1/directives/apply", Operator),
        ("POST", "/v1/directives/resume", Operator),
    ];
    let mut want: Vec<(String, String, Access)> = expected
        .iter()
        .map(|(m, p, a)| (m.to_string(), p.to_string(), *a))
        .collect();
    for (kinds, write) in [
        (&["config", "autoupdate_config"][..], Write),
        (&["version", "autoupdate_version"][..], Operator),
        (&["rollout", "autoupdate_agent_rollout"][..], Read),
        (
            &[
                "reports",
                "report",
                "autoupdate_agent_report",
                "autoupdate_agent_reports",
            ][..],
            Read,
        ),
    ] {
        for k in kinds {
            let path = format!("/v1/resources/{k}");
            want.push(("GET".into(), path.clone(), Read));
            for m in ["POST", "PUT", "DELETE"] {
                want.push((m.into(), path.clone(), write));
            }
        }
    }
    let mut got: Vec<(String, String, Access)> = served_routes()
        .into_iter()
        .map(|r| (r.method.to_string(), r.path.to_string(), r.access))
        .collect();
    want.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
    got.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
    assert_eq!(got, want);
}

#[test]
fn every_route_refuses_exactly_the_callers_its_level_excludes() {
    let dir = tempfile::tempdir().unwrap();
    let ternd = Ternd::dev(dir.path());
    let tokens: Vec<(Role, String)> = [Role::User, Role::Viewer, Role::Agent, Role::Join]
        .into_iter()
        .map(|r| (r, ternd.new_token(r.as_str())))
        .chain([(Role::Operator, ternd.token.clone())])
        .collect();
    let mut checked = 0;
    for route in served_routes() {
        let path = route
            .path
            .replace("{kind}", "nope")
            .replace("{name}", "stable")
            .replace("{what}", "version")
            .replace("{id}", "0123abcd")
            .replace("{updater_id}", "0123abcd")
            .replace("{action}", "undo");
        let method = route.method.as_str();
        let (status, body) = ternd.call(method, &path, None, None);
        if route.access == Access::Public {
            assert!(
                status != 401 && status != 403,
                "{method} {path} without a token: {status} {body}"
            );
        } else {
            assert_eq!(status, 401, "{method} {path} without a token: {body}");
        }
        for (role, token) in &tokens {
            let (status, body) = ternd.call(method, &path, Some(token), None);
            if route.access.allows(*role) {
                assert!(
                    status != 401 && status != 403,
                    "{method} {path} as {role}: {status} {body}"
                );
            } else {
                assert_eq!(status, 403, "{method} {path} as {role}: {body}");
            }
            checked += 1;
        }
    }
    assert!(checked > 150, "{checked} calls");
}

#[test]
fn an_unknown_transition_is_a_400_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ternd = Ternd::dev(dir.path());
    ternd.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(r#"{"version": "1.1.0", "current_version": "1.0.0"}"#),
    );
    ternd.reconcile();
    let before = ternd.call("GET", "/v1/agents/status", Some(&ternd.token), None);
    assert!(before.1["rollout"].is_object(), "{}", before.1);
    let (status, body) = ternd.call(
        "POST",
        "/v1/agents/roll-back",
        Some(&ternd.token),
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("the transitions are: start-update, mark-done, rollback"),
        "{body}"
    );
    let after = ternd.call("GET", "/v1/agents/status", Some(&ternd.token), None);
    assert_eq!(before.1["rollout"], after.1["rollout"]);
}

/// The heartbeat's rate limit and refusal count sit outside the token check, so a
/// heartbeat refused for its token counts as refused (as one refused for its body does).
#[test]
fn refused_heartbeats_are_counted_the_token_checks_refusals_included() {
    let dir = tempfile::tempdir().unwrap();
    let ternd = Ternd::dev(dir.path());
    let viewer = ternd.new_token("viewer");
    let agent = ternd.new_token("agent");
    assert_eq!(
        ternd
            .call("POST", "/v1/agents/heartbeat", None, Some("{}"))
            .0,
        401
    );
    assert_eq!(
        ternd
            .call("POST", "/v1/agents/heartbeat", Some(&viewer), Some("{}"))
            .0,
        403
    );
    assert_eq!(
        ternd
            .call(
                "POST",
                "/v1/agents/heartbeat",
                Some(&agent),
                Some("not json")
            )
            .0,
        400
    );
    let (_, _, metrics) = ternd.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("\ntern_heartbeats_rejected_total 3\n"),
        "{metrics}"
    );
}
