//! How a Tern program connects to ternd (and to the channels, artifacts and signed
//! metadata beside it): the one place that builds an HTTP agent and loads a CA bundle.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use ureq::tls::{PemItem, RootCerts, TlsConfig};

use crate::error::CaBundleError;

/// The TLS roots to trust instead of the public web PKI.
pub type Roots = RootCerts;

/// What a connection to ternd is allowed and trusts.
#[derive(Clone, Debug)]
pub struct Connect {
    provider: Arc<CryptoProvider>,
    timeout: Duration,
    connect_timeout: Option<Duration>,
    plain_http: bool,
    verify: bool,
    roots: Option<Roots>,
}

impl Connect {
    /// https only, certificates verified against the public web PKI, `timeout` for a
    /// whole request. `provider`: the crypto library the program already links (the
    /// host updater's is aws-lc-rs, which TUF needs; the CLIs' is ring), so that no
    /// program links two.
    pub fn new(provider: Arc<CryptoProvider>, timeout: Duration) -> Self {
        Self {
            provider,
            timeout,
            connect_timeout: None,
            plain_http: false,
            verify: true,
            roots: None,
        }
    }

    /// Plain http and unverified certificates (tern-update `--insecure`: tests, labs).
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.plain_http = insecure;
        self.verify = !insecure;
        self
    }

    /// Plain http allowed, certificates still verified on https (a ternd run with
    /// `--insecure-http`, addressed by the operator's own URL).
    pub fn plain_http(mut self, allowed: bool) -> Self {
        self.plain_http = allowed;
        self
    }

    /// The certificates to trust instead of the public web PKI ([`roots_from_pem`]).
    pub fn roots(mut self, roots: Option<Roots>) -> Self {
        self.roots = roots;
        self
    }

    /// A bound on opening the connection, below the whole request's.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout.min(self.timeout));
        self
    }

    /// Whether plain http URLs may be used.
    pub fn allows_plain_http(&self) -> bool {
        self.plain_http
    }

    /// The agent: a non-2xx status is an answer to read (ternd's reason), not an error.
    pub fn agent(&self) -> ureq::Agent {
        let mut tls = TlsConfig::builder()
            .unversioned_rustls_crypto_provider(self.provider.clone())
            .disable_verification(!self.verify);
        if let Some(roots) = &self.roots {
            tls = tls.root_certs(roots.clone());
        }
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .https_only(!self.plain_http)
            .timeout_global(Some(self.timeout))
            .tls_config(tls.build());
        if let Some(connect) = self.connect_timeout {
            config = config.timeout_connect(Some(connect));
        }
        config.build().into()
    }
}

/// The TLS roots to trust: exactly the certificates of a PEM bundle (`--ca-cert`, for a
/// ternd behind a private CA).
pub fn roots_from_pem(path: &Path) -> Result<Roots, CaBundleError> {
    let pem = std::fs::read(path).map_err(|source| CaBundleError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c.to_owned()),
            Ok(_) => {}
            Err(source) => {
                return Err(CaBundleError::NotPem {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    if certs.is_empty() {
        return Err(CaBundleError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(RootCerts::new_with_certs(&certs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let err = roots_from_pem(&junk).unwrap_err().to_string();
        assert!(
            err.contains("junk.pem") && err.contains("holds no certificate"),
            "{err}"
        );
        let missing = dir.path().join("missing.pem");
        let err = roots_from_pem(&missing).unwrap_err().to_string();
        assert!(
            err.contains("cannot read the CA bundle") && err.contains("missing.pem"),
            "{err}"
        );
    }
}
