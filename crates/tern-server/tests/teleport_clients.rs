//! Teleport's own clients pointed at a real ternd: the requests they send, replayed
//! byte for byte over a TCP socket, and their answers read as those clients read them.
//!
//! - `teleport-update` (RFD 184) asks `webclient.Find`: `GET /webapi/find?group=G`,
//!   and decodes the answer into Teleport's `PingResponse` (`auto_update.agent_version`,
//!   `agent_auto_update`, `agent_update_jitter_seconds`, `edition`, `fips`).
//! - Teleport's RFD 109 upgraders (the Kubernetes agent updater, `teleport-upgrade`)
//!   ask the version server: `GET /v1/webapi/automaticupgrades/channel/C/version` and
//!   `/critical`, plain text (`v1.2.3` or `none`; `yes` or `no`).
//!
//! The requests are what Go's `net/http` client writes for them (request line, `Host`,
//! `User-Agent: Go-http-client/1.1`, `Accept-Encoding: gzip`). Teleport's client tries
//! HTTPS first and falls back to plain HTTP on loopback only when told `--insecure`;
//! ternd here listens in plain HTTP, which is that fallback. No Teleport binary runs
//! here (none can be fetched): these bytes stand in for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{Ternd, three_groups, version_yaml};
use serde_json::Value;

/// One request as Go's client sends it; (status, headers in lower case, body).
fn go_get(t: &Ternd, path_and_query: &str) -> (u16, Vec<(String, String)>, String) {
    let host = t.url.trim_start_matches("http://");
    let request = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    );
    let mut s = TcpStream::connect(host).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    // Go undoes gzip itself; ternd must not need it.
    assert_eq!(header("content-encoding"), None);
    let body = if header("transfer-encoding").is_some_and(|v| v == "chunked") {
        dechunk(body)
    } else {
        let len: usize = header("content-length").unwrap().parse().unwrap();
        assert_eq!(body.len(), len, "{path_and_query}: a whole body");
        body.to_string()
    };
    (status, headers, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        s = &rest[size + 2..];
    }
}

/// What `teleport-update` reads of `webclient.Find`, with the types Go decodes them
/// into (a string where Go has a string, an int where it has an int): a field of
/// another type fails Go's decoding of the whole answer.
fn teleport_find(t: &Ternd, group: &str) -> (String, bool) {
    let (status, headers, body) = go_get(t, &format!("/webapi/find?group={group}"));
    assert_eq!(status, 200, "{body}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("application/json")),
        "{headers:?}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    let au = &v["auto_update"];
    assert!(v["edition"].is_string() && v["fips"].is_boolean(), "{v}");
    assert!(v["server_version"].is_string(), "{v}");
    assert!(au["agent_update_jitter_seconds"].is_i64(), "{v}");
    assert!(au["tools_version"].is_string() && au["tools_auto_update"].is_boolean());
    (
        au["agent_version"].as_str().unwrap().to_string(),
        au["agent_auto_update"].as_bool().unwrap(),
    )
}

/// What an RFD 109 upgrader reads for channel `c`: (version, critical, tern-hold).
fn version_server(t: &Ternd, prefix: &str, c: &str) -> (String, String, Option<String>) {
    let get = |what: &str| {
        let (status, headers, body) = go_get(
            t,
            &format!("{prefix}/webapi/automaticupgrades/channel/{c}/{what}"),
        );
        assert_eq!(status, 200, "{c}/{what}: {body}");
        let hold = headers
            .iter()
            .find(|(k, _)| k == "tern-hold")
            .map(|(_, v)| v.clone());
        (body, hold)
    };
    let (version, hold) = get("version");
    let (critical, _) = get("critical");
    (version, critical, hold)
}

#[test]
fn teleport_clients_get_the_answers_the_one_gate_gives() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ternd::dev(dir.path());

    // No rollout yet: nothing to install, in the words of each protocol.
    assert_eq!(teleport_find(&t, "dev"), (String::new(), false));
    assert_eq!(
        version_server(&t, "/v1", "default"),
        ("none".into(), "no".into(), Some("no_rollout".into()))
    );

    t.put_resource("config", &three_groups());
    t.put_resource("version", &version_yaml("1.0.0", "1.1.0", "regular"));
    t.reconcile();
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");

    // 09:00: dev's window (10:00) has not come. find names the version the group runs;
    // an RFD 109 upgrader, which installs in a window of its own, is told none.
    assert_eq!(teleport_find(&t, "dev"), ("1.0.0".into(), false));
    assert_eq!(
        version_server(&t, "/v1", "dev"),
        ("none".into(), "no".into(), Some("group_not_started".into()))
    );

    // 10:05: dev is active. Both protocols say: 1.1.0, now. Without `/v1` too.
    t.set_clock("2026-11-23T10:05:00Z");
    t.heartbeat(&agent, "d1", "dev", "1.0.0");
    t.reconcile();
    assert_eq!(t.state_of("dev"), "active");
    assert_eq!(teleport_find(&t, "dev"), ("1.1.0".into(), true));
    for prefix in ["/v1", ""] {
        assert_eq!(
            version_server(&t, prefix, "dev"),
            ("v1.1.0".into(), "yes".into(), None)
        );
    }
    // prod has not started: none, whatever its upgraders' own windows say.
    assert_eq!(version_server(&t, "/v1", "prod").0, "none");
    // Ping answers what find answers.
    let (s, _, ping) = go_get(&t, "/webapi/ping?group=dev");
    let (_, _, find) = go_get(&t, "/webapi/find?group=dev");
    assert_eq!((s, ping), (200, find));

    // A channel set on ternd answers under its name, with RFD 109's leading v.
    t.op(
        "PUT",
        "/v1/channels/stable",
        Some(r#"{"version": "1.2.0", "critical": true}"#),
    );
    assert_eq!(
        version_server(&t, "/v1", "stable"),
        ("v1.2.0".into(), "yes".into(), None)
    );

    // A freeze is final for every Teleport client too.
    t.op(
        "PUT",
        "/v1/freeze",
        Some(r#"{"reason": "incident 7: agents crash"}"#),
    );
    assert_eq!(teleport_find(&t, "dev"), ("1.0.0".into(), false));
    for c in ["dev", "stable"] {
        assert_eq!(
            version_server(&t, "/v1", c),
            ("none".into(), "no".into(), Some("frozen".into())),
            "{c}"
        );
    }
    t.op("DELETE", "/v1/freeze", None);
    assert_eq!(version_server(&t, "/v1", "stable").0, "v1.2.0");

    // Suspended: the same.
    t.op("POST", "/v1/agents/suspend", None);
    t.reconcile();
    assert_eq!(teleport_find(&t, "dev"), ("1.0.0".into(), false));
    assert_eq!(
        version_server(&t, "/v1", "dev"),
        ("none".into(), "no".into(), Some("mode_suspended".into()))
    );
    // An explicit suspend holds channels as well.
    assert_eq!(
        version_server(&t, "/v1", "stable"),
        ("none".into(), "no".into(), Some("mode_suspended".into()))
    );

    // Paths that are not the version server's say what is wrong.
    for bad in ["version", "dev/latest", ""] {
        let (s, _, body) = go_get(&t, &format!("/v1/webapi/automaticupgrades/channel/{bad}"));
        assert!(s == 400 || s == 404, "{bad}: {s} {body}");
        if s == 400 {
            assert!(body.contains("critical"), "{bad}: {body}");
        }
    }
}
