//! ternd over HTTPS with a certificate it is given.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Ternd;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

/// A self-signed certificate for `localhost` in `dir`: (its PEM, cert file, key file).
fn self_signed(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    (cert.cert.pem(), cert_file, key_file)
}

#[test]
fn serves_https_with_the_given_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert_pem, cert_file, key_file) = self_signed(tmp.path());
    let t = Ternd::spawn(
        &tmp.path().join("data"),
        &[
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
    );
    assert!(t.url.starts_with("https://127.0.0.1:"), "{}", t.url);
    let port = t.url.rsplit(':').next().unwrap();
    let ca = Certificate::from_pem(cert_pem.as_bytes()).unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::Specific(Arc::new(vec![ca])))
                .build(),
        )
        .build()
        .into();
    let base = format!("https://localhost:{port}");
    let mut ready = false;
    for _ in 0..100 {
        if let Ok(r) = agent.get(format!("{base}/readyz")).call()
            && r.status() == 200
        {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ready, "ternd answers over HTTPS");
    let mut r = agent
        .get(format!("{base}/v1/agents/status"))
        .header("Authorization", format!("Bearer {}", t.token))
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.body_mut().read_json().unwrap();
    // A fresh store sets no mode anywhere: updates are disabled, and status says why.
    assert_eq!(v["mode"], "disabled");
    assert!(
        v["why_stopped"]
            .as_str()
            .unwrap()
            .contains("no mode is set")
    );
    // Plain HTTP on the TLS port gets nothing useful.
    let plain: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let r = plain.get(format!("http://127.0.0.1:{port}/readyz")).call();
    assert!(r.is_err() || r.unwrap().status() != 200);
}

/// A client that opens a TCP connection to the TLS port and never finishes (here: never
/// starts) its handshake is closed after `--header-read-timeout`; the connection
/// limits would otherwise count it forever.
#[test]
fn a_handshake_that_never_comes_is_closed() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let (_, cert_file, key_file) = self_signed(tmp.path());
    let t = Ternd::spawn(
        &tmp.path().join("data"),
        &[
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
            "--header-read-timeout",
            "1s",
        ],
    );
    let port: u16 = t.url.rsplit(':').next().unwrap().parse().unwrap();
    // ternd may still be starting: retry the connect briefly.
    let connect = || {
        for _ in 0..100 {
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("ternd never listened on {port}");
    };
    let silent = connect();
    let mut partial = connect();
    // The first bytes of a TLS record header (handshake, TLS 1.0 record version), then
    // nothing more.
    partial.write_all(&[0x16, 0x03, 0x01]).unwrap();
    for mut stream in [silent, partial] {
        // Generous: ternd closes after about a second; without the handshake timeout
        // the read blocks until this deadline.
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut buf = [0u8; 256];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue, // an alert, then the close
                Err(e) => {
                    assert_eq!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset,
                        "the server did not close the connection: {e}"
                    );
                    break;
                }
            }
        }
    }
}
