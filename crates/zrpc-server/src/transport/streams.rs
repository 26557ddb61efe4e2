//! Calls open per connection, for `Transport.MaxConnectionIdle`, and octets of incomplete
//! request messages per connection, for `Transport.MaxConnectionBufferedRequestBytes`.
//!
//! The chain's [`Front`](super::front::Front) takes the request's connection state from the
//! connection facts the serve loop puts in every request (the connection got it from the
//! server's [`ConnTable`]), counts the call open until its response body ([`CountedBody`]) is
//! finished or dropped, and notes when the count falls to zero; the serve loop reads that to
//! send the connection a GOAWAY after the idle time. Without `MaxConnectionIdle` nothing is
//! counted (and without a per-connection byte budget either, the table is absent).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::call::{CallGuard, ConnState};

/// Hands each accepted connection its [`ConnState`] when the server keeps them (its presence
/// says so). Nothing looks a connection up: each request carries its connection's state in its
/// connect info, so no table of live connections is kept (a map entry per connection, and a
/// lock taken at every accept and close).
#[derive(Debug, Default)]
pub(crate) struct ConnTable(());

impl ConnTable {
    /// The state of a connection just accepted; it lives as long as the connection or its
    /// last call.
    pub(crate) fn register(&self) -> ConnEntry {
        ConnEntry {
            state: Arc::new(ConnState::new()),
        }
    }

    /// The connection `req` arrived on, from the connect info in its extensions (the serve
    /// loop hands it to `Front` instead; the budget's own tests put it there).
    #[cfg(test)]
    pub(crate) fn of_request<B>(&self, req: &http::Request<B>) -> Option<Arc<ConnState>> {
        req.extensions()
            .get::<crate::call::ConnInfo>()?
            .conn
            .clone()
    }
}

/// A connection's state, held by its [`Guarded`](super::conn::Guarded).
#[derive(Debug)]
pub(crate) struct ConnEntry {
    state: Arc<ConnState>,
}

impl ConnEntry {
    /// The connection's state.
    pub(crate) fn state(&self) -> Arc<ConnState> {
        self.state.clone()
    }

    /// See [`ConnState::idle_since`].
    #[cfg(test)]
    pub(crate) fn idle_since(&self) -> Option<tokio::time::Instant> {
        self.state.idle_since()
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
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_while_no_call_is_open() {
        let entry = ConnTable::default().register();
        assert!(entry.idle_since().is_some());
        let call = entry.state().start();
        assert_eq!(entry.idle_since(), None);
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        drop(call);
        assert_eq!(entry.idle_since(), Some(tokio::time::Instant::now()));
    }
}
