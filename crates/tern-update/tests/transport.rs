//! What crosses the network: HTTPS with a self-signed certificate (refused unless
//! `--insecure`), plain http (refused unless `--insecure`), and a server that fails
//! heartbeats (never fails the update).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use support::{Agent, Host, Server, release_files, tarball};

fn publish(server: &Server, version: &str, kind: Agent) {
    server.publish(version, &tarball(&release_files(version, kind)));
}

/// A TLS terminator with a fresh self-signed certificate in front of `backend`:
/// each request is read whole, forwarded over plain http, and the answer sent back.
/// Returns its URL and its certificate (PEM). Its own sockets: tern-testing's server
/// speaks plain HTTP only, and this one is TLS in front of it.
fn tls_front(backend: &str) -> (String, String) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let pem = cert.cert.pem();
    let der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der], key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let backend = backend.trim_start_matches("http://").to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let (config, backend) = (config.clone(), backend.clone());
            std::thread::spawn(move || {
                let Ok(server) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(server, tcp);
                let _ = forward(&mut tls, &backend);
            });
        }
    });
    (url, pem)
}

fn forward(tls: &mut impl ReadWrite, backend: &str) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut length = 0usize;
    {
        let mut reader = BufReader::new(&mut *tls);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(()); // the client gave up (e.g. it refused our certificate)
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            let end = line == "\r\n";
            request.extend_from_slice(line.as_bytes());
            if end {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        request.extend_from_slice(&body);
    }
    let mut plain = TcpStream::connect(backend)?;
    plain.write_all(&request)?;
    let mut response = Vec::new();
    plain.read_to_end(&mut response)?;
    tls.write_all(&response)?;
    tls.flush()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[test]
fn a_self_signed_server_is_refused_unless_insecure() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    let (https, _) = tls_front(&server.url);

    let mut host = Host::new();
    host.insecure = false;
    let svc = host.service_config("");
    let svc = svc.to_str().unwrap();
    let base = format!("{https}/artifacts");
    let args = [
        "enable",
        "--server",
        &https,
        "--base-url",
        &base,
        "--service-config",
        svc,
    ];
    let err = host.fails(&args);
    assert!(
        err.to_lowercase().contains("certificate"),
        "the error should say the certificate was refused: {err}"
    );
    assert_eq!(host.linked_version(), None, "nothing was installed");
    assert!(
        server.state.lock().unwrap().find_count == 0,
        "find was never answered"
    );

    host.insecure = true;
    host.ok(&args);
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));
    assert!(
        !server.heartbeats().is_empty(),
        "the heartbeat went through TLS too"
    );
}

#[test]
fn a_private_ca_is_trusted_with_ca_cert() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    let (https, pem) = tls_front(&server.url);
    let (_, other_pem) = tls_front(&server.url);

    let mut host = Host::new();
    host.insecure = false;
    let (ours, other) = (
        host.dir.path().join("ca.pem"),
        host.dir.path().join("other.pem"),
    );
    std::fs::write(&ours, pem).unwrap();
    std::fs::write(&other, other_pem).unwrap();
    let svc = host.service_config("");
    let svc = svc.to_str().unwrap();
    let base = format!("{https}/artifacts");
    let enable = |ca: &std::path::Path| {
        vec![
            "--ca-cert".to_string(),
            ca.display().to_string(),
            "enable".into(),
            "--server".into(),
            https.clone(),
            "--base-url".into(),
            base.clone(),
            "--service-config".into(),
            svc.into(),
        ]
    };
    let wrong = enable(&other);
    let err = host.fails(&wrong.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert_eq!(host.linked_version(), None);

    let right = enable(&ours);
    host.ok(&right.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(host.wait_running("1.0.0"));

    // A file that is not a certificate bundle is a clear usage error, not a TLS one.
    let junk = host.dir.path().join("junk.pem");
    std::fs::write(&junk, "hello").unwrap();
    let err = host.fails(&["--ca-cert", junk.to_str().unwrap(), "status"]);
    assert!(err.contains("holds no PEM certificate"), "{err}");
}

#[test]
fn plain_http_is_refused_unless_insecure() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    let mut host = Host::new();
    host.insecure = false;
    let svc = host.service_config("");
    let err = String::from_utf8(host.enable(&server, &svc, &[]).stderr).unwrap();
    assert!(err.contains("refusing plain http URL"), "{err}");
    assert!(
        err.contains("--insecure"),
        "the error says how to allow it: {err}"
    );
    assert_eq!(server.state.lock().unwrap().find_count, 0);
    assert_eq!(host.linked_version(), None);
}

#[test]
fn a_failed_heartbeat_never_fails_the_update() {
    let server = Server::start();
    for v in ["1.0.0", "2.0.0"] {
        publish(&server, v, Agent::Good);
    }
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    server.state.lock().unwrap().fail_heartbeats = true;
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    server.set_target("2.0.0", true);
    let out = host.ok(&["update", "--now"]);
    assert_eq!(host.active().as_deref(), Some("2.0.0"));
    assert!(host.wait_running("2.0.0"));
    assert!(
        server.heartbeats().len() >= 2,
        "the heartbeats were attempted"
    );
    assert!(
        out.to_lowercase().contains("heartbeat"),
        "the failure is logged: {out}"
    );
}

#[test]
fn heartbeats_name_the_host_as_told() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    let mut host = Host::new();
    host.env
        .push(("TERN_UPDATE_HOST_ID".into(), "host-42".into()));
    let svc = host.service_config("");
    let out = host.enable(&server, &svc, &["--hostname", "web-1"]);
    assert_eq!(out.status.code(), Some(0));
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.hostname, "web-1");
    assert_eq!(hb.host_id, "host-42");
    // enable saved them: later runs name the host the same without being told.
    host.env.clear();
    host.ok(&["update"]);
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.hostname, "web-1");
    assert_eq!(hb.host_id, "host-42");
    // And by default the machine's own names.
    let plain = Host::new();
    let svc = plain.service_config("");
    assert_eq!(plain.enable(&server, &svc, &[]).status.code(), Some(0));
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_ne!(hb.hostname, "web-1");
    assert_ne!(hb.host_id, "host-42");
}

#[test]
fn heartbeats_carry_the_host_facts_and_enable_keeps_the_labels() {
    let server = Server::start();
    publish(&server, "1.0.0", Agent::Good);
    server.set_target("1.0.0", true);
    let host = Host::new();
    let svc = host.service_config("");
    let out = host.enable(
        &server,
        &svc,
        &[
            "--label",
            "env=prod",
            "--label",
            "zone=eu-1",
            "--fips",
            "true",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.labels.get("zone").map(String::as_str), Some("eu-1"));
    assert!(hb.fips);
    assert_eq!(hb.os, std::env::consts::OS);
    assert!(!hb.arch.is_empty());
    assert_eq!(hb.installers, ["tern-update"]);
    // A later enable without --label keeps them; with --label it replaces them.
    assert_eq!(host.enable(&server, &svc, &[]).status.code(), Some(0));
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(hb.labels.len(), 2);
    assert_eq!(
        host.enable(&server, &svc, &["--label", "env=staging"])
            .status
            .code(),
        Some(0)
    );
    let (_, hb) = server.heartbeats().last().cloned().unwrap();
    assert_eq!(
        hb.labels.into_iter().collect::<Vec<_>>(),
        [("env".to_string(), "staging".to_string())]
    );
    // A label ternd would refuse is refused here first, naming it.
    let out = host.enable(&server, &svc, &["--label", "bad key=x"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("labels: key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
