//! The security follow-ups of issue 35, each against the real ternd over loopback: an
//! attack that once worked, and the check that it no longer does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Ternd;
use serde_json::{Value, json};
use tern_testing::http::{HttpServer, Request, Response};

fn join(t: &Ternd, token: &str, updater_id: &str) -> (u16, Value) {
    let body = json!({"updater_id": updater_id, "hostname": format!("{updater_id}.example")});
    t.call(
        "POST",
        "/v1/agents/join",
        Some(token),
        Some(&body.to_string()),
    )
}

fn uses_left(t: &Ternd, token_id: &str) -> Value {
    t.op("GET", "/v1/tokens", None)
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == token_id)
        .unwrap()["uses_left"]
        .clone()
}

/// Ten parallel joins of one updater_id once spent all three uses of a join token on
/// one host: the use was spent before the host's record was created and not given back
/// when another join had won. Now the use, the host record and the credential are one
/// transaction: one join wins and spends one use; the others are told the host has a
/// credential and spend nothing.
#[test]
fn racing_joins_of_one_host_spend_one_use() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let created = t.op(
        "POST",
        "/v1/tokens",
        Some(r#"{"role":"join","uses":3,"ttl":"1h"}"#),
    );
    let join_token = created["token"].as_str().unwrap().to_string();
    let join_id = created["id"].as_str().unwrap().to_string();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(10));
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let probe = Ternd::probe(&t.url);
            let token = join_token.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                join(&probe, &token, "same-host")
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let won = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(won, 1, "one join wins: {answers:?}");
    for (s, v) in answers.iter().filter(|(s, _)| *s != 201) {
        assert_eq!(
            *s, 409,
            "the others are told the host has a credential: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already has a host credential"),
            "{v}"
        );
    }
    assert_eq!(uses_left(&t, &join_id), 2, "one use spent");
    for id in ["other-1", "other-2"] {
        let (s, v) = join(&t, &join_token, id);
        assert_eq!(s, 201, "the two uses left still join hosts: {v}");
    }
    let (s, v) = join(&t, &join_token, "other-3");
    assert_eq!(s, 401, "{v}");
}

/// A GitHub-like API on loopback: answers `[]` and keeps every request's
/// `Authorization` header (empty when none was sent).
fn fake_github() -> (String, std::sync::mpsc::Receiver<String>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = HttpServer::start(move |req: &Request| {
        let auth = req.header("authorization").unwrap_or_default().to_string();
        let _ = tx.lock().unwrap().send(auth);
        Response::new(200, "[]").header("content-type", "application/json")
    });
    (server.url().to_string(), rx)
}

fn releases_config(api: &str, token_env: &str) -> String {
    format!(
        r#"kind: version_control_config
version: v1
metadata: {{name: version-control-config}}
spec:
  enabled: true
  releases:
    github: {{repo: acme/agent, api: "{api}", asset: "agent-{{version}}.tar.gz", token_env: {token_env}}}
    allow_http: true
    period: 10m
    directives:
      - {{name: prod, version: "1.*", selectors: [{{labels: {{env: prod}}}}], installers: [native]}}
"#
    )
}

/// An operator token once configured the releases controller with `token_env:
/// DB_PASSWORD` and an API URL of its choosing: ternd sent its database password there
/// as a bearer token. Now only the variables `--controller-secret-env` names can be
/// named; a configuration naming another is refused when written, and a stored one
/// (written under other flags) fails its run without reading the variable.
#[test]
fn token_env_reads_only_the_variables_ternds_flags_allow() {
    let (api, requests) = fake_github();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let env = ["env", "DB_PASSWORD=hunter2", "GITHUB_TOKEN=ghp_allowed"];
    let plain = ["--insecure-http", "--dev-clock", common::T0];
    let mut t = Ternd::spawn_via(&env, &dir, &plain);
    let (s, v) = t.call(
        "PUT",
        "/v1/directives/config",
        Some(&t.token),
        Some(&releases_config(&api, "DB_PASSWORD")),
    );
    assert_eq!(s, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("DB_PASSWORD") && msg.contains("--controller-secret-env"),
        "{v}"
    );
    let (s, v) = t.call("GET", "/v1/directives/config", Some(&t.token), None);
    assert_eq!(s, 404, "nothing was stored: {v}");
    t.op("POST", "/v1/dev/controllers", None);
    assert!(
        requests
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_err(),
        "no request went to the API"
    );
    t.stop();

    let mut allowed = plain.to_vec();
    allowed.extend(["--controller-secret-env", "GITHUB_TOKEN"]);
    let mut t = Ternd::spawn_via(&env, &dir, &allowed);
    // The variable the flag names is sent.
    t.op(
        "PUT",
        "/v1/directives/config",
        Some(&releases_config(&api, "GITHUB_TOKEN")),
    );
    t.op("POST", "/v1/dev/controllers", None);
    let auth = requests
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap();
    assert!(auth.contains("ghp_allowed"), "{auth:?}");

    // Restarted without the flag: the stored configuration's run fails, nothing sent.
    t.stop();
    let t = Ternd::spawn_via(&env, &dir, &plain);
    let run = t.op("POST", "/v1/dev/controllers", None);
    let err = run["status"]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("--controller-secret-env GITHUB_TOKEN"),
        "{run}"
    );
    assert!(
        requests
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_err(),
        "no request went to the API"
    );
}

/// A viewer token sent 1,150 refused POSTs in about a second; the audit trail then
/// held only those, and none of a user's suspend and resume before them. Now refused
/// attempts are kept apart from accepted actions (each the newest 1,000), and admin
/// requests are rate-limited per token (`--admin-rate`): the flood is cut off with 429
/// while other tokens go on.
///
/// The burst is ternd's default (500); the rate is set so low (one request per 100 s)
/// that the flood is cut off however slowly this machine sends it: at the default
/// 50/s, a loaded machine sending the 1,150 in 15 s refilled the bucket as fast as it
/// drained, and nothing was limited.
#[test]
fn refused_requests_cannot_push_accepted_actions_out_of_the_audit_trail() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--admin-rate",
            "0.01",
            "--admin-burst",
            "500",
        ],
    );
    let user = t.new_token("user");
    let viewer = t.new_token("viewer");
    for path in ["/v1/agents/suspend", "/v1/agents/resume"] {
        let (s, v) = t.call("POST", path, Some(&user), None);
        assert_eq!(s, 200, "{path}: {v}");
    }
    let (mut refused, mut limited) = (0, 0);
    for _ in 0..1150 {
        let (s, headers, body) = t.raw("POST", "/v1/agents/suspend", Some(&viewer), None);
        match s {
            403 => refused += 1,
            429 => {
                limited += 1;
                assert!(headers.get("retry-after").is_some(), "{body}");
                assert!(body.contains("--admin-rate"), "{body}");
            }
            _ => panic!("{s} {body}"),
        }
    }
    // Another token is not limited by the viewer's flood.
    let (s, v) = t.call("GET", "/v1/tokens", Some(&t.token), None);
    assert_eq!(s, 200, "{v}");

    let (s, trail) = t.call("GET", "/v1/audit?limit=1000", Some(&t.token), None);
    assert_eq!(s, 200, "{trail}");
    let rows = trail.as_array().unwrap();
    let accepted: Vec<(&str, &str, u64)> = rows
        .iter()
        .filter(|r| r["status"].as_u64().unwrap() < 400)
        .map(|r| {
            (
                r["role"].as_str().unwrap(),
                r["path"].as_str().unwrap(),
                r["status"].as_u64().unwrap(),
            )
        })
        .filter(|(role, _, _)| *role == "user")
        .collect();
    assert_eq!(
        accepted,
        vec![
            ("user", "/v1/agents/suspend", 200),
            ("user", "/v1/agents/resume", 200)
        ],
        "the user's actions are still in the trail"
    );
    assert!(refused >= 500, "the burst is let through: {refused}");
    assert!(
        limited > 0,
        "the flood is cut off: {refused} refused, {limited} limited"
    );
    let viewer_rows = rows
        .iter()
        .filter(|r| r["role"] == "viewer" && r["status"] == 403)
        .count();
    assert_eq!(
        viewer_rows,
        refused.min(1000),
        "the refusals are kept too, within their own bound"
    );
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("tern_admin_rate_limited_total"))
        .unwrap_or_default();
    assert_eq!(line, format!("tern_admin_rate_limited_total {limited}"));
}

const TWO_APPROVALS: &str = r#"kind: version_control_config
version: v1
metadata: {name: version-control-config}
spec:
  enabled: true
  promotion: {strategy: manual, approvals: 2, pending_ttl: 1h}
"#;

const NATIVE: &str =
    "kind: installer\nversion: v1\nmetadata: {name: native}\nspec: {type: tern-update}\n";

const DRAFT: &str = r#"kind: version_directive
version: v1
metadata: {name: static}
spec:
  directives:
    - name: prod
      selectors: [{labels: {env: prod}}]
      targets: [{version: "1.2.0"}]
      installers: [native]
"#;

/// Mints a token as `by`; (token, id).
fn mint(t: &Ternd, by: &str, body: Value) -> (String, String) {
    let (s, v) = t.call("POST", "/v1/tokens", Some(by), Some(&body.to_string()));
    assert_eq!(s, 201, "{v}");
    (
        v["token"].as_str().unwrap().to_string(),
        v["id"].as_str().unwrap().to_string(),
    )
}

fn apply(t: &Ternd, token: &str, nonce: &str) -> (u16, Value) {
    t.call(
        "POST",
        "/v1/directives/apply",
        Some(token),
        Some(&json!({ "nonce": nonce }).to_string()),
    )
}

/// An operator token for `principal`, minted by `by`.
fn operator(t: &Ternd, by: &str, principal: &str) -> String {
    mint(t, by, json!({"role": "operator", "principal": principal})).0
}

/// The installer, the control config asking for two approvals, and the draft.
fn two_approvals_and_a_draft(t: &Ternd) {
    t.op("PUT", "/v1/directives/installers/native", Some(NATIVE));
    t.op("PUT", "/v1/directives/config", Some(TWO_APPROVALS));
    t.op("PUT", "/v1/directives/drafts/static", Some(DRAFT));
}

/// Plans the draft: the plan's nonce.
fn plan_the_draft(t: &Ternd) -> String {
    let pending = t.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    pending["nonce"].as_str().unwrap().to_string()
}

/// The attack as reported: with `approvals: 2`, an operator applied with its token,
/// minted another operator token (no principal given) and applied again with it.
#[test]
fn a_token_minted_by_the_first_approver_is_not_a_second_approver() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    two_approvals_and_a_draft(&t);
    let nonce = plan_the_draft(&t);
    let (s, v) = apply(&t, &t.token, &nonce);
    assert_eq!((s, &v["applied"]), (200, &json!(false)), "{v}");
    let (b, _) = mint(&t, &t.token, json!({"role": "operator"}));
    let (s, v) = apply(&t, &b, &nonce);
    assert_eq!(s, 409, "the same person, with a second token: {v}");
    let (s, v) = t.call("GET", "/v1/directives/active", Some(&t.token), None);
    assert_eq!(s, 404, "not applied: {v}");
}

/// With `approvals: 2`, an operator applied with token A, minted operator token B and
/// applied again: the plan was applied on one person's word. Now a token carries the
/// principal it was minted for and who minted it; a second approval must come from
/// another principal, with a token that neither minted nor was minted by the first.
#[test]
fn a_second_approval_must_come_from_another_principal() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let (alice, alice_id) = mint(
        &t,
        &t.token,
        json!({"role": "operator", "principal": "alice"}),
    );
    let (bob, _) = mint(
        &t,
        &t.token,
        json!({"role": "operator", "principal": "bob"}),
    );
    let (alice2, _) = mint(
        &t,
        &t.token,
        json!({"role": "operator", "principal": "alice"}),
    );
    // Alice mints a token for "mallory": it still speaks for her.
    let (minted, minted_id) = mint(
        &t,
        &alice,
        json!({"role": "operator", "principal": "mallory"}),
    );
    // Without a principal, a token is its minter's.
    let (own, _) = mint(&t, &alice, json!({"role": "operator"}));
    t.op("PUT", "/v1/directives/installers/native", Some(NATIVE));
    t.op("PUT", "/v1/directives/config", Some(TWO_APPROVALS));
    t.op("PUT", "/v1/directives/drafts/static", Some(DRAFT));
    let pending = t.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    let nonce = pending["nonce"].as_str().unwrap().to_string();
    let (s, v) = apply(&t, &alice, &nonce);
    assert_eq!((s, &v["applied"]), (200, &json!(false)), "{v}");
    for (token, why) in [
        (&minted, "was minted by token"),
        (&own, "principal alice already approved"),
        (&alice2, "principal alice already approved"),
        (&alice, "already approved"),
    ] {
        let (s, v) = apply(&t, token, &nonce);
        assert_eq!(s, 409, "{why}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(why) && msg.contains("distinct principals"),
            "{msg}"
        );
    }
    let (s, v) = t.call("GET", "/v1/directives/active", Some(&t.token), None);
    assert_eq!(s, 404, "still not applied: {v}");
    let (s, v) = apply(&t, &bob, &nonce);
    assert_eq!(
        (s, &v["applied"]),
        (200, &json!(true)),
        "bob is another person: {v}"
    );
    let who = t.op("GET", "/v1/whoami", None);
    assert_eq!(who["principal"], "bootstrap", "{who}");
    let tokens = t.op("GET", "/v1/tokens", None);
    let row = |id: &str| {
        tokens
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row(&minted_id)["principal"], "mallory", "{tokens}");
    assert_eq!(row(&minted_id)["minted_by"], alice_id.as_str(), "{tokens}");
    let (s, v) = t.call(
        "POST",
        "/v1/tokens",
        Some(&t.token),
        Some(r#"{"role":"user","principal":"token:abc"}"#),
    );
    assert_eq!(
        s, 400,
        "no principal can pass for a token of earlier releases: {v}"
    );
}

/// Authenticated answers (tokens, inventory, audit trail) once carried no
/// `Cache-Control`: a shared proxy or a browser could keep one token's view and serve
/// it to the next caller. Now every answer to a token says `no-store`; public answers
/// keep their short `max-age`.
#[test]
fn authenticated_answers_are_not_stored_by_caches() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource(
        "version",
        &common::enabled_version("1.0.0", "1.1.0", "immediate"),
    );
    t.reconcile();
    let agent = t.new_token("agent");
    let viewer = t.new_token("viewer");
    for (method, path, token) in [
        ("GET", "/v1/whoami", &viewer),
        ("GET", "/v1/tokens", &t.token),
        ("GET", "/v1/inventory", &viewer),
        ("GET", "/v1/audit", &viewer),
        ("GET", "/v1/resources/version", &viewer),
        ("POST", "/v1/agents/suspend", &viewer),
    ] {
        let (s, headers, body) = t.raw(method, path, Some(token), None);
        assert!(s == 200 || s == 403, "{method} {path}: {s} {body}");
        assert_eq!(
            headers.get("cache-control").map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{method} {path}"
        );
    }
    let beat = json!({"updater_id": "h1", "group": "default", "version": "1.0.0"});
    let (s, headers, body) = t.raw(
        "POST",
        "/v1/agents/heartbeat",
        Some(&agent),
        Some(&beat.to_string()),
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(headers.get("cache-control").unwrap(), "no-store");
    let (s, headers, _) = t.raw(
        "GET",
        "/v1/webapi/find?group=default&updater_id=h1",
        None,
        None,
    );
    assert_eq!(s, 200);
    assert!(
        headers
            .get("cache-control")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("max-age"),
        "public answers keep their max-age"
    );
}

/// A local-script installer with `env: {LD_PRELOAD: …}` (or PATH, BASH_ENV, TERN_…)
/// was stored and offered to hosts, which refused it only at install time, host by
/// host. Now it is refused when the installer is written, naming the field.
#[test]
fn reserved_environment_names_are_refused_when_the_installer_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    for name in [
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "BASH_ENV",
        "TERN_TARGET_VERSION",
        "IFS",
    ] {
        let installer = format!(
            "kind: installer\nversion: v1\nmetadata: {{name: script}}\nspec:\n  type: local-script\n  local_script:\n    env: {{{name}: evil.so}}\n    script: 'true'\n"
        );
        let (s, v) = t.call(
            "PUT",
            "/v1/directives/installers/script",
            Some(&t.token),
            Some(&installer),
        );
        assert_eq!(s, 400, "{name}: {v}");
        let msg = v.to_string();
        assert!(
            msg.contains(&format!("spec.local_script.env.{name}")) && msg.contains("reserved"),
            "{msg}"
        );
    }
    let (s, v) = t.call(
        "GET",
        "/v1/directives/installers/script",
        Some(&t.token),
        None,
    );
    assert_eq!(s, 404, "nothing was stored: {v}");
    // A name of the installer's own is still fine.
    t.op(
        "PUT",
        "/v1/directives/installers/script",
        Some("kind: installer\nversion: v1\nmetadata: {name: script}\nspec:\n  type: local-script\n  local_script:\n    env: {AGENT_VERSION: '{target.version}'}\n    script: 'true'\n"),
    );
}

/// Heartbeats once said nothing of a host's trust: an operator could not list the hosts
/// that install unsigned releases. Now a heartbeat says whether the host pins a release
/// root and which version, the inventory shows it, and `--require-trust` refuses the
/// heartbeats and finds of hosts that pin none (or do not say) with a clear error.
#[test]
fn the_inventory_shows_which_hosts_pin_a_root_and_require_trust_refuses_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::dev(&dir);
    t.put_resource(
        "version",
        &common::enabled_version("1.0.0", "1.1.0", "immediate"),
    );
    t.reconcile();
    let agent = t.new_token("agent");
    let pinned = json!({"trust": {"pinned": true, "root_version": 2}});
    let unpinned = json!({"trust": {"pinned": false}});
    t.heartbeat_with(&agent, "pinned", "default", "1.0.0", pinned.clone());
    t.heartbeat_with(&agent, "unpinned", "default", "1.0.0", unpinned.clone());
    t.heartbeat_with(&agent, "silent", "default", "1.0.0", json!({}));
    let inv = t.op("GET", "/v1/inventory", None);
    let trust = |id: &str| {
        inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["updater_id"] == id)
            .unwrap()["trust"]
            .clone()
    };
    assert_eq!(
        trust("pinned"),
        json!({"pinned": true, "root_version": 2}),
        "{inv}"
    );
    assert_eq!(trust("unpinned"), json!({"pinned": false}), "{inv}");
    assert_eq!(trust("silent"), Value::Null, "unknown: {inv}");
    t.stop();

    let t = Ternd::start(&dir, &["--dev-clock", common::T0, "--require-trust"]);
    for (id, extra, why) in [
        ("unpinned", unpinned, "pins no release root"),
        ("silent", json!({}), "does not say"),
    ] {
        let mut body = json!({"updater_id": id, "group": "default", "version": "1.0.0"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (s, v) = t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        );
        assert_eq!(s, 403, "{id}: {v}");
        assert_eq!(v["error"]["code"], "trust_required", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why) && msg.contains("--trust-root"), "{msg}");
    }
    t.heartbeat_with(&agent, "pinned", "default", "1.0.0", pinned);
    let (s, v) = t.call(
        "GET",
        "/v1/webapi/find?group=default&updater_id=unpinned&version=1.0.0",
        None,
        None,
    );
    assert_eq!(s, 403, "{v}");
    assert_eq!(v["error"]["code"], "trust_required", "{v}");
    let (s, v) = t.call(
        "GET",
        "/v1/webapi/find?group=default&updater_id=pinned&version=1.0.0&trust_root=2",
        None,
        None,
    );
    assert_eq!(s, 200, "{v}");
    // Teleport's channel paths asked for a rollout group are finds without identity:
    // no pinned root can be named, so they are refused too (not answered `none`, which
    // an upgrader could read as "up to date").
    for path in [
        "/v1/webapi/automaticupgrades/channel/default/version",
        "/webapi/automaticupgrades/channel/default/critical",
    ] {
        let (s, v) = t.call("GET", path, None, None);
        assert_eq!(s, 403, "{path}: {v}");
        assert_eq!(v["error"]["code"], "trust_required", "{path}: {v}");
    }
}

fn beat(t: &Ternd, token: &str, id: &str) -> (u16, Value) {
    let body = json!({"updater_id": id, "group": "default", "version": "1.0.0"});
    t.call(
        "POST",
        "/v1/agents/heartbeat",
        Some(token),
        Some(&body.to_string()),
    )
}

fn metric(t: &Ternd, name: &str) -> String {
    let (_, _, text) = t.raw("GET", "/metrics", None, None);
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .to_string()
}

/// The shared agent token of earlier releases speaks for any host: one leaked copy
/// invents hosts (the report flood) and brings a revoked updater_id back. A new data dir
/// refuses it by default (heartbeats and joins, 403 naming the flag that allows it);
/// per-host credentials from a join token and a controller's token still work. A data
/// dir from before keeps accepting it, warns in the log and counts its hosts.
#[test]
fn a_new_data_dir_refuses_the_shared_agent_token_and_an_old_one_counts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let defaults = ["--insecure-http", "--dev-clock", common::T0];
    let mut t = Ternd::spawn_as_is(&dir, &defaults);
    let shared = t.new_token("agent");
    for (s, v) in [beat(&t, &shared, "h1"), join(&t, &shared, "h1")] {
        assert_eq!(s, 403, "{v}");
        assert_eq!(v["error"]["code"], "shared_token_refused", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("--shared-agent-token allow") && msg.contains("--role join"),
            "{v}"
        );
    }
    // The per-host way: a join token, then the host's own credential.
    let (join_token, _) = mint(&t, &t.token, json!({"role": "join"}));
    let (s, v) = join(&t, &join_token, "h1");
    assert_eq!(s, 201, "{v}");
    let own = v["token"].as_str().unwrap();
    assert_eq!(beat(&t, own, "h1").0, 200);
    // A controller's token (tokens create --controller) heartbeats for its workloads.
    let (controller, _) = mint(
        &t,
        &t.token,
        json!({"role": "agent", "controller": true, "description": "kubernetes"}),
    );
    assert_eq!(beat(&t, &controller, "pod-1").0, 200);
    let (s, v) = t.call(
        "POST",
        "/v1/tokens",
        Some(&t.token),
        Some(&json!({"role": "user", "controller": true}).to_string()),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(
        metric(&t, "tern_inventory_shared_token_hosts"),
        "tern_inventory_shared_token_hosts 1"
    );
    t.stop();

    // Restarted: the store still refuses it; the flag allows it, with a warning.
    let mut t = Ternd::spawn_as_is(&dir, &defaults);
    assert_eq!(beat(&t, &shared, "h2").0, 403);
    t.stop();
    let mut allowed = defaults.to_vec();
    allowed.extend(["--shared-agent-token", "allow"]);
    let mut t = Ternd::spawn_as_is(&dir, &allowed);
    assert_eq!(beat(&t, &shared, "h2").0, 200);
    t.stop();

    // A store initialised by an earlier release: its marker does not say "refuse".
    let db = dir.join("tern.db");
    let changed = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT count(*) FROM kv WHERE key = CAST('/tern/bootstrap' AS BLOB)")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&changed.stdout).trim(), "1");
    let out = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(
            "UPDATE kv SET value = CAST('{\"replica\":\"old\",\"at\":\"2026-01-01T00:00:00Z\"}' AS BLOB) WHERE key = CAST('/tern/bootstrap' AS BLOB)",
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let t = Ternd::spawn_as_is(&dir, &defaults);
    for id in ["old-1", "old-2", "old-3"] {
        let (s, v) = beat(&t, &shared, id);
        assert_eq!(s, 200, "{v}");
    }
    assert_eq!(beat(&t, own, "h1").0, 200);
    assert_eq!(
        metric(&t, "tern_inventory_shared_token_hosts"),
        "tern_inventory_shared_token_hosts 3"
    );
    // Warned at the start with the flag, and at this one: the store did not say refuse.
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert_eq!(
        log.matches("the shared agent token is accepted (deprecated)")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("--shared-agent-token refuse"), "{log}");
}

// ---- Issue 49: the third round -------------------------------------------------------

/// A rollout, so that previews answer 200 as they did in the attack.
fn with_rollout(t: &Ternd) {
    t.put_resource("config", &common::three_groups());
    t.put_resource(
        "version",
        &common::version_yaml("1.0.0", "1.1.0", "regular"),
    );
    t.reconcile();
}

/// The accepted trail's records of `role`, as (method, path).
fn accepted_of(trail: &Value, role: &str) -> Vec<(String, String)> {
    trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"].as_u64().unwrap() < 400 && r["role"] == role)
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A viewer sent 1,250 `POST /v1/preview/suspend` (answered 200): read routes audited
/// every non-GET as accepted, so the accepted trail (the newest 1,000) held only the
/// viewer's previews; a user's suspend and resume and an operator's minting were gone.
/// Now read-level routes are never audited, and the trail is pruned token by token: a
/// user's flood of accepted writes prunes that user's own records first.
#[test]
fn a_reader_cannot_push_accepted_actions_out_of_the_audit_trail() {
    let tmp = tempfile::tempdir().unwrap();
    // The flood as reported got 1,094 previews past the per-token limit in 15 s; a burst
    // that lets them all through at once stands for it without the wait.
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--admin-burst", "3000"],
    );
    with_rollout(&t);
    let user = t.new_token("user");
    let viewer = t.new_token("viewer");
    for path in ["/v1/agents/suspend", "/v1/agents/resume"] {
        let (s, v) = t.call("POST", path, Some(&user), None);
        assert_eq!(s, 200, "{path}: {v}");
    }
    mint(
        &t,
        &t.token,
        json!({"role": "operator", "principal": "carol"}),
    );
    for _ in 0..1250 {
        let (s, v) = t.call("POST", "/v1/preview/suspend", Some(&viewer), Some("{}"));
        assert_eq!(s, 200, "the preview itself still answers: {v}");
    }
    let trail = t.op("GET", "/v1/audit?limit=5000", None);
    let post = |p: &str| ("POST".to_string(), p.to_string());
    assert_eq!(
        accepted_of(&trail, "user"),
        vec![post("/v1/agents/suspend"), post("/v1/agents/resume")],
        "the user's actions are still in the trail"
    );
    assert!(
        accepted_of(&trail, "operator").contains(&post("/v1/tokens")),
        "the operator's minting is still in the trail: {trail}"
    );
    let viewer_rows = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["role"] == "viewer")
        .count();
    assert_eq!(viewer_rows, 0, "a preview changes nothing: not audited");

    // A user's own flood of accepted writes (suspend, resume, 1,200 times) prunes that
    // user's oldest records, not the other user's or the operator's.
    let flooder = t.new_token("user");
    for i in 0..1200 {
        let path = if i % 2 == 0 {
            "/v1/agents/suspend"
        } else {
            "/v1/agents/resume"
        };
        let (s, v) = t.call("POST", path, Some(&flooder), None);
        assert_eq!(s, 200, "{path}: {v}");
    }
    // Every record the trail keeps (the newest 1,000 are mostly the flooder's).
    let trail = t.op("GET", "/v1/audit?limit=5000", None);
    let accepted = accepted_of(&trail, "user");
    assert_eq!(
        &accepted[..2],
        &[post("/v1/agents/suspend"), post("/v1/agents/resume")],
        "the first user's actions outlive another user's flood"
    );
    assert!(
        accepted_of(&trail, "operator").contains(&post("/v1/tokens")),
        "the operator's minting outlives it too"
    );
    assert!(
        accepted.len() <= 1100,
        "the trail stays bounded: {} records of users",
        accepted.len()
    );
}

/// With `approvals: 2`, an operator approved, minted a chain of 33 tokens and approved
/// again with the last: the lineage a token kept (its 32 nearest minters) no longer
/// reached the first, and the plan was applied on one person's word. Now every token
/// carries whom it speaks for (the principal at the root of its chain), whatever the
/// depth.
#[test]
fn a_token_33_links_down_the_first_approvers_chain_is_not_a_second_approver() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let alice = operator(&t, &t.token, "alice");
    let bob = operator(&t, &t.token, "bob");
    two_approvals_and_a_draft(&t);
    let nonce = plan_the_draft(&t);
    let (s, v) = apply(&t, &alice, &nonce);
    assert_eq!((s, &v["applied"]), (200, &json!(false)), "{v}");
    // Alice mints a token "for mallory", which mints the next, 33 links in all.
    let mut last = operator(&t, &alice, "mallory");
    for _ in 1..33 {
        last = mint(&t, &last, json!({"role": "operator"})).0;
    }
    let who = t.call("GET", "/v1/whoami", Some(&last), None).1;
    assert_eq!(who["principal"], "mallory", "{who}");
    let (s, v) = apply(&t, &last, &nonce);
    assert_eq!(s, 409, "the 33rd link speaks for alice: {v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("speaks for principal alice") && msg.contains("distinct principals"),
        "{msg}"
    );
    let (s, v) = t.call("GET", "/v1/directives/active", Some(&t.token), None);
    assert_eq!(s, 404, "not applied: {v}");
    let (s, v) = apply(&t, &bob, &nonce);
    assert_eq!((s, &v["applied"]), (200, &json!(true)), "{v}");
}

const ONE_APPROVAL: &str = r#"kind: version_control_config
version: v1
metadata: {name: version-control-config}
spec:
  enabled: true
  promotion: {strategy: manual, approvals: 1, pending_ttl: 1h}
"#;

/// With `approvals: 2`, the first approver lowered `promotion.approvals` to 1 with
/// `PUT /v1/directives/config`, planned and applied alone. Now a change of
/// `spec.promotion` needs the approvals in force: the first PUT is recorded as pending
/// (202), and only the same config sent by another principal writes it.
#[test]
fn lowering_the_approvals_needs_the_approvals_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let alice = operator(&t, &t.token, "alice");
    let bob = operator(&t, &t.token, "bob");
    let alices_other = operator(&t, &alice, "mallory");
    two_approvals_and_a_draft(&t);
    let approvals =
        || t.op("GET", "/v1/directives/config", None)["spec"]["promotion"]["approvals"].clone();

    let put =
        |token: &str, body: &str| t.call("PUT", "/v1/directives/config", Some(token), Some(body));
    let (s, v) = put(&alice, ONE_APPROVAL);
    assert_eq!(s, 202, "recorded, not written: {v}");
    assert_eq!(
        (&v["applied"], &v["approvals"], &v["approvals_needed"]),
        (&json!(false), &json!(1), &json!(2)),
        "{v}"
    );
    assert_eq!(approvals(), json!(2), "the config in force is unchanged");
    // Alone, she can neither apply a plan nor approve her own change again.
    let nonce = plan_the_draft(&t);
    let (s, v) = apply(&t, &alice, &nonce);
    assert_eq!((s, &v["applied"]), (200, &json!(false)), "{v}");
    for token in [&alice, &alices_other] {
        let (s, v) = put(token, ONE_APPROVAL);
        assert_eq!(s, 409, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("distinct principals"),
            "{v}"
        );
    }
    assert_eq!(approvals(), json!(2));
    // Other changes than the promotion are written at once, and void the pending one.
    let (s, v) = put(
        &bob,
        &TWO_APPROVALS.replace("enabled: true", "enabled: false"),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = put(&bob, ONE_APPROVAL);
    assert_eq!(s, 202, "a new change, bob's approval first: {v}");
    let (s, v) = put(&alice, ONE_APPROVAL);
    assert_eq!(s, 200, "two principals: written: {v}");
    assert_eq!(approvals(), json!(1));
}

/// 6,000 requests with made-up tokens at 2,900/s from one address were all answered
/// 401: none limited, no log line, each one a store read. Now an address's refused
/// authentications on admin routes are limited before the store is asked
/// (`--auth-failure-rate`; a token accepted lately passes), every refusal is counted
/// in `tern_auth_refused_total` and logged at a bounded rate, the lines held back
/// counted in the next.
#[test]
fn probes_with_made_up_tokens_are_limited_counted_and_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let t = Ternd::start(
        &dir,
        &["--dev-clock", common::T0, "--auth-failure-burst", "40"],
    );
    // The operator's token is checked (and remembered) before the probe.
    t.op("GET", "/v1/agents/status", None);
    let (mut refused, mut limited) = (0, 0);
    for i in 0..300 {
        let made_up = format!("tern_{i:012x}_{}", "ab".repeat(32));
        let (s, headers, body) = t.raw("GET", "/v1/agents/status", Some(&made_up), None);
        match s {
            401 => refused += 1,
            429 => {
                limited += 1;
                assert!(headers.get("retry-after").is_some(), "{body}");
                assert!(body.contains("--auth-failure-rate"), "{body}");
            }
            _ => panic!("{s} {body}"),
        }
    }
    assert_eq!((refused, limited), (40, 260), "the burst, then 429");
    // The operator, from the same address, goes on.
    t.op("GET", "/v1/agents/status", None);
    assert_eq!(
        metric(&t, "tern_auth_refused_total"),
        "tern_auth_refused_total 40"
    );
    assert_eq!(
        metric(&t, "tern_auth_address_limited_total"),
        "tern_auth_address_limited_total 260"
    );
    // Logged, at most 10 at once: the others are counted in a later line. A refused
    // heartbeat (limited by --heartbeat-rate, not by this) is one more refusal.
    let log = || std::fs::read_to_string(dir.with_extension("log")).unwrap();
    let lines = log().matches("refused authentication").count();
    assert!((1..=10).contains(&lines), "{lines} lines:\n{}", log());
    let held_back = |l: &str| -> u64 {
        l.split("held_back=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    tern_testing::eventually_within(
        "a line says how many refusals were held back",
        std::time::Duration::from_secs(10),
        || {
            let (s, _) = beat(&t, "tern_0123456789ab_00", "h1");
            assert_eq!(s, 401);
            log().lines().any(|l| held_back(l) > 0)
        },
    );
    let text = log();
    let line = text
        .lines()
        .find(|l| l.contains("refused authentication"))
        .unwrap();
    assert!(
        line.contains("127.0.0.1") && line.contains("/v1/agents/status"),
        "{line}"
    );
}

/// A token refused once is refused again without a store read: with the store gone, a
/// probe sent again still gets its 401 (a token never seen gets the store's 503).
#[cfg(feature = "etcd")]
#[test]
fn a_refused_token_sent_again_costs_no_store_read() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut etcd = rt.block_on(tern_testing::etcd::EtcdCluster::start(1));
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("etcd:{}", etcd.endpoints().join(","));
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--backend", &backend, "--dev-clock", common::T0],
    );
    let probe = format!("tern_0123456789ab_{}", "cd".repeat(32));
    let (s, v) = t.call("GET", "/v1/agents/status", Some(&probe), None);
    assert_eq!(s, 401, "{v}");
    etcd.kill(0);
    let (s, v) = t.call("GET", "/v1/agents/status", Some(&probe), None);
    assert_eq!(s, 401, "refused from memory, no store read: {v}");
    let never_seen = format!("tern_ba9876543210_{}", "cd".repeat(32));
    let (s, v) = t.call("GET", "/v1/agents/status", Some(&never_seen), None);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "a token never seen needs the store: {v}"
    );
}

/// dev (two canaries, an analysis of `query` with `max: 0.015`) then prod, 1.0.0 → 2.0.0.
fn analysed_config(query: &str) -> String {
    format!(
        r#"kind: autoupdate_config
version: v1
metadata: {{name: autoupdate-config}}
spec:
  agents:
    mode: enabled
    schedules:
      regular:
        - name: dev
          days: ["*"]
          start_hour: 10
          canary_count: 2
          analysis:
            interval: 1m
            passes: 1
            queries:
              - name: errors
                query: '{query}'
                max: 0.015
        - name: prod
          days: ["*"]
          start_hour: 14
"#
    )
}

/// Hosts `(updater_id, hostname)` of dev on 1.0.0 before and after dev's window opens,
/// then, as dev's canaries, on 2.0.0 and healthy, until the reconcile that runs the
/// analysis. Returns dev's status after it.
fn canaries_on_the_target(t: &Ternd, agent: &str, hosts: &[(&str, &str)]) -> Value {
    t.put_resource(
        "version",
        &common::version_yaml("1.0.0", "2.0.0", "regular"),
    );
    let beat = |version: &str| {
        for (id, hostname) in hosts {
            t.heartbeat_with(agent, id, "dev", version, json!({ "hostname": hostname }));
        }
    };
    beat("1.0.0");
    t.reconcile();
    t.set_clock("2026-11-23T10:05:00Z");
    beat("1.0.0");
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "canary", "{r}");
    assert_eq!(
        dev["canaries"].as_array().unwrap().len(),
        hosts.len(),
        "{r}"
    );
    beat("2.0.0");
    // This reconcile sees the canaries succeed; the next runs the analysis due.
    let r = t.reconcile();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["last_update_reason"], "analysis_pending",
        "{r}"
    );
    t.reconcile()["rollout"]["status"]["groups"][0].clone()
}

/// Canary analysis took a success body under a 4xx/5xx status as a pass, and passed on
/// `warnings` (a partial answer) and on a `text/plain` answer. Now anything but one
/// sample of an instant vector in a complete JSON answer with a 2xx status holds the
/// group. Prometheus itself never answers so: the stand-in is what a proxy or a broken
/// Prometheus in front of it would send.
#[test]
fn canary_analysis_holds_on_any_answer_but_one_vector_sample() {
    let answers: Vec<(u16, &str, String, &str)> = {
        let vector = |v: &str| {
            format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1,"{v}"]}}]}}}}"#
            )
        };
        let json = "application/json";
        vec![
            (503, json, vector("0.001"), "HTTP 503"),
            (404, json, vector("0.001"), "HTTP 404"),
            (
                200,
                json,
                vector("0.001").replacen(
                    r#""status":"success","#,
                    r#""status":"success","warnings":["one store did not answer"],"#,
                    1,
                ),
                "partial",
            ),
            (200, "text/plain", vector("0.001"), "text/plain"),
            (
                200,
                json,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0.001"]}}"#
                    .into(),
                "scalar",
            ),
            (
                200,
                json,
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"0.001"]},{"metric":{"a":"2"},"value":[1,"0.001"]}]}}"#
                    .into(),
                "2 series",
            ),
            (200, json, vector("0.001"), "passes"),
        ]
    };
    let step = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let served = answers.clone();
    let at = std::sync::Arc::clone(&step);
    let prometheus = HttpServer::start(move |req: &Request| {
        assert_eq!(req.path(), "/api/v1/query");
        let (status, content_type, body, _) = &served[at.load(std::sync::atomic::Ordering::SeqCst)];
        Response::new(*status, body.as_bytes().to_vec()).header("content-type", *content_type)
    });
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--prometheus-url",
            prometheus.url(),
        ],
    );
    t.put_resource(
        "config",
        &analysed_config(r#"avg(tern_test_error_ratio{host=~"{{canary_hosts}}"})"#),
    );
    let agent = t.new_token("agent");
    let mut dev = canaries_on_the_target(&t, &agent, &[("c1", "c1.example"), ("c2", "c2.example")]);
    for (i, (status, content_type, _, says)) in answers.iter().enumerate() {
        if i > 0 {
            step.store(i, std::sync::atomic::Ordering::SeqCst);
            t.advance("1m");
            dev = t.reconcile()["rollout"]["status"]["groups"][0].clone();
        }
        if *says == "passes" {
            assert_eq!(dev["state"], "active", "a complete answer passes: {dev}");
            break;
        }
        assert_eq!(
            (
                &dev["state"],
                &dev["last_update_reason"],
                &dev["analysis"]["held"]
            ),
            (&json!("canary"), &json!("analysis_held"), &json!(true)),
            "HTTP {status} {content_type}: {dev}"
        );
        let message = dev["analysis"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says}: {message}");
    }
    assert!(prometheus.requests() >= answers.len());
}

/// A canary whose hostname was only control characters rendered `host=~""`, which
/// selects the series without the label: a canary erring at 2% passed against a 1%
/// unlabelled series. Now the heartbeat refuses control characters, values are cleaned
/// before the emptiness check, and, against a real Prometheus, a hostname made of
/// regex syntax selects nothing but itself: the canary erring at 2% fails its analysis.
#[test]
fn a_hostile_hostname_never_widens_the_analysis_selector() {
    use tern_e2e::prometheus::{self as prom, Prometheus, Target};
    assert!(
        prom::binary().is_some(),
        "this test needs Prometheus: apt-get install prometheus (CI installs it)"
    );
    // The canary web-2 errs at 2%; a series without the host label says 1%.
    let metrics = HttpServer::start(|_: &Request| {
        Response::new(
            200,
            "# TYPE tern_test_error_ratio gauge\ntern_test_error_ratio{host=\"web-2.example\"} 0.02\ntern_test_error_ratio 0.01\n",
        )
        .header("content-type", "text/plain; version=0.0.4")
    });
    let p = Prometheus::start(
        prom::free_port().unwrap(),
        &[Target {
            port: metrics.addr().port(),
            labels: Default::default(),
        }],
    )
    .unwrap();
    assert_eq!(
        p.wait_value(
            "count(tern_test_error_ratio)",
            std::time::Duration::from_secs(60)
        ),
        Some(2.0),
        "{}",
        p.log_tail()
    );
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--prometheus-url", &p.url],
    );
    t.put_resource(
        "config",
        &analysed_config(r#"avg(tern_test_error_ratio{host=~"{{canary_hosts}}"})"#),
    );
    let agent = t.new_token("agent");
    for hostname in ["\u{1}\u{7}", "web\u{0}2", "\u{1b}[2J"] {
        let body =
            json!({"updater_id": "ctl", "group": "dev", "version": "1.0.0", "hostname": hostname});
        let (s, v) = t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        );
        assert_eq!(s, 400, "{hostname:?}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("hostname") && msg.contains("control character"),
            "{msg}"
        );
    }
    // Regex and PromQL syntax in a hostname: a literal, selecting only itself.
    let dev = canaries_on_the_target(&t, &agent, &[("w1", ".*"), ("w2", "web-2.example")]);
    assert_eq!(
        (&dev["state"], &dev["last_update_reason"]),
        (&json!("canary"), &json!("analysis_failed")),
        "{dev}"
    );
    let message = dev["analysis"]["message"].as_str().unwrap();
    assert!(message.contains("canaries 0.02 (max 0.015)"), "{message}");
}
