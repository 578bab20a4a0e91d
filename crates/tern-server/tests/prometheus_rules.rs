//! The Prometheus alerting rules shipped in deploy/prometheus, against the real ternd
//! and, when it is installed, the real promtool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// The shipped Prometheus rules (deploy/prometheus) are valid and pass their unit
/// test under the real promtool, and every kind they alert on is a series ternd
/// exports on /metrics.
#[test]
fn the_shipped_prometheus_rules_match_the_metrics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let rules = std::fs::read_to_string(dir.join("tern-alerts.rules.yml")).unwrap();
    let kinds: Vec<&str> = rules
        .lines()
        .filter(|l| l.trim_start().starts_with("expr:"))
        .filter_map(|l| l.split("tern_alerts_active{kind=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(kinds.len() >= 7, "{kinds:?}");
    let tmp = tempfile::tempdir().unwrap();
    let t = common::Ternd::dev(&tmp.path().join("data"));
    let (_, _, metrics) = t.raw("GET", "/metrics", None, None);
    for kind in &kinds {
        assert!(
            metrics.contains(&format!("tern_alerts_active{{kind=\"{kind}\"}} 0")),
            "the rules alert on {kind}, which /metrics does not export"
        );
    }
    match std::process::Command::new("promtool")
        .current_dir(&dir)
        .args(["check", "rules", "tern-alerts.rules.yml"])
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            let test = std::process::Command::new("promtool")
                .current_dir(&dir)
                .args(["test", "rules", "tern-alerts.test.yml"])
                .output()
                .unwrap();
            assert!(
                test.status.success(),
                "{}{}",
                String::from_utf8_lossy(&test.stdout),
                String::from_utf8_lossy(&test.stderr)
            );
        }
        // The rules' text is still checked against /metrics above.
        Err(e) => eprintln!("promtool not found ({e}): the rules were not checked by it"),
    }
}
