//! Whether what the hosts will download is there (`--artifact-url-template`): asked at
//! `new-rollout`, for every platform the fleet's hosts run, so that a version nobody
//! published is a warning to the operator before it is a failed canary. A file the
//! server says is not there is *missing*; a server that could not be asked (refused,
//! timed out, a certificate ternd does not trust) leaves it *not checked*, never
//! missing. A private CA's bundle is `--artifact-ca-cert`, loaded by tern-client as
//! every CA bundle is.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_core::artifact::{self, TemplateProblem, Vars};

/// How long one look at an artifact may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Platforms looked at, at most (each costs two requests).
const MAX_PLATFORMS: usize = 8;

/// Why a template cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error(transparent)]
    Problem(#[from] TemplateProblem),
    #[error("{{{{.BaseURL}}}} is each host's own (--base-url): give the whole URL here")]
    BaseUrl,
    #[error("must give an http:// or https:// URL")]
    NotHttp,
}

/// Checks `template` renders to an HTTP(S) URL (at start, so a typo is refused at once).
pub fn check_template(template: &str) -> Result<(), TemplateError> {
    if template.contains(".BaseURL") {
        return Err(TemplateError::BaseUrl);
    }
    let url = render(template, "1.0.0", "linux", "amd64", "oss")?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(TemplateError::NotHttp);
    }
    Ok(())
}

fn render(
    template: &str,
    version: &str,
    os: &str,
    arch: &str,
    edition: &str,
) -> Result<String, TemplateProblem> {
    artifact::render(
        template,
        &Vars {
            version,
            os,
            arch,
            edition,
            base_url: "",
        },
    )
}

/// Why the artifact check cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactCheckError {
    #[error("--artifact-url-template {template:?}: {source}")]
    Template {
        template: String,
        #[source]
        source: TemplateError,
    },
    #[error("--artifact-ca-cert: {0}")]
    Ca(#[from] tern_client::CaBundleError),
}

/// new-rollout's artifact check: where the hosts download (`--artifact-url-template`)
/// and the CA bundle its server's certificate is checked against
/// (`--artifact-ca-cert`; without it, the public web PKI), checked when ternd starts.
#[derive(Clone, Debug)]
pub struct ArtifactCheck {
    template: String,
    roots: Option<tern_client::Roots>,
}

impl ArtifactCheck {
    /// Checks `template` and loads the CA bundle `ca`, if given.
    pub fn new(template: String, ca: Option<&Path>) -> Result<Self, ArtifactCheckError> {
        check_template(&template).map_err(|source| ArtifactCheckError::Template {
            template: template.clone(),
            source,
        })?;
        let roots = ca.map(tern_client::roots_from_pem).transpose()?;
        Ok(Self { template, roots })
    }

    /// What is missing or could not be checked of `version` for `platforms` ((os,
    /// arch), as the hosts report them): one warning per file, naming its URL and what
    /// happened. Blocking.
    pub(crate) fn warnings(
        &self,
        edition: &str,
        version: &str,
        platforms: &[(String, String)],
    ) -> Vec<String> {
        let agent =
            tern_client::Connect::new(Arc::new(rustls::crypto::ring::default_provider()), TIMEOUT)
                .plain_http(true)
                .roots(self.roots.clone())
                .agent();
        let edition = if edition.is_empty() { "oss" } else { edition };
        let mut out = Vec::new();
        for (os, arch) in platforms.iter().take(MAX_PLATFORMS) {
            let url = match render(&self.template, version, os, arch, edition) {
                Ok(u) => u,
                Err(e) => {
                    out.push(format!(
                        "artifact not checked: --artifact-url-template: {e}"
                    ));
                    continue;
                }
            };
            for url in [artifact::checksum_url(&url), url] {
                match look(&agent, &url) {
                    Look::There => {}
                    Look::Missing(status) => out.push(format!(
                        "artifact missing: {url} ({os}/{arch}): answered {status}; hosts that try {version} will refuse it (artifact_missing)"
                    )),
                    Look::Unchecked(why) => out.push(format!(
                        "artifact not checked: {url} ({os}/{arch}): could not check: {why}"
                    )),
                }
            }
        }
        out
    }
}

/// What one look at an artifact found.
enum Look {
    There,
    /// Its server answered that it is not there (a 4xx status).
    Missing(u16),
    /// Nothing could be told: why.
    Unchecked(String),
}

/// Whether `url` can be downloaded. HEAD first; a server that does not answer HEAD is
/// asked with GET (its body is not read). Only a server's own "not there" (4xx) is
/// missing: an error of the server (5xx), of the network or of TLS says nothing of the
/// file.
fn look(agent: &ureq::Agent, url: &str) -> Look {
    let answer = match agent.head(url).call() {
        Ok(resp) if matches!(resp.status().as_u16(), 405 | 501) => agent.get(url).call(),
        other => other,
    };
    match answer {
        Ok(resp) => match resp.status().as_u16() {
            200..=299 => Look::There,
            s @ 400..=499 => Look::Missing(s),
            s => Look::Unchecked(format!("its server answered {s}")),
        },
        Err(e) => Look::Unchecked(unreached(&e)),
    }
}

/// Why a server could not be asked, with what to do about a certificate ternd does not
/// trust.
fn unreached(e: &ureq::Error) -> String {
    let text = e.to_string();
    let tls = matches!(e, ureq::Error::Rustls(_) | ureq::Error::Tls(_))
        || text.contains("certificate")
        || text.contains("UnknownIssuer");
    if tls {
        format!(
            "{text} (a TLS failure: if the artifacts' server has a certificate from a private CA, give ternd that CA with --artifact-ca-cert)"
        )
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_checked_at_start() {
        assert!(check_template("https://r.example/a-v{{.Version}}-{{.OS}}-{{.Arch}}.tgz").is_ok());
        let err = |t| check_template(t).unwrap_err().to_string();
        assert!(err("{{.BaseURL}}/a.tgz").contains("--base-url"));
        assert!(err("https://r/{{.Nope}}").contains("unknown variable"));
        assert!(err("/srv/a-{{.Version}}.tgz").contains("http"));
    }
}
