//! Driving ternd's dashboard in a real browser: a real `ternd` process (plain HTTP on
//! a loopback port it picks, SQLite in a temp dir, a dev clock), Debian's
//! `chromedriver` on a free port and headless `chromium` through it (WebDriver, with
//! `fantoccini`). Used by `tests/dashboard.rs` and by the benchmark binary
//! (`cargo xtask bench dashboard`). This crate is the only one that links a WebDriver
//! client: nothing else compiles it.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A ternd process, stopped on drop.
pub struct Ternd {
    child: Child,
    pub url: String,
    /// The operator token it printed at its first start.
    pub token: String,
}

impl Ternd {
    /// `ternd start --insecure-http --listen 127.0.0.1:0 --data-dir DIR EXTRA…`, waiting
    /// until it answers `/readyz`.
    pub fn start(bin: &Path, dir: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        let log = std::fs::File::create(dir.with_extension("log"))
            .with_context(|| format!("creating {}", dir.with_extension("log").display()))?;
        let mut child = Command::new(bin)
            .args(["start", "--insecure-http", "--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let out = child.stdout.take().context("ternd's stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .context("ternd did not print its address")?;
            if let Some(addr) = line.strip_prefix("ternd listening on ") {
                break addr.trim().to_string();
            }
        };
        let token = std::fs::read_to_string(dir.join("operator.token"))
            .context("reading operator.token")?
            .trim()
            .to_string();
        let t = Self { child, url, token };
        let deadline = Instant::now() + Duration::from_secs(30);
        while t.call("GET", "/readyz", None, None)?.0 != 200 {
            if Instant::now() > deadline {
                bail!("ternd never became ready");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    /// (status, JSON body or the text as a JSON string).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let req = req.body(body.unwrap_or("").to_string())?;
        let mut resp = agent.run(req).with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }

    /// As the operator; an error unless 2xx.
    pub fn op(&self, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Value> {
        let (s, v) = self.call(method, path, Some(&self.token), body)?;
        if !(200..300).contains(&s) {
            bail!("{method} {path}: {s} {v}");
        }
        Ok(v)
    }

    pub fn new_token(&self, role: &str) -> anyhow::Result<String> {
        let v = self.op(
            "POST",
            "/v1/tokens",
            Some(&serde_json::json!({ "role": role }).to_string()),
        )?;
        v["token"]
            .as_str()
            .map(str::to_string)
            .context("no token in the answer")
    }
}

impl Drop for Ternd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ternd binary of this build (`tern_e2e::bins`: the profile dir's, built when
/// missing; `TERN_E2E_BIN_DIR` overrides).
pub fn ternd_bin() -> anyhow::Result<PathBuf> {
    Ok(tern_e2e::bins::Bins::locate()?.ternd)
}

/// Whether Debian's chromium and chromedriver are installed (`cargo xtask ci`
/// installs them).
pub fn browser_installed() -> bool {
    Path::new(CHROMIUM).is_file() && Path::new(CHROMEDRIVER).is_file()
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// chromedriver and one headless chromium session through it; both stopped on drop
/// (call [`Browser::close`] to end the session cleanly first).
pub struct Browser {
    driver: Child,
    pub client: fantoccini::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> anyhow::Result<Self> {
        if !browser_installed() {
            bail!(
                "{CHROMIUM} or {CHROMEDRIVER} is missing: apt-get install chromium chromium-driver (cargo xtask ci does)"
            );
        }
        let port = free_port()?;
        // Its own process group: chromium runs as chromedriver's child, and a killed
        // chromedriver leaves it running; the group is killed whole (`stop_driver`).
        let mut driver = Command::new(CHROMEDRIVER)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting chromedriver")?;
        let url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir()?;
        let caps: serde_json::Map<String, Value> = serde_json::from_value(serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let http = hyper_util::client::legacy::connect::HttpConnector::new();
            match fantoccini::ClientBuilder::new(http)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = driver.try_wait() {
                        bail!("chromedriver exited ({status}): {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    stop_driver(&mut driver);
                    bail!("no WebDriver session on {url}: {e}");
                }
            }
        };
        Ok(Self {
            driver,
            client,
            _profile: profile,
        })
    }

    /// Runs `script` (a function body returning a value) until it returns something
    /// truthy, for at most `timeout`; returns that value.
    pub async fn wait_js(
        &self,
        what: &str,
        script: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self
                .client
                .execute(script, vec![])
                .await
                .with_context(|| format!("running the check for {what}"))?;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let png = self.client.screenshot().await?;
        if !png.starts_with(b"\x89PNG") {
            bail!("the browser's screenshot is not a PNG");
        }
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    pub async fn close(mut self) -> anyhow::Result<()> {
        let r = self.client.clone().close().await;
        stop_driver(&mut self.driver);
        r.context("closing the WebDriver session")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        stop_driver(&mut self.driver);
    }
}

/// Kills chromedriver's process group (chromedriver and the chromium it started, even
/// when a test failed before closing its session), then reaps chromedriver.
fn stop_driver(driver: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", driver.id())])
        .status();
    let _ = driver.kill();
    let _ = driver.wait();
}
