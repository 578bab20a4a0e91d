//! Finding (and if needed building) `ternd`, `ternctl` and `tern-update`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, bail};

/// The three programs under test.
#[derive(Clone, Debug)]
pub struct Bins {
    pub ternd: PathBuf,
    pub ternctl: PathBuf,
    pub tern_update: PathBuf,
    /// The directory holding them (a cargo profile dir such as `target/debug`).
    pub dir: PathBuf,
}

/// The workspace root (this crate lives in `crates/tern-e2e`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

/// The cargo profile dir of the running executable: `target/debug` for a test binary in
/// `target/debug/deps`, or for `target/debug/xtask`.
pub fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the running executable")?;
    let mut dir = exe
        .parent()
        .map(Path::to_path_buf)
        .context("the running executable has no directory")?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

static BUILD: Mutex<()> = Mutex::new(());

impl Bins {
    /// The binaries in `dir`; an error names what is missing.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        let b = Self::at(dir);
        if !b.all_present() {
            bail!("{} lacks ternd, ternctl or tern-update", dir.display());
        }
        Ok(b)
    }

    fn at(dir: &Path) -> Self {
        Self {
            ternd: dir.join("ternd"),
            ternctl: dir.join("ternctl"),
            tern_update: dir.join("tern-update"),
            dir: dir.to_path_buf(),
        }
    }

    fn all_present(&self) -> bool {
        [&self.ternd, &self.ternctl, &self.tern_update]
            .iter()
            .all(|p| p.is_file())
    }

    /// `TERN_E2E_BIN_DIR` if set; else the profile dir of the running executable,
    /// building the three binaries there with `cargo build` when one is missing.
    ///
    /// Binaries that are present are used as they are (a workspace test run builds
    /// them, with the features it enables; rebuilding here could swap a binary under
    /// another crate's running tests). Build them first when you change their code.
    pub fn locate() -> anyhow::Result<Self> {
        if let Some(dir) = std::env::var_os("TERN_E2E_BIN_DIR") {
            return Self::in_dir(Path::new(&dir)).context("TERN_E2E_BIN_DIR");
        }
        let dir = profile_dir()?;
        let b = Self::at(&dir);
        if b.all_present() {
            return Ok(b);
        }
        let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
        if b.all_present() {
            return Ok(b);
        }
        build(&dir)?;
        if !b.all_present() {
            bail!(
                "cargo build succeeded but {} still lacks ternd, ternctl or tern-update",
                dir.display()
            );
        }
        Ok(b)
    }
}

impl Bins {
    /// `tern-release` (the release owners' signing tool) beside the others, built with
    /// `cargo build -p tern-release` when missing: only the signed-release tests and the
    /// demo need it.
    pub fn tern_release(&self) -> anyhow::Result<PathBuf> {
        let path = self.dir.join("tern-release");
        if path.is_file() {
            return Ok(path);
        }
        let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
        if path.is_file() {
            return Ok(path);
        }
        let target = self.dir.parent().context("the profile dir has no parent")?;
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.current_dir(workspace_root())
            .args([
                "build",
                "--quiet",
                "--bin",
                "tern-release",
                "-p",
                "tern-release",
            ])
            .env("CARGO_TARGET_DIR", target);
        if self.dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        if !status.success() || !path.is_file() {
            bail!("{cmd:?} failed ({status})");
        }
        Ok(path)
    }
}

/// `cargo build -p tern-server -p tern-ctl -p tern-update --bins` into the target dir
/// that holds `profile_dir`.
pub fn build(profile_dir: &Path) -> anyhow::Result<()> {
    let target = profile_dir
        .parent()
        .context("the profile dir has no parent")?;
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "--bins"])
        .args(["-p", "tern-server", "-p", "tern-ctl", "-p", "tern-update"])
        .env("CARGO_TARGET_DIR", target);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}
