//! Real-process conviction of planted holes (feature `planted-holes`; docs/simulator.md,
//! "Planted holes"): a real ternd and real `tern-update` hosts, built with tern-core's
//! `planted-holes`, run with the hole named in `TERN_PLANTED_HOLE` (every process this
//! test starts inherits it), and the fleet-safety checker over what they did must
//! convict it. Each test first checks that the variable names its hole: run one at a
//! time, e.g.
//!
//! ```sh
//! cargo build -p tern-server -p tern-update -p tern-ctl --bins \
//!   --features tern-update/test-hooks,tern-store/etcd,tern-server/etcd,tern-core/planted-holes
//! TERN_PLANTED_HOLE=first-install-takes-target \
//!   cargo nextest run -p tern-e2e --features planted-holes --test planted -E 'test(first_install)'
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tern_core::fixtures::halt_on_error;
use tern_e2e::{Fleet, FleetOptions};

const MON: &str = "2026-11-23";

fn at(hm: &str) -> String {
    format!("{MON}T{hm}:00Z")
}

/// Panics unless this run opens `hole` (and only it) in the processes it starts.
fn planted(hole: &str) {
    let open = std::env::var("TERN_PLANTED_HOLE").unwrap_or_default();
    assert_eq!(
        open, hole,
        "run this test with TERN_PLANTED_HOLE={hole} (and binaries built with tern-core/planted-holes)"
    );
}

/// Issue 47, hole 3: under a freeze, find names the frozen target to a host enrolling,
/// which installs it. stops.rs plays the same fleet with every hole closed and passes.
#[test]
fn first_install_takes_target_is_convicted() {
    planted("first-install-takes-target");
    let mut f = Fleet::start(FleetOptions::default()).unwrap();
    f.apply(&halt_on_error(&[("dev", 10, 0, 0), ("prod", 14, 0, 0)]))
        .unwrap();
    f.set_version("1.1.0", "1.1.0", "regular").unwrap();
    f.add_hosts("dev", 2).unwrap();
    f.tick("2m").unwrap();
    f.clock_set(&at("09:30")).unwrap();
    f.new_rollout("1.2.0").unwrap();
    f.clock_set(&at("10:05")).unwrap();
    f.reconcile().unwrap();
    f.agents(&["freeze", "--reason", "1.2.0 crashes on start"])
        .unwrap();
    // The host may end with no agent at all: what it did is in the trace either way.
    let _ = f.add_host("dev-new", "dev");
    f.tick("2m").unwrap();
    let err = f.conviction().unwrap();
    println!("{err}");
    assert!(err.contains("(stop)") && err.contains("1.2.0"), "{err}");
}

/// Issue 47, hole 2: the updater's `local-script` instructions skip the agents'
/// stop. stops.rs plays the same fleet (`tern_e2e::crossing`) with every hole closed.
#[test]
fn script_skips_agents_stop_is_convicted() {
    planted("script-skips-agents-stop");
    let s = tern_e2e::crossing::script_directive_while_agents_frozen().unwrap();
    assert!(
        !s.ran.is_empty(),
        "the hole was open but the script never ran"
    );
    let err = s.agents.conviction().unwrap();
    println!("{err}");
    assert!(
        err.contains("(stop)") && err.contains("updater 1.1.0") && err.contains("a freeze"),
        "{err}"
    );
}

/// Issue 47, hole 4: under a stop, find names the last known-good version even though
/// the release keys revoked it; a host enrolling installs it. stops.rs plays the same
/// fleet (`tern_e2e::crossing`) with every hole closed: the host installs nothing.
#[test]
fn revoked_start_is_convicted() {
    planted("revoked-start");
    let f = tern_e2e::crossing::enrolled_while_known_good_revoked().unwrap();
    f.tick("2m").unwrap();
    let err = f.conviction().unwrap();
    println!("{err}");
    assert!(
        err.contains("(revoked)") && err.contains("1.0.0 is below the signed minimum 1.1.0"),
        "{err}"
    );
}

/// Issue 11: a canary running the target unhealthy counts as passed. Its group goes
/// active and its other hosts install the target; the fleet's checker, which reads the
/// canary's own report (1.1.0, unhealthy) rather than the rollout's word, convicts it.
/// scenarios.rs plays the same fleet (`tern_e2e::crossing`) with every hole closed.
#[test]
fn unhealthy_canary_passes_is_convicted() {
    planted("unhealthy-canary-passes");
    let s = tern_e2e::crossing::canary_down_before_it_is_judged().unwrap();
    s.fleet.tick("2m").unwrap();
    let err = s.fleet.conviction().unwrap();
    println!("{err}");
    assert!(
        err.contains("(canaries_first)") && err.contains("1.1.0"),
        "{err}"
    );
}
