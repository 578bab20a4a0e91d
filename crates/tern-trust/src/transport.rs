//! tough's `Transport` over the caller's own blocking fetch, so a host fetches metadata
//! with the HTTP client (TLS roots, timeouts, https-only) it already uses for artifacts.

use std::io::Read;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tough::{Transport, TransportError, TransportErrorKind, TransportStream};
use url::Url;

/// What [`Fetch::open`] found at a URL.
pub enum Opened {
    /// The body, read as tough consumes it: tough stops reading once a file passes
    /// the size its metadata (or its limits) allows, so an endless answer costs nothing.
    Body(Box<dyn Read + Send>),
    /// The server says there is no such file (HTTP 404): the end of the root chain.
    NotFound,
}

/// A blocking GET the caller provides. Errors are reported as text (they become part of
/// the refusal's message).
pub trait Fetch: Send + Sync {
    fn open(&self, url: &str) -> Result<Opened, String>;
}

/// [`Fetch`] over a ureq agent (feature `ureq`), as configured by the caller (TLS roots,
/// timeouts). The agent must answer non-2xx statuses as responses
/// (`http_status_as_error(false)`), so that 404 ends the root chain.
#[cfg(feature = "ureq")]
pub struct UreqFetch(pub ureq::Agent);

#[cfg(feature = "ureq")]
impl Fetch for UreqFetch {
    fn open(&self, url: &str) -> Result<Opened, String> {
        let resp = self.0.get(url).call().map_err(|e| e.to_string())?;
        if resp.status() == 404 {
            return Ok(Opened::NotFound);
        }
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()));
        }
        Ok(Opened::Body(Box::new(resp.into_body().into_reader())))
    }
}

/// The metadata location as a URL ending in `/`: an `http(s)://` or `file://` URL as
/// given, or a directory path made absolute (and percent-encoded) as a `file://` URL.
pub fn metadata_url(location: &str) -> crate::Result<String> {
    if location.contains("://") {
        return Ok(location.to_string());
    }
    let abs = std::path::absolute(location).map_err(crate::Error::io(
        "cannot resolve the metadata directory",
        location,
    ))?;
    Url::from_directory_path(&abs)
        .map(String::from)
        .map_err(|()| crate::Error::Release {
            what: "bad metadata directory".into(),
            detail: abs.display().to_string(),
        })
}

/// `file://` URLs are read from disk; anything else goes to the caller's [`Fetch`].
#[derive(Clone)]
pub(crate) struct FetchTransport(pub(crate) Option<Arc<dyn Fetch>>);

impl std::fmt::Debug for FetchTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FetchTransport")
    }
}

const CHUNK: usize = 64 * 1024;

/// A `file://` URL read with blocking reads on the calling thread, as the HTTP path
/// reads: tough's `FilesystemTransport` sends every read through tokio's blocking pool,
/// and those thread hand-offs were most of a refresh's time on a busy machine.
fn open_file(url: &Url) -> Result<Opened, String> {
    let path = url
        .to_file_path()
        .map_err(|()| format!("{url} does not name a local file"))?;
    match std::fs::File::open(&path) {
        Ok(f) => Ok(Opened::Body(Box::new(f))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Opened::NotFound),
        Err(e) => Err(format!("cannot open {}: {e}", path.display())),
    }
}

#[async_trait]
impl Transport for FetchTransport {
    async fn fetch(&self, url: Url) -> Result<TransportStream, TransportError> {
        let opened = if url.scheme() == "file" {
            open_file(&url)
        } else {
            let Some(fetch) = &self.0 else {
                return Err(TransportError::new(
                    TransportErrorKind::UnsupportedUrlScheme,
                    url,
                ));
            };
            fetch.open(url.as_str())
        };
        match opened {
            Ok(Opened::NotFound) => Err(TransportError::new(TransportErrorKind::FileNotFound, url)),
            Err(e) => Err(TransportError::new_with_cause(
                TransportErrorKind::Other,
                url,
                e,
            )),
            Ok(Opened::Body(reader)) => {
                // The Mutex only makes the stream Sync (tough's stream type demands it);
                // nothing reads it concurrently.
                let state = (Mutex::new(reader), url, false);
                let stream = futures::stream::unfold(state, |(reader, url, failed)| async move {
                    if failed {
                        return None;
                    }
                    let mut buf = vec![0u8; CHUNK];
                    let read = match reader.lock() {
                        Ok(mut r) => r.read(&mut buf),
                        Err(_) => Err(std::io::Error::other("reader poisoned")),
                    };
                    match read {
                        Ok(0) => None,
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(Bytes::from(buf)), (reader, url, false)))
                        }
                        Err(e) => {
                            let err = TransportError::new_with_cause(
                                TransportErrorKind::Other,
                                url.clone(),
                                e,
                            );
                            Some((Err(err), (reader, url, true)))
                        }
                    }
                });
                Ok(Box::pin(stream))
            }
        }
    }
}
