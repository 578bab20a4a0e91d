//! `directives`: in-process, one pass of ternd's directive loop over a replica's
//! inventory (`Inventory::directive_pass`, the code ternd runs) of 100k labelled hosts,
//! and one plan (the same pass evaluating a draft, no triggers), against the same pass
//! with no directive: its time and the bytes it allocates beyond the baseline's, per
//! host (peak during the pass, and what stays after it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::json;
use tern_core::directive::pass::Elsewhere;
use tern_core::directive::resource::{
    ControlSpec, DirectiveSpec, Installer, VersionControlConfig, VersionDirective,
};
use tern_server::Inventory;
use tern_server::bench::{PassInput, ReleaseTo};

use crate::alloc;
use crate::{Opts, fleet, median, procs};

const DIRECTIVE: &str = r#"kind: version_directive
version: v1
metadata: {name: bench}
spec:
  directives:
    - name: canary-zone
      selectors: [{labels: {env: prod, zone: eu-1}, arch: [amd64]}]
      targets: [{version: 1.2.0, arch: amd64}]
      installers: [script]
    - name: prod
      selectors: [{labels: {env: prod}}]
      targets: [{version: 1.2.0}, {version: 1.1.5}]
      installers: [script]
    - name: staging
      selectors: [{labels: {env: staging}, current_version: ">=1.0.0, <2.0.0"}]
      targets: [{version: 1.2.0}]
      installers: [script]
"#;

const SCRIPT: &str = "kind: installer\nversion: v1\nmetadata: {name: script}\nspec:\n  type: local-script\n  local_script: {env: {V: \"{target.version}\"}, script: 'echo \"$V\"'}\n";

const CONTROL: &str = "kind: version_control_config\nversion: v1\nmetadata: {name: version-control-config}\nspec: {enabled: true, rolling_install: {rate: 10/m, fault_limit: 5%, churn_limit: 5%}}\n";

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let n: u64 = if opts.quick { 10_000 } else { 100_000 };
    let reps = if opts.quick { 5 } else { 21 };
    let t0: Timestamp = "2026-11-23T11:00:00Z".parse()?;
    let now: Timestamp = "2026-11-23T12:00:00Z".parse()?;
    let directive = VersionDirective::from_text(DIRECTIVE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let installers: BTreeMap<String, Installer> = [(
        "script".to_string(),
        Installer::from_text(SCRIPT).map_err(|e| anyhow::anyhow!("{e}"))?,
    )]
    .into();
    let control: ControlSpec = VersionControlConfig::from_text(CONTROL)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .spec;
    let timings = control.timings.state_timings();
    let empty = DirectiveSpec::default();
    let elsewhere = Elsewhere::default();

    let mut inv = Inventory::default();
    let at = Instant::now();
    let live0 = alloc::live();
    for i in 0..n {
        let mut hb = fleet::heartbeat(i, if i % 3 == 0 { "1.2.0" } else { "1.1.0" });
        hb.labels = [
            (
                "env".to_string(),
                if i % 4 == 0 { "staging" } else { "prod" }.to_string(),
            ),
            ("zone".to_string(), format!("eu-{}", i % 3)),
            ("team".to_string(), format!("t{}", i % 17)),
        ]
        .into();
        hb.arch = if i % 5 == 0 { "arm64" } else { "amd64" }.into();
        hb.os = "linux".into();
        hb.installers = vec!["tern-update".into(), "local-script".into()];
        inv.heartbeat(&hb, t0, at)?;
    }
    let inventory_bytes = alloc::live().saturating_sub(live0) as f64 / n as f64;

    let input = |spec: &'static DirectiveSpec, record: bool, budget: u64| -> PassInput<'static> {
        PassInput {
            spec,
            installers: Box::leak(Box::new(installers.clone())),
            control: Box::leak(Box::new(control.clone())),
            timings,
            now,
            budget,
            elsewhere: Box::leak(Box::new(elsewhere.clone())),
            record_states: record,
            dry_run: None,
            notices: false,
            // The pass as ternd runs it; no rollout here, so nothing is released.
            release_to: record.then_some(ReleaseTo {
                fleet: tern_core::gate::Fleet::new(None, now),
            }),
        }
    };
    let empty: &'static DirectiveSpec = Box::leak(Box::new(empty));
    let spec: &'static DirectiveSpec = Box::leak(Box::new(directive.spec));
    let base_in = input(empty, true, 10);
    let pass_in = input(spec, true, 10);
    let plan_in = input(spec, false, 0);

    // One pass of each first, so the states are in place and nothing measured is a
    // first-time cost.
    let _ = inv.directive_pass(&base_in);
    let _ = inv.directive_pass(&pass_in);
    let mut measure = |which: &PassInput<'_>| {
        let mut times = Vec::new();
        let mut peak = 0usize;
        let mut kept = 0usize;
        let mut governed = 0u64;
        for _ in 0..reps {
            let before = alloc::live();
            alloc::reset_peak();
            let t = Instant::now();
            let out = inv.directive_pass(which);
            times.push(t.elapsed());
            peak = peak.max(alloc::peak().saturating_sub(before));
            governed = out.evaluation.governed;
            drop(out);
            kept = kept.max(alloc::live().saturating_sub(before));
        }
        let ms: Vec<f64> = times
            .iter()
            .map(|d: &Duration| d.as_secs_f64() * 1000.0)
            .collect();
        (median(ms), peak, kept, governed)
    };
    let (base_ms, base_peak, base_kept, _) = measure(&base_in);
    let (pass_ms, pass_peak, pass_kept, governed) = measure(&pass_in);
    let (plan_ms, plan_peak, _, _) = measure(&plan_in);
    let per_host = |b: usize| b as f64 / n as f64;
    let extra_peak = per_host(pass_peak.saturating_sub(base_peak));
    let extra_kept = per_host(pass_kept.saturating_sub(base_kept));
    let extra_plan_peak = per_host(plan_peak.saturating_sub(base_peak));
    eprintln!(
        "{n} hosts ({governed} governed): pass {pass_ms:.2} ms, plan {plan_ms:.2} ms, no directive {base_ms:.2} ms (ratio {:.2}); \
         extra bytes per host: peak {extra_peak:.1} (plan {extra_plan_peak:.1}), kept {extra_kept:.1}; inventory {inventory_bytes:.0} B/host",
        pass_ms / base_ms
    );
    Ok(json!({
        "bench": "directives",
        "quick": opts.quick,
        "hosts": n,
        "governed": governed,
        "pass_ms": pass_ms,
        "plan_ms": plan_ms,
        "no_directive_ms": base_ms,
        "ratio_to_no_directive": ((pass_ms / base_ms) * 100.0).round() / 100.0,
        "pass_target_ms": 50,
        "pass_met": pass_ms < 50.0,
        "extra_peak_bytes_per_host": (extra_peak * 10.0).round() / 10.0,
        "extra_plan_peak_bytes_per_host": (extra_plan_peak * 10.0).round() / 10.0,
        "extra_kept_bytes_per_host": (extra_kept * 10.0).round() / 10.0,
        "extra_bytes_target": 64,
        "extra_bytes_met": extra_peak <= 64.0 && extra_kept <= 64.0,
        "inventory_bytes_per_host": inventory_bytes.round(),
        "loadavg": procs::loadavg(),
    }))
}
