//! A release source that lies: a plain JSON index whose digest does not match the
//! tarball, and a release whose plan is invalid. Each stops the update with a message
//! naming what is wrong, installs nothing, and the cluster goes on once the source is
//! fixed and the operator recovers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Bench, IndexServer, build_release, build_release_with};

const LONG: Duration = Duration::from_secs(60);

fn sha_of(bench: &Bench, version: &str) -> String {
    let text = std::fs::read_to_string(
        bench
            .github
            .assets
            .join(format!("app-{version}.tar.gz.sha256")),
    )
    .unwrap();
    text.split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_wrong_digest_and_a_bad_plan_stop_the_update_with_the_reason() {
    let bench = Bench::new(None);
    let index = IndexServer::start();
    let url = |v: &str| format!("{}/download/app-{v}.tar.gz", bench.github.server.url());
    build_release(&bench.github.assets, "1.0.0");
    build_release(&bench.github.assets, "1.1.0-rc.1");
    let zeros = "0".repeat(64);
    index.set(json!({"releases": [
        {"tag": "release-1.0.0", "url": url("1.0.0"), "sha256": zeros},
        {"tag": "release-1.1.0-rc.1", "prerelease": true, "url": url("1.1.0-rc.1"), "sha256": sha_of(&bench, "1.1.0-rc.1")},
    ]}));
    let w: Vec<_> = (1..=2).map(|id| bench.worker(id, "10s")).collect();
    support::wait_for(LONG, || bench.status().contains("registered: 1, 2"));
    let source = ["--index".to_string(), index.url()];
    let u = bench.updater_from("u1", &source);
    let procs = [&w[0], &w[1], &u];

    // Production takes 1.0.0 (not the pre-release); its digest is wrong.
    let s = bench.wait_status("STOPPED", LONG, &procs);
    assert!(s.contains("update: 1.0.0"), "{s}");
    assert!(
        s.contains("but the update pins 0000") && s.contains("refusing to install"),
        "{s}"
    );
    assert!(
        !bench.dir.path().join("server-1/versions/1.0.0").exists(),
        "a tarball with the wrong digest was unpacked"
    );

    // The index is fixed; recover; it completes.
    index.set(json!({"releases": [
        {"tag": "release-1.0.0", "url": url("1.0.0"), "sha256": sha_of(&bench, "1.0.0")},
        {"tag": "release-1.1.0-rc.1", "prerelease": true, "url": url("1.1.0-rc.1"), "sha256": sha_of(&bench, "1.1.0-rc.1")},
    ]}));
    // The updater has read the fixed index: the first request after it was set read it,
    // and the updater asks again only once it kept what the first said.
    let asked = index.server.requests();
    support::wait_for(LONG, || index.server.requests() >= asked + 2);
    let (ok, out) = bench.ctl(&["recover"]);
    assert!(ok, "{out}");
    bench.wait_status("completed: 1.0.0", LONG, &procs);

    // 1.2.0 ships a plan that does not validate: the install names the field.
    build_release_with(
        &bench.github.assets,
        "1.2.0",
        "components:\n  - name: a\n    kind: stop-everywhere\n    start: [bin/component, a, start]\n",
    );
    index.set(json!({"releases": [
        {"tag": "release-1.0.0", "url": url("1.0.0"), "sha256": sha_of(&bench, "1.0.0")},
        {"tag": "release-1.2.0", "url": url("1.2.0"), "sha256": sha_of(&bench, "1.2.0")},
    ]}));
    let s = bench.wait_status("STOPPED", LONG, &procs);
    assert!(
        s.contains("update: 1.2.0") && s.contains("components[0].stop"),
        "{s}"
    );
    let (ok, out) = bench.ctl(&["stop"]);
    assert!(ok && out.contains("already stopped"), "{out}");
    assert_eq!(
        support::check_log(&bench.component_log()).get("1.0.0"),
        Some(&1)
    );
}
