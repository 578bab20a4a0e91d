//! Long-poll find on a real ternd (real HTTP over loopback, a real SQLite store): a
//! held find is answered when the host's answer changes and not before, a hold with
//! no change ends with the same answer, the held-request cap answers at once and is
//! counted, a bad `wait` is refused naming it, shutdown answers what it holds, and a
//! crowd of answered long polls closing gives the heap back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::mpsc;

use common::{Ternd, eventually, three_groups, version_yaml};
use serde_json::Value;

/// A find's status, `tern-long-poll` header, ETag and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    how: Option<String>,
    etag: String,
    body: Value,
}

fn find(t: &Ternd, query: &str) -> Answer {
    let (status, headers, text) = t.raw("GET", &format!("/v1/webapi/find?{query}"), None, None);
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());
    Answer {
        status,
        how: header("tern-long-poll"),
        etag: header("etag").unwrap_or_default(),
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

/// The same find from another thread: its answer arrives on the channel.
fn find_in_background(t: &Ternd, query: String) -> mpsc::Receiver<Answer> {
    let (tx, rx) = mpsc::channel();
    let probe = Ternd::probe(&t.url);
    std::thread::spawn(move || {
        let _ = tx.send(find(&probe, &query));
    });
    rx
}

fn enc(etag: &str) -> String {
    form_urlencoded::byte_serialize(etag.as_bytes()).collect()
}

/// A rollout whose dev group is unstarted at 09:00 (its window opens at 10:00).
fn unstarted_dev(t: &Ternd) {
    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
}

#[test]
fn a_held_find_answers_when_the_group_goes_active_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    unstarted_dev(&t);
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");

    let before = find(&t, "group=dev&updater_id=d1");
    assert_eq!(before.status, 200);
    assert_eq!(before.how, None, "a plain find is not a long poll");
    assert_eq!(
        before.body["auto_update"]["agent_auto_update"], false,
        "{:?}",
        before.body
    );
    assert!(!before.etag.is_empty(), "every find answer has an ETag");

    let held = find_in_background(
        &t,
        format!("group=dev&updater_id=d1&wait=50&seen={}", enc(&before.etag)),
    );
    eventually("the find to be held", || {
        t.metric("tern_find_long_poll_held") == 1
    });
    // Time moves (a snapshot change) but the host's answer does not: still held.
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    assert!(
        held.try_recv().is_err(),
        "answered before the group went active"
    );
    assert_eq!(t.metric("tern_find_long_poll_held"), 1);

    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    let after = held.recv().unwrap();
    assert_eq!(after.status, 200, "{after:?}");
    assert_eq!(after.how.as_deref(), Some("changed"));
    assert_eq!(
        after.body["auto_update"]["agent_version"], "1.1.0",
        "{after:?}"
    );
    assert_eq!(
        after.body["auto_update"]["agent_auto_update"], true,
        "{after:?}"
    );
    assert_ne!(after.etag, before.etag);
    // The same answer a plain find gives now, and its ETag.
    let plain = find(&t, "group=dev&updater_id=d1");
    assert_eq!((plain.body, plain.etag), (after.body, after.etag));
    assert_eq!(t.metric("tern_find_long_poll_changed_total"), 1);
    assert_eq!(t.metric("tern_find_long_poll_held"), 0);
}

/// A held find of one product answers when that product's answer changes, with its
/// answer; the agent's, held beside it on the same host, is not answered by the other
/// product's change, and then answers with the agent's version.
#[test]
fn a_held_find_of_a_product_answers_from_its_own_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    unstarted_dev(&t);
    t.op(
        "POST",
        "/v1/agents/new-rollout?product=updater",
        Some(r#"{"version": "2.1.0", "current_version": "2.0.0"}"#),
    );
    t.reconcile();
    let updater_q = "group=dev&updater_id=d1&product=updater";
    let agent_q = "group=dev&updater_id=d1";
    let (updater, agent) = (find(&t, updater_q), find(&t, agent_q));
    assert_eq!(
        updater.body["auto_update"]["agent_version"], "2.0.0",
        "{updater:?}"
    );
    assert_eq!(
        agent.body["auto_update"]["agent_version"], "1.0.0",
        "{agent:?}"
    );

    let held_updater = find_in_background(
        &t,
        format!("{updater_q}&wait=50&seen={}", enc(&updater.etag)),
    );
    let held_agent = find_in_background(&t, format!("{agent_q}&wait=50&seen={}", enc(&agent.etag)));
    eventually("both finds to be held", || {
        t.metric("tern_find_long_poll_held") == 2
    });

    // The updater's dev starts (by hand: its window is not open): its find answers.
    t.op(
        "POST",
        "/v1/agents/start-update?product=updater",
        Some(r#"{"groups": ["dev"]}"#),
    );
    let after = held_updater.recv().unwrap();
    assert_eq!(after.how.as_deref(), Some("changed"), "{after:?}");
    assert_eq!(
        (
            &after.body["auto_update"]["agent_version"],
            &after.body["auto_update"]["agent_auto_update"]
        ),
        (&serde_json::json!("2.1.0"), &serde_json::json!(true)),
        "{after:?}"
    );
    assert_eq!(find(&t, updater_q).etag, after.etag);
    assert_eq!(
        t.state_of("dev"),
        "unstarted",
        "the agent's dev did not start"
    );

    // The agent's dev starts: its find answers, with the agent's version.
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["dev"]}"#),
    );
    let after = held_agent.recv().unwrap();
    assert_eq!(after.how.as_deref(), Some("changed"), "{after:?}");
    assert_eq!(
        after.body["auto_update"]["agent_version"], "1.1.0",
        "{after:?}"
    );
    assert_eq!(t.metric("tern_find_long_poll_changed_total"), 2);
}

#[test]
fn a_held_find_answers_when_the_hosts_pin_lifts() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    unstarted_dev(&t);
    t.set_clock("2026-11-23T10:05:00Z");
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    let user = t.new_token("user");
    let (s, v) = t.call(
        "PUT",
        "/v1/inventory/d1/pin",
        Some(&user),
        Some(r#"{"until": "2026-11-23T12:00:00Z"}"#),
    );
    assert_eq!(s, 200, "{v}");
    let pinned = find(&t, "group=dev&updater_id=d1");
    assert_eq!(pinned.body["auto_update"]["agent_auto_update"], false);

    let held = find_in_background(
        &t,
        format!("group=dev&updater_id=d1&wait=50&seen={}", enc(&pinned.etag)),
    );
    eventually("the find to be held", || {
        t.metric("tern_find_long_poll_held") == 1
    });
    t.set_clock("2026-11-23T11:00:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    assert!(held.try_recv().is_err(), "answered while still pinned");

    // 12:00: the time alone lifts nothing; the leader's reconcile deletes the pin, a
    // change of the snapshot, which wakes the hold.
    t.set_clock("2026-11-23T12:00:00Z");
    assert!(
        held.try_recv().is_err(),
        "answered before the leader lifted the pin"
    );
    t.reconcile();
    let after = held.recv().unwrap();
    assert_eq!(after.how.as_deref(), Some("changed"), "{after:?}");
    assert_eq!(after.body["auto_update"]["agent_auto_update"], true);
}

/// On the system clock the leader lifts a pin at its first reconcile at or after the
/// pin's time: the held find of the pinned host is answered `changed` then, long before
/// its hold would end it.
#[test]
fn on_the_system_clock_a_held_find_answers_when_the_pin_lifts() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        dir.path(),
        &["--report-period", "2s", "--long-poll-jitter", "0"],
    );
    // The immediate schedule: every host is told to update now, unless pinned.
    t.put_resource(
        "version",
        &common::enabled_version("1.0.0", "1.1.0", "immediate"),
    );
    eventually("find to serve the rollout", || {
        find(&t, "group=dev&updater_id=d1").body["auto_update"]["agent_auto_update"] == true
    });
    let until = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let user = t.new_token("user");
    let (s, v) = t.call(
        "PUT",
        "/v1/inventory/d1/pin",
        Some(&user),
        Some(&format!(r#"{{"until": "{until}"}}"#)),
    );
    assert_eq!(s, 200, "{v}");
    let mut pinned = find(&t, "group=dev&updater_id=d1");
    eventually("find to hold the pinned host", || {
        pinned = find(&t, "group=dev&updater_id=d1");
        pinned.body["auto_update"]["agent_auto_update"] == false
    });
    assert!(
        jiff::Timestamp::now() < until,
        "the test machine is too slow for this test"
    );
    let after = find(
        &t,
        &format!("group=dev&updater_id=d1&wait=50&seen={}", enc(&pinned.etag)),
    );
    assert_eq!(after.how.as_deref(), Some("changed"), "{after:?}");
    assert_eq!(after.body["auto_update"]["agent_auto_update"], true);
    assert!(jiff::Timestamp::now() >= until);
}

#[test]
fn holds_end_with_the_same_answer_and_bad_waits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());
    unstarted_dev(&t);
    let first = find(&t, "group=dev&updater_id=d1");

    // Nothing changes: after the (one second) hold, the same answer.
    let same = find(
        &t,
        &format!("group=dev&updater_id=d1&wait=1&seen={}", enc(&first.etag)),
    );
    assert_eq!(same.status, 200);
    assert_eq!(same.how.as_deref(), Some("expired"));
    assert_eq!((&same.body, &same.etag), (&first.body, &first.etag));
    assert_eq!(t.metric("tern_find_long_poll_expired_total"), 1);

    // A host holding another answer (or none) is answered at once.
    let other = find(&t, "group=dev&updater_id=d1&wait=50&seen=%22feed%22");
    assert_eq!(other.how.as_deref(), Some("immediate"));
    assert_eq!(other.etag, first.etag);
    let unseen = find(&t, "group=dev&updater_id=d1&wait=50");
    assert_eq!(unseen.how.as_deref(), Some("immediate"));

    for bad in ["soon", "-1", "1.5", ""] {
        let a = find(&t, &format!("group=dev&updater_id=d1&wait={bad}"));
        assert_eq!(a.status, 400, "wait={bad}: {a:?}");
        let msg = a.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(&format!("wait: {bad:?}")), "{msg}");
        assert!(msg.contains("whole number of seconds"), "{msg}");
    }
    assert_eq!(t.metric("tern_find_long_poll_changed_total"), 0);
}

#[test]
fn over_the_cap_a_long_poll_is_answered_at_once_and_shutdown_answers_the_held() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Ternd::start(
        dir.path(),
        &["--dev-clock", common::T0, "--long-poll-max-held", "1"],
    );
    unstarted_dev(&t);
    let first = find(&t, "group=dev&updater_id=d1");
    let query = format!("group=dev&updater_id=d1&wait=50&seen={}", enc(&first.etag));
    let held = find_in_background(&t, query.clone());
    eventually("the find to be held", || {
        t.metric("tern_find_long_poll_held") == 1
    });

    let refused = find(&t, &query);
    assert_eq!(refused.status, 200);
    assert_eq!(refused.how.as_deref(), Some("busy"));
    assert_eq!((&refused.body, &refused.etag), (&first.body, &first.etag));
    assert_eq!(t.metric("tern_find_long_poll_refused_total"), 1);
    assert!(held.try_recv().is_err(), "the first is still held");

    // SIGTERM: the held find is answered (unchanged), not cut off.
    t.stop();
    let last = held.recv().unwrap();
    assert_eq!(last.status, 200, "{last:?}");
    assert_eq!(last.how.as_deref(), Some("expired"));
    assert_eq!(last.etag, first.etag);
}

#[test]
fn holds_are_shortened_to_end_within_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        dir.path(),
        &[
            "--dev-clock",
            common::T0,
            "--request-timeout",
            "3s",
            "--long-poll-jitter",
            "0s",
        ],
    );
    unstarted_dev(&t);
    let first = find(&t, "group=dev&updater_id=d1");
    // Asked for 50 s, held at most 2 s: answered, not cut off with a 408.
    let same = find(
        &t,
        &format!("group=dev&updater_id=d1&wait=50&seen={}", enc(&first.etag)),
    );
    assert_eq!(same.status, 200, "{same:?}");
    assert_eq!(same.how.as_deref(), Some("expired"));
    assert_eq!(same.etag, first.etag);
}

/// One host's connection holding a long-poll find, as tern-update's watcher keeps it:
/// a plain find for the ETag, then the held one on the same connection.
fn hold(addr: &str, host: usize) -> std::net::TcpStream {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let path = format!("/v1/webapi/find?group=dev&updater_id=h{host}");
    write!(s, "GET {path} HTTP/1.1\r\nHost: ternd\r\n\r\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let (mut etag, mut len) = (String::new(), 0);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "etag" => etag = value.trim().to_string(),
            "content-length" => len = value.trim().parse().unwrap(),
            _ => {}
        }
    }
    r.read_exact(&mut vec![0; len]).unwrap();
    write!(
        s,
        "GET {path}&wait=50&seen={} HTTP/1.1\r\nHost: ternd\r\n\r\n",
        enc(&etag)
    )
    .unwrap();
    s
}

/// A group's start answers every long-polling host at once and the hosts close those
/// connections to update: their buffers are freed together, and ternd gives the heap
/// back to the system once they are closed, as after a burst of history writes.
#[test]
fn a_crowd_of_answered_long_polls_closing_trims_the_heap() {
    const HOSTS: usize = 1_100;
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        dir.path(),
        &[
            "--dev-clock",
            common::T0,
            "--find-rate",
            "0",
            "--max-connections-per-ip",
            "2000",
        ],
    );
    unstarted_dev(&t);
    let addr = t.url.strip_prefix("http://").unwrap().to_string();
    let held: Vec<_> = (0..HOSTS).map(|i| hold(&addr, i)).collect();
    eventually("every find to be held", || {
        t.metric("tern_find_long_poll_held") == HOSTS as u64
    });
    // Gathering a crowd frees nothing: the history writer, which decides on trims,
    // has ended two rounds since (the second one begun with the crowd gathered).
    let rounds = t.metric("tern_host_history_rounds_total");
    eventually("two rounds of the history writer", || {
        t.metric("tern_host_history_rounds_total") >= rounds + 2
    });
    assert_eq!(t.metric("tern_heap_trims_total"), 0);

    t.set_clock("2026-11-23T10:05:00Z");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    eventually("every held find to be answered", || {
        t.metric("tern_find_long_poll_held") == 0
    });
    drop(held);
    eventually("the heap to be trimmed once the crowd closed", || {
        t.metric("tern_heap_trims_total") == 1
    });
}
