//! The symlinks that make a version "the" version: executables in the link dir and the
//! unit file in the unit dir. `apply` makes the links match one version directory; it is
//! idempotent, so reverting is applying the old version again.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use crate::error::LinkConflict as Conflict;
use crate::error::{Error, IoContext, Result};
use crate::fsutil;
use crate::layout::Layout;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) link: PathBuf,
    pub(crate) target: PathBuf,
}

/// What is at a link's path now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Existing {
    Missing,
    Symlink(PathBuf),
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Create,
    Keep,
    Replace,
    Conflict(Conflict),
}

/// Decides what to do with one link. We replace our own links (this namespace or the
/// package install); anything else only with `overwrite`.
pub(crate) fn decide(
    existing: &Existing,
    want: &Path,
    ours: &dyn Fn(&Path) -> bool,
    overwrite: bool,
) -> Action {
    match existing {
        Existing::Missing => Action::Create,
        Existing::Symlink(t) if t == want => Action::Keep,
        Existing::Symlink(t) if ours(t) || overwrite => Action::Replace,
        Existing::Symlink(t) => Action::Conflict(Conflict::ForeignSymlink(t.clone())),
        Existing::Other if overwrite => Action::Replace,
        Existing::Other => Action::Conflict(Conflict::ForeignFile),
    }
}

fn existing(path: &Path) -> Existing {
    match fs::symlink_metadata(path) {
        Err(_) => Existing::Missing,
        Ok(m) if m.file_type().is_symlink() => fs::read_link(path)
            .map(Existing::Symlink)
            .unwrap_or(Existing::Other),
        Ok(_) => Existing::Other,
    }
}

fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Executables of a version: `bin/*`, or the top level when there is no `bin/`.
pub(crate) fn executables(version_dir: &Path) -> Result<Vec<PathBuf>> {
    let bin = version_dir.join("bin");
    let dir = if bin.is_dir() {
        bin
    } else {
        version_dir.to_path_buf()
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).ctx("list", &dir)? {
        let entry = entry.ctx("list", &dir)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "sha256" {
            continue;
        }
        if is_executable_file(&entry.path()) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The agent's unit file: `lib/systemd/system/*.service` or `examples/systemd/*.service`.
pub(crate) fn unit_file(version_dir: &Path) -> Option<PathBuf> {
    for sub in ["lib/systemd/system", "examples/systemd"] {
        let dir = version_dir.join(sub);
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        let mut units: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "service"))
            .collect();
        units.sort();
        if let Some(u) = units.into_iter().next() {
            return Some(u);
        }
    }
    None
}

/// The links a version directory wants.
pub(crate) fn desired(layout: &Layout, version_dir: &Path) -> Result<Vec<Link>> {
    let mut out = Vec::new();
    for exe in executables(version_dir)? {
        if let Some(name) = exe.file_name() {
            out.push(Link {
                link: layout.link_dir.join(name),
                target: exe.clone(),
            });
        }
    }
    if let Some(unit) = unit_file(version_dir)
        && let Some(name) = unit.file_name()
    {
        out.push(Link {
            link: layout.unit_dir.join(name),
            target: unit.clone(),
        });
    }
    if out.is_empty() {
        return Err(Error::NoExecutables {
            dir: version_dir.to_path_buf(),
        });
    }
    Ok(out)
}

/// Links in the link and unit dirs that point into `owned`.
fn links_into(layout: &Layout, owned: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    links_in(&[&layout.link_dir, &layout.unit_dir], owned)
}

/// Links in `dirs` that point into `owned`.
fn links_in(dirs: &[&Path], owned: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(rd) = fs::read_dir(dir) else { continue };
        for entry in rd.flatten() {
            let p = entry.path();
            if let Existing::Symlink(t) = existing(&p)
                && owned(&t)
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Checks that every link of `version_dir` can be made, without changing anything.
pub(crate) fn check(layout: &Layout, version_dir: &Path, overwrite: bool) -> Result<Vec<Link>> {
    let want = desired(layout, version_dir)?;
    let ours = |p: &Path| layout.is_managed(p) || layout.is_package(p);
    for l in &want {
        if let Action::Conflict(conflict) = decide(&existing(&l.link), &l.target, &ours, overwrite)
        {
            return Err(Error::LinkConflict {
                link: l.link.clone(),
                conflict,
            });
        }
    }
    Ok(want)
}

/// Makes the links match `version_dir`, and removes links into this namespace or the
/// package that the version does not have.
pub(crate) fn apply(layout: &Layout, version_dir: &Path, overwrite: bool) -> Result<()> {
    let want = check(layout, version_dir, overwrite)?;
    for l in &want {
        if existing(&l.link) != Existing::Symlink(l.target.clone()) {
            fsutil::symlink_atomic(&l.target, &l.link)?;
            crate::hooks::kill_point("link_switched");
        }
    }
    let ours = |p: &Path| layout.is_managed(p) || layout.is_package(p);
    for stale in links_into(layout, &ours) {
        if !want.iter().any(|l| l.link == stale) {
            fsutil::remove_file_durable(&stale)?;
        }
    }
    Ok(())
}

/// Removes the links in `dir` that point into `owned` (a link dir given up).
pub(crate) fn remove_in(dir: &Path, owned: &dyn Fn(&Path) -> bool) -> Result<()> {
    for stale in links_in(&[dir], owned) {
        fsutil::remove_file_durable(&stale)?;
    }
    Ok(())
}

/// Removes every link into `owned` (a namespace's versions or the package).
pub(crate) fn remove(layout: &Layout, owned: &dyn Fn(&Path) -> bool) -> Result<()> {
    for stale in links_into(layout, owned) {
        fsutil::remove_file_durable(&stale)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_decisions() {
        let ours = |p: &Path| p.starts_with("/opt/tern");
        let want = Path::new("/opt/tern/default/versions/2/bin/a");
        let cases = [
            (Existing::Missing, false, Action::Create),
            (Existing::Symlink(want.into()), false, Action::Keep),
            (
                Existing::Symlink("/opt/tern/default/versions/1/bin/a".into()),
                false,
                Action::Replace,
            ),
            (
                Existing::Symlink("/opt/tern/system/bin/a".into()),
                false,
                Action::Replace,
            ),
            (
                Existing::Symlink("/usr/bin/a".into()),
                true,
                Action::Replace,
            ),
            (Existing::Other, true, Action::Replace),
        ];
        for (ex, ow, act) in cases {
            assert_eq!(decide(&ex, want, &ours, ow), act, "{ex:?}");
        }
        assert!(matches!(
            decide(&Existing::Symlink("/usr/bin/a".into()), want, &ours, false),
            Action::Conflict(_)
        ));
        assert!(matches!(
            decide(&Existing::Other, want, &ours, false),
            Action::Conflict(_)
        ));
    }
}
