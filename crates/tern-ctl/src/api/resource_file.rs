//! The config or version file an operator writes, read for `create`, `apply` and
//! `edit`.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

/// A resource file an operator writes: its text, parsed, and which resource it is.
pub(super) struct ResourceFile {
    pub(super) text: String,
    pub(super) doc: Value,
    /// `autoupdate_config` or `autoupdate_version`.
    pub(super) kind: &'static str,
    /// Its API path: `/v1/resources/config` or `/v1/resources/version`.
    pub(super) path: &'static str,
}

/// Reads `file` (`-`: standard input) as a config or a version.
pub(super) fn read_resource_file(file: &Path) -> anyhow::Result<ResourceFile> {
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let doc: Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not YAML or JSON", file.display()))?;
    let (kind, path) = match doc["kind"].as_str().unwrap_or_default() {
        "autoupdate_config" => ("autoupdate_config", "/v1/resources/config"),
        "autoupdate_version" => ("autoupdate_version", "/v1/resources/version"),
        kind @ ("autoupdate_agent_rollout" | "autoupdate_agent_report") => {
            bail!("{kind} is written only by ternd")
        }
        "" => bail!(
            "{}: kind: missing (autoupdate_config or autoupdate_version)",
            file.display()
        ),
        other => bail!(
            "{}: kind: {other:?} is not autoupdate_config or autoupdate_version",
            file.display()
        ),
    };
    Ok(ResourceFile {
        text,
        doc,
        kind,
        path,
    })
}
