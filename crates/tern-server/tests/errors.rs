//! Auth matrix, bad input, rate limits and startup refusals, against the real ternd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{Ternd, enabled_version, ternd_bin, three_groups, version_yaml};
use serde_json::json;

#[test]
fn auth_matrix() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let op = t.token.clone();
    let user = t.new_token("user");
    let viewer = t.new_token("viewer");
    let agent = t.new_token("agent");
    let bad = "tern_0123456789ab_00000000000000000000000000000000";
    let heartbeat = json!({"updater_id": "u1", "group": "dev", "version": "1.0.0"}).to_string();
    let config = three_groups().to_string();
    let version = version_yaml("1.0.0", "1.2.0", "regular");
    let start = json!({"groups": ["dev"], "force": true}).to_string();
    // (method, path, body, expected for operator, user, viewer, agent)
    let cases: Vec<(&str, &str, Option<&str>, [u16; 4])> = vec![
        // read
        ("GET", "/v1/resources/config", None, [200, 200, 200, 403]),
        ("GET", "/v1/resources/rollout", None, [200, 200, 200, 403]),
        ("GET", "/v1/agents/status", None, [200, 200, 200, 403]),
        ("GET", "/v1/agents/report", None, [200, 200, 200, 403]),
        ("GET", "/v1/inventory", None, [200, 200, 200, 403]),
        // write: config, modes, transitions
        (
            "POST",
            "/v1/resources/config?force=true",
            Some(&config),
            [200, 200, 403, 403],
        ),
        ("POST", "/v1/agents/suspend", None, [200, 200, 403, 403]),
        ("POST", "/v1/agents/resume", None, [200, 200, 403, 403]),
        (
            "POST",
            "/v1/agents/start-update",
            Some(&start),
            [200, 400, 403, 403],
        ),
        // operator only: the version, new-rollout, tokens, channels, dev clock
        (
            "POST",
            "/v1/resources/version?force=true",
            Some(&version),
            [200, 403, 403, 403],
        ),
        (
            "POST",
            "/v1/agents/new-rollout",
            Some(r#"{"version":"1.3.0"}"#),
            [200, 403, 403, 403],
        ),
        (
            "POST",
            "/v1/tokens",
            Some(r#"{"role":"viewer"}"#),
            [201, 403, 403, 403],
        ),
        ("GET", "/v1/tokens", None, [200, 403, 403, 403]),
        (
            "PUT",
            "/v1/channels/stable",
            Some(r#"{"version":"1.2.3"}"#),
            [200, 403, 403, 403],
        ),
        (
            "POST",
            "/v1/dev/clock",
            Some(r#"{"advance":"1s"}"#),
            [200, 403, 403, 403],
        ),
        ("POST", "/v1/dev/reconcile", None, [200, 403, 403, 403]),
        // heartbeats: agents (and the operator)
        (
            "POST",
            "/v1/agents/heartbeat",
            Some(&heartbeat),
            [200, 403, 403, 200],
        ),
    ];
    for (method, path, body, want) in &cases {
        for (token, expected) in [&op, &user, &viewer, &agent].iter().zip(want) {
            let (s, v) = t.call(method, path, Some(token), *body);
            assert_eq!(
                s,
                *expected,
                "{method} {path} with a {} token: {v}",
                ["operator", "user", "viewer", "agent"]
                    [want.iter().position(|w| std::ptr::eq(w, expected)).unwrap()]
            );
            if s >= 400 {
                assert!(v["error"]["code"].is_string(), "JSON error body: {v}");
                assert!(v["error"]["message"].is_string());
            }
        }
        // No token and a bad token: 401, always.
        for token in [None, Some(bad), Some("garbage")] {
            let (s, v) = t.call(method, path, token, *body);
            assert_eq!(s, 401, "{method} {path} with {token:?}: {v}");
            assert_eq!(v["error"]["code"], "unauthenticated");
        }
    }
    // The start-update the user got a 400 for: the group was already active.
    // Public endpoints need nothing.
    assert_eq!(
        t.call("GET", "/v1/webapi/find?group=dev", None, None).0,
        200
    );
    assert_eq!(
        t.call("GET", "/v1/channels/stable/version", None, None).0,
        200
    );
    assert_eq!(t.call("GET", "/healthz", None, None).0, 200);
    assert_eq!(t.call("GET", "/readyz", None, None).0, 200);
    assert_eq!(t.call("GET", "/metrics", None, None).0, 200);

    // A revoked token stops working.
    let v = t.op("POST", "/v1/tokens", Some(r#"{"role":"viewer"}"#));
    let (id, tok) = (v["id"].as_str().unwrap(), v["token"].as_str().unwrap());
    assert_eq!(t.call("GET", "/v1/agents/status", Some(tok), None).0, 200);
    t.op("DELETE", &format!("/v1/tokens/{id}"), None);
    assert_eq!(t.call("GET", "/v1/agents/status", Some(tok), None).0, 401);
    // Tokens are stored hashed: the list never shows them.
    let list = t.op("GET", "/v1/tokens", None).to_string();
    assert!(!list.contains(&user) && !list.contains(&op));
}

#[test]
fn bad_inputs_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let op = Some(t.token.as_str());

    // Malformed YAML.
    let (s, v) = t.call(
        "POST",
        "/v1/resources/config",
        op,
        Some("kind: [unclosed\n"),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_resource");
    assert_eq!(
        t.call("GET", "/v1/resources/config", op, None).0,
        404,
        "nothing stored"
    );

    // An invalid field: the error names it.
    let bad = three_groups().replace("start_hour: 12", "start_hour: 25");
    let (s, v) = t.call("POST", "/v1/resources/config", op, Some(&bad));
    assert_eq!(s, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("start_hour") && msg.contains("25"), "{msg}");
    assert_eq!(t.call("GET", "/v1/resources/config", op, None).0, 404);

    // An unknown field is a typo, not ignored.
    let typo = three_groups().replace("start_hour: 12", "start_houre: 12");
    let (s, v) = t.call("POST", "/v1/resources/config", op, Some(&typo));
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("start_houre")
    );

    // A bad version.
    let (s, v) = t.call(
        "POST",
        "/v1/resources/version",
        op,
        Some(&version_yaml("1.0.0", "one.two", "regular")),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("target_version"),
        "{v}"
    );
    let (s, v) = t.call(
        "POST",
        "/v1/agents/new-rollout",
        op,
        Some(r#"{"version":"nope"}"#),
    );
    assert_eq!(s, 400, "{v}");

    // Create, then a second create conflicts; a stale revision conflicts.
    let (s, created) = t.call("POST", "/v1/resources/config", op, Some(&three_groups()));
    assert_eq!(s, 201, "{created}");
    let rev = created["metadata"]["revision"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v) = t.call("POST", "/v1/resources/config", op, Some(&three_groups()));
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "already_exists");
    let with_rev = |r: &str| {
        three_groups().replace(
            "  name: autoupdate-config\n",
            &format!("  name: autoupdate-config\n  revision: \"{r}\"\n"),
        )
    };
    let (s, v) = t.call("PUT", "/v1/resources/config", op, Some(&with_rev(&rev)));
    assert_eq!(s, 200, "{v}");
    let (s, v) = t.call("PUT", "/v1/resources/config", op, Some(&with_rev(&rev)));
    assert_eq!(s, 409, "stale revision: {v}");
    assert_eq!(v["error"]["code"], "conflict");
    let (s, v) = t.call("PUT", "/v1/resources/config", op, Some(&three_groups()));
    assert_eq!(s, 400, "an update without a revision: {v}");
    let (s, _) = t.call(
        "DELETE",
        &format!("/v1/resources/config?revision={rev}"),
        op,
        None,
    );
    assert_eq!(s, 409, "stale delete");

    // The rollout and reports are written only by ternd.
    let (s, v) = t.call("POST", "/v1/resources/rollout", op, Some("kind: x"));
    assert_eq!(s, 405, "{v}");
    assert_eq!(t.call("GET", "/v1/resources/widgets", op, None).0, 404);

    // Unknown group; no rollout yet.
    let start = json!({"groups": ["nope"]}).to_string();
    let (s, v) = t.call("POST", "/v1/agents/start-update", op, Some(&start));
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], "no_rollout");
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let (s, v) = t.call("POST", "/v1/agents/start-update", op, Some(&start));
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], "unknown_group");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dev, staging, prod")
    );
    let (s, v) = t.call("POST", "/v1/agents/start-update", op, Some("{not json"));
    assert_eq!(s, 400, "{v}");
    assert!(t.group_states().iter().all(|(_, s)| s == "unstarted"));

    // Bad heartbeats.
    let agent = t.new_token("agent");
    let a = Some(agent.as_str());
    let (s, v) = t.call("POST", "/v1/agents/heartbeat", a, Some("{"));
    assert_eq!(s, 400, "{v}");
    let (s, v) = t.call(
        "POST",
        "/v1/agents/heartbeat",
        a,
        Some(r#"{"version":"1.0.0"}"#),
    );
    assert_eq!(s, 400, "no id: {v}");
    let huge = json!({"updater_id": "x".repeat(100_000), "version": "1"}).to_string();
    let (s, _) = t.call("POST", "/v1/agents/heartbeat", a, Some(&huge));
    assert_eq!(s, 413, "body too large");
    // Unknown fields are ignored (newer updaters keep working).
    let (s, v) = t.call(
        "POST",
        "/v1/agents/heartbeat",
        a,
        Some(r#"{"updater_id":"u1","version":"1.0.0","from_the_future":true}"#),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["next_heartbeat_seconds"], 60);

    // Bad dev clock input.
    let (s, _) = t.call("POST", "/v1/dev/clock", op, Some(r#"{"advance":"soon"}"#));
    assert_eq!(s, 400);
    let (s, _) = t.call("POST", "/v1/dev/clock", op, Some(r#"{"set":"yesterday"}"#));
    assert_eq!(s, 400);
}

#[test]
fn heartbeat_flood_does_not_starve_find() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--heartbeat-rate",
            "1",
            "--heartbeat-burst",
            "5",
            "--find-rate",
            "1",
            "--find-burst",
            "20",
        ],
    );
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "immediate"));
    t.reconcile();
    let agent = t.new_token("agent");
    let hb = json!({"updater_id": "u1", "version": "1.0.0"}).to_string();
    let mut limited = 0;
    for _ in 0..30 {
        let (s, _, _) = t.raw("POST", "/v1/agents/heartbeat", Some(&agent), Some(&hb));
        if s == 429 {
            limited += 1;
        }
    }
    assert!(limited >= 20, "the flood is limited ({limited} refused)");
    // find still answers: it has its own bucket.
    for _ in 0..10 {
        assert_eq!(t.find("dev", "u2"), ("1.1.0".into(), true));
    }
    let (s, headers, body) = t.raw("GET", "/v1/webapi/find?group=dev", None, None);
    assert_eq!(s, 200);
    assert_eq!(
        headers.get("cache-control").unwrap().to_str().unwrap(),
        "public, max-age=5"
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["fips"], false);
    assert!(v["server_version"].is_string());
    // find itself is limited per address, with a clear 429.
    let mut last = (0, String::new());
    for _ in 0..30 {
        let (s, h, b) = t.raw("GET", "/v1/webapi/find?group=dev", None, None);
        if s == 429 {
            assert!(h.get("retry-after").is_some());
            last = (s, b);
            break;
        }
    }
    assert_eq!(last.0, 429);
    let v: serde_json::Value = serde_json::from_str(&last.1).unwrap();
    assert_eq!(v["error"]["code"], "rate_limited");
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(
        metrics.contains("tern_heartbeats_rate_limited_total"),
        "{metrics}"
    );
    assert!(!metrics.contains("tern_heartbeats_rate_limited_total 0\n"));
}

/// The per-address rate comes before the token: a flood with a token that is not one
/// is turned away with 429 once its burst is spent (not hashed and answered 401 without
/// end), and joins share the address's bucket.
#[test]
fn the_address_rate_is_checked_before_the_token_for_heartbeats_and_joins() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--heartbeat-rate",
            "1",
            "--heartbeat-burst",
            "5",
        ],
    );
    let hb = json!({"updater_id": "u1", "version": "1.0.0"}).to_string();
    let forged = "tern_agent_0000000000000000.notatoken";
    let mut answers = Vec::new();
    for _ in 0..20 {
        answers.push(
            t.raw("POST", "/v1/agents/heartbeat", Some(forged), Some(&hb))
                .0,
        );
    }
    // The burst is spent on 401s (each token hashed and refused), then the address is
    // limited: a token check first would answer 401 to all 20.
    assert_eq!(answers[..5], [401; 5], "{answers:?}");
    assert!(
        answers.iter().all(|s| *s == 401 || *s == 429),
        "{answers:?}"
    );
    assert!(answers.contains(&429), "{answers:?}");
    // The bucket is the address's: joins from it are limited too, before their token.
    for _ in 0..10 {
        let (s, h, b) = t.raw(
            "POST",
            "/v1/agents/join",
            Some("not-a-join-token"),
            Some("{}"),
        );
        answers.push(s);
        if s == 429 {
            assert!(h.get("retry-after").is_some(), "{b}");
            break;
        }
        assert_eq!(s, 401, "{b}");
    }
    assert_eq!(answers.last(), Some(&429), "{answers:?}");
    let unauthenticated = answers.iter().filter(|s| **s == 401).count();
    let limited = answers.iter().filter(|s| **s == 429).count();
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    let count = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{metrics}"))
    };
    assert_eq!(
        count("tern_heartbeats_rejected_total"),
        unauthenticated as u64
    );
    assert_eq!(count("tern_heartbeats_rate_limited_total"), limited as u64);
}

#[test]
fn channels_serve_version_and_critical() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    assert_eq!(
        t.call("GET", "/v1/channels/stable/version", None, None).0,
        404
    );
    t.op(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version":"v1.2.3","critical":true}"#),
    );
    let (s, _, body) = t.raw("GET", "/v1/channels/stable/version", None, None);
    assert_eq!((s, body.as_str()), (200, "1.2.3"));
    let (_, _, body) = t.raw("GET", "/v1/channels/stable/critical", None, None);
    assert_eq!(body, "yes");
    t.op("PUT", "/v1/channels/stable", Some(r#"{"version":"1.2.4"}"#));
    let (_, _, body) = t.raw("GET", "/v1/channels/stable/critical", None, None);
    assert_eq!(body, "no");
    let (s, _) = t.call(
        "PUT",
        "/v1/channels/stable",
        Some(&t.token),
        Some(r#"{"version":"x"}"#),
    );
    assert_eq!(s, 400);
    let list = t.op("GET", "/v1/channels", None);
    assert_eq!(list[0]["version"], "1.2.4");
}

#[test]
fn without_dev_clock_dev_routes_do_not_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(&tmp.path().join("data"), &[]);
    let (s, v) = t.call("POST", "/v1/dev/reconcile", Some(&t.token), None);
    assert_eq!(s, 404, "{v}");
    let (s, _) = t.call(
        "POST",
        "/v1/dev/clock",
        Some(&t.token),
        Some(r#"{"advance":"1m"}"#),
    );
    assert_eq!(s, 404);
}

#[test]
fn first_start_writes_a_private_operator_token() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fresh").join("data");
    let t = Ternd::dev(&dir);
    let mode = std::fs::metadata(dir.join("operator.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(t.token.starts_with("tern_"));
    assert!(dir.join("tern.db").exists());
}

#[test]
fn refuses_plain_http_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(ternd_bin())
        .args(["start", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--insecure-http") && err.contains("--tls-cert"),
        "{err}"
    );
    let out = Command::new(ternd_bin())
        .args([
            "start",
            "--insecure-http",
            "--dev-clock",
            "tomorrow",
            "--data-dir",
        ])
        .arg(tmp.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));
}

#[test]
fn bad_notify_flags_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let start = |args: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(ternd_bin());
        cmd.args([
            "start",
            "--insecure-http",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .args(args)
        .env_remove("TERN_NOTIFY_WEBHOOK")
        .env_remove("TERN_NOTIFY_SLACK")
        .env_remove("TERN_NOTIFY_TOKEN_FILE");
        if let Some(v) = env {
            cmd.env("TERN_NOTIFY_WEBHOOK", v);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for (flag, value, says) in [
        (
            "--notify-webhook",
            "ftp://alerts.example.com/hook",
            "only http:// and https://",
        ),
        (
            "--notify-webhook",
            "alerts.example.com/hook",
            "not an absolute URL",
        ),
        ("--notify-slack", "file:///etc/passwd", "scheme \"file\""),
        ("--notify-slack", "https://", "not a URL"),
    ] {
        let err = start(&[flag, value], None);
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    // The same check on the environment's list.
    let err = start(
        &[],
        Some("https://ok.example.com/hook ftp://bad.example.com"),
    );
    assert!(
        err.contains("--notify-webhook") && err.contains("only http:// and https://"),
        "{err}"
    );
    // The token file must be readable, and is only for generic webhooks.
    let missing = tmp.path().join("missing.token");
    let err = start(
        &[
            "--notify-webhook",
            "http://127.0.0.1:9/hook",
            "--notify-token-file",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        err.contains("--notify-token-file") && err.contains("cannot read"),
        "{err}"
    );
    let err = start(
        &[
            "--notify-slack",
            "https://hooks.example.com/x",
            "--notify-token-file",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert!(err.contains("--notify-webhook"), "{err}");
    // Refused before anything was written.
    assert!(!data.exists());
}

#[test]
fn notify_receivers_show_in_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join("hook.token");
    std::fs::write(&token, "s3cret\n").unwrap();
    // Nothing is sent at startup: the receivers need not listen.
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--notify-webhook",
            "http://127.0.0.1:9/hook",
            "--notify-token-file",
            token.to_str().unwrap(),
            "--notify-slack",
            "http://127.0.0.1:9/slack",
            "--notify-server-name",
            "prod-cp",
        ],
    );
    let (s, _, text) = t.raw("GET", "/metrics", None, None);
    assert_eq!(s, 200);
    for line in [
        "tern_notify_sent_total{receiver=\"webhook-1\"} 0",
        "tern_notify_failed_total{receiver=\"slack-1\"} 0",
        "tern_notify_dropped_total{receiver=\"webhook-1\"} 0",
        "# TYPE tern_notify_retries_total counter",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("s3cret"));
}
