//! Removes what a namespace no longer needs: every version but the active one (and its
//! backup with `keep` ≥ 2), and the leftovers of killed runs.

use crate::ctx::{Ctx, save};
use crate::decide;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::hooks::kill_point;
use crate::log;
use crate::state::UpdateFile;

/// Removes every version but active (and backup with keep ≥ 2), and leftovers of killed runs.
pub(crate) fn cleanup(ctx: &Ctx, file: &mut UpdateFile) -> Result<()> {
    let Some(active) = file.status.active.clone() else {
        return Ok(());
    };
    let versions = ctx.layout.versions_dir();
    let mut installed = Vec::new();
    let Ok(rd) = std::fs::read_dir(&versions) else {
        return Ok(());
    };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if fsutil::is_temp_name(&name) {
            let p = entry.path();
            let _ = if p.is_dir() {
                fsutil::remove_dir_all_if_exists(&p)
            } else {
                std::fs::remove_file(&p).map_err(|e| Error::io("remove", e))
            };
        } else if entry.path().is_dir() {
            installed.push(name);
        }
    }
    if file.spec.keep < 2 && file.status.backup.is_some() {
        file.status.backup = None;
        save(ctx, file)?;
    }
    for v in decide::to_remove(
        &installed,
        &active,
        file.status.backup.as_deref(),
        file.spec.keep,
    ) {
        log::info(format!("removing version {v}"));
        fsutil::remove_dir_durable(&ctx.layout.version_dir(&v))?;
    }
    kill_point("cleaned");
    Ok(())
}
