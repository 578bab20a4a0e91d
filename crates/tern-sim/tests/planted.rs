//! The planted-holes suite (feature `planted-holes`; docs/simulator.md, "Planted
//! holes"): each hole a safety round closed, put back alone (`tern_core::planted`),
//! must be convicted by the seeded fault simulator's fleet-safety check on the seeds
//! recorded here, and the same seeds must pass with every hole closed. The judge
//! (`tern_core::invariant`) has no planted site: it is the same with or without them.
//!
//! `cargo test -p tern-sim --features planted-holes --test planted`; a seed replays
//! with `TERN_PLANTED_HOLE=<name> cargo run -p tern-sim --features planted-holes --
//! --faults --seed N --hours 36 --verbose`.

use tern_core::invariant::Violation;
use tern_core::planted::{self, Hole};
use tern_sim::faults::{self, FaultParams};

/// Simulated hours per seed, as CI's fault run.
const HOURS: i64 = 36;

/// Each hole, and the first three seeds on which the invariant convicts it (how many
/// of 40 or 100 seeds do is in docs/simulator.md).
const CONVICTED: &[(Hole, &[u64])] = &[
    (Hole::FirstHoldOnly, &[0, 1, 2]),
    (Hole::ScriptSkipsAgentsStop, &[0, 1, 2]),
    (Hole::FirstInstallTakesTarget, &[4, 8, 10]),
    (Hole::RevokedStart, &[4, 8, 10]),
    (Hole::RevokedChannel, &[0, 1, 3]),
    (Hole::RevokedDirective, &[1, 3, 5]),
    (Hole::PinSkipsChannel, &[0, 1, 2]),
    (Hole::PinSkipsDirective, &[20, 32, 38]),
    (Hole::FreezeSkipsDirective, &[0, 1, 2]),
    (Hole::RepairThroughStop, &[0, 2, 3]),
    (Hole::NowThroughStop, &[0, 2, 20]),
    (Hole::CutOffIgnored, &[0, 1, 2]),
    (Hole::PlacedByMemory, &[28, 44, 75]),
    (Hole::NoEvidenceIsZeroHosts, &[6, 7, 17]),
    (Hole::GroupOrder, &[1, 3, 4]),
    (Hole::UnhealthyCanaryPasses, &[0, 3, 67]),
];

/// Holes the simulator's invariant cannot convict, and what holds each instead.
const NOT_BY_THE_SIMULATOR: &[(Hole, &str)] = &[(
    Hole::RevokedWrites,
    "ternd's checks where a version is written: the simulator writes no resource through ternd; tern-e2e's stops.rs ternd_with_the_release_root_refuses_a_revoked_version_wherever_one_is_written fails with it open",
)];

fn violation(seed: u64, holes: &[Hole]) -> Option<Violation> {
    planted::with(holes, || {
        faults::run(FaultParams {
            seed,
            hours: HOURS,
            ..FaultParams::default()
        })
    })
    .violation
}

#[test]
fn each_hole_put_back_is_convicted_on_its_seeds() {
    let mut missed = Vec::new();
    for (hole, seeds) in CONVICTED {
        assert!(!seeds.is_empty(), "{}: no seed recorded", hole.name());
        for &seed in *seeds {
            match violation(seed, &[*hole]) {
                Some(v) => println!("{} seed {seed}: {v}", hole.name()),
                None => missed.push(format!("{} on seed {seed}", hole.name())),
            }
        }
    }
    assert!(
        missed.is_empty(),
        "the invariant did not convict: {}",
        missed.join(", ")
    );
}

#[test]
fn the_same_seeds_pass_with_every_hole_closed() {
    let mut seeds: Vec<u64> = CONVICTED
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .collect();
    seeds.sort_unstable();
    seeds.dedup();
    let broke: Vec<String> = seeds
        .iter()
        .filter_map(|&seed| violation(seed, &[]).map(|v| format!("seed {seed}: {v}")))
        .collect();
    assert!(broke.is_empty(), "{}", broke.join("\n"));
}

#[test]
fn every_hole_is_accounted_for() {
    for hole in Hole::ALL {
        let convicted = CONVICTED.iter().filter(|(h, _)| *h == hole).count();
        let said = NOT_BY_THE_SIMULATOR
            .iter()
            .filter(|(h, _)| *h == hole)
            .count();
        assert_eq!(
            convicted + said,
            1,
            "{}: put it in exactly one table of this suite",
            hole.name()
        );
    }
}
