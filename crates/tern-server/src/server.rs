//! Starting ternd: data dir, store, bootstrap token, snapshot, background tasks, HTTP(S).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use jiff::Timestamp;
use tern_store::{SqliteStore, Store};

use crate::auth::Role;
use crate::clock::{Clock, DevClock, SystemClock};
use crate::keys;
use crate::reconciler;
use crate::routes::{self, admin};
use crate::state::{AppState, Settings};

/// How ternd serves.
#[derive(Clone, Debug)]
pub enum Transport {
    Tls { cert: PathBuf, key: PathBuf },
    InsecureHttp,
}

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub settings: Settings,
    pub listen: SocketAddr,
    pub transport: Transport,
    /// Start a dev clock at this instant instead of using the system clock.
    pub dev_clock: Option<Timestamp>,
}

pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
pub const DATABASE_FILE: &str = "tern.db";

/// Creates the data dir, readable by its owner only.
pub fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the data dir {}", dir.display()))?;
    }
    Ok(())
}

/// The replica id: given, or kept in `DIR/replica.id` (created on first start).
pub fn replica_id(dir: &Path, given: Option<String>) -> anyhow::Result<String> {
    if let Some(id) = given {
        return Ok(id);
    }
    let path = dir.join("replica.id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim().to_string();
        if !id.is_empty() {
            return Ok(id);
        }
    }
    let id = format!("ternd-{}", &crate::auth::hex(&rand_bytes()?)[..8]);
    std::fs::write(&path, format!("{id}\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

fn rand_bytes() -> anyhow::Result<[u8; 8]> {
    use rand_core::{OsRng, TryRngCore};
    let mut b = [0u8; 8];
    OsRng
        .try_fill_bytes(&mut b)
        .map_err(|e| anyhow::anyhow!("the OS random source failed: {e}"))?;
    Ok(b)
}

/// On the very first start (no token in the store), mints the operator token, writes it
/// to `DIR/operator.token` (mode 0600) and returns it to be printed once.
async fn bootstrap_operator_token(
    store: &dyn Store,
    dir: &Path,
    now: Timestamp,
) -> anyhow::Result<Option<String>> {
    let listing = store.list(keys::TOKENS_PREFIX).await?;
    if !listing.kvs.is_empty() {
        return Ok(None);
    }
    let t = admin::store_new_token(store, Role::Operator, "bootstrap operator token", now)
        .await
        .map_err(|e| anyhow::anyhow!("creating the operator token: {}", e.message))?;
    let path = dir.join(OPERATOR_TOKEN_FILE);
    write_secret(&path, &t.token)?;
    Ok(Some(t.token))
}

fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(format!("{secret}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Watches the store and refreshes the find snapshot on every change to the resources
/// or channels (including those written by other replicas).
async fn watch_loop(state: Arc<AppState>) {
    loop {
        let rev = match state.store().revision().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "watch: reading the store revision failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = state.refresh_snapshot().await {
            tracing::warn!(error = %e, "refreshing the find snapshot failed");
        }
        match state.store().watch("/tern/", rev + 1).await {
            Ok(mut w) => {
                while let Some(ev) = w.next().await {
                    match ev {
                        Ok(ev) => {
                            let k = ev.key();
                            if (k.starts_with(keys::RESOURCES_PREFIX)
                                || k.starts_with(keys::CHANNELS_PREFIX))
                                && let Err(e) = state.refresh_snapshot().await
                            {
                                tracing::warn!(error = %e, "refreshing the find snapshot failed");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "watch ended; listing again");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "watching the store failed"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down");
}

/// Runs ternd until SIGINT/SIGTERM.
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let dir = opts.settings.data_dir.clone();
    create_data_dir(&dir)?;
    let clock: Arc<dyn Clock> = match opts.dev_clock {
        Some(t) => Arc::new(DevClock::new(t)),
        None => Arc::new(SystemClock),
    };
    let db = dir.join(DATABASE_FILE);
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&db)
            .await
            .with_context(|| format!("opening the store {}", db.display()))?,
    );
    if let Some(token) = bootstrap_operator_token(store.as_ref(), &dir, clock.now()).await? {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "operator token (shown once; also written to {}):\n{token}",
            dir.join(OPERATOR_TOKEN_FILE).display()
        )?;
        out.flush()?;
    }
    let state = AppState::new(Arc::clone(&store), clock, opts.settings.clone());
    // Ready once the first snapshot is loaded.
    let mut delay = Duration::from_millis(100);
    loop {
        match state.refresh_snapshot().await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, "loading the first snapshot failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    state.ready.store(true, Ordering::Relaxed);
    tokio::spawn(watch_loop(Arc::clone(&state)));
    if state.clock.as_dev().is_none() {
        tokio::spawn(reconciler::run(Arc::clone(&state)));
    } else {
        tracing::info!(now = %state.clock.now(), "dev clock: reconciles run only on POST /v1/dev/reconcile");
    }
    let app =
        routes::router(Arc::clone(&state)).into_make_service_with_connect_info::<SocketAddr>();
    let listener = std::net::TcpListener::bind(opts.listen)
        .with_context(|| format!("listening on {}", opts.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let scheme = match opts.transport {
        Transport::Tls { .. } => "https",
        Transport::InsecureHttp => "http",
    };
    tracing::info!(%addr, replica = %state.settings.replica_id, "ternd listening");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ternd listening on {scheme}://{addr}")?;
        out.flush()?;
    }
    match opts.transport {
        Transport::InsecureHttp => {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown_signal())
                .await?;
        }
        Transport::Tls { cert, key } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(&cert, &key)
                .await
                .with_context(|| {
                    format!(
                        "loading the TLS certificate {} and key {}",
                        cert.display(),
                        key.display()
                    )
                })?;
            let handle = axum_server::Handle::new();
            let h = handle.clone();
            tokio::spawn(async move {
                shutdown_signal().await;
                h.graceful_shutdown(Some(Duration::from_secs(10)));
            });
            axum_server::from_tcp_rustls(listener, config)
                .handle(handle)
                .serve(app)
                .await?;
        }
    }
    reconciler::release_leader(&state).await;
    Ok(())
}

/// Refuses to serve plain HTTP unless asked to.
pub fn transport(
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    insecure_http: bool,
) -> anyhow::Result<Transport> {
    match (tls_cert, tls_key, insecure_http) {
        (Some(cert), Some(key), false) => Ok(Transport::Tls { cert, key }),
        (None, None, true) => Ok(Transport::InsecureHttp),
        (Some(_), Some(_), true) => {
            bail!("give either --tls-cert/--tls-key or --insecure-http, not both")
        }
        (Some(_), None, _) | (None, Some(_), _) => {
            bail!("--tls-cert and --tls-key go together")
        }
        (None, None, false) => bail!(
            "ternd serves HTTPS: give --tls-cert FILE --tls-key FILE, or --insecure-http to serve plain HTTP (tokens then travel in clear: only behind a TLS-terminating proxy or for local tests)"
        ),
    }
}
