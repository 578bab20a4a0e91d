//! `apply`: tern-update (release build, `--insecure`, the command service manager with
//! a trivial shell agent) installing a 100 MB artifact from a loopback server, against
//! `curl -s URL | tee >(sha256sum) | tar xz` into the same kind of directory in the
//! same run; its peak RSS; a rollback to a version already present; the binary size.
//! With signed releases (TUF): a second host with a pinned root installs the same
//! versions in the same rounds (the ratio of its time to the unsigned host's is TUF's
//! overhead), and `tern-release verify` times a full metadata refresh of a repository
//! of 1,000 targets against one of 1 target.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use rand_core::{RngCore, SeedableRng};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Opts, median, procs};

pub fn run(opts: &Opts) -> anyhow::Result<serde_json::Value> {
    let mib: usize = if opts.quick { 8 } else { 100 };
    let rounds = if opts.quick { 1 } else { 3 };
    let work = tempfile::Builder::new()
        .prefix("tern-bench-apply")
        .tempdir()?;
    let art = work.path().join("artifacts");
    std::fs::create_dir_all(&art)?;
    let server = ArtifactServer::start(&art)?;

    // Versions: 1.0.0 is small (enrolment), then one big version per round.
    let mut blob = vec![0u8; mib << 20];
    rand_chacha::ChaCha8Rng::seed_from_u64(7).fill_bytes(&mut blob);
    publish(&art, "1.0.0", &[])?;
    let mut artifact_bytes = 0;
    for r in 0..rounds {
        artifact_bytes = publish(&art, &format!("1.{}.0", r + 1), &blob)?;
    }
    drop(blob);
    eprintln!("artifact: {:.1} MB", artifact_bytes as f64 / 1e6);

    // The signed repository beside the artifacts, made by the real tern-release (built
    // with ternd; tern-update may come from the `updater` profile's directory).
    let tool = opts.ternd.with_file_name("tern-release");
    let signing = Signing::init(&tool, work.path(), &art.join("tuf"))?;
    let manifest: Vec<(PathBuf, String)> = (0..=rounds)
        .map(|r| {
            let v = format!("1.{r}.0");
            (art.join(ArtifactServer::name(&v)), v)
        })
        .collect();
    signing.add(&manifest)?;

    let host = Host::new(work.path(), &opts.tern_update)?;
    let signed_root = work.path().join("signed");
    std::fs::create_dir_all(&signed_root)?;
    let signed = Host::new(&signed_root, &opts.tern_update)?;
    server.set_target("1.0.0");
    let out = host.cmd(&[
        "enable",
        "--server",
        &server.url,
        "--base-url",
        &format!("{}/artifacts", server.url),
        "--service-config",
        &host.service.to_string_lossy(),
    ]);
    let (_, ok, _, text) = procs::run_measured(out)?;
    if !ok {
        bail!("tern-update enable failed:\n{text}");
    }
    let root = signing.root();
    let out = signed.cmd(&[
        "enable",
        "--server",
        &server.url,
        "--base-url",
        &format!("{}/artifacts", server.url),
        "--service-config",
        &signed.service.to_string_lossy(),
        "--trust-root",
        &root.to_string_lossy(),
    ]);
    let (_, ok, _, text) = procs::run_measured(out)?;
    if !ok {
        bail!("tern-update enable --trust-root failed:\n{text}");
    }
    let mut s_walls = Vec::new();

    let mut t_walls = Vec::new();
    let mut b_walls = Vec::new();
    let mut peak = 0u64;
    let mut rollbacks = Vec::new();
    for r in 0..rounds {
        let v = format!("1.{}.0", r + 1);
        let url = format!("{}/artifacts/{}", server.url, ArtifactServer::name(&v));
        // Baseline: the shell pipeline into a fresh directory beside the versions.
        let dest = host.install.join(format!("baseline-{r}"));
        std::fs::create_dir_all(&dest)?;
        let mut sh = Command::new("bash");
        sh.arg("-c").arg(format!(
            "set -o pipefail; curl -s {url} | tee >(sha256sum > {dest}/sum.txt) | tar xz -C {dest}",
            dest = dest.display()
        ));
        let (bw, ok, _, text) = procs::run_measured(sh)?;
        if !ok {
            bail!("the baseline pipeline failed:\n{text}");
        }
        std::fs::remove_dir_all(&dest)?;
        // tern-update to the big version.
        server.set_target(&v);
        let (tw, ok, hwm, text) = procs::run_measured(host.cmd(&["update", "--now"]))?;
        if !ok || !text.contains(&v) {
            bail!("tern-update update to {v} failed:\n{text}");
        }
        eprintln!(
            "round {r}: curl|tee|tar {:.3} s, tern-update {:.3} s (peak RSS {:.1} MB)",
            bw.as_secs_f64(),
            tw.as_secs_f64(),
            hwm as f64 / 1e6
        );
        // The pinned host: the same version, the same download, through TUF.
        let (sw, ok, _, text) = procs::run_measured(signed.cmd(&["update", "--now"]))?;
        if !ok || !text.contains("is signed by the release keys") {
            bail!("the pinned host's update to {v} failed or was not verified:\n{text}");
        }
        eprintln!(
            "round {r}: pinned host (TUF) {:.3} s ({:.3} x the unsigned host)",
            sw.as_secs_f64(),
            sw.as_secs_f64() / tw.as_secs_f64()
        );
        s_walls.push(sw.as_secs_f64());
        b_walls.push(bw.as_secs_f64());
        t_walls.push(tw.as_secs_f64());
        peak = peak.max(hwm);
        // Rollback to the version before (present on disk as the backup).
        let prev = format!("1.{r}.0");
        server.set_target(&prev);
        let (rw, ok, _, text) = procs::run_measured(host.cmd(&["update", "--now"]))?;
        if !ok || !text.contains("already unpacked") {
            bail!("tern-update back to {prev} failed or downloaded:\n{text}");
        }
        rollbacks.push(rw.as_secs_f64() * 1000.0);
        eprintln!(
            "round {r}: back to {prev} in {:.1} ms",
            rw.as_secs_f64() * 1000.0
        );
        // Forward again so the next round starts from a big version's neighbour.
        server.set_target(&v);
        let (_, ok, _, text) = procs::run_measured(host.cmd(&["update", "--now"]))?;
        if !ok {
            bail!("tern-update forward to {v} failed:\n{text}");
        }
    }
    let agent_start_ms = host.agent_start_ms()?;
    host.stop_agent();
    signed.stop_agent();
    let tuf_ratios: Vec<f64> = s_walls.iter().zip(&t_walls).map(|(s, t)| s / t).collect();
    let tuf_ratio = median(tuf_ratios);
    let s_median = median(s_walls);
    let (refresh_1000, refresh_1) =
        refresh_bench(&tool, work.path(), if opts.quick { 3 } else { 9 })?;
    let (t, b) = (median(t_walls), median(b_walls));
    let rollback_ms = median(rollbacks);
    let size = procs::file_size(&opts.tern_update);
    let ratio = t / b;
    let rollback_excl = (rollback_ms - agent_start_ms).max(0.0);
    Ok(json!({
        "bench": "apply",
        "quick": opts.quick,
        "artifact_bytes": artifact_bytes,
        "tern_update_s": t,
        "baseline_s": b,
        "ratio": (ratio * 1000.0).round() / 1000.0,
        "ratio_target": 1.1,
        "ratio_met": ratio <= 1.1,
        "peak_rss_bytes": peak,
        "peak_rss_target_bytes": 25 * 1000 * 1000,
        "peak_rss_met": peak <= 25 * 1000 * 1000,
        "rollback_ms": rollback_ms,
        "agent_start_ms": agent_start_ms,
        "rollback_excluding_agent_start_ms": rollback_excl,
        "rollback_target_ms": 50,
        "rollback_met": rollback_excl <= 50.0,
        "tuf_tern_update_s": s_median,
        "tuf_ratio": (tuf_ratio * 1000.0).round() / 1000.0,
        "tuf_ratio_target": 1.05,
        "tuf_ratio_met": tuf_ratio <= 1.05,
        "tuf_refresh_1000_targets_ms": refresh_1000,
        "tuf_refresh_1_target_ms": refresh_1,
        "tuf_refresh_target_ms": 50,
        "tuf_refresh_met": refresh_1000 <= 50.0,
        "binary_bytes": size,
        "binary_target_bytes": 10 * 1000 * 1000,
        "binary_met": size <= 10 * 1000 * 1000,
        "loadavg": procs::loadavg(),
    }))
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Writes `<name>.tar.gz` and `.sha256` for `version`: a shell agent plus `blob`.
fn publish(dir: &Path, version: &str, blob: &[u8]) -> anyhow::Result<u64> {
    let path = dir.join(ArtifactServer::name(version));
    let file = std::fs::File::create(&path)?;
    let enc =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::fast());
    let mut b = tar::Builder::new(enc);
    let script = format!(
        "#!/bin/sh\n# bench agent {version}\necho $$ > \"$1/agent.pid\"\nexec sleep 100000\n"
    );
    for (name, data, mode) in [
        ("agent/bin/tern-agent", script.as_bytes(), 0o755),
        ("agent/share/blob", blob, 0o644),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data)?;
    }
    b.into_inner()?.finish()?.flush()?;
    let bytes = std::fs::read(&path)?;
    let sum: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(
        path.with_extension("gz.sha256"),
        format!("{sum}  artifact.tar.gz\n"),
    )?;
    Ok(bytes.len() as u64)
}

/// A sandboxed host for tern-update.
struct Host {
    bin: PathBuf,
    root: PathBuf,
    install: PathBuf,
    state: PathBuf,
    service: PathBuf,
}

impl Host {
    fn new(root: &Path, bin: &Path) -> anyhow::Result<Self> {
        let state = root.join("state");
        std::fs::create_dir_all(&state)?;
        let link = root.join("bin");
        let (s, l) = (state.display(), link.display());
        let yaml = format!(
            "manager: command\nname: tern-agent\n\
             start: \"setsid {l}/tern-agent {s} </dev/null >/dev/null 2>&1 & echo $! > {s}/agent.pgid\"\n\
             stop: \"p=$(cat {s}/agent.pgid 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) kill -s KILL -- -$p 2>/dev/null;; esac; rm -f {s}/agent.pid; true\"\n\
             pid_file: {s}/agent.pid\nhealth_timeout: 5\nhealth_interval: 0.01\nstable_ticks: 3\nmax_restarts: 3\n"
        );
        let service = root.join("service.yaml");
        std::fs::write(&service, yaml)?;
        Ok(Self {
            bin: bin.to_path_buf(),
            root: root.to_path_buf(),
            install: root.join("opt"),
            state,
            service,
        })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--install-dir")
            .arg(&self.install)
            .arg("--link-dir")
            .arg(self.root.join("bin"))
            .arg("--unit-dir")
            .arg(self.root.join("units"))
            .arg("--systemd-dir")
            .arg(self.root.join("systemd"))
            .arg("--insecure")
            .args(args);
        c
    }

    /// How long the agent itself takes to start (the `start` command until its PID
    /// file exists), timed outside tern-update: what a rollback cannot avoid.
    fn agent_start_ms(&self) -> anyhow::Result<f64> {
        self.stop_agent();
        let mut runs = Vec::new();
        for _ in 0..5 {
            let _ = std::fs::remove_file(self.state.join("agent.pid"));
            let s = self.state.display();
            let l = self.root.join("bin");
            let t = Instant::now();
            let status = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "setsid {}/tern-agent {s} </dev/null >/dev/null 2>&1 & echo $! > {s}/agent.pgid",
                    l.display()
                ))
                .status()?;
            if !status.success() {
                bail!("starting the agent by hand failed");
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while !self.state.join("agent.pid").exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
            runs.push(t.elapsed().as_secs_f64() * 1000.0);
            self.stop_agent();
        }
        Ok(median(runs))
    }

    /// Kills the agent's process group (by its recorded id; never by name).
    fn stop_agent(&self) {
        let pgid = std::fs::read_to_string(self.state.join("agent.pgid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|p| *p > 1)
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pgid) = pgid {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop_agent();
    }
}

/// A loopback HTTP/1.1 server: find (with a settable target), heartbeats, and files
/// from a directory under `/artifacts/` (streamed, with HEAD).
struct ArtifactServer {
    url: String,
    find: Arc<Mutex<Vec<u8>>>,
}

impl ArtifactServer {
    fn name(version: &str) -> String {
        format!("tern-agent-v{version}-linux-{}-bin.tar.gz", go_arch())
    }

    fn start(dir: &Path) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let find = Arc::new(Mutex::new(Vec::new()));
        let (f, d) = (Arc::clone(&find), dir.to_path_buf());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (f, d) = (Arc::clone(&f), d.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &f, &d);
                });
            }
        });
        Ok(Self { url, find })
    }

    fn set_target(&self, version: &str) {
        let body = json!({
            "edition": "community", "fips": false, "server_version": "bench",
            "auto_update": {"agent_version": version, "agent_auto_update": true,
                            "agent_update_jitter_seconds": 0,
                            "tools_version": "", "tools_auto_update": false}
        });
        *self.find.lock().unwrap_or_else(|p| p.into_inner()) = body.to_string().into_bytes();
    }
}

fn serve(conn: TcpStream, find: &Mutex<Vec<u8>>, dir: &Path) -> anyhow::Result<()> {
    // A reply is written in pieces (status line, headers, body): without this, Nagle's
    // algorithm holds the body until the client's delayed ACK, 40 ms later.
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        let path = target.split('?').next().unwrap_or("");
        let head = method == "HEAD";
        let reply = |conn: &mut TcpStream, code: u16, ctype: &str, n: u64| {
            write!(
                conn,
                "HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {n}\r\n\r\n"
            )
        };
        if path == "/v1/webapi/find" {
            let b = find.lock().unwrap_or_else(|p| p.into_inner()).clone();
            reply(&mut conn, 200, "application/json", b.len() as u64)?;
            conn.write_all(&b)?;
        } else if path == "/v1/agents/heartbeat" {
            let b = br#"{"next_heartbeat_seconds":60}"#;
            reply(&mut conn, 200, "application/json", b.len() as u64)?;
            conn.write_all(b)?;
        } else if let Some(name) = path.strip_prefix("/artifacts/")
            && name
                .split('/')
                .all(|seg| !seg.is_empty() && !seg.starts_with('.'))
            && let Ok(mut f) = std::fs::File::open(dir.join(name))
        {
            let n = f.metadata()?.len();
            reply(&mut conn, 200, "application/octet-stream", n)?;
            if !head {
                std::io::copy(&mut f, &mut conn)?;
            }
        } else {
            reply(&mut conn, 404, "text/plain", 9)?;
            if !head {
                conn.write_all(b"not found")?;
            }
        }
        conn.flush()?;
    }
}

/// Keys and a repository made with the `tern-release` binary.
struct Signing {
    tool: PathBuf,
    repo: PathBuf,
    keys: [PathBuf; 4],
}

impl Signing {
    fn init(tool: &Path, work: &Path, repo: &Path) -> anyhow::Result<Self> {
        let dir = work.join("keys");
        std::fs::create_dir_all(&dir)?;
        let keys =
            ["root", "targets", "snapshot", "timestamp"].map(|n| dir.join(format!("{n}.pk8")));
        let s = Self {
            tool: tool.to_path_buf(),
            repo: repo.to_path_buf(),
            keys,
        };
        let k: Vec<String> = s.keys.iter().map(|p| p.display().to_string()).collect();
        s.run(&["keygen", &k[0], &k[1], &k[2], &k[3]])?;
        let r = s.repo.display().to_string();
        s.run(&[
            "init",
            "--repo",
            &r,
            "--root-key",
            &k[0],
            "--targets-key",
            &k[1],
            "--snapshot-key",
            &k[2],
            "--timestamp-key",
            &k[3],
        ])?;
        Ok(s)
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.tool).args(args).output()?;
        if !out.status.success() {
            bail!(
                "{} {args:?} failed:\n{}",
                self.tool.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Signs (file, version) pairs for this machine's arch in one targets version.
    fn add(&self, files: &[(PathBuf, String)]) -> anyhow::Result<()> {
        let manifest = self.repo.with_extension("manifest");
        let text: String = files
            .iter()
            .map(|(f, v)| format!("{} {v} {}\n", f.display(), go_arch()))
            .collect();
        std::fs::write(&manifest, text)?;
        let (m, r) = (
            manifest.display().to_string(),
            self.repo.display().to_string(),
        );
        let k: Vec<String> = self.keys.iter().map(|p| p.display().to_string()).collect();
        self.run(&[
            "add",
            "--repo",
            &r,
            "--manifest",
            &m,
            "--key",
            &k[1],
            "--key",
            &k[2],
            "--key",
            &k[3],
        ])?;
        Ok(())
    }

    fn root(&self) -> PathBuf {
        self.repo.join("metadata/1.root.json")
    }

    /// `tern-release verify` from the root with a fresh state: the whole chain, as a
    /// host's first refresh. The refresh's own time, in ms.
    fn refresh_ms(&self, state: &Path) -> anyhow::Result<f64> {
        let _ = std::fs::remove_file(state);
        let meta = self.repo.join("metadata").display().to_string();
        let out = self.run(&[
            "verify",
            "--root",
            &self.root().display().to_string(),
            "--metadata",
            &meta,
            "--state",
            &state.display().to_string(),
            "--json",
        ])?;
        let v: serde_json::Value = serde_json::from_str(out.trim())?;
        v["refresh_ms"]
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("no refresh_ms in {out}"))
    }
}

/// Median full refresh of a repository of 1,000 targets and of one of 1 target, same run.
fn refresh_bench(tool: &Path, work: &Path, runs: usize) -> anyhow::Result<(f64, f64)> {
    let files = work.join("refresh-files");
    std::fs::create_dir_all(&files)?;
    let mut list = Vec::new();
    for i in 0..1000 {
        let f = files.join(format!(
            "tern-agent-v3.{i}.0-linux-{}-bin.tar.gz",
            go_arch()
        ));
        std::fs::write(&f, format!("artifact {i}").repeat(64))?;
        list.push((f, format!("3.{i}.0")));
    }
    let big_dir = work.join("refresh-1000");
    std::fs::create_dir_all(&big_dir)?;
    let big = Signing::init(tool, &big_dir, &big_dir.join("repo"))?;
    big.add(&list)?;
    let small_dir = work.join("refresh-1");
    std::fs::create_dir_all(&small_dir)?;
    let small = Signing::init(tool, &small_dir, &small_dir.join("repo"))?;
    small.add(&list[..1])?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(big.refresh_ms(&work.join("state-1000.json"))?);
        b.push(small.refresh_ms(&work.join("state-1.json"))?);
    }
    let (a, b) = (median(a), median(b));
    eprintln!("full metadata refresh: 1,000 targets {a:.1} ms, 1 target {b:.1} ms");
    Ok((a, b))
}
