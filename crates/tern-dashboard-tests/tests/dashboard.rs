//! The dashboard in headless Chromium against a real ternd (SQLite in a temp dir, a dev
//! clock, plain HTTP on loopback). One test, one browser: starting Chromium is the
//! slow part, so the story runs in one session: log in, every page (a screenshot of
//! each), a change made through the API shows up without a reload, a rollback pressed
//! in the page reaches the store, the updater's rollout beside the agent's with its
//! own buttons, and a viewer gets no write button it can press.
//! The hosts are stand-in heartbeats (no tern-update runs): the dashboard reads only
//! what ternd keeps of them.
//!
//! Screenshots go to `<target>/tmp/dashboard-screenshots/`; with
//! `TERN_DASHBOARD_SCREENSHOTS_TO_DOCS=1` they are also copied to `docs/images/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tern_dashboard_tests::{Browser, Ternd, ternd_bin};

const WAIT: Duration = Duration::from_secs(20);

/// Hosts: dev 6 (two become canaries), staging 10, prod 50, and 2 presenting `prdo`,
/// a typo the rollout lacks: 68, more than one page of 50.
fn fleet() -> Vec<(String, &'static str)> {
    let mut hosts = Vec::new();
    for (group, n) in [("dev", 6), ("staging", 10), ("prod", 50), ("prdo", 2)] {
        for i in 0..n {
            // Ids spread over the backpressure order (hashed: not UUIDs).
            let spread = (i as u32).wrapping_mul(0x0777_7777);
            let id = format!("{spread:08x}-0000-4000-8000-{i:012x}");
            hosts.push((format!("{group}-{id}"), group));
        }
    }
    hosts
}

/// `prod-07.example` for the 8th host of prod.
fn hostname(id: &str) -> String {
    let (group, rest) = id.split_once('-').unwrap_or((id, ""));
    let n = u64::from_str_radix(rest.rsplit('-').next().unwrap_or("0"), 16).unwrap_or(0);
    format!("{group}-{n:02}.example")
}

/// The trust posture the `i`th stand-in host reports.
fn trust_of(i: usize) -> Option<Value> {
    match i % 3 {
        0 => Some(json!({"pinned": true, "root_version": 2})),
        1 => Some(json!({"pinned": false, "root_version": 0})),
        _ => None,
    }
}

fn beat(t: &Ternd, agent: &str, id: &str, group: &str, version: &str, extra: Value) {
    let mut body = json!({
        "updater_id": id, "host_id": format!("host-{id}"),
        "hostname": hostname(id),
        "group": group, "version": version,
        // As tern-update reports a host whose agent runs and passes its check.
        "healthy": true,
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (s, v) = t
        .call(
            "POST",
            "/v1/agents/heartbeat",
            Some(agent),
            Some(&body.to_string()),
        )
        .unwrap();
    assert_eq!(s, 200, "heartbeat {id}: {v}");
}

fn group_state(t: &Ternd, group: &str) -> String {
    let v = t.op("GET", "/v1/resources/rollout", None).unwrap();
    v["status"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == group)
        .map(|g| g["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no group {group}: {v}"))
}

/// What `setup` leaves: the stand-in hosts, dev's canary healthy on the target, dev's
/// other canary (not updated yet) and the token the stand-ins heartbeat with.
struct Fleet {
    hosts: Vec<(String, &'static str)>,
    canary: String,
    other_canary: String,
    agent: String,
}

/// A rollout 1.0.0 → 1.1.0 over dev (2 canaries), staging and prod, dev in canary with
/// one canary healthy on the target.
fn setup(t: &Ternd) -> Fleet {
    // dev's canaries cover every arch; staging lets one host per zone update at once.
    let config = tern_core::fixtures::halt_on_error(&[
        ("dev", 10, 2, 0),
        ("staging", 12, 0, 0),
        ("prod", 14, 0, 0),
    ])
    .replace(
        "        canary_count: 2\n",
        "        canary_count: 2\n        canary_cover: [arch]\n",
    )
    .replace(
        "      - name: staging\n",
        "      - name: staging\n        topology: [{key: zone, max_in_flight: 1}]\n",
    );
    assert!(
        config.contains("canary_cover") && config.contains("topology"),
        "{config}"
    );
    t.op("POST", "/v1/resources/config?force=true", Some(&config))
        .unwrap();
    let version = tern_core::fixtures::version("1.0.0", "1.1.0", "regular");
    t.op("POST", "/v1/resources/version?force=true", Some(&version))
        .unwrap();
    t.op(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version": "1.1.0", "critical": false}"#),
    )
    .unwrap();
    // One token heartbeats for the whole stand-in fleet, as a controller does (a new
    // data dir refuses a plain shared agent token).
    let agent = t
        .op(
            "POST",
            "/v1/tokens",
            Some(r#"{"role": "agent", "controller": true}"#),
        )
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let hosts = fleet();
    let all = |t: &Ternd| {
        for (i, (id, group)) in hosts.iter().enumerate() {
            let arch = if i % 3 == 0 { "arm64" } else { "amd64" };
            let mut facts = json!({"arch": arch, "labels": {"zone": format!("z{}", i % 2)}});
            // A third pin release root v2, a third pin none, a third do not say.
            if let Some(t) = trust_of(i) {
                facts["trust"] = t;
            }
            beat(t, &agent, id, group, "1.0.0", facts);
        }
    };
    all(t);
    t.op("POST", "/v1/dev/reconcile", None).unwrap();
    t.op(
        "POST",
        "/v1/dev/clock",
        Some(r#"{"set": "2026-11-23T10:05:00Z"}"#),
    )
    .unwrap();
    all(t);
    let r = t.op("POST", "/v1/dev/reconcile", None).unwrap();
    let canaries = r["rollout"]["status"]["groups"][0]["canaries"]
        .as_array()
        .unwrap_or_else(|| panic!("dev picked no canaries: {r}"))
        .clone();
    assert_eq!(canaries.len(), 2, "{r}");
    let first = canaries[0]["updater_id"].as_str().unwrap();
    beat(t, &agent, first, "dev", "1.1.0", json!({}));
    t.op("POST", "/v1/dev/reconcile", None).unwrap();
    assert_eq!(group_state(t, "dev"), "canary");
    Fleet {
        hosts,
        canary: first.to_string(),
        other_canary: canaries[1]["updater_id"].as_str().unwrap().to_string(),
        agent,
    }
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn shot(b: &Browser, name: &str) {
    let path = out_dir().join(format!("dashboard-{name}.png"));
    b.screenshot(&path).await.unwrap();
    if std::env::var_os("TERN_DASHBOARD_SCREENSHOTS_TO_DOCS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/images");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&path, docs.join(format!("dashboard-{name}.png"))).unwrap();
    }
}

/// Waits until the page shows `page` with content rendered after `after` updates.
async fn page_shown(b: &Browser, page: &str) {
    b.wait_js(
        &format!("the {page} page"),
        &format!(
            "const m = document.getElementById('main'); return m.dataset.page === '{page}' && !document.getElementById('page-error');"
        ),
        WAIT,
    )
    .await
    .unwrap();
}

async fn goto_hash(b: &Browser, hash: &str) {
    b.client
        .execute(&format!("location.hash = '{hash}';"), vec![])
        .await
        .unwrap();
}

async fn log_in(b: &Browser, t: &Ternd, token: &str) {
    b.client.goto(&format!("{}/#/login", t.url)).await.unwrap();
    b.wait_js(
        "the log-in form",
        "return !!document.getElementById('token');",
        WAIT,
    )
    .await
    .unwrap();
    b.client
        .execute(
            "document.getElementById('token').value = arguments[0]; document.getElementById('login').click();",
            vec![json!(token)],
        )
        .await
        .unwrap();
    page_shown(b, "rollout").await;
    b.wait_js(
        "the groups table",
        "return document.querySelectorAll('#groups tr[data-group]').length === 3;",
        WAIT,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ternd");
    let t = Ternd::start(
        &ternd_bin().unwrap(),
        &data,
        &["--dev-clock", "2026-11-23T09:00:00Z"],
    )
    .unwrap();
    let Fleet {
        hosts,
        canary,
        other_canary,
        agent,
    } = setup(&t);
    let viewer = t.new_token("viewer").unwrap();
    let b = Browser::start().await.unwrap();

    // A wrong token is refused on the log-in page.
    b.client.goto(&format!("{}/", t.url)).await.unwrap();
    page_shown(&b, "login").await;
    shot(&b, "login").await;
    b.client
        .execute(
            "document.getElementById('token').value = 'tern_00_00'; document.getElementById('login').click();",
            vec![],
        )
        .await
        .unwrap();
    b.wait_js(
        "the refusal",
        "return document.getElementById('login-error').textContent;",
        WAIT,
    )
    .await
    .unwrap();

    // The operator: the rollout page with dev's canaries and their health.
    log_in(&b, &t, &t.token).await;
    let dev = b
        .wait_js(
            "dev's canaries",
            "const r = document.querySelector('tr[data-group=dev]'); return r && r.querySelectorAll('[data-canary]').length === 2 && r.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    let dev = dev.as_str().unwrap();
    assert!(dev.contains("canary"), "{dev}");
    assert!(
        dev.contains("healthy on target") && dev.contains("pending"),
        "{dev}"
    );
    // The reason code comes with its sentence.
    assert!(
        dev.contains("waiting_for_canaries")
            && dev.contains("its canaries have not all reported the target healthy yet"),
        "{dev}"
    );
    // What the canaries cover, and staging's topology limit, from the status.
    let cover = b
        .wait_js(
            "dev's canary coverage",
            "const c = document.querySelector('tr[data-group=dev] [data-coverage=arch]'); return c && c.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        cover.as_str().unwrap().starts_with("arch: covers "),
        "{cover}"
    );
    let zone = b
        .wait_js(
            "staging's topology limit",
            "const c = document.querySelector('tr[data-group=staging] [data-topology=zone]'); return c && c.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        zone.as_str().unwrap().starts_with("zone ≤1 at once: "),
        "{zone}"
    );
    let versions = b
        .wait_js(
            "versions",
            "return document.getElementById('versions').textContent;",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(versions, "1.0.0 → 1.1.0");
    // prod has neither canaries nor max_in_flight: the page says what that risks, with
    // the hosts ternd counts in it (50, and the 2 of the `prdo` typo it serves).
    let risks = b
        .wait_js(
            "the config's warnings",
            "const l = document.querySelectorAll('#config-warnings li'); return l.length && [...l].map(i => [i.dataset.group, i.textContent]);",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        risks,
        json!([[
            "prod",
            "a bad version reaches all 52 hosts of prod at once: set canary_count or max_in_flight"
        ]])
    );
    // The new rollout's field suggests no version (it once showed the docs' broken
    // 1.2.0).
    let placeholder = b
        .client
        .execute(
            "return document.getElementById('new-version').placeholder;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(placeholder, json!("version"));
    let token_kept = b
        .client
        .execute(
            "return [sessionStorage.getItem('tern.token'), window.localStorage.length];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        token_kept,
        json!([t.token, 0]),
        "the token lives in sessionStorage only"
    );
    shot(&b, "rollout").await;

    // The inventory: one page of 50 of the 68 hosts, the typo flagged, filters.
    goto_hash(&b, "#/inventory").await;
    page_shown(&b, "inventory").await;
    let rows = b
        .wait_js(
            "a page of hosts",
            "return document.querySelectorAll('#inventory tbody tr').length;",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(rows, json!(50));
    let matched = b
        .client
        .execute(
            "return document.getElementById('matched').textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(matched, json!(format!("{} hosts match", hosts.len())));
    let flagged = b
        .client
        .execute(
            "return document.querySelectorAll('.unknown-group').length;",
            vec![],
        )
        .await
        .unwrap();
    // Sorted by group: `prdo` comes after dev and before prod, on the first page.
    assert_eq!(flagged, json!(2));
    // Which hosts verify releases: a Trust column from what each heartbeat says.
    let trust = b
        .client
        .execute(
            "const h = [...document.querySelectorAll('#inventory thead th')].map(c => c.textContent); const cells = [...document.querySelectorAll('#inventory tbody td.trust')].map(c => c.textContent); return [h.indexOf('Trust'), cells.length, [...new Set(cells)].sort()];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(trust, json!([4, 50, ["root v2", "unknown", "unpinned"]]));
    shot(&b, "inventory").await;
    b.client
        .execute("document.getElementById('next-page').click();", vec![])
        .await
        .unwrap();
    b.wait_js(
        "the second page",
        "return location.hash.includes('cursor=') && document.querySelectorAll('#inventory tbody tr').length === 18;",
        WAIT,
    )
    .await
    .unwrap();
    goto_hash(&b, "#/inventory?group=staging").await;
    b.wait_js(
        "the staging hosts only",
        "const rows = [...document.querySelectorAll('#inventory tbody tr')]; return rows.length === 10 && rows.every(r => r.children[1].textContent.startsWith('staging'));",
        WAIT,
    )
    .await
    .unwrap();

    // A prod host: it waits for dev and staging, then prod's window.
    let (prod_index, (prod_host, _)) = hosts
        .iter()
        .enumerate()
        .find(|(_, (_, g))| *g == "prod")
        .unwrap();
    goto_hash(&b, &format!("#/host/{prod_host}")).await;
    page_shown(&b, "host").await;
    let outlook = b
        .wait_js(
            "the forecast",
            "const f = document.getElementById('forecast'); return f && f.dataset.outlook + ': ' + f.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    let outlook = outlook.as_str().unwrap();
    let trust = b
        .wait_js(
            "the host's trust",
            "const d = [...document.querySelectorAll('#content dt')].find(x => x.textContent === 'trust'); return d ? d.nextElementSibling.textContent : false;",
            WAIT,
        )
        .await
        .unwrap();
    let expected = match trust_of(prod_index) {
        Some(t) if t["pinned"] == true => "verified: pins release root v2",
        Some(_) => "unverified: pins no release root",
        None => "unknown: its updater does not say",
    };
    assert!(
        trust.as_str().unwrap().starts_with(expected),
        "{trust} (host {prod_index})"
    );
    assert!(
        outlook.starts_with("after_earlier_groups: ") && outlook.contains("dev, staging"),
        "{outlook}"
    );
    // Titled by its hostname, not its updater id.
    let title = b
        .wait_js(
            "the host's title",
            "const t = document.getElementById('host-title'); return t && !t.textContent.startsWith('Host ') && t.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(title, json!(hostname(prod_host)));

    // The canary that updated: its history, newest first.
    goto_hash(&b, &format!("#/host/{canary}")).await;
    page_shown(&b, "host").await;
    let history = b
        .wait_js(
            "the canary's history",
            "const t = document.getElementById('history'); return t && [...t.tBodies[0].rows].map((r) => r.dataset.kind + ': ' + r.cells[1].textContent);",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        history,
        json!([
            "updated: version 1.0.0 → 1.1.0",
            "first_seen: first report: version 1.0.0 in group dev"
        ]),
    );
    // Tall enough for the whole page: forecast, state and history in one picture.
    b.client.set_window_size(1280, 1300).await.unwrap();
    shot(&b, "host").await;
    b.client.set_window_size(1280, 900).await.unwrap();

    goto_hash(&b, "#/tokens").await;
    page_shown(&b, "tokens").await;
    let tokens = b
        .wait_js(
            "the tokens",
            "const t = document.getElementById('tokens'); return t && t.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    let tokens = tokens.as_str().unwrap();
    assert!(
        tokens.contains("viewer") && tokens.contains("operator"),
        "{tokens}"
    );
    let secret = viewer.rsplit('_').next().unwrap();
    assert!(!tokens.contains(secret), "a token's secret is on the page");
    shot(&b, "tokens").await;

    goto_hash(&b, "#/channels").await;
    page_shown(&b, "channels").await;
    b.wait_js(
        "the channel",
        "const t = document.getElementById('channels'); return t && t.textContent.includes('stable') && t.textContent.includes('1.1.0');",
        WAIT,
    )
    .await
    .unwrap();
    shot(&b, "channels").await;

    // Live: a change made through the API shows up without reloading the page.
    goto_hash(&b, "#/rollout").await;
    page_shown(&b, "rollout").await;
    b.client
        .execute("window.ternSamePage = true;", vec![])
        .await
        .unwrap();
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["staging"], "force": true}"#),
    )
    .unwrap();
    b.wait_js(
        "staging started on the page",
        "const r = document.querySelector('tr[data-group=staging]'); return r && r.dataset.state !== 'unstarted';",
        WAIT,
    )
    .await
    .unwrap();
    // staging is active now: its hosts not on the target yet, the first in
    // backpressure order, each with its next run.
    let pending = b
        .wait_js(
            "staging's pending hosts",
            "const p = document.querySelector('tr[data-group=staging] [data-pending=staging]'); return p && [p.querySelector('summary').textContent, p.querySelectorAll('[data-pending-host]').length, p.textContent];",
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        pending[0].as_str().unwrap().starts_with("10 pending on "),
        "{pending}"
    );
    assert_eq!(pending[1], json!(10), "{pending}");
    assert!(
        pending[2].as_str().unwrap().contains(
            "runs 1.0.0; last run 2026-11-23 10:05 UTC, next run by 2026-11-23 10:06 UTC"
        ),
        "{pending}"
    );
    let same = b
        .client
        .execute("return window.ternSamePage === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "the page reloaded");
    // States read as ternctl prints them, the API's name on hover.
    let words = b
        .wait_js(
            "the state words",
            "const w = ['dev', 'staging', 'prod'].map(g => { const s = document.querySelector('tr[data-group=' + g + '] .badge'); return s ? s.textContent + '|' + s.title : ''; }); return w[1].startsWith('in progress') && w;",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        words,
        json!([
            "canary|API state: canary",
            "in progress|API state: active",
            "not started|API state: unstarted"
        ])
    );

    // A halt: dev's other canary rolls 1.1.0 back. The rollout page says what now, with
    // the commands (quickstart section 3); the canary's page says it will not retry.
    assert!(
        b.client
            .execute(
                "return document.getElementById('halt-guide') === null;",
                vec![]
            )
            .await
            .unwrap()
            .as_bool()
            .unwrap(),
        "a halt guide with no halt"
    );
    beat(
        &t,
        &agent,
        &other_canary,
        "dev",
        "1.0.0",
        json!({
            "rollback": true, "failed_version": "1.1.0",
            // Why, as tern-update says it: the error and the agent's last output, with
            // a newline and an escape sequence ternd must not pass on.
            "update_failure": {
                "version": "1.1.0",
                "error": "update to 1.1.0 failed: 1.1.0 the agent is not running (5 checks in a row)\nrolled back",
                "agent_output": "thread 'main' panicked: \u{1b}[31mcannot read its configuration",
                "time": "2026-11-23T10:04:00Z",
            },
        }),
    );
    let r = t.op("POST", "/v1/dev/reconcile", None).unwrap();
    assert_eq!(
        r["rollout"]["status"]["groups"][0]["last_update_reason"], "canary_failed",
        "{r}"
    );
    let guide = b
        .wait_js(
            "the halt guide",
            "const g = document.getElementById('halt-guide'); return g && g.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    let guide = guide.as_str().unwrap();
    for said in [
        "The rollout to 1.1.0 is halted: what now",
        "ternctl agents new-rollout VERSION",
        "Hosts that rolled 1.1.0 back do not retry it",
        "1.0.0 stays the start version",
        "ternctl agents rollback",
        "ternctl agents reset GROUP",
        "ternctl agents mark-done GROUP",
        "ternctl inventory ls",
    ] {
        assert!(
            guide.contains(said),
            "the halt guide lacks {said:?}: {guide}"
        );
    }
    // One wording: the guide is the status's next steps, which ternctl prints too.
    let st = t.op("GET", "/v1/agents/status", None).unwrap();
    let items = b
        .client
        .execute(
            "return [...document.querySelectorAll('#halt-guide li')].map(l => l.textContent);",
            vec![],
        )
        .await
        .unwrap();
    let steps: Vec<String> = st["next_steps"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().replace('`', ""))
        .collect();
    assert_eq!(items, json!(steps));
    let commands = b
        .client
        .execute(
            "return [...document.querySelectorAll('#halt-guide code')].map(c => c.textContent);",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        commands
            .as_array()
            .unwrap()
            .contains(&json!("ternctl agents rollback")),
        "{commands}"
    );
    // Why the canary failed, on the rollout page: its updater's words, cleaned.
    let why = b
        .wait_js(
            "the failed canary's reason",
            &format!(
                "const r = document.querySelector('[data-canary-reason=\"{other_canary}\"]'); return r && r.textContent;"
            ),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        why,
        json!(
            "update to 1.1.0 failed: 1.1.0 the agent is not running (5 checks in a row) rolled back; the agent's last output: thread 'main' panicked:  [31mcannot read its configuration"
        )
    );
    shot(&b, "halt").await;

    // The config changes under the rollout: the page says the rollout runs the older
    // copy, and how to apply the current one.
    let config = t.op("GET", "/v1/resources/config", None).unwrap();
    let mut changed = config.clone();
    changed["spec"]["agents"]["schedules"]["regular"][0]["canary_count"] = json!(1);
    t.op("PUT", "/v1/resources/config", Some(&changed.to_string()))
        .unwrap();
    let outdated = b
        .wait_js(
            "the older config said",
            "const p = document.getElementById('config-outdated'); return p && [p.textContent, [...p.querySelectorAll('code')].map(c => c.textContent)];",
            WAIT,
        )
        .await
        .unwrap();
    let said = outdated[0].as_str().unwrap();
    assert!(
        said.starts_with("this rollout uses the config of 2026-11-23 09:00 UTC; ternctl agents new-rollout 1.1.0 applies the current one")
            && said.contains("dev: canary_count"),
        "{said}"
    );
    assert_eq!(outdated[1], json!(["ternctl agents new-rollout 1.1.0"]));
    let mut restored = config.clone();
    restored["metadata"]["revision"] =
        t.op("GET", "/v1/resources/config", None).unwrap()["metadata"]["revision"].clone();
    t.op("PUT", "/v1/resources/config", Some(&restored.to_string()))
        .unwrap();
    b.wait_js(
        "the older config no longer said",
        "return document.getElementById('config-outdated') === null;",
        WAIT,
    )
    .await
    .unwrap();
    goto_hash(&b, &format!("#/host/{other_canary}")).await;
    page_shown(&b, "host").await;
    let title = b
        .wait_js(
            "the failed canary's page",
            "const h = document.getElementById('host-title'); const t = document.getElementById('main').textContent; return h && !h.textContent.startsWith('Host ') && t.includes('rolled back') && [h.textContent, t];",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(title[0], json!(hostname(&other_canary)), "{title}");
    let page = title[1].as_str().unwrap();
    assert!(
        page.contains("yes (from 1.1.0): it will not retry 1.1.0"),
        "{page}"
    );
    // And on its own page: the error and the agent's last output, apart.
    let failure = b
        .wait_js(
            "the host's failed update",
            "const e = document.getElementById('update-failure'); const o = document.getElementById('agent-output'); return e && o && [e.textContent, o.textContent];",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        failure,
        json!([
            "1.1.0: update to 1.1.0 failed: 1.1.0 the agent is not running (5 checks in a row) rolled back (2026-11-23 10:04 UTC)",
            "thread 'main' panicked:  [31mcannot read its configuration"
        ])
    );
    goto_hash(&b, "#/rollout").await;
    page_shown(&b, "rollout").await;

    // A rollback pressed in the page: the planner's preview first, then the store.
    b.client
        .execute(
            "document.querySelector('button[data-action=rollback][data-group=dev]').click();",
            vec![],
        )
        .await
        .unwrap();
    let preview = b
        .wait_js(
            "the rollback's preview",
            "const d = document.getElementById('confirm'); const ok = document.getElementById('confirm-ok'); return d.open && !ok.disabled && document.getElementById('confirm-effects').textContent;",
            WAIT,
        )
        .await
        .unwrap();
    let preview = preview.as_str().unwrap();
    assert!(
        preview.contains("dev") && preview.contains("rolledback"),
        "{preview}"
    );
    assert_eq!(
        group_state(&t, "dev"),
        "canary",
        "the preview wrote nothing"
    );
    shot(&b, "confirm").await;
    b.client
        .execute("document.getElementById('confirm-ok').click();", vec![])
        .await
        .unwrap();
    let mut stored = String::new();
    for _ in 0..200 {
        stored = group_state(&t, "dev");
        if stored == "rolledback" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored, "rolledback", "the rollback did not reach the store");
    b.wait_js(
        "dev rolled back on the page",
        "const r = document.querySelector('tr[data-group=dev]'); return !document.getElementById('confirm').open && r && r.dataset.state === 'rolledback';",
        WAIT,
    )
    .await
    .unwrap();

    // dev and staging done by hand, prod's window (14:00) open: prod's reason is still
    // the last reconcile's, and the page says the next reconcile starts it.
    t.op(
        "POST",
        "/v1/agents/mark-done",
        Some(r#"{"groups": ["dev", "staging"]}"#),
    )
    .unwrap();
    t.op(
        "POST",
        "/v1/dev/clock",
        Some(r#"{"set": "2026-11-23T14:10:00Z"}"#),
    )
    .unwrap();
    let starts = b
        .wait_js(
            "prod's start",
            "const s = document.querySelector('tr[data-group=prod] [data-starts=prod]'); return s && [s.textContent, document.querySelector('tr[data-group=prod] [data-reason]').dataset.reason];",
            WAIT,
        )
        .await
        .unwrap();
    assert!(
        starts[0]
            .as_str()
            .unwrap()
            .starts_with("its window is open: the next reconcile starts it"),
        "{starts}"
    );
    assert_eq!(starts[1], json!("previous_groups_not_done"));

    // Products: the updater's rollout on the same ternd. The rollout page lists every
    // product; the updater's link shows its own rollout, whose buttons act on it alone.
    t.op(
        "POST",
        "/v1/agents/new-rollout?product=updater",
        Some(r#"{"version": "2.1.0", "current_version": "2.0.0"}"#),
    )
    .unwrap();
    let listed = b
        .wait_js(
            "the products",
            "const rows = [...document.querySelectorAll('#products tr[data-product]')]; return rows.length === 2 && rows[1].textContent.includes('2.0.0 → 2.1.0') && rows.map(r => [r.dataset.product, r.dataset.state, r.classList.contains('current')]);",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        listed,
        json!([["agent", "active", true], ["updater", "unstarted", false]])
    );
    b.client
        .execute(
            "document.querySelector('#products tr[data-product=updater] a').click();",
            vec![],
        )
        .await
        .unwrap();
    let shown = b
        .wait_js(
            "the updater's rollout",
            "const t = document.getElementById('rollout-title'); const v = document.getElementById('versions'); return location.hash === '#/rollout?product=updater' && t && v && v.textContent === '2.0.0 → 2.1.0' && document.querySelectorAll('#groups tr[data-group]').length === 3 && t.textContent;",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(shown, json!("Rollout of updater"));
    shot(&b, "products").await;
    b.client
        .execute(
            "document.querySelector('button[data-action=start-update][data-group=dev]').click();",
            vec![],
        )
        .await
        .unwrap();
    b.wait_js(
        "the updater's start preview",
        "const ok = document.getElementById('confirm-ok'); return document.getElementById('confirm').open && !ok.disabled && document.getElementById('confirm-effects').textContent.includes('dev');",
        WAIT,
    )
    .await
    .unwrap();
    b.client
        .execute("document.getElementById('confirm-ok').click();", vec![])
        .await
        .unwrap();
    b.wait_js(
        "the updater's dev started on the page",
        "const r = document.querySelector('tr[data-group=dev]'); return !document.getElementById('confirm').open && r && r.dataset.state === 'canary';",
        WAIT,
    )
    .await
    .unwrap();
    let updater = t
        .op("GET", "/v1/resources/rollout?product=updater", None)
        .unwrap();
    assert_eq!(
        updater["status"]["groups"][0]["state"], "canary",
        "{updater}"
    );
    assert_eq!(
        group_state(&t, "dev"),
        "done",
        "the agent's dev is untouched"
    );
    goto_hash(&b, "#/rollout").await;
    b.wait_js(
        "the agent's rollout again",
        "const t = document.getElementById('rollout-title'); const v = document.getElementById('versions'); return t && t.textContent === 'Rollout' && v && v.textContent === '1.0.0 → 1.1.0';",
        WAIT,
    )
    .await
    .unwrap();

    // A viewer: every write button is there but disabled, and pressing one does nothing.
    b.client
        .execute("document.getElementById('logout').click();", vec![])
        .await
        .unwrap();
    page_shown(&b, "login").await;
    log_in(&b, &t, &viewer).await;
    let buttons = b
        .client
        .execute(
            "const bs = [...document.querySelectorAll('button[data-action]')]; return [bs.length, bs.filter(b => !b.disabled).length];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        buttons[1],
        json!(0),
        "a viewer has enabled write buttons: {buttons}"
    );
    assert!(buttons[0].as_u64().unwrap() >= 10, "{buttons}");
    let before = t.op("GET", "/v1/resources/rollout", None).unwrap();
    // A click runs its handlers before `click()` returns, and an action opens its
    // dialog before it awaits anything: had a click opened one, it is open when the
    // script reads it, right after the clicks.
    let open = b
        .client
        .execute(
            "for (const b of document.querySelectorAll('button[data-action]')) b.click(); return document.getElementById('confirm').open;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(open, json!(false), "a viewer's click opened an action");
    let after = t.op("GET", "/v1/resources/rollout", None).unwrap();
    assert_eq!(before["status"]["groups"], after["status"]["groups"]);
    let who = b
        .client
        .execute("return document.getElementById('who').textContent;", vec![])
        .await
        .unwrap();
    assert!(who.as_str().unwrap().contains("viewer"), "{who}");
    shot(&b, "viewer").await;

    // The history (a viewer may read it): a new rollout replaces 1.1.0's, which stays
    // with its timeline (dev's canary failing and why, the rollback pressed in the page
    // and who pressed it) and a chart of each group's hosts over time.
    t.op(
        "POST",
        "/v1/agents/new-rollout",
        Some(r#"{"version": "1.1.1"}"#),
    )
    .unwrap();
    goto_hash(&b, "#/history").await;
    page_shown(&b, "history").await;
    let rollouts = b
        .wait_js(
            "two rollouts in the history",
            "const a = [...document.querySelectorAll('article[data-rollout]')]; return a.length === 2 && a.map(x => [x.dataset.ended, x.querySelector('h2').textContent]);",
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(rollouts[0][0], json!("no"), "{rollouts}");
    assert_eq!(rollouts[1][0], json!("yes"), "{rollouts}");
    let replaced = rollouts[1][1].as_str().unwrap();
    assert!(
        replaced.starts_with("1.0.0 → 1.1.0")
            && replaced.contains(" by ")
            && replaced.ends_with("→ 1.1.1"),
        "{replaced}"
    );
    let timeline = b
        .client
        .execute(
            "const a = document.querySelectorAll('article[data-rollout]')[1]; return [...a.querySelectorAll('.timeline li')].map(l => l.dataset.kind + ': ' + l.textContent);",
            vec![],
        )
        .await
        .unwrap();
    let said = |kind: &str, part: &str| {
        timeline.as_array().unwrap().iter().any(|l| {
            let l = l.as_str().unwrap();
            l.starts_with(&format!("{kind}: ")) && l.contains(part)
        })
    };
    assert!(
        said("rollout_created", "1.0.0 → 1.1.0 created"),
        "{timeline}"
    );
    assert!(said("group", "dev: unstarted → canary"), "{timeline}");
    assert!(
        said("canary_failed", "not running (5 checks in a row)")
            && said("canary_failed", "cannot read its configuration"),
        "{timeline}"
    );
    assert!(said("alert_raised", ""), "{timeline}");
    assert!(said("group", "dev: canary → rolledback"), "{timeline}");
    assert!(
        said("action", "(operator): POST /v1/agents/rollback"),
        "{timeline}"
    );
    assert!(said("rollout_replaced", "→ 1.1.1"), "{timeline}");
    // A chart per group, three series each; dev's shows its 6 hosts.
    let charts = b
        .client
        .execute(
            "const a = document.querySelectorAll('article[data-rollout]')[1]; return [...a.querySelectorAll('svg[data-chart]')].map(c => [c.dataset.chart, [...c.querySelectorAll('polyline')].map(p => p.dataset.series + '=' + p.dataset.last)]);",
            vec![],
        )
        .await
        .unwrap();
    let charts = charts.as_array().unwrap();
    assert_eq!(
        charts.iter().map(|c| c[0].clone()).collect::<Vec<_>>(),
        [json!("dev"), json!("staging"), json!("prod")]
    );
    let dev: Vec<&str> = charts[0][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(dev.len(), 3, "{dev:?}");
    let hosts: u64 = dev
        .iter()
        .map(|s| s.split('=').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(hosts, 6, "{dev:?}");
    b.client.set_window_size(1280, 1300).await.unwrap();
    shot(&b, "history").await;
    b.close().await.unwrap();
}
