//! Starting a real `ternd` for a benchmark: dev clock, plain HTTP, no rate limits, the
//! example rollout (`examples/01-halt-on-error`) in place with `dev` active.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::load::request;
use crate::procs::Server;

pub const CONFIG: &str = include_str!("../../../examples/01-halt-on-error/config.yaml");
pub const VERSION: &str = include_str!("../../../examples/01-halt-on-error/version.yaml");

pub struct Ternd {
    pub server: Server,
    pub token: String,
    _dir: tempfile::TempDir,
}

impl Ternd {
    /// Starts ternd on a free loopback port with the per-address limits off, and puts the
    /// example rollout in place: created Monday 11:00 UTC, reconciled at 12:05 so that
    /// `dev` is active (find answers `1.1.0`, update now, for dev).
    pub fn start(bin: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_cmd(Command::new(bin), extra)
    }

    /// As [`start`](Self::start), with `cmd` running ternd (e.g. under valgrind: the
    /// `start` arguments are appended).
    pub fn start_cmd(mut cmd: Command, extra: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        cmd.arg("start")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0", "--insecure-http"])
            .args(["--dev-clock", "2026-11-23T11:00:00Z"])
            .args(["--find-rate", "0", "--heartbeat-rate", "0"])
            .args(["--log", "warn"])
            .args(extra);
        let server = Server::spawn(cmd)?;
        server.wait_ready("/readyz")?;
        let token = std::fs::read_to_string(dir.path().join("operator.token"))
            .context("reading the operator token")?
            .trim()
            .to_string();
        let t = Self {
            server,
            token,
            _dir: dir,
        };
        t.call("POST", "/v1/resources/config", CONFIG.as_bytes())?;
        t.call("POST", "/v1/resources/version", VERSION.as_bytes())?;
        t.call("POST", "/v1/dev/reconcile", b"")?;
        t.call(
            "POST",
            "/v1/dev/clock",
            br#"{"set":"2026-11-23T12:05:00Z"}"#,
        )?;
        t.call("POST", "/v1/dev/reconcile", b"")?;
        Ok(t)
    }

    /// An authenticated call that must succeed; returns the body.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
        let (status, resp) = request(self.server.addr, method, path, Some(&self.token), body)?;
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path}: {status} {}",
                String::from_utf8_lossy(&resp)
            );
        }
        Ok(resp)
    }

    pub fn pid(&self) -> u32 {
        self.server.pid()
    }
}
