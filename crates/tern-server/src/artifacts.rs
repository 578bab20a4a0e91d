//! Whether what the hosts will download is there (`--artifact-url-template`): asked at
//! `new-rollout`, for every platform the fleet's hosts run, so that a version nobody
//! published is a warning to the operator before it is a failed canary.

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

/// What is missing of `version` for `platforms` ((os, arch), as the hosts report them):
/// one line per missing file, naming its URL and what its server answered. Blocking.
pub(crate) fn missing(
    template: &str,
    edition: &str,
    version: &str,
    platforms: &[(String, String)],
) -> Vec<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .http_status_as_error(false)
        .max_redirects(5)
        .build()
        .into();
    let edition = if edition.is_empty() { "oss" } else { edition };
    let mut out = Vec::new();
    for (os, arch) in platforms.iter().take(MAX_PLATFORMS) {
        let url = match render(template, version, os, arch, edition) {
            Ok(u) => u,
            Err(e) => {
                out.push(format!("--artifact-url-template: {e}"));
                continue;
            }
        };
        for url in [artifact::checksum_url(&url), url] {
            if let Some(why) = look(&agent, &url) {
                out.push(format!(
                    "{url} ({os}/{arch}): {why}; hosts that try {version} will refuse it (artifact_missing)"
                ));
            }
        }
    }
    out
}

/// Why `url` cannot be downloaded, or `None` when it can. HEAD first; a server that
/// does not answer HEAD is asked with GET (its body is not read).
fn look(agent: &ureq::Agent, url: &str) -> Option<String> {
    let status = |r: Result<ureq::http::Response<ureq::Body>, ureq::Error>| match r {
        Ok(resp) => Ok(resp.status().as_u16()),
        Err(e) => Err(e.to_string()),
    };
    let answer = match status(agent.head(url).call()) {
        Ok(405 | 501) => status(agent.get(url).call()),
        other => other,
    };
    match answer {
        Ok(s) if (200..300).contains(&s) => None,
        Ok(s) => Some(format!("answered {s}")),
        Err(e) => Some(format!("could not be reached: {e}")),
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
