//! One release binary, three releases: the version and brokenness set at packaging
//! time (files `VERSION` and `BROKEN` in the release's top directory), as quickstart
//! 2.4 packs them. The real binary is copied into release trees and run from there,
//! also through a symlink as tern-update's link dir runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tern-demo-agent");

/// `top/bin/tern-demo-agent`, a copy of the built binary, with `VERSION` = `version`.
fn package(top: &Path, version: &str, broken: bool) -> PathBuf {
    std::fs::create_dir_all(top.join("bin")).unwrap();
    let exe = top.join("bin/tern-demo-agent");
    std::fs::copy(BIN, &exe).unwrap();
    std::fs::write(top.join("VERSION"), format!("{version}\n")).unwrap();
    if broken {
        std::fs::write(top.join("BROKEN"), "").unwrap();
    }
    exe
}

#[test]
fn the_version_and_brokenness_are_set_when_packaging() {
    let tmp = tempfile::tempdir().unwrap();
    for v in ["1.0.0", "1.1.0"] {
        let exe = package(&tmp.path().join(format!("tern-agent-{v}")), v, false);
        let out = Command::new(&exe).arg("--version").output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("tern-demo-agent {v}")
        );
    }
    // Through a link, as from tern-update's link dir: the release is where it points.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(
        tmp.path().join("tern-agent-1.1.0/bin/tern-demo-agent"),
        &link,
    )
    .unwrap();
    let out = Command::new(&link).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tern-demo-agent 1.1.0"
    );

    // Broken: it crashes on start, and says which version.
    let exe = package(&tmp.path().join("tern-agent-1.2.0"), "1.2.0", true);
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let out = Command::new(&exe).arg(&state).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tern-demo-agent 1.2.0: cannot read its configuration"),
        "{err}"
    );
    assert!(!state.join("running_version").exists());
}
