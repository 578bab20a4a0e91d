//! ternctl against the real ternd (found next to ternctl in the target dir, built if
//! missing): the seeds' `agents …` sessions, resources, tokens, channels, errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tern_testing::http::{HttpServer, Request, Response};

mod common;

use common::{ternctl, ternd};

struct Server {
    child: Child,
    url: String,
    token_file: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Server {
    start_with(dir, &["--insecure-http"])
}

/// ternd with `serving` (`--insecure-http`, or `--tls-cert … --tls-key …`).
fn start_with(dir: &Path, serving: &[&str]) -> Server {
    let log = std::fs::File::create(dir.with_extension("log")).unwrap();
    let mut child = Command::new(ternd())
        .arg("start")
        .args(serving)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--dev-clock",
            "2026-11-23T09:00:00Z",
            "--data-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let url = loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        if let Some(a) = line.strip_prefix("ternd listening on ") {
            break a.to_string();
        }
    };
    Server {
        child,
        url,
        token_file: dir.join("operator.token"),
    }
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn ctl(s: &Server, args: &[&str]) -> Out {
    ctl_with(s, &s.token_file, args)
}

fn ctl_with(s: &Server, token_file: &Path, args: &[&str]) -> Out {
    ctl_env(s, token_file, &[], args)
}

/// ternctl with `env` set besides the server and token (and no TERN_PRODUCT or
/// TERN_UPDATER_SERVER but those `env` sets).
fn ctl_env(s: &Server, token_file: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let out = Command::new(ternctl())
        .args(args)
        .env("TERN_SERVER", &s.url)
        .env("TERN_TOKEN_FILE", token_file)
        .env_remove("TERN_TOKEN")
        .env_remove("TERN_PRODUCT")
        .env_remove("TERN_UPDATER_SERVER")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(s: &Server, args: &[&str]) -> String {
    let o = ctl(s, args);
    assert!(o.ok, "ternctl {args:?} failed: {}{}", o.stdout, o.stderr);
    o.stdout
}

fn heartbeat(s: &Server, agent: &str, id: &str, group: &str, version: &str) {
    let agent_http: ureq::Agent = ureq::Agent::config_builder().build().into();
    agent_http
        .post(format!("{}/v1/agents/heartbeat", s.url))
        .header("Authorization", format!("Bearer {agent}"))
        .send_json(serde_json::json!({
            "updater_id": id, "hostname": format!("{id}.example"), "group": group, "version": version,
        }))
        .unwrap();
}

/// halt-on-error over dev (10h), staging (12h), prod (14h), every day.
fn config() -> String {
    tern_core::fixtures::dev_staging_prod(0)
}

#[test]
fn agents_session_reads_like_the_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, config()).unwrap();

    let out = ok(&s, &["agents", "status"]);
    assert!(out.contains("No rollout."), "{out}");

    let out = ok(&s, &["create", "-f", cfg.to_str().unwrap()]);
    assert!(
        out.starts_with("autoupdate_config created (revision"),
        "{out}"
    );
    let o = ctl(&s, &["create", "-f", cfg.to_str().unwrap()]);
    assert!(!o.ok && o.stderr.contains("already exists"), "{}", o.stderr);
    ok(&s, &["create", "-f", cfg.to_str().unwrap(), "--force"]);

    let out = ok(
        &s,
        &[
            "agents",
            "new-rollout",
            "v1.1.0",
            "--current-version",
            "1.0.0",
        ],
    );
    assert_eq!(out.trim(), "created new rollout from 1.0.0 to 1.1.0");

    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"]);
    let agent = agent.trim();
    assert!(agent.starts_with("tern_"));
    let fleet = [
        ("d1", "dev"),
        ("d2", "dev"),
        ("s1", "staging"),
        ("p1", "prod"),
        ("x1", ""),
    ];
    for (id, g) in fleet {
        heartbeat(&s, agent, id, g, "1.0.0");
    }
    ok(&s, &["dev", "reconcile"]);
    let now = ok(&s, &["dev", "clock", "advance", "61m"]);
    assert_eq!(now.trim(), "2026-11-23T10:01:00Z");
    for (id, g) in fleet {
        heartbeat(&s, agent, id, g, "1.0.0");
    }
    ok(&s, &["dev", "reconcile"]);

    let out = ok(&s, &["agents", "status"]);
    assert!(
        out.contains("Rollout plan created the 2026-11-23 09:00 UTC"),
        "{out}"
    );
    assert!(out.contains("Previous version: 1.0.0"));
    assert!(out.contains("New version: 1.1.0"));
    assert!(out.contains("Status: enabled"));
    assert!(out.contains("Strategy: halt-on-error"));
    let header = out.lines().find(|l| l.starts_with("Group Name")).unwrap();
    for col in [
        "Status",
        "Update Start Time",
        "Reason",
        "Connected Agents",
        "Up-to-date agents",
        "Failed updates",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{out}"))
            .to_string()
    };
    let dev = row("dev");
    assert!(dev.contains("in progress (0%)"), "{dev}");
    assert!(dev.contains("2026-11-23 10:01"), "{dev}");
    assert!(row("staging").contains("not started"));
    let prod = row("prod*");
    assert!(prod.contains("previous_groups_not_done"), "{prod}");
    assert!(
        prod.split_whitespace().any(|w| w == "2"),
        "prod counts the group-less host: {prod}"
    );
    assert!(out.contains("* prod is the catch-all group"));

    // Fast-track staging, then the seeds' incident: suspend, rollback, resume.
    let out = ok(&s, &["agents", "start-update", "staging", "--no-canary"]);
    assert_eq!(out.trim(), "Group staging update triggered (active)");
    let out = ok(&s, &["agents", "suspend"]);
    assert!(out.starts_with("Automatic updates suspended\nNo existing agent will get updated."));
    let out = ok(&s, &["agents", "status"]);
    assert!(out.contains("Status: suspended"), "{out}");
    let out = ok(&s, &["agents", "rollback"]);
    assert!(out.contains("Rolledback groups: [dev, staging]"), "{out}");
    assert!(out.contains("Warning: the automatic agent updates are suspended."));
    assert!(out.contains("$> ternctl agents resume"));
    let out = ok(&s, &["agents", "status"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("dev ") && l.contains("rolledback"))
    );
    let out = ok(&s, &["agents", "resume"]);
    assert_eq!(out.trim(), "Automatic updates resumed");
    let out = ok(&s, &["agents", "mark-done", "dev"]);
    assert_eq!(out.trim(), "Groups marked done: [dev]");
    let out = ok(&s, &["agents", "force-done", "staging"]);
    assert_eq!(out.trim(), "Groups marked done: [staging]");

    // Refused: an unknown group, and nothing stored.
    let o = ctl(&s, &["agents", "start-update", "qa"]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("unknown group \"qa\"") && o.stderr.contains("404"),
        "{}",
        o.stderr
    );

    // The report: versions × groups, with the group-less host.
    let out = ok(&s, &["agents", "report"]);
    assert!(out.contains("by 1 replica:"), "{out}");
    let row = out.lines().find(|l| l.starts_with("1.0.0")).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["1.0.0", "2", "1", "1", "1", "5"],
        "dev, staging, prod (the rollout's order), (no group), total:\n{out}"
    );

    let out = ok(&s, &["inventory", "ls"]);
    assert!(out.starts_with("5 agents connected"), "{out}");
    assert!(out.contains("d1.example"));

    // Structured output everywhere.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&s, &["agents", "status", "-o", "json"])).unwrap();
    assert_eq!(v["rollout"]["status"]["groups"][0]["state"], "done");
    let y: serde_json::Value =
        serde_yaml_ng::from_str(&ok(&s, &["get", "rollout", "-o", "yaml"])).unwrap();
    assert_eq!(y["kind"], "autoupdate_agent_rollout");
    let y: serde_json::Value = serde_yaml_ng::from_str(&ok(&s, &["get", "config"])).unwrap();
    assert_eq!(y["spec"]["agents"]["mode"], "enabled");
    assert!(y["metadata"]["revision"].is_string());
    assert!(ok(&s, &["get", "reports"]).contains("autoupdate_agent_report"));
}

#[test]
fn roles_bad_files_and_channels() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));

    // A viewer reads but cannot write.
    let viewer = ok(&s, &["tokens", "create", "--role", "viewer"]);
    let vf = tmp.path().join("viewer.token");
    std::fs::write(&vf, viewer.trim()).unwrap();
    assert!(ctl_with(&s, &vf, &["agents", "status"]).ok);
    let o = ctl_with(&s, &vf, &["agents", "suspend"]);
    assert!(!o.ok && o.stderr.contains("403"), "{}", o.stderr);
    // A user cannot roll out a version.
    let user = ok(&s, &["tokens", "create", "--role", "user"]);
    let uf = tmp.path().join("user.token");
    std::fs::write(&uf, user.trim()).unwrap();
    let o = ctl_with(&s, &uf, &["agents", "new-rollout", "2.0.0"]);
    assert!(!o.ok && o.stderr.contains("403"), "{}", o.stderr);
    assert!(ctl_with(&s, &uf, &["agents", "suspend"]).ok);
    // No token at all.
    let o = Command::new(ternctl())
        .args(["agents", "status", "--server", &s.url])
        .env_remove("TERN_TOKEN")
        .env_remove("TERN_TOKEN_FILE")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no token"));
    let tokens = ok(&s, &["tokens", "ls"]);
    assert!(tokens.contains("viewer") && tokens.contains("user"));
    assert!(!tokens.contains(viewer.trim()));

    // A bad file: the error names the field; nothing stored.
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, config().replace("start_hour: 14", "start_hour: -1")).unwrap();
    let o = ctl(&s, &["create", "-f", bad.to_str().unwrap()]);
    assert!(!o.ok);
    assert!(o.stderr.contains("start_hour"), "{}", o.stderr);
    assert!(o.stderr.contains("400"), "{}", o.stderr);
    // (The config holds only the user's suspend, not the bad file's groups.)
    let out = ok(&s, &["get", "config"]);
    assert!(!out.contains("staging"), "{out}");
    let o = ctl(&s, &["rm", "version"]);
    assert!(!o.ok && o.stderr.contains("no autoupdate_version"));

    // Channels.
    let out = ok(
        &s,
        &["channels", "set", "cloud-stable", "1.2.3", "--critical"],
    );
    assert_eq!(out.trim(), "channel cloud-stable set to 1.2.3 (critical)");
    let out = ok(&s, &["channels", "ls"]);
    assert!(out.contains("cloud-stable") && out.contains("yes"));
    let channel = || {
        let mut resp = ureq::get(format!("{}/v1/channels/cloud-stable/version", s.url))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap(),
        )
    };
    // The user's suspend is a stop: channels hold too (503, the hold's code).
    let (status, body) = channel();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("mode_suspended"), "{body}");

    // Suspend creates the config when there is none; rm removes it.
    let out = ok(&s, &["get", "config"]);
    assert!(out.contains("suspended"), "{out}");
    assert_eq!(
        ok(&s, &["rm", "config"]).trim(),
        "autoupdate_config deleted"
    );
    // No mode set anywhere: channels follow their own switch (they are set by hand).
    assert_eq!(channel(), (200, "1.2.3".to_string()));
}

/// ternctl with no TERN_* variable but those given.
fn bare(args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new(ternctl());
    cmd.args(args);
    for var in [
        "TERN_SERVER",
        "TERN_TOKEN_FILE",
        "TERN_TOKEN",
        "TERN_CA_CERT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn connection_flags_go_before_or_after_the_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let (url, token) = (s.url.as_str(), s.token_file.to_str().unwrap());
    let status_ok = |o: &Out| {
        assert!(o.ok, "{}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains("No rollout."), "{}", o.stdout);
    };
    // kubectl's habit: the connection before the subcommand.
    status_ok(&bare(
        &["--server", url, "--token-file", token, "agents", "status"],
        &[],
    ));
    // Between the command and its subcommand, and after it.
    status_ok(&bare(
        &["agents", "--server", url, "status", "--token-file", token],
        &[],
    ));
    status_ok(&bare(
        &["agents", "status", "--server", url, "--token-file", token],
        &[],
    ));
    // The output format too, anywhere.
    for args in [
        ["-o", "json", "agents", "status"],
        ["agents", "-o", "json", "status"],
        ["agents", "status", "-o", "json"],
    ] {
        let o = bare(&args, &[("TERN_SERVER", url), ("TERN_TOKEN_FILE", token)]);
        assert!(o.ok, "{args:?}: {}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["mode"], "disabled", "{args:?}: {v}");
    }
    // The environment still works, and a flag wins over it wherever it stands.
    status_ok(&bare(
        &["agents", "status"],
        &[("TERN_SERVER", url), ("TERN_TOKEN_FILE", token)],
    ));
    let env = [
        ("TERN_SERVER", "http://127.0.0.1:1"),
        ("TERN_TOKEN_FILE", token),
    ];
    status_ok(&bare(&["--server", url, "agents", "status"], &env));
    status_ok(&bare(&["agents", "status", "--server", url], &env));
    let token_value = std::fs::read_to_string(&s.token_file).unwrap();
    status_ok(&bare(
        &["agents", "status"],
        &[("TERN_SERVER", url), ("TERN_TOKEN", token_value.trim())],
    ));
    // The planner takes the global -o too.
    let o = bare(
        &["-o", "json", "plan", "find", "--rollout", "/nonexistent"],
        &[],
    );
    assert!(!o.ok && o.stderr.contains("/nonexistent"), "{}", o.stderr);
}

#[test]
fn counts_and_articles_read_as_english() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"]);
    heartbeat(&s, agent.trim(), "d1", "dev", "1.0.0");

    let out = ok(&s, &["inventory", "ls"]);
    assert!(out.starts_with("1 agent connected to replica"), "{out}");
    // Heard at this very instant: not settled, so omitted from the report.
    ok(&s, &["dev", "reconcile"]);
    let out = ok(&s, &["agents", "report"]);
    assert!(out.contains("by 1 replica:"), "{out}");
    assert!(
        out.contains("  1 agent: connected for less than one report period"),
        "{out}"
    );

    // ternd's refusal names the role with the right article.
    let af = tmp.path().join("agent.token");
    std::fs::write(&af, agent.trim()).unwrap();
    let o = ctl_with(&s, &af, &["agents", "status"]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("an agent token may not do this"),
        "{}",
        o.stderr
    );
}

/// A web server that is not ternd: every request gets `status` and an HTML page.
fn not_ternd(status: u16) -> HttpServer {
    HttpServer::start(move |_: &Request| {
        Response::new(status, "<html><body>It works!</body></html>")
            .header("Content-Type", "text/html")
    })
}

#[test]
fn connection_errors_say_what_to_try() {
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join("some.token");
    std::fs::write(&token, "tern_not_a_real_token").unwrap();
    let token = token.to_str().unwrap();
    let fails = |server: &str, token: &str, extra: &[&str]| -> String {
        let mut args = vec!["--server", server, "--token-file", token];
        args.extend_from_slice(extra);
        args.extend(["agents", "status"]);
        let o = bare(&args, &[]);
        assert!(!o.ok, "{args:?} succeeded: {}", o.stdout);
        o.stderr
    };

    // Nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = fails(&format!("http://{addr}"), token, &[]);
    assert!(
        err.contains(&format!("connection refused by {addr}")) && err.contains("--server"),
        "{err}"
    );

    // Something that is not ternd: 404 pages, or pages that are not JSON.
    for status in [404, 200] {
        let web = not_ternd(status);
        let web = web.url();
        let err = fails(web, token, &[]);
        assert!(err.contains(&format!("is {web} a ternd server?")), "{err}");
    }

    // ternd over TLS with a certificate no public CA signed.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (tmp.path().join("tls.crt"), tmp.path().join("tls.key"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    let (cert_file, key_file) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    let tls = start_with(
        &tmp.path().join("tls"),
        &["--tls-cert", cert_file, "--tls-key", key_file],
    );
    let port = tls.url.rsplit(':').next().unwrap().to_string();
    let operator = tls.token_file.to_str().unwrap();
    let err = fails(&format!("http://localhost:{port}"), operator, &[]);
    assert!(
        err.contains(&format!(
            "the server speaks TLS: use https://localhost:{port}"
        )),
        "{err}"
    );
    let err = fails(&format!("https://localhost:{port}"), operator, &[]);
    assert!(
        err.contains("--ca-cert") && err.contains("TERN_CA_CERT"),
        "{err}"
    );
    let o = bare(
        &[
            "--server",
            &format!("https://localhost:{port}"),
            "agents",
            "status",
        ],
        &[("TERN_TOKEN_FILE", operator), ("TERN_CA_CERT", cert_file)],
    );
    assert!(o.ok, "{}", o.stderr);

    // ternd serving a CA certificate as its own (what a bare `openssl req -x509`
    // makes): rustls refuses it as CaUsedAsEndEntity, and the hint says what to do.
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = params.self_signed(&key).unwrap();
    let (ca_file, ca_key) = (tmp.path().join("ca.crt"), tmp.path().join("ca.key"));
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    std::fs::write(&ca_key, key.serialize_pem()).unwrap();
    let (ca_file, ca_key) = (ca_file.to_str().unwrap(), ca_key.to_str().unwrap());
    let wrong = start_with(
        &tmp.path().join("ca-as-server"),
        &["--tls-cert", ca_file, "--tls-key", ca_key],
    );
    let port = wrong.url.rsplit(':').next().unwrap().to_string();
    let o = bare(
        &[
            "--server",
            &format!("https://localhost:{port}"),
            "agents",
            "status",
        ],
        &[
            ("TERN_TOKEN_FILE", wrong.token_file.to_str().unwrap()),
            ("TERN_CA_CERT", ca_file),
        ],
    );
    assert!(
        !o.ok
            && o.stderr.contains("CaUsedAsEndEntity")
            && o.stderr.contains("is a CA certificate")
            && o.stderr.contains("quickstart.md, 2.2"),
        "{}",
        o.stderr
    );

    // https:// to a ternd serving plain HTTP.
    let plain = start(&tmp.path().join("plain"));
    let err = fails(
        &plain.url.replace("http://", "https://"),
        plain.token_file.to_str().unwrap(),
        &[],
    );
    assert!(
        err.contains(&format!("the server speaks plain HTTP: use {}", plain.url)),
        "{err}"
    );
}

#[test]
fn the_planner_reads_the_live_inventory() {
    use tern_core::fixtures::{group, halt_on_error_config, version};
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"]);
    let hosts = ["c1", "c2", "c3"];
    for id in hosts {
        heartbeat(&s, agent.trim(), id, "dev", "1.0.0");
    }
    heartbeat(&s, agent.trim(), "p1", "prod", "1.0.0");
    let (config, version_file) = (
        tmp.path().join("config.yaml"),
        tmp.path().join("version.yaml"),
    );
    std::fs::write(
        &config,
        halt_on_error_config(
            "enabled",
            &[group("dev", 10).canaries(3), group("prod", 14)],
        ),
    )
    .unwrap();
    std::fs::write(&version_file, version("1.0.0", "1.1.0", "regular")).unwrap();

    // The rollout as created before dev's window (one created inside it waits a day).
    let out = Command::new(ternctl())
        .args(["plan", "rollout", "--config"])
        .arg(&config)
        .arg("--version")
        .arg(&version_file)
        .args(["--now", "2026-11-23T09:00:00Z"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rollout = tmp.path().join("rollout.yaml");
    std::fs::write(&rollout, &out.stdout).unwrap();

    for format in ["json", "yaml"] {
        let agents = tmp.path().join(format!("inventory.{format}"));
        std::fs::write(&agents, ok(&s, &["inventory", "ls", "-o", format])).unwrap();
        let out = Command::new(ternctl())
            .args(["plan", "rollout", "--config"])
            .arg(&config)
            .arg("--version")
            .arg(&version_file)
            .arg("--rollout")
            .arg(&rollout)
            .arg("--agents")
            .arg(&agents)
            .args(["--now", "2026-11-23T10:05:00Z", "--seed", "1", "-o", "json"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{format}: {stderr}");
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let dev = &plan["status"]["groups"][0];
        assert_eq!(dev["state"], "canary", "{format}: {plan}");
        let mut picked: Vec<(String, String)> = dev["canaries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["updater_id"].as_str().unwrap().to_string(),
                    c["hostname"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        picked.sort();
        let want: Vec<(String, String)> = hosts
            .iter()
            .map(|h| (h.to_string(), format!("{h}.example")))
            .collect();
        assert_eq!(
            picked, want,
            "{format}: the canaries are the live dev hosts"
        );
    }
}

/// An executable shell script `name` in `dir` with `body`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn revision(s: &Server) -> String {
    let y: serde_json::Value = serde_yaml_ng::from_str(&ok(s, &["get", "config"])).unwrap();
    y["metadata"]["revision"].as_str().unwrap().to_string()
}

#[test]
fn apply_creates_or_updates_without_revisions() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let file = tmp.path().join("config.yaml");
    std::fs::write(&file, config()).unwrap();
    let f = file.to_str().unwrap();

    let out = ok(&s, &["apply", "-f", f]);
    assert!(
        out.starts_with("autoupdate_config created (revision"),
        "{out}"
    );
    // Changed, and with no revision in the file: read, then written at the current one.
    std::fs::write(&file, config().replace("start_hour: 12", "start_hour: 13")).unwrap();
    let out = ok(&s, &["apply", "-f", f]);
    assert!(
        out.starts_with("autoupdate_config updated (revision"),
        "{out}"
    );
    assert!(ok(&s, &["get", "config"]).contains("start_hour: 13"));
    // A stale revision in the file does not matter to apply.
    let stale = ok(&s, &["get", "config"]);
    ok(&s, &["agents", "suspend"]);
    std::fs::write(&file, stale.replace("mode: enabled", "mode: disabled")).unwrap();
    let out = ok(&s, &["apply", "-f", f]);
    assert!(out.starts_with("autoupdate_config updated"), "{out}");
    assert!(ok(&s, &["get", "config"]).contains("mode: disabled"));
    // What is there already: nothing written.
    let before = revision(&s);
    std::fs::write(&file, ok(&s, &["get", "config"])).unwrap();
    let out = ok(&s, &["apply", "-f", f]);
    assert_eq!(
        out.trim(),
        format!("autoupdate_config unchanged (revision {before})")
    );
    assert_eq!(revision(&s), before);
    // The version too, from standard input.
    let mut child = Command::new(ternctl())
        .args(["apply", "-f", "-"])
        .env("TERN_SERVER", &s.url)
        .env("TERN_TOKEN_FILE", &s.token_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(tern_core::fixtures::version("1.0.0", "1.1.0", "regular").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("autoupdate_version created"));
    // Written only by ternd.
    let rollout = tmp.path().join("rollout.yaml");
    std::fs::write(&rollout, "kind: autoupdate_agent_rollout\n").unwrap();
    let o = ctl(&s, &["apply", "-f", rollout.to_str().unwrap()]);
    assert!(
        !o.ok && o.stderr.contains("written only by ternd"),
        "{}",
        o.stderr
    );
}

/// `apply -f` of a config that drops groups says which and writes nothing without
/// `--yes` (issue 37: staging and prod vanished silently); a mistake in the file is
/// refused before any write, pointing at its YAML line as `create -f` does.
#[test]
fn apply_names_the_groups_it_removes_and_points_at_yaml_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let file = tmp.path().join("config.yaml");
    std::fs::write(&file, config()).unwrap();
    let f = file.to_str().unwrap();
    ok(&s, &["apply", "-f", f]);
    let before = revision(&s);

    // Only dev left: staging and prod would go.
    let full = config();
    let dev_only: String = {
        let cut = full.find("- name: staging").unwrap();
        full[..cut].trim_end().to_string() + "\n"
    };
    std::fs::write(&file, &dev_only).unwrap();
    let o = ctl(&s, &["apply", "-f", f]);
    assert!(!o.ok, "{}", o.stdout);
    assert!(
        o.stderr.contains("removes the groups staging, prod") && o.stderr.contains("--yes"),
        "{}",
        o.stderr
    );
    assert_eq!(revision(&s), before, "nothing written");
    let out = ok(&s, &["apply", "-f", f, "--yes"]);
    assert!(out.starts_with("autoupdate_config updated"), "{out}");
    assert!(!ok(&s, &["get", "config"]).contains("staging"));

    // A typo'd field: refused before writing, with its line.
    let broken = config().replace("start_hour: 12", "start_hur: 12");
    let line = broken
        .lines()
        .position(|l| l.contains("start_hur"))
        .unwrap()
        + 1;
    std::fs::write(&file, &broken).unwrap();
    let o = ctl(&s, &["apply", "-f", f, "--yes"]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("start_hur") && o.stderr.contains(&format!("line {line}")),
        "{}",
        o.stderr
    );
    let c = ctl(&s, &["create", "-f", f]);
    assert!(
        !c.ok && c.stderr.contains(&format!("line {line}")),
        "create -f: {}",
        c.stderr
    );
}

#[test]
fn edit_applies_the_edited_resource_at_the_revision_it_read() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let edit = |editor: &Path| {
        let out = Command::new(ternctl())
            .args(["edit", "config"])
            .env("TERN_SERVER", &s.url)
            .env("TERN_TOKEN_FILE", &s.token_file)
            .env("EDITOR", editor)
            .env("TERNCTL", ternctl())
            .output()
            .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let dir = tmp.path();
    let later = script(
        dir,
        "later.sh",
        "sed -i 's/start_hour: 12/start_hour: 13/' \"$1\"",
    );

    // Nothing to edit yet.
    let o = edit(&later);
    assert!(!o.ok && o.stderr.contains("apply -f"), "{}", o.stderr);

    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, config()).unwrap();
    ok(&s, &["apply", "-f", cfg.to_str().unwrap()]);

    // An edit is applied.
    let o = edit(&later);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stdout.starts_with("autoupdate_config updated (revision"),
        "{}",
        o.stdout
    );
    assert!(ok(&s, &["get", "config"]).contains("start_hour: 13"));

    // No change, no write.
    let before = revision(&s);
    let o = edit(Path::new("true"));
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), "no changes");
    assert_eq!(revision(&s), before);

    // A broken edit: the error shown, nothing applied, the edit kept.
    let broken = script(dir, "broken.sh", "echo 'spec: [unclosed' >> \"$1\"");
    let o = edit(&broken);
    assert!(!o.ok);
    assert!(o.stderr.contains("not valid YAML"), "{}", o.stderr);
    assert!(o.stderr.contains("your edit is kept in"), "{}", o.stderr);
    assert_eq!(revision(&s), before);

    // Someone else writes while the editor is open: refused, their change stands.
    let racing = script(
        dir,
        "racing.sh",
        "\"$TERNCTL\" agents suspend >/dev/null\nsed -i 's/start_hour: 13/start_hour: 15/' \"$1\"",
    );
    let o = edit(&racing);
    assert!(!o.ok);
    assert!(
        o.stderr
            .contains("the autoupdate_config changed since it was read"),
        "{}",
        o.stderr
    );
    let now = ok(&s, &["get", "config"]);
    assert!(
        now.contains("mode: suspended") && now.contains("start_hour: 13"),
        "{now}"
    );

    // $VISUAL when there is no $EDITOR.
    let visual = script(
        dir,
        "visual.sh",
        "sed -i 's/start_hour: 13/start_hour: 14/' \"$1\"",
    );
    let out = Command::new(ternctl())
        .args(["edit", "config"])
        .env("TERN_SERVER", &s.url)
        .env("TERN_TOKEN_FILE", &s.token_file)
        .env_remove("EDITOR")
        .env("VISUAL", &visual)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ok(&s, &["get", "config"]).contains("start_hour: 14"));
    // An editor that fails: nothing applied.
    let o = edit(Path::new("false"));
    assert!(
        !o.ok && o.stderr.contains("nothing applied"),
        "{}",
        o.stderr
    );
}

#[test]
fn status_watch_prints_snapshots_until_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));

    // Until interrupted: read two snapshots, then stop it as Ctrl-C would.
    let mut child = Command::new(ternctl())
        .args(["agents", "status", "--watch", "--interval", "1s"])
        .env("TERN_SERVER", &s.url)
        .env("TERN_TOKEN_FILE", &s.token_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut headers = 0;
    for line in lines {
        let line = line.unwrap();
        if line.starts_with("Every 1s: ternctl agents status") {
            headers += 1;
            if headers == 3 {
                break;
            }
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert_eq!(text.matches("No rollout.").count(), 2, "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "no terminal codes in a pipe: {text:?}"
    );
    // Snapshots are separated by a blank line before each header.
    assert!(
        text.contains("\n\nEvery 1s: ternctl agents status"),
        "{text}"
    );

    // A bounded watch as JSON: a stream of documents.
    let out = ok(
        &s,
        &[
            "agents",
            "status",
            "-o",
            "json",
            "--watch",
            "--interval",
            "1s",
            "--count",
            "2",
        ],
    );
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(docs.len(), 2, "{out}");
    assert!(
        docs.iter()
            .all(|d| d["mode"].is_string() && d["now"].is_string()),
        "{out}"
    );
    // The options of --watch need it.
    let o = ctl(&s, &["agents", "status", "--count", "2"]);
    assert!(!o.ok && o.stderr.contains("--watch"), "{}", o.stderr);
}

/// Under the dev clock a plan is evaluated only by `ternctl dev directives`: `plan
/// --draft` says so instead of leaving the operator waiting on partial counts.
#[test]
fn a_plan_under_the_dev_clock_says_what_runs_the_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("d"));
    let draft = tmp.path().join("draft.yaml");
    std::fs::write(
        &draft,
        r#"kind: version_directive
version: v1
metadata: {name: static}
spec:
  directives:
    - name: prod
      selectors: [{labels: {env: prod}}]
      targets: [{version: "1.1.0"}]
      installers: [tern-update]
"#,
    )
    .unwrap();
    ok(
        &s,
        &["version-control", "draft", "-f", draft.to_str().unwrap()],
    );
    let o = ctl(
        &s,
        &[
            "version-control",
            "plan",
            "--draft",
            "static",
            "--wait",
            "1s",
        ],
    );
    assert!(!o.ok, "partial counts are not a success: {}", o.stdout);
    assert!(
        o.stderr.contains("run `ternctl dev directives`"),
        "{}",
        o.stderr
    );
    ok(&s, &["dev", "directives"]);
    let o = ctl(&s, &["version-control", "plan"]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("evaluated by 1 of 1 replica"),
        "{}",
        o.stdout
    );
    assert!(!o.stderr.contains("dev directives"), "{}", o.stderr);
}

/// Teleport's RFD 169 draft files, as the draft prints them, through `create` and
/// `apply` against a real ternd: stored as Tern's resources, each translation said on
/// stderr; the same file sent straight to ternd's endpoint (as curl would) is
/// translated by ternd, which says so in `Warning` headers.
#[test]
fn the_rfd169_drafts_files_are_created_and_applied_as_written() {
    use tern_core::fixtures::rfd169;
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let config = tmp.path().join("autoupdate_config.yaml");
    let plan = tmp.path().join("autoupdate_agent_plan.yaml");
    std::fs::write(&config, rfd169::CONFIG).unwrap();
    std::fs::write(&plan, rfd169::PLAN).unwrap();
    let (c, p) = (config.to_str().unwrap(), plan.to_str().unwrap());

    let o = ctl(&s, &["create", "-f", c]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.starts_with("autoupdate_config created"),
        "{}",
        o.stdout
    );
    let line = format!(
        "translated: {c}: spec.agent_schedules.regular[1].wait_days: 1 became spec.agents.schedules.regular[1].wait_hours: 24"
    );
    assert!(o.stderr.lines().any(|l| l == line), "{}", o.stderr);
    // Both groups have canaries and max_in_flight.
    assert!(!o.stderr.contains("warning:"), "{}", o.stderr);
    let stored: serde_json::Value = serde_yaml_ng::from_str(&ok(&s, &["get", "config"])).unwrap();
    assert_eq!(stored["spec"]["agents"]["mode"], "enabled");
    let prod = &stored["spec"]["agents"]["schedules"]["regular"][1];
    assert_eq!(prod["name"], "prod");
    assert_eq!(prod["wait_hours"], 24);
    assert_eq!(prod["max_in_flight"], "20%");

    let o = ctl(&s, &["apply", "-f", p]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.starts_with("autoupdate_version created"),
        "{}",
        o.stdout
    );
    let line = format!(
        "translated: {p}: spec.current_version: v1 became spec.agents.start_version: 1.0.0 (a version is MAJOR.MINOR.PATCH: the missing numbers are 0)"
    );
    assert!(o.stderr.lines().any(|l| l == line), "{}", o.stderr);
    let version: serde_json::Value = serde_yaml_ng::from_str(&ok(&s, &["get", "version"])).unwrap();
    assert_eq!(version["spec"]["agents"]["start_version"], "1.0.0");
    assert_eq!(version["spec"]["agents"]["target_version"], "2.0.0");
    // Applied again: the translation is what is stored, so nothing changes.
    let o = ctl(&s, &["apply", "-f", p]);
    assert!(
        o.stdout.starts_with("autoupdate_version unchanged"),
        "{}",
        o.stdout
    );

    // The draft's default config, sent as it is to ternd's endpoint.
    let token = std::fs::read_to_string(&s.token_file).unwrap();
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let resp = http
        .post(format!("{}/v1/resources/config?force=true", s.url))
        .header("Authorization", format!("Bearer {}", token.trim()))
        .send(rfd169::CONFIG_DEFAULT)
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert!(
        warnings.contains(
            &"299 - \"translated: spec.agent_schedules.regular[0].jitter_seconds: 5 is not kept: ternd's find sets the jitter hosts wait before they update (60 s, 10 s in a group with max_in_flight); no field of Tern sets it per group\"".to_string()
        ),
        "{warnings:#?}"
    );
    assert!(ok(&s, &["get", "config"]).contains("name: default"));

    // A field Tern has no meaning for: refused, named, nothing written.
    std::fs::write(
        &config,
        rfd169::CONFIG.replace(
            "agent_schedules:\n       regular:",
            "agent_schedules:\n       critical:",
        ),
    )
    .unwrap();
    let o = ctl(&s, &["apply", "-f", c]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains(
            "spec.agent_schedules.critical: (2 groups) is not a schedule Tern has: only regular"
        ),
        "{}",
        o.stderr
    );
}

/// ternd answers a write whose config has a halt-on-error group with neither canaries
/// nor max_in_flight with a warning counting the group's hosts (from the live
/// reports), and ternctl says it; `agents status` carries it for the dashboard.
#[test]
fn a_group_that_updates_all_at_once_is_warned_of_with_its_hosts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let file = tmp.path().join("config.yaml");
    std::fs::write(&file, config()).unwrap();
    let f = file.to_str().unwrap();
    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"])
        .trim()
        .to_string();
    for i in 0..3 {
        heartbeat(
            &s,
            &agent,
            &format!("00000000-0000-4000-8000-00000000000{i}"),
            "prod",
            "1.0.0",
        );
    }
    heartbeat(
        &s,
        &agent,
        "00000000-0000-4000-8000-000000000009",
        "dev",
        "1.0.0",
    );
    // The replica's report, so that the count is the fleet's.
    ok(&s, &["dev", "reconcile"]);

    let o = ctl(&s, &["apply", "-f", f]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    let want = [
        "warning: a bad version reaches the 1 host of dev at once: set canary_count or max_in_flight",
        "warning: a bad version reaches every host of staging (none connected now) at once: set canary_count or max_in_flight",
        "warning: a bad version reaches all 3 hosts of prod at once: set canary_count or max_in_flight",
    ];
    let got: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(got, want, "{}", o.stderr);

    let status: serde_json::Value =
        serde_json::from_str(&ok(&s, &["agents", "status", "-o", "json"])).unwrap();
    let warnings = status["config_warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 3, "{status}");
    assert_eq!(warnings[2]["group"], "prod");
    assert_eq!(warnings[2]["hosts"], 3);
    assert_eq!(warnings[2]["kind"], "all_at_once");

    // With canaries in every group nothing is said.
    std::fs::write(
        &file,
        tern_core::fixtures::halt_on_error(&[
            ("dev", 10, 1, 0),
            ("staging", 12, 1, 0),
            ("prod", 14, 2, 0),
        ]),
    )
    .unwrap();
    let o = ctl(&s, &["apply", "-f", f]);
    assert!(o.ok && !o.stderr.contains("warning:"), "{}", o.stderr);
}

/// Teleport's habits (issue 52): one file with both resources, the long kind names,
/// a revision as `tctl get` writes it.
#[test]
fn teleport_habits_multi_document_files_long_kind_names_and_uuid_revisions() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let both = tmp.path().join("both.yaml");
    std::fs::write(
        &both,
        format!(
            "# the config and the version, as tctl takes them\n---\n{}---\n{}",
            config(),
            tern_core::fixtures::version("1.0.0", "1.0.0", "regular")
        ),
    )
    .unwrap();
    let f = both.to_str().unwrap();
    let out = ok(&s, &["create", "-f", f]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].starts_with("autoupdate_config created")
            && lines[1].starts_with("autoupdate_version created"),
        "{out}"
    );
    let out = ok(&s, &["apply", "-f", f]);
    assert!(
        out.contains("autoupdate_config unchanged") && out.contains("autoupdate_version unchanged"),
        "{out}"
    );
    // A mistake in the second document: nothing of the file is applied, and the line
    // named is the file's.
    let bad = tmp.path().join("bad.yaml");
    let text = format!(
        "{}---\n{}",
        config().replace("start_hour: 12", "start_hour: 13"),
        tern_core::fixtures::version("1.0.0", "1.0.0", "regular")
            .replace("schedule: regular", "schedul: regular")
    );
    let bad_line = text.lines().position(|l| l.contains("schedul:")).unwrap() + 1;
    std::fs::write(&bad, &text).unwrap();
    let o = ctl(&s, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(
        !o.ok
            && o.stderr.contains("(document 2)")
            && o.stderr.contains(&format!("line {bad_line}"))
            && o.stderr.contains("nothing applied"),
        "line {bad_line}: {}",
        o.stderr
    );
    assert!(!ok(&s, &["get", "config"]).contains("start_hour: 13"));

    // `tctl get autoupdate_config`'s names.
    for (long, kind) in [
        ("autoupdate_config", "autoupdate_config"),
        ("autoupdate_version", "autoupdate_version"),
    ] {
        let y: serde_json::Value = serde_yaml_ng::from_str(&ok(&s, &["get", long])).unwrap();
        assert_eq!(y["kind"], kind);
    }

    // A file from `tctl get`: its revision is a UUID, not ternd's. create ignores it
    // (as tctl create does): refused as existing, written with --force.
    let got = ok(&s, &["get", "autoupdate_config"]);
    let from_tctl = tmp.path().join("tctl.yaml");
    let uuid = "3f2504e0-4f89-41d3-9a0c-0305e82c3301";
    let rev = revision(&s);
    std::fs::write(
        &from_tctl,
        got.replace(&format!("revision: '{rev}'"), &format!("revision: {uuid}"))
            .replace(
                &format!("revision: \"{rev}\""),
                &format!("revision: {uuid}"),
            ),
    )
    .unwrap();
    assert!(std::fs::read_to_string(&from_tctl).unwrap().contains(uuid));
    let t = from_tctl.to_str().unwrap();
    let o = ctl(&s, &["create", "-f", t]);
    assert!(
        !o.ok
            && o.stderr
                .contains("is a Teleport revision, not ternd's: ignored")
            && o.stderr.contains("already exists"),
        "{}",
        o.stderr
    );
    let out = ok(&s, &["create", "--force", "-f", t]);
    assert!(out.starts_with("autoupdate_config written"), "{out}");
    ok(&s, &["rm", "autoupdate_config"]);
    let out = ok(&s, &["create", "-f", t]);
    assert!(out.starts_with("autoupdate_config created"), "{out}");
}

/// The halt as `agents status` prints it: each reason's sentence and the next steps,
/// the same words as the status ternd serves (which the dashboard shows).
#[test]
fn status_at_a_halt_says_the_sentences_and_the_next_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(
        &cfg,
        tern_core::fixtures::halt_on_error(&[("dev", 10, 1, 0), ("prod", 14, 0, 0)]),
    )
    .unwrap();
    ok(&s, &["apply", "-f", cfg.to_str().unwrap()]);
    let out = ok(
        &s,
        &[
            "agents",
            "new-rollout",
            "1.1.0",
            "--current-version",
            "1.0.0",
        ],
    );
    assert!(
        out.contains("created new rollout from 1.0.0 to 1.1.0"),
        "{out}"
    );
    // `new-rollout && start-update` at once: the start lands on the new rollout.
    let out = ok(&s, &["agents", "start-update", "dev"]);
    assert_eq!(out.trim(), "Group dev update triggered (canary)");
    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"]);
    let agent = agent.trim();
    heartbeat(&s, agent, "c1", "dev", "1.0.0");
    ok(&s, &["dev", "clock", "advance", "15m"]);
    heartbeat(&s, agent, "c1", "dev", "1.0.0");
    ok(&s, &["dev", "reconcile"]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&s, &["agents", "status", "-o", "json"])).unwrap();
    assert_eq!(
        v["groups"][0]["state"], "canary",
        "the start was undone: {v}"
    );
    assert_eq!(v["groups"][0]["canaries"][0]["updater_id"], "c1", "{v}");
    // The canary rolls 1.1.0 back.
    let agent_http: ureq::Agent = ureq::Agent::config_builder().build().into();
    agent_http
        .post(format!("{}/v1/agents/heartbeat", s.url))
        .header("Authorization", format!("Bearer {agent}"))
        .send_json(serde_json::json!({
            "updater_id": "c1", "hostname": "c1.example", "group": "dev", "version": "1.0.0",
            "rollback": true, "failed_version": "1.1.0",
        }))
        .unwrap();
    ok(&s, &["dev", "reconcile"]);
    let out = ok(&s, &["agents", "status"]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&s, &["agents", "status", "-o", "json"])).unwrap();
    let sentence = v["groups"][0]["last_update_reason_text"].as_str().unwrap();
    assert!(
        out.contains(&format!("dev (canary_failed): {sentence}")),
        "{out}"
    );
    let title = v["next_steps"]["title"].as_str().unwrap();
    assert_eq!(title, "The rollout to 1.1.0 is halted: what now");
    assert!(out.contains(&format!("\n{title}:\n")), "{out}");
    for step in v["next_steps"]["steps"].as_array().unwrap() {
        let step = step.as_str().unwrap();
        assert!(out.contains(&format!("  - {step}\n")), "{step}:\n{out}");
    }
    assert!(out.contains("`ternctl agents rollback`"), "{out}");

    // A fix that follows within the window: the flag reaches the version.
    let out = ok(
        &s,
        &[
            "agents",
            "new-rollout",
            "1.1.1",
            "--follow-in-window",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["version"]["spec"]["agents"]["follow_in_window"], true,
        "{v}"
    );
    let out = ok(&s, &["agents", "status"]);
    assert!(
        !out.contains("is halted"),
        "the replaced rollout's halt: {out}"
    );
}

/// A heartbeat of `product` (none named: the agent).
fn heartbeat_of(s: &Server, agent: &str, product: &str, id: &str, group: &str, version: &str) {
    let agent_http: ureq::Agent = ureq::Agent::config_builder().build().into();
    agent_http
        .post(format!("{}/v1/agents/heartbeat", s.url))
        .header("Authorization", format!("Bearer {agent}"))
        .send_json(serde_json::json!({
            "updater_id": id, "hostname": format!("{id}.example"), "group": group,
            "version": version, "product": product,
        }))
        .unwrap();
}

/// Products through ternctl: `--product` (and TERN_PRODUCT) scopes resources and the
/// agents commands, `ternctl updater` is `--product updater agents` on the same ternd
/// (and with --updater-server the agents commands, with no product, on another),
/// `products` lists them, `agents status` ends with a line per other product, and
/// freezes and pins hold every product unless `--product` names some.
#[test]
fn products_are_scoped_by_product_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&tmp.path().join("data"));
    let ctl_p = |env: &[(&str, &str)], args: &[&str]| ctl_env(&s, &s.token_file, env, args);
    let okp = |env: &[(&str, &str)], args: &[&str]| {
        let o = ctl_p(env, args);
        assert!(o.ok, "ternctl {args:?} failed: {}{}", o.stdout, o.stderr);
        o.stdout
    };
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(&cfg, config()).unwrap();
    ok(&s, &["apply", "-f", cfg.to_str().unwrap()]);
    ok(
        &s,
        &[
            "agents",
            "new-rollout",
            "1.1.0",
            "--current-version",
            "1.0.0",
        ],
    );

    // The agent's status says nothing of an updater that has no rollout.
    let out = ok(&s, &["agents", "status"]);
    assert!(!out.contains("Other products"), "{out}");

    // A sidecar added by applying its version; the updater's rollout through the
    // shorthand, on the same ternd.
    let version = tmp.path().join("sidecar.yaml");
    std::fs::write(
        &version,
        tern_core::fixtures::version("3.0.0", "3.1.0", "regular"),
    )
    .unwrap();
    let out = ok(
        &s,
        &[
            "--product",
            "sidecar",
            "apply",
            "-f",
            version.to_str().unwrap(),
        ],
    );
    assert!(out.starts_with("autoupdate_version created"), "{out}");
    let out = ok(
        &s,
        &[
            "updater",
            "new-rollout",
            "2.1.0",
            "--current-version",
            "2.0.0",
        ],
    );
    assert_eq!(out.trim(), "created new rollout from 2.0.0 to 2.1.0");
    let y: serde_json::Value =
        serde_yaml_ng::from_str(&ok(&s, &["get", "version", "--product", "updater"])).unwrap();
    assert_eq!(y["spec"]["agents"]["target_version"], "2.1.0");
    let y: serde_json::Value = serde_yaml_ng::from_str(&ok(&s, &["get", "version"])).unwrap();
    assert_eq!(
        y["spec"]["agents"]["target_version"], "1.1.0",
        "the agent's is its own"
    );

    let agent = ok(&s, &["tokens", "create", "--role", "agent", "--controller"]);
    let agent = agent.trim();
    // Heard twice, a report period apart: then d1 counts in each product's report.
    for _ in 0..2 {
        for (product, version) in [("", "1.0.0"), ("updater", "2.0.0"), ("sidecar", "3.0.0")] {
            heartbeat_of(&s, agent, product, "d1", "dev", version);
        }
        ok(&s, &["dev", "clock", "advance", "2m"]);
    }
    ok(&s, &["dev", "reconcile"]);

    let out = ok(&s, &["products"]);
    let names: Vec<&str> = out
        .lines()
        .skip(2)
        .take(3)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["agent", "sidecar", "updater"], "{out}");
    assert!(out.contains("3.0.0 → 3.1.0"), "{out}");
    assert!(out.contains("3 of at most 16 products"), "{out}");

    let out = ok(&s, &["agents", "status"]);
    assert!(out.contains("New version: 1.1.0"), "{out}");
    let others = out
        .split("Other products")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        others.contains("sidecar: 3.0.0 → 3.1.0, unstarted (dev not started, staging not started, prod not started), 0/1 hosts on the target"),
        "{out}"
    );
    assert!(others.contains("updater: 2.0.0 → 2.1.0"), "{out}");
    // TERN_PRODUCT, --product and the shorthand: the product's own status only.
    let out = okp(&[("TERN_PRODUCT", "sidecar")], &["agents", "status"]);
    assert!(
        out.contains("New version: 3.1.0") && !out.contains("Other products"),
        "{out}"
    );
    let out = ok(&s, &["updater", "status"]);
    assert!(out.contains("New version: 2.1.0"), "{out}");
    let out = ok(
        &s,
        &["--product", "sidecar", "agents", "start-update", "dev"],
    );
    assert_eq!(out.trim(), "Group dev update triggered (active)");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&s, &["agents", "status", "-o", "json"])).unwrap();
    assert_eq!(
        v["rollout"]["status"]["groups"][0]["state"], "unstarted",
        "the agent's dev did not start"
    );
    let out = ok(&s, &["--product", "updater", "inventory", "ls"]);
    assert!(
        out.starts_with("1 agent connected") && out.contains("2.0.0"),
        "{out}"
    );

    // Refusals: two products where one is meant, a product the shorthand contradicts,
    // a product ternd does not serve.
    let o = ctl(
        &s,
        &[
            "--product",
            "updater",
            "--product",
            "sidecar",
            "agents",
            "status",
        ],
    );
    assert!(
        !o.ok && o.stderr.contains("--product is given 2 times"),
        "{}",
        o.stderr
    );
    let o = ctl(&s, &["--product", "sidecar", "updater", "status"]);
    assert!(
        !o.ok && o.stderr.contains("drop --product sidecar"),
        "{}",
        o.stderr
    );
    let o = ctl(&s, &["--product", "nope", "agents", "status"]);
    assert!(
        !o.ok && o.stderr.contains("unknown_product"),
        "{}",
        o.stderr
    );

    // A freeze holds the products named, else every product; TERN_PRODUCT never
    // narrows it.
    let out = ok(
        &s,
        &[
            "agents",
            "freeze",
            "--reason",
            "review",
            "--product",
            "sidecar",
            "--product",
            "updater",
        ],
    );
    assert!(
        out.starts_with("Updates of sidecar, updater frozen since"),
        "{out}"
    );
    let out = ok(&s, &["--product", "sidecar", "agents", "status"]);
    assert!(
        out.contains("updates of sidecar, updater are frozen"),
        "{out}"
    );
    let out = okp(
        &[("TERN_PRODUCT", "sidecar")],
        &["agents", "freeze", "--reason", "all"],
    );
    assert!(
        out.starts_with("Updates of every product were already frozen")
            || out.starts_with("Updates of every product frozen"),
        "{out}"
    );
    ok(&s, &["agents", "unfreeze"]);

    // A pin holds the host's every product, or those named.
    let out = ok(
        &s,
        &[
            "inventory",
            "pin",
            "d1",
            "--until",
            "2026-12-01",
            "--product",
            "updater",
        ],
    );
    assert!(out.contains("(updater)"), "{out}");
    let out = ok(&s, &["inventory", "pins"]);
    assert!(out.contains("\tupdater\t"), "{out}");
    let out = ok(&s, &["inventory", "pin", "d1", "--until", "2026-12-01"]);
    assert!(out.contains("(every product)"), "{out}");

    // The two-ternd setup: --updater-server sends the agents commands with no product
    // (this ternd then answers for its agent).
    let out = okp(
        &[("TERN_PRODUCT", "sidecar")],
        &["updater", "--updater-server", &s.url, "status"],
    );
    assert!(out.contains("New version: 1.1.0"), "{out}");

    // Removing the sidecar's version ends it once reconciled.
    ok(&s, &["--product", "sidecar", "rm", "version"]);
    ok(&s, &["dev", "reconcile"]);
    let out = ok(&s, &["products"]);
    assert!(!out.contains("sidecar"), "{out}");
}
