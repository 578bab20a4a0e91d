//! Canary analysis end to end: real ternd (`--prometheus-url`), real tern-update and
//! agent processes, and a real Prometheus (Debian's `prometheus`) scraping the agents'
//! `/metrics` on loopback. A release that runs healthy but doubles its error rate is
//! held at its canary; a good one passes; Prometheus down holds the group.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use tern_core::analysis::render;
use tern_core::reconcile::analysis_vars;
use tern_e2e::prometheus::{self, Prometheus, Target};
use tern_e2e::release::Release;
use tern_e2e::{Fleet, FleetOptions, Step, render as show};

/// The canaries' error ratio on the target, against the hosts still on the start
/// version (at most 1.5 times theirs), and in absolute terms (at most 5%).
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
        start_hour: 10
        canary_count: 1
        analysis:
          interval: 1m
          passes: 2
          queries:
          - name: error_ratio_vs_start
            query: 'sum(rate(tern_demo_errors_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}[15s])) / sum(rate(tern_demo_requests_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}[15s]))'
            baseline: 'sum(rate(tern_demo_errors_total{group="{{group}}",version="{{start_version}}"}[15s])) / sum(rate(tern_demo_requests_total{group="{{group}}",version="{{start_version}}"}[15s]))'
            max_ratio: 1.5
          - name: error_ratio
            query: 'sum(rate(tern_demo_errors_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}[15s])) / sum(rate(tern_demo_requests_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}[15s]))'
            max: 0.05
"#;

/// A reconcile, and the status after it.
fn reconciled(f: &Fleet) -> Step {
    f.reconcile().unwrap();
    let status = f.status().unwrap();
    Step {
        now: status.now.to_string(),
        runs: Vec::new(),
        status,
    }
}

fn group_reason(step: &Step) -> String {
    step.status.group("prod").last_update_reason.clone()
}

fn alert(step: &Step, kind: &str) -> Option<String> {
    step.status
        .rollout
        .as_ref()?
        .status
        .alerts
        .iter()
        .find(|a| a.kind == kind)
        .map(|a| a.message.clone())
}

fn canary_names(f: &Fleet, step: &Step) -> Vec<String> {
    step.status
        .group("prod")
        .canaries
        .iter()
        .map(|c| f.host_by_updater_id(&c.updater_id).unwrap().name.clone())
        .collect()
}

/// Hosts other than `canaries` running `version`.
fn others_on(f: &Fleet, canaries: &[String], version: &str) -> usize {
    f.running()
        .iter()
        .filter(|(h, _)| !canaries.contains(h))
        .filter(|(_, v)| v.as_deref() == Some(version))
        .count()
}

/// The canaries' request counter on the target version, as the analysis reads it.
fn canary_requests(step: &Step) -> String {
    let rollout = step.status.rollout.as_ref().unwrap();
    let vars = analysis_vars(rollout, rollout.group("prod").unwrap());
    render(
        r#"tern_demo_requests_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}"#,
        &vars,
    )
    .unwrap()
}

/// Waits until Prometheus has scraped the canaries' counters `n` more times: a later
/// analysis reads a later measure.
fn wait_scrapes(f: &Fleet, step: &Step, prom: &Prometheus, n: usize) {
    let canaries = canary_requests(step);
    assert!(
        prom.wait_scrapes(&canaries, n, Duration::from_secs(60)),
        "{canaries} was not scraped {n} more times\n{}\n{}",
        prom.log_tail(),
        f.describe()
    );
}

/// Waits until Prometheus has the canaries' and the baseline's measure, as the
/// analysis will ask for them.
fn wait_for_data(f: &Fleet, step: &Step, prom: &Prometheus) {
    let rollout = step.status.rollout.as_ref().unwrap();
    let vars = analysis_vars(rollout, rollout.group("prod").unwrap());
    let config = tern_core::resource::AutoUpdateConfig::from_text(CONFIG).unwrap();
    let group = &config
        .spec
        .agents
        .as_ref()
        .unwrap()
        .schedules
        .as_ref()
        .unwrap()
        .regular[0];
    let q = &group.analysis.as_ref().unwrap().queries[0];
    for text in [&q.query, q.baseline.as_ref().unwrap()] {
        let promql = render(text, &vars).unwrap();
        assert!(
            prom.wait_value(&promql, Duration::from_secs(60)).is_some(),
            "no value for {promql}\n{}\n{}",
            prom.log_tail(),
            f.describe()
        );
    }
    // A few more scrapes, so the rate's window holds the new version alone: eight
    // samples of the canaries' counters in its 15 s, not the first two.
    let canaries = canary_requests(step);
    assert!(
        prom.wait_samples(&canaries, "15s", 8, Duration::from_secs(60)),
        "the canaries' counters never had 8 samples in 15 s\n{}\n{}",
        prom.log_tail(),
        f.describe()
    );
}

#[test]
fn analysis_passes_a_good_release_and_holds_one_that_doubles_its_errors() {
    if prometheus::binary().is_none() {
        panic!("this test needs Prometheus: apt-get install prometheus (CI installs it)");
    }
    let prom_port = prometheus::free_port().unwrap();
    let mut f = Fleet::start(FleetOptions {
        releases: vec![
            Release::good("1.0.0"),
            Release::good("1.1.0"),
            Release::erroring("1.3.0", 20),
        ],
        ternd_args: vec![
            "--prometheus-url".into(),
            format!("http://127.0.0.1:{prom_port}"),
            "--prometheus-timeout".into(),
            "5s".into(),
        ],
        ..FleetOptions::default()
    })
    .unwrap();
    f.apply(CONFIG).unwrap();
    f.set_version("1.0.0", "1.0.0", "regular").unwrap();
    f.add_hosts("prod", 4).unwrap();
    let mut targets = Vec::new();
    for h in &f.hosts {
        let port = prometheus::free_port().unwrap();
        std::fs::write(h.state.join("metrics-port"), port.to_string()).unwrap();
        targets.push(Target {
            port,
            labels: BTreeMap::from([
                ("host".into(), h.name.clone()),
                ("group".into(), h.group.clone()),
                ("updater_id".into(), h.updater_id().unwrap()),
            ]),
        });
    }
    let step = f.tick("2m").unwrap();
    assert!(step.failures().is_empty(), "{:?}", step.failures());

    // 1.1.0, a good release, while Prometheus is down: the canary runs it healthy,
    // but the analysis cannot judge, so the group holds (fail closed).
    f.new_rollout("1.1.0").unwrap();
    f.clock_set("2026-11-23T10:00:00Z").unwrap();
    f.step().unwrap();
    // The analysis is asked for at the reconcile after the one that saw the canary
    // healthy (ternd runs one every report period).
    let step = reconciled(&f);
    eprint!("{}", show::table(&f, &step.status));
    let canaries = canary_names(&f, &step);
    assert_eq!(canaries.len(), 1);
    assert!(f.wait_running(&canaries, "1.1.0").is_empty());
    assert_eq!(step.status.state_of("prod"), "canary");
    assert_eq!(group_reason(&step), "analysis_held", "{}", f.describe());
    let held = alert(&step, "analysis_held").expect("an analysis_held alert");
    assert!(held.contains("unreachable"), "{held}");
    assert_eq!(others_on(&f, &canaries, "1.0.0"), 3);

    // Prometheus is up: two passes a minute apart, then the group goes on.
    let prom = Prometheus::start(prom_port, &targets).unwrap();
    wait_for_data(&f, &step, &prom);
    let step = f.tick("1m").unwrap();
    assert_eq!(group_reason(&step), "analysis_pending", "{}", f.describe());
    let status = step.status.rollout.as_ref().unwrap().group("prod").unwrap();
    let analysis = status.analysis.as_ref().unwrap();
    assert_eq!(analysis.passes, 1, "{analysis:?}");
    assert!(
        analysis
            .message
            .contains("error_ratio_vs_start: canaries 0.0"),
        "{analysis:?}"
    );
    assert!(alert(&step, "analysis_held").is_none());
    // The second pass reads a later measure than the first.
    wait_scrapes(&f, &step, &prom, 2);
    let mut step = f.tick("1m").unwrap();
    for _ in 0..4 {
        if step.status.state_of("prod") == "done" {
            break;
        }
        step = f.tick("5m").unwrap();
    }
    eprint!("{}", show::table(&f, &step.status));
    assert_eq!(step.status.state_of("prod"), "done", "{}", f.describe());
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert!(f.wait_running(&all, "1.1.0").is_empty());

    // 1.3.0 runs and is healthy, but fails twice the requests 1.1.0 does: the
    // analysis fails at the canary, and nobody else gets it.
    f.new_rollout("1.3.0").unwrap();
    f.clock_set("2026-11-24T10:00:00Z").unwrap();
    let step = f.step().unwrap();
    let canaries = canary_names(&f, &step);
    assert!(f.wait_running(&canaries, "1.3.0").is_empty());
    wait_for_data(&f, &step, &prom);
    let mut step = f.tick("1m").unwrap();
    for _ in 0..4 {
        if group_reason(&step) == "analysis_failed" {
            break;
        }
        assert_eq!(step.status.state_of("prod"), "canary", "{}", f.describe());
        // The next analysis reads three more scrapes.
        wait_scrapes(&f, &step, &prom, 3);
        step = f.tick("1m").unwrap();
    }
    eprint!("{}", show::table(&f, &step.status));
    assert_eq!(group_reason(&step), "analysis_failed", "{}", f.describe());
    let failed = alert(&step, "analysis_failed").expect("an analysis_failed alert");
    assert!(
        failed.contains("error_ratio_vs_start: canaries 0.0") && failed.contains("vs baseline 0.0"),
        "{failed}"
    );
    // The absolute limit (5%) still passes: only the comparison caught it.
    assert!(!failed.contains("error_ratio: "), "{failed}");
    // It stays held, whatever the next minutes measure.
    for _ in 0..2 {
        let step = f.tick("5m").unwrap();
        assert_eq!(group_reason(&step), "analysis_failed");
        assert_eq!(step.status.state_of("prod"), "canary");
    }
    assert_eq!(others_on(&f, &canaries, "1.1.0"), 3);
    assert_eq!(others_on(&f, &canaries, "1.3.0"), 0);

    // The same path as any failed canary: the operator rolls the group back.
    f.agents(&["rollback", "prod"]).unwrap();
    let step = f.step().unwrap();
    assert_eq!(step.status.state_of("prod"), "rolledback");
    let all: Vec<String> = f.hosts.iter().map(|h| h.name.clone()).collect();
    assert!(f.wait_running(&all, "1.1.0").is_empty(), "{}", f.describe());
    f.check_invariant().unwrap();
}
