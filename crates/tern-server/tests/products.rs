//! Products in one ternd, over HTTP on a real ternd (SQLite, the dev clock): the agent,
//! the built-in updater and a third product an operator adds ("sidecar") each roll out
//! on their own through the shared config's groups and windows, heartbeats of each
//! count in their own reports, find answers each from its own rollout; a freeze holds
//! every product or those it names, a pin holds the host's every product; unknown
//! products are told `no_rollout` by find and refused by heartbeats; the number of
//! products is bounded; a restart keeps it all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, version_yaml};
use serde_json::{Value, json};

/// halt-on-error over dev (10h), staging (12h), prod (14h, one canary, and a canary
/// analysis no Prometheus answers: the agent's prod holds at its canary; the other
/// products run the shared config without it).
const CONFIG: &str = r#"kind: autoupdate_config
version: v1
metadata:
  name: autoupdate-config
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
        - name: dev
          days: ["*"]
          start_hour: 10
        - name: staging
          days: ["*"]
          start_hour: 12
        - name: prod
          days: ["*"]
          start_hour: 14
          canary_count: 1
          analysis:
            queries:
              - name: errors
                query: sum(rate(agent_errors_total{version="{{version}}"}[5m]))
                max: 0
"#;

const AGENT: &str = "agent";
const UPDATER: &str = "updater";
const SIDECAR: &str = "sidecar";
const PRODUCTS: [&str; 3] = [AGENT, UPDATER, SIDECAR];

/// One host: its updater id (the same for every product it runs), group, and the
/// version it runs of each product.
struct Host {
    id: &'static str,
    group: &'static str,
    agent: &'static str,
    updater: &'static str,
    sidecar: &'static str,
}

impl Host {
    fn version(&self, product: &str) -> &'static str {
        match product {
            AGENT => self.agent,
            UPDATER => self.updater,
            _ => self.sidecar,
        }
    }

    fn set(&mut self, product: &str, version: &'static str) {
        match product {
            AGENT => self.agent = version,
            UPDATER => self.updater = version,
            _ => self.sidecar = version,
        }
    }
}

/// A heartbeat of `product` (none named for the agent, as Teleport's updaters send).
fn heartbeat(
    t: &Ternd,
    token: &str,
    product: &str,
    id: &str,
    group: &str,
    version: &str,
) -> (u16, Value) {
    let mut body = json!({
        "updater_id": id, "host_id": format!("host-{id}"), "hostname": format!("{id}.example"),
        "group": group, "version": version, "healthy": true,
    });
    if product != AGENT {
        body["product"] = json!(product);
    }
    t.call(
        "POST",
        "/v1/agents/heartbeat",
        Some(token),
        Some(&body.to_string()),
    )
}

/// Every host heartbeats every product it runs.
fn heartbeats(t: &Ternd, token: &str, hosts: &[Host]) {
    for h in hosts {
        for p in PRODUCTS {
            let (s, v) = heartbeat(t, token, p, h.id, h.group, h.version(p));
            assert_eq!(s, 200, "heartbeat {p} of {}: {v}", h.id);
        }
    }
}

/// find for `product` (none named for the agent): (version, update now, first hold).
fn find(t: &Ternd, product: &str, group: &str, id: &str) -> (String, bool, String) {
    let q = if product == AGENT {
        String::new()
    } else {
        format!("&product={product}")
    };
    let (s, v) = t.call(
        "GET",
        &format!("/v1/webapi/find?group={group}&updater_id={id}{q}"),
        None,
        None,
    );
    assert_eq!(s, 200, "find {product}: {v}");
    let a = &v["auto_update"];
    (
        a["agent_version"].as_str().unwrap().to_string(),
        a["agent_auto_update"].as_bool().unwrap(),
        a["agent_hold"].as_str().unwrap_or_default().to_string(),
    )
}

/// `product`'s query suffix for the admin API.
fn q(product: &str) -> String {
    format!("?product={product}")
}

/// Each group's state in `product`'s stored rollout.
fn states(t: &Ternd, product: &str) -> Vec<String> {
    let r = t.op("GET", &format!("/v1/resources/rollout{}", q(product)), None);
    r["status"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["state"].as_str().unwrap().to_string())
        .collect()
}

fn all_states(t: &Ternd) -> Vec<(String, Vec<String>)> {
    PRODUCTS
        .iter()
        .map(|p| (p.to_string(), states(t, p)))
        .collect()
}

fn want(rows: &[(&str, [&str; 3])]) -> Vec<(String, Vec<String>)> {
    rows.iter()
        .map(|(p, s)| (p.to_string(), s.iter().map(|x| x.to_string()).collect()))
        .collect()
}

/// The canary `product`'s prod group picked.
fn prod_canary(t: &Ternd, product: &str) -> String {
    let r = t.op("GET", &format!("/v1/resources/rollout{}", q(product)), None);
    r["status"]["groups"][2]["canaries"][0]["updater_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{product}: no prod canary: {r}"))
        .to_string()
}

fn hosts() -> Vec<Host> {
    let host = |id, group| Host {
        id,
        group,
        agent: "1.0.0",
        updater: "2.0.0",
        sidecar: "3.0.0",
    };
    vec![
        host("d1", "dev"),
        host("s1", "staging"),
        host("p1", "prod"),
        host("p2", "prod"),
    ]
}

/// Every host of `group` runs `version` of `product`.
fn update(hosts: &mut [Host], group: &str, product: &str, version: &'static str) {
    for h in hosts.iter_mut().filter(|h| h.group == group) {
        h.set(product, version);
    }
}

#[test]
fn one_ternd_serves_three_products_each_with_its_own_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut t = Ternd::dev(&data);
    let agent = t.new_token("agent");
    t.put_resource("config", CONFIG);
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    let mut hosts = hosts();

    // Before the sidecar exists: its heartbeats are refused naming it, find tells its
    // hosts there is no rollout (never an error), its admin routes do not know it. The
    // updater is built in: heartbeats accepted, no rollout yet.
    let (s, v) = heartbeat(&t, &agent, SIDECAR, "d1", "dev", "3.0.0");
    assert_eq!(s, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"sidecar\"") && message.contains("agent, updater"),
        "{v}"
    );
    assert_eq!(
        find(&t, SIDECAR, "dev", "d1"),
        (String::new(), false, "no_rollout".into())
    );
    assert_eq!(find(&t, "No-Such", "dev", "d1").2, "no_rollout");
    let (s, v) = t.call(
        "GET",
        "/v1/agents/status?product=sidecar",
        Some(&t.token),
        None,
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("unknown_product")),
        "{v}"
    );
    let (s, v) = t.call(
        "GET",
        "/v1/agents/status?product=Bad_Name",
        Some(&t.token),
        None,
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(heartbeat(&t, &agent, UPDATER, "d1", "dev", "2.0.0").0, 200);
    assert_eq!(find(&t, UPDATER, "dev", "d1").2, "no_rollout");
    let st = t.op("GET", "/v1/agents/status?product=updater", None);
    assert!(st["rollout"].is_null(), "{st}");

    // The updater's rollout by new-rollout; the sidecar added by writing its version.
    let v = t.op(
        "POST",
        "/v1/agents/new-rollout?product=updater",
        Some(r#"{"version": "2.1.0", "current_version": "2.0.0"}"#),
    );
    assert_eq!(
        (v["start_version"].as_str(), v["target_version"].as_str()),
        (Some("2.0.0"), Some("2.1.0")),
        "{v}"
    );
    t.op(
        "POST",
        "/v1/resources/version?product=sidecar&force=true",
        Some(&version_yaml("3.0.0", "3.1.0", "regular")),
    );
    assert_eq!(
        t.op("GET", "/v1/resources/version", None)["spec"]["agents"]["target_version"],
        "1.1.0",
        "the agent's version (Teleport's file) is untouched"
    );
    let (s, v) = t.call(
        "GET",
        "/v1/resources/config?product=sidecar",
        Some(&t.token),
        None,
    );
    assert_eq!(s, 404, "the sidecar has no config of its own: {v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("shared"),
        "{v}"
    );

    // 09:00: every host heartbeats its three products; three rollouts, none started.
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    let unstarted = ["unstarted"; 3];
    assert_eq!(
        all_states(&t),
        want(&[
            (AGENT, unstarted),
            (UPDATER, unstarted),
            (SIDECAR, unstarted)
        ])
    );
    // The inventory too: d1's agent and its updater are a row each, in their own
    // product's inventory.
    for (p, version) in [(AGENT, "1.0.0"), (UPDATER, "2.0.0"), (SIDECAR, "3.0.0")] {
        let inv = t.op(
            "GET",
            &format!("/v1/inventory?group=dev{}", q(p).replace('?', "&")),
            None,
        );
        let rows = inv["agents"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{p}: {inv}");
        assert_eq!(
            (rows[0]["updater_id"].as_str(), rows[0]["version"].as_str()),
            (Some("d1"), Some(version)),
            "{p}: {inv}"
        );
    }
    let products = t.op("GET", "/v1/products", None);
    let names: Vec<&str> = products["products"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [AGENT, SIDECAR, UPDATER],
        "the agent first, then by name: {products}"
    );
    assert_eq!(products["products"][1]["target_version"], "3.1.0");
    assert_eq!(products["products"][1]["builtin"], false);
    assert_eq!(products["products"][2]["builtin"], true);

    // 10:01: dev's window: dev starts in each product, and find tells each product's
    // target to dev's host.
    t.advance("61m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    for p in PRODUCTS {
        assert_eq!(states(&t, p)[0], "active", "{p}");
    }
    // Each product's hosts count in its own report (once heard for a report period),
    // the agent's and the updater's of one host as two rows, not one.
    for (p, version) in [(AGENT, "1.0.0"), (UPDATER, "2.0.0"), (SIDECAR, "3.0.0")] {
        let r = t.op("GET", &format!("/v1/agents/report{}", q(p)), None);
        assert_eq!(r["total"], 4, "{p}: {r}");
        assert_eq!(r["groups"]["prod"]["versions"][version], 2, "{p}: {r}");
    }
    assert_eq!(
        find(&t, AGENT, "dev", "d1"),
        ("1.1.0".into(), true, String::new())
    );
    assert_eq!(
        find(&t, UPDATER, "dev", "d1"),
        ("2.1.0".into(), true, String::new())
    );
    assert_eq!(
        find(&t, SIDECAR, "dev", "d1"),
        ("3.1.0".into(), true, String::new())
    );
    assert_eq!(find(&t, UPDATER, "staging", "s1").2, "group_not_started");
    // An empty product= is the agent.
    let (s, v) = t.call(
        "GET",
        "/v1/webapi/find?group=dev&updater_id=d1&product=",
        None,
        None,
    );
    assert_eq!(
        (s, &v["auto_update"]["agent_version"]),
        (200, &json!("1.1.0")),
        "{v}"
    );

    // d1 installs the agent and the updater, not the sidecar: only the first two finish
    // dev. Each rollout moves on its own hosts' versions.
    update(&mut hosts, "dev", AGENT, "1.1.0");
    update(&mut hosts, "dev", UPDATER, "2.1.0");
    t.advance("2m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(
        all_states(&t),
        want(&[
            (AGENT, ["done", "unstarted", "unstarted"]),
            (UPDATER, ["done", "unstarted", "unstarted"]),
            (SIDECAR, ["active", "unstarted", "unstarted"]),
        ])
    );

    // A freeze naming the sidecar holds the sidecar alone.
    let (s, v) = t.call(
        "PUT",
        "/v1/freeze",
        Some(&t.token),
        Some(r#"{"reason": "sidecar 3.1.0 under review", "products": ["sidecar"]}"#),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["freeze"]["products"], json!(["sidecar"]));
    let (s, v) = t.call(
        "PUT",
        "/v1/freeze",
        Some(&t.token),
        Some(r#"{"reason": "x", "products": ["sidecr"]}"#),
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("unknown_product")),
        "a typo freezes nothing: {v}"
    );
    assert_eq!(
        find(&t, SIDECAR, "dev", "d1"),
        ("3.0.0".into(), false, "frozen".into())
    );
    assert_eq!(
        find(&t, AGENT, "dev", "d1"),
        ("1.1.0".into(), true, String::new())
    );
    let st = t.op("GET", "/v1/agents/status?product=sidecar", None);
    assert_eq!(st["mode"], "suspended", "{st}");
    assert!(
        st["why_stopped"]
            .as_str()
            .unwrap()
            .starts_with("updates of sidecar are frozen"),
        "{st}"
    );
    assert_eq!(t.op("GET", "/v1/agents/status", None)["mode"], "enabled");

    // 12:01: staging's window: the agent's and the updater's staging start; the
    // sidecar, frozen, holds in dev.
    t.set_clock("2026-11-23T12:01:00Z");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(
        all_states(&t),
        want(&[
            (AGENT, ["done", "active", "unstarted"]),
            (UPDATER, ["done", "active", "unstarted"]),
            (SIDECAR, ["active", "unstarted", "unstarted"]),
        ])
    );
    assert_eq!(
        find(&t, UPDATER, "staging", "s1"),
        ("2.1.0".into(), true, String::new())
    );

    // A freeze is only widened by another: naming the updater adds it; naming none
    // holds every product. Then all three hold.
    let v = t.op(
        "PUT",
        "/v1/freeze",
        Some(r#"{"reason": "updater too", "products": ["updater"]}"#),
    );
    assert_eq!(
        v["freeze"]["products"],
        json!(["sidecar", "updater"]),
        "{v}"
    );
    assert_eq!(find(&t, UPDATER, "staging", "s1").2, "frozen");
    assert_eq!(
        find(&t, AGENT, "staging", "s1"),
        ("1.1.0".into(), true, String::new())
    );
    let v = t.op("PUT", "/v1/freeze", Some(r#"{"reason": "everything"}"#));
    assert_eq!(v["freeze"].get("products"), None, "every product: {v}");
    for p in PRODUCTS {
        let (_, update, hold) = find(&t, p, "staging", "s1");
        assert!(!update && hold == "frozen", "{p}: {hold}");
    }
    // … and every product's rollout: staging's host on the agent's and the updater's
    // targets does not finish staging while it holds.
    update(&mut hosts, "staging", AGENT, "1.1.0");
    update(&mut hosts, "staging", UPDATER, "2.1.0");
    t.advance("2m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(
        all_states(&t),
        want(&[
            (AGENT, ["done", "active", "unstarted"]),
            (UPDATER, ["done", "active", "unstarted"]),
            (SIDECAR, ["active", "unstarted", "unstarted"]),
        ])
    );
    let v = t.op(
        "PUT",
        "/v1/freeze",
        Some(r#"{"reason": "still", "products": ["sidecar"]}"#),
    );
    assert_eq!(
        v["freeze"].get("products"),
        None,
        "naming fewer does not narrow it: {v}"
    );
    t.op("DELETE", "/v1/freeze", None);

    // A pin of the host holds its every product (one updater id for all of them); a pin
    // naming the updater holds only that.
    t.op(
        "PUT",
        "/v1/inventory/s1/pin",
        Some(r#"{"until": "2026-11-24", "reason": "db migration"}"#),
    );
    for p in PRODUCTS {
        assert_eq!(find(&t, p, "staging", "s1").2, "pinned", "{p}");
    }
    let v = t.op(
        "PUT",
        "/v1/inventory/s1/pin",
        Some(r#"{"until": "2026-11-24", "products": ["updater"]}"#),
    );
    assert_eq!(v["products"], json!(["updater"]), "{v}");
    assert_eq!(find(&t, UPDATER, "staging", "s1").2, "pinned");
    assert_eq!(
        find(&t, AGENT, "staging", "s1"),
        ("1.1.0".into(), true, String::new())
    );
    let (s, v) = t.call(
        "PUT",
        "/v1/inventory/s1/pin",
        Some(&t.token),
        Some(r#"{"until": "2026-11-24", "products": ["nope"]}"#),
    );
    assert_eq!(s, 404, "{v}");
    t.op("DELETE", "/v1/inventory/s1/pin", None);
    assert_eq!(
        find(&t, UPDATER, "staging", "s1"),
        ("2.1.0".into(), true, String::new())
    );

    // Transitions take the product: a rollback of the sidecar's dev touches nothing
    // else; starting it again and its host installing it finishes its dev.
    let v = t.op(
        "POST",
        "/v1/agents/rollback?product=sidecar",
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(v["groups"][0]["to"], "rolledback", "{v}");
    assert_eq!(states(&t, AGENT)[0], "done");
    assert_eq!(find(&t, SIDECAR, "dev", "d1").0, "3.0.0");
    let p = t.op(
        "POST",
        "/v1/preview/start-update?product=sidecar",
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(p["groups"][0]["name"], "dev", "{p}");
    t.op(
        "POST",
        "/v1/agents/start-update?product=sidecar",
        Some(r#"{"groups": ["dev"]}"#),
    );
    assert_eq!(
        find(&t, SIDECAR, "dev", "d1"),
        ("3.1.0".into(), true, String::new())
    );
    // Suspend of a product sets its version's mode: the others go on.
    let m = t.op("POST", "/v1/agents/suspend?product=sidecar", None);
    assert_eq!(
        (m["mode"].as_str(), m["version_mode"].as_str()),
        (Some("suspended"), Some("suspended")),
        "{m}"
    );
    assert!(
        m["why_stopped"]
            .as_str()
            .unwrap()
            .starts_with("updates of sidecar are suspended"),
        "{m}"
    );
    assert_eq!(find(&t, SIDECAR, "dev", "d1").2, "mode_suspended");
    assert!(find(&t, UPDATER, "staging", "s1").1);
    assert_eq!(t.op("GET", "/v1/agents/status", None)["mode"], "enabled");
    t.op("POST", "/v1/agents/resume?product=sidecar", None);
    assert!(find(&t, SIDECAR, "dev", "d1").1);

    update(&mut hosts, "dev", SIDECAR, "3.1.0");
    update(&mut hosts, "staging", AGENT, "1.1.0");
    update(&mut hosts, "staging", UPDATER, "2.1.0");
    t.advance("2m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(states(&t, AGENT), ["done", "done", "unstarted"]);
    assert_eq!(states(&t, UPDATER), ["done", "done", "unstarted"]);
    assert_eq!(states(&t, SIDECAR)[0], "done");

    // 14:01: prod's canaries, one per product. The agent's shared config asks for a
    // canary analysis no Prometheus answers: its prod holds at its canary. The updater
    // runs the shared groups without the analysis: its canary on the target is enough.
    t.set_clock("2026-11-23T14:01:00Z");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(states(&t, AGENT)[2], "canary");
    assert_eq!(states(&t, UPDATER)[2], "canary");
    let (agent_canary, updater_canary) = (prod_canary(&t, AGENT), prod_canary(&t, UPDATER));
    assert_eq!(
        find(&t, UPDATER, "prod", &updater_canary),
        ("2.1.0".into(), true, String::new())
    );
    for h in hosts.iter_mut() {
        if h.id == agent_canary {
            h.agent = "1.1.0";
        }
        if h.id == updater_canary {
            h.updater = "2.1.0";
        }
    }
    t.advance("2m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(
        states(&t, UPDATER)[2],
        "active",
        "no analysis for the updater"
    );
    let agent_prod = &t.op("GET", "/v1/resources/rollout", None)["status"]["groups"][2];
    assert_eq!(agent_prod["state"], "canary", "{agent_prod}");
    assert!(
        agent_prod["last_update_reason"]
            .as_str()
            .unwrap()
            .starts_with("analysis"),
        "the agent's prod waits for its analysis: {agent_prod}"
    );
    update(&mut hosts, "prod", UPDATER, "2.1.0");
    t.advance("2m");
    heartbeats(&t, &agent, &hosts);
    t.reconcile();
    assert_eq!(states(&t, UPDATER), ["done", "done", "done"]);
    let r = t.op("GET", "/v1/resources/rollout?product=updater", None);
    assert_eq!(r["status"]["state"], "done", "{r}");

    // Metrics: the agent's series as before, the others' with their product.
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    for line in [
        "tern_rollout_state{state=\"active\"} 1",
        "tern_rollout_state{product=\"updater\",state=\"done\"} 1",
        "tern_rollout_state{product=\"sidecar\",state=\"active\"} 1",
        "tern_rollout_group_state{group=\"prod\",state=\"canary\"} 1",
        "tern_rollout_group_state{product=\"updater\",group=\"prod\",state=\"done\"} 1",
        "tern_alerts_active{product=\"sidecar\",kind=\"canary_failed\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let before = (
        all_states(&t),
        find(&t, SIDECAR, "staging", "s1"),
        find(&t, UPDATER, "prod", "p2"),
    );

    // A restart keeps everything: the products, their rollouts, find's answers; the
    // sidecar's heartbeats are accepted again at once.
    t.stop();
    let t = Ternd::dev(&data);
    t.set_clock("2026-11-23T14:05:00Z");
    let after = (
        all_states(&t),
        find(&t, SIDECAR, "staging", "s1"),
        find(&t, UPDATER, "prod", "p2"),
    );
    assert_eq!(before, after);
    assert_eq!(
        heartbeat(&t, &agent, SIDECAR, "s1", "staging", "3.0.0").0,
        200
    );

    // The bound: sixteen products at most (the agent and the updater included); past
    // it a new product is refused by name, and deleting one makes room.
    for i in 0..13 {
        t.op(
            "POST",
            &format!("/v1/resources/version?product=extra-{i}&force=true"),
            Some(&version_yaml("1.0.0", "1.0.1", "regular")),
        );
    }
    let listed = t.op("GET", "/v1/products", None);
    assert_eq!(listed["products"].as_array().unwrap().len(), 16, "{listed}");
    assert_eq!(listed["max_products"], 16);
    let (s, v) = t.call(
        "POST",
        "/v1/agents/new-rollout?product=one-too-many",
        Some(&t.token),
        Some(r#"{"version": "1.0.1", "current_version": "1.0.0"}"#),
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("too_many_products")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("one-too-many"),
        "{v}"
    );
    let (s, _) = t.call(
        "POST",
        "/v1/resources/config?product=one-too-many&force=true",
        Some(&t.token),
        Some(CONFIG),
    );
    assert_eq!(s, 409, "an own config adds a product too");
    assert_eq!(
        heartbeat(&t, &agent, "one-too-many", "d1", "dev", "1.0.0").0,
        400
    );
    // Deleting a product's version ends its rollout at the next reconcile, and with it
    // the product: then there is room.
    t.reconcile();
    assert_eq!(states(&t, "extra-0"), ["unstarted"; 3]);
    t.op("DELETE", "/v1/resources/version?product=extra-0", None);
    let (s, _) = t.call(
        "POST",
        "/v1/agents/new-rollout?product=one-too-many",
        Some(&t.token),
        Some(r#"{"version": "1.0.1", "current_version": "1.0.0"}"#),
    );
    assert_eq!(s, 409, "extra-0's rollout still stands");
    t.reconcile();
    let (s, v) = t.call(
        "GET",
        "/v1/resources/rollout?product=extra-0",
        Some(&t.token),
        None,
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("unknown_product")),
        "{v}"
    );
    t.op(
        "POST",
        "/v1/agents/new-rollout?product=one-too-many",
        Some(r#"{"version": "1.0.1", "current_version": "1.0.0"}"#),
    );
    t.reconcile();
    assert_eq!(states(&t, "one-too-many"), ["unstarted"; 3]);
    assert_eq!(states(&t, UPDATER), ["done"; 3]);
}
