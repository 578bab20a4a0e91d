//! A SIGKILL at every step boundary of an update, then a rerun: the host always has a
//! runnable linked version and a readable update.yaml, and the rerun finishes the job.
//! The kill points exist only with the `test-hooks` feature:
//!     cargo nextest run -p tern-update --features test-hooks

#![cfg(feature = "test-hooks")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use rusqlite::Connection;
use support::{Agent, Host, Server, release_files, tarball};

fn marker(db: &std::path::Path) -> String {
    Connection::open(db)
        .unwrap()
        .query_row("SELECT v FROM marker", [], |r| r.get(0))
        .unwrap()
}

fn set_marker(db: &std::path::Path, v: &str) {
    let c = Connection::open(db).unwrap();
    c.execute_batch("CREATE TABLE IF NOT EXISTS marker(v TEXT); DELETE FROM marker;")
        .unwrap();
    c.execute("INSERT INTO marker VALUES (?1)", [v]).unwrap();
}

/// Host invariant after any kill: a readable state file and links into a complete version.
fn assert_safe(host: &Host, when: &str) {
    let text = std::fs::read_to_string(host.ns().join("update.yaml")).unwrap();
    tern_update::parse_update_file(&text)
        .unwrap_or_else(|e| panic!("{when}: update.yaml unreadable: {e}"));
    let linked = host.linked_version();
    assert!(linked.is_some(), "{when}: no complete version is linked");
}

/// Kill at `point` during `from -> to` (a downgrade when `to < from`), then rerun.
fn kill_and_recover(point: &str, downgrade: bool) {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0"] {
        server.publish(v, &tarball(&release_files(v, Agent::Good)));
    }
    let host = Host::new();
    let db = host.state.join("agent.db");
    let svc = host.service_config(&format!("db_path: {}\n", db.display()));
    set_marker(&db, "one");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    let (from, to) = if downgrade {
        // 1 -> 2 first, so that 1.0.0 has a DB backup to go back to.
        server.set_target("2.0.0", true);
        host.ok(&["update", "--now"]);
        set_marker(&db, "two");
        ("2.0.0", "1.0.0")
    } else {
        ("1.0.0", "2.0.0")
    };
    server.set_target(to, true);
    let out = host
        .cmd(&["update", "--now"])
        .env("TERN_UPDATE_KILL_AT", point)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let killed = out.status.code().is_none();
    eprintln!("{point}: killed={killed}\n{stderr}");
    assert!(killed, "{point}: the kill point was not reached: {stderr}");
    assert_safe(&host, &format!("after kill at {point}"));

    let out = host.ok(&["update", "--now"]);
    assert_safe(&host, &format!("after rerun of {point}"));
    let f = host.update_yaml();
    assert_eq!(f.status.active.as_deref(), Some(to), "{point}: {out}");
    assert_eq!(f.status.in_progress, None);
    assert_eq!(f.status.skip, None, "a kill is not a broken version");
    assert_eq!(host.linked_version().as_deref(), Some(to));
    assert!(host.wait_running(to), "{point}: agent not running {to}");
    let leftovers: Vec<_> = std::fs::read_dir(host.ns().join("versions"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{point}: leftovers {leftovers:?}");
    assert!(
        host.ns()
            .join("versions")
            .join(from)
            .join("sha256")
            .is_file()
    );
    // The DB: an upgrade keeps the live data; a downgrade restores the target's backup.
    // (For the downgrade the live DB said "two" before: 1.0.0's own backup came back.)
    assert_eq!(marker(&db), "one", "{point}");
}

macro_rules! kill_tests {
    ($($name:ident: $point:expr, $down:expr;)*) => {
        $(
            #[test]
            fn $name() {
                kill_and_recover($point, $down);
            }
        )*
    };
}

kill_tests! {
    kill_after_lock: "locked", false;
    kill_after_find: "found", false;
    kill_after_download: "downloaded", false;
    kill_after_extract: "extracted", false;
    kill_after_rename: "renamed", false;
    kill_after_sha256: "verified", false;
    kill_after_journal: "journal_written", false;
    kill_after_db_backup: "db_backed_up", false;
    kill_after_first_link: "link_switched", false;
    kill_after_links: "links_switched", false;
    kill_after_restart: "restarted", false;
    kill_after_healthy: "healthy", false;
    kill_after_commit: "committed", false;
    kill_after_cleanup: "cleaned", false;
    kill_in_atomic_write_1: "write_before_rename#1", false;
    kill_in_atomic_write_2: "write_before_rename#2", false;
    kill_in_atomic_write_3: "write_before_rename#3", false;
    kill_in_atomic_write_4: "write_before_rename#4", false;
    kill_downgrade_after_stop_and_backup: "db_backed_up", true;
    kill_downgrade_after_db_restore: "db_restored", true;
    kill_downgrade_after_links: "links_switched", true;
    kill_downgrade_after_restart: "restarted", true;
    kill_downgrade_in_atomic_write_3: "write_before_rename#3", true;
}

/// A kill during the recovery of a previous kill is recoverable too.
#[test]
fn kill_during_recovery() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0"] {
        server.publish(v, &tarball(&release_files(v, Agent::Good)));
    }
    let host = Host::new();
    let svc = host.service_config("");
    server.set_target("1.0.0", true);
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    server.set_target("2.0.0", true);
    for point in ["links_switched", "link_switched", "recovered"] {
        let out = host
            .cmd(&["update", "--now"])
            .env("TERN_UPDATE_KILL_AT", point)
            .output()
            .unwrap();
        eprintln!(
            "{point}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.code().is_none(), "{point} not reached");
        assert_safe(&host, point);
    }
    host.ok(&["update", "--now"]);
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
}
