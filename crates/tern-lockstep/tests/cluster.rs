//! End to end: three workers and two updaters, real processes, on a store they share,
//! following a fake GitHub (GitHub cannot be reached from here; the fake serves the same
//! API shape). One story, in order: production takes 1.1.0 while staging takes
//! 1.2.0-rc.1; a server registered mid-update is left out; a failing step stops everyone,
//! fires the webhook and holds until recover; a SIGKILLed worker times the others out and
//! the update completes without it once it is removed; the leading updater's death hands
//! over; a SIGSTOPped former leader writes nothing. The components' own log proves A never
//! ran two versions at once, B never restarted on two servers at once, D ran once per
//! version.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::{Bench, check_log, log_marks, wait_for, wait_halted};

const LONG: Duration = Duration::from_secs(60);

fn story(bench: &Bench) {
    bench.release("release-1.0.0", "1.0.0", false);
    bench.release("release-1.1.0", "1.1.0", false);
    bench.release("release-1.2.0-rc.1", "1.2.0-rc.1", true);
    bench.github.publish(support::FakeRelease {
        tag: "release-9.0.0".into(),
        prerelease: false,
        draft: true,
        assets: vec![],
    });
    bench.github.publish(support::FakeRelease {
        tag: "nightly".into(),
        prerelease: true,
        draft: false,
        assets: vec![],
    });

    let (ok, out) = bench.ctl(&["config", "set", "env", "production"]);
    assert!(ok, "{out}");
    let (ok, out) = bench.ctl(&["config", "set", "env", "prod"]);
    assert!(!ok && out.contains("not an environment"), "{out}");

    let mut w: Vec<_> = (1..=3).map(|id| bench.worker(id, "12s")).collect();
    // Updaters list the servers registered when an update begins: let all three register.
    wait_for(LONG, || bench.status().contains("registered: 1, 2, 3"));
    let mut u1 = bench.updater("u1");
    let mut u2 = bench.updater("u2");

    // Production: the newest release that is not a pre-release, through three pages.
    let s = bench.wait_status("completed: 1.1.0", LONG, &[&w[0], &w[1], &w[2], &u1, &u2]);
    assert!(
        s.contains("update: 1.1.0 (finished), servers 1, 2, 3"),
        "{s}"
    );
    assert!(
        *bench.github.pages_served.lock().unwrap() >= 3,
        "the listing was paginated"
    );

    // Staging takes the pre-release. A server registered during the update is left out.
    let (ok, out) = bench.ctl(&["config", "set", "env", "staging"]);
    assert!(ok, "{out}");
    bench.wait_status("update: 1.2.0-rc.1", LONG, &[&u1, &u2]);
    let (ok, out) = bench.ctl(&["servers", "add", "9", "--name", "late"]);
    assert!(ok, "{out}");
    let s = bench.wait_status(
        "completed: 1.2.0-rc.1",
        LONG,
        &[&w[0], &w[1], &w[2], &u1, &u2],
    );
    // Server 9 was left out of it. No worker runs as server 9 here, so it is not caught
    // up either (a worker that starts as server 9 would be): nothing waits for it.
    assert!(s.contains("by servers 1, 2, 3\n"), "{s}");
    // The leading updater has decided on the records since the completion: a poll comes
    // before each decision, so the second poll after the completion follows a whole
    // decision that saw it.
    wait_for(LONG, || {
        [&u1, &u2].iter().any(|u| {
            let log = u.logged_since(0);
            let done = log.iter().position(|l| {
                l.contains("every listed server finished the update") && l.contains("1.2.0-rc.1")
            });
            done.is_some_and(|d| {
                log[d..]
                    .iter()
                    .filter(|l| l.contains("polled the release source"))
                    .count()
                    >= 2
            })
        })
    });
    let s = bench.status();
    assert!(
        !s.contains("catch-up") && s.contains("not in this update") && s.contains(": 9 "),
        "{s}"
    );
    let (ok, out) = bench.ctl(&["servers", "rm", "9"]);
    assert!(ok, "{out}");

    // A failing step stops everyone, alerts, and holds until recover.
    std::fs::write(bench.dir.path().join("fail-b-2"), "").unwrap();
    let workers = [&w[0], &w[1], &w[2]];
    let marks = log_marks(&workers);
    bench.release("release-1.3.0", "1.3.0", false);
    let s = bench.wait_status("STOPPED", LONG, &[&w[0], &w[1], &w[2], &u1, &u2]);
    assert!(
        s.contains("server 2: FAILED at step 3") && s.contains("b is unhealthy on 2"),
        "{s}"
    );
    wait_for(LONG, || {
        bench
            .webhook
            .events()
            .contains(&("raised".into(), "lockstep_stopped".into()))
    });
    // Every worker saw the stop and left its step: a server going on past it would
    // have by now.
    wait_halted(&workers, &marks, LONG);
    let held = bench.status();
    assert!(
        held.contains("STOPPED") && !held.contains("completed: 1.3.0"),
        "{held}"
    );
    assert!(
        !held.contains(": finished"),
        "a server went on past the stop:\n{held}"
    );
    std::fs::remove_file(bench.dir.path().join("fail-b-2")).unwrap();
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(
        ok && out.contains(
            "removed the records of the update to 1.3.0; the leading updater starts the update to 1.3.0 from step 1 on servers 1, 2, 3 (those registered now)"
        ),
        "{out}"
    );
    bench.wait_status("completed: 1.3.0", LONG, &[&w[0], &w[1], &w[2], &u1, &u2]);
    wait_for(LONG, || {
        bench
            .webhook
            .events()
            .contains(&("cleared".into(), "lockstep_stopped".into()))
    });

    // A SIGKILLed worker: the others time out at a barrier; removed, the rest finish.
    // Server 3 dies: its worker is SIGKILLed and its components die with it (the log
    // says so, as the component would if the machine went down).
    w[2].signal("KILL");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&bench.log)
        .unwrap();
    std::io::Write::write_all(&mut f, b"a stop 3\n").unwrap();
    bench.release("release-1.4.0", "1.4.0", false);
    let s = bench.wait_status("STOPPED", LONG, &[&w[0], &w[1], &u1, &u2]);
    assert!(s.contains("timed out") && s.contains("server(s) 3"), "{s}");
    let (ok, out) = bench.ctl(&["servers", "rm", "3"]);
    assert!(ok && out.contains("recover"), "{out}");
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok, "{out}");
    let s = bench.wait_status("completed: 1.4.0", LONG, &[&w[0], &w[1], &u1, &u2]);
    assert!(
        s.contains("update: 1.4.0 (finished), servers 1, 2\n"),
        "{s}"
    );

    // The leading updater dies: the other takes over and runs the next update.
    let s = bench.status();
    let (leader, other) = if s.contains("leading updater: u1") {
        (&mut u1, &mut u2)
    } else {
        (&mut u2, &mut u1)
    };
    leader.kill();
    bench.release("release-1.5.0", "1.5.0", false);
    let s = bench.wait_status("completed: 1.5.0", LONG, &[&w[0], &w[1], other]);
    assert!(
        s.contains(&format!("leading updater: {}", other.name)),
        "{s}"
    );

    // A SIGSTOPped leader loses the lease; resumed, it writes nothing.
    let mut back = bench.updater(if other.name == "u1" { "u2" } else { "u1" });
    other.signal("STOP");
    bench.wait_status(&format!("leading updater: {}", back.name), LONG, &[&back]);
    bench.release("release-1.6.0", "1.6.0", false);
    let s = bench.wait_status("completed: 1.6.0", LONG, &[&w[0], &w[1], &back]);
    let mark = other.log_mark();
    other.signal("CONT");
    // Resumed, it finds its lease gone (between decisions, or as it was about to write).
    wait_for(LONG, || {
        other.logged_since(mark).iter().any(|l| {
            l.contains("lost the updater lease")
                || l.contains("the updater lease is no longer held")
        })
    });
    let after = bench.status();
    assert_eq!(s, after, "the resumed former leader changed the records");
    let log = std::fs::read_to_string(&other.log).unwrap();
    assert!(
        !log.contains("started the update to 1.6.0") && !log.contains("version=1.6.0"),
        "{log}"
    );
    back.kill();

    // The components' log.
    let d_runs = check_log(&bench.component_log());
    for v in ["1.1.0", "1.2.0-rc.1", "1.3.0", "1.4.0", "1.5.0", "1.6.0"] {
        assert_eq!(
            d_runs.get(v),
            Some(&1),
            "D ran {:?} times for {v}: {d_runs:?}",
            d_runs.get(v)
        );
    }
    assert!(
        !d_runs.contains_key("1.0.0"),
        "an old release was installed"
    );
    for p in &mut w {
        p.kill();
    }
}

#[test]
fn lockstep_on_sqlite() {
    let bench = Bench::new(None);
    story(&bench);
}

#[cfg(feature = "etcd")]
#[test]
fn lockstep_on_a_three_member_etcd() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(tern_testing::etcd::EtcdCluster::start(3));
    let mut bench = Bench::new(Some(format!("etcd:{}", cluster.endpoints().join(","))));
    // With etcd's authentication on: each worker logs in as its own server, whose role
    // may write its own keys only; the story needs nothing more.
    bench.enable_etcd_auth();
    story(&bench);
    drop(cluster);
}
