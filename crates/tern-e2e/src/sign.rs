//! Signed releases for the fleet: keys and a TUF repository at `<artifacts>/tuf`, made by
//! the real `tern-release` binary, as release owners would.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::Fleet;
use crate::release::{artifact_name, go_arch};

fn run(bin: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(bin)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} {args:?} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Creates keys (`<fleet>/keys`) and the repository, signs `versions` (published
/// agent artifacts); returns the root hosts pin.
pub fn sign(fleet: &Fleet, versions: &[&str]) -> anyhow::Result<PathBuf> {
    sign_named(fleet, versions, artifact_name)
}

/// [`sign`] for the updater's own releases (`crate::updater::artifact_name`): the
/// same keys and lookup, another tarball name.
pub fn sign_updater(fleet: &Fleet, versions: &[&str]) -> anyhow::Result<PathBuf> {
    sign_named(fleet, versions, crate::updater::artifact_name)
}

fn sign_named(
    fleet: &Fleet,
    versions: &[&str],
    name: fn(&str) -> String,
) -> anyhow::Result<PathBuf> {
    let tool = fleet.bins.tern_release()?;
    std::fs::create_dir_all(fleet.path().join("keys"))?;
    let k = |role: &str| key(fleet, role);
    let (root, targets, snapshot, timestamp) =
        (k("root"), k("targets"), k("snapshot"), k("timestamp"));
    run(&tool, &["keygen", &root, &targets, &snapshot, &timestamp])?;
    let repo = fleet.artifacts.join("tuf").display().to_string();
    run(
        &tool,
        &[
            "init",
            "--repo",
            &repo,
            "--root-key",
            &root,
            "--targets-key",
            &targets,
            "--snapshot-key",
            &snapshot,
            "--timestamp-key",
            &timestamp,
        ],
    )?;
    let manifest = fleet.path().join("release-manifest");
    let text: String = versions
        .iter()
        .map(|v| {
            format!(
                "{} {v} {}\n",
                fleet.artifacts.join(name(v)).display(),
                go_arch()
            )
        })
        .collect();
    std::fs::write(&manifest, text)?;
    let m = manifest.display().to_string();
    let mut args = vec!["add", "--repo", &repo, "--manifest", &m];
    let online = online_key_args(fleet);
    args.extend(online.iter().map(String::as_str));
    run(&tool, &args)?;
    Ok(fleet.artifacts.join("tuf/metadata/1.root.json"))
}

/// The key file of `role` that [`sign`] makes under `<fleet>/keys`.
fn key(fleet: &Fleet, role: &str) -> String {
    fleet
        .path()
        .join("keys")
        .join(format!("{role}.pk8"))
        .display()
        .to_string()
}

/// `--key` for each online role (targets, snapshot, timestamp): what signs a new
/// targets version.
fn online_key_args(fleet: &Fleet) -> Vec<String> {
    ["targets", "snapshot", "timestamp"]
        .into_iter()
        .flat_map(|role| ["--key".to_string(), key(fleet, role)])
        .collect()
}

/// Sets the signed minimum version of release `line` (e.g. "1") to `version` with the
/// keys [`sign`] made: the release keys revoke every version of the line below it. The
/// fleet's trace carries it from now on, whichever ternd knows of it.
pub fn minimum(fleet: &Fleet, line: &str, version: &str) -> anyhow::Result<()> {
    let tool = fleet.bins.tern_release()?;
    let repo = fleet.artifacts.join("tuf").display().to_string();
    let mut args = vec![
        "minimum",
        "--repo",
        &repo,
        "--line",
        line,
        "--version",
        version,
    ];
    let online = online_key_args(fleet);
    args.extend(online.iter().map(String::as_str));
    run(&tool, &args)?;
    fleet.signed_minimum(line, version);
    Ok(())
}

/// Starts a replica of `fleet` ([`Fleet::add_replica`]) verifying with the release
/// root `root` ([`sign`]'s) against the fleet's repository: the signed minimums it
/// reads at its start hold on every path it serves. Its index in `fleet.replicas`.
pub fn verifying_replica(fleet: &mut Fleet, root: &std::path::Path) -> anyhow::Result<usize> {
    let meta = fleet.artifacts.join("tuf/metadata").display().to_string();
    let root = root.display().to_string();
    fleet.add_replica(&["--trust-root", &root, "--trust-url", &meta])
}

/// Signs every release of the fleet.
pub fn sign_all(fleet: &Fleet) -> anyhow::Result<PathBuf> {
    let versions: Vec<&str> = fleet.releases.iter().map(|r| r.version.as_str()).collect();
    sign(fleet, &versions)
}

/// An artifact replaced on the artifact server (its `.sha256` rewritten to match),
/// until [`Tampered::undo`].
pub struct Tampered {
    path: PathBuf,
    original: Vec<u8>,
    sum: PathBuf,
    original_sum: Vec<u8>,
}

/// Flips the last byte of `version`'s tarball and rewrites its `.sha256`.
pub fn tamper(fleet: &Fleet, version: &str) -> anyhow::Result<Tampered> {
    tamper_named(fleet, &artifact_name(version))
}

/// [`tamper`] for an updater release.
pub fn tamper_updater(fleet: &Fleet, version: &str) -> anyhow::Result<Tampered> {
    tamper_named(fleet, &crate::updater::artifact_name(version))
}

fn tamper_named(fleet: &Fleet, name: &str) -> anyhow::Result<Tampered> {
    use sha2::{Digest, Sha256};
    let path = fleet.artifacts.join(name);
    let sum = path.with_extension("gz.sha256");
    let original =
        std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let original_sum = std::fs::read(&sum).unwrap_or_default();
    let mut evil = original.clone();
    if let Some(b) = evil.last_mut() {
        *b ^= 0xff;
    }
    let hex = crate::release::hex(&Sha256::digest(&evil));
    std::fs::write(&path, &evil)?;
    std::fs::write(&sum, format!("{hex}  {name}\n"))?;
    Ok(Tampered {
        path,
        original,
        sum,
        original_sum,
    })
}

impl Tampered {
    pub fn undo(self) -> anyhow::Result<()> {
        std::fs::write(&self.path, &self.original)?;
        std::fs::write(&self.sum, &self.original_sum)?;
        Ok(())
    }
}
