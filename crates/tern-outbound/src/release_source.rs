//! Release sources: a GitHub-compatible releases API (any base URL: api.github.com,
//! GitHub Enterprise, a mirror) or a plain JSON index over HTTP. Read by tern-lockstep's
//! updater and by ternd's `releases` version controller.
//! Everything they answer is untrusted: bodies are size-capped, pagination stays on the
//! source's origin, and the artifact's digest is read once and pinned in the request.

use std::time::Duration;

use serde::Deserialize;
use tern_core::lockstep::release::ListedRelease;

/// At most this many bytes per answer.
const MAX_BODY: u64 = 8 * 1024 * 1024;
/// At most this many pages of `/releases` (100 each).
const MAX_PAGES: usize = 20;

/// Where releases come from (`tern-lockstep updater --github … | --index …`).
#[derive(Clone, Debug)]
pub enum Source {
    GitHub {
        /// `https://api.github.com` or a compatible server.
        api: String,
        /// `owner/name`.
        repo: String,
        token: Option<String>,
        /// The asset to install, e.g. `app-{version}.tar.gz` (`{version}`, `{tag}`).
        asset: String,
    },
    /// A JSON document `{"releases": [{"tag", "prerelease", "url", "sha256"}]}`.
    Index { url: String },
}

/// A release as the source lists it, with where its artifact is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRelease {
    pub listed: ListedRelease,
    /// The assets (GitHub), or the one artifact (index, name empty).
    pub assets: Vec<Asset>,
    /// The digest the index states, if any.
    pub sha256: Option<String>,
    /// The index marks it a security release.
    pub security: bool,
}

/// One downloadable file of a release, with what the source says of it (untrusted:
/// whoever installs it checks size and digest again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asset {
    pub name: String,
    pub url: String,
    /// The architecture (index entries may state it).
    pub arch: Option<String>,
    pub size: Option<u64>,
    /// GitHub's `digest` (`sha256:…`), or the index's `sha256`.
    pub sha256: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("GET {url}: {source}")]
    Request {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("GET {url}: the answer is not a release list: {why}")]
    Body { url: String, why: String },
    #[error("GET {url}: its Link header points to {next}, outside the source; refusing to follow")]
    ForeignLink { url: String, next: String },
    #[error("GET {url}: more than {MAX_PAGES} pages of releases; refusing to read further")]
    TooManyPages { url: String },
    #[error("release {tag} has no asset named {asset:?} (it has: {have})")]
    NoAsset {
        tag: String,
        asset: String,
        have: String,
    },
    #[error("{0} is not an http(s) URL (plain http needs --insecure-http)")]
    BadUrl(String),
}

#[derive(Deserialize)]
struct GitHubRelease {
    tag_name: String,
    #[serde(default)]
    draft: bool,
    #[serde(default)]
    prerelease: bool,
    #[serde(default)]
    assets: Vec<GitHubAsset>,
}

#[derive(Deserialize)]
struct GitHubAsset {
    name: String,
    browser_download_url: String,
    #[serde(default)]
    size: Option<u64>,
    /// `sha256:<hex>` (GitHub computes it for assets uploaded since mid-2025).
    #[serde(default)]
    digest: Option<String>,
}

impl From<GitHubRelease> for SourceRelease {
    fn from(r: GitHubRelease) -> Self {
        SourceRelease {
            listed: ListedRelease {
                tag: r.tag_name,
                prerelease: r.prerelease,
                draft: r.draft,
            },
            assets: r
                .assets
                .into_iter()
                .map(|a| Asset {
                    name: a.name,
                    url: a.browser_download_url,
                    arch: None,
                    size: a.size,
                    sha256: a
                        .digest
                        .and_then(|d| d.strip_prefix("sha256:").map(str::to_string)),
                })
                .collect(),
            sha256: None,
            security: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    releases: Vec<IndexRelease>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexRelease {
    tag: String,
    #[serde(default)]
    prerelease: bool,
    url: String,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    arch: Option<String>,
    /// A security release (the `releases` controller flags older versions of its major).
    #[serde(default)]
    security: bool,
}

/// Reads sources over HTTP (blocking: call it from `spawn_blocking`).
#[derive(Clone)]
pub struct Fetcher {
    agent: ureq::Agent,
    insecure: bool,
}

impl Fetcher {
    pub fn new(insecure: bool, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .https_only(!insecure)
            .max_redirects(3)
            .timeout_global(Some(timeout))
            .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Fetcher { agent, insecure }
    }

    fn check(&self, url: &str) -> Result<(), SourceError> {
        if url.starts_with("https://") || (self.insecure && url.starts_with("http://")) {
            Ok(())
        } else {
            Err(SourceError::BadUrl(url.to_string()))
        }
    }

    /// GETs `url`; returns the body and the `Link: <…>; rel="next"` target if any.
    fn get(
        &self,
        url: &str,
        token: Option<&str>,
    ) -> Result<(Vec<u8>, Option<String>), SourceError> {
        self.check(url)?;
        let mut req = self
            .agent
            .get(url)
            .header("Accept", "application/vnd.github+json");
        if let Some(t) = token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().map_err(|e| SourceError::Request {
            url: url.to_string(),
            source: Box::new(e),
        })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(SourceError::Status {
                url: url.to_string(),
                status,
            });
        }
        let next = resp
            .headers()
            .get("link")
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| SourceError::Body {
                url: url.to_string(),
                why: e.to_string(),
            })?;
        Ok((body, next))
    }

    /// Every release the source lists.
    pub fn list(&self, source: &Source) -> Result<Vec<SourceRelease>, SourceError> {
        match source {
            Source::GitHub {
                api, repo, token, ..
            } => {
                let first = format!(
                    "{}/repos/{repo}/releases?per_page=100",
                    api.trim_end_matches('/')
                );
                let home = origin(&first).to_string();
                let mut url = first.clone();
                let mut out = Vec::new();
                for _ in 0..MAX_PAGES {
                    let (body, next) = self.get(&url, token.as_deref())?;
                    let page: Vec<GitHubRelease> =
                        serde_json::from_slice(&body).map_err(|e| SourceError::Body {
                            url: url.clone(),
                            why: e.to_string(),
                        })?;
                    out.extend(page.into_iter().map(SourceRelease::from));
                    match next {
                        None => return Ok(out),
                        Some(next) if origin(&next) == home => url = next,
                        Some(next) => return Err(SourceError::ForeignLink { url, next }),
                    }
                }
                Err(SourceError::TooManyPages { url: first })
            }
            Source::Index { url } => {
                let (body, _) = self.get(url, None)?;
                let index: Index =
                    serde_json::from_slice(&body).map_err(|e| SourceError::Body {
                        url: url.clone(),
                        why: e.to_string(),
                    })?;
                Ok(index
                    .releases
                    .into_iter()
                    .map(|r| SourceRelease {
                        listed: ListedRelease {
                            tag: r.tag,
                            prerelease: r.prerelease,
                            draft: false,
                        },
                        assets: vec![Asset {
                            name: String::new(),
                            url: r.url,
                            arch: r.arch,
                            size: r.size,
                            sha256: r.sha256.clone(),
                        }],
                        sha256: r.sha256,
                        security: r.security,
                    })
                    .collect())
            }
        }
    }

    /// GitHub's `/releases/latest` (the newest published release that is not a
    /// pre-release); `None` for an index or when GitHub has none (404).
    pub fn latest(&self, source: &Source) -> Result<Option<SourceRelease>, SourceError> {
        let Source::GitHub {
            api, repo, token, ..
        } = source
        else {
            return Ok(None);
        };
        let url = format!("{}/repos/{repo}/releases/latest", api.trim_end_matches('/'));
        match self.get(&url, token.as_deref()) {
            Ok((body, _)) => {
                let r: GitHubRelease =
                    serde_json::from_slice(&body).map_err(|e| SourceError::Body {
                        url,
                        why: e.to_string(),
                    })?;
                Ok(Some(r.into()))
            }
            Err(SourceError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The URL of the artifact to install for `release` at `version`.
pub fn artifact_url(
    source: &Source,
    release: &SourceRelease,
    version: &str,
) -> Result<String, SourceError> {
    match source {
        Source::Index { .. } => release
            .assets
            .first()
            .map(|a| a.url.clone())
            .ok_or_else(|| SourceError::NoAsset {
                tag: release.listed.tag.clone(),
                asset: "url".into(),
                have: "nothing".into(),
            }),
        Source::GitHub { asset, .. } => {
            let name = asset
                .replace("{version}", version)
                .replace("{tag}", &release.listed.tag);
            release
                .assets
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.url.clone())
                .ok_or_else(|| SourceError::NoAsset {
                    tag: release.listed.tag.clone(),
                    have: release
                        .assets
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    asset: name,
                })
        }
    }
}

/// `scheme://authority` of a URL.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    &url[..end]
}

/// The `rel="next"` target of a `Link` header (RFC 8288, as GitHub writes it).
pub(crate) fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let target = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        (is_next && target.starts_with('<') && target.ends_with('>'))
            .then(|| target[1..target.len() - 1].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        let h = r#"<https://api.example/repos/o/r/releases?page=2>; rel="next", <https://api.example/repos/o/r/releases?page=5>; rel="last""#;
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://api.example/repos/o/r/releases?page=2")
        );
        assert_eq!(next_link(r#"<https://x/p?page=1>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
        assert_eq!(origin("http://127.0.0.1:8080/a/b"), "http://127.0.0.1:8080");
        assert_eq!(origin("https://h"), "https://h");
    }
}
