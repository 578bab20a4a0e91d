//! A real ternd (dev clock) rolling out 1.0.0 → 1.1.0 to every group at once, an
//! agent token for the controller, and the digests file: what the controller's tests
//! run against, besides the stand-in API server.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tern_e2e::bins::Bins;
use tern_e2e::ternd::{Ctl, Ternd};

pub const REPO: &str = "registry.example/tern/agent";

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub ternd: Ternd,
    pub ctl: Ctl,
    pub token: String,
    pub token_file: PathBuf,
    pub digests: PathBuf,
}

/// The digest the digests file gives `REPO:1.1.0`.
pub fn digest() -> String {
    format!("sha256:{}", "a".repeat(64))
}

impl Env {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`Env::start`] with these further flags of `ternd start`.
    pub fn start_with(extra: &[&str]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let bins = Bins::locate().unwrap();
        let ternd = Ternd::start(
            &bins.ternd,
            &tmp.path().join("ternd"),
            "2026-11-23T09:00:00Z",
            extra,
        )
        .unwrap();
        let ctl = Ctl {
            bin: bins.ternctl.clone(),
            server: ternd.url.clone(),
            token_file: ternd.token_file.clone(),
        };
        let version = tmp.path().join("version.yaml");
        std::fs::write(
            &version,
            tern_core::fixtures::enabled_version("1.0.0", "1.1.0", "immediate"),
        )
        .unwrap();
        ctl.run(&["create", "--force", "-f", version.to_str().unwrap()])
            .unwrap();
        ctl.run(&["dev", "reconcile"]).unwrap();
        let token = ctl.agent_token("kubernetes").unwrap();
        let token_file = tmp.path().join("agent.token");
        std::fs::write(&token_file, &token).unwrap();
        let digests = tmp.path().join("digests.json");
        std::fs::write(
            &digests,
            serde_json::json!({format!("{REPO}:1.1.0"): digest()}).to_string(),
        )
        .unwrap();
        Self {
            tmp,
            ternd,
            ctl,
            token,
            token_file,
            digests,
        }
    }
}
