//! What `agents status` says of an unstarted group's start is what the reconcile does:
//! over random groups, windows, waits, rollout creation times, earlier groups done,
//! both strategies and `follow_in_window`, a reconcile at the status's `starts_at`
//! starts the group, and one a minute earlier does not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use tern_core::resource::GroupState;
use tern_core::rollout::DEFAULT_REPORT_PERIOD;
use tern_core::views;

const NAMES: [&str; 3] = ["g0", "g1", "g2"];

fn config_of(time_based: bool, hours: &[(u8, u8, u32)]) -> String {
    if time_based {
        let groups: Vec<(&str, u8)> = hours
            .iter()
            .enumerate()
            .map(|(i, &(h, _, _))| (NAMES[i], h))
            .collect();
        return tern_core::fixtures::time_based("1h", &groups);
    }
    let groups: Vec<tern_core::fixtures::Group<'_>> = hours
        .iter()
        .enumerate()
        .map(|(i, &(h, canaries, wait))| {
            // The first group has nothing to wait for.
            tern_core::fixtures::group(NAMES[i], h)
                .canaries(canaries)
                .wait(if i == 0 { 0 } else { wait })
        })
        .collect();
    tern_core::fixtures::halt_on_error_config("enabled", &groups)
}

fn at_minute(m: i64) -> Timestamp {
    // Monday 2026-11-23 00:00 UTC.
    Timestamp::from_second(1_795_392_000 + m * 60).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_reconcile_starts_a_group_when_the_status_says(
        hours in proptest::collection::vec((0u8..24, 0u8..2, 0u32..30), 2..=3),
        time_based in proptest::bool::weighted(0.25),
        follow in any::<bool>(),
        created in 0i64..(2 * 24 * 60),
        later in 0i64..180,
        done_before in 0usize..3,
    ) {
        let mut v = version("1.0.0", "1.1.0");
        v.spec.agents.as_mut().unwrap().follow_in_window = follow;
        let mut w = World::new(Some(config(&config_of(time_based, &hours))), v);
        for name in NAMES.iter().take(hours.len()) {
            w.agents.extend(fleet(name, 2, "1.0.0"));
        }
        let created = at_minute(created);
        let reports = vec![report_of(created, &w.agents)];
        w.reconcile_with(created, &reports);
        let k = done_before.min(hours.len() - 1);
        let mut r = w.rollout().clone();
        for g in &mut r.status.groups[..k] {
            g.state = GroupState::Done;
            g.start_time = Some(created);
        }
        prop_assume!(r.status.groups[k].state == GroupState::Unstarted);
        let now = created.checked_add(SignedDuration::from_mins(later)).unwrap();
        let status = views::status(
            now,
            views::modes(w.config.as_ref(), w.version.as_ref(), None),
            w.config.as_ref(),
            Some(r.clone()),
            true,
            &[report_of(now, &w.agents)],
            DEFAULT_REPORT_PERIOD,
        );
        let g = &status.groups[k];
        let Some(starts_at) = g.starts_at else {
            // Daily windows: some window ahead always admits it.
            return Err(TestCaseError::fail(format!("no start: {:?}", g.starts)));
        };
        prop_assert!(starts_at >= now);
        let state_at = |t: Timestamp| {
            let mut w = World::new(w.config.clone(), w.version.clone().unwrap());
            w.agents = status_agents(&r);
            w.rollout = Some(r.clone());
            let reports = vec![report_of(t, &w.agents)];
            w.reconcile_with(t, &reports).status.groups[k].state
        };
        prop_assert_ne!(state_at(starts_at), GroupState::Unstarted, "{:?}", g.starts);
        let before = starts_at.checked_sub(SignedDuration::from_mins(1)).unwrap();
        if before >= now {
            prop_assert_eq!(state_at(before), GroupState::Unstarted, "{:?}", g.starts);
        }
    }
}

/// Two hosts on the start version in each group of `r`.
fn status_agents(
    r: &tern_core::resource::AutoUpdateAgentRollout,
) -> Vec<tern_core::resource::ConnectedAgent> {
    r.status
        .groups
        .iter()
        .flat_map(|g| fleet(&g.name, 2, "1.0.0"))
        .collect()
}
