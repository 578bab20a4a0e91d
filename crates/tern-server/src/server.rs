//! Starting ternd: data dir, store, bootstrap token, snapshot, background tasks, HTTP(S).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use jiff::Timestamp;
use tern_core::backoff::Backoff;
use tern_store::{Backend, Error as StoreError, Store};

use crate::auth::Role;
use crate::clock::{Clock, DevClock, SystemClock};
use crate::controllers::Controllers;
use crate::directives::DirectivePass;
use crate::history::HistoryWriter;
use crate::keys;
use crate::listen::Limits;
use crate::metrics::Metrics;
use crate::notify::{Notifiers, NotifySettings};
use crate::reconciler::{self, Reconciler, Reporter};
use crate::routes::{self, tokens};
use crate::state::{AppState, Health, Resources, Settings, SharedAgentToken};

/// How ternd serves.
#[derive(Clone, Debug)]
pub enum Transport {
    /// HTTPS with this certificate and key, read and checked at startup.
    Tls(Arc<rustls::ServerConfig>),
    InsecureHttp,
}

#[derive(Debug)]
pub struct ServeOptions {
    pub settings: Settings,
    /// Bound before anything is created, so that a taken port fails a start cleanly.
    pub listener: std::net::TcpListener,
    pub transport: Transport,
    /// The bounds on connections (`--max-connections`, timeouts).
    pub limits: Limits,
    /// Start a dev clock at this instant instead of using the system clock (the store's
    /// shared dev clock wins when another replica already set it).
    pub dev_clock: Option<Timestamp>,
    pub backend: Backend,
    /// Key prefix of this installation in etcd.
    pub etcd_prefix: String,
    /// etcd: long TTLs (host history) share one lease per this much time; zero: a lease
    /// per write (`ternd start --etcd-lease-bucket`).
    pub etcd_lease_bucket: Duration,
    /// Where alert notices go (`--notify-webhook`, `--notify-slack`).
    pub notify: NotifySettings,
    /// The one-line installer's binaries (`--downloads-dir`), loaded before the start.
    pub downloads: Option<crate::downloads::Downloads>,
}

pub(crate) const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// The principal of the operator token ternd writes at its first start.
pub(crate) const BOOTSTRAP_PRINCIPAL: &str = "bootstrap";
pub const DATABASE_FILE: &str = "tern.db";

/// Creates the data dir, readable by its owner only.
pub fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    tern_store::create_private_dir(dir)
        .with_context(|| format!("creating the data dir {}", dir.display()))
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

/// Who initialised the store (the value of [`keys::BOOTSTRAP`]).
#[derive(serde::Serialize, serde::Deserialize)]
struct Bootstrap {
    replica: String,
    at: Timestamp,
    /// "refuse" in stores initialised by a release that refuses the shared agent token
    /// by default; absent in older stores, whose hosts may still use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shared_agent_token: Option<String>,
}

const REFUSE: &str = "refuse";

/// What to do with shared agent tokens: the flag when given, else what the store was
/// initialised with (new stores refuse them; stores of earlier releases accept them,
/// with a deprecation warning).
async fn shared_agent_token_policy(
    store: &dyn Store,
    flag: Option<SharedAgentToken>,
) -> anyhow::Result<SharedAgentToken> {
    let policy = match flag {
        Some(p) => p,
        None => {
            let marker = store
                .get(keys::BOOTSTRAP)
                .await?
                .and_then(|kv| serde_json::from_slice::<Bootstrap>(&kv.value).ok());
            if marker.is_some_and(|b| b.shared_agent_token.as_deref() == Some(REFUSE)) {
                SharedAgentToken::Refuse
            } else {
                SharedAgentToken::Allow
            }
        }
    };
    if policy == SharedAgentToken::Allow {
        tracing::warn!(
            explicit = flag.is_some(),
            "the shared agent token is accepted (deprecated): one leaked copy speaks for any host. Move hosts to their own credentials (docs/security.md, \"Moving a fleet off the shared agent token\"; tern_inventory_shared_token_hosts counts those left), then start ternd with --shared-agent-token refuse"
        );
    }
    Ok(policy)
}

/// On the very first start of a fresh store, mints the operator token, writes it to
/// `DIR/operator.token` (mode 0600) and returns it to be printed once.
///
/// Several replicas may start at once on one fresh store: the one whose
/// create-if-absent of [`keys::BOOTSTRAP`] succeeds initialises it, the others leave
/// it alone (no second operator token). A store that already has tokens (initialised
/// before the marker existed) is never initialised again; a replica that created the
/// marker but died before storing the token finishes the job when it restarts.
async fn bootstrap_operator_token(
    store: &dyn Store,
    dir: &Path,
    replica: &str,
    now: Timestamp,
) -> anyhow::Result<Option<String>> {
    let listing = store.list(keys::TOKENS_PREFIX).await?;
    if !listing.kvs.is_empty() {
        return Ok(None);
    }
    let marker = serde_json::to_vec(&Bootstrap {
        replica: replica.to_string(),
        at: now,
        shared_agent_token: Some(REFUSE.into()),
    })?;
    match store.create(keys::BOOTSTRAP, marker, None).await {
        Ok(_) => {}
        Err(StoreError::AlreadyExists { .. }) => {
            let by = store
                .get(keys::BOOTSTRAP)
                .await?
                .and_then(|kv| serde_json::from_slice::<Bootstrap>(&kv.value).ok());
            match by {
                Some(b) if b.replica == replica => {
                    tracing::warn!(
                        "this replica started initialising the store before and stopped; finishing"
                    );
                }
                Some(b) => {
                    tracing::info!(by = %b.replica, "the store is initialised by another replica: its data dir holds the operator token");
                    return Ok(None);
                }
                None => return Ok(None),
            }
        }
        Err(e) => return Err(e.into()),
    }
    let mut t = crate::auth::mint(Role::Operator, "bootstrap operator token", now)
        .map_err(|e| anyhow::anyhow!("creating the operator token: {}", e.message))?;
    t.record.principal = BOOTSTRAP_PRINCIPAL.into();
    t.record.speaks_for = BOOTSTRAP_PRINCIPAL.into();
    let t = tokens::store_token(store, t)
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

/// Runs `f`, retrying (with a warning) while the store is unavailable, so that a replica
/// may start while its store is down; any other error is returned.
async fn with_store_retries<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e)
                if matches!(
                    e.downcast_ref::<StoreError>(),
                    Some(StoreError::Unavailable(_))
                ) =>
            {
                tracing::warn!(error = %format!("{e:#}"), "{what}: the store is unavailable; retrying");
                failures += 1;
                tokio::time::sleep(backoff.after(failures)).await;
            }
            Err(e) => return Err(e.context(what.to_string())),
        }
    }
}

/// Watches the store and refreshes the find snapshot on every change to the resources
/// (every product's) or channels (including those written by other replicas).
async fn watch_loop(res: Resources, health: Arc<Health>) {
    loop {
        let rev = match res.store().revision().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "watch: reading the store revision failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = res.refresh_snapshot().await {
            tracing::warn!(error = %e, "refreshing the find snapshot failed");
        }
        if let Err(e) = res.sync_dev_clock().await {
            tracing::warn!(error = %e, "reading the shared dev clock failed");
        }
        let mut history =
            crate::rollout_history::Observer::start(res.store(), res.clock.now()).await;
        match res.store().watch("/tern/", rev + 1).await {
            Ok(mut w) => {
                while let Some(ev) = w.next().await {
                    if let Ok(ev) = &ev {
                        health.touch_store();
                        history.observe(res.store(), ev, res.clock.now()).await;
                    }
                    match ev {
                        Ok(tern_store::WatchEvent::Put(kv)) if kv.key == keys::DEV_CLOCK => {
                            crate::state::adopt_dev_clock(res.clock.as_ref(), &res.answers, &kv);
                        }
                        Ok(ev) => {
                            let k = ev.key();
                            if (k.starts_with(keys::RESOURCES_PREFIX)
                                || k.starts_with(keys::CHANNELS_PREFIX)
                                || k == keys::FREEZE
                                || k.starts_with(keys::PINS_PREFIX)
                                || k == keys::ACTIVE_DIRECTIVE
                                || k.starts_with(keys::INSTALLERS_PREFIX)
                                || k.starts_with(keys::PRODUCTS_PREFIX))
                                && let Err(e) = res.refresh_snapshot().await
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

/// Checks the store answers, a few times per `--store-contact-bound`, so that a quiet
/// store (no change to watch) is not mistaken for a lost one, and a lost one is noticed
/// within the bound (real time, whatever the dev clock).
async fn store_contact(
    store: Arc<dyn Store>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    bound: Duration,
) {
    if bound.is_zero() {
        return;
    }
    let every = (bound / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout(every, store.revision()).await {
            health.touch_store();
            Metrics::inc(&metrics.store_probes);
        }
        tokio::time::sleep(every).await;
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
    let store = opts
        .backend
        .open_sharing_leases(&opts.etcd_prefix, opts.etcd_lease_bucket)
        .await?;
    let clock = open_clock(store.as_ref(), opts.dev_clock).await?;
    let replica = opts.settings.replica_id.clone();
    let token = with_store_retries("initialising the store", || {
        bootstrap_operator_token(store.as_ref(), &dir, &replica, clock.now())
    })
    .await?;
    if let Some(token) = token {
        say(&format!(
            "operator token (shown once; also written to {}):\n{token}",
            dir.join(OPERATOR_TOKEN_FILE).display()
        ))?;
    }
    let mut settings = opts.settings.clone();
    let flag = settings.security.shared_agent_token;
    let policy = with_store_retries("reading the store's settings", || {
        shared_agent_token_policy(store.as_ref(), flag)
    })
    .await?;
    settings.security.shared_agent_token = Some(policy);
    let notifiers = Notifiers::start(&opts.notify);
    let state = AppState::with_notifiers(Arc::clone(&store), clock, settings, notifiers);
    start_background(&state).await;
    let listener = opts.listener;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let scheme = match opts.transport {
        Transport::Tls(_) => "https",
        Transport::InsecureHttp => "http",
    };
    tracing::info!(%addr, replica = %state.settings.replica_id, limits = ?opts.limits, "ternd listening");
    say(&format!("ternd listening on {scheme}://{addr}"))?;
    let tls = match opts.transport {
        Transport::Tls(config) => Some(tokio_rustls::TlsAcceptor::from(config)),
        Transport::InsecureHttp => None,
    };
    state
        .installer
        .tls
        .store(tls.is_some(), std::sync::atomic::Ordering::Relaxed);
    if let Some(d) = opts.downloads {
        tracing::info!(arches = ?d.arches().collect::<Vec<_>>(), "serving /install.sh and tern-update");
        // Set once, here, before the first request: it cannot be set already.
        let _ = state.installer.downloads.set(d);
    }
    let app = routes::router(&state);
    let listener = tokio::net::TcpListener::from_std(listener)?;
    crate::listen::serve(
        listener,
        tls,
        app,
        opts.limits,
        Arc::clone(&state.metrics),
        &state.answers,
        shutdown_signal(),
    )
    .await;
    reconciler::release_leader(&state.leadership).await;
    Ok(())
}

/// The system clock, or a dev clock at the time shared in the store (another replica
/// or an earlier run may have set it) or at `dev_clock`.
async fn open_clock(
    store: &dyn Store,
    dev_clock: Option<Timestamp>,
) -> anyhow::Result<Arc<dyn Clock>> {
    let Some(t) = dev_clock else {
        return Ok(Arc::new(SystemClock));
    };
    let now = with_store_retries("sharing the dev clock", || {
        crate::clock::share_dev_clock(store, t)
    })
    .await?;
    if now != t {
        tracing::info!(%now, "dev clock: using the time shared in the store (another replica or an earlier run set it)");
    }
    Ok(Arc::new(DevClock::new(now)))
}

/// One line on stdout, flushed (scripts read the token and the address from it).
fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Loads the first snapshot (ready from then on), then starts the store watch, the
/// leader campaign and, with the system clock, the reconcile loop. Takes the whole
/// state: it hands each loop the parts that loop touches.
async fn start_background(state: &AppState) {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut failures = 0;
    let res = state.resources();
    loop {
        match res.refresh_snapshot().await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, "loading the first snapshot failed; retrying");
                failures += 1;
                tokio::time::sleep(backoff.after(failures)).await;
            }
        }
    }
    if state.settings.release_trust.is_some() {
        // The signed minimums before the first answer, when the repository answers.
        crate::release_check::refresh(
            state.settings.release_trust.as_ref(),
            state.store(),
            &state.answers,
        )
        .await;
        tokio::spawn(crate::release_check::refresh_loop(
            Arc::clone(&state.settings),
            Arc::clone(&state.store),
            Arc::clone(&state.answers),
        ));
    }
    state.health.ready.store(true, Ordering::Relaxed);
    tokio::spawn(watch_loop(res, Arc::clone(&state.health)));
    tokio::spawn(store_contact(
        Arc::clone(&state.store),
        Arc::clone(&state.health),
        Arc::clone(&state.metrics),
        state.settings.store_contact_bound,
    ));
    tokio::spawn(reconciler::campaign(Reconciler::of(state)));
    tokio::spawn(crate::history::run(HistoryWriter::of(state)));
    if state.clock.as_dev().is_none() {
        tokio::spawn(reconciler::run(Reporter::of(state), Reconciler::of(state)));
        tokio::spawn(crate::directives::run(DirectivePass::of(state)));
        tokio::spawn(crate::controllers::run(Controllers::of(state)));
    } else {
        tracing::info!(now = %state.clock.now(), "dev clock: reconciles run only on POST /v1/dev/reconcile");
    }
}

/// Reads and checks the certificate chain and key (before anything is created).
fn tls_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the TLS certificate {}", cert.display()))?;
    if chain.is_empty() {
        bail!(
            "the TLS certificate {} holds no PEM certificate",
            cert.display()
        );
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the TLS key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("setting up TLS")?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .with_context(|| {
            format!(
                "the TLS key {} does not go with the certificate {}",
                key.display(),
                cert.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Refuses to serve plain HTTP unless asked to.
pub fn transport(
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    insecure_http: bool,
) -> anyhow::Result<Transport> {
    match (tls_cert, tls_key, insecure_http) {
        (Some(cert), Some(key), false) => Ok(Transport::Tls(tls_config(&cert, &key)?)),
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
