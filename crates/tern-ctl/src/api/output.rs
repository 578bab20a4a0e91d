//! How a command prints what ternd answered: JSON or YAML as `-o` asks, else nothing
//! (the caller renders text); and a write's answer.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tern_core::resource::Metadata;

use crate::global::Output;

/// `v` as JSON or YAML text; `None` in text mode (the caller renders).
pub(super) fn structured_text<T: Serialize>(
    output: Output,
    v: &T,
) -> anyhow::Result<Option<String>> {
    Ok(match output {
        Output::Json => Some(serde_json::to_string_pretty(v)? + "\n"),
        Output::Yaml => Some(serde_yaml_ng::to_string(v)?),
        Output::Text => None,
    })
}

/// Prints `v` as JSON or YAML; returns false in text mode (the caller renders).
pub(super) fn structured<T: Serialize>(output: Output, v: &T) -> anyhow::Result<bool> {
    match structured_text(output, v)? {
        Some(text) => {
            print!("{text}");
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Prints what ternd answered a write of `kind` with: the resource in JSON/YAML, or
/// `kind verb (revision N)`.
pub(super) fn print_written(
    output: Output,
    kind: &str,
    verb: &str,
    v: Value,
) -> anyhow::Result<()> {
    if !structured(output, &v)? {
        let head: StoredHead = serde_json::from_value(v)
            .with_context(|| format!("ternd's answer is not an {kind}"))?;
        println!(
            "{kind} {verb} (revision {})",
            head.metadata.revision.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

/// What ternctl reads of a resource ternd answers a write with.
#[derive(Deserialize)]
struct StoredHead {
    metadata: Metadata,
}
