//! The one-line installer: `GET /install.sh` and the tern-update binaries it downloads
//! (`GET /downloads/tern-update/linux-ARCH`), from `ternd start --downloads-dir DIR`.
//!
//! The binaries are read and hashed once, at start, and served from memory: what a
//! host downloads is byte for byte what the size and SHA-256 written into its script
//! describe, whatever happens to the files afterwards (a release copied in halfway
//! through a download cannot be served torn). Restart ternd to serve new binaries.
//! Only the names `tern-update-linux-ARCH` for the architectures of [`ARCHES`] are
//! read, and a request names an architecture, never a path: nothing outside DIR, and
//! nothing else inside it, can be asked for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use axum::body::Bytes;
use sha2::{Digest, Sha256};

/// The one-line installer's part of `AppState`.
#[derive(Debug, Default)]
pub(crate) struct Installer {
    /// The script and binaries (`--downloads-dir`), set once at start; unset,
    /// `/install.sh` and `/downloads/…` answer 404.
    pub(crate) downloads: std::sync::OnceLock<Downloads>,
    /// Whether clients reach this replica over TLS (the scheme of the installer's URL).
    pub(crate) tls: std::sync::atomic::AtomicBool,
}

/// The architectures (Go's names, as the script maps `uname -m` to them).
pub(crate) const ARCHES: &[&str] = &["amd64", "arm64", "arm", "386", "riscv64"];

/// A tern-update binary larger than this is refused at start (they are ~10 MB).
const MAX_BINARY: u64 = 512 * 1024 * 1024;

/// The script, with `@TERN_SERVER@` and `@TERN_CHECKSUMS@` filled in per request.
const TEMPLATE: &str = include_str!("install.sh");

#[derive(Debug, thiserror::Error)]
pub enum DownloadsError {
    #[error("--downloads-dir {dir}: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("--downloads-dir {dir} holds no tern-update-linux-ARCH file (ARCH one of {arches})")]
    Empty { dir: PathBuf, arches: String },
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("--public-url {url:?}: {problem}")]
    PublicUrl { url: String, problem: &'static str },
}

/// One binary as served.
#[derive(Clone, Debug)]
pub(crate) struct Binary {
    pub bytes: Bytes,
    pub sha256: String,
}

/// What `/install.sh` and `/downloads/…` serve.
#[derive(Clone, Debug, Default)]
pub struct Downloads {
    /// By architecture.
    binaries: BTreeMap<&'static str, Binary>,
    /// `--public-url`: the address written into the script; else the request's Host.
    public_url: Option<String>,
}

impl Downloads {
    /// Reads `DIR/tern-update-linux-ARCH` for each architecture there is a file for.
    /// Each must be a regular file (not a symlink, which could lead out of DIR).
    pub fn load(dir: &Path, public_url: Option<String>) -> Result<Self, DownloadsError> {
        if let Some(url) = &public_url {
            check_public_url(url)?;
        }
        std::fs::read_dir(dir).map_err(|source| DownloadsError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let mut binaries = BTreeMap::new();
        for &arch in ARCHES {
            let path = dir.join(format!("tern-update-linux-{arch}"));
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(DownloadsError::File {
                        path,
                        problem: e.to_string(),
                    });
                }
            };
            let problem = if !meta.file_type().is_file() {
                Some("is not a regular file (symlinks are not followed)".to_string())
            } else if meta.len() > MAX_BINARY {
                Some(format!("is larger than {MAX_BINARY} bytes"))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(DownloadsError::File { path, problem });
            }
            let bytes = std::fs::read(&path).map_err(|e| DownloadsError::File {
                path: path.clone(),
                problem: e.to_string(),
            })?;
            let sha256 = crate::auth::hex(&Sha256::digest(&bytes));
            binaries.insert(
                arch,
                Binary {
                    bytes: Bytes::from(bytes),
                    sha256,
                },
            );
        }
        if binaries.is_empty() {
            return Err(DownloadsError::Empty {
                dir: dir.to_path_buf(),
                arches: ARCHES.join(", "),
            });
        }
        Ok(Self {
            binaries,
            public_url: public_url.map(|u| u.trim_end_matches('/').to_string()),
        })
    }

    /// The binary a `/downloads/tern-update/{file}` request names (`linux-ARCH`).
    pub(crate) fn binary(&self, file: &str) -> Option<&Binary> {
        let arch = file.strip_prefix("linux-")?;
        self.binaries.get(arch)
    }

    /// The architectures served.
    pub(crate) fn arches(&self) -> impl Iterator<Item = &str> {
        self.binaries.keys().copied()
    }

    /// The script for a request that reached ternd as `scheme://host`; `None` when
    /// there is no `--public-url` and `host` is not a plain host[:port].
    pub(crate) fn script(&self, scheme: &str, host: Option<&str>) -> Option<String> {
        let server = match (&self.public_url, host) {
            (Some(url), _) => url.clone(),
            (None, Some(host)) if is_plain_host(host) => format!("{scheme}://{host}"),
            (None, _) => return None,
        };
        let checksums: Vec<String> = self
            .binaries
            .iter()
            .map(|(arch, b)| format!("{arch} {} {}", b.bytes.len(), b.sha256))
            .collect();
        Some(TEMPLATE.replacen("@TERN_SERVER@", &server, 1).replacen(
            "@TERN_CHECKSUMS@",
            &checksums.join("\n"),
            1,
        ))
    }
}

/// A Host header that can go into the script as it is: letters, digits, `.`, `-`, an
/// optional `:port`, or a bracketed IPv6 address. Anything else (quotes, `$`,
/// spaces…) could change the script's meaning, and is refused.
fn is_plain_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        && !host.starts_with(['-', '.', ':'])
}

fn check_public_url(url: &str) -> Result<(), DownloadsError> {
    let bad = |problem| DownloadsError::PublicUrl {
        url: url.to_string(),
        problem,
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| bad("give an http:// or https:// URL"))?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        return Err(bad("has no host"));
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !is_plain_host(host)
        || !path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
    {
        return Err(bad(
            "may hold only letters, digits and . - _ / : [ ] (it is written into a shell script)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_architectures_are_served() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tern-update-linux-amd64"), b"binary").unwrap();
        std::fs::write(dir.path().join("secret"), b"not served").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("tern-update-linux-arm64"))
            .unwrap();
        let err = Downloads::load(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("tern-update-linux-arm64") && err.contains("symlink"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("tern-update-linux-arm64")).unwrap();
        let d = Downloads::load(dir.path(), None).unwrap();
        assert_eq!(d.arches().collect::<Vec<_>>(), ["amd64"]);
        let b = d.binary("linux-amd64").unwrap();
        assert_eq!(&b.bytes[..], b"binary");
        assert_eq!(
            b.sha256,
            "9a3a45d01531a20e89ac6ae10b0b0beb0492acd7216a368aa062d1a5fecaf9cd"
        );
        for other in [
            "linux-arm64",
            "secret",
            "../secret",
            "linux-../secret",
            "linux-amd64/../../secret",
            "tern-update-linux-amd64",
            "",
        ] {
            assert!(d.binary(other).is_none(), "{other}");
        }
    }

    #[test]
    fn an_empty_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = Downloads::load(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("holds no tern-update-linux-ARCH"), "{err}");
        let err = Downloads::load(&dir.path().join("missing"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--downloads-dir"), "{err}");
    }

    #[test]
    fn the_script_gets_the_server_and_the_checksums() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tern-update-linux-arm64"), b"binary").unwrap();
        let d = Downloads::load(dir.path(), None).unwrap();
        let s = d.script("https", Some("ternd.example:3025")).unwrap();
        assert!(s.contains("server='https://ternd.example:3025'\n"), "{s}");
        assert!(s.contains(
            "\narm64 6 9a3a45d01531a20e89ac6ae10b0b0beb0492acd7216a368aa062d1a5fecaf9cd\nEOF\n"
        ));
        assert!(!s.contains("@TERN_"));
        for hostile in ["a'b", "a b", "$(reboot)", "", "-x", "h`id`"] {
            assert!(d.script("https", Some(hostile)).is_none(), "{hostile}");
        }
        assert!(d.script("https", None).is_none());
        let d = Downloads::load(dir.path(), Some("https://tern.example/".into())).unwrap();
        let s = d.script("http", Some("$(evil)")).unwrap();
        assert!(s.contains("server='https://tern.example'\n"));
        for bad in ["ftp://x", "https://", "https://a'b", "https://x/$(id)", "x"] {
            assert!(
                Downloads::load(dir.path(), Some(bad.into())).is_err(),
                "{bad}"
            );
        }
    }
}
