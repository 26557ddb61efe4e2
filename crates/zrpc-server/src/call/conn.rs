//! What a call's connection tells the stages: its peer (address and TLS identity) and its
//! state shared by its calls (open calls for `Transport.MaxConnectionIdle`, octets of
//! incomplete request messages for `Transport.MaxConnectionBufferedRequestBytes`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::time::Instant;
use tonic::transport::server::TcpConnectInfo;

use crate::tls::PeerIdentity;

/// The connect info of a connection (`transport::io::ConnIo`): one `Arc` of it per connection travels in every
/// request's extensions, next to its `TcpConnectInfo` (for `Request::remote_addr`) and
/// [`PeerIdentity`].
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) tcp: TcpConnectInfo,
    pub(crate) peer: Option<PeerIdentity>,
    /// The connection's call count and byte-budget share, set by
    /// `Guarded` (`transport::conn`) when the server keeps them: each request
    /// carries its connection's state, so no per-request table lookup is needed.
    pub(crate) conn: Option<Arc<ConnState>>,
    /// The `:authority` the client sent when the transport had to rewrite it
    /// (`transport::authority`), set on the connection's first repair.
    pub(crate) authority: Option<Arc<std::sync::OnceLock<Arc<str>>>>,
    /// When the serve loop sends the connection its GOAWAY: its `MaxConnectionAge`, jittered
    /// at accept by `Guarded`, which ends the connection the grace after.
    pub(crate) goaway_at: Option<Instant>,
}

/// One connection's open calls and the time the last one ended.
#[derive(Debug)]
pub(crate) struct ConnState {
    base: Instant,
    open: AtomicUsize,
    /// Nanoseconds after `base` when `open` last fell to zero.
    idle_since: AtomicU64,
    /// Octets of incomplete request messages on this connection (`transport::budget`).
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

    /// Calls open on the connection now (the admin view).
    #[cfg_attr(not(feature = "devserver"), allow(dead_code))]
    pub(crate) fn open_calls(&self) -> usize {
        self.open.load(Ordering::Acquire)
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
