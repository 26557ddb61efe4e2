//! Calls open per connection, for `Transport.MaxConnectionIdle`, and octets of incomplete
//! request messages per connection, for `Transport.MaxConnectionBufferedRequestBytes`.
//!
//! The chain's [`Front`](super::front::Front) takes the request's connection state from the connect
//! info tonic puts in every request (the connection registered it in the server's
//! [`ConnTable`]), counts the call open until its response body ([`CountedBody`]) is finished
//! or dropped, and notes when the count falls to zero;
//! the connection's [`Guarded`](super::conn::Guarded) reads that to close it after the idle time.
//! Without `MaxConnectionIdle` the layer does no lookup (and without a per-connection byte
//! budget either, the table is absent).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use parking_lot::Mutex;
use pin_project_lite::pin_project;
use tokio::time::Instant;

type ConnAddrs = (SocketAddr, SocketAddr);

/// One connection's open calls and the time the last one ended.
#[derive(Debug)]
pub(crate) struct ConnState {
    base: Instant,
    open: AtomicUsize,
    /// Nanoseconds after `base` when `open` last fell to zero.
    idle_since: AtomicU64,
    /// Octets of incomplete request messages on this connection (`super::budget`).
    pub(crate) buffered: AtomicUsize,
}

impl ConnState {
    pub(crate) fn new() -> Self {
        ConnState {
            base: Instant::now(),
            open: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            buffered: AtomicUsize::new(0),
        }
    }

    /// Counts one call open, until the guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> CallGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }

    /// When the connection became idle; `None` while a call is open.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        (self.open.load(Ordering::Acquire) == 0).then(|| {
            self.base + std::time::Duration::from_nanos(self.idle_since.load(Ordering::Acquire))
        })
    }
}

/// Counts one call open until dropped.
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<ConnState>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.0.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.0.idle_since.store(nanos, Ordering::Release);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The server's live connections by (local, remote) address.
#[derive(Debug, Default)]
pub(crate) struct ConnTable {
    conns: Mutex<HashMap<ConnAddrs, Arc<ConnState>>>,
}

impl ConnTable {
    /// Registers an accepted connection; the entry leaves the table when dropped.
    pub(crate) fn register(self: &Arc<Self>, addrs: ConnAddrs) -> ConnEntry {
        let state = Arc::new(ConnState::new());
        self.conns.lock().insert(addrs, state.clone());
        ConnEntry {
            table: self.clone(),
            addrs,
            state,
        }
    }

    #[cfg(test)]
    fn find(&self, addrs: ConnAddrs) -> Option<Arc<ConnState>> {
        self.conns.lock().get(&addrs).cloned()
    }

    /// The connection `req` arrived on, from the connect info in its extensions (the serve
    /// loop hands it to `Front` instead; the budget's own tests put it there).
    #[cfg(test)]
    pub(crate) fn of_request<B>(&self, req: &http::Request<B>) -> Option<Arc<ConnState>> {
        req.extensions().get::<super::io::ConnInfo>()?.conn.clone()
    }
}

/// A connection's place in the [`ConnTable`].
#[derive(Debug)]
pub(crate) struct ConnEntry {
    table: Arc<ConnTable>,
    addrs: ConnAddrs,
    state: Arc<ConnState>,
}

impl ConnEntry {
    /// The connection's state.
    pub(crate) fn state(&self) -> Arc<ConnState> {
        self.state.clone()
    }

    /// See [`ConnState::idle_since`].
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        self.state.idle_since()
    }
}

impl Drop for ConnEntry {
    fn drop(&mut self) {
        let mut conns = self.table.conns.lock();
        if conns
            .get(&self.addrs)
            .is_some_and(|s| Arc::ptr_eq(s, &self.state))
        {
            conns.remove(&self.addrs);
        }
    }
}

pin_project! {
    /// A response body that keeps its call counted until it ends or is dropped.
    #[derive(Debug)]
    pub(crate) struct CountedBody<B> {
        #[pin]
        inner: B,
        _guard: Option<CallGuard>,
    }
}

/// An empty body (a response zrpc's serve loop makes from a chain's `Status` error).
impl<B: Default> Default for CountedBody<B> {
    fn default() -> Self {
        CountedBody {
            inner: B::default(),
            _guard: None,
        }
    }
}

impl<B> CountedBody<B> {
    /// `inner`, counted by `guard` (if any) until it ends or is dropped.
    pub(crate) fn new(inner: B, guard: Option<CallGuard>) -> Self {
        CountedBody {
            inner,
            _guard: guard,
        }
    }
}

impl<B: http_body::Body> http_body::Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn addrs() -> ConnAddrs {
        (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_while_no_call_is_open() {
        let table = Arc::new(ConnTable::default());
        let entry = table.register(addrs());
        assert!(entry.idle_since().is_some());
        let call = table.find(addrs()).unwrap().start();
        assert_eq!(entry.idle_since(), None);
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        drop(call);
        assert_eq!(entry.idle_since(), Some(Instant::now()));
        drop(entry);
        assert!(table.find(addrs()).is_none());
    }
}
