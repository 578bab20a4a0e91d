//! The real background loop (system clock): reports, reconciles after writes, expiry of
//! silent agents, and two replicas sharing one SQLite store with one leader.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Ternd, enabled_version, eventually};

#[test]
fn system_clock_reports_reconciles_and_forgets() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--report-period",
            "1s",
            "--heartbeat-interval",
            "1s",
            // 0: the report period throughout.
            "--active-report-period",
            "0",
        ],
    );
    // A write triggers a reconcile without waiting for the period.
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "immediate"));
    eventually("the rollout", || {
        t.call("GET", "/v1/resources/rollout", Some(&t.token), None)
            .0
            == 200
    });
    // find answers from the snapshot, refreshed just after the write: eventually.
    eventually("find to serve the rollout", || {
        t.find("any", "h1") == ("1.1.0".into(), true)
    });
    // With the system clock, hosts spread their updates over the jitter.
    let (_, v) = t.call("GET", "/v1/webapi/find?group=any&updater_id=h1", None, None);
    assert_eq!(v["auto_update"]["agent_update_jitter_seconds"], 60);

    // The replica's report appears, and counts the agent once settled (1s).
    let agent = t.new_token("agent");
    t.heartbeat(&agent, "h1", "dev", "1.0.0");
    eventually("the agent in the report", || {
        t.heartbeat(&agent, "h1", "dev", "1.0.0");
        let r = t.op("GET", "/v1/agents/report", None);
        r["total"] == 1
    });
    let reports = t.op("GET", "/v1/resources/reports", None);
    assert_eq!(reports.as_array().unwrap().len(), 1);
    let inv = t.op("GET", "/v1/inventory", None);
    assert_eq!(inv["agents"][0]["updater_id"], "h1");

    // Silent for three heartbeat intervals: forgotten.
    eventually("the agent forgotten", || {
        t.op("GET", "/v1/inventory", None)["agents"]
            .as_array()
            .unwrap()
            .is_empty()
    });

    // Deleting the version deletes the rollout.
    t.op("DELETE", "/v1/resources/version", None);
    eventually("the rollout deleted", || {
        t.call("GET", "/v1/resources/rollout", Some(&t.token), None)
            .0
            == 404
    });
    // find answers from the snapshot, refreshed just after the delete (not atomically
    // with it): on a loaded machine it may lag the store by a moment.
    eventually("find without a rollout", || {
        t.find("any", "h1").0.is_empty()
    });
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    assert!(metrics.contains("\ntern_leader 1\n"), "{metrics}");
}

#[test]
fn two_replicas_share_the_store_with_one_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let a = Ternd::start(&dir, &["--report-period", "1s", "--replica-id", "a"]);
    let b = Ternd::start(&dir, &["--report-period", "1s", "--replica-id", "b"]);
    assert_eq!(a.token, b.token, "one operator token for the data dir");
    let agent = a.new_token("agent");
    // One agent on each replica.
    a.heartbeat(&agent, "on-a", "dev", "1.0.0");
    b.heartbeat(&agent, "on-b", "dev", "1.0.0");
    eventually("both replicas' agents in the report", || {
        a.heartbeat(&agent, "on-a", "dev", "1.0.0");
        b.heartbeat(&agent, "on-b", "dev", "1.0.0");
        let r = b.op("GET", "/v1/agents/report", None);
        r["total"] == 2 && r["replicas"].as_array().unwrap().len() == 2
    });
    // A write on one replica reaches the other's find snapshot (watch).
    a.put_resource("version", &enabled_version("1.0.0", "2.0.0", "immediate"));
    eventually("b serves the new rollout", || {
        b.find("dev", "x") == ("2.0.0".into(), true)
    });
    let leaders: Vec<bool> = [&a, &b]
        .iter()
        .map(|t| {
            let (_, _, m) = t.raw("GET", "/metrics", None, None);
            m.contains("\ntern_leader 1\n")
        })
        .collect();
    assert_eq!(
        leaders.iter().filter(|l| **l).count(),
        1,
        "exactly one leader: {leaders:?}"
    );
    // The other replica's admin API works on the shared state.
    let v = b.op("POST", "/v1/agents/suspend", None);
    assert_eq!(v["mode"], "suspended");
    // Under a stop find names the last known-good version, never the target.
    eventually("a sees the suspension", || {
        a.find("dev", "x") == ("1.0.0".into(), false)
    });
}

/// The time of this replica's report, as an instant (RFC 3339 strings with trimmed
/// fractions do not sort).
fn report_time(t: &Ternd) -> jiff::Timestamp {
    let reports = t.op("GET", "/v1/resources/reports", None);
    reports[0]["spec"]["timestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A time-based rollout of one group `all`, started by hand (it then stays active for a
/// window's length); returns the time of the report before it started.
fn start_one_group(t: &Ternd) -> jiff::Timestamp {
    t.put_resource(
        "config",
        &tern_core::fixtures::time_based("1h", &[("all", 3)]),
    );
    t.put_resource("version", &enabled_version("1.0.0", "1.1.0", "regular"));
    let state = || {
        let (s, v) = t.call("GET", "/v1/resources/rollout", Some(&t.token), None);
        let state = v["status"]["groups"][0]["state"].as_str().unwrap_or("");
        if s == 200 {
            state.to_string()
        } else {
            String::new()
        }
    };
    eventually("the rollout", || state() == "unstarted");
    let before = report_time(t);
    t.op(
        "POST",
        "/v1/agents/start-update",
        Some(r#"{"groups": ["all"]}"#),
    );
    eventually("the group active", || state() == "active");
    before
}

/// While a group is active the loop reports and reconciles at `--active-report-period`,
/// not at the (here hour-long) report period.
#[test]
fn a_moving_rollout_is_reported_at_the_active_period() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &["--report-period", "1h", "--active-report-period", "1s"],
    );
    let quiet = start_one_group(&t);
    let report_time = || report_time(&t);
    // Reports follow each other a second apart now (the report period is an hour).
    let first = {
        let mut seen = quiet;
        eventually("a report while active", || {
            seen = report_time();
            seen != quiet
        });
        seen
    };
    eventually("the next report a period later", || report_time() > first);
}

/// While a group is active, a host that finishes its update brings the replica's next
/// report (and reconcile) forward to `--report-after-change`, where the periods (here
/// an hour) would wait; a host that merely appears does not.
#[test]
fn a_host_finishing_brings_the_report_forward_while_the_rollout_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        &[
            "--report-period",
            "1h",
            "--active-report-period",
            "1h",
            "--report-after-change",
            "1s",
        ],
    );
    start_one_group(&t);
    let report_time = || report_time(&t);
    let changes = || t.metric("tern_report_changes_total");
    let agent = t.new_token("agent");
    let quiet = changes();
    t.heartbeat(&agent, "h1", "all", "1.0.0");
    let before = report_time();
    // A new host is counted only once settled: no report for it. ternd decides before
    // it answers the heartbeat whether to wake the report loop, which brings a report
    // forward only when woken.
    assert_eq!(changes(), quiet, "a new host brought a report forward");
    assert_eq!(report_time(), before, "a new host brought a report forward");
    t.heartbeat(&agent, "h1", "all", "1.1.0");
    assert_eq!(changes(), quiet + 1, "the host's update woke no report");
    eventually("a report after the host updated", || report_time() > before);
}

/// A replica that just started says so in its reports for a heartbeat interval plus a
/// report period, so that no group starts on counts that miss its reconnecting hosts.
#[test]
fn a_replica_reports_it_is_warming_up_after_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Ternd::start(
        &tmp.path().join("data"),
        // Warm for 6 s: long enough that the first report, written at start, says so
        // even on a loaded machine.
        &["--report-period", "1s", "--heartbeat-interval", "5s"],
    );
    let warming = || {
        let reports = t.op("GET", "/v1/resources/reports", None);
        reports[0]["spec"]["warming_up"].as_bool().unwrap_or(false)
    };
    // The first report, written at start.
    eventually("a report saying the replica is warming up", warming);
    eventually("the replica warmed up (6 s)", || !warming());
}
