//! A compromised ternd alone cannot make a host install an unsigned build: a real ternd
//! rolls out a version the release keys never signed (its tarball and `.sha256` are on
//! the artifact server too); the host, enrolled with a pinned release root, refuses it
//! and keeps running its signed version. The repository is made by the real
//! `tern-release` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::halt_on_error;
use tern_e2e::{Fleet, FleetOptions};

#[test]
fn a_real_ternd_rolling_out_an_unsigned_version_cannot_make_a_pinned_host_install_it() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.0.0"]).unwrap();
    // One group, its window from 10:00 (the clock starts Monday 09:00), no canary.
    f.apply(&halt_on_error(&[("dev", 10, 0, 0)])).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    let server = f.gateway.url.clone();
    let root_arg = root.display().to_string();
    f.add_host_via("signed-1", "dev", &server, &["--trust-root", &root_arg])
        .unwrap();
    let plain = f.add_hosts("dev", 1).unwrap();
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert!(f.wait_running(&all, "1.0.0").is_empty(), "{}", f.describe());

    // ternd (as a compromised ternd could) rolls out 1.1.0, which no release key signed.
    f.new_rollout("1.1.0").unwrap();
    let mut refused = None;
    for i in 0..4 {
        let step = if i == 0 {
            f.step_at("2026-11-23T10:00:00Z").unwrap()
        } else {
            f.tick("10m").unwrap()
        };
        if let Some((_, msg)) = step.failures().into_iter().find(|(h, _)| h == "signed-1") {
            refused = Some(msg);
            break;
        }
    }
    let msg = refused.unwrap_or_else(|| panic!("the pinned host never refused\n{}", f.describe()));
    assert!(
        msg.contains("version 1.1.0") && msg.contains("is not signed by the release keys"),
        "{msg}"
    );
    // The unpinned host followed ternd; the pinned one still runs its signed version.
    assert!(
        f.wait_running(&plain, "1.1.0").is_empty(),
        "{}",
        f.describe()
    );
    assert!(
        f.wait_running(&["signed-1".to_string()], "1.0.0")
            .is_empty(),
        "{}",
        f.describe()
    );
    let status = f.host("signed-1").run(&["status"]).unwrap();
    assert!(
        status
            .stdout
            .contains("verified: installs only what the release keys signed"),
        "{}",
        status.stdout
    );
    // The refusal is not only in the host's log: ternd counts it against 1.1.0, shows
    // it in the host's entry and raises install_refused (1 of 2 hosts: over the 10%
    // budget).
    let step = f.tick("2m").unwrap();
    let dev = step.status.group("dev");
    assert_eq!(dev.refused.get("not_signed"), Some(&1), "{dev:?}");
    let entry = f.inventory_of("signed-1").unwrap().unwrap();
    // Its heartbeats say it pins root v1; the plain host's that it pins none.
    assert_eq!(
        entry.trust,
        Some(tern_core::wire::HostTrust {
            pinned: true,
            root_version: 1
        })
    );
    let plain_entry = f.inventory_of(&plain[0]).unwrap().unwrap();
    assert_eq!(
        plain_entry.trust,
        Some(tern_core::wire::HostTrust {
            pinned: false,
            root_version: 0
        })
    );
    let failure = entry.install_failure.expect("ternd shows the refusal");
    assert_eq!(
        (failure.version.as_str(), failure.kind.as_str()),
        ("1.1.0", "not_signed")
    );
    assert!(
        failure.error.contains("is not signed by the release keys"),
        "{failure:?}"
    );
    let alerts = &step.status.rollout.as_ref().unwrap().status.alerts;
    assert!(
        alerts
            .iter()
            .any(|a| a.kind == "install_refused" && a.message.contains("1 not_signed")),
        "{alerts:?}"
    );
    assert_eq!(step.status.state_of("dev"), "active", "it cannot complete");
}

#[test]
fn ternd_with_the_release_root_refuses_an_unsigned_or_revoked_target_version_and_ternctl_warns() {
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    let root = tern_e2e::sign::sign(&f, &["1.0.0", "1.1.0"]).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    // A second replica on the same store, started with the release root.
    let i = tern_e2e::sign::verifying_replica(&mut f, &root).unwrap();
    let verifying = &f.replicas[i].ctl;

    // 1.2.0 is published on the artifact server, but no release key signed it.
    let out = verifying
        .command(&["agents", "new-rollout", "1.2.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("warning: 1.2.0 is not in the signed release repository"),
        "{err}"
    );
    assert!(
        err.contains("version 1.2.0 is not signed by the release keys"),
        "{err}"
    );
    // A version resource naming it is refused too; nothing was stored.
    let file = f.path().join("unsigned-version.yaml");
    std::fs::write(
        &file,
        tern_core::fixtures::version("1.0.0", "1.2.0", "regular"),
    )
    .unwrap();
    let err = verifying
        .run(&["create", "--force", "-f", file.to_str().unwrap()])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("spec.agents.target_version 1.2.0 is not signed"),
        "{err:#}"
    );
    let v = verifying.json(&["get", "version"]).unwrap().to_string();
    assert!(v.contains("\"target_version\":\"1.0.0\""), "{v}");

    // A signed version goes through, without a warning.
    let out = verifying
        .command(&["agents", "new-rollout", "1.1.0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));

    // The release keys revoke 1.0.0 (line 1's signed minimum becomes 1.1.0): a rollout
    // back to it is refused, naming the minimum, as every pinned host would refuse it.
    tern_e2e::sign::minimum(&f, "1", "1.1.0").unwrap();
    let out = verifying
        .command(&["agents", "new-rollout", "1.0.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("warning: 1.0.0 is revoked by the release keys"),
        "{err}"
    );
    assert!(
        err.contains("version 1.0.0 is below the signed minimum 1.1.0 of release line 1"),
        "{err}"
    );
    let v = verifying.json(&["get", "version"]).unwrap().to_string();
    assert!(v.contains("\"target_version\":\"1.1.0\""), "{v}");

    // The replica without the root checks nothing, and ternctl says so.
    let out = f
        .ctl
        .command(&["agents", "new-rollout", "1.2.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("nothing checked that 1.2.0 is signed"),
        "{err}"
    );
}
