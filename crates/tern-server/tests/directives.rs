#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Version directives end to end on two real `ternd` replicas sharing one SQLite file,
//! with the shared dev clock: 8 labelled hosts heartbeat over HTTP (a stand-in for
//! tern-update's heartbeats, whose installers are tested in tern-update's own tests).
//! A plan counts what the real inventory would do and moves nothing; `apply` promotes;
//! the loop triggers within the rate, each host once although two replicas hold it;
//! the instruction reaches the host in its heartbeat answer; hosts walk needs-install →
//! triggered → recent → parity; a failed script is an explicit fault, a silent host a
//! churn; the fault limit pauses the loop until an operator resumes it. Also: dry runs
//! of a plan, a replica restarted mid-install, the `releases` controller over a real
//! loopback index and the notification controller's alerts to a real webhook receiver.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{T0, Ternd, eventually};
use serde_json::{Value, json};
use tern_testing::http::{HttpServer, Request, Response};

const SCRIPT: &str = r#"kind: installer
version: v1
metadata: {name: script}
spec:
  type: local-script
  local_script:
    env: {VERSION: "{target.version}"}
    script: 'apt-get install -y "myagent=${VERSION:?}"'
    timeout: 5m
"#;

const NATIVE: &str =
    "kind: installer\nversion: v1\nmetadata: {name: native}\nspec: {type: tern-update}\n";

const CONFIG: &str = r#"kind: version_control_config
version: v1
metadata: {name: version-control-config}
spec:
  enabled: true
  rolling_install: {rate: 2/m, fault_limit: "1", churn_limit: "1"}
  promotion: {strategy: manual, approvals: 1, pending_ttl: 1h}
  timings: {trigger_timeout: 5m, recent: 10m, offline_after: 2m, settle: 1m}
"#;

/// The directives ignore the maintenance windows of the rollout the test also writes
/// (its groups' windows are not what these tests are about; directives_in_time.rs in
/// tern-e2e is).
fn draft(version: &str) -> String {
    format!(
        r#"kind: version_directive
version: v1
metadata: {{name: static}}
spec:
  directives:
    - name: staging
      selectors: [{{labels: {{env: staging}}}}]
      targets: [{{version: "{version}", arch: amd64}}]
      installers: [native, script]
      windows: ignore
    - name: prod
      selectors: [{{labels: {{env: prod}}}}]
      targets: [{{version: "{version}"}}]
      installers: [script]
      windows: ignore
"#
    )
}

struct Fleet {
    tmp: tempfile::TempDir,
    a: Ternd,
    b: Ternd,
    agent: String,
    /// What both replicas' `--notify-webhook` receiver got.
    notices: std::sync::mpsc::Receiver<Value>,
}

impl Fleet {
    fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("shared").join("tern.db");
        let backend: &'static str = Box::leak(format!("sqlite:{}", db.display()).into_boxed_str());
        let (hook, notices) = common::receiver();
        let hook: &'static str = Box::leak(hook.into_boxed_str());
        let args = |id: &'static str| {
            [
                "--backend",
                backend,
                "--replica-id",
                id,
                "--dev-clock",
                T0,
                "--notify-webhook",
                hook,
            ]
        };
        let a = Ternd::start(&tmp.path().join("a"), &args("a"));
        let mut b = Ternd::start(&tmp.path().join("b"), &args("b"));
        b.token = a.token.clone();
        let agent = a.new_token("agent");
        Fleet {
            tmp,
            a,
            b,
            agent,
            notices,
        }
    }

    /// Kills replica a (SIGKILL: no goodbye) and starts it again on the same store; its
    /// inventory starts empty.
    fn restart_a(&mut self) {
        self.a.kill9();
        let db = self.tmp.path().join("shared").join("tern.db");
        let backend = format!("sqlite:{}", db.display());
        self.a = Ternd::start(
            &self.tmp.path().join("a"),
            &[
                "--backend",
                &backend,
                "--replica-id",
                "a",
                "--dev-clock",
                T0,
            ],
        );
        self.a.token = self.b.token.clone();
    }

    fn replica(&self, r: usize) -> &Ternd {
        if r == 0 { &self.a } else { &self.b }
    }

    /// Host `i`'s heartbeat to replica `r`; returns the answer.
    fn beat(&self, i: usize, r: usize, version: &str, extra: Value) -> Value {
        let env = match i {
            0..=3 => Some("staging"),
            4..=6 => Some("prod"),
            _ => None,
        };
        let mut body = json!({
            "updater_id": format!("h{i}"), "host_id": format!("m{i}"),
            "hostname": format!("h{i}.example"), "group": "default", "version": version,
            "arch": "amd64", "os": "linux", "installers": ["tern-update", "local-script"],
        });
        if let Some(env) = env {
            body["labels"] = json!({ "env": env });
        }
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let (s, v) = self.replica(r).call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&self.agent),
            Some(&body.to_string()),
        );
        assert_eq!(s, 200, "heartbeat h{i}: {v}");
        v
    }

    fn pass(&self, r: usize) -> Value {
        self.replica(r).op("POST", "/v1/dev/directives", None)
    }

    fn advance(&self, d: &str) {
        let now = self.a.advance(d);
        eventually("b at the shared time", || {
            self.b.op("GET", "/v1/dev/clock", None)["now"] == now.as_str()
        });
    }

    /// updater_id → install state, over both replicas' inventories.
    fn states(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for r in [&self.a, &self.b] {
            for a in r.op("GET", "/v1/inventory", None)["agents"]
                .as_array()
                .unwrap()
            {
                if let Some(s) = a["install_state"].as_str() {
                    out.insert(a["updater_id"].as_str().unwrap().to_string(), s.to_string());
                }
            }
        }
        out
    }
}

/// Hosts 0-3 heartbeat to replica a, 4-7 to b; host 0 also to b (it moved), so both
/// replicas hold it.
fn beat_all(
    f: &Fleet,
    versions: &BTreeMap<usize, &str>,
    extra: &BTreeMap<usize, Value>,
) -> BTreeMap<usize, Value> {
    let mut answers = BTreeMap::new();
    for i in 0..8 {
        let v = versions.get(&i).copied().unwrap_or("1.1.0");
        let e = extra.get(&i).cloned().unwrap_or(json!({}));
        let r = usize::from(i >= 4);
        let answer = f.beat(i, r, v, e.clone());
        if answer.get("install").is_some() {
            answers.insert(i, answer["install"].clone());
        }
        if i == 0 {
            let answer = f.beat(0, 1, v, e);
            if answer.get("install").is_some() {
                answers.insert(i, answer["install"].clone());
            }
        }
    }
    answers
}

#[test]
fn plan_apply_install_states_faults_and_one_trigger_per_host() {
    let f = Fleet::start();
    let none: BTreeMap<usize, &str> = BTreeMap::new();
    let no_extra: BTreeMap<usize, Value> = BTreeMap::new();
    beat_all(&f, &none, &no_extra);
    // A fleet without directives: a pass does nothing, not even a report.
    f.pass(0);
    assert_eq!(f.a.op("GET", "/v1/directives", None)["replicas"], 0);

    // Resources, validated with the field named; a hostile target never gets stored.
    f.a.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    f.a.op("PUT", "/v1/directives/installers/native", Some(NATIVE));
    f.a.op("PUT", "/v1/directives/config", Some(CONFIG));
    let (s, v) = f.a.call(
        "PUT",
        "/v1/directives/drafts/static",
        Some(&f.a.token),
        Some(&draft("1.1.0;rm -rf /")),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v.to_string()
            .contains("spec.directives[0].targets[0].version"),
        "{v}"
    );
    f.a.op("PUT", "/v1/directives/drafts/static", Some(&draft("1.2.0")));

    // Plan: both replicas evaluate the draft over their hosts; nothing moves.
    let pending = f.a.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    let nonce = pending["nonce"].as_str().unwrap().to_string();
    f.pass(0);
    f.pass(1);
    let plan = f.a.op("GET", "/v1/directives/plan", None);
    assert_eq!(
        (plan["replicas"].as_u64(), plan["evaluated_by"].as_u64()),
        (Some(2), Some(2)),
        "{plan}"
    );
    let e = &plan["evaluation"];
    // Host 0 is held by both replicas: 9 host records over the two, 8 hosts.
    assert_eq!(e["governed"], 8, "{plan}");
    assert_eq!(e["unaffected"], 1, "{plan}");
    let moves: BTreeMap<(String, String), u64> = e["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                (
                    m["directive"].as_str().unwrap().to_string(),
                    m["installer"].as_str().unwrap().to_string(),
                ),
                m["hosts"].as_u64().unwrap(),
            )
        })
        .collect();
    // staging: the native installer needs size and sha256, so the script installs it.
    assert_eq!(
        moves,
        BTreeMap::from([
            (("prod".into(), "script".into()), 3),
            (("staging".into(), "script".into()), 5),
        ]),
        "{plan}"
    );
    assert_eq!(plan["active"]["governed"], 0, "nothing active yet");
    assert!(
        f.states().is_empty(),
        "no directive governs anyone before apply"
    );
    assert!(
        beat_all(&f, &none, &no_extra).is_empty(),
        "no instruction before apply"
    );

    // The rollout serves the hosts until a directive governs them.
    f.a.put_resource(
        "version",
        &common::version_yaml("1.1.0", "1.1.0", "regular"),
    );
    f.a.reconcile();
    assert_eq!(f.a.find("default", "h0").0, "1.1.0");

    // A wrong nonce is refused; the right one promotes.
    let (s, v) = f.a.call(
        "POST",
        "/v1/directives/apply",
        Some(&f.a.token),
        Some(r#"{"nonce":"nope"}"#),
    );
    assert_eq!(s, 409, "{v}");
    let applied = f.b.op(
        "POST",
        "/v1/directives/apply",
        Some(&json!({"nonce": nonce}).to_string()),
    );
    assert_eq!(applied["applied"], true, "{applied}");

    // Before settling (1m connected), nobody is triggered: all need an install.
    f.pass(0);
    f.pass(1);
    let states = f.states();
    assert_eq!(states.len(), 7, "{states:?}");
    assert!(states.values().all(|s| s == "NeedsInstall"), "{states:?}");
    // Governed hosts get no version from the rollout (it would undo the directive's
    // installs); the unlabelled host 7 still does.
    assert_eq!(f.a.find("default", "h0"), (String::new(), false));
    assert_eq!(f.b.find("default", "h7").0, "1.1.0");

    // A global freeze holds the loop: settled hosts are not triggered while it holds,
    // on either replica.
    f.a.op("PUT", "/v1/freeze", Some(r#"{"reason": "incident 42"}"#));
    eventually("both replicas hold the freeze", || {
        f.pass(0)["frozen"] == true && f.pass(1)["frozen"] == true
    });
    f.advance("61s");
    beat_all(&f, &none, &no_extra);
    for r in [0, 1] {
        let pass = f.pass(r);
        assert_eq!(pass["triggered"], json!([]), "frozen: {pass}");
    }
    assert!(
        f.states().values().all(|s| s == "NeedsInstall"),
        "{:?}",
        f.states()
    );
    f.a.op("DELETE", "/v1/freeze", None);

    // Lifted: each replica starts at most 2 a minute (its bucket holds a minute's
    // worth, and did not fill while frozen); each host is triggered once, whichever
    // replica holds it. The passes that see the lift may already trigger.
    let mut triggered: Vec<String> = Vec::new();
    eventually("both replicas see the freeze lifted", || {
        let mut lifted = true;
        for r in [0, 1] {
            let pass = f.pass(r);
            lifted &= pass["frozen"] == false;
            for h in pass["triggered"].as_array().unwrap() {
                triggered.push(h.as_str().unwrap().to_string());
            }
        }
        lifted
    });
    assert!(triggered.len() <= 4, "past the rate: {triggered:?}");
    for _ in 0..5 {
        f.advance("60s");
        beat_all(&f, &none, &no_extra);
        let mut this_round = 0;
        for r in [0, 1] {
            for h in f.pass(r)["triggered"].as_array().unwrap() {
                triggered.push(h.as_str().unwrap().to_string());
                this_round += 1;
            }
        }
        assert!(this_round <= 4, "past the rate: {triggered:?}");
        if triggered.len() >= 7 {
            break;
        }
    }
    let unique: BTreeSet<&String> = triggered.iter().collect();
    assert_eq!(
        unique.len(),
        triggered.len(),
        "a host triggered twice: {triggered:?}"
    );
    assert_eq!(unique.len(), 7, "{triggered:?}");
    let states = f.states();
    assert!(
        states.values().all(|s| s == "InstallTriggered"),
        "{states:?}"
    );

    // The instructions arrive in the heartbeat answers, again until a result comes.
    let answers = beat_all(&f, &none, &no_extra);
    assert_eq!(answers.len(), 7, "{answers:?}");
    let i0 = &answers[&0];
    assert_eq!(i0["installer_name"], "script");
    assert_eq!(
        i0["installer"]["local_script"]["env"]["VERSION"],
        "{target.version}"
    );
    assert_eq!(i0["target"]["version"], "1.2.0");
    let attempt = |i: usize| answers[&i]["attempt_id"].as_str().unwrap().to_string();

    // A freeze withholds the instructions already triggered; the lift hands them out
    // again, the same attempts.
    f.b.op("PUT", "/v1/freeze", Some(r#"{"reason": "incident 43"}"#));
    eventually("both replicas hold the freeze", || {
        f.pass(0)["frozen"] == true && f.pass(1)["frozen"] == true
    });
    let held = beat_all(&f, &none, &no_extra);
    assert!(held.is_empty(), "an instruction while frozen: {held:?}");
    f.b.op("DELETE", "/v1/freeze", None);
    eventually("both replicas see the freeze lifted", || {
        f.pass(0)["frozen"] == false && f.pass(1)["frozen"] == false
    });
    let again = beat_all(&f, &none, &no_extra);
    assert_eq!(again.len(), 7, "{again:?}");
    for (i, x) in &again {
        assert_eq!(x["attempt_id"], answers[i]["attempt_id"], "host {i}");
    }

    // Hosts 0, 4, 5: installed. Host 1: the script failed. Host 2: goes silent.
    let versions: BTreeMap<usize, &str> = [(0, "1.2.0"), (4, "1.2.0"), (5, "1.2.0")].into();
    let mut results: BTreeMap<usize, Value> = BTreeMap::new();
    for i in [0, 4, 5] {
        results.insert(
            i,
            json!({"install_result": {"attempt_id": attempt(i), "success": true}}),
        );
    }
    results.insert(1, json!({"install_result": {"attempt_id": attempt(1), "success": false, "error": "script exited with 1"}}));
    let mut answers = BTreeMap::new();
    for i in [0, 1, 3, 4, 5, 6, 7] {
        let v = versions.get(&i).copied().unwrap_or("1.1.0");
        let e = results.get(&i).cloned().unwrap_or(json!({}));
        if i == 0 {
            // Host 0 talks to both replicas, as in beat_all.
            f.beat(0, 1, v, e.clone());
        }
        let a = f.beat(i, usize::from(i >= 4), v, e);
        if let Some(x) = a.get("install") {
            answers.insert(i, x.clone());
        }
    }
    assert!(
        !answers.contains_key(&0) && !answers.contains_key(&1),
        "a result ends the resending: {answers:?}"
    );
    f.pass(0);
    f.pass(1);
    let states = f.states();
    assert_eq!(states["h0"], "RecentInstall", "{states:?}");
    assert_eq!(states["h4"], "RecentInstall", "{states:?}");
    assert_eq!(states["h1"], "ExplicitInstallFault", "{states:?}");
    assert_eq!(states["h3"], "InstallTriggered", "{states:?}");
    // The error the host reported is shown with it.
    let inv = f.a.op("GET", "/v1/inventory", None);
    let h1 = inv["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["updater_id"] == "h1")
        .unwrap();
    assert_eq!(
        h1["install_result"]["error"], "script exited with 1",
        "{h1}"
    );

    // Host 2 silent for 2m30s: churned (a replica forgets a host after three missed
    // heartbeats, so churn shows between offline_after and that). One churn and one
    // fault are within the limits: no pause.
    let beat_rest = |f: &Fleet| {
        for i in [0, 1, 3, 4, 5, 6, 7] {
            let v = versions.get(&i).copied().unwrap_or("1.1.0");
            let e = results.get(&i).cloned().unwrap_or(json!({}));
            if i == 0 {
                f.beat(0, 1, v, e.clone());
            }
            f.beat(i, usize::from(i >= 4), v, e);
        }
    };
    f.advance("150s");
    beat_rest(&f);
    assert!(f.pass(0)["paused"].is_null());
    f.pass(1);
    let states = f.states();
    assert_eq!(states["h2"], "ChurnedDuringInstall", "{states:?}");
    assert_eq!(states["h1"], "ExplicitInstallFault", "{states:?}");

    // Hosts 3 and 6 never report: past trigger_timeout they are implicit faults,
    // 3 faults > 1, and the loop pauses with an alert.
    f.advance("4m");
    beat_rest(&f);
    let p0 = f.pass(0);
    f.pass(1);
    let states = f.states();
    assert_eq!(states["h3"], "ImplicitInstallFault", "{states:?}");
    assert_eq!(states["h6"], "ImplicitInstallFault", "{states:?}");
    assert!(
        p0["paused"]
            .as_str()
            .unwrap_or_default()
            .contains("fault limit"),
        "{p0}"
    );
    let status = f.a.op("GET", "/v1/directives", None);
    assert!(
        status["paused"]["reason"]
            .as_str()
            .unwrap()
            .contains("installs paused"),
        "{status}"
    );
    let metrics = f.a.raw("GET", "/metrics", None, None).2;
    assert!(
        metrics.contains("tern_directive_hosts{state=\"explicit_install_fault\"} 1"),
        "{metrics}"
    );
    // The alert reached the webhook, once, though both replicas passed.
    let hear = || {
        f.notices
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap()
    };
    let n = hear();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("raised"), Some("directive_installs_paused")),
        "{n}"
    );
    assert!(
        n["alert"]["message"]
            .as_str()
            .unwrap()
            .contains("fault limit"),
        "{n}"
    );

    // Resumed by an operator; after `recent`, the installed hosts are at parity.
    f.a.op("POST", "/v1/directives/resume", None);
    assert!(f.a.op("GET", "/v1/directives", None)["paused"].is_null());
    let n = hear();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("cleared"), Some("directive_installs_paused")),
        "the resume is announced, and nothing else came in between: {n}"
    );
    f.advance("5m");
    for i in [0, 4, 5] {
        if i == 0 {
            f.beat(0, 1, "1.2.0", results[&0].clone());
        }
        f.beat(i, usize::from(i >= 4), "1.2.0", results[&i].clone());
    }
    f.pass(0);
    f.pass(1);
    let states = f.states();
    assert_eq!(states["h0"], "VersionParity", "{states:?}");
    assert_eq!(states["h5"], "VersionParity", "{states:?}");

    // Deactivated: the next pass clears every state, find serves the rollout again,
    // and the pass after does nothing.
    f.a.op("DELETE", "/v1/directives/active", None);
    f.pass(0);
    f.pass(1);
    assert!(f.states().is_empty(), "{:?}", f.states());
    assert_eq!(f.a.find("default", "h0").0, "1.1.0");
}

#[test]
fn a_dry_run_plan_checks_each_host_once_and_installs_nothing() {
    let f = Fleet::start();
    let none: BTreeMap<usize, &str> = BTreeMap::new();
    let no_extra: BTreeMap<usize, Value> = BTreeMap::new();
    beat_all(&f, &none, &no_extra);
    f.a.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    f.a.op("PUT", "/v1/directives/installers/native", Some(NATIVE));
    f.a.op("PUT", "/v1/directives/config", Some(CONFIG));
    f.a.op("PUT", "/v1/directives/drafts/static", Some(&draft("1.2.0")));
    let pending = f.a.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static", "dry_run": true}).to_string()),
    );
    assert_eq!(pending["dry_run"], true, "{pending}");
    let nonce = pending["nonce"].as_str().unwrap().to_string();

    // Dry runs go at the install rate, to settled hosts, once per host and plan
    // whichever replica holds the host (host 0 is held by both).
    let mut sent: BTreeMap<usize, String> = BTreeMap::new();
    for round in 0..6 {
        f.advance(if round == 0 { "61s" } else { "60s" });
        for (i, install) in beat_all(&f, &none, &no_extra) {
            assert_eq!(install["dry_run"], true, "only dry runs: {install}");
            assert_eq!(install["target"]["version"], "1.2.0");
            let id = install["attempt_id"].as_str().unwrap().to_string();
            if let Some(before) = sent.insert(i, id.clone()) {
                assert_eq!(before, id, "host {i} got a second dry run");
            }
        }
        let mut this_round = 0;
        for r in [0, 1] {
            let p = f.pass(r);
            assert!(p["triggered"].as_array().unwrap().is_empty(), "{p}");
        }
        for (i, install) in beat_all(&f, &none, &no_extra) {
            let id = install["attempt_id"].as_str().unwrap().to_string();
            if sent.insert(i, id.clone()).is_none() {
                this_round += 1;
            }
        }
        assert!(this_round <= 4, "past the rate in round {round}");
        if sent.len() == 7 {
            break;
        }
    }
    assert_eq!(sent.len(), 7, "every governed host checked: {sent:?}");
    assert!(
        !sent.contains_key(&7),
        "the unlabelled host is not governed"
    );

    // Answers: host 1's check fails, the rest pass. The checks stop being resent.
    let extra: BTreeMap<usize, Value> = sent
        .iter()
        .map(|(i, id)| {
            let ok = *i != 1;
            let err = if ok {
                ""
            } else {
                "script exited with 2: syntax error"
            };
            (
                *i,
                json!({"install_result": {"attempt_id": id, "success": ok, "error": err}}),
            )
        })
        .collect();
    assert!(
        beat_all(&f, &none, &extra).is_empty(),
        "answered: not resent"
    );
    f.pass(0);
    f.pass(1);
    let plan = f.a.op("GET", "/v1/directives/plan", None);
    let d = &plan["dry_run"];
    // Host 0 is counted by both replicas that hold it.
    assert_eq!(
        (d["sent"].as_u64(), d["failed"].as_u64()),
        (Some(8), Some(1)),
        "{plan}"
    );
    assert_eq!(d["passed"], 7, "{plan}");
    assert_eq!(d["failures"][0]["hostname"], "h1.example", "{plan}");
    assert!(
        d["failures"][0]["error"]
            .as_str()
            .unwrap()
            .contains("syntax error"),
        "{plan}"
    );

    // Nothing was installed or recorded as an attempt: after apply every host still
    // needs its install, and is triggered at once (no recent attempt to wait out).
    assert!(f.states().is_empty(), "no directive governs anyone yet");
    f.a.op(
        "POST",
        "/v1/directives/apply",
        Some(&json!({"nonce": nonce}).to_string()),
    );
    f.pass(0);
    let states = f.states();
    assert!(
        states
            .values()
            .all(|s| s == "NeedsInstall" || s == "InstallTriggered"),
        "{states:?}"
    );
    let answers = beat_all(&f, &none, &extra);
    assert!(
        answers.values().all(|i| i["dry_run"] != true),
        "after apply, only installs: {answers:?}"
    );
    assert!(!answers.is_empty(), "{answers:?}");
}

#[test]
fn a_restarted_replica_finds_the_attempts_in_flight_and_triggers_nobody_twice() {
    let mut f = Fleet::start();
    let none: BTreeMap<usize, &str> = BTreeMap::new();
    let no_extra: BTreeMap<usize, Value> = BTreeMap::new();
    beat_all(&f, &none, &no_extra);
    f.a.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    f.a.op("PUT", "/v1/directives/config", Some(CONFIG));
    f.a.op("PUT", "/v1/directives/drafts/static", Some(&draft("1.2.0")));
    let pending = f.a.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    f.a.op(
        "POST",
        "/v1/directives/apply",
        Some(&json!({"nonce": pending["nonce"]}).to_string()),
    );
    // Two minutes of a's passes: it triggers hosts 0-3 (its four), within its rate.
    let mut on_a: BTreeSet<String> = BTreeSet::new();
    for d in ["61s", "60s", "60s"] {
        f.advance(d);
        beat_all(&f, &none, &no_extra);
        for h in f.pass(0)["triggered"].as_array().unwrap() {
            on_a.insert(h.as_str().unwrap().to_string());
        }
    }
    assert!(on_a.len() >= 2, "{on_a:?}");
    // Host 1 took its instruction and failed; the others are still installing.
    let answers = beat_all(&f, &none, &no_extra);
    let failed = "h1".to_string();
    assert!(on_a.contains(&failed), "{on_a:?}");
    let extra: BTreeMap<usize, Value> = [(
        1,
        json!({"install_result": {"attempt_id": answers[&1]["attempt_id"], "success": false,
               "error": "script exited with 1"}}),
    )]
    .into();
    beat_all(&f, &none, &extra);

    // Replica a dies and comes back with an empty inventory; its hosts heartbeat again.
    f.restart_a();
    beat_all(&f, &none, &extra);
    let p = f.pass(0);
    assert!(p["triggered"].as_array().unwrap().is_empty(), "{p}");
    // From its first pass, before any host has settled again, the restarted replica
    // shows where each host stands: the attempts are read from the store, not forgotten.
    let states = f.a.op("GET", "/v1/inventory", None)["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["updater_id"].as_str().unwrap().to_string(),
                a["install_state"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect::<BTreeMap<_, _>>();
    for h in &on_a {
        let want = if *h == failed {
            "ExplicitInstallFault"
        } else {
            "InstallTriggered"
        };
        assert_eq!(states[h], want, "{h}: {states:?}");
    }
    // Settled again: still nobody it triggered before is triggered a second time.
    f.advance("61s");
    beat_all(&f, &none, &extra);
    let again = f.pass(0)["triggered"].as_array().unwrap().clone();
    for h in &again {
        assert!(!on_a.contains(h.as_str().unwrap()), "{h} triggered twice");
    }
}

/// A release index on loopback (a stand-in for a release server: the same hardened
/// client reads GitHub's API); serves whatever the test last put in it.
fn index_server() -> (String, std::sync::Arc<std::sync::Mutex<String>>) {
    let body = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let served = std::sync::Arc::clone(&body);
    let server = HttpServer::start(move |_: &Request| {
        Response::new(200, served.lock().unwrap().clone())
            .header("content-type", "application/json")
    });
    (format!("{}/agent/index.json", server.url()), body)
}

fn index(releases: &[(&str, bool, bool)]) -> String {
    let list: Vec<Value> = releases
        .iter()
        .map(|(tag, pre, security)| {
            json!({"tag": tag, "prerelease": pre, "security": security,
                   "url": format!("https://dl.example/agent-{tag}.tar.gz")})
        })
        .collect();
    json!({ "releases": list }).to_string()
}

#[test]
fn the_releases_controller_drafts_and_the_notification_controller_alerts() {
    let (index_url, served) = index_server();
    *served.lock().unwrap() = index(&[
        ("v1.0.0", false, false),
        ("v1.2.0", false, true),
        ("v1.3.0-rc.1", true, false),
    ]);
    let (hook, notices) = common::receiver();
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", T0, "--notify-webhook", &hook],
    );
    let agent = t.new_token("agent");
    let beat = |id: &str, env: &str, v: &str| {
        t.heartbeat_with(&agent, id, "default", v, json!({"labels": {"env": env}}));
    };
    let beat_all = |h01: &str| {
        beat("h0", "prod", h01);
        beat("h1", "prod", h01);
        beat("h2", "prod", "1.2.0");
        beat("h3", "staging", "1.0.0");
    };
    beat_all("1.0.0");
    t.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    let config = format!(
        r#"kind: version_control_config
version: v1
metadata: {{name: version-control-config}}
spec:
  enabled: true
  notification: {{from: releases, alert_on: [security]}}
  releases:
    index: {index_url}
    allow_http: true
    period: 10m
    directives:
      - {{name: prod, version: "1.*", selectors: [{{labels: {{env: prod}}}}], installers: [script]}}
"#
    );
    t.op("PUT", "/v1/directives/config", Some(&config));

    // The controller drafts the newest 1.x that is not a pre-release; the security
    // release flags what is older in its major.
    let run = t.op("POST", "/v1/dev/controllers", None);
    assert_eq!(
        (run["leader"].as_bool(), run["wrote"].as_bool()),
        (Some(true), Some(true)),
        "{run}"
    );
    let d = t.op("GET", "/v1/directives/drafts/releases", None);
    assert_eq!(
        d["spec"]["directives"][0]["targets"][0]["version"], "1.2.0",
        "{d}"
    );
    assert_eq!(
        d["spec"]["advisories"][0]["versions"], ">=1.0.0, <1.2.0",
        "{d}"
    );
    let revision = d["metadata"]["revision"].clone();
    // Nothing changed upstream: the draft is not rewritten (a pending plan of it stays valid).
    let run = t.op("POST", "/v1/dev/controllers", None);
    assert_eq!(run["wrote"], false, "{run}");
    let d = t.op("GET", "/v1/directives/drafts/releases", None);
    assert_eq!(d["metadata"]["revision"], revision);

    // Notification only: the pass flags h0 and h1 and installs nothing (no directive is
    // active); the webhook hears the alert once.
    let p = t.op("POST", "/v1/dev/directives", None);
    assert!(p["triggered"].as_array().unwrap().is_empty(), "{p}");
    let st = t.op("GET", "/v1/directives", None);
    assert!(st["active"].is_null(), "{st}");
    let flags: BTreeSet<(String, String, u64)> = st["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["version"].as_str().unwrap().to_string(),
                n["kind"].as_str().unwrap().to_string(),
                n["hosts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        BTreeSet::from([
            ("1.0.0".into(), "outdated".into(), 2),
            ("1.0.0".into(), "security".into(), 2)
        ]),
        "{st}"
    );
    assert_eq!(st["controllers"][0]["targets"]["prod"], "1.2.0", "{st}");
    let n = notices
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("raised"), Some("directive_versions_security")),
        "{n}"
    );
    let message = n["alert"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 hosts") && message.contains("1.0.0"),
        "{message}"
    );
    let inv = t.op("GET", "/v1/inventory", None);
    assert!(
        inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["install_state"].is_null()),
        "notification only: no host has an install state: {inv}"
    );

    // A new release: the draft follows. The hosts reach it: the alert clears.
    *served.lock().unwrap() = index(&[("v1.2.0", false, true), ("v1.2.1", false, false)]);
    let run = t.op("POST", "/v1/dev/controllers", None);
    assert_eq!(run["wrote"], true, "{run}");
    let d = t.op("GET", "/v1/directives/drafts/releases", None);
    assert_eq!(d["spec"]["directives"][0]["targets"][0]["version"], "1.2.1");
    beat_all("1.2.1");
    t.op("POST", "/v1/dev/directives", None);
    let n = notices
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        (n["event"].as_str(), n["alert"]["kind"].as_str()),
        (Some("cleared"), Some("directive_versions_security")),
        "{n}"
    );

    // A broken source: the error is kept and shown, the draft stays as it was.
    *served.lock().unwrap() = "<html>maintenance</html>".into();
    let run = t.op("POST", "/v1/dev/controllers", None);
    let err = run["status"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("not a release list"), "{run}");
    let d2 = t.op("GET", "/v1/directives/drafts/releases", None);
    assert_eq!(d2["metadata"]["revision"], d["metadata"]["revision"]);
    let st = t.op("GET", "/v1/directives", None);
    assert!(st["controllers"][0]["error"].is_string(), "{st}");
}

/// Past 64 hosts new to a replica, their attempt records are read with one listing:
/// after a restart, 70 hosts in flight all show where they stand from the first pass.
#[test]
fn a_restart_with_many_hosts_in_flight_reads_their_attempts_in_one_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut t = Ternd::start(&dir, &["--dev-clock", T0]);
    let agent = t.new_token("agent");
    let beat_all = |t: &Ternd| {
        for i in 0..70 {
            t.heartbeat_with(
                &agent,
                &format!("m{i}"),
                "default",
                "1.1.0",
                json!({"labels": {"env": "prod"}, "installers": ["local-script"]}),
            );
        }
    };
    beat_all(&t);
    t.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    t.op(
        "PUT",
        "/v1/directives/config",
        Some(&CONFIG.replace("rate: 2/m", "rate: 100/m")),
    );
    t.op("PUT", "/v1/directives/drafts/static", Some(&draft("1.2.0")));
    let pending = t.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    t.op(
        "POST",
        "/v1/directives/apply",
        Some(&json!({"nonce": pending["nonce"]}).to_string()),
    );
    // The first pass starts the rate's bucket (nobody has settled yet); a minute
    // later it holds a minute's worth.
    t.op("POST", "/v1/dev/directives", None);
    t.advance("61s");
    beat_all(&t);
    let p = t.op("POST", "/v1/dev/directives", None);
    assert_eq!(p["triggered"].as_array().unwrap().len(), 70, "{p}");

    t.kill9();
    let token = t.token.clone();
    t = Ternd::start(&dir, &["--dev-clock", T0]);
    t.token = token;
    beat_all(&t);
    let p = t.op("POST", "/v1/dev/directives", None);
    assert!(p["triggered"].as_array().unwrap().is_empty(), "{p}");
    let inv = t.op("GET", "/v1/inventory", None);
    let states: BTreeSet<&str> = inv["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["install_state"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(states, BTreeSet::from(["InstallTriggered"]), "{inv}");
}

/// find tells a host a directive governs "no version, held by a directive" on every
/// replica and right after a restart, from the facts the host sends with find (the
/// replica's snapshot holds the active directive): it no longer depends on one
/// replica's memory of the host's heartbeats.
#[test]
fn find_tells_a_governed_host_so_right_after_a_restart_by_its_facts() {
    let mut f = Fleet::start();
    f.a.put_resource(
        "version",
        &common::version_yaml("1.0.0", "1.1.0", "regular"),
    );
    f.a.reconcile();
    let none: BTreeMap<usize, &str> = BTreeMap::new();
    let no_extra: BTreeMap<usize, Value> = BTreeMap::new();
    beat_all(&f, &none, &no_extra);
    f.a.op("PUT", "/v1/directives/installers/script", Some(SCRIPT));
    f.a.op("PUT", "/v1/directives/installers/native", Some(NATIVE));
    f.a.op("PUT", "/v1/directives/config", Some(CONFIG));
    f.a.op("PUT", "/v1/directives/drafts/static", Some(&draft("1.2.0")));
    let pending = f.a.op(
        "POST",
        "/v1/directives/plan",
        Some(&json!({"draft": "static"}).to_string()),
    );
    f.a.op(
        "POST",
        "/v1/directives/apply",
        Some(&json!({"nonce": pending["nonce"]}).to_string()),
    );
    let facts = |labels: &str| {
        format!(
            "version=1.1.0&arch=amd64&os=linux&installer=tern-update&installer=local-script{labels}"
        )
    };
    let find = |t: &Ternd, id: &str, facts: &str| {
        let (s, v) = t.call(
            "GET",
            &format!("/v1/webapi/find?group=default&updater_id={id}&{facts}"),
            None,
            None,
        );
        assert_eq!(s, 200, "{v}");
        (
            v["auto_update"]["agent_version"]
                .as_str()
                .unwrap()
                .to_string(),
            v["auto_update"]["agent_hold"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    let governed = (String::new(), "directive".to_string());
    // h5 (env=prod) heartbeats to b only; a never heard of it: a answers it as b would.
    assert_eq!(find(&f.a, "h5", &facts("&label=env%3Dprod")), governed);
    eventually("b's snapshot has the directive", || {
        find(&f.b, "h5", &facts("&label=env%3Dprod")) == governed
    });
    // Restarted with an empty inventory, before any heartbeat: the same answer.
    f.restart_a();
    assert_eq!(find(&f.a, "h0", &facts("&label=env%3Dstaging")), governed);
    // A host no directive selects follows the rollout.
    let (version, hold) = find(&f.a, "h7", &facts(""));
    assert!(!version.is_empty());
    assert_ne!(hold, "directive");
}
