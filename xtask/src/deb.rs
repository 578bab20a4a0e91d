//! The names of the .deb packages that `dist` builds and `dist_check` checks: their
//! version and architecture. A leaf, so that the two modules need only it, not each
//! other.

use std::process::Command;

/// The version of the packages: the workspace's, with Debian revision 1.
pub(crate) fn deb_version() -> String {
    format!("{}-1", env!("CARGO_PKG_VERSION"))
}

/// Debian's name of this machine's architecture (`amd64`, `arm64`, `i386`, `armhf`): the
/// packages' `Architecture:` and file names only. The tarball and the installer's
/// binaries use the Go-style name (`tern_e2e::release::go_arch`: `386`, `arm`), which
/// ternd's `--downloads-dir` and `install.sh` expect.
pub(crate) fn architecture() -> Result<String, String> {
    let out = Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .map_err(|e| format!("cannot run dpkg --print-architecture: {e}"))?;
    let arch = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || arch.is_empty() {
        return Err("dpkg --print-architecture gave no architecture".into());
    }
    Ok(arch)
}
