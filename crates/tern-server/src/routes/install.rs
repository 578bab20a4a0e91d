//! `GET /install.sh` and `GET /downloads/tern-update/{file}`: the one-line installer
//! (`crate::downloads`). Public: a host has no credential before it enrolls, and the
//! script holds no secret.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::downloads::Installer;
use crate::error::{ApiError, ApiResult};
use crate::ratelimit::RateLimits;

fn downloads(installer: &Installer) -> ApiResult<&crate::downloads::Downloads> {
    installer.downloads.get().ok_or_else(|| {
        ApiError::not_found(
            "this ternd serves no installer: start it with --downloads-dir DIR holding tern-update-linux-ARCH files",
        )
    })
}

/// The script, with this ternd's address and the binaries' sizes and SHA-256.
pub(crate) async fn script(
    State(installer): State<Arc<Installer>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let d = downloads(&installer)?;
    let scheme = if installer.tls.load(Ordering::Relaxed) {
        "https"
    } else {
        "http"
    };
    // HTTP/2 names the host in the request's authority, HTTP/1.1 in its Host header.
    let host = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
    let body = d.script(scheme, host).ok_or_else(|| {
        ApiError::bad_request(
            "the Host header is not a plain host[:port], so the script cannot name this ternd: ask for it by name, or start ternd with --public-url",
        )
    })?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/x-shellscript; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response())
}

/// `linux-ARCH`: the binary; `linux-ARCH.sha256`: `HEX  tern-update-linux-ARCH`, as
/// `sha256sum` writes it. Any other name is a 404: names are looked up among the
/// architectures loaded at start, never joined to a path.
pub(crate) async fn binary(
    State(installer): State<Arc<Installer>>,
    Path(file): Path<String>,
) -> ApiResult<Response> {
    let d = downloads(&installer)?;
    let unknown = || {
        ApiError::not_found(format!(
            "no tern-update {file:?} here; served: {}",
            d.arches()
                .map(|a| format!("linux-{a}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    if let Some(name) = file.strip_suffix(".sha256") {
        let b = d.binary(name).ok_or_else(unknown)?;
        return Ok((
            [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
            format!("{}  tern-update-{name}\n", b.sha256),
        )
            .into_response());
    }
    let b = d.binary(&file).ok_or_else(unknown)?;
    let checksum =
        HeaderValue::from_str(&b.sha256).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (
                header::HeaderName::from_static("x-checksum-sha256"),
                checksum,
            ),
        ],
        b.bytes.clone(),
    )
        .into_response())
}

/// Each download is megabytes sent to anyone who asks: limited per client address,
/// from the heartbeat limiter's budget (a host installs once, then heartbeats).
pub(crate) async fn download_guard(
    State(limits): State<Arc<RateLimits>>,
    axum::extract::ConnectInfo(addr): axum::extract::ConnectInfo<std::net::SocketAddr>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Err(wait) = limits.heartbeat.check(addr.ip(), std::time::Instant::now()) {
        return ApiError::rate_limited(wait, format!("too many downloads from {}", addr.ip()))
            .into_response();
    }
    next.run(request).await
}
