//! Canary analysis in the reconcile: a group with `analysis` goes active only once its
//! canaries run the target healthy *and* the analysis passed as often in a row as it
//! needs; a query past its limit is a failed canary (held, alerted, latched until a
//! reset or rollback); a query that cannot be judged holds the group (fail closed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use jiff::{SignedDuration, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use tern_core::analysis::{Measured, QueryValues, Sample};
use tern_core::reconcile::{self, Outcome, ReconcileInput};
use tern_core::resource::*;
use tern_core::rollout::{DEFAULT_REPORT_PERIOD, Event};
use tern_core::{alert, reason, transition};

const CONFIG: &str = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
      - name: prod
        days: ["*"]
        start_hour: 12
        canary_count: 2
        analysis:
          interval: 1m
          passes: 2
          queries:
          - name: error_ratio
            query: 'sum(rate(errors_total{host=~"{{canary_hosts}}"}[1m])) / sum(rate(requests_total{host=~"{{canary_hosts}}"}[1m]))'
            max: 0.05
          - name: errors_vs_start
            query: 'sum(rate(errors_total{host=~"{{canary_hosts}}"}[1m]))'
            baseline: 'sum(rate(errors_total{group="{{group}}",version="{{start_version}}"}[1m]))'
            max_ratio: 1.5
            tolerance: 0.01
"#;

fn at(mins: i64) -> Timestamp {
    ts("2026-11-23T12:00:00Z")
        .saturating_add(SignedDuration::from_mins(mins))
        .unwrap()
}

/// The world after the group started and its canaries run the target healthy.
fn canaries_on_target() -> World {
    let mut w = World::new(Some(config(CONFIG)), version("1.0.0", "1.1.0"));
    w.agents = fleet("prod", 10, "1.0.0");
    w.reconcile("2026-11-23T12:00:00Z");
    assert_eq!(w.group("prod").state, GroupState::Canary);
    assert_eq!(w.group("prod").canaries.len(), 2);
    w.agents_follow_find("prod");
    measured(&mut w, at(1), &[]);
    w
}

/// One reconcile at `now` with `values` fed in for the group's due analysis.
fn measured(w: &mut World, now: Timestamp, values: &[Measured]) {
    let reports = vec![report_of(now, &w.agents)];
    let input = ReconcileInput {
        config: w.config.as_ref(),
        version: w.version.as_ref(),
        rollout: w.rollout.as_ref(),
        reports: &reports,
        agents: &w.agents,
        report_period: DEFAULT_REPORT_PERIOD,
        frozen: false,
    };
    match reconcile::reconcile_measured(now, &input, values, &mut w.rng) {
        Outcome::Rollout { rollout, events } => {
            w.events = events;
            w.rollout = Some(*rollout);
        }
        Outcome::NoRollout { why } => panic!("{why}"),
    }
}

fn values(error_ratio: Sample, canary_errors: Sample, baseline: Sample) -> Vec<Measured> {
    vec![Measured {
        group: "prod".into(),
        values: vec![
            QueryValues {
                name: "error_ratio".into(),
                canary: error_ratio,
                baseline: None,
            },
            QueryValues {
                name: "errors_vs_start".into(),
                canary: canary_errors,
                baseline: Some(baseline),
            },
        ],
    }]
}

fn good() -> Vec<Measured> {
    values(Ok(0.01), Ok(0.10), Ok(0.10))
}

/// Non-canary hosts find tells to update.
fn others_told_to_update(w: &World) -> usize {
    let canaries: Vec<&str> = w
        .group("prod")
        .canaries
        .iter()
        .map(|c| c.updater_id.as_str())
        .collect();
    w.agents
        .iter()
        .filter(|a| !canaries.contains(&a.updater_id.as_str()))
        .filter(|a| {
            tern_core::gate::rollout_answer(w.rollout.as_ref(), &a.group, &a.updater_id).update()
        })
        .count()
}

fn kinds(w: &World) -> Vec<String> {
    w.rollout()
        .status
        .alerts
        .iter()
        .map(|a| a.kind.clone())
        .collect()
}

#[test]
fn the_group_waits_for_the_passes_it_needs_then_goes_active() {
    let mut w = canaries_on_target();
    // Canaries healthy on the target, but nothing measured yet: it waits.
    assert_eq!(
        w.state("prod"),
        (GroupState::Canary, reason::ANALYSIS_PENDING.into())
    );
    assert_eq!(others_told_to_update(&w), 0);
    // What the leader is asked to run, with the canaries' hostnames filled in.
    let req = reconcile::analysis_requests(w.rollout(), at(1));
    assert_eq!(req.len(), 1);
    let q = req[0].queries[0].query.as_ref().unwrap();
    for c in &w.group("prod").canaries {
        let escaped = c.hostname.replace('.', "\\\\.");
        assert!(q.contains(&escaped), "{q} lacks {escaped}");
    }
    let b = req[0].queries[1]
        .baseline
        .as_ref()
        .unwrap()
        .as_ref()
        .unwrap();
    assert!(b.contains(r#"group="prod",version="1.0.0""#), "{b}");

    measured(&mut w, at(1), &good());
    let st = w.group("prod").analysis.clone().unwrap();
    assert_eq!(st.passes, 1);
    assert!(
        st.message.contains("error_ratio: canaries 0.01 (max 0.05)"),
        "{}",
        st.message
    );
    assert_eq!(w.state("prod").1, reason::ANALYSIS_PENDING);
    // Not due again before its interval.
    assert!(
        reconcile::analysis_requests(w.rollout(), at(1) + SignedDuration::from_secs(30)).is_empty()
    );
    assert_eq!(reconcile::analysis_requests(w.rollout(), at(2)).len(), 1);
    measured(&mut w, at(2), &good());
    assert_eq!(w.state("prod").0, GroupState::Active);
    assert!(
        w.events.iter().any(|e| matches!(e, Event::GroupChanged { to: GroupState::Active, reason, .. } if *reason == reason::ANALYSIS_PASSED)),
        "{:?}",
        w.events
    );
    assert!(others_told_to_update(&w) > 0);
    // Active: nothing more to run.
    assert!(reconcile::analysis_requests(w.rollout(), at(3)).is_empty());
}

#[test]
fn a_failed_query_holds_the_group_at_its_canaries_until_an_operator_acts() {
    let mut w = canaries_on_target();
    measured(&mut w, at(1), &good());
    // The canaries' errors double against the hosts on the start version.
    measured(&mut w, at(2), &values(Ok(0.02), Ok(0.20), Ok(0.10)));
    assert_eq!(
        w.state("prod"),
        (GroupState::Canary, reason::ANALYSIS_FAILED.into())
    );
    assert!(
        w.events
            .iter()
            .any(|e| matches!(e, Event::AnalysisFailed { .. }))
    );
    let alert = w
        .rollout()
        .status
        .alerts
        .iter()
        .find(|a| a.kind == alert::kind::ANALYSIS_FAILED)
        .expect("an analysis_failed alert");
    for says in [
        "errors_vs_start",
        "canaries 0.2",
        "baseline 0.1",
        "limit 0.16",
    ] {
        assert!(alert.message.contains(says), "{}", alert.message);
    }
    assert_eq!(others_told_to_update(&w), 0);
    // Latched: good values later change nothing, and nothing more is asked.
    assert!(reconcile::analysis_requests(w.rollout(), at(10)).is_empty());
    for m in 3..8 {
        measured(&mut w, at(m), &good());
        assert_eq!(w.state("prod").1, reason::ANALYSIS_FAILED);
    }
    assert_eq!(others_told_to_update(&w), 0);
    // The operator resets the group: new canaries, a new analysis.
    let (r, _) = transition::apply(
        w.rollout(),
        &transition::Transition::Reset {
            groups: vec!["prod".into()],
        },
        at(8),
    )
    .unwrap();
    w.rollout = Some(r);
    assert!(w.group("prod").analysis.is_none());
    measured(&mut w, at(8), &[]);
    assert!(!kinds(&w).contains(&alert::kind::ANALYSIS_FAILED.to_string()));
}

#[test]
fn a_query_that_cannot_be_judged_holds_the_group_with_its_reason() {
    let mut w = canaries_on_target();
    measured(&mut w, at(1), &good());
    for bad in [
        values(
            Err("Prometheus at 127.0.0.1:9 unreachable: connection refused".into()),
            Ok(0.1),
            Ok(0.1),
        ),
        values(Ok(f64::NAN), Ok(0.1), Ok(0.1)),
        values(
            Ok(0.01),
            Ok(0.1),
            Err("query returned 3 series, expected one number".into()),
        ),
        vec![Measured {
            group: "prod".into(),
            values: vec![],
        }],
    ] {
        measured(&mut w, at(2), &bad);
        assert_eq!(
            w.state("prod"),
            (GroupState::Canary, reason::ANALYSIS_HELD.into()),
            "{bad:?}"
        );
        assert_eq!(w.group("prod").analysis.as_ref().unwrap().passes, 0);
        assert!(kinds(&w).contains(&alert::kind::ANALYSIS_HELD.to_string()));
        assert_eq!(others_told_to_update(&w), 0);
    }
    // Prometheus is back: two passes in a row, then active; the alert clears.
    measured(&mut w, at(3), &good());
    assert!(!kinds(&w).contains(&alert::kind::ANALYSIS_HELD.to_string()));
    measured(&mut w, at(4), &good());
    assert_eq!(w.state("prod").0, GroupState::Active);
}

/// Over random runs of verdicts, the group is active exactly when the last `passes`
/// evaluations passed and none ever failed; it never leaves canary otherwise.
#[test]
fn active_only_after_enough_passes_in_a_row_and_no_failure() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for case in 0..200 {
        let mut w = canaries_on_target();
        let mut run = 0;
        let mut failed = false;
        for step in 0..8 {
            let now = at(2 + step);
            let v = match rng.next_u32() % 6 {
                0 => values(Ok(0.5), Ok(0.1), Ok(0.1)),
                1 => values(Err("down".into()), Ok(0.1), Ok(0.1)),
                _ => good(),
            };
            let is_pass = v == good();
            let is_fail = v[0].values[0].canary == Ok(0.5);
            measured(&mut w, now, &v);
            failed |= is_fail;
            run = if is_pass { run + 1 } else { 0 };
            let state = w.group("prod").state;
            if state == GroupState::Active {
                assert!(!failed && run >= 2, "case {case} step {step}");
                break;
            }
            assert_eq!(state, GroupState::Canary, "case {case} step {step}");
            assert!(
                failed || run < 2,
                "case {case} step {step}: should be active"
            );
        }
    }
}

#[test]
fn bad_analyses_are_refused_naming_the_field() {
    let with = |analysis: &str| {
        let yaml = format!(
            r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    strategy: halt-on-error
    schedules:
      regular:
      - name: prod
        canary_count: {}
        analysis: {analysis}
"#,
            if analysis.contains("NOCANARY") { 0 } else { 1 }
        );
        AutoUpdateConfig::from_text(&yaml.replace("NOCANARY", ""))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let field = "spec.agents.schedules.regular[0].analysis";
    for (analysis, says) in [
        ("{queries: []}", format!("{field}.queries: 0 queries")),
        (
            "{queries: [{name: a, query: 'x{h=~\"{{hosts}}\"}', max: 1}]}",
            format!("{field}.queries[0].query: {{{{hosts}}}} is not a placeholder"),
        ),
        (
            "{queries: [{name: a, query: x}]}",
            format!("{field}.queries[0]: \"a\" judges nothing"),
        ),
        (
            "{queries: [{name: a, query: x, baseline: y}]}",
            format!("{field}.queries[0].max_ratio: unset is needed with a baseline"),
        ),
        (
            "{queries: [{name: a, query: x, max: .nan}]}",
            format!("{field}.queries[0].max: NaN is not a finite number"),
        ),
        (
            "{queries: [{name: a, query: x, max: 1}, {name: a, query: y, max: 1}]}",
            format!("{field}.queries[1].name: \"a\" is used twice"),
        ),
        (
            "{passes: 0, queries: [{name: a, query: x, max: 1}]}",
            format!("{field}.passes: 0 is out of range"),
        ),
        (
            "{queries: [{name: a, query: x, max: 1}]} #NOCANARY",
            format!("{field}: 1 queries needs canary_count"),
        ),
    ] {
        let e = with(analysis);
        assert!(e.contains(&says), "{analysis}: {e:?} lacks {says:?}");
    }
    assert_eq!(
        with("{queries: [{name: a, query: 'x{g=\"{{group}}\"}', max: 1}]}"),
        ""
    );
    // An unknown field is refused by name too.
    assert!(with("{queries: [{name: a, query: x, max: 1, maximum: 2}]}").contains("maximum"));
}

// ---- The selectors values are put into --------------------------------------------

/// The inside of a PromQL double-quoted string as Prometheus reads it (Go's escapes;
/// `render` writes `\\`, `\"`, `\n`, `\r`, `\t`). `None` for anything it would refuse.
fn unquote(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(match chars.next()? {
                '\\' => '\\',
                '"' => '"',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                _ => return None,
            }),
            '"' | '\n' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// What `template` selects with once rendered: the label matcher's value, unquoted.
fn matcher_value(rendered: &str, before: &str) -> String {
    let start = rendered.find(before).unwrap() + before.len();
    let inner = &rendered[start..rendered.len() - 2];
    unquote(inner).unwrap_or_else(|| panic!("not a PromQL string: {rendered:?}"))
}

/// Strings an attacker can put in a heartbeat: control characters, regex and PromQL
/// syntax, quotes, backslashes, whitespace, anything else.
fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let pieces = prop_oneof![
        Just(String::new()),
        "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}]{1,4}",
        "[\\\\\"|.*+?()\\[\\]{}^$ \\t\\n=~,]{1,4}",
        "[a-z0-9.-]{1,6}",
        ".{0,6}",
    ];
    proptest::collection::vec(pieces, 0..4).prop_map(|p| p.concat())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Whatever hostnames (or host ids, updater ids) the canaries report, the rendered
    /// `=~` selector never matches the empty value, so never a series without the
    /// label; and it matches each canary's value, as the canary's series carries it.
    #[test]
    fn a_rendered_selector_never_matches_a_series_without_the_label(
        hosts in proptest::collection::vec(hostile(), 0..5),
        group in hostile(),
    ) {
        let vars = tern_core::analysis::Vars {
            group: group.clone(),
            version: "1.3.0".into(),
            start_version: "1.2.0".into(),
            canary_hosts: hosts.clone(),
            ..Default::default()
        };
        if let Ok(q) = tern_core::analysis::render(r#"x{host=~"{{canary_hosts}}"}"#, &vars) {
            let re = matcher_value(&q, "host=~\"");
            // Prometheus anchors a label regex at both ends.
            let anchored = regex::Regex::new(&format!("^(?:{re})$"))
                .unwrap_or_else(|e| panic!("{q:?} is not a regex: {e}"));
            proptest::prop_assert!(!anchored.is_match(""), "{q:?} selects series without the label");
            for h in &hosts {
                let cleaned: String = h.chars().filter(|c| !c.is_control()).collect();
                if !cleaned.is_empty() {
                    proptest::prop_assert!(anchored.is_match(&cleaned), "{q:?} misses {cleaned:?}");
                }
            }
            let other = "not-a-canary";
            if !hosts.iter().any(|h| h == other) {
                proptest::prop_assert!(!anchored.is_match(other), "{q:?} selects others");
            }
        } else {
            // Refused only when no canary has a value left.
            proptest::prop_assert!(
                hosts.iter().all(|h| h.chars().all(char::is_control)),
                "refused though a canary has a value: {hosts:?}"
            );
        }
        match tern_core::analysis::render(r#"x{group="{{group}}"}"#, &vars) {
            Ok(q) => proptest::prop_assert!(
                !matcher_value(&q, "group=\"").is_empty(),
                "{q:?} compares the group to nothing"
            ),
            Err(e) => proptest::prop_assert!(
                group.chars().all(char::is_control),
                "{group:?} refused: {e}"
            ),
        }
    }
}
