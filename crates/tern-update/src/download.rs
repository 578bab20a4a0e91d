//! Download, verify and unpack of a version in tarball mode: `install` makes
//! `versions/<version>` a complete, verified version directory (`install_checked`
//! against a directive's size and sha256), `verify_only` downloads and checks only (a
//! directive's dry run); `record_install_failure` keeps an install that failed before
//! any switch, for the heartbeats. Signed metadata, when the host pins a root, outranks
//! both the instruction and the `.sha256` file.

use std::path::{Path, PathBuf};

use crate::artifact::{self, Vars};
use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::fsutil::{self, read_trimmed};
use crate::hooks::kill_point;
use crate::links;
use crate::log;
use crate::state::{self, Spec};

/// Room left free beyond what a download or an unpacked version needs.
const SPACE_MARGIN: u64 = 64 * 1024;

/// The artifact URL of `version` for this host.
pub(crate) fn artifact_url(spec: &Spec, version: &str, edition: &str) -> Result<String> {
    let template = spec
        .url_template
        .as_deref()
        .unwrap_or(artifact::DEFAULT_TEMPLATE);
    let base = spec.base_url.as_deref().unwrap_or(&spec.server);
    artifact::render(
        template,
        &Vars {
            version,
            os: std::env::consts::OS,
            arch: artifact::go_arch(std::env::consts::ARCH),
            edition: if edition.is_empty() { "oss" } else { edition },
            base_url: base,
        },
    )
}

/// Keeps, for the heartbeats, an install of `target` that failed before the switch
/// (the host is unchanged). The error is cut to what a heartbeat carries.
pub(crate) fn record_install_failure(ctx: &Ctx, target: &str, e: &Error) {
    let error: String = e.to_string().chars().take(1024).collect();
    let failure = tern_core::wire::InstallFailure {
        version: target.to_string(),
        kind: e.install_failure_kind().to_string(),
        error,
    };
    state::save_install_failure(&ctx.layout.install_failure_file(), Some(&failure));
}

/// What a version directive's instruction says the artifact must be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expected<'a> {
    pub(crate) size: u64,
    /// Hex; compared without regard to case.
    pub(crate) sha256: &'a str,
}

/// Makes `versions/<target>` a complete, verified version directory.
pub(crate) fn install(ctx: &Ctx, spec: &Spec, edition: &str, target: &str) -> Result<PathBuf> {
    install_checked(ctx, spec, edition, target, None)
}

/// [`install`], the artifact checked against `expect` (a directive's size and sha256)
/// instead of the server's `.sha256` file. A version already unpacked must have been
/// unpacked from an artifact of that sha256.
pub(crate) fn install_checked(
    ctx: &Ctx,
    spec: &Spec,
    edition: &str,
    target: &str,
    expect: Option<Expected<'_>>,
) -> Result<PathBuf> {
    let versions = ctx.layout.versions_dir();
    let vdir = ctx.layout.version_dir(target);
    fsutil::create_own_dir(&versions)?;
    let signed = crate::trust::signed_artifact(&ctx.http, &ctx.layout, spec, target, edition)?;
    if signed.is_some() {
        kill_point("trust_refreshed");
    }
    let check = Check::new(signed.as_ref(), expect)?;
    if vdir.join("sha256").is_file() {
        if let Some(e) = check.expect {
            unpacked_matches(&vdir, e)?;
        }
        log::info(format!(
            "{target} is already unpacked in {}",
            vdir.display()
        ));
        return Ok(vdir);
    }
    let url = artifact_url(spec, target, edition)?;
    let expected = match check.expect {
        Some(e) => e.sha256.to_ascii_lowercase(),
        None => ctx.http.checksum(&url)?,
    };
    let free = room_for_download(ctx, &url, &versions)?;
    let tarball = fsutil::temp_beside(&versions.join(format!("{target}.tar.gz")));
    let result = download_verified(ctx, &url, &expected, &check, &tarball, free)
        .and_then(|()| unpack(ctx, &tarball, &vdir, &expected));
    let _ = std::fs::remove_file(&tarball);
    if let Err(e) = result {
        if vdir.exists() && !vdir.join("sha256").is_file() {
            let _ = fsutil::remove_dir_durable(&vdir);
        }
        return Err(e);
    }
    Ok(vdir)
}

/// What a download is held to: the signed release metadata's size and sha256 (a host
/// with a pinned root), else a directive's instruction, else the `.sha256` file.
struct Check<'a> {
    expect: Option<Expected<'a>>,
    signed: bool,
}

impl<'a> Check<'a> {
    fn new(
        signed: Option<&'a crate::trust::SignedArtifact>,
        instruction: Option<Expected<'a>>,
    ) -> Result<Self> {
        let Some(s) = signed else {
            return Ok(Self {
                expect: instruction,
                signed: false,
            });
        };
        // ternd's instruction must agree with what the release keys signed: ternd alone
        // cannot choose the bytes.
        if let Some(e) = instruction {
            let mismatch = if e.size != s.size {
                Some(("size", s.size.to_string(), e.size.to_string()))
            } else if !e.sha256.eq_ignore_ascii_case(&s.sha256) {
                Some(("sha256", s.sha256.clone(), e.sha256.to_ascii_lowercase()))
            } else {
                None
            };
            if let Some((what, expected, got)) = mismatch {
                return Err(Error::NotAsSigned {
                    url: "the install instruction".into(),
                    what,
                    expected,
                    got,
                });
            }
        }
        Ok(Self {
            expect: Some(Expected {
                size: s.size,
                sha256: &s.sha256,
            }),
            signed: true,
        })
    }
}

/// A directive's dry run: downloads the artifact of `target` and checks it against
/// `expect`, then removes the download. Nothing is unpacked, linked or switched.
pub(crate) fn verify_only(
    ctx: &Ctx,
    spec: &Spec,
    edition: &str,
    target: &str,
    expect: Expected<'_>,
) -> Result<()> {
    let versions = ctx.layout.versions_dir();
    let vdir = ctx.layout.version_dir(target);
    let signed = crate::trust::signed_artifact(&ctx.http, &ctx.layout, spec, target, edition)?;
    let check = Check::new(signed.as_ref(), Some(expect))?;
    let expect = check.expect.unwrap_or(expect);
    if vdir.join("sha256").is_file() {
        return unpacked_matches(&vdir, expect);
    }
    fsutil::create_own_dir(&versions)?;
    let url = artifact_url(spec, target, edition)?;
    let free = room_for_download(ctx, &url, &versions)?;
    let tarball = fsutil::temp_beside(&versions.join(format!("{target}.tar.gz")));
    let expected = expect.sha256.to_ascii_lowercase();
    let result = download_verified(ctx, &url, &expected, &check, &tarball, free);
    let _ = std::fs::remove_file(&tarball);
    result
}

/// An unpacked version came from an artifact of `expect.sha256` (its `sha256` file).
fn unpacked_matches(vdir: &Path, expect: Expected<'_>) -> Result<()> {
    let got = read_trimmed(&vdir.join("sha256")).unwrap_or_default();
    if got.eq_ignore_ascii_case(expect.sha256) {
        return Ok(());
    }
    Err(Error::InstructionMismatch {
        artifact: vdir.display().to_string(),
        what: "sha256",
        expected: expect.sha256.to_ascii_lowercase(),
        got,
    })
}

/// The free space in `versions`, when the artifact (by its Content-Length) fits in it.
fn room_for_download(ctx: &Ctx, url: &str, versions: &Path) -> Result<u64> {
    let free = fsutil::free_space(versions)?;
    if let Some(len) = ctx.http.content_length(url)?
        && len.saturating_add(SPACE_MARGIN) > free
    {
        return Err(Error::NoSpace {
            path: versions.to_path_buf(),
            // The length comes from the network: u64::MAX must not overflow.
            needed: len.saturating_add(SPACE_MARGIN),
            available: free,
        });
    }
    Ok(free)
}

/// Downloads `url` into `tarball` (at most what `free` leaves) and checks its sha256
/// (and, for a directive's instruction or signed metadata, its size).
fn download_verified(
    ctx: &Ctx,
    url: &str,
    expected: &str,
    check: &Check<'_>,
    tarball: &Path,
    free: u64,
) -> Result<()> {
    log::info(format!("downloading {url}"));
    let declared = check.expect.filter(|_| check.signed).map(|e| e.size);
    let (size, actual) =
        ctx.http
            .download(url, tarball, free.saturating_sub(SPACE_MARGIN), declared)?;
    kill_point("downloaded");
    if let Some(e) = check.expect {
        let mismatch = if size != e.size {
            Some(("size", e.size.to_string(), size.to_string()))
        } else if actual != expected {
            Some(("sha256", expected.to_string(), actual))
        } else {
            None
        };
        return match mismatch {
            None => Ok(()),
            Some((what, expected, got)) if check.signed => Err(Error::NotAsSigned {
                url: url.to_string(),
                what,
                expected,
                got,
            }),
            Some((what, expected, got)) => Err(Error::InstructionMismatch {
                artifact: url.to_string(),
                what,
                expected,
                got,
            }),
        };
    }
    if actual != expected {
        return Err(Error::ChecksumMismatch {
            url: url.to_string(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Unpacks a verified tarball into `vdir`. `vdir/sha256` is written last: it marks the
/// version complete, so a kill before it leaves a directory the next run replaces.
fn unpack(ctx: &Ctx, tarball: &Path, vdir: &Path, expected: &str) -> Result<()> {
    let versions = ctx.layout.versions_dir();
    let entries = tern_unpack::scan(tarball)?;
    let free = fsutil::free_space(&versions)?;
    let plan = entries.plan(free.saturating_sub(SPACE_MARGIN))?;
    if vdir.exists() {
        // A directory without `sha256` is not a complete version: never linked, safe to drop.
        fsutil::remove_dir_durable(vdir)?;
    }
    let tmp = fsutil::temp_beside(vdir);
    if let Err(e) = tern_unpack::extract(tarball, &plan, &tmp) {
        let _ = fsutil::remove_dir_all_if_exists(&tmp);
        return Err(e.into());
    }
    kill_point("extracted");
    std::fs::rename(&tmp, vdir)
        .map_err(|e| Error::io(format!("rename into {}", vdir.display()), e))?;
    fsutil::fsync_dir(&versions)?;
    kill_point("renamed");
    links::desired(&ctx.layout, vdir)?;
    fsutil::write_atomic(
        &vdir.join("sha256"),
        format!("{expected}\n").as_bytes(),
        0o644,
    )?;
    kill_point("verified");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let mut spec = Spec {
            server: "https://ternd.example".into(),
            ..Spec::default()
        };
        let arch = artifact::go_arch(std::env::consts::ARCH);
        assert_eq!(
            artifact_url(&spec, "1.2.3", "").unwrap(),
            format!("https://ternd.example/tern-agent-v1.2.3-linux-{arch}-bin.tar.gz")
        );
        spec.base_url = Some("https://cdn.example/x/".into());
        assert!(
            artifact_url(&spec, "1.2.3", "")
                .unwrap()
                .starts_with("https://cdn.example/x/tern-agent-v1.2.3")
        );
        spec.url_template = Some("https://m/{{ .Edition }}/{{.Version}}.tgz".into());
        assert_eq!(
            artifact_url(&spec, "1.2.3", "ent").unwrap(),
            "https://m/ent/1.2.3.tgz"
        );
    }
}
