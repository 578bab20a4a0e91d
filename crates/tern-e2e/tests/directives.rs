//! Version directives (RFD 90) end to end on a real local fleet: two ternd replicas on
//! one SQLite file (one shared dev clock), and 8 labelled hosts each running the real
//! `tern-update` with the `local-script` installer opted in; hosts 0-3 heartbeat to
//! replica A, 4-7 to replica B. The installer's script records what it got (its
//! version and its whole environment) in the host's dir, and fails where the test put
//! a marker file. Time moves only by the dev clock, in one-minute ticks: each tick
//! every live host runs `tern-update update` (its timer), then each replica runs one
//! pass of its directive loop (`POST /v1/dev/directives`).
//!
//! Covered: a hostile draft is refused naming the field; the plan's counts over both
//! replicas, with nothing moving before `apply`; a host's walk needs-install →
//! triggered → recent → parity; a script exiting 1 is an explicit fault with its error;
//! a host killed after its trigger is a churn after `offline_after`; the fault limit
//! pauses the loop (latched) until an operator resumes; no host is ever triggered twice,
//! and no script runs twice on a host. A dry-run plan has each host check its script
//! (`sh -n`) once, reports the broken one, and runs nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tern_e2e::ternd::Ctl;
use tern_e2e::{Fleet, FleetOptions};

/// The installer's script: `$0` is its private file in the host's namespace dir
/// (`<root>/opt/default/`), so the host's root is two levels up. It appends one line per
/// run, keeps its exact environment, and fails where the test put `fail-install`.
const SCRIPT: &str = r#"kind: installer
version: v1
metadata: {name: record}
spec:
  type: local-script
  local_script:
    env: {VERSION: "{target.version}"}
    shell: /bin/sh
    script: |
      root="$(dirname "$0")/../.."
      echo "VERSION=$VERSION" >> "$root/script-runs.log"
      tr '\0' '\n' < /proc/$$/environ > "$root/script-env.txt"
      if [ -e "$root/fail-install" ]; then
        echo "cannot install myagent $VERSION here" >&2
        exit 1
      fi
      exit 0
    timeout: 1m
"#;

/// tern-update's own installer: it refuses a target without size and sha256, so the
/// staging directive falls through to the script.
const NATIVE: &str =
    "kind: installer\nversion: v1\nmetadata: {name: native}\nspec: {type: tern-update}\n";

/// One install per minute per replica; more than one fault or one churn pauses.
/// offline_after (2m) is shorter than the three missed heartbeats (3m at ternd's
/// default 60s interval) after which a replica forgets a host.
fn config(enabled: bool, fault_limit: &str) -> String {
    format!(
        r#"kind: version_control_config
version: v1
metadata: {{name: version-control-config}}
spec:
  enabled: {enabled}
  rolling_install: {{rate: 1/m, fault_limit: "{fault_limit}", churn_limit: "1"}}
  promotion: {{strategy: manual, approvals: 1, pending_ttl: 1h}}
  timings: {{trigger_timeout: 5m, recent: 10m, offline_after: 2m, settle: 1m}}
"#
    )
}

fn draft(version: &str) -> String {
    format!(
        r#"kind: version_directive
version: v1
metadata: {{name: static}}
spec:
  directives:
    - name: staging
      selectors: [{{labels: {{env: staging}}}}]
      targets: [{{version: "{version}"}}]
      installers: [native, record]
    - name: prod
      selectors: [{{labels: {{env: prod}}}}]
      targets: [{{version: "{version}"}}]
      installers: [record]
"#
    )
}

/// (name, replica, env label, fails). Inventory order on each replica is enrollment
/// order, and the loop triggers in it: A triggers h0, h1, h2, h3 a minute apart, B
/// h4, h5, h6 (h7 has no label: no directive governs it).
const HOSTS: [(&str, usize, Option<&str>, bool); 8] = [
    ("h0", 0, Some("staging"), false),
    ("h1", 0, Some("staging"), true),
    ("h2", 0, Some("prod"), true),
    ("h3", 0, Some("prod"), false),
    ("h4", 1, Some("staging"), false),
    ("h5", 1, Some("staging"), false),
    ("h6", 1, Some("prod"), false),
    ("h7", 1, None, false),
];

/// A plain HTTP/1.0 request to a replica: (status, JSON body or the text as a string).
fn http(addr: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: ternd\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/yaml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let v = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
    (status, v)
}

struct World {
    fleet: Fleet,
    token: String,
    /// Every updater id any pass triggered, in order.
    triggered: Vec<String>,
    /// updater id → host name.
    names: BTreeMap<String, String>,
}

impl World {
    fn addr(&self, r: usize) -> SocketAddr {
        if r == 0 {
            self.fleet.ternd.addr
        } else {
            self.fleet.replicas[r - 1].ternd.addr
        }
    }

    fn ctl(&self, r: usize) -> &Ctl {
        if r == 0 {
            &self.fleet.ctl
        } else {
            &self.fleet.replicas[r - 1].ctl
        }
    }

    /// An operator request to replica `r` that must succeed.
    fn op(&self, r: usize, method: &str, path: &str, body: &str) -> Value {
        let (s, v) = http(self.addr(r), &self.token, method, path, body);
        assert!(
            (200..300).contains(&s),
            "{method} {path} on replica {r}: {s} {v}"
        );
        v
    }

    fn host(&self, name: &str) -> &tern_e2e::Host {
        self.fleet.host(name)
    }

    /// Moves the shared clock on A, and sets B to the same instant (B's store watch
    /// would get there too; setting it is what makes the next step deterministic).
    fn advance(&self, d: &str) -> String {
        let v = self.ctl(0).json(&["dev", "clock", "advance", d]).unwrap();
        let now = v["now"].as_str().unwrap().to_string();
        let b = self.ctl(1).json(&["dev", "clock", "set", &now]).unwrap();
        assert_eq!(b["now"], now.as_str());
        now
    }

    /// Every live host runs its timer's `tern-update update`; all must succeed (a
    /// failed install is a result, not a failed run).
    fn update_all(&self) {
        for (name, out) in self.fleet.update_all() {
            assert!(
                out.ok(),
                "{name}: tern-update update failed: {}\n{}",
                out.message(),
                out.stderr
            );
        }
    }

    /// One pass on each replica; returns (triggered host names, A's pause, B's pause).
    fn passes(&mut self) -> (Vec<String>, Value, Value) {
        let mut names = Vec::new();
        let mut paused = Vec::new();
        for r in [0, 1] {
            let v = self.ctl(r).json(&["dev", "directives"]).unwrap();
            for id in v["triggered"].as_array().unwrap() {
                let id = id.as_str().unwrap().to_string();
                names.push(self.names.get(&id).cloned().unwrap_or_else(|| id.clone()));
                self.triggered.push(id);
            }
            paused.push(v["paused"].clone());
        }
        let b = paused.pop().unwrap();
        let a = paused.pop().unwrap();
        (names, a, b)
    }

    /// One tick: the clock moves, live hosts run their timer, both replicas pass.
    fn tick(&mut self, d: &str) -> Vec<String> {
        self.advance(d);
        self.update_all();
        let (t, _, _) = self.passes();
        t
    }

    /// Host name → install state (`null`: none), from `ternctl inventory ls` on both
    /// replicas (each lists the hosts heartbeating to it).
    fn states(&self) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        for r in [0, 1] {
            let v = self.ctl(r).json(&["inventory", "ls"]).unwrap();
            for a in v["agents"].as_array().unwrap() {
                let id = a["updater_id"].as_str().unwrap();
                let name = self.names.get(id).cloned().unwrap_or_else(|| id.into());
                out.insert(name, a["install_state"].clone());
            }
        }
        out
    }

    fn state(&self, name: &str) -> String {
        let states = self.states();
        match states.get(name) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "(not in any inventory)".into(),
        }
    }

    fn root(&self, name: &str) -> PathBuf {
        self.host(name).root.clone()
    }

    /// The versions this host's script ran with, one per run.
    fn runs(&self, name: &str) -> Vec<String> {
        runs_in(&self.root(name))
    }

    fn all_runs(&self) -> BTreeMap<String, Vec<String>> {
        HOSTS
            .iter()
            .map(|(n, ..)| (n.to_string(), self.runs(n)))
            .filter(|(_, r)| !r.is_empty())
            .collect()
    }
}

fn runs_in(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("script-runs.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn start() -> World {
    let mut fleet = Fleet::start(FleetOptions {
        releases: Vec::new(),
        ..FleetOptions::default()
    })
    .unwrap();
    fleet.add_replica(&[]).unwrap();
    let token = std::fs::read_to_string(&fleet.ternd.token_file)
        .unwrap()
        .trim()
        .to_string();
    let gateways = [
        fleet.gateway.url.clone(),
        fleet.replicas[0].gateway.url.clone(),
    ];
    for (name, r, env, fails) in HOSTS {
        let label = env.map(|e| format!("env={e}"));
        let mut extra = vec!["--installer", "local-script"];
        if let Some(l) = &label {
            extra.extend_from_slice(&["--label", l]);
        }
        let h = fleet
            .add_host_via(name, "default", &gateways[r], &extra)
            .unwrap();
        if fails {
            std::fs::write(h.root.join("fail-install"), "").unwrap();
        }
    }
    let names = fleet
        .hosts
        .iter()
        .map(|h| (h.updater_id().unwrap(), h.name.clone()))
        .collect();
    World {
        fleet,
        token,
        triggered: Vec::new(),
        names,
    }
}

#[test]
fn directives_on_two_replicas_with_real_hosts() {
    let mut w = start();
    let a = 0;
    // Each replica holds its four hosts, and nothing governs anyone yet.
    for (r, want) in [(0, ["h0", "h1", "h2", "h3"]), (1, ["h4", "h5", "h6", "h7"])] {
        let inv = w.ctl(r).json(&["inventory", "ls"]).unwrap();
        let held: BTreeSet<String> = inv["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| w.names[a["updater_id"].as_str().unwrap()].clone())
            .collect();
        assert_eq!(held, want.map(String::from).into(), "replica {r}");
    }
    let states = w.states();
    assert_eq!(states.len(), 8, "{states:?}");
    assert!(states.values().all(Value::is_null), "{states:?}");

    // Resources; a draft whose target would be shell text is refused naming the field,
    // and never stored.
    w.op(a, "PUT", "/v1/directives/installers/record", SCRIPT);
    w.op(a, "PUT", "/v1/directives/installers/native", NATIVE);
    w.op(a, "PUT", "/v1/directives/config", &config(true, "1"));
    let (s, v) = http(
        w.addr(1),
        &w.token,
        "PUT",
        "/v1/directives/drafts/static",
        &draft("1.1.0;rm -rf /"),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v.to_string()
            .contains("spec.directives[0].targets[0].version"),
        "{v}"
    );
    let (s, v) = http(
        w.addr(a),
        &w.token,
        "GET",
        "/v1/directives/drafts/static",
        "",
    );
    assert_eq!(s, 404, "the refused draft is not stored: {v}");
    w.op(a, "PUT", "/v1/directives/drafts/static", &draft("1.2.0"));

    // Plan: each replica evaluates the draft over its hosts in its next pass; the plan
    // is their sum. Nothing is triggered, no instruction reaches a host.
    let pending = w.op(a, "POST", "/v1/directives/plan", r#"{"draft": "static"}"#);
    let nonce = pending["nonce"].as_str().unwrap().to_string();
    let (t, _, _) = w.passes();
    assert!(t.is_empty(), "a plan triggers nothing: {t:?}");
    let plan = w.op(1, "GET", "/v1/directives/plan", "");
    assert_eq!(
        (plan["replicas"].as_u64(), plan["evaluated_by"].as_u64()),
        (Some(2), Some(2)),
        "{plan}"
    );
    let e = &plan["evaluation"];
    assert_eq!(e["governed"], 7, "{plan}");
    assert_eq!(e["states"], json!({"NeedsInstall": 7}), "{plan}");
    assert_eq!(e["unaffected"], 1, "{plan}");
    assert_eq!(e["no_fit"], 0, "{plan}");
    // From nothing installed ("") to 1.2.0; staging falls through `native` (no size
    // nor sha256 in the target) to the script.
    let moves: BTreeMap<(String, String, String, String), u64> = e["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let f = |k: &str| m[k].as_str().unwrap().to_string();
            (
                (f("directive"), f("from"), f("to"), f("installer")),
                m["hosts"].as_u64().unwrap(),
            )
        })
        .collect();
    let mv = |d: &str| {
        (
            d.to_string(),
            String::new(),
            "1.2.0".into(),
            "record".into(),
        )
    };
    assert_eq!(
        moves,
        BTreeMap::from([(mv("prod"), 3), (mv("staging"), 4)]),
        "{plan}"
    );
    assert_eq!(plan["active"]["governed"], 0, "nothing active yet: {plan}");
    assert_eq!(plan["active"]["unaffected"], 8, "{plan}");
    // The hosts' timers run and heartbeat; still nothing moves.
    w.update_all();
    let (t, _, _) = w.passes();
    assert!(t.is_empty(), "{t:?}");
    assert!(w.states().values().all(Value::is_null), "{:?}", w.states());
    assert!(w.all_runs().is_empty(), "{:?}", w.all_runs());

    // Apply (on the other replica). At T0 nobody has been connected for `settle`: all
    // governed hosts need an install, none is triggered.
    let applied = w.op(
        1,
        "POST",
        "/v1/directives/apply",
        &json!({"nonce": nonce}).to_string(),
    );
    assert_eq!(applied["applied"], true, "{applied}");
    let (t, _, _) = w.passes();
    assert!(t.is_empty(), "{t:?}");
    let states = w.states();
    for (name, _, env, _) in HOSTS {
        // No directive governs h7: it has no install state.
        let want = if env.is_some() {
            json!("NeedsInstall")
        } else {
            Value::Null
        };
        assert_eq!(states[name], want, "{name}: {states:?}");
    }

    // T0+1m: settled; one install a minute per replica, in inventory order.
    assert_eq!(w.tick("1m"), ["h0", "h4"]);
    assert_eq!(w.state("h0"), "InstallTriggered");
    assert_eq!(w.state("h1"), "NeedsInstall");
    assert!(w.all_runs().is_empty(), "{:?}", w.all_runs());

    // T0+2m: h0 and h4 ran the script in their timer run (the instruction came in its
    // heartbeat answer) and now report 1.2.0. h5 is triggered, then dies: its
    // tern-update never runs again.
    assert_eq!(w.tick("1m"), ["h1", "h5"]);
    assert_eq!(w.state("h0"), "RecentInstall");
    assert_eq!(w.state("h4"), "RecentInstall");
    assert_eq!(w.state("h5"), "InstallTriggered");
    w.fleet.set_online("h5", false);
    w.fleet.host("h5").kill_agent();
    assert_eq!(w.runs("h0"), ["VERSION=1.2.0"]);
    let env: BTreeSet<String> = std::fs::read_to_string(w.root("h0").join("script-env.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = [
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C",
        "VERSION=1.2.0",
        "TERN_TARGET_VERSION=1.2.0",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(env, want, "the script's environment is exactly this");
    let inv = w.fleet.inventory_of("h0").unwrap().unwrap();
    assert_eq!(
        inv.version, "1.2.0",
        "the script's version is what h0 reports"
    );

    // T0+3m: h1's script exited 1: an explicit fault, the error carried in its
    // heartbeats. One fault is within the limit: the loop goes on (h2, h6).
    assert_eq!(w.tick("1m"), ["h2", "h6"]);
    assert_eq!(w.state("h1"), "ExplicitInstallFault");
    let st = w.host("h1").status().unwrap();
    let result = find_key(&st, "install_result").expect("h1 keeps its install result");
    assert_eq!(result["success"], false, "{result}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("script exited with 1") && error.contains("cannot install myagent 1.2.0"),
        "{result}"
    );
    assert_eq!(
        w.state("h5"),
        "InstallTriggered",
        "silent 1m: not yet churned"
    );

    // T0+4m: h2 fails too: two faults pass the limit of one, and the loop pauses
    // before triggering h3. h5, silent for offline_after, churned (one churn is within
    // its limit).
    w.advance("1m");
    w.update_all();
    let (t, pa, pb) = w.passes();
    assert!(t.is_empty(), "paused: nothing triggered: {t:?}");
    assert!(
        pa.as_str().unwrap_or_default().contains("fault limit"),
        "{pa}"
    );
    assert!(!pb.is_null(), "B sees the pause too: {pb}");
    assert_eq!(w.state("h2"), "ExplicitInstallFault");
    assert_eq!(w.state("h5"), "ChurnedDuringInstall");
    assert_eq!(w.state("h3"), "NeedsInstall");
    for r in [0, 1] {
        let status = w.op(r, "GET", "/v1/directives", "");
        assert!(
            status["paused"]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("fault limit"),
            "replica {r}: {status}"
        );
    }

    // T0+5m: the pause is latched: still nothing triggered.
    assert!(w.tick("1m").is_empty());
    assert_eq!(w.state("h3"), "NeedsInstall");

    // The operator raises the fault limit and resumes: the pause is lifted, and the
    // next pass triggers h3 (the faulted hosts wait out `recent`; h5 was forgotten
    // after three missed heartbeats).
    w.op(a, "PUT", "/v1/directives/config", &config(true, "5"));
    let resumed = w.op(1, "POST", "/v1/directives/resume", "");
    assert_eq!(resumed["resumed"], true, "{resumed}");
    for r in [0, 1] {
        let status = w.op(r, "GET", "/v1/directives", "");
        assert!(status["paused"].is_null(), "replica {r}: {status}");
    }
    assert_eq!(w.tick("1m"), ["h3"]);
    assert_eq!(w.state("h3"), "InstallTriggered");
    assert_eq!(w.state("h1"), "ExplicitInstallFault");
    assert!(w.tick("1m").is_empty());
    assert_eq!(w.state("h3"), "RecentInstall");

    // Installs off (the faulted hosts would be retried once `recent` is over), then
    // past `recent` of the first installs: they are at parity.
    w.op(a, "PUT", "/v1/directives/config", &config(false, "5"));
    assert!(w.tick("7m").is_empty(), "enabled: false installs nothing");
    let states = w.states();
    for h in ["h0", "h4", "h6"] {
        assert_eq!(states[h], "VersionParity", "{h}: {states:?}");
    }
    assert_eq!(states["h3"], "RecentInstall", "{states:?}");
    for h in ["h1", "h2"] {
        assert_eq!(states[h], "NeedsInstall", "{h}: {states:?}");
    }
    assert!(!states.contains_key("h5"), "{states:?}");

    // Each host was triggered at most once, whichever replica held it, and each script
    // ran at most once per host, only ever with the target 1.2.0.
    let unique: BTreeSet<&String> = w.triggered.iter().collect();
    assert_eq!(unique.len(), w.triggered.len(), "{:?}", w.triggered);
    let triggered: BTreeSet<String> = w.triggered.iter().map(|id| w.names[id].clone()).collect();
    let want: BTreeSet<String> = ["h0", "h1", "h2", "h3", "h4", "h5", "h6"]
        .into_iter()
        .map(str::to_string)
        .collect();
    assert_eq!(triggered, want);
    let runs = w.all_runs();
    let want: BTreeMap<String, Vec<String>> = ["h0", "h1", "h2", "h3", "h4", "h6"]
        .into_iter()
        .map(|h| (h.to_string(), vec!["VERSION=1.2.0".to_string()]))
        .collect();
    assert_eq!(
        runs, want,
        "one run per triggered live host, none elsewhere"
    );

    // A rollout to 1.1.0 exists: deactivating the directive would hand the hosts on
    // 1.2.0 back to it, a downgrade. ternctl says so and asks for --yes.
    // (No host runs meanwhile: those no directive governs would try a 1.1.0 that is
    // not published here.)
    w.fleet.set_version("1.1.0", "1.1.0", "regular").unwrap();
    w.advance("1m");
    w.passes();
    let out = w
        .ctl(0)
        .command(&["version-control", "deactivate"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("will downgrade")
            && err.contains("from 1.2.0 to 1.1.0")
            && err.contains("--yes"),
        "{err}"
    );
    let status = w.op(0, "GET", "/v1/directives", "");
    assert!(
        status["active"].is_object(),
        "nothing was deactivated: {status}"
    );
    let out = w
        .ctl(1)
        .run(&["version-control", "deactivate", "--yes"])
        .unwrap();
    assert!(out.contains("from 1.2.0 to 1.1.0"), "{out}");
    let status = w.op(0, "GET", "/v1/directives", "");
    assert!(status["active"].is_null(), "{status}");
}

/// The first value under `key` anywhere in `v`.
fn find_key<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    match v {
        Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// A script whose syntax is broken: its dry run (`sh -n`) fails on every host it goes to.
const BROKEN: &str = r#"kind: installer
version: v1
metadata: {name: broken}
spec:
  type: local-script
  local_script:
    shell: /bin/sh
    script: |
      root="$(dirname "$0")/../.."
      echo "ran" >> "$root/script-runs.log"
      if then fi
    timeout: 1m
"#;

#[test]
fn a_dry_run_plan_checks_the_scripts_on_real_hosts_and_changes_nothing() {
    let mut w = start();
    w.op(0, "PUT", "/v1/directives/installers/record", SCRIPT);
    w.op(0, "PUT", "/v1/directives/installers/broken", BROKEN);
    w.op(0, "PUT", "/v1/directives/config", &config(true, "1"));
    let staging_ok_prod_broken = draft("1.2.0").replace(
        "targets: [{version: \"1.2.0\"}]\n      installers: [record]",
        "targets: [{version: \"1.2.0\"}]\n      installers: [broken]",
    );
    assert!(staging_ok_prod_broken.contains("[broken]"));
    w.op(
        0,
        "PUT",
        "/v1/directives/drafts/static",
        &staging_ok_prod_broken,
    );
    let pending = w.op(
        0,
        "POST",
        "/v1/directives/plan",
        r#"{"draft": "static", "dry_run": true}"#,
    );
    assert_eq!(pending["dry_run"], true, "{pending}");

    // One check a minute per replica, to settled hosts; each host's timer run takes
    // the check from its heartbeat answer, runs `sh -n` on the script, and reports.
    let mut plan = Value::Null;
    for _ in 0..8 {
        let t = w.tick("61s");
        assert!(t.is_empty(), "a dry-run plan installs nothing: {t:?}");
        plan = w.op(1, "GET", "/v1/directives/plan", "");
        let d = &plan["dry_run"];
        if d["sent"] == 7 && d["passed"].as_u64().unwrap() + d["failed"].as_u64().unwrap() == 7 {
            break;
        }
    }
    let d = &plan["dry_run"];
    assert_eq!(
        (
            d["sent"].as_u64(),
            d["passed"].as_u64(),
            d["failed"].as_u64()
        ),
        (Some(7), Some(4), Some(3)),
        "staging's script parses, prod's does not: {plan}"
    );
    let failed: BTreeSet<String> = d["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| w.names[f["updater_id"].as_str().unwrap()].clone())
        .collect();
    assert_eq!(
        failed,
        ["h2", "h3", "h6"].map(String::from).into(),
        "{plan}"
    );
    assert!(
        d["failures"][0]["error"]
            .as_str()
            .unwrap()
            .contains("syntax"),
        "{plan}"
    );
    // Checked, never run: no script ran anywhere, nobody is governed, nothing changed.
    assert!(w.all_runs().is_empty(), "{:?}", w.all_runs());
    assert!(w.states().values().all(Value::is_null), "{:?}", w.states());
    // The operator's view.
    let text = w.ctl(0).run(&["version-control", "plan"]).unwrap();
    assert!(
        text.contains("dry run: 7 checks sent, 4 passed, 3 failed, 0 waiting"),
        "{text}"
    );
}
