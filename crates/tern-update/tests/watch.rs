//! `tern-update watch` with real processes and a loopback server that long-polls find
//! as ternd does: the watcher installs the new version as soon as the server's answer
//! changes, with no timer run; against a server that does not long-poll it does not
//! ask in a loop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::{Agent, Background, Host, Server, release_files, tarball};

fn publish(server: &Server, version: &str) {
    server.publish(version, &tarball(&release_files(version, Agent::Good)));
}

use tern_testing::eventually;

#[test]
fn the_watcher_installs_as_soon_as_the_answer_changes() {
    let server = Server::start();
    server.state.lock().unwrap().long_poll = true;
    publish(&server, "1.0.0");
    publish(&server, "1.1.0");
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("1.0.0", false);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    let enable_finds = server.state.lock().unwrap().find_queries.len();

    let mut watcher = Background::spawn(host.cmd(&["watch", "--hold", "30"]));
    eventually("the watcher's find to be held", || {
        let s = server.state.lock().unwrap();
        s.held == 1 && s.find_queries.last().is_some_and(|q| q.contains("seen="))
    });
    {
        let s = server.state.lock().unwrap();
        assert!(
            s.find_queries[enable_finds..]
                .iter()
                .all(|q| q.contains("wait=30") && q.contains("updater_id=")),
            "only the watcher's long polls so far: {:?}",
            s.find_queries
        );
    }
    assert_eq!(host.active().as_deref(), Some("1.0.0"), "nothing to do yet");

    server.set_target("1.1.0", true);
    eventually("the watcher to install 1.1.0", || {
        host.active().as_deref() == Some("1.1.0")
    });
    assert!(host.wait_running("1.1.0"));
    assert!(
        watcher
            .wait_for("released by a change", Duration::from_secs(5))
            .is_some(),
        "{:?}",
        watcher.seen
    );
    // The update was the timer's command, asking find itself (no `wait`).
    assert!(
        server.state.lock().unwrap().find_queries[enable_finds..]
            .iter()
            .any(|q| !q.contains("wait=")),
    );
    // And it waits again, holding the new answer.
    eventually("the watcher to wait again", || {
        server.state.lock().unwrap().held == 1
    });
}

#[test]
fn a_server_without_long_poll_is_not_asked_in_a_loop() {
    let server = Server::start();
    publish(&server, "1.0.0");
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("1.0.0", false);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    let before = server.state.lock().unwrap().find_count;

    let mut watcher = Background::spawn(host.cmd(&["watch", "--hold", "30"]));
    let said = watcher
        .wait_for("does not long-poll", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{:?}", watcher.seen));
    // It answered at once without an ETag: the watcher now waits minutes, not a loop.
    assert!(said.contains("asking again every 300s"), "{said}");
    // Having said so it goes to sleep, after one find: asking in a loop, it would ask
    // again before sleeping (a process asleep in nanosleep is in no request).
    let pid = watcher.child.id();
    eventually("the watcher asleep after saying so", || {
        std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("nanosleep"))
    });
    assert_eq!(server.state.lock().unwrap().find_count, before + 1);
}

#[test]
fn a_bad_hold_is_a_usage_error() {
    let host = Host::new();
    for bad in ["0", "601", "soon"] {
        let out = host.run(&["watch", "--hold", bad]);
        assert_eq!(out.status.code(), Some(2), "--hold {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--hold"), "{err}");
    }
}
