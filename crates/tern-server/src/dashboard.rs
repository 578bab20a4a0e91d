//! The web dashboard (`docs/dashboard.md`): three static files compiled into ternd and
//! served from memory. The page holds no data and no secret: the browser asks the JSON
//! API with the token the operator typed in, kept in its session storage. No inline
//! script or style, so the Content-Security-Policy can forbid both.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Everything the page may load comes from ternd itself; nothing inline, no frames.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("dashboard/index.html"),
};

const FILES: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("dashboard/app.css"),
    },
];

/// `GET /`: the dashboard's page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

/// `GET /dashboard/{file}`: its script and style sheet, by name from a fixed list.
pub(crate) async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match FILES.iter().find(|a| a.name == name) {
        Some(asset) => serve(asset, &headers),
        None => ApiError::not_found(format!("no dashboard file named {name:?}")).into_response(),
    }
}

/// The asset with its headers; 304 when the browser's copy is current. Every load
/// revalidates (`no-cache`) so a new ternd's page is never mixed with an old script;
/// the ETag makes that a few hundred bytes.
fn serve(asset: &Asset, headers: &HeaderMap) -> Response {
    let etag = format!(
        "\"{}\"",
        crate::auth::hex(&Sha256::digest(asset.body.as_bytes())[..12])
    );
    let fresh = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut out = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = out.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(ETAG, v);
    }
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CSP),
    );
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_asset_holds_inline_script_or_style() {
        let html = INDEX.body;
        // Every <script> loads a file; no inline handlers or style attributes.
        for (i, _) in html.match_indices("<script") {
            let tag = &html[i..html[i..].find('>').map_or(html.len(), |e| i + e)];
            assert!(tag.contains("src="), "inline script: {tag}");
        }
        for bad in [" onclick=", " onload=", " style=", "<style"] {
            assert!(!html.contains(bad), "index.html holds {bad}");
        }
        let js = FILES[0].body;
        for bad in ["innerHTML", "eval(", "new Function", "localStorage"] {
            assert!(!js.contains(bad), "app.js uses {bad}");
        }
    }

    #[tokio::test]
    async fn assets_carry_type_policy_and_validators() {
        let r = index(HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(r.headers()["content-security-policy"], CSP);
        let etag = r.headers()[ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(IF_NONE_MATCH, etag);
        assert_eq!(index(again).await.status(), StatusCode::NOT_MODIFIED);
        let js = file(Path("app.js".into()), HeaderMap::new()).await;
        assert_eq!(js.headers()[CONTENT_TYPE], "text/javascript; charset=utf-8");
        let none = file(Path("../Cargo.toml".into()), HeaderMap::new()).await;
        assert_eq!(none.status(), StatusCode::NOT_FOUND);
    }
}
