//! What a workload tells ternd after each pass, as a host's tern-update does, so the
//! fleet view (groups, canaries, backpressure, halts, `agents report`) counts it.

use std::collections::BTreeMap;

use tern_core::version::normalize;
use tern_core::wire::{Heartbeat, UpdaterStatus};

use crate::error::InputError;
use crate::image::ImageRef;
use crate::pods;
use crate::workload::{Kind, Mode, Workload, check_counts};

/// The heartbeat for `w`: its uid as the updater id, the group from its annotation, the
/// version its spec runs, healthy only when that spec's rollout is complete (so a
/// canary passes only once every pod is Ready on the target), and the last rollback.
/// `updater_version` is the controller's own version.
pub fn heartbeat(w: &Workload, updater_version: &str) -> Result<Heartbeat, InputError> {
    let id = w.updater_id()?.to_string();
    let settings = w.settings()?;
    let counts = check_counts(&w.status)?;
    let image = ImageRef::parse("the agent container's image", &w.image)?;
    let version = image.tag.as_deref().map(normalize).unwrap_or_default();
    let updater_status = if w.skip_reconcile()? || settings.mode == Mode::ReportOnly {
        UpdaterStatus::Disabled
    } else {
        UpdaterStatus::Enabled
    };
    // Rolled back: the last failure is a version other than the one running now.
    let failed = settings
        .last_failure
        .as_ref()
        .filter(|f| f.version != version)
        .map(|f| f.version.clone());
    let kind = match w.kind {
        Kind::Deployment => "deployment",
        Kind::StatefulSet { .. } => "statefulset",
    };
    let labels = BTreeMap::from([
        ("kubernetes.kind".to_string(), kind.to_string()),
        (
            "kubernetes.namespace".to_string(),
            crate::image::shorten(&w.namespace),
        ),
    ]);
    let hostname: String = w
        .display_name()
        .chars()
        .filter(|c| !c.is_control())
        .take(253)
        .collect();
    Ok(Heartbeat {
        updater_id: id.clone(),
        host_id: id,
        hostname,
        group: settings.group,
        version,
        updater_version: Some(updater_version.to_string()),
        updater_status,
        rollback: failed.is_some(),
        failed_version: failed,
        healthy: Some(counts.desired > 0 && pods::rollout_complete(&w.kind, &w.status, &counts)),
        follows: if w
            .annotations
            .contains_key(crate::workload::annotation::CHANNEL)
        {
            tern_core::wire::Follows::Channel
        } else {
            tern_core::wire::Follows::Rollout
        },
        install_failure: None,
        // A workload that failed is marked so in its annotations (`last_failure`).
        update_failure: None,
        labels,
        arch: String::new(),
        os: String::new(),
        os_version: String::new(),
        fips: false,
        installers: Vec::new(),
        install_result: None,
        // Workloads pin image digests, not a release root: their trust is not stated
        // (`ternd start --require-trust` serves hosts of tern-update only).
        trust: None,
        // The agent's own product.
        product: String::new(),
    })
}
