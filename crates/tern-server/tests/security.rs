//! The security follow-ups of issue 35, each against the real ternd over loopback: an
//! attack that once worked, and the check that it no longer does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Ternd;
use serde_json::{Value, json};

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
