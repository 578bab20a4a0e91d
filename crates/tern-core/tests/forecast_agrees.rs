//! The host page's forecast never disagrees with find nor with the host: over random
//! rollouts (strategy, mode, schedule, group states, canaries, backpressure) and random
//! hosts (group, version, a version they failed, a freeze, a pin, a directive), the
//! forecast's "updates now / stays / held" is what the host does with find's answer,
//! and its find version and flag are find's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tern_core::duration::Percent;
use tern_core::forecast::{self, HostState, Verdict};
use tern_core::gate::{self, Ask, Fleet, Host};
use tern_core::host_update::{self, Health};
use tern_core::resource::{
    AutoUpdateAgentRollout, Canary, GroupState, Mode, RolloutGroup, RolloutSpec, RolloutStatus,
    Schedule, Strategy as RolloutStrategy,
};
use tern_core::version::Version;
use tern_core::window::Day;

const IDS: [&str; 4] = [
    "10000000-0000-4000-8000-000000000000",
    "70000000-0000-4000-8000-000000000000",
    "e0000000-0000-4000-8000-000000000000",
    "",
];
const VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "0.9.0"];
const GROUPS: [&str; 4] = ["dev", "prod", "typo", ""];

fn state() -> impl Strategy<Value = GroupState> {
    prop_oneof![
        Just(GroupState::Unstarted),
        Just(GroupState::Canary),
        Just(GroupState::Active),
        Just(GroupState::Done),
        Just(GroupState::Rolledback),
    ]
}

fn group(name: &'static str) -> impl Strategy<Value = RolloutGroup> {
    (
        state(),
        proptest::collection::vec(0..3usize, 0..3),
        proptest::option::of(0u8..50),
        0.0f64..=1.0,
        0u8..24,
    )
        .prop_map(move |(state, canaries, mif, progress, hour)| RolloutGroup {
            name: name.into(),
            state,
            config: tern_core::resource::GroupConfig {
                canary_count: i64::try_from(canaries.len()).unwrap(),
                max_in_flight: mif.map(|p| Percent::from_percent(u32::from(p))),
                days: vec![Day::parse("*").unwrap()],
                start_hour: Some(i64::from(hour)),
                ..Default::default()
            },
            canaries: canaries
                .into_iter()
                .map(|i| Canary {
                    updater_id: IDS[i].into(),
                    ..Canary::default()
                })
                .collect(),
            progress,
            ..RolloutGroup::default()
        })
}

fn rollout() -> impl Strategy<Value = AutoUpdateAgentRollout> {
    (
        group("dev"),
        group("prod"),
        prop_oneof![
            Just(Mode::Enabled),
            Just(Mode::Suspended),
            Just(Mode::Disabled)
        ],
        prop_oneof![
            Just(RolloutStrategy::HaltOnError),
            Just(RolloutStrategy::TimeBased)
        ],
        prop_oneof![4 => Just(Schedule::Regular), 1 => Just(Schedule::Immediate)],
    )
        .prop_map(|(dev, prod, mode, strategy, schedule)| {
            AutoUpdateAgentRollout::new(
                RolloutSpec {
                    start_version: Version::parse("1.0.0").unwrap(),
                    target_version: Version::parse("1.1.0").unwrap(),
                    schedule,
                    autoupdate_mode: mode,
                    strategy,
                    maintenance_window_duration: None,
                    host_group: Default::default(),
                },
                RolloutStatus {
                    start_time: Some("2026-11-23T08:00:00Z".parse().unwrap()),
                    groups: vec![dev, prod],
                    ..RolloutStatus::default()
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_forecast_says_what_find_and_the_host_do(
        r in proptest::option::weighted(0.9, rollout()),
        group in 0..GROUPS.len(),
        id in 0..IDS.len(),
        version in 0..VERSIONS.len(),
        failed in proptest::option::of(0..VERSIONS.len()),
        frozen in any::<bool>(),
        pinned in any::<bool>(),
        governed in proptest::bool::weighted(0.1),
        minutes in 0i64..(3 * 24 * 60),
    ) {
        let now = jiff::Timestamp::from_second(1_795_420_800 + minutes * 60).unwrap();
        let pins: std::collections::BTreeMap<String, jiff::Timestamp> = pinned
            .then(|| (IDS[id].to_string(), now.checked_add(jiff::SignedDuration::from_hours(1)).unwrap()))
            .into_iter()
            .collect();
        let freeze = tern_core::api::Freeze {
            reason: "test".into(),
            since: now,
            by: "t".into(),
            products: Vec::new(),
        };
        let (spec, installers) = (Default::default(), Default::default());
        let fleet = Fleet {
            freeze: frozen.then_some(&freeze),
            pins: &pins,
            directive: governed.then_some(gate::Directive { spec: &spec, installers: &installers }),
            ..Fleet::new(r.as_ref(), now)
        };
        let mut asking = Host::new(gate::AGENT, GROUPS[group], IDS[id]);
        asking.recorded.governed = governed;
        let host = HostState {
            version: VERSIONS[version],
            failed_version: failed.map(|f| VERSIONS[f]),
            canary_eligible_at: None,
                directive_facts: None,
        };
        let f = forecast::forecast(&fleet, &asking, host, []);
        let answer = gate::answer(&fleet, &asking, Ask::Find);
        prop_assert_eq!(f.find_update, answer.update());
        prop_assert_eq!(f.find_version.clone(), answer.version.as_ref().map(ToString::to_string));
        prop_assert_eq!(f.hold.clone(), answer.hold().map(|h| h.code().to_string()));
        let host_does = host_update::on_find(
            &answer,
            Some(host.version),
            host.failed_version,
            Health::Unknown,
            now,
        );
        let installs = matches!(host_does, host_update::Decision::Update { .. });
        prop_assert_eq!(
            f.outlook.verdict() == Verdict::UpdateNow,
            installs,
            "{:?}: {}", f.outlook, f.summary
        );
        // Held means a hold keeps it; nothing held is "update now" in words.
        if f.outlook.verdict() == Verdict::Held {
            prop_assert!(!f.summary.contains("update to") || f.summary.contains("then:"), "{}", f.summary);
        }
    }
}
