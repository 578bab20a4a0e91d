//! `apply -f FILE` and `edit config|version`: writing the config or the version without
//! handling revisions by hand. Both read the current revision and write with it, so
//! ternd's compare-and-swap still refuses a write over a change made meanwhile: `apply`
//! (which means "make it so") then reads again and retries; `edit` (whose user decided
//! on what they saw) stops and says so.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use tern_core::resource::{AutoUpdateConfig, AutoUpdateVersion};

use super::client::{ApiFailure, Client};
use super::output::print_written;
use super::resource_file::{ResourceFile, read_resource_file};
use crate::global::Global;

/// How many times `apply` reads and writes before giving up on a resource that keeps
/// changing under it.
pub const APPLY_ATTEMPTS: u32 = 5;

/// The HTTP status of a failed API call, if ternd answered.
fn status_of(err: &anyhow::Error) -> Option<u16> {
    err.downcast_ref::<ApiFailure>().map(|f| f.status)
}

/// One attempt of a read-then-write: done, or lost to a concurrent write.
pub enum Attempt<T> {
    Done(T),
    Conflict(anyhow::Error),
}

/// Runs `attempt` until it is done, at most `attempts` times; fails with what `kind`
/// is and the last conflict when every attempt lost.
pub fn retry_conflicts<T>(
    attempts: u32,
    kind: &str,
    mut attempt: impl FnMut() -> anyhow::Result<Attempt<T>>,
) -> anyhow::Result<T> {
    let mut last = None;
    for _ in 0..attempts {
        match attempt()? {
            Attempt::Done(v) => return Ok(v),
            Attempt::Conflict(e) => last = Some(e),
        }
    }
    let last = last.map(|e| format!(" (last: {e:#})")).unwrap_or_default();
    bail!(
        "the {kind} changed under every one of {attempts} attempts to write it: someone else keeps writing it; nothing applied, try again later{last}"
    )
}

/// `doc` without `metadata.revision`: what two versions of a resource are compared on.
fn without_revision(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("revision");
    }
    doc
}

/// Sets `metadata.revision` of a resource document.
fn set_revision(kind: &str, doc: &mut Value, revision: Value) -> anyhow::Result<()> {
    let Some(fields) = doc.as_object_mut() else {
        bail!("the {kind} is not a mapping of fields");
    };
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if metadata.is_null() {
        *metadata = Value::Object(serde_json::Map::new());
    }
    let Some(metadata) = metadata.as_object_mut() else {
        bail!("metadata: the {kind}'s metadata is not a mapping of fields");
    };
    metadata.insert("revision".to_string(), revision);
    Ok(())
}

/// The current resource at `path`, or `None` when there is none.
fn read_current(c: &Client, path: &str) -> anyhow::Result<Option<Value>> {
    match c.get::<Value>(path) {
        Ok(v) => Ok(Some(v)),
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `metadata.revision` of a resource ternd sent.
fn revision_of(kind: &str, current: &Value) -> anyhow::Result<Value> {
    let rev = &current["metadata"]["revision"];
    if rev.is_string() || rev.is_number() {
        Ok(rev.clone())
    } else {
        bail!("ternd sent the {kind} without metadata.revision")
    }
}

/// The group names of a config document (the regular schedule, as ternd reads it);
/// `None` when `doc` is not a valid config.
fn config_groups(text: &str) -> Option<Vec<String>> {
    let config = AutoUpdateConfig::from_text(text).ok()?;
    Some(config.groups().into_iter().map(|g| g.name).collect())
}

/// Checks `text` as ternd will, before anything is written: a mistake is reported
/// with its YAML line (ternd would see the JSON apply sends, without the file's lines).
fn check_locally(name: &str, kind: &str, text: &str) -> anyhow::Result<()> {
    let checked = match kind {
        "autoupdate_config" => AutoUpdateConfig::from_text(text).map(drop),
        _ => AutoUpdateVersion::from_text(text).map(drop),
    };
    checked.map_err(|e| anyhow!("{name}: invalid {kind}: {e}\nnothing applied"))
}

/// `apply -f FILE`: every resource of the file checked first (a mistake anywhere
/// writes nothing), then each applied in turn.
pub fn apply(file: &Path, yes: bool, g: &Global) -> anyhow::Result<ExitCode> {
    let resources = read_resource_file(file)?;
    for r in &resources {
        check_locally(&r.name, r.kind, &r.text)?;
    }
    let c = g.client()?;
    for r in &resources {
        apply_one(r, yes, g, &c)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn apply_one(resource: &ResourceFile, yes: bool, g: &Global, c: &Client) -> anyhow::Result<()> {
    let (kind, name) = (resource.kind, &resource.name);
    let path = &g.scoped(resource.path)?;
    let new_groups = if kind == "autoupdate_config" {
        config_groups(&resource.text)
    } else {
        None
    };
    // Whatever revision the file carries, apply writes over the current one.
    let wanted = without_revision(&resource.doc);
    let (verb, written) = retry_conflicts(APPLY_ATTEMPTS, kind, || {
        let Some(current) = read_current(c, path)? else {
            let body = serde_json::to_string(&wanted)?;
            return match c.send_text::<Value>("POST", path, &body) {
                Ok(v) => Ok(Attempt::Done(("created", v))),
                // Created by someone else since it was read: read it again.
                Err(e) if status_of(&e) == Some(409) => Ok(Attempt::Conflict(e)),
                Err(e) => Err(e),
            };
        };
        if without_revision(&current) == wanted {
            return Ok(Attempt::Done(("unchanged", current)));
        }
        if let (Some(new), Some(old)) = (
            &new_groups,
            config_groups(&serde_json::to_string(&current)?),
        ) && !yes
        {
            let removed: Vec<&str> = old
                .iter()
                .filter(|g| !new.contains(g))
                .map(String::as_str)
                .collect();
            if !removed.is_empty() {
                bail!(
                    "{name}: this config removes the groups {} (now: {}; after: {}). Their hosts then follow the last group, the catch-all, and a rollout in progress loses them. Nothing applied; run again with --yes to apply it",
                    removed.join(", "),
                    old.join(", "),
                    new.join(", ")
                );
            }
        }
        let mut doc = wanted.clone();
        set_revision(kind, &mut doc, revision_of(kind, &current)?)?;
        match c.send_text::<Value>("PUT", path, &serde_json::to_string(&doc)?) {
            Ok(v) => Ok(Attempt::Done(("updated", v))),
            // Changed (or deleted) since it was read: read it again.
            Err(e) if status_of(&e) == Some(409) => Ok(Attempt::Conflict(e)),
            Err(e) => Err(e),
        }
    })?;
    print_written(g.output(), kind, verb, written)?;
    Ok(())
}

/// The editor to run: `$EDITOR`, else `$VISUAL`, else `vi`.
fn editor() -> String {
    ["EDITOR", "VISUAL"]
        .into_iter()
        .filter_map(|var| std::env::var(var).ok())
        .map(|e| e.trim().to_string())
        .find(|e| !e.is_empty())
        .unwrap_or_else(|| "vi".to_string())
}

/// Runs the editor on `file` through the shell, as git does, so that an editor given
/// with arguments (`code --wait`, `emacsclient -t`) works.
fn run_editor(file: &Path) -> anyhow::Result<()> {
    let editor = editor();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg(&editor)
        .arg(file)
        .status()
        .with_context(|| format!("cannot run the editor {editor:?} (set EDITOR)"))?;
    if !status.success() {
        bail!("the editor {editor:?} failed ({status}): nothing applied");
    }
    Ok(())
}

/// Whether an edited file holds nothing but blank lines and comments.
fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
}

pub fn edit(kind: &'static str, path: &'static str, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let path = &g.scoped(path)?;
    let Some(current) = read_current(&c, path)? else {
        bail!("no {kind} exists to edit: create one with `ternctl apply -f FILE`");
    };
    let revision = revision_of(kind, &current)?;
    let shown_revision = revision
        .as_str()
        .map_or_else(|| revision.to_string(), str::to_string);
    let mut file = tempfile::Builder::new()
        .prefix(&format!("ternctl-edit-{kind}-"))
        .suffix(".yaml")
        .tempfile()
        .context("cannot create a temporary file to edit")?;
    write!(
        file,
        "# The {kind} at revision {shown_revision}. Save and quit to apply your changes;\n\
         # leave it unchanged to change nothing, empty it to cancel.\n{}",
        serde_yaml_ng::to_string(&current)?
    )
    .and_then(|()| file.flush())
    .with_context(|| format!("cannot write {}", file.path().display()))?;
    run_editor(file.path())?;
    let text = std::fs::read_to_string(file.path())
        .with_context(|| format!("cannot read {}", file.path().display()))?;
    if is_blank(&text) {
        println!("edit cancelled (empty file): nothing applied");
        return Ok(ExitCode::SUCCESS);
    }
    // From here on a failure keeps the edited file, so the work is not lost.
    let keep = |file: tempfile::NamedTempFile| -> anyhow::Result<PathBuf> {
        file.into_temp_path()
            .keep()
            .map_err(|e| anyhow!("cannot keep the edited file: {e}"))
    };
    let mut doc: Value = match serde_yaml_ng::from_str(&text) {
        Ok(doc) => doc,
        Err(e) => {
            let kept = keep(file)?;
            bail!(
                "the edited {kind} is not valid YAML: {e}\nnothing applied; your edit is kept in {}",
                kept.display()
            );
        }
    };
    if without_revision(&doc) == without_revision(&current) {
        println!("no changes");
        return Ok(ExitCode::SUCCESS);
    }
    if doc.get("kind") != current.get("kind") {
        let kept = keep(file)?;
        bail!(
            "kind: edit a {kind} as a {kind}, not as {}\nnothing applied; your edit is kept in {}",
            doc.get("kind").unwrap_or(&Value::Null),
            kept.display()
        );
    }
    // The revision read, whatever the edit did to it: ternd refuses the write if the
    // resource changed since.
    if let Err(e) = set_revision(kind, &mut doc, revision) {
        let kept = keep(file)?;
        return Err(e.context(format!(
            "nothing applied; your edit is kept in {}",
            kept.display()
        )));
    }
    match c.send_text::<Value>("PUT", path, &serde_json::to_string(&doc)?) {
        Ok(v) => {
            print_written(g.output(), kind, "updated", v)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let kept = keep(file)?;
            if status_of(&e) == Some(409) {
                bail!(
                    "the {kind} changed since it was read at revision {shown_revision}: nothing written, the other change stands\n\
                     your edit is kept in {}; run `ternctl edit` again to edit the current {kind}",
                    kept.display()
                );
            }
            Err(e.context(format!(
                "nothing applied; your edit is kept in {}",
                kept.display()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_retried_then_given_up_with_the_reason() {
        let mut calls = 0;
        let v = retry_conflicts(5, "autoupdate_config", || {
            calls += 1;
            Ok(if calls < 3 {
                Attempt::Conflict(anyhow!("changed"))
            } else {
                Attempt::Done(calls)
            })
        })
        .unwrap();
        assert_eq!(v, 3);

        let mut calls = 0;
        let err = retry_conflicts::<()>(5, "autoupdate_config", || {
            calls += 1;
            Ok(Attempt::Conflict(anyhow!("changed since revision {calls}")))
        })
        .unwrap_err()
        .to_string();
        assert_eq!(calls, 5);
        assert!(
            err.contains("autoupdate_config changed under every one of 5 attempts")
                && err.contains("changed since revision 5"),
            "{err}"
        );

        // Other errors end at once.
        let mut calls = 0;
        let err = retry_conflicts::<()>(5, "autoupdate_config", || {
            calls += 1;
            Err(anyhow!("forbidden"))
        });
        assert!(err.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn blank_means_only_comments_and_whitespace() {
        assert!(is_blank("# a comment\n\n   \n"));
        assert!(!is_blank("# a comment\nkind: autoupdate_config\n"));
    }
}
