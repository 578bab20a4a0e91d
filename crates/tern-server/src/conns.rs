//! The table of open connections: who may come in, who makes room, and when each
//! connection last moved a byte. `listen` admits through it; `metrics` reads it. A leaf,
//! so that neither of those two needs the other.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Why a new connection was closed on arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shed {
    /// Its address already holds `max_per_address` connections.
    PerAddress,
    /// Every slot is serving a request: none could make room.
    Full,
}

/// A connection let in; `evicted` when another was closed to make room for it.
pub(crate) struct Admitted {
    pub(crate) ticket: Ticket,
    pub(crate) evicted: bool,
}

pub(crate) struct Conns {
    max: usize,
    max_per_address: usize,
    epoch: Instant,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Arc<ConnState>>,
    per_address: HashMap<IpAddr, usize>,
}

/// What the table knows of one connection.
pub(crate) struct ConnState {
    address: IpAddr,
    epoch: Instant,
    /// Milliseconds after `epoch` of the last byte read or written.
    last_active_ms: AtomicU64,
    in_flight: AtomicUsize,
    evicted: AtomicBool,
    evict: Notify,
}

impl ConnState {
    fn touch(&self) {
        self.last_active_ms
            .store(millis_since(self.epoch), Ordering::Relaxed);
    }

    pub(crate) fn idle_for(&self) -> Duration {
        let last = self.last_active_ms.load(Ordering::Relaxed);
        Duration::from_millis(millis_since(self.epoch).saturating_sub(last))
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Marks a request in flight until the guard drops: such a connection is never
    /// closed for idleness nor to make room.
    pub(crate) fn begin_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

pub(crate) struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns").field("open", &self.open()).finish()
    }
}

impl Conns {
    pub(crate) fn new(max: usize, max_per_address: usize) -> Self {
        Self {
            max: max.max(1),
            max_per_address: max_per_address.max(1),
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent under a panic (each change is one statement).
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Lets a connection from `address` in, closing the stalest idle one if every slot
    /// is taken.
    pub(crate) fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Shed> {
        let mut table = self.lock();
        if table.per_address.get(&address).copied().unwrap_or(0) >= self.max_per_address {
            return Err(Shed::PerAddress);
        }
        let mut evicted = false;
        if table.open.len() >= self.max {
            let stalest = table
                .open
                .iter()
                .filter(|(_, c)| c.in_flight() == 0)
                .max_by_key(|(_, c)| c.idle_for())
                .map(|(&id, _)| id);
            let Some(id) = stalest else {
                return Err(Shed::Full);
            };
            if let Some(victim) = table.remove(id) {
                victim.evicted.store(true, Ordering::Relaxed);
                victim.evict.notify_one();
            }
            evicted = true;
        }
        let id = table.next_id;
        table.next_id += 1;
        let state = Arc::new(ConnState {
            address,
            epoch: self.epoch,
            last_active_ms: AtomicU64::new(millis_since(self.epoch)),
            in_flight: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
        });
        table.open.insert(id, Arc::clone(&state));
        *table.per_address.entry(address).or_default() += 1;
        Ok(Admitted {
            ticket: Ticket {
                conns: Arc::clone(self),
                id,
                state,
            },
            evicted,
        })
    }
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Arc<ConnState>> {
        let state = self.open.remove(&id)?;
        if let Some(n) = self.per_address.get_mut(&state.address) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&state.address);
            }
        }
        Some(state)
    }
}

/// One admitted connection's place in the table, given back on drop.
pub(crate) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
    state: Arc<ConnState>,
}

impl Ticket {
    pub(crate) fn state(&self) -> Arc<ConnState> {
        Arc::clone(&self.state)
    }

    /// Resolves when the connection was closed to make room for another.
    pub(crate) async fn evicted(&self) {
        loop {
            let notified = self.state.evict.notified();
            if self.state.evicted.load(Ordering::Relaxed) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.conns.lock().remove(self.id);
    }
}

/// The connection's stream, noting the time of every byte that moves.
pub(crate) struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, state: Arc<ConnState>) -> Self {
        Self { inner, state }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.state.touch();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.state.touch();
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.state.touch();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[tokio::test(start_paused = true)]
    async fn one_address_cannot_take_more_than_its_share() {
        let conns = Arc::new(Conns::new(10, 2));
        let _a = conns.admit(ip(2)).unwrap();
        let _b = conns.admit(ip(2)).unwrap();
        assert_eq!(conns.admit(ip(2)).err(), Some(Shed::PerAddress));
        let c = conns.admit(ip(3)).unwrap();
        assert!(!c.evicted);
        drop(_a);
        assert!(
            conns.admit(ip(2)).is_ok(),
            "a closed connection frees its slot"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_stalest_idle_connection_makes_room() {
        let conns = Arc::new(Conns::new(3, 10));
        let old = conns.admit(ip(2)).unwrap().ticket;
        tokio::time::advance(Duration::from_secs(5)).await;
        let busy = conns.admit(ip(3)).unwrap().ticket;
        let _request = busy.state().begin_request();
        tokio::time::advance(Duration::from_secs(5)).await;
        let fresh = conns.admit(ip(4)).unwrap().ticket;
        tokio::time::advance(Duration::from_secs(1)).await;
        // Full: the busy one is stalest by bytes but serving a request; `old` goes.
        busy.state().last_active_ms.store(0, Ordering::Relaxed);
        let admitted = conns.admit(ip(5)).unwrap();
        assert!(admitted.evicted);
        tokio::time::timeout(Duration::from_secs(1), old.evicted())
            .await
            .expect("the stalest idle connection is told to close");
        assert_eq!(conns.open(), 3);
        drop(old);
        assert_eq!(
            conns.open(),
            3,
            "an evicted ticket does not free a second slot"
        );
        // Now only `busy` and two fresh ones: idle fresh ones still make room.
        drop(fresh);
        let _more = conns.admit(ip(6)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_slot_serves_a_request_new_connections_are_shed() {
        let conns = Arc::new(Conns::new(2, 10));
        let a = conns.admit(ip(2)).unwrap().ticket;
        let b = conns.admit(ip(3)).unwrap().ticket;
        let _ra = a.state().begin_request();
        let _rb = b.state().begin_request();
        assert_eq!(conns.admit(ip(4)).err(), Some(Shed::Full));
    }

    #[tokio::test(start_paused = true)]
    async fn idleness_counts_from_the_last_byte() {
        let conns = Arc::new(Conns::new(2, 2));
        let t = conns.admit(ip(2)).unwrap().ticket;
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(t.state().idle_for(), Duration::from_secs(7));
        t.state().touch();
        assert_eq!(t.state().idle_for(), Duration::ZERO);
    }
}
