//! Unpacking a release tarball into a version directory. Two passes over the archive:
//! `scan` reads only headers and `plan` (pure) validates every entry and the total size
//! before anything is written; `extract` then writes exactly what was planned, with
//! fsync, into a fresh directory.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use flate2::read::GzDecoder;

use crate::error::{Error, IoContext, Result};
use crate::fs as fsutil;
use crate::hostile::{BadPath, HostileReason};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Hardlink,
    /// Metadata entries the tar reader does not fold in (pax global headers).
    Skip,
    /// Device files, fifos, sparse files...: always refused.
    Other(tar::EntryType),
}

/// One header of the archive, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryMeta {
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) link: Option<PathBuf>,
}

/// What `extract` writes for the entry at `index` of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) index: usize,
    pub(crate) rel: PathBuf,
    pub(crate) kind: Kind,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) link: Option<PathBuf>,
}

/// What [`Entries::plan`] accepted: exactly what [`extract`] writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The top-level directory that was stripped, if any.
    pub(crate) stripped: Option<String>,
    pub(crate) items: Vec<Item>,
    pub(crate) total_bytes: u64,
}

fn hostile(path: &Path, reason: impl Into<HostileReason>) -> Error {
    Error::Hostile {
        entry: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Normal components of a relative path; errors on `/`, `..` and prefixes.
fn normal_components(raw: &Path) -> std::result::Result<Vec<String>, BadPath> {
    let mut out = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(BadPath::Absolute),
            Component::ParentDir => return Err(BadPath::ParentDir),
        }
    }
    Ok(out)
}

/// The directory all entries share, if the tarball has one (not `bin`, which means the
/// tarball has no top-level directory).
fn common_top(entries: &[EntryMeta]) -> Option<String> {
    let mut top: Option<String> = None;
    let mut deeper = false;
    for e in entries.iter().filter(|e| e.kind != Kind::Skip) {
        let comps = normal_components(&e.path).ok()?;
        let first = comps.first()?.clone();
        deeper |= comps.len() > 1;
        match &top {
            None => top = Some(first),
            Some(t) if *t == first => {}
            Some(_) => return None,
        }
    }
    top.filter(|t| deeper && t != "bin" && t != "lib")
}

/// Resolves `target` relative to the directory of `rel` without touching the disk; `None`
/// when it leaves the root.
fn resolve_inside(rel: &[String], target: &Path) -> Option<Vec<String>> {
    let mut stack: Vec<String> = rel[..rel.len().saturating_sub(1)].to_vec();
    for c in target.components() {
        match c {
            Component::Normal(s) => stack.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                stack.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(stack)
}

/// Validates every entry and decides what to write. `free` is the space available for
/// the unpacked files.
pub(crate) fn plan(entries: &[EntryMeta], free: u64) -> Result<Plan> {
    let mut planner = Planner {
        stripped: common_top(entries),
        free,
        seen: HashSet::new(),
        files: HashSet::new(),
        symlinks: HashSet::new(),
        total: 0,
    };
    let mut items = Vec::new();
    for (index, e) in entries.iter().enumerate() {
        if let Some(item) = planner.item(index, e)? {
            items.push(item);
        }
    }
    if !items.iter().any(|i| i.kind == Kind::File) {
        return Err(Error::EmptyArchive);
    }
    Ok(Plan {
        stripped: planner.stripped,
        items,
        total_bytes: planner.total,
    })
}

/// The entries `plan` has accepted so far (paths relative to the version directory).
struct Planner {
    stripped: Option<String>,
    free: u64,
    seen: HashSet<Vec<String>>,
    /// Regular files and hardlinks: what a hardlink may point to.
    files: HashSet<Vec<String>>,
    symlinks: HashSet<Vec<String>>,
    total: u64,
}

impl Planner {
    fn strip(&self, comps: Vec<String>) -> Vec<String> {
        if self.stripped.is_some() {
            comps.into_iter().skip(1).collect()
        } else {
            comps
        }
    }

    /// Checks one entry; `None` when it writes nothing of its own.
    fn item(&mut self, index: usize, e: &EntryMeta) -> Result<Option<Item>> {
        if e.kind == Kind::Skip {
            return Ok(None);
        }
        if let Kind::Other(what) = e.kind {
            return Err(hostile(&e.path, HostileReason::Special(what)));
        }
        let comps = normal_components(&e.path).map_err(|r| hostile(&e.path, r))?;
        let comps = self.strip(comps);
        if comps.is_empty() {
            return Ok(None); // the stripped top-level directory itself
        }
        if e.mode & 0o6000 != 0 {
            return Err(hostile(&e.path, HostileReason::SetId(e.mode)));
        }
        self.check_parents(&e.path, &comps)?;
        if !self.seen.insert(comps.clone()) {
            if e.kind == Kind::Dir {
                return Ok(None);
            }
            return Err(hostile(&e.path, HostileReason::Duplicate));
        }
        let link = match e.kind {
            Kind::Symlink => Some(self.symlink(e, &comps)?),
            Kind::Hardlink => Some(self.hardlink(e, &comps)?),
            Kind::File => {
                self.file(e, &comps)?;
                None
            }
            _ => None,
        };
        Ok(Some(Item {
            index,
            rel: comps.iter().collect(),
            kind: e.kind.clone(),
            mode: e.mode & 0o777,
            size: e.size,
            link,
        }))
    }

    /// No entry may be written through a symlink or a file of the archive.
    fn check_parents(&self, path: &Path, comps: &[String]) -> Result<()> {
        for n in 1..comps.len() {
            if self.symlinks.contains(&comps[..n]) {
                return Err(hostile(path, HostileReason::ThroughSymlink));
            }
            if self.files.contains(&comps[..n]) {
                return Err(hostile(path, HostileReason::ThroughFile));
            }
        }
        Ok(())
    }

    /// A symlink's target, when it stays inside the version directory.
    fn symlink(&mut self, e: &EntryMeta, comps: &[String]) -> Result<PathBuf> {
        let target = e
            .link
            .clone()
            .ok_or_else(|| hostile(&e.path, HostileReason::SymlinkWithoutTarget))?;
        if target.is_absolute() {
            return Err(hostile(&e.path, HostileReason::SymlinkAbsolute(target)));
        }
        if resolve_inside(comps, &target).is_none() {
            return Err(hostile(&e.path, HostileReason::SymlinkEscapes(target)));
        }
        self.symlinks.insert(comps.to_vec());
        Ok(target)
    }

    /// A hardlink's target (relative to the version directory), when it is an earlier
    /// file of the archive.
    fn hardlink(&mut self, e: &EntryMeta, comps: &[String]) -> Result<PathBuf> {
        let target = e
            .link
            .clone()
            .ok_or_else(|| hostile(&e.path, HostileReason::HardlinkWithoutTarget))?;
        let tcomps = normal_components(&target)
            .map_err(|r| hostile(&e.path, HostileReason::HardlinkTarget(r)))?;
        let tcomps = self.strip(tcomps);
        if !self.files.contains(&tcomps) {
            return Err(hostile(&e.path, HostileReason::HardlinkNotEarlier(target)));
        }
        self.files.insert(comps.to_vec());
        Ok(tcomps.iter().collect())
    }

    /// Counts a regular file against the free space.
    fn file(&mut self, e: &EntryMeta, comps: &[String]) -> Result<()> {
        self.files.insert(comps.to_vec());
        self.total = self.total.saturating_add(e.size);
        if self.total > self.free {
            return Err(hostile(
                &e.path,
                HostileReason::TooBig {
                    total: self.total,
                    free: self.free,
                },
            ));
        }
        Ok(())
    }
}

fn open_archive(path: &Path) -> Result<tar::Archive<GzDecoder<io::BufReader<File>>>> {
    let f = File::open(path).ctx("open", path)?;
    Ok(tar::Archive::new(GzDecoder::new(io::BufReader::new(f))))
}

fn kind_of(t: tar::EntryType) -> Kind {
    use tar::EntryType as T;
    match t {
        T::Regular | T::Continuous => Kind::File,
        T::Directory => Kind::Dir,
        T::Symlink => Kind::Symlink,
        T::Link => Kind::Hardlink,
        T::XGlobalHeader => Kind::Skip,
        other => Kind::Other(other),
    }
}

fn tar_err(path: &Path, e: io::Error) -> Error {
    Error::io(format!("read tarball {}", path.display()), e)
}

/// Unpacks `tarball` into `dest` with every check an agent release gets (paths stay
/// inside, no devices or hard links out, sizes against the free space less `reserve`):
/// written to a temporary directory beside `dest` and renamed, so `dest` appears whole or
/// not at all. For other programs that install Tern-shaped releases (`tern-lockstep`).
pub fn unpack_checked(tarball: &Path, dest: &Path, reserve: u64) -> Result<()> {
    let parent = fsutil::parent_of(dest).to_path_buf();
    let entries = scan(tarball)?;
    let free = fsutil::free_space(&parent)?;
    let plan = entries.plan(free.saturating_sub(reserve))?;
    let tmp = fsutil::temp_beside(dest);
    fsutil::remove_dir_all_if_exists(&tmp)?;
    if let Err(e) = extract(tarball, &plan, &tmp) {
        let _ = fsutil::remove_dir_all_if_exists(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, dest)
        .map_err(|e| Error::io(format!("rename into {}", dest.display()), e))?;
    Ok(fsutil::fsync_dir(&parent)?)
}

/// The headers of an archive, as [`scan`] read them.
#[derive(Clone, Debug)]
pub struct Entries(Vec<EntryMeta>);

impl Entries {
    /// Checks every entry and the total size against `free` bytes: the plan of what
    /// [`extract`] writes, or why the archive is refused.
    pub fn plan(&self, free: u64) -> Result<Plan> {
        plan(&self.0, free)
    }
}

/// Reads every header (and skips the data): the input of [`Entries::plan`].
pub fn scan(tarball: &Path) -> Result<Entries> {
    scan_archive(&mut open_archive(tarball)?)
        .map(Entries)
        .map_err(|e| tar_err(tarball, e))
}

/// The headers of an archive, whatever it is read from (a file, or fuzzer bytes).
fn scan_archive<R: io::Read>(archive: &mut tar::Archive<R>) -> io::Result<Vec<EntryMeta>> {
    let mut out = Vec::new();
    for entry in archive.entries()? {
        let entry = entry?;
        let header = entry.header();
        let path = entry.path()?.into_owned();
        let link = entry.link_name()?.map(|l| l.into_owned());
        out.push(EntryMeta {
            path,
            kind: kind_of(header.entry_type()),
            mode: header.mode().unwrap_or(0o644),
            size: entry.size(),
            link,
        });
    }
    Ok(out)
}

/// The fuzzing entry: the entry checks of an uncompressed tar archive's bytes, with
/// `free` bytes of space. Never panics, whatever the bytes; an accepted plan names only
/// paths inside the version dir.
#[cfg(feature = "fuzzing")]
pub fn fuzz_plan(data: &[u8], free: u64) {
    let Ok(entries) = scan_archive(&mut tar::Archive::new(data)) else {
        return;
    };
    if let Ok(plan) = plan(&entries, free) {
        for item in &plan.items {
            assert!(
                item.rel
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))),
                "a planned path leaves the version dir: {:?}",
                item.rel
            );
        }
    }
}

/// The mode a file of the archive gets: what the archive says, without group and other
/// write access (the agent runs it as root), whatever the umask.
fn file_mode(archive_mode: u32) -> u32 {
    if archive_mode == 0 {
        0o644
    } else {
        archive_mode & 0o755
    }
}

/// Writes the planned entries under `dest` (which must not exist yet), fsyncing every
/// file and directory. Directories are [`tern_fs::DIR_MODE`] whatever the archive says.
pub fn extract(tarball: &Path, plan: &Plan, dest: &Path) -> Result<()> {
    fsutil::create_dir(dest)?;
    let by_index: HashMap<usize, &Item> = plan.items.iter().map(|i| (i.index, i)).collect();
    let mut dirs: Vec<PathBuf> = vec![dest.to_path_buf()];
    let mut archive = open_archive(tarball)?;
    for (index, entry) in archive
        .entries()
        .map_err(|e| tar_err(tarball, e))?
        .enumerate()
    {
        let mut entry = entry.map_err(|e| tar_err(tarball, e))?;
        let Some(item) = by_index.get(&index) else {
            continue;
        };
        // The archive must not have changed between the passes.
        if entry.size() != item.size || kind_of(entry.header().entry_type()) != item.kind {
            return Err(hostile(&item.rel, HostileReason::Changed));
        }
        let out = dest.join(&item.rel);
        let parent = fsutil::parent_of(&out).to_path_buf();
        if !parent.exists() {
            fsutil::create_dir_all(&parent)?;
            dirs.push(parent.clone());
        }
        match item.kind {
            Kind::Dir => {
                fsutil::create_dir_all(&out)?;
                dirs.push(out);
            }
            Kind::File => {
                let mut f = fsutil::create_file(&out, file_mode(item.mode))?;
                let n = io::copy(&mut (&mut entry).take(item.size), &mut f).ctx("write", &out)?;
                if n != item.size {
                    return Err(hostile(&item.rel, HostileReason::Truncated));
                }
                f.sync_all().ctx("fsync", &out)?;
            }
            Kind::Symlink => {
                let target = item.link.as_deref().unwrap_or(Path::new(""));
                std::os::unix::fs::symlink(target, &out).ctx("symlink", &out)?;
            }
            Kind::Hardlink => {
                let target = dest.join(item.link.as_deref().unwrap_or(Path::new("")));
                fs::hard_link(&target, &out).ctx("hardlink", &out)?;
            }
            Kind::Skip | Kind::Other(_) => {}
        }
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs.iter().rev() {
        fsutil::fsync_dir(d)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, kind: Kind) -> EntryMeta {
        EntryMeta {
            path: path.into(),
            kind,
            mode: 0o755,
            size: 10,
            link: None,
        }
    }
    fn l(path: &str, kind: Kind, target: &str) -> EntryMeta {
        EntryMeta {
            link: Some(target.into()),
            ..e(path, kind)
        }
    }

    #[test]
    fn strips_top_dir_and_keeps_bin() {
        let p = plan(&[e("agent/", Kind::Dir), e("agent/bin/a", Kind::File)], 100).unwrap();
        assert_eq!(p.stripped.as_deref(), Some("agent"));
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.items[0].rel, PathBuf::from("bin/a"));
        let p = plan(&[e("bin/a", Kind::File), e("bin/b", Kind::File)], 100).unwrap();
        assert_eq!(p.stripped, None);
        let p = plan(&[e("a", Kind::File), e("b", Kind::File)], 100).unwrap();
        assert_eq!(p.stripped, None);
        assert_eq!(p.total_bytes, 20);
    }

    #[test]
    fn refuses_hostile_entries() {
        let f = || e("t/bin/a", Kind::File);
        let cases: Vec<(Vec<EntryMeta>, &str, &str)> = vec![
            (
                vec![f(), e("/etc/passwd", Kind::File)],
                "/etc/passwd",
                "absolute",
            ),
            (vec![f(), e("t/../../x", Kind::File)], "t/../../x", "`..`"),
            (
                vec![f(), l("t/bin/l", Kind::Symlink, "/etc/shadow")],
                "t/bin/l",
                "absolute",
            ),
            (
                vec![f(), l("t/bin/l", Kind::Symlink, "../../x")],
                "t/bin/l",
                "leaves",
            ),
            (
                vec![f(), l("t/bin/l", Kind::Hardlink, "/etc/shadow")],
                "t/bin/l",
                "absolute",
            ),
            (
                vec![f(), l("t/bin/l", Kind::Hardlink, "t/bin/zzz")],
                "t/bin/l",
                "not an earlier file",
            ),
            (
                vec![f(), e("t/dev", Kind::Other(tar::EntryType::Char))],
                "t/dev",
                "character device",
            ),
            (
                vec![f(), e("t/p", Kind::Other(tar::EntryType::Fifo))],
                "t/p",
                "fifo",
            ),
            (
                vec![
                    f(),
                    EntryMeta {
                        mode: 0o4755,
                        ..e("t/bin/s", Kind::File)
                    },
                ],
                "t/bin/s",
                "setuid",
            ),
            (
                vec![
                    f(),
                    EntryMeta {
                        mode: 0o2755,
                        ..e("t/bin/s", Kind::File)
                    },
                ],
                "t/bin/s",
                "setgid",
            ),
            (
                vec![f(), l("t/d", Kind::Symlink, "."), e("t/d/x", Kind::File)],
                "t/d/x",
                "through a symlink",
            ),
            (vec![f(), e("t/bin/a", Kind::File)], "t/bin/a", "duplicate"),
            (
                vec![
                    f(),
                    EntryMeta {
                        size: 1000,
                        ..e("t/big", Kind::File)
                    },
                ],
                "t/big",
                "only 100 free",
            ),
        ];
        for (entries, entry, reason) in cases {
            match plan(&entries, 100) {
                Err(Error::Hostile {
                    entry: got,
                    reason: why,
                }) => {
                    assert_eq!(got, entry);
                    let why = why.to_string();
                    assert!(why.contains(reason), "{entry}: {why}");
                }
                other => panic!("{entry}: expected refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn allows_inner_links() {
        let entries = vec![
            e("t/bin/a", Kind::File),
            l("t/bin/b", Kind::Symlink, "a"),
            l("t/lib/c", Kind::Symlink, "../bin/a"),
            l("t/bin/h", Kind::Hardlink, "t/bin/a"),
        ];
        let p = plan(&entries, 100).unwrap();
        assert_eq!(p.items.len(), 4);
        assert_eq!(p.items[3].link, Some(PathBuf::from("bin/a")));
    }

    #[test]
    fn file_modes_lose_group_and_other_write() {
        for (archive, want) in [
            (0o777, 0o755),
            (0o666, 0o644),
            (0o755, 0o755),
            (0o700, 0o700),
            (0o620, 0o600),
            (0, 0o644),
        ] {
            assert_eq!(file_mode(archive), want, "{archive:o}");
        }
    }

    #[test]
    fn empty_archive_is_refused() {
        assert!(plan(&[e("t/", Kind::Dir)], 100).is_err());
    }
}
