//! The maintenance schedule a group exports (seed 001) and the seed's own channel path,
//! on the real ternd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Ternd;
use serde_json::json;
use tern_core::fixtures;

#[test]
fn a_groups_schedule_is_exported_as_json_and_as_a_systemd_calendar() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    // No config, no version: the cluster's window is the default group's (a missing
    // config is one `default` group, Mon–Thu at 12:00 UTC).
    let (status, v) = t.call("GET", "/v1/agents/schedule?group=dev", None, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["group"], "default");
    assert_eq!(v["start_hour"], 12);

    // A config and no version (so no rollout): the schedule is the config's already
    // (seed 001: the window is the cluster's, whether or not a rollout exists).
    t.put_resource(
        "config",
        &fixtures::time_based("2h", &[("dev", 10), ("prod", 14)]),
    );
    let (status, v) = t.call("GET", "/v1/agents/schedule?group=prod&count=1", None, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["group"], "prod");
    assert_eq!(v["duration_seconds"], 7200);
    assert_eq!(
        v["windows"],
        json!([{"start": "2026-11-23T14:00:00Z", "stop": "2026-11-23T16:00:00Z"}])
    );

    t.put_resource("version", &fixtures::version("1.0.0", "1.1.0", "regular"));
    t.reconcile();

    // The dev clock is Monday 2026-11-23 09:00 UTC.
    let (status, v) = t.call("GET", "/v1/agents/schedule?group=prod&count=3", None, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["group"], "prod");
    assert_eq!(v["start_hour"], 14);
    assert_eq!(v["duration_seconds"], 7200);
    assert_eq!(v["on_calendar"], "*-*-* 14:00:00 UTC");
    assert_eq!(
        v["windows"],
        json!([
            {"start": "2026-11-23T14:00:00Z", "stop": "2026-11-23T16:00:00Z"},
            {"start": "2026-11-24T14:00:00Z", "stop": "2026-11-24T16:00:00Z"},
            {"start": "2026-11-25T14:00:00Z", "stop": "2026-11-25T16:00:00Z"},
        ])
    );
    // Inside dev's window the open one comes first.
    t.advance("1h30m");
    let (_, v) = t.call("GET", "/v1/agents/schedule?group=dev&count=1", None, None);
    assert_eq!(
        v["windows"],
        json!([{"start": "2026-11-23T10:00:00Z", "stop": "2026-11-23T12:00:00Z"}])
    );
    // An unknown group gets the last group's window, as find serves it.
    let (_, v) = t.call("GET", "/v1/agents/schedule?group=nope", None, None);
    assert_eq!(v["group"], "prod");
    assert_eq!(
        v["windows"].as_array().unwrap().len(),
        8,
        "the default count"
    );
    let (_, v) = t.call(
        "GET",
        "/v1/agents/schedule?group=prod&count=100000",
        None,
        None,
    );
    assert_eq!(v["windows"].as_array().unwrap().len(), 64, "bounded");

    let (status, headers, text) = t.raw(
        "GET",
        "/v1/agents/schedule?group=dev&format=systemd",
        None,
        None,
    );
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(text, "*-*-* 10:00:00 UTC");

    for (query, want) in [
        ("group=dev&format=xml", "format"),
        ("group=dev&count=-1", "count"),
        ("group=dev&count=lots", "count"),
    ] {
        let (status, v) = t.call("GET", &format!("/v1/agents/schedule?{query}"), None, None);
        assert_eq!(status, 400, "{query}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(want),
            "{v}"
        );
    }

    // An immediate rollout has no groups, but the cluster still has its windows:
    // channel hosts keep following the config's.
    t.put_resource("version", &fixtures::version("1.0.0", "1.2.0", "immediate"));
    t.reconcile();
    let (status, v) = t.call("GET", "/v1/agents/schedule?group=dev", None, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["group"], "dev");
    assert_eq!(v["start_hour"], 10);
}

#[test]
fn the_seeds_channel_path_is_an_alias_and_fixed_paths_keep_their_meaning() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.op(
        "PUT",
        "/v1/channels/cloud-stable",
        Some(r#"{"version": "v1.4.2", "critical": true}"#),
    );
    for prefix in ["/v1/channels/cloud-stable", "/v1/cloud-stable"] {
        let (status, _, text) = t.raw("GET", &format!("{prefix}/version"), None, None);
        assert_eq!((status, text.as_str()), (200, "1.4.2"), "{prefix}");
        let (status, _, text) = t.raw("GET", &format!("{prefix}/critical"), None, None);
        assert_eq!((status, text.as_str()), (200, "yes"), "{prefix}");
    }
    let (status, v) = t.call("GET", "/v1/missing/version", None, None);
    assert_eq!(status, 404);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no channel"),
        "{v}"
    );
    // Fixed paths win over the alias.
    let (status, v) = t.call("GET", "/v1/webapi/find?group=dev", None, None);
    assert_eq!(status, 200, "{v}");
    assert!(v["auto_update"].is_object(), "{v}");
    let (status, _) = t.call("GET", "/v1/agents/status", None, None);
    assert_eq!(status, 401, "an admin path still needs its token");
}

const PARIS: &str = r#"kind: autoupdate_config
metadata: {name: autoupdate-config}
spec:
  agents:
    mode: enabled
    strategy: time-based
    maintenance_window_duration: 1h
    schedules:
      regular:
        - name: paris
          timezone: Europe/Paris
          windows:
            - {days: [Mon, Tue], start: "22:30", duration: 3h}
            - {days: [Sat], start: "06:00"}
          blackouts: ["2026-11-24"]
"#;

/// A group scheduled in Paris time with two windows and a blackout, on the real ternd:
/// the exported schedule (instants, the new form, one `OnCalendar=` per window), the
/// status view, and the group starting at 22:30 Paris time, not on the blackout date.
#[test]
fn a_paris_schedule_with_a_blackout_is_exported_and_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::dev(&tmp.path().join("data"));
    t.put_resource("config", PARIS);
    t.put_resource("version", &fixtures::version("1.0.0", "1.1.0", "regular"));
    t.reconcile();

    // Monday 2026-11-23 09:00 UTC: 22:30 CET is 21:30 UTC; Tuesday is blacked out, so
    // Saturday 06:00 CET (05:00 UTC, an hour long) comes next, then Monday again.
    let (status, v) = t.call("GET", "/v1/agents/schedule?group=paris&count=3", None, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["windows"],
        json!([
            {"start": "2026-11-23T21:30:00Z", "stop": "2026-11-23T23:00:00Z"},
            {"start": "2026-11-28T05:00:00Z", "stop": "2026-11-28T06:00:00Z"},
            {"start": "2026-11-30T21:30:00Z", "stop": "2026-12-01T00:30:00Z"},
        ]),
        "Monday's window is cut where the blackout date begins (midnight in Paris)"
    );
    assert_eq!(v["days"], json!([]), "an older updater refuses it");
    assert_eq!(v["calendar"]["timezone"], "Europe/Paris");
    assert_eq!(v["calendar"]["windows"][1]["duration"], "1h", "spelled out");
    assert_eq!(v["calendar"]["blackouts"], json!(["2026-11-24"]));
    assert_eq!(
        v["on_calendars"],
        json!([
            "Mon,Tue *-*-* 22:30:00 Europe/Paris",
            "Sat *-*-* 06:00:00 Europe/Paris"
        ])
    );
    let (status, _, text) = t.raw(
        "GET",
        "/v1/agents/schedule?group=paris&format=systemd",
        None,
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(
        text,
        "Mon,Tue *-*-* 22:30:00 Europe/Paris\nSat *-*-* 06:00:00 Europe/Paris"
    );

    // 21:29 UTC is 22:29 in Paris: closed. 21:30: open, and the status says until when.
    t.set_clock("2026-11-23T21:29:00Z");
    t.reconcile();
    assert_eq!(t.state_of("paris"), "unstarted");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(
        st["groups"][0]["next_window"], "2026-11-23T21:30:00Z",
        "{st}"
    );
    t.set_clock("2026-11-23T21:30:00Z");
    t.reconcile();
    assert_eq!(t.state_of("paris"), "active");
    let st = t.op("GET", "/v1/agents/status", None);
    assert_eq!(
        st["groups"][0]["window_closes"], "2026-11-23T23:00:00Z",
        "{st}"
    );
    // After midnight in Paris (the blackout date) the group is done, and Tuesday's
    // 22:30 does not open it again.
    t.set_clock("2026-11-23T23:00:00Z");
    t.reconcile();
    assert_eq!(t.state_of("paris"), "done");
    t.set_clock("2026-11-24T21:45:00Z");
    t.reconcile();
    assert_eq!(t.state_of("paris"), "done");
    t.set_clock("2026-11-28T05:10:00Z");
    t.reconcile();
    assert_eq!(t.state_of("paris"), "active", "Saturday 06:00 in Paris");
}
