//! One product's rollout at a glance (`GET /v1/products`, `ternctl products`, the line
//! per product of `agents status`, the dashboard's products), from its status.

use crate::domain::api::{ProductGroup, ProductSummary, StatusResponse};

/// `status` (what `agents status` answers for the product) in brief.
pub fn product_summary(
    name: &str,
    builtin: bool,
    own_config: bool,
    status: &StatusResponse,
) -> ProductSummary {
    let rollout = status.rollout.as_ref();
    ProductSummary {
        name: name.to_string(),
        builtin,
        own_config,
        mode: status.modes.mode,
        why_stopped: status.modes.why_stopped.clone(),
        start_version: rollout.map(|r| r.spec.start_version.to_string()),
        target_version: rollout.map(|r| r.spec.target_version.to_string()),
        state: rollout.map(|r| r.status.state),
        no_rollout_reason: status.no_rollout_reason.clone(),
        groups: status
            .groups
            .iter()
            .map(|g| ProductGroup {
                name: g.name.clone(),
                state: g.state,
                present: g.present,
                up_to_date: g.up_to_date,
                failed: g.failed,
            })
            .collect(),
        present: status.present,
        up_to_date: status.up_to_date,
        failed: status.failed,
        alerts: status.alerts.iter().map(|a| a.kind.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::resource::{AutoUpdateConfig, AutoUpdateVersion, GroupState};

    #[test]
    fn a_summary_says_the_rollout_its_groups_and_why_it_stops() {
        let config = AutoUpdateConfig::from_text(&crate::fixtures::dev_staging_prod(0)).unwrap();
        let version =
            AutoUpdateVersion::from_text(&crate::fixtures::version("1.0.0", "1.1.0", "regular"))
                .unwrap();
        let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
        let outcome = crate::domain::reconcile::reconcile_reports(
            now,
            crate::domain::reconcile::Resources {
                config: Some(&config),
                version: Some(&version),
                rollout: None,
                frozen: false,
            },
            &[],
            jiff::SignedDuration::from_secs(60),
            &mut <rand_chacha::ChaCha8Rng as rand_core::SeedableRng>::seed_from_u64(1),
        );
        let crate::domain::reconcile::Outcome::Rollout { rollout, .. } = outcome else {
            panic!("no rollout");
        };
        let modes = super::super::modes(Some(&config), Some(&version), None);
        let status = super::super::status(
            now,
            modes,
            Some(&config),
            Some(*rollout),
            true,
            &[],
            jiff::SignedDuration::from_secs(60),
        );
        let s = product_summary("sidecar", false, false, &status);
        assert_eq!(s.name, "sidecar");
        assert!(!s.builtin && !s.own_config);
        assert_eq!(s.start_version.as_deref(), Some("1.0.0"));
        assert_eq!(s.target_version.as_deref(), Some("1.1.0"));
        let names: Vec<&str> = s.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["dev", "staging", "prod"]);
        assert!(s.groups.iter().all(|g| g.state == GroupState::Unstarted));

        let none = super::super::status(
            now,
            super::super::modes(None, None, None),
            None,
            None,
            false,
            &[],
            jiff::SignedDuration::from_secs(60),
        );
        let s = product_summary("updater", true, false, &none);
        assert!(s.state.is_none() && s.groups.is_empty());
        assert!(
            s.no_rollout_reason
                .unwrap()
                .contains("no autoupdate_version")
        );
        assert!(s.why_stopped.is_some(), "a mode set nowhere is disabled");
    }
}
