//! The one switch of a namespace's links to a new version, with rollback, that both the
//! agent's switch (`switch`) and the updater's own (`self_update`) run: the journal
//! (`status.in_progress`, saved before the first change, so that the next run reverts
//! a switch a kill interrupted; kill point `journal_written`), the host's steps before
//! the links, the links moved by renames (`links_switched`), the new version checked
//! through them, then `update::commit` (`committed`); or, on a failure, the host put
//! back on a version (links included) and that version checked, then the failure
//! recorded by `update::record_failure`: the version's when the one gone back to
//! passes, else the host's.
//!
//! What differs is a [`Release`]'s: what is done before the links move (the agent's
//! stop and DB backup), what "works" means (the agent restarted and healthy; the
//! updater's self-check), where a failure goes back to (the agent never onto a revoked
//! version) and how the version gone back to is checked.

use jiff::Timestamp;

use crate::ctx::{Ctx, save};
use crate::error::{Error, Result};
use crate::hooks::kill_point;
use crate::layout::Layout;
use crate::links;
use crate::state::{InProgress, UpdateFile};
use crate::update::{Failure, Reverted, commit, record_failure};

/// A step of a switch that failed.
pub(crate) struct Failed {
    pub(crate) reason: Error,
    /// The new version itself failed (its start, its health, its self-check), not a
    /// step of the host.
    pub(crate) version_failed: bool,
}

impl Failed {
    /// A step of the host failed (a stop, a DB backup, the links).
    pub(crate) fn host(reason: Error) -> Self {
        Self {
            reason,
            version_failed: false,
        }
    }

    /// The new version failed.
    pub(crate) fn version(reason: Error) -> Self {
        Self {
            reason,
            version_failed: true,
        }
    }
}

/// Where a failed switch puts the host back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Back<'a> {
    /// The version gone back to; `None`: there was none.
    pub(crate) version: Option<&'a str>,
    /// The DB backup this switch made goes back too (it is that version's).
    pub(crate) restore_db: bool,
    /// The links were moved (or may have been): they go back.
    pub(crate) relink: bool,
}

/// What a kind of release does around the shared steps of [`switch_links`].
pub(crate) trait Release {
    /// The host's steps after the journal and before the links move.
    fn before_links(&mut self, _ctx: &Ctx, _file: &mut UpdateFile) -> Result<(), Failed> {
        Ok(())
    }

    /// Links that could not be moved: `Ok` rolls back with that failure; `Err` is
    /// returned as it is, the journal kept for the next run's recovery.
    fn links_failed(&self, e: Error) -> Result<Failed>;

    /// Whether the new version works, now that the links point to it.
    fn check_linked(&mut self, ctx: &Ctx, file: &mut UpdateFile) -> Result<(), Failed>;

    /// What the status notes of a switch that worked, before the commit saves it.
    fn before_commit(&mut self, _ctx: &Ctx, _file: &mut UpdateFile) {}

    /// After a failed step: picks where to go back to and reverts there through
    /// [`go_back`] (or records why it cannot); returns the error to report.
    fn roll_back(&mut self, ctx: &Ctx, file: &mut UpdateFile, failed: Failed) -> Error;

    /// Puts the host back on `back` (its links through [`relink`] when `back.relink`)
    /// and checks that version.
    fn revert(&mut self, ctx: &Ctx, file: &UpdateFile, back: Back<'_>) -> Reverted;
}

/// Switches the namespace's links from `from` to `to` (unpacked and checked for links
/// already), the journal started at `started`; commits, or rolls back and errors.
pub(crate) fn switch_links(
    ctx: &Ctx,
    file: &mut UpdateFile,
    from: Option<String>,
    to: &str,
    started: Timestamp,
    release: &mut impl Release,
) -> Result<()> {
    file.status.in_progress = Some(InProgress {
        from: from.clone(),
        to: to.to_string(),
        started,
        db_backed_up: false,
    });
    save(ctx, file)?;
    kill_point("journal_written");
    let l = &ctx.layout;
    let result = match release.before_links(ctx, file) {
        Err(failed) => Err(failed),
        // `links::apply` replaces each link by a rename: what runs through them sees
        // the old version or the new one, never none.
        Ok(()) => match links::apply(l, &l.version_dir(to), ctx.overwrite) {
            Err(e) => Err(release.links_failed(e)?),
            Ok(()) => {
                kill_point("links_switched");
                release.check_linked(ctx, file)
            }
        },
    };
    match result {
        Ok(()) => {
            release.before_commit(ctx, file);
            commit(ctx, file, from, to)
        }
        Err(failed) => Err(release.roll_back(ctx, file, failed)),
    }
}

/// Reverts onto `back` after a failed switch to `to`, and records the failure (the
/// version's only when `back` then passes its check).
pub(crate) fn go_back(
    ctx: &Ctx,
    file: &mut UpdateFile,
    release: &mut impl Release,
    back: Back<'_>,
    to: &str,
    failure: Failure,
) -> Error {
    let reverted = release.revert(ctx, file, back);
    record_failure(ctx, file, back.version, to, failure, reverted)
}

/// Puts the links back on `version`, or, with no version to go back to, as `unlinked`
/// leaves them.
pub(crate) fn relink(
    l: &Layout,
    version: Option<&str>,
    unlinked: impl FnOnce(&Layout) -> Result<()>,
) -> Result<()> {
    match version {
        Some(v) => links::apply(l, &l.version_dir(v), true),
        None => unlinked(l),
    }
}
