//! Accepting connections and serving HTTP on them within bounds a slow or hostile
//! client cannot push past. axum's own `serve` keeps a connection open for as long as
//! its client likes: 1,100 half-sent requests once used up a 1,024-descriptor limit and
//! every find timed out.
//!
//! - Admission ([`conns`](crate::conns)): at most `max_connections` open, `max_per_address` from one
//!   client address. Past the per-address cap a new connection is closed at once; at
//!   the total cap the connection idle the longest that is not serving a request
//!   (reading its headers, or kept alive between requests) is closed to make room, so
//!   a flood of half-open connections cannot keep out a host that asks find.
//! - Time: the TLS handshake and a request's headers must arrive within
//!   `header_read_timeout`; a connection with no bytes either way for `idle_timeout`
//!   and no request in flight is closed; a request (its body included) gets
//!   `request_timeout` and then a 408.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::conns::{Conns, Shed, Ticket, Watched};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::snapshot::Answers;

/// The bounds on connections (`ternd start --max-connections …`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_address: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets open connections
/// finish for up to ten seconds.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    answers: &Answers,
    shutdown: impl Future<Output = ()>,
) {
    let conns = Arc::new(Conns::new(limits.max_connections, limits.max_per_address));
    let _ = metrics.connections.set(Arc::clone(&conns));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (the caps are meant to keep this from happening) or
                // a connection reset before it was accepted: go on after a breath.
                Metrics::inc(&metrics.accept_errors);
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ticket = match conns.admit(peer.ip()) {
            Ok(admitted) => {
                if admitted.evicted {
                    Metrics::inc(&metrics.connections_evicted);
                }
                admitted.ticket
            }
            Err(shed) => {
                Metrics::inc(match shed {
                    Shed::PerAddress => &metrics.connections_shed_per_address,
                    Shed::Full => &metrics.connections_shed_full,
                });
                // Closed at once: the client sees the close rather than a silent wait.
                drop(stream);
                continue;
            }
        };
        let conn = Connection {
            peer,
            app: app.clone(),
            limits,
            metrics: Arc::clone(&metrics),
            ticket,
            stop: stop_rx.clone(),
            builder: Arc::clone(&builder),
        };
        let tls = tls.clone();
        tokio::spawn(async move { conn.run(stream, tls).await });
    }
    let _ = stop_tx.send(true);
    // Held finds are answered now rather than keep their connections past the grace.
    answers.long_poll.shut_down();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while conns.open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Connection {
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    ticket: Ticket,
    stop: watch::Receiver<bool>,
    builder: Arc<auto::Builder<TokioExecutor>>,
}

impl Connection {
    async fn run(self, stream: TcpStream, tls: Option<TlsAcceptor>) {
        let _ = stream.set_nodelay(true);
        match tls {
            None => self.http(stream).await,
            Some(acceptor) => {
                let handshake = tokio::select! {
                    r = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(stream)) => r,
                    () = self.ticket.evicted() => return,
                };
                match handshake {
                    Ok(Ok(tls_stream)) => self.http(tls_stream).await,
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed")
                    }
                    Err(_) => {
                        Metrics::inc(&self.metrics.connections_timed_out);
                        tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                    }
                }
            }
        }
    }

    async fn http<I>(mut self, io: I)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(Watched::new(io, self.ticket.state()));
        let peer = self.peer;
        let app = self.app.clone();
        let conn_state = self.ticket.state();
        let request_timeout = self.limits.request_timeout;
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let busy = conn_state.begin_request();
            let response = app.clone().oneshot(req);
            async move {
                let _busy = busy;
                match tokio::time::timeout(request_timeout, response).await {
                    Ok(r) => r,
                    Err(_) => Ok(ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request_timeout",
                        format!(
                            "the request took longer than {}s (its body included)",
                            request_timeout.as_secs()
                        ),
                    )
                    .into_response()),
                }
            }
        });
        let builder = Arc::clone(&self.builder);
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let idle = self.limits.idle_timeout;
        let check = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut stopping = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        if is_timeout(e.as_ref()) {
                            Metrics::inc(&self.metrics.connections_timed_out);
                        }
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                    return;
                }
                () = self.ticket.evicted() => return,
                changed = self.stop.changed(), if !stopping => {
                    if changed.is_ok() {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                () = tokio::time::sleep(check) => {
                    let state = self.ticket.state();
                    if state.in_flight() == 0 && state.idle_for() >= idle {
                        Metrics::inc(&self.metrics.connections_timed_out);
                        tracing::debug!(%peer, "closing an idle connection");
                        return;
                    }
                }
            }
        }
    }
}

/// Whether hyper ended the connection for its header read timeout.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && h.is_timeout()
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// How many connections `ternd` may hold given its descriptor limit: the limit raised
/// to the hard one first (a systemd unit's soft default is 1,024), less a reserve for
/// the store, logs and outgoing notices.
pub fn descriptor_budget() -> Option<usize> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    const RESERVE: u64 = 256;
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let soft = limit.current?;
    usize::try_from(soft.saturating_sub(RESERVE).max(16)).ok()
}

/// Metrics of the listener, rendered with the others.
pub(crate) fn render(metrics: &Metrics, out: &mut String) {
    use crate::metrics_text::{self, Kind, counter, gauge};
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let shed = "tern_connections_shed_total";
    metrics_text::family(
        out,
        shed,
        Kind::Counter,
        "connections closed on arrival: over the per-address cap, or every slot busy serving a request",
    );
    metrics_text::sample(
        out,
        shed,
        &[("reason", "per_address")],
        get(&metrics.connections_shed_per_address),
    );
    metrics_text::sample(
        out,
        shed,
        &[("reason", "full")],
        get(&metrics.connections_shed_full),
    );
    counter(
        out,
        "tern_connections_evicted_total",
        "idle or half-open connections closed to make room at the connection cap",
        get(&metrics.connections_evicted),
    );
    counter(
        out,
        "tern_connections_timed_out_total",
        "connections closed for a slow TLS handshake, slow headers or idleness",
        get(&metrics.connections_timed_out),
    );
    let open = metrics.connections.get().map_or(0, |c| c.open());
    gauge(out, "tern_connections_open", "connections open now", open);
    counter(
        out,
        "tern_accept_errors_total",
        "failed accepts (e.g. out of file descriptors)",
        get(&metrics.accept_errors),
    );
}
