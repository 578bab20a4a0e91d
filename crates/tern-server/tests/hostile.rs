//! Attacks on the real ternd over loopback: each test reproduces one that once worked
//! (slow clients, nested bodies, floods, bad flags) and checks it no longer does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Ternd, enabled_version};

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
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "immediate"));
    t.reconcile();
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
