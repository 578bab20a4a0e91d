//! docs/quickstart.md, section 2.2, as a new operator runs it: the private-CA recipe's
//! commands exactly as written (with /etc/ternd a temp dir), a real ternd on the
//! certificate they make, and every `curl …/readyz` the section gives, run as written
//! (`--connect-to` points ternd.example.com:3025 at the test's ternd): each answers
//! `ready`. Needs `openssl` and `curl`, as the quickstart does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn quickstart() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/quickstart.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `sh` block of section 2.2 that makes the CA and ternd's certificate.
fn recipe(doc: &str) -> String {
    doc.split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("openssl req -x509") && b.contains("openssl x509 -req"))
        .expect("the quickstart's private-CA recipe")
        .to_string()
}

/// Every inline `curl …/readyz` command of the doc, whitespace collapsed.
fn readyz_commands(doc: &str) -> Vec<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|c| c.starts_with("curl ") && c.contains("/readyz"))
        .collect()
}

#[test]
fn the_quickstarts_tls_recipe_and_its_readyz_checks_work_as_written() {
    for tool in ["openssl", "curl"] {
        let found = Command::new(tool).arg("--version").output().is_ok()
            || Command::new(tool).arg("version").output().is_ok();
        assert!(found, "{tool} is needed (the quickstart uses it)");
    }
    let doc = quickstart();
    let tmp = tempfile::tempdir().unwrap();
    let etc = tmp.path().join("etc-ternd");
    let etc_s = etc.to_str().unwrap();
    let script = recipe(&doc).replace("/etc/ternd", etc_s);
    let out = Command::new("sh")
        .args(["-e", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the recipe failed:\n{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut child = Command::new(common::ternd())
        .args(["start", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .args(["--tls-cert", &format!("{etc_s}/cert.pem")])
        .args(["--tls-key", &format!("{etc_s}/key.pem")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = loop {
        let line = lines.next().expect("ternd printed no address").unwrap();
        if let Some(a) = line.strip_prefix("ternd listening on ") {
            break a.rsplit(':').next().unwrap().trim().to_string();
        }
    };

    let checks = readyz_commands(&doc);
    assert!(checks.len() >= 2, "{checks:?}");
    for check in checks {
        let command = check.replace("/etc/ternd", etc_s).replacen(
            "curl ",
            &format!(
                "curl -sS --max-time 10 --connect-to ternd.example.com:3025:127.0.0.1:{port} "
            ),
            1,
        );
        // ternd answers readyz once its first snapshot is in: asked until then, as an
        // operator would retry.
        tern_testing::eventually_within(
            &format!("the quickstart's `{check}` to answer ready (as run: `{command}`)"),
            Duration::from_secs(20),
            || {
                let out = Command::new("sh").args(["-c", &command]).output().unwrap();
                out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ready"
            },
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
