//! The config or version file an operator writes, read for `create`, `apply` and
//! `edit`.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

/// One resource of a file an operator writes: its text, parsed, which resource it is,
/// and what to call it in messages.
pub(super) struct ResourceFile {
    /// The document's text, after as many blank lines as precede it in the file, so
    /// that a parser's line numbers are the file's.
    pub(super) text: String,
    pub(super) doc: Value,
    /// `autoupdate_config` or `autoupdate_version`.
    pub(super) kind: &'static str,
    /// Its API path: `/v1/resources/config` or `/v1/resources/version`.
    pub(super) path: &'static str,
    /// The file, and which document of it when it holds several.
    pub(super) name: String,
}

/// The YAML documents of `text`, as `tctl create` takes them: split at `---` lines
/// (a `...` line ends one), each padded with the blank lines before it so that line
/// numbers stay the file's; documents holding only blank lines and comments are left
/// out. JSON has no such lines: one document.
fn documents(text: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let is_blank = |doc: &str| {
        doc.lines()
            .map(str::trim)
            .all(|l| l.is_empty() || l.starts_with('#'))
    };
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let marker = |m: &str| {
            line.strip_prefix(m)
                .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
        };
        if let Some(rest) = marker("---") {
            if !is_blank(&current) {
                docs.push(std::mem::take(&mut current));
            }
            // What follows the marker on its line (`--- {kind: …}`) is the document's
            // first line: its line number stays the marker's.
            current = "\n".repeat(i);
            current.push_str(rest.trim_start_matches([' ', '\t']));
        } else if marker("...").is_some() {
            if !is_blank(&current) {
                docs.push(std::mem::take(&mut current));
            }
            current = "\n".repeat(i + 1);
        } else {
            current.push_str(line);
        }
    }
    if !is_blank(&current) {
        docs.push(current);
    }
    docs
}

/// Reads `file` (`-`: standard input): each of its documents a config or a version.
pub(super) fn read_resource_file(file: &Path) -> anyhow::Result<Vec<ResourceFile>> {
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let docs = documents(&text);
    if docs.is_empty() {
        bail!(
            "{}: no resource in it (autoupdate_config or autoupdate_version)",
            file.display()
        );
    }
    let several = docs.len() > 1;
    docs.into_iter()
        .enumerate()
        .map(|(i, text)| {
            let name = if several {
                format!("{} (document {})", file.display(), i + 1)
            } else {
                file.display().to_string()
            };
            let doc: Value = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("{name}: not YAML or JSON"))?;
            let (kind, path) = match doc["kind"].as_str().unwrap_or_default() {
                "autoupdate_config" => ("autoupdate_config", "/v1/resources/config"),
                "autoupdate_version" => ("autoupdate_version", "/v1/resources/version"),
                tern_core::rfd169::KIND_PLAN => ("autoupdate_version", "/v1/resources/version"),
                kind @ ("autoupdate_agent_rollout" | "autoupdate_agent_report") => {
                    bail!("{name}: {kind} is written only by ternd")
                }
                "" => bail!("{name}: kind: missing (autoupdate_config or autoupdate_version)"),
                other => bail!(
                    "{name}: kind: {other:?} is not autoupdate_config or autoupdate_version (or the RFD 169 draft's autoupdate_agent_plan)"
                ),
            };
            // A document in the RFD 169 draft's shape is sent as the resource it
            // translates to, each step said on stderr; Tern's own shapes as written.
            let translated = if kind == "autoupdate_config" {
                tern_core::rfd169::config(&text)
                    .map(|t| (t.notes, serde_json::to_value(t.resource)))
            } else {
                tern_core::rfd169::version(&text)
                    .map(|t| (t.notes, serde_json::to_value(t.resource)))
            };
            let (text, doc) = match translated {
                Ok((notes, value)) if !notes.is_empty() => {
                    crate::plan::print_notes(file, &notes);
                    let value = value?;
                    (serde_json::to_string(&value)?, value)
                }
                // Tern's shape, valid or not: ternd (or apply's own check) says what
                // is wrong.
                Ok(_) => (text, doc),
                Err(e) if doc["kind"] == tern_core::rfd169::KIND_PLAN || is_draft_config(&doc) => {
                    bail!("{name}: invalid {kind}: {e}\nnothing applied")
                }
                Err(_) => (text, doc),
            };
            Ok(ResourceFile {
                text,
                doc,
                kind,
                path,
                name,
            })
        })
        .collect()
}

/// Whether a config document is in the RFD 169 draft's shape.
fn is_draft_config(doc: &Value) -> bool {
    ["agent_autoupdate_mode", "agent_schedules"]
        .iter()
        .any(|k| doc["spec"].get(k).is_some())
}

#[cfg(test)]
mod tests {
    use super::documents;

    #[test]
    fn a_file_splits_into_its_documents_keeping_the_lines() {
        let text = "# two resources\n---\nkind: autoupdate_config\nspec: {}\n---\n# nothing\n--- {kind: autoupdate_version}\n...\n";
        let docs = documents(text);
        assert_eq!(docs.len(), 2, "{docs:?}");
        // Each document's lines are where they are in the file.
        assert_eq!(docs[0].lines().nth(2), Some("kind: autoupdate_config"));
        assert_eq!(docs[1].lines().nth(6), Some("{kind: autoupdate_version}"));
        assert_eq!(documents("{\"kind\": \"autoupdate_config\"}").len(), 1);
        assert!(documents("# only a comment\n---\n").is_empty());
        // `----` and `---x` are not markers.
        assert_eq!(documents("a: |\n  ---x\nb: ----\n").len(), 1);
    }
}
