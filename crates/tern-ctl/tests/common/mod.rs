//! The binaries ternctl's tests run: ternctl itself, and the real ternd beside it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn ternctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ternctl"))
}

/// ternd sits beside ternctl in the same target dir; build it if it is not there.
pub fn ternd() -> PathBuf {
    let bin = ternctl().with_file_name("ternd");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "tern-server", "--bin", "ternd"])
            .status()
            .expect("cargo build ternd");
        assert!(status.success(), "building ternd failed");
    }
    assert!(bin.exists(), "no ternd at {}", bin.display());
    bin
}
