//! What canary analysis buys, in the simulator: a release that runs healthy but fails
//! twice the requests reaches every host without analysis, and only the first group's
//! canaries with it; a good release still reaches every host, later.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use jiff::SignedDuration;
use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};
use tern_sim::{Params, Sim};

fn run(config: &str, errors: f64) -> tern_sim::timeline::Timeline {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/");
    let config =
        AutoUpdateConfig::from_text(&std::fs::read_to_string(format!("{dir}{config}")).unwrap())
            .unwrap();
    let version = AutoUpdateVersion::from_text(
        &std::fs::read_to_string(format!("{dir}version-1.3.0.yaml")).unwrap(),
    )
    .unwrap();
    let params = Params {
        agents: 1000,
        errors: BTreeMap::from([("1.3.0".to_string(), errors)]),
        ..Params::default()
    };
    let mut sim = Sim::new(params, Some(config), version).unwrap();
    sim.run_for(SignedDuration::from_hours(72))
}

#[test]
fn a_release_that_doubles_its_errors_reaches_every_host_without_analysis_two_with_it() {
    let without = run("no-analysis.yaml", 0.02);
    assert_eq!(without.overall.on_target, 1000);
    assert_eq!(without.overall.rollout_state, "done");

    let with = run("analysis.yaml", 0.02);
    // dev's two canaries, and nobody else.
    assert_eq!(with.overall.on_target, 2, "{:?}", with.overall);
    assert_eq!(with.overall.updates, 2);
    let failed: Vec<_> = with
        .events
        .iter()
        .filter(|e| e.kind.as_str() == "analysis_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", with.events);
    assert_eq!(failed[0].group.as_deref(), Some("dev"));
}

#[test]
fn a_good_release_still_reaches_every_host_with_analysis() {
    let with = run("analysis.yaml", 0.01);
    assert_eq!(with.overall.on_target, 1000);
    assert_eq!(with.overall.rollout_state, "done");
    let without = run("no-analysis.yaml", 0.01);
    // Three passes five minutes apart cost each group about ten minutes.
    let (a, b) = (
        with.overall.first_window_to_done_secs.unwrap(),
        without.overall.first_window_to_done_secs.unwrap(),
    );
    assert!(a > b, "{a} vs {b}");
}
