//! Version directives for the tests (RFD 90): an installer whose script records each
//! version it is run for, a `version_control_config`, and a draft made active the way
//! an operator does it (`ternctl version-control draft`, `plan`, `apply`).

use std::path::Path;

use anyhow::Context;

use crate::Fleet;

/// A `local-script` installer named `record`: it appends the target version to `log`,
/// else to `script-runs.log` two directories above the script (the host's root).
pub fn record_installer(log: Option<&Path>) -> String {
    let log = log.map_or_else(
        || "\"$(dirname \"$0\")/../../script-runs.log\"".to_string(),
        |p| format!("'{}'", p.display()),
    );
    format!(
        r#"kind: installer
version: v1
metadata: {{name: record}}
spec:
  type: local-script
  local_script:
    env: {{VERSION: "{{target.version}}"}}
    shell: /bin/sh
    script: |
      echo "$VERSION" >> {log}
    timeout: 1m
"#
    )
}

/// The versions a [`record_installer`] script ran for, in order, from its log.
pub fn recorded(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A `version_control_config`, enabled, triggering at most `rate` installs (`10/m`);
/// more than `fault_limit` faults or one churn pauses; an attempt counts as recent for
/// `recent`. offline_after (2m) is shorter than the three missed heartbeats after which
/// a replica forgets a host.
pub fn control_config(rate: &str, fault_limit: &str, recent: &str) -> String {
    format!(
        r#"kind: version_control_config
version: v1
metadata: {{name: version-control-config}}
spec:
  enabled: true
  rolling_install: {{rate: {rate}, fault_limit: "{fault_limit}", churn_limit: "1"}}
  promotion: {{strategy: manual, approvals: 1, pending_ttl: 1h}}
  timings: {{trigger_timeout: 5m, recent: {recent}, offline_after: 2m, settle: 1m}}
"#
    )
}

/// Stores `installer` and `config`, then makes `draft` (named `name`) the active
/// directive as an operator would: `draft -f`, `plan --draft` (which, under the dev
/// clock, waits for a pass only `dev directives` runs: ternctl exits 3 naming the
/// plan's nonce), one pass, `apply NONCE`.
pub fn activate(
    f: &Fleet,
    installer: &str,
    config: &str,
    name: &str,
    draft: &str,
) -> anyhow::Result<()> {
    let dir = f.path();
    let file = |file: &str, text: &str| -> anyhow::Result<String> {
        let p = dir.join(file);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    };
    let installer = file("installer.yaml", installer)?;
    let config = file("vc-config.yaml", config)?;
    let draft = file(&format!("draft-{name}.yaml"), draft)?;
    f.ctl
        .run(&["version-control", "installer", "-f", &installer])?;
    f.ctl.run(&["version-control", "config", "-f", &config])?;
    f.ctl.run(&["version-control", "draft", "-f", &draft])?;
    let waited = f
        .ctl
        .run(&["version-control", "plan", "--draft", name, "--wait", "1s"]);
    let text = match waited {
        Ok(out) => {
            anyhow::bail!("the plan was evaluated without a pass under the dev clock: {out}")
        }
        Err(e) => format!("{e:#}"),
    };
    let nonce = text
        .split("(nonce ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .with_context(|| format!("no nonce in ternctl's answer: {text}"))?
        .to_string();
    f.ctl.json(&["dev", "directives"])?;
    f.ctl.run(&["version-control", "apply", &nonce])?;
    Ok(())
}
