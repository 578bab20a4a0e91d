//! Channel mode (seed 001) with real processes and a loopback server that answers the
//! channel's plain-text `version` and `critical` and ternd's maintenance schedule. The
//! window is checked against the real clock: the tests place it around the current
//! hour (open) or two hours ahead (closed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use support::{Agent, Host, Server, release_files, tarball};

fn hour_now() -> u8 {
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    u8::try_from(now.hour()).unwrap()
}

/// A window that is open now and for the next 23 hours.
fn open_window(server: &Server) {
    server.set_schedule(hour_now(), 23);
}

/// A window that opens in more than an hour.
fn closed_window(server: &Server) {
    server.set_schedule((hour_now() + 2) % 24, 1);
}

/// Enables `host` on the server's channel (with ternd's schedule from the same server)
/// and checks it installed.
fn enable_on_channel(server: &Server, host: &Host, svc: &std::path::Path) {
    let channel = server.channel_url();
    let out = host.enable(server, svc, &["--channel", &channel]);
    assert_eq!(out.status.code(), Some(0));
}

/// A server publishing good releases of `versions`.
fn publishing(versions: &[&str]) -> Server {
    let server = Server::start();
    for v in versions {
        server.publish(v, &tarball(&release_files(v, Agent::Good)));
    }
    server
}

/// A server publishing 1.0.0 … 2.0.0, a channel at 1.0.0, a closed window, and a host
/// enabled on the channel (enable installs at once).
fn channel_host() -> (Server, Host, PathBuf) {
    let server = publishing(&["1.0.0", "1.1.0", "1.2.0", "2.0.0"]);
    server.set_channel((200, "1.0.0\n"), (200, "no\n"));
    closed_window(&server);
    let host = Host::new();
    let svc = host.service_config("");
    enable_on_channel(&server, &host, &svc);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    (server, host, svc)
}

fn status(host: &Host) -> serde_json::Value {
    serde_json::from_slice(&host.run(&["status", "-o", "json"]).stdout).unwrap()
}

#[test]
fn a_channel_host_updates_in_its_window_or_when_critical_and_never_on_a_bad_answer() {
    let (server, host, _svc) = channel_host();

    // Outside the window, not critical: the host holds, and says why.
    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    let st = status(&host);
    assert_eq!(st["server"]["target_version"], "1.1.0");
    assert_eq!(st["server"]["in_window"], false);
    let why = st["server"]["update_now"].as_str().unwrap();
    assert!(why.contains("outside the maintenance window"), "{why}");
    assert_eq!(st["spec"]["channel"], server.channel_url());
    assert_eq!(st["status"]["channel"]["version"], "1.1.0");
    assert_eq!(st["status"]["channel"]["critical"], "no");

    // Any value but `yes` is not critical; neither is an unreachable `critical`.
    for critical in [(200, "YES"), (200, "true"), (500, "boom"), (404, "")] {
        server.set_channel((200, "1.1.0"), critical);
        host.ok(&["update"]);
        assert_eq!(host.active().as_deref(), Some("1.0.0"), "{critical:?}");
    }

    // `critical: yes` moves the host outside its window.
    server.set_channel((200, "1.1.0"), (200, "yes\n"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));

    // No usable version: nothing is attempted, critical or not, window or not.
    open_window(&server);
    for version in [
        (503, "1.2.0"),
        (404, ""),
        (200, "<html>1.2.0</html>"),
        (200, "1.2"),
    ] {
        server.set_channel(version, (200, "yes"));
        host.ok(&["update"]);
        assert_eq!(host.active().as_deref(), Some("1.1.0"), "{version:?}");
    }
    let st = status(&host);
    assert_eq!(st["server"]["reachable"], false);
    assert!(
        st["status"]["channel"]["version"]
            .as_str()
            .unwrap()
            .starts_with("(malformed"),
        "{st}"
    );

    // Inside the window a non-critical version is installed.
    server.set_channel((200, "1.2.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.2.0"));

    // Up a major is fine; back down a major through the channel is refused.
    server.set_channel((200, "2.0.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    server.set_channel((200, "1.2.0"), (200, "yes"));
    let out = host.ok(&["update"]);
    assert!(out.contains("major-version downgrade from 2.0.0"), "{out}");
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
}

#[test]
fn an_unhealthy_agent_updates_outside_its_window_at_most_every_half_hour() {
    let (server, host, _svc) = channel_host();
    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"), "healthy: it waits");

    // The agent is down (an agent that cannot reach its server exits, seed 001).
    host.stop_agent();
    let out = host.ok(&["update"]);
    assert!(out.contains("unhealthy"), "{out}");
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
    assert!(host.update_yaml().status.last_forced_attempt.is_some());

    // Down again right away: the next forced attempt waits half an hour, no loop.
    server.set_channel((200, "1.2.0"), (200, "no"));
    host.stop_agent();
    let out = host.ok(&["update"]);
    assert!(out.contains("the next try is after"), "{out}");
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
}

#[test]
fn a_channel_without_ternd_holds_all_but_critical_versions_and_a_dead_channel_is_refused_at_enable()
{
    let server = publishing(&["1.0.0", "1.1.0", "1.1.1"]);
    let host = Host::new();
    let svc = host.service_config("");
    let svc = svc.to_str().unwrap();
    let base = server.base_url();
    let channel = server.channel_url();
    let enable = [
        "enable",
        "--channel",
        channel.as_str(),
        "--base-url",
        base.as_str(),
        "--service-config",
        svc,
    ];

    // Nothing answers yet: enable fails naming the channel and saves nothing.
    let err = host.fails(&enable);
    assert!(err.contains("/chan") && err.contains("404"), "{err}");
    assert!(!host.ns().join("update.yaml").exists());
    server.set_channel((200, "not-a-version"), (200, "no"));
    let err = host.fails(&enable);
    assert!(err.contains("cannot be followed"), "{err}");

    server.set_channel((200, "1.0.0"), (200, "no"));
    host.ok(&enable);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    // No ternd, so no schedule: no window is known, and only a critical version
    // installs by itself (seed 001: the window is the cluster's, never assumed).
    server.set_channel((200, "1.1.0"), (200, "no"));
    let out = host.ok(&["update"]);
    assert!(out.contains("no maintenance window is known"), "{out}");
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    // A person on the host may still ask for it.
    host.ok(&["update", "--now"]);
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
    // A critical version goes at once.
    server.set_channel((200, "1.1.1"), (200, "yes"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.1.1"));
    assert!(
        server.heartbeats().is_empty(),
        "no server: nothing to heartbeat to"
    );
}

/// `setup --schedule-timers`: `schedule sync` restricts the updater's timer to the
/// window ternd exports (an `OnCalendar=` drop-in that systemd's own parser accepts),
/// a stopped agent or a critical update lifts it, and a hostile calendar from the
/// server never reaches a unit file. systemctl is a recording stand-in: the test must
/// not reload this machine's systemd.
#[test]
fn the_timer_override_follows_the_window_health_and_critical_updates() {
    let (server, mut host, _svc) = channel_host();
    let calls = host.dir.path().join("systemctl.calls");
    let systemctl = host.dir.path().join("systemctl");
    support::write_exe(
        &systemctl,
        &format!("#!/bin/sh\necho \"$@\" >> {}\n", calls.display()),
    );
    host.env
        .push(("TERN_SYSTEMCTL".into(), systemctl.display().to_string()));
    let dropin = host
        .systemd
        .join("tern-update.timer.d")
        .join("schedule.conf");

    // The seed's timer pair, written by setup.
    let out = host.ok(&["setup", "--schedule-timers", "--agent-unit", "tern-agent"]);
    assert!(out.contains("enabled tern-update-check.timer"), "{out}");

    // Healthy agent: the window goes into the drop-in, and systemd parses it.
    let out = host.ok(&["schedule", "sync"]);
    assert!(out.contains("fires in the window"), "{out}");
    let text = std::fs::read_to_string(&dropin).unwrap();
    let calendar = text
        .lines()
        .find_map(|l| l.strip_prefix("OnCalendar="))
        .unwrap();
    assert_eq!(
        calendar,
        format!("*-*-* {:02}:00:00 UTC", (hour_now() + 2) % 24)
    );
    assert!(
        text.contains("\nOnActiveSec=\nOnUnitActiveSec=\n"),
        "{text}"
    );
    let parsed = std::process::Command::new("systemd-analyze")
        .args(["calendar", calendar])
        .output()
        .unwrap();
    assert!(parsed.status.success(), "{parsed:?}");
    // systemd's own check of the units with the drop-in (a calendar it cannot parse
    // leaves the timer without a trigger, which it refuses).
    let sd = &host.systemd;
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(
            [
                "tern-update.service",
                "tern-update.timer",
                "tern-update-check.service",
                "tern-update-check.timer",
            ]
            .map(|u| sd.join(u)),
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && !said.contains("Failed"),
        "{said}"
    );
    assert!(
        std::fs::read_to_string(&calls)
            .unwrap()
            .contains("daemon-reload")
    );
    assert_eq!(host.update_yaml().status.schedule.unwrap().group, "default");

    // No critical update waiting: check keeps it. A critical one this host lacks: lifted.
    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["schedule", "check"]);
    assert!(dropin.exists());
    server.set_channel((200, "1.1.0"), (200, "yes"));
    let out = host.ok(&["schedule", "check"]);
    assert!(out.contains("a critical update is waiting"), "{out}");
    assert!(!dropin.exists());

    // A hostile calendar (a second directive smuggled in) is refused, nothing written.
    let body = serde_json::json!({
        "group": "default", "days": ["*"], "start_hour": 3, "duration_seconds": 3600,
        "on_calendar": "*-*-* 03:00:00 UTC\nExecStartPre=/bin/sh -c id",
        "windows": [],
    });
    server.state.lock().unwrap().schedule = Some(body.to_string());
    let err = host.fails(&["schedule", "sync"]);
    assert!(err.contains("is not one tern-update writes"), "{err}");
    assert!(!dropin.exists());
    server.set_schedule((hour_now() + 2) % 24, 1);

    // Synced again, then the agent stops: sync lifts the window instead of keeping it,
    // and `clear` (the agent unit's ExecStopPost) does too.
    server.set_channel((200, "1.0.0"), (200, "no"));
    host.ok(&["schedule", "sync"]);
    assert!(dropin.exists());
    host.ok(&["schedule", "clear"]);
    assert!(!dropin.exists());
    host.ok(&["schedule", "sync"]);
    host.stop_agent();
    let out = host.ok(&["schedule", "sync"]);
    assert!(out.contains("unhealthy"), "{out}");
    assert!(!dropin.exists());
}

/// A channel may move a host down within its major (the seed's only rollback): the
/// agent's DB comes back from the backup the older version made, as with find.
#[test]
fn a_downgrade_within_the_major_restores_the_db_backup() {
    let server = publishing(&["1.0.0", "1.1.0"]);
    let host = Host::new();
    let db = host.state.join("agent.db");
    let svc = host.service_config(&format!("db_path: {}\n", db.display()));
    support::set_marker(&db, "data-of-1.0.0");
    server.set_channel((200, "1.0.0"), (200, "no"));
    open_window(&server);
    enable_on_channel(&server, &host, &svc);
    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    support::set_marker(&db, "data-of-1.1.0");

    // 1.1.0 is bad for the fleet: the channel goes back to 1.0.0, critical.
    closed_window(&server);
    server.set_channel((200, "1.0.0"), (200, "yes"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    assert_eq!(support::db_marker(&db), "data-of-1.0.0");
    assert_eq!(
        support::db_marker(&host.ns().join("versions/1.1.0/backup/sqlite.db")),
        "data-of-1.1.0"
    );
}

/// The agent's own report counts: an agent that runs but fails its health URL is
/// unhealthy, and moves outside its window.
#[test]
fn an_agent_failing_its_health_url_moves_outside_its_window() {
    let server = publishing(&["1.0.0", "1.1.0"]);
    let host = Host::new();
    let health = |bad: &str| {
        format!(
            "health_url: \"{}/health?file={}/running_version&bad={bad}\"\n",
            server.url,
            host.state.display()
        )
    };
    let svc = host.service_config(&health("none"));
    server.set_channel((200, "1.0.0"), (200, "no"));
    closed_window(&server);
    enable_on_channel(&server, &host, &svc);
    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.0.0"), "healthy: it waits");

    // 1.0.0 now fails its health URL on this host (the config is read on each run).
    host.service_config(&health("1.0.0"));
    let out = host.ok(&["update"]);
    assert!(out.contains("health URL"), "{out}");
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
}

/// ternd's schedule in its new form: every day in Paris from 00:00 and from 12:00 for
/// 24h each (so open whatever the hour, DST days included), minus `blackouts`.
fn paris_schedule(server: &Server, blackouts: &[String]) {
    let body = serde_json::json!({
        "group": "default", "days": [], "start_hour": 0, "duration_seconds": 86_400,
        "on_calendar": "*-*-* 00:00:00 Europe/Paris",
        "on_calendars": ["*-*-* 00:00:00 Europe/Paris", "*-*-* 12:00:00 Europe/Paris"],
        "calendar": {
            "windows": [
                {"days": ["*"], "start": "00:00", "duration": "24h"},
                {"days": ["*"], "start": "12:00", "duration": "24h"},
            ],
            "timezone": "Europe/Paris",
            "blackouts": blackouts,
        },
        "windows": [],
    });
    server.state.lock().unwrap().schedule = Some(body.to_string());
}

/// A group scheduled in local time with several windows: the host holds on a blackout
/// date (in Paris) and updates once it is lifted; the timer override gets one
/// `OnCalendar=` per window, in the zone, which systemd parses.
#[test]
fn a_zoned_schedule_with_several_windows_and_a_blackout_is_followed() {
    let (server, mut host, _svc) = channel_host();
    let calls = host.dir.path().join("systemctl.calls");
    let systemctl = host.dir.path().join("systemctl");
    support::write_exe(
        &systemctl,
        &format!("#!/bin/sh\necho \"$@\" >> {}\n", calls.display()),
    );
    host.env
        .push(("TERN_SYSTEMCTL".into(), systemctl.display().to_string()));
    let paris = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
    let today = jiff::Timestamp::now().to_zoned(paris).date();
    let around_today = format!(
        "{}/{}",
        today.yesterday().unwrap(),
        today.tomorrow().unwrap()
    );
    paris_schedule(&server, &[around_today]);

    server.set_channel((200, "1.1.0"), (200, "no"));
    host.ok(&["update"]);
    assert_eq!(
        host.active().as_deref(),
        Some("1.0.0"),
        "held on a blackout date"
    );
    let st = status(&host);
    assert_eq!(st["server"]["in_window"], false);
    let why = st["server"]["update_now"].as_str().unwrap();
    assert!(why.contains("outside the maintenance window"), "{why}");

    host.ok(&["setup", "--schedule-timers", "--agent-unit", "tern-agent"]);
    let out = host.ok(&["schedule", "sync"]);
    assert!(out.contains("fires in the window"), "{out}");
    let dropin = host
        .systemd
        .join("tern-update.timer.d")
        .join("schedule.conf");
    let text = std::fs::read_to_string(&dropin).unwrap();
    let calendars: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("OnCalendar="))
        .collect();
    assert_eq!(
        calendars,
        ["*-*-* 00:00:00 Europe/Paris", "*-*-* 12:00:00 Europe/Paris"]
    );
    for cal in calendars {
        let parsed = std::process::Command::new("systemd-analyze")
            .args(["calendar", cal])
            .output()
            .unwrap();
        assert!(parsed.status.success(), "{parsed:?}");
    }

    // A blackout elsewhere in the year: the window is open, the host moves.
    paris_schedule(
        &server,
        &[format!(
            "{}",
            today.checked_add(jiff::Span::new().days(30)).unwrap()
        )],
    );
    host.ok(&["update"]);
    assert_eq!(host.active().as_deref(), Some("1.1.0"));
    assert!(host.wait_running("1.1.0"));
}
