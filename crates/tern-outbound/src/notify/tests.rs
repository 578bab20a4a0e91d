#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::json;
use tern_testing::http::{HttpServer, Request, Response};

use super::*;

// ---- a receiver on loopback ---------------------------------------------------------

/// How the test receiver answers one request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    Status(u16),
    /// Read the request, answer nothing until [`Hook::release`], then 503.
    Hang,
}

struct HookState {
    script: VecDeque<Reply>,
    otherwise: Reply,
    requests: Vec<Request>,
    released: bool,
}

/// A receiver on tern-testing's loopback server: answers from a script, then
/// `otherwise`; records every request. A hanging answer holds its connection (the
/// handler waits) until released.
struct Hook {
    url: String,
    state: Arc<(Mutex<HookState>, Condvar)>,
    _server: HttpServer,
}

impl Hook {
    fn new(script: &[Reply], otherwise: Reply) -> Self {
        let state = Arc::new((
            Mutex::new(HookState {
                script: script.iter().copied().collect(),
                otherwise,
                requests: Vec::new(),
                released: false,
            }),
            Condvar::new(),
        ));
        let st = Arc::clone(&state);
        let server = HttpServer::start(move |req| {
            let (lock, released) = &*st;
            let mut s = lock.lock().unwrap();
            s.requests.push(req.clone());
            match s.script.pop_front().unwrap_or(s.otherwise) {
                Reply::Status(code) => Response::new(code, "no"),
                Reply::Hang => {
                    let _s = released.wait_while(s, |s| !s.released).unwrap();
                    Response::new(503, "released")
                }
            }
        });
        Hook {
            url: format!("{}/hook/path", server.url()),
            state,
            _server: server,
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.state.0.lock().unwrap().requests.clone()
    }

    /// Answers 200 from now on; the requests held so far are answered 503.
    fn release(&self) {
        let (lock, released) = &*self.state;
        let mut s = lock.lock().unwrap();
        s.otherwise = Reply::Status(200);
        s.script.clear();
        s.released = true;
        released.notify_all();
    }
}

// ---- helpers --------------------------------------------------------------------------

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn alert(kind: &str, group: Option<&str>, since: &str) -> AlertView {
    AlertView {
        kind: kind.into(),
        group: group.map(Into::into),
        message: format!("{kind} message"),
        since: t(since),
    }
}

fn canary_notice() -> Notice {
    Notice {
        event: NoticeEvent::Raised,
        alert: AlertView {
            kind: "canary_failed".into(),
            group: Some("staging".into()),
            message: "1 of 1 canaries failed".into(),
            since: t("2026-11-23T10:02:00Z"),
        },
        rollout: Some(RolloutVersions {
            start_version: "1.0.0".into(),
            target_version: "1.1.0".into(),
            product: None,
        }),
        server: "prod-cp".into(),
        at: t("2026-11-23T10:03:00Z"),
        program: "ternd",
    }
}

/// A notice of a product other than the agent names it, in the Slack line and the
/// webhook body; the agent's says nothing of products (its bodies are as before).
#[test]
fn a_notice_of_another_product_names_it() {
    let mut n = canary_notice();
    let agent = serde_json::to_value(&n).unwrap();
    assert!(agent["rollout"].get("product").is_none(), "{agent}");
    n.rollout.as_mut().unwrap().product = Some("updater".into());
    assert!(
        n.slack_text()
            .ends_with("(raised; rollout of updater 1.0.0 → 1.1.0)"),
        "{}",
        n.slack_text()
    );
    assert_eq!(
        serde_json::to_value(&n).unwrap()["rollout"]["product"],
        "updater"
    );
}

/// Short waits for tests: no multi-second sleeps.
fn fast() -> DeliveryConfig {
    DeliveryConfig {
        queue: 16,
        attempts: 5,
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        timeout: Duration::from_secs(30),
    }
}

fn settings(webhooks: &[&Hook], slack: &[&Hook], token: Option<&str>) -> NotifySettings {
    let dir = tempfile::tempdir().unwrap();
    let token_file = token.map(|tok| {
        let p = dir.path().join("token");
        std::fs::write(&p, format!("{tok}\n")).unwrap();
        p
    });
    let w: Vec<String> = webhooks.iter().map(|h| h.url.clone()).collect();
    let s: Vec<String> = slack.iter().map(|h| h.url.clone()).collect();
    NotifySettings::from_flags(&w, &s, token_file.as_deref(), Some("prod-cp".into())).unwrap()
}

/// Polls `f` (generous deadline) without blocking the runtime.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---- delivery over HTTP ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_gets_the_notice_as_json_with_the_bearer_token() {
    let hook = Hook::new(&[], Reply::Status(200));
    let n = Notifiers::start_with(&settings(&[&hook], &[], Some("s3cret")), fast());
    n.send(canary_notice());
    eventually("the delivery", || {
        n.counts("webhook-1") == Some([1, 0, 0, 0])
    })
    .await;
    let reqs = hook.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.target, "/hook/path");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("authorization"), Some("Bearer s3cret"));
    assert!(r.header("user-agent").unwrap().starts_with("ternd/"));
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        body,
        json!({
            "event": "raised",
            "alert": {
                "kind": "canary_failed",
                "group": "staging",
                "message": "1 of 1 canaries failed",
                "since": "2026-11-23T10:02:00Z",
            },
            "rollout": {"start_version": "1.0.0", "target_version": "1.1.0"},
            "server": "prod-cp",
            "at": "2026-11-23T10:03:00Z",
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_gets_one_readable_line() {
    let hook = Hook::new(&[], Reply::Status(200));
    // The token is for generic webhooks only: never sent to Slack.
    let web = Hook::new(&[], Reply::Status(200));
    let n = Notifiers::start_with(&settings(&[&web], &[&hook], Some("s3cret")), fast());
    n.send(canary_notice());
    let mut cleared = canary_notice();
    cleared.event = NoticeEvent::Cleared;
    cleared.rollout = None;
    cleared.alert.group = None;
    cleared.alert.message = "agents <vanished> & back".into();
    n.send(cleared);
    eventually("both deliveries", || {
        n.counts("slack-1") == Some([2, 0, 0, 0])
    })
    .await;
    let reqs = hook.requests();
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    assert_eq!(reqs[0].header("authorization"), None);
    let bodies: Vec<serde_json::Value> = reqs
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(
        bodies,
        [
            json!({"text": ":rotating_light: ternd prod-cp: group staging: 1 of 1 canaries failed (raised; rollout 1.0.0 → 1.1.0)"}),
            json!({"text": ":white_check_mark: ternd prod-cp: agents &lt;vanished&gt; &amp; back (cleared)"}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_failing_twice_gets_the_notice_on_the_third_attempt() {
    let hook = Hook::new(
        &[Reply::Status(500), Reply::Status(503)],
        Reply::Status(200),
    );
    let n = Notifiers::start_with(&settings(&[&hook], &[], None), fast());
    n.send(canary_notice());
    eventually("the delivery", || {
        n.counts("webhook-1") == Some([1, 0, 2, 0])
    })
    .await;
    let reqs = hook.requests();
    assert_eq!(reqs.len(), 3);
    // The same notice every time, without a token when none is configured.
    assert!(reqs.iter().all(|r| r.body == reqs[0].body));
    assert_eq!(reqs[0].header("authorization"), None);
    let mut out = String::new();
    n.render_metrics(&mut out);
    assert!(
        out.contains("tern_notify_sent_total{receiver=\"webhook-1\"} 1\n"),
        "{out}"
    );
    assert!(
        out.contains("tern_notify_retries_total{receiver=\"webhook-1\"} 2\n"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_after_the_attempts_and_at_once_on_a_client_error() {
    let down = Hook::new(&[], Reply::Status(502));
    let refuses = Hook::new(&[], Reply::Status(400));
    let n = Notifiers::start_with(&settings(&[&down, &refuses], &[], None), fast());
    n.send(canary_notice());
    eventually("both given up", || {
        n.counts("webhook-1") == Some([0, 1, 4, 0]) && n.counts("webhook-2") == Some([0, 1, 0, 0])
    })
    .await;
    assert_eq!(down.requests().len(), 5);
    assert_eq!(refuses.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_blocks_neither_send_nor_the_others() {
    let hangs = Hook::new(&[], Reply::Hang);
    let fine = Hook::new(&[], Reply::Status(200));
    let config = DeliveryConfig {
        queue: 2,
        attempts: 1,
        ..fast()
    };
    let n = Notifiers::start_with(&settings(&[&hangs, &fine], &[], None), config);
    n.send(canary_notice());
    eventually("the first request to hang", || hangs.requests().len() == 1).await;
    // The hanging receiver's task is stuck in its request: its queue takes two, the
    // other eight are dropped; every send returned while the receiver still hangs.
    for _ in 0..10 {
        n.send(canary_notice());
    }
    assert_eq!(hangs.requests().len(), 1);
    assert_eq!(n.counts("webhook-1").unwrap()[3], 8);
    // The other receiver gets everything (its queue drains as it goes).
    eventually("the other receiver", || {
        n.counts("webhook-2").unwrap()[0] + n.counts("webhook-2").unwrap()[3] == 11
    })
    .await;
    assert!(n.counts("webhook-2").unwrap()[0] >= 3);
    let mut out = String::new();
    n.render_metrics(&mut out);
    assert!(
        out.contains("tern_notify_dropped_total{receiver=\"webhook-1\"} 8\n"),
        "{out}"
    );
    // Released: the hung request is answered 503 and fails (one attempt), the two
    // queued ones arrive.
    hangs.release();
    eventually("the queue drained", || {
        n.counts("webhook-1") == Some([2, 1, 0, 8])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_has_a_timeout() {
    let hangs = Hook::new(&[], Reply::Hang);
    let config = DeliveryConfig {
        attempts: 2,
        timeout: Duration::from_millis(300),
        ..fast()
    };
    let n = Notifiers::start_with(&settings(&[&hangs], &[], None), config);
    n.send(canary_notice());
    eventually("two timed-out attempts", || {
        n.counts("webhook-1") == Some([0, 1, 1, 0])
    })
    .await;
    assert_eq!(hangs.requests().len(), 2);
    hangs.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_changes_sends_the_diff() {
    let hook = Hook::new(&[], Reply::Status(200));
    let n = Notifiers::start_with(&settings(&[&hook], &[], None), fast());
    let before = [alert("group_overdue", Some("dev"), "2026-11-23T10:00:00Z")];
    let after = [alert(
        "canary_failed",
        Some("staging"),
        "2026-11-23T10:02:00Z",
    )];
    let sent = n.notify_changes(&before, &after, None, t("2026-11-23T10:03:00Z"));
    assert_eq!(sent, 2);
    eventually("two deliveries", || {
        n.counts("webhook-1") == Some([2, 0, 0, 0])
    })
    .await;
    let events: Vec<serde_json::Value> = hook
        .requests()
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "cleared");
    assert_eq!(events[0]["alert"]["kind"], "group_overdue");
    assert_eq!(events[0]["rollout"], serde_json::Value::Null);
    assert_eq!(events[1]["event"], "raised");
    assert_eq!(events[1]["server"], "prod-cp");
}

#[test]
fn no_receivers_send_nothing_and_need_no_runtime() {
    let n = Notifiers::none();
    assert!(n.is_empty());
    n.send(canary_notice());
    assert_eq!(
        n.notify_changes(
            &[],
            &[alert("rollback", None, "2026-11-23T10:00:00Z")],
            None,
            Timestamp::UNIX_EPOCH
        ),
        0
    );
    let mut out = String::new();
    n.render_metrics(&mut out);
    assert!(out.contains("# TYPE tern_notify_dropped_total counter"));
}

// ---- the diff -------------------------------------------------------------------------

#[test]
fn diff_raises_new_alerts_and_clears_gone_ones() {
    let at = t("2026-11-23T10:05:00Z");
    let overdue = alert("group_overdue", Some("dev"), "2026-11-23T10:00:00Z");
    let canary = alert("canary_failed", Some("staging"), "2026-11-23T10:01:00Z");
    let vanished = alert("agents_vanished", None, "2026-11-23T10:02:00Z");
    let rollout = RolloutVersions {
        start_version: "1.0.0".into(),
        target_version: "1.1.0".into(),
        product: None,
    };
    let got = diff_alerts(
        &[overdue.clone(), canary.clone()],
        &[canary.clone(), vanished.clone()],
        Some(&rollout),
        "prod-cp",
        at,
    );
    assert_eq!(
        got,
        vec![
            Notice {
                event: NoticeEvent::Cleared,
                alert: overdue.clone(),
                rollout: Some(rollout.clone()),
                server: "prod-cp".into(),
                at,
                program: "ternd",
            },
            Notice {
                event: NoticeEvent::Raised,
                alert: vanished,
                rollout: Some(rollout),
                server: "prod-cp".into(),
                at,
                program: "ternd",
            },
        ]
    );
    // Nothing changed: nothing to say.
    assert!(
        diff_alerts(
            std::slice::from_ref(&overdue),
            std::slice::from_ref(&overdue),
            None,
            "x",
            at
        )
        .is_empty()
    );
    assert!(diff_alerts(&[], &[], None, "x", at).is_empty());
}

#[test]
fn diff_keys_by_kind_and_group() {
    let at = t("2026-11-23T10:05:00Z");
    let dev = alert("group_halted", Some("dev"), "2026-11-23T10:00:00Z");
    let prod = alert("group_halted", Some("prod"), "2026-11-23T10:00:00Z");
    let global = alert("group_halted", None, "2026-11-23T10:00:00Z");
    let got = diff_alerts(
        std::slice::from_ref(&dev),
        &[prod.clone(), global.clone()],
        None,
        "x",
        at,
    );
    let summary: Vec<(NoticeEvent, Option<String>)> = got
        .iter()
        .map(|n| (n.event, n.alert.group.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (NoticeEvent::Cleared, Some("dev".into())),
            (NoticeEvent::Raised, Some("prod".into())),
            (NoticeEvent::Raised, None),
        ]
    );
}

#[test]
fn diff_message_changes_are_quiet_and_a_new_since_is_a_new_alert() {
    let at = t("2026-11-23T10:05:00Z");
    let old = alert("agents_vanished", Some("dev"), "2026-11-23T10:00:00Z");
    let mut louder = old.clone();
    louder.message = "5 agents vanished".into();
    assert!(diff_alerts(std::slice::from_ref(&old), &[louder], None, "x", at).is_empty());

    let again = alert("agents_vanished", Some("dev"), "2026-11-23T10:04:00Z");
    let got = diff_alerts(
        std::slice::from_ref(&old),
        std::slice::from_ref(&again),
        None,
        "x",
        at,
    );
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].event, &got[0].alert), (NoticeEvent::Cleared, &old));
    assert_eq!((got[1].event, &got[1].alert), (NoticeEvent::Raised, &again));

    // A key listed twice counts once.
    let got = diff_alerts(&[], &[old.clone(), old.clone()], None, "x", at);
    assert_eq!(got.len(), 1);
    let got = diff_alerts(&[old.clone(), old], &[], None, "x", at);
    assert_eq!(got.len(), 1);
}

// ---- configuration --------------------------------------------------------------------

#[test]
fn urls_must_be_http_or_https_with_a_host() {
    for ok in [
        "http://127.0.0.1:9000/hook",
        "https://hooks.slack.com/services/T0/B0/xyz",
        "HTTPS://alerts.example.com",
    ] {
        assert_eq!(parse_notify_url(ok).as_deref(), Ok(ok), "{ok}");
    }
    for (bad, says) in [
        ("ftp://example.com/x", "only http:// and https://"),
        ("alerts.example.com/hook", "not an absolute URL"),
        ("/hook", "not an absolute URL"),
        ("", "not an absolute URL"),
        ("https://", "not a URL"),
        ("mailto://ops@example.com", "scheme \"mailto\""),
        ("http://exa mple.com", "not a URL"),
    ] {
        let e = parse_notify_url(bad).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn settings_read_the_token_file_and_name_the_flag_when_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = vec!["https://alerts.example.com/hook".to_string()];
    let missing = dir.path().join("missing");
    let e = NotifySettings::from_flags(&url, &[], Some(&missing), None).unwrap_err();
    assert!(e.to_string().starts_with("--notify-token-file "), "{e}");
    assert!(e.to_string().contains("cannot read"), "{e}");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let e = NotifySettings::from_flags(&url, &[], Some(&empty), None).unwrap_err();
    assert!(e.to_string().contains("is empty"), "{e}");

    let e = NotifySettings::from_flags(&[], &url, Some(&empty), None).unwrap_err();
    assert!(e.to_string().contains("--notify-webhook"), "{e}");

    let e = NotifySettings::from_flags(&[], &["ftp://x".into()], None, None).unwrap_err();
    assert!(
        e.to_string().starts_with("--notify-slack \"ftp://x\""),
        "{e}"
    );

    // Debug shows names and hosts, never the token or a URL's secret path.
    let tok = dir.path().join("tok");
    std::fs::write(&tok, "s3cret\n").unwrap();
    let s = NotifySettings::from_flags(
        &url,
        &["https://hooks.slack.com/services/T0/B0/xyz".into()],
        Some(&tok),
        None,
    )
    .unwrap();
    let dbg = format!("{s:?}");
    assert!(dbg.contains("webhook-1 (alerts.example.com)"), "{dbg}");
    assert!(dbg.contains("slack-1 (hooks.slack.com)"), "{dbg}");
    assert!(!dbg.contains("s3cret") && !dbg.contains("xyz"), "{dbg}");
    // The server name defaults to the host name.
    assert!(!s.server.is_empty());
}

#[test]
fn backoff_doubles_up_to_its_cap() {
    let c = DeliveryConfig::default();
    let waits: Vec<u64> = (1..=9).map(|a| c.backoff(a).as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert_eq!(c.backoff(200), Duration::from_secs(60));
}
