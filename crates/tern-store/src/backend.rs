//! Which store a program opens (`--backend` / `--store`): `sqlite:PATH` or
//! `etcd:URL[,URL…]`, parsed and opened the same way by ternd and tern-lockstep.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{Error, SqliteOptions, SqliteStore, Store};

/// Where the shared state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:PATH`: one file; several processes on one machine may share it.
    Sqlite(PathBuf),
    /// `etcd:URL[,URL…]`: an etcd cluster (cargo feature `etcd`).
    Etcd(Vec<String>),
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("creating the data dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("opening the store {}: {source}", path.display())]
    Sqlite { path: PathBuf, source: Error },
    #[error("--etcd-prefix must not be empty (e.g. /tern/)")]
    EmptyEtcdPrefix,
    #[error("connecting to etcd at {urls:?}: {source}")]
    Etcd { urls: Vec<String>, source: Error },
    #[error(
        "this program was built without etcd support: use sqlite:PATH, or rebuild it with its \
         `etcd` feature (`cargo build --release -p tern-server --features etcd`, or \
         `-p tern-lockstep --features etcd`; needs protoc)"
    )]
    NoEtcdSupport,
}

impl Backend {
    /// Parses `sqlite:PATH` or `etcd:URL[,URL…]`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err("sqlite: needs a file path, e.g. sqlite:/var/lib/tern/tern.db".into());
            }
            return Ok(Backend::Sqlite(PathBuf::from(path)));
        }
        if let Some(urls) = s.strip_prefix("etcd:") {
            let urls: Vec<String> = urls
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect();
            if urls.is_empty() {
                return Err(
                    "etcd: needs at least one endpoint, e.g. etcd:http://10.0.0.1:2379,http://10.0.0.2:2379"
                        .into(),
                );
            }
            // The etcd client is built without TLS: an https endpoint would fail at the
            // first connection, with a message about cargo features. Say it here.
            if let Some(tls) = urls.iter().find(|u| u.starts_with("https://")) {
                return Err(format!(
                    "{tls}: Tern's etcd client speaks plain http only (no TLS to etcd yet): give http:// endpoints on a network only the cluster's machines reach"
                ));
            }
            return Ok(Backend::Etcd(urls));
        }
        Err(format!(
            "{s:?} is not a backend: give sqlite:PATH or etcd:URL[,URL…]"
        ))
    }

    /// Opens the store. etcd is waited for (with a warning every attempt) so that
    /// replicas may start before their cluster.
    pub async fn open(&self, etcd_prefix: &str) -> Result<Arc<dyn Store>, OpenError> {
        self.open_with(etcd_prefix, SqliteOptions::default()).await
    }

    /// [`Backend::open`], with etcd's long TTLs sharing one lease per `lease_bucket` of
    /// time (`EtcdOptions::lease_bucket`; zero: a lease per write). SQLite has no leases.
    pub async fn open_sharing_leases(
        &self,
        etcd_prefix: &str,
        lease_bucket: std::time::Duration,
    ) -> Result<Arc<dyn Store>, OpenError> {
        match self {
            Backend::Etcd(urls) => open_etcd(urls, etcd_prefix, lease_bucket).await,
            Backend::Sqlite(_) => self.open(etcd_prefix).await,
        }
    }

    /// [`Backend::open`] with SQLite options (tern-lockstep's barriers poll other
    /// processes' writes more often than ternd needs to).
    pub async fn open_with(
        &self,
        etcd_prefix: &str,
        sqlite: SqliteOptions,
    ) -> Result<Arc<dyn Store>, OpenError> {
        match self {
            Backend::Sqlite(path) => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    create_private_dir(parent).map_err(|source| OpenError::DataDir {
                        path: parent.to_path_buf(),
                        source,
                    })?;
                }
                let store = SqliteStore::open_with(path, sqlite)
                    .await
                    .map_err(|source| OpenError::Sqlite {
                        path: path.clone(),
                        source,
                    })?;
                Ok(Arc::new(store))
            }
            Backend::Etcd(urls) => open_etcd(urls, etcd_prefix, std::time::Duration::ZERO).await,
        }
    }
}

/// Creates `dir` (and its parents) readable by its owner only, when it does not exist.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(feature = "etcd")]
async fn open_etcd(
    urls: &[String],
    prefix: &str,
    lease_bucket: std::time::Duration,
) -> Result<Arc<dyn Store>, OpenError> {
    use std::time::Duration;

    use tern_core::backoff::Backoff;

    use crate::{EtcdOptions, EtcdStore};
    if prefix.is_empty() {
        return Err(OpenError::EmptyEtcdPrefix);
    }
    let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        let opts = EtcdOptions {
            lease_bucket,
            ..EtcdOptions::default()
        };
        match EtcdStore::connect(urls, prefix, opts).await {
            Ok(store) => {
                tracing::info!(endpoints = ?urls, prefix, "connected to etcd");
                return Ok(Arc::new(store));
            }
            Err(Error::Unavailable(e)) => {
                tracing::warn!(endpoints = ?urls, error = %e, "etcd does not answer yet; retrying");
                failures += 1;
                tokio::time::sleep(backoff.after(failures)).await;
            }
            Err(source) => {
                return Err(OpenError::Etcd {
                    urls: urls.to_vec(),
                    source,
                });
            }
        }
    }
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _urls: &[String],
    _prefix: &str,
    _lease_bucket: std::time::Duration,
) -> Result<Arc<dyn Store>, OpenError> {
    Err(OpenError::NoEtcdSupport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_backend_and_names_what_is_wrong() {
        assert_eq!(
            Backend::parse("sqlite:/x/t.db"),
            Ok(Backend::Sqlite("/x/t.db".into()))
        );
        assert_eq!(
            Backend::parse("etcd:http://a:2379, http://b:2379,"),
            Ok(Backend::Etcd(vec![
                "http://a:2379".into(),
                "http://b:2379".into()
            ]))
        );
        assert!(Backend::parse("sqlite:").unwrap_err().contains("file path"));
        assert!(Backend::parse("etcd:").unwrap_err().contains("endpoint"));
        let tls = Backend::parse("etcd:http://a:2379,https://b:2379").unwrap_err();
        assert!(
            tls.starts_with("https://b:2379: Tern's etcd client speaks plain http only"),
            "{tls}"
        );
        assert!(
            Backend::parse("redis:x")
                .unwrap_err()
                .contains("not a backend")
        );
    }
}
