//! Attacks on the real ternd over loopback: each test reproduces one that once worked
//! (slow clients, nested bodies, floods, bad flags) and checks it no longer does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Ternd, enabled_version};

/// Puts an immediate rollout 1.0.0 → 1.1.0 in place: find answers 200 for any group.
fn serve_find(t: &Ternd) {
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "immediate"));
    t.reconcile();
}

/// A client that gives up after `secs`: "find answers" means it answers within that.
fn patient_get(url: &str, secs: u64) -> Result<u16, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(secs)))
        .build()
        .into();
    agent
        .get(url)
        .call()
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

/// 40k levels of `[` sent to the config endpoint by a user once took seconds to minutes
/// of CPU on the async workers (find stalled, the leader lost its lease). Now the body
/// is refused before parsing, naming the depth, and find answers all along.
#[test]
fn deeply_nested_bodies_are_refused_before_parsing_and_find_keeps_answering() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    serve_find(&t);
    let user = t.new_token("user");
    let n = 40_000;
    let body = format!(
        "{{\"kind\":\"autoupdate_config\",\"spec\":{}{}}}",
        "[".repeat(n),
        "]".repeat(n)
    );
    let find_url = format!("{}/v1/webapi/find?group=dev&host=h1", t.url);
    std::thread::scope(|s| {
        let posters: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    t.call(
                        "POST",
                        "/v1/resources/config?force=true",
                        Some(&user),
                        Some(&body),
                    )
                })
            })
            .collect();
        for _ in 0..20 {
            assert_eq!(
                patient_get(&find_url, 10),
                Ok(200),
                "find must answer during the attack"
            );
        }
        for p in posters {
            let (status, v) = p.join().unwrap();
            assert_eq!(status, 400, "{v}");
            let message = v["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("nested deeper than 64 levels"), "{v}");
        }
    });
    // Nothing was stored.
    let (status, _) = t.call("GET", "/v1/resources/config", Some(&t.token), None);
    assert_eq!(status, 404);
}

/// `n` connections from the loopback address `source` (127.0.0.2 and up are other
/// "hosts" on Linux), each sending `prefix` and then nothing more.
fn hold_connections(
    rt: &tokio::runtime::Runtime,
    source: std::net::Ipv4Addr,
    server: std::net::SocketAddr,
    n: usize,
    prefix: &[u8],
) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..n {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind((source, 0).into()).unwrap();
            let Ok(stream) = socket.connect(server).await else {
                continue;
            };
            let mut stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            let _ = stream.write_all(prefix);
            held.push(stream);
        }
        held
    })
}

fn addr_of(t: &Ternd) -> std::net::SocketAddr {
    t.url.trim_start_matches("http://").parse().unwrap()
}

fn metric(t: &Ternd, line_prefix: &str) -> u64 {
    let (_, _, text) = t.raw("GET", "/metrics", None, None);
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_prefix} in\n{text}"))
}

const HALF_REQUEST: &[u8] = b"GET /v1/webapi/find?group=dev HTTP/1.1\r\nHost: ternd\r\nX-Slow: ";

/// 1,100 half-sent requests once used up a 1,024-descriptor limit (systemd's usual
/// soft default) and every find timed out. One address now holds at most
/// `--max-connections-per-ip`, the rest are closed on arrival, and find answers.
#[test]
fn slowloris_from_one_address_cannot_take_find_down() {
    // The attack holds over a thousand sockets: the soft limit goes to the hard one.
    let _ = tern_server::descriptor_budget();
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::spawn_via(
        &["prlimit", "--nofile=1024:1024", "--"],
        &tmp.path().join("data"),
        &["--insecure-http", "--dev-clock", common::T0],
    );
    serve_find(&t);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let attacker = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let held = hold_connections(&rt, attacker, addr_of(&t), 1_100, HALF_REQUEST);
    assert!(
        held.len() > 1_024,
        "the attack holds {} connections",
        held.len()
    );
    let find_url = format!("{}/v1/webapi/find?group=dev&host=h1", t.url);
    for _ in 0..20 {
        assert_eq!(
            patient_get(&find_url, 10),
            Ok(200),
            "find must answer during the attack"
        );
    }
    assert!(metric(&t, "tern_connections_shed_total{reason=\"per_address\"} ") >= 800);
    drop(held);
}

/// Half-open connections from many addresses fill every slot: the stalest idle ones
/// are closed to make room, so a host asking find still gets in.
#[test]
fn at_the_connection_cap_half_open_connections_make_room_for_find() {
    // The attack holds over a thousand sockets: the soft limit goes to the hard one.
    let _ = tern_server::descriptor_budget();
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--max-connections", "50"],
    );
    serve_find(&t);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut held = Vec::new();
    for last in 2..=5 {
        let source = std::net::Ipv4Addr::new(127, 0, 0, last);
        held.extend(hold_connections(&rt, source, addr_of(&t), 25, HALF_REQUEST));
    }
    let find_url = format!("{}/v1/webapi/find?group=dev&host=h1", t.url);
    for _ in 0..10 {
        assert_eq!(patient_get(&find_url, 10), Ok(200));
    }
    assert!(metric(&t, "tern_connections_evicted_total ") >= 50);
    assert!(metric(&t, "tern_connections_open ") <= 50);
    drop(held);
}

/// A connection that never finishes its headers, or never sends a byte, is closed
/// after `--header-read-timeout` / `--idle-timeout`; before, it stayed open forever.
#[test]
fn slow_and_silent_connections_are_closed() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--header-read-timeout",
            "1s",
            "--idle-timeout",
            "2s",
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let source = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let mut half = hold_connections(&rt, source, addr_of(&t), 1, HALF_REQUEST);
    let mut silent = hold_connections(&rt, source, addr_of(&t), 1, b"");
    for stream in half.iter_mut().chain(silent.iter_mut()) {
        // Generous: the server closes after one or two seconds; without the timeouts
        // the read blocks until this deadline.
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(text.starts_with("HTTP/1.1 408"), "{text}");
            }
            Err(e) => assert!(
                matches!(e.kind(), std::io::ErrorKind::ConnectionReset),
                "the server did not close the connection: {e}"
            ),
        }
    }
    assert!(metric(&t, "tern_connections_timed_out_total ") >= 1);
}

/// Everything the server sends on `stream` until it closes it; panics if it is still
/// open after 20 s (the timeouts under test are one or two seconds).
fn read_until_closed(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server did not close the connection ({e}); it sent:\n{}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A request whose body trickles in (headers complete, the body never finished) holds
/// a slot that the idle check cannot reclaim, since a request is in flight: it gets a
/// 408 after `--request-timeout`, and a kept-alive connection that finished its
/// request is closed after `--idle-timeout` like a silent one.
#[test]
fn a_trickled_body_gets_408_and_a_kept_alive_connection_is_closed_when_idle() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--dev-clock",
            common::T0,
            "--request-timeout",
            "2s",
            "--idle-timeout",
            "2s",
            // Longer than the reads wait: only the idle check can close the kept one.
            "--header-read-timeout",
            "30s",
        ],
    );
    let server = addr_of(&t);
    let before = metric(&t, "tern_connections_timed_out_total ");

    let mut trickle = std::net::TcpStream::connect(server).unwrap();
    write!(
        trickle,
        "POST /v1/resources/config HTTP/1.1\r\nHost: ternd\r\nAuthorization: Bearer {}\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\nkind: autoupdate_config\n",
        t.token
    )
    .unwrap();
    let answer = read_until_closed(&mut trickle);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    let mut kept = std::net::TcpStream::connect(server).unwrap();
    kept.write_all(b"GET /readyz HTTP/1.1\r\nHost: ternd\r\n\r\n")
        .unwrap();
    let answer = read_until_closed(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        answer.matches("HTTP/1.1").count(),
        1,
        "one answer, then the close: {answer}"
    );
    assert!(metric(&t, "tern_connections_timed_out_total ") > before);
    // Nothing of the trickled config was stored.
    let (status, _) = t.call("GET", "/v1/resources/config", Some(&t.token), None);
    assert_eq!(status, 404);
}

/// A start that fails on a flag or a file once left a data dir, a store and an
/// operator token behind (TLS files were read last). Now everything is checked, and
/// the port taken, before anything is created.
#[test]
fn a_start_refused_for_a_flag_or_a_file_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let file = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cert_file = file("tls.crt", &cert.cert.pem());
    let key_file = file("tls.key", &cert.key_pair.serialize_pem());
    let other_key = file("other.key", &other.key_pair.serialize_pem());
    let garbage = file("garbage.pem", "not a certificate\n");
    let missing = tmp.path().join("missing.pem").to_str().unwrap().to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--tls-cert", &missing, "--tls-key", &key_file],
            "missing.pem",
        ),
        (
            vec!["--tls-cert", &garbage, "--tls-key", &key_file],
            "holds no PEM certificate",
        ),
        (
            vec!["--tls-cert", &cert_file, "--tls-key", &garbage],
            "garbage.pem",
        ),
        (
            vec!["--tls-cert", &cert_file, "--tls-key", &other_key],
            "does not go with",
        ),
        (vec!["--insecure-http", "--find-rate=-1"], "--find-rate"),
        (
            vec!["--insecure-http", "--heartbeat-rate", "NaN"],
            "--heartbeat-rate",
        ),
        (
            vec!["--insecure-http", "--max-connections-per-ip", "0"],
            "at least 1",
        ),
        (
            vec!["--insecure-http", "--listen", &taken_addr],
            "listening on",
        ),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let dir = tmp.path().join(format!("data{i}"));
        let mut command = std::process::Command::new(common::ternd_bin());
        command.args(["start", "--data-dir"]).arg(&dir);
        if !args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        let out = command.args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: want {want:?} in\n{err}");
        assert!(!dir.exists(), "{args:?} left {} behind", dir.display());
    }
    drop(taken);
}

/// One agent token once made ternd hold whatever it was sent: 50,011 `/metrics` series
/// from invented groups and versions, and a report to match. The inventory is bounded
/// (`--max-agents`: new hosts refused with a clear 503, counted; known ones go on), and
/// the series and the report fold what is past their bounds into `(other)`.
#[test]
fn an_agent_flood_is_bounded_in_memory_metrics_and_report() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--max-agents", "300"],
    );
    serve_find(&t);
    let agent = t.new_token("agent");
    let heartbeat = |i: usize| {
        let body = serde_json::json!({
            "updater_id": format!("{i:08x}-0000-4000-8000-000000000000"),
            "host_id": format!("h{i}"),
            "group": format!("invented-{i}"),
            "version": format!("7.{i}.0"),
        });
        t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        )
    };
    let mut refused = 0;
    for i in 0..400 {
        let (status, v) = heartbeat(i);
        if status == 503 {
            assert_eq!(v["error"]["code"], "inventory_full", "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("--max-agents"),
                "{v}"
            );
            refused += 1;
        } else {
            assert_eq!(status, 200, "{v}");
        }
    }
    assert_eq!(refused, 100);
    assert_eq!(heartbeat(7).0, 200, "a tracked host goes on heartbeating");
    assert_eq!(metric(&t, "tern_heartbeats_inventory_full_total "), 100);
    let (_, _, text) = t.raw("GET", "/metrics", None, None);
    let series = text
        .lines()
        .filter(|l| l.starts_with("tern_inventory_agents{"))
        .count();
    assert!(series <= 34, "{series} series");
    assert!(
        text.contains("tern_inventory_agents{group=\"(other)\""),
        "{text}"
    );
    let sum: u64 = text
        .lines()
        .filter(|l| l.starts_with("tern_inventory_agents{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(sum, 300, "every tracked agent is counted");
    // The report written at the reconcile (once the agents have been connected for a
    // report period) is bounded the same way.
    t.advance("70s");
    t.reconcile();
    let (_, reports) = t.call("GET", "/v1/resources/reports", Some(&t.token), None);
    let groups = &reports[0]["spec"]["groups"];
    let n = groups.as_object().map_or(0, |g| g.len());
    assert!(n <= 34, "{n} groups in the report: {reports}");
    assert!(groups.get("(other)").is_some(), "{reports}");
    assert!(metric(&t, "tern_report_entries_folded_total ") > 0);
}

/// Admin writes and token changes once left no trace of who made them. Every one,
/// done or refused for the role, is now in the audit trail with the token's id and
/// role; reads and heartbeats are not.
#[test]
fn admin_writes_and_token_changes_are_audited_with_their_actor() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    let created = t.op("POST", "/v1/tokens", Some(r#"{"role":"user"}"#));
    let user = created["token"].as_str().unwrap().to_string();
    let user_id = created["id"].as_str().unwrap().to_string();
    let operator_id = t.token.split('_').nth(1).unwrap().to_string();
    let (s, _) = t.call("GET", "/v1/agents/status", Some(&user), None);
    assert_eq!(s, 200);
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "immediate"));
    let (s, _) = t.call(
        "PUT",
        "/v1/resources/version?force=true",
        Some(&user),
        Some(&enabled_version("1.0.0", "9.9.9", "immediate")),
    );
    assert_eq!(s, 403);
    let (s, _) = t.call("POST", "/v1/agents/suspend", Some(&user), None);
    assert_eq!(s, 200);
    t.op("DELETE", &format!("/v1/tokens/{user_id}"), None);
    let (s, trail) = t.call("GET", "/v1/audit", Some(&t.token), None);
    assert_eq!(s, 200);
    let rows: Vec<(String, String, String, u64)> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["token_id"].as_str().unwrap().to_string(),
                r["role"].as_str().unwrap().to_string(),
                format!(
                    "{} {}",
                    r["method"].as_str().unwrap(),
                    r["path"].as_str().unwrap()
                ),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = vec![
        (
            operator_id.clone(),
            "operator".to_string(),
            "POST /v1/tokens".to_string(),
            201,
        ),
        (
            operator_id.clone(),
            "operator".into(),
            "POST /v1/resources/version?force=true".into(),
            201,
        ),
        (
            user_id.clone(),
            "user".into(),
            "PUT /v1/resources/version?force=true".into(),
            403,
        ),
        (
            user_id.clone(),
            "user".into(),
            "POST /v1/agents/suspend".into(),
            200,
        ),
        (
            operator_id,
            "operator".into(),
            format!("DELETE /v1/tokens/{user_id}"),
            200,
        ),
    ];
    assert_eq!(rows, want);
    // The newest accepted action and the newest refused attempt (two trails).
    let (_, last) = t.call("GET", "/v1/audit?limit=1", Some(&t.token), None);
    assert_eq!(last.as_array().unwrap().len(), 2, "{last}");
    assert_eq!(last[0]["status"], 403, "{last}");
    assert!(last[1]["path"].as_str().unwrap().starts_with("/v1/tokens/"));
}

const CANARY_CONFIG: &str = "kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
        - {name: dev, days: ['*'], start_hour: 10, canary_count: 1}
        - {name: prod, days: ['*'], start_hour: 14}
";

fn join(t: &Ternd, token: &str, updater_id: &str) -> (u16, serde_json::Value) {
    let body =
        serde_json::json!({"updater_id": updater_id, "hostname": format!("{updater_id}.example")});
    t.call(
        "POST",
        "/v1/agents/join",
        Some(token),
        Some(&body.to_string()),
    )
}

/// With the one shared agent token, 60 invented hosts were once heartbeated into a
/// group, picked as its canaries and reported healthy on the target: the group went
/// done while every real host ran the old version. Now each host joins with a join
/// token (single use, expiring) for a credential bound to its updater_id, which speaks
/// for that host only; a host just heard from is never a canary candidate
/// (`--canary-tenure`); an operator can revoke a host.
#[test]
fn one_leaked_credential_cannot_forge_hosts_past_the_canary_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", CANARY_CONFIG);
    t.put_resource(
        "version",
        &common::version_yaml("1.0.0", "2.0.0", "regular"),
    );
    t.reconcile();
    // A join token for three hosts, expiring in an hour.
    let created = t.op(
        "POST",
        "/v1/tokens",
        Some(r#"{"role":"join","uses":3,"ttl":"1h","description":"rack 4"}"#),
    );
    let join_token = created["token"].as_str().unwrap().to_string();
    let real = ["real-1", "real-2", "real-3"];
    let mut creds = Vec::new();
    for id in real {
        let (s, v) = join(&t, &join_token, id);
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["updater_id"], id);
        creds.push(v["token"].as_str().unwrap().to_string());
    }
    let (s, v) = join(&t, &join_token, "real-4");
    assert_eq!(s, 401, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("used up"),
        "{v}"
    );
    let tokens = t.op("GET", "/v1/tokens", None);
    let listed = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["role"] == "join")
        .unwrap();
    assert_eq!(listed["uses_left"], 0);
    assert!(
        listed["expires"]
            .as_str()
            .unwrap()
            .starts_with("2026-11-23T10:00")
    );
    assert_eq!(
        t.op("GET", "/v1/tokens", None).as_array().unwrap().len(),
        2,
        "host credentials only with ?hosts=true"
    );
    // A host's credential speaks for that host only.
    let (s, v) = t.call(
        "POST",
        "/v1/agents/heartbeat",
        Some(&creds[0]),
        Some(r#"{"updater_id":"invented-1","group":"dev","version":"1.0.0"}"#),
    );
    assert_eq!(s, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("belongs to updater real-1"),
        "{v}"
    );
    // Nor can it join another host.
    assert_eq!(join(&t, &creds[0], "invented-2").0, 403);
    // Re-joining an updater that has a credential would steal it: refused.
    let more = t.op("POST", "/v1/tokens", Some(r#"{"role":"join"}"#));
    let (s, v) = join(&t, more["token"].as_str().unwrap(), "real-2");
    assert_eq!(s, 409, "{v}");

    for (id, cred) in real.iter().zip(&creds) {
        t.heartbeat(cred, id, "dev", "1.0.0");
    }
    // 50 minutes on (the real hosts heartbeat along), 60 hosts are invented with the
    // shared agent token of earlier releases, at the group's window.
    for at in ["09:10", "09:20", "09:30", "09:40", "09:50", "10:00"] {
        t.set_clock(&format!("2026-11-23T{at}:00Z"));
        for (id, cred) in real.iter().zip(&creds) {
            t.heartbeat(cred, id, "dev", "1.0.0");
        }
        t.reconcile();
    }
    let shared = t.new_token("agent");
    for i in 0..60 {
        t.heartbeat(&shared, &format!("invented-{i:02}"), "dev", "1.0.0");
    }
    t.set_clock("2026-11-23T10:02:00Z");
    for (id, cred) in real.iter().zip(&creds) {
        t.heartbeat(cred, id, "dev", "1.0.0");
    }
    for i in 0..60 {
        t.heartbeat(&shared, &format!("invented-{i:02}"), "dev", "1.0.0");
    }
    t.reconcile();
    let r = t.reconcile();
    let dev = &r["rollout"]["status"]["groups"][0];
    assert_eq!(dev["state"], "canary", "{r}");
    let canary = dev["canaries"][0]["updater_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        real.contains(&canary.as_str()),
        "canary {canary} must be a real host"
    );
    assert!(metric(&t, "tern_heartbeats_shared_token_total ") >= 120);

    // Revoking a host: its credential is refused at once, and it leaves the inventory.
    let v = t.op("DELETE", "/v1/inventory/real-3", None);
    assert_eq!(v["deleted"], "real-3");
    let (s, _) = t.call(
        "POST",
        "/v1/agents/heartbeat",
        Some(&creds[2]),
        Some(r#"{"updater_id":"real-3","group":"dev","version":"1.0.0"}"#),
    );
    assert_eq!(s, 401);
    let inv = t.op("GET", "/v1/inventory", None);
    assert!(!inv.to_string().contains("real-3"), "{inv}");
    // An expired join token is refused with its expiry.
    t.set_clock("2026-11-23T11:00:00Z");
    let (s, v) = join(&t, more["token"].as_str().unwrap(), "late");
    // `more` was made at 09:00 with the default day: still valid; the first one expired.
    assert_eq!(s, 201, "{v}");
    let (s, v) = join(&t, &join_token, "late-2");
    assert_eq!(s, 401);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expired"),
        "{v}"
    );
}

/// Host facts (labels, build, installer types) are kept and shown by the inventory;
/// past their bounds the heartbeat is refused naming the field, and nothing is kept.
#[test]
fn host_facts_are_bounded_and_shown_in_the_inventory() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(&tmp.path().join("data"), &["--dev-clock", common::T0]);
    let agent = t.new_token("agent");
    let send = |id: &str, extra: serde_json::Value| {
        let mut body = serde_json::json!({
            "updater_id": id, "host_id": id, "group": "dev", "version": "1.0.0",
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        t.call(
            "POST",
            "/v1/agents/heartbeat",
            Some(&agent),
            Some(&body.to_string()),
        )
    };
    let ok = send(
        "00000001-0000-4000-8000-000000000000",
        serde_json::json!({"labels": {"env": "prod", "zone": "eu-1"}, "arch": "arm64", "os": "linux",
                           "fips": true, "installers": ["tern-update"], "from_the_future": 1}),
    );
    assert_eq!(ok.0, 200, "{ok:?}");
    let many: serde_json::Map<String, serde_json::Value> = (0..33)
        .map(|i| (format!("k{i}"), serde_json::json!("v")))
        .collect();
    let hostile = [
        (serde_json::json!({"labels": many}), "labels: 33 labels"),
        (serde_json::json!({"labels": {"a b": "x"}}), "labels: key"),
        (serde_json::json!({"labels": {"env": "x\ny"}}), "labels.env"),
        (serde_json::json!({"arch": "x".repeat(33)}), "arch:"),
        (
            serde_json::json!({"installers": ["$(reboot)"]}),
            "installers:",
        ),
        (
            serde_json::json!({"install_result": {"attempt_id": "a", "error": "e".repeat(5000)}}),
            "install_result",
        ),
    ];
    for (i, (extra, field)) in hostile.into_iter().enumerate() {
        let id = format!("0000000{}-0000-4000-8000-000000000000", i + 2);
        let (status, v) = send(&id, extra);
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{field}: {v}"
        );
    }
    let (status, inv) = t.call("GET", "/v1/inventory", Some(&t.token), None);
    assert_eq!(status, 200);
    let agents = inv["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1, "a refused heartbeat keeps nothing: {inv}");
    let a = &agents[0];
    assert_eq!(a["labels"]["zone"], "eu-1");
    assert_eq!(
        (a["arch"].as_str(), a["os"].as_str(), a["fips"].as_bool()),
        (Some("arm64"), Some("linux"), Some(true))
    );
    assert_eq!(a["installers"], serde_json::json!(["tern-update"]));
    // An updater that sends no facts shows none (the fields are absent, not empty).
    assert_eq!(
        send(
            "0000000f-0000-4000-8000-000000000000",
            serde_json::json!({})
        )
        .0,
        200
    );
    let (_, inv) = t.call("GET", "/v1/inventory", Some(&t.token), None);
    let plain = inv["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["host_id"] == "0000000f-0000-4000-8000-000000000000")
        .unwrap()
        .clone();
    assert!(
        plain.get("labels").is_none() && plain.get("arch").is_none(),
        "{plain}"
    );
}

/// One shared agent token cannot invent hosts without bound: past
/// `--max-shared-token-hosts` new hosts through it are refused with a message saying
/// what to do; hosts it already speaks for, and hosts with their own credential, go on.
#[test]
fn a_shared_agent_token_cannot_invent_hosts_past_its_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--dev-clock", common::T0, "--max-shared-token-hosts", "5"],
    );
    let shared = t.new_token("agent");
    for i in 0..5 {
        t.heartbeat(&shared, &format!("invented-{i}"), "dev", "1.0.0");
    }
    let (s, v) = t.call(
        "POST",
        "/v1/agents/heartbeat",
        Some(&shared),
        Some(r#"{"updater_id":"invented-5","group":"dev","version":"1.0.0"}"#),
    );
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["error"]["code"], "shared_token_full", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("join token"),
        "{v}"
    );
    // The five it speaks for go on; a host with its own credential joins.
    t.heartbeat(&shared, "invented-0", "dev", "1.1.0");
    let join_token = t.op("POST", "/v1/tokens", Some(r#"{"role":"join"}"#));
    let (s, v) = join(&t, join_token["token"].as_str().unwrap(), "real-1");
    assert_eq!(s, 201, "{v}");
    let cred = v["token"].as_str().unwrap().to_string();
    t.heartbeat(&cred, "real-1", "dev", "1.0.0");
    let inv = t.op("GET", "/v1/inventory", None);
    assert_eq!(inv["agents"].as_array().unwrap().len(), 6, "{inv}");
}
