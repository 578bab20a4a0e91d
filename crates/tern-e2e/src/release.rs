//! Sample releases of `tern-demo-agent`: one binary per version, compiled with `rustc`
//! with the version (and whether it is broken) baked in, packed as the tarball and
//! `.sha256` that `tern-update` downloads.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use crate::bins::workspace_root;

/// A release to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub version: String,
    /// Panics on start, on every host.
    pub broken: bool,
    /// Of the requests the agent stands for handling, how many in a thousand fail
    /// (its `/metrics`); 10 unless raised.
    pub errors_per_mille: u32,
}

impl Release {
    pub fn good(version: &str) -> Self {
        Self {
            version: version.into(),
            broken: false,
            errors_per_mille: 10,
        }
    }

    /// Runs and is healthy, but fails `errors_per_mille` of its requests.
    pub fn erroring(version: &str, errors_per_mille: u32) -> Self {
        Self {
            errors_per_mille,
            ..Self::good(version)
        }
    }

    pub fn broken(version: &str) -> Self {
        Self {
            version: version.into(),
            broken: true,
            errors_per_mille: 10,
        }
    }
}

/// The demo's releases: 1.0.0 and 1.1.0 work, 1.2.0 crashes on start.
pub fn standard() -> Vec<Release> {
    vec![
        Release::good("1.0.0"),
        Release::good("1.1.0"),
        Release::broken("1.2.0"),
    ]
}

/// The agent's source file (one file, std only).
pub fn agent_source() -> PathBuf {
    workspace_root().join("crates/tern-demo-agent/src/main.rs")
}

/// FNV-1a: a cache key for the agent's source, not a security measure.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Compiles the agent for `r` into `cache` (reused while the source is unchanged).
pub fn build_agent(cache: &Path, r: &Release) -> anyhow::Result<PathBuf> {
    let src = agent_source();
    let text = std::fs::read(&src).with_context(|| format!("cannot read {}", src.display()))?;
    let key = format!(
        "{}{}-e{}-{:016x}",
        r.version,
        if r.broken { "-broken" } else { "" },
        r.errors_per_mille,
        fnv(&text)
    );
    let out = cache.join(&key).join("tern-demo-agent");
    if out.is_file() {
        return Ok(out);
    }
    let dir = out.parent().context("no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Unique temp name: several test processes may build the same release at once.
    let tmp = dir.join(format!(".build-{}", std::process::id()));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args(["--edition", "2024", "--crate-type", "bin"])
        .args(["--crate-name", "tern_demo_agent"])
        .args([
            "-C",
            "opt-level=1",
            "-C",
            "debuginfo=0",
            "-C",
            "strip=symbols",
        ])
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .env("TERN_DEMO_AGENT_VERSION", &r.version)
        .env("TERN_DEMO_AGENT_BROKEN", if r.broken { "1" } else { "0" })
        .env(
            "TERN_DEMO_AGENT_ERRORS_PER_MILLE",
            r.errors_per_mille.to_string(),
        );
    let output = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?} (is rustc on PATH?)"))?;
    if !output.status.success() {
        bail!(
            "building tern-demo-agent {} failed:\n{}",
            r.version,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::rename(&tmp, &out).with_context(|| format!("cannot rename to {}", out.display()))?;
    Ok(out)
}

/// The agent program of `r`, built (once, while the source is unchanged) in the same
/// cache as the fleets' releases: what a test runs without a fleet, e.g. as the
/// program of a container image.
pub fn agent_program(r: &Release) -> anyhow::Result<PathBuf> {
    let bins = crate::bins::Bins::locate()?;
    build_agent(&agent_cache(&bins), r)
}

/// Where the agent builds are kept: beside the binaries under test.
pub(crate) fn agent_cache(bins: &crate::bins::Bins) -> PathBuf {
    bins.dir.join("tern-e2e-agents")
}

/// The sha256 of a file, as `sha256:HEX` (an image digest's form).
pub fn sha256_digest(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("sha256:{}", hex(&Sha256::digest(&bytes))))
}

/// Go's name for this machine's architecture, as in artifact URLs.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// The file name `tern-update`'s default URL template asks for.
pub fn artifact_name(version: &str) -> String {
    format!(
        "tern-agent-v{version}-{}-{}-bin.tar.gz",
        std::env::consts::OS,
        go_arch()
    )
}

pub use tern_core::text::hex;

/// Packs `agent` as `tern-demo-agent-<v>/bin/tern-demo-agent` (+ a VERSION file) into
/// `dir/<artifact_name>` and writes its `.sha256` beside it.
pub fn publish(dir: &Path, version: &str, agent: &Path) -> anyhow::Result<PathBuf> {
    let bin = std::fs::read(agent).with_context(|| format!("cannot read {}", agent.display()))?;
    let top = format!("tern-demo-agent-{version}");
    let version_file = format!("{version}\n");
    pack(
        dir,
        &artifact_name(version),
        &[
            (format!("{top}/bin/tern-demo-agent"), &bin, 0o755),
            (format!("{top}/VERSION"), version_file.as_bytes(), 0o644),
        ],
    )
}

/// Writes `files` (path in the archive, bytes, mode) as the gzipped tarball
/// `dir/<name>`, with `<name>.sha256` beside it as sha256sum writes it: a release as
/// an artifact server holds it.
pub fn pack(dir: &Path, name: &str, files: &[(String, &[u8], u32)]) -> anyhow::Result<PathBuf> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(enc);
    for (path, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, path, *data)?;
    }
    let gz = tar.into_inner()?.finish()?;
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&gz))
        .with_context(|| format!("cannot write {}", path.display()))?;
    let sum = hex(&Sha256::digest(&gz));
    std::fs::write(
        dir.join(format!("{name}.sha256")),
        format!("{sum}  {name}\n"),
    )?;
    Ok(path)
}
