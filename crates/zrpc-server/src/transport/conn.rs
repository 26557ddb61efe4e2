//! [`Guarded`]: an accepted connection with its deadlines, outside the `:authority` repair
//! (`AuthorityFix` stays the innermost wrapper around the `TcpStream`).
//!
//! h2 always has a read pending on a live connection, so the deadlines are checked in
//! `poll_read`: when one passes, the read fails and hyper drops the connection.
//!
//! - **Handshake**: until the client has sent the 24-octet preface and a whole first frame
//!   (its SETTINGS), the connection must make it by `HandshakeTimeout`. This closes idle
//!   TCP connections and slowloris preface senders, which h2 would otherwise hold forever.
//! - **Idle** (`MaxConnectionIdle`): no call open for that long (the count is kept by
//!   [`Front`](super::front::Front)).
//! - **Age grace**: `MaxConnectionAge + MaxConnectionAgeGrace` after accept, whatever is
//!   still open. (The GOAWAY at `MaxConnectionAge` itself is the serve loop's.)
//! - **Frame policies** below h2 ([`frames`](super::frames)): ping floods
//!   (`KeepaliveMinTime`, grpc-go's enforcement policy, GOAWAY `too_many_pings`) and floods of
//!   resets and control frames; a cut is counted and logged by [`cuts`](super::cuts).
//! - **Hold**: a new connection from an address cut again and again is not read for a while
//!   ([`Peer::hold`](super::cuts::Peer::hold)), so that reconnecting after every cut does not buy
//!   an attacker a fresh allowance at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use super::cuts::Peer;
use super::frames::{FrameGuard, Violation};
use super::io::ConnInfo;
use super::streams::ConnEntry;

/// Deadlines and limits applied to every accepted connection.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConnLimits {
    pub(crate) handshake_timeout: Option<Duration>,
    pub(crate) idle: Option<Duration>,
    /// `MaxConnectionAge + MaxConnectionAgeGrace`.
    pub(crate) hard_age: Option<Duration>,
    /// `KeepaliveMinTime`: the client's PINGs may not come more often.
    pub(crate) ping_min_time: Option<Duration>,
}

/// An accepted connection under [`ConnLimits`]; holds its connection-cap permit and its
/// entry in the per-connection call count until dropped.
#[derive(Debug)]
pub(crate) struct Guarded<T> {
    inner: T,
    /// Until the preface and first frame are in.
    handshake: Option<Deadline>,
    hard_deadline: Option<Pin<Box<Sleep>>>,
    idle: Option<Deadline>,
    frames: FrameGuard,
    /// The client's address, for the log of a cut and the hold.
    peer: Option<Peer>,
    /// zrpc cut the connection itself (counted then).
    cut: bool,
    /// Until this passes, the connection is not read: its address was cut again and again
    /// ([`Peer::hold`]).
    hold: Option<Pin<Box<Sleep>>>,
    /// The connection's place in the server's `ConnTable` (idle time, per-connection budget).
    entry: Option<ConnEntry>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// A timeout and its timer.
#[derive(Debug)]
struct Deadline {
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Deadline {
    fn after(now: Instant, timeout: Duration) -> Self {
        Deadline {
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(now + timeout)),
        }
    }
}

impl<T> Guarded<T> {
    /// Wraps `inner` (a connection from `peer`), starting its clocks now.
    pub(crate) fn new(
        inner: T,
        peer: Option<Peer>,
        limits: ConnLimits,
        permit: Option<OwnedSemaphorePermit>,
        entry: Option<ConnEntry>,
    ) -> Self {
        let now = Instant::now();
        Guarded {
            inner,
            handshake: limits.handshake_timeout.map(|t| Deadline::after(now, t)),
            hard_deadline: limits
                .hard_age
                .map(|age| Box::pin(tokio::time::sleep_until(now + age))),
            idle: limits
                .idle
                .filter(|_| entry.is_some())
                .map(|t| Deadline::after(now, t)),
            frames: FrameGuard::new(limits.ping_min_time),
            hold: peer
                .as_ref()
                .and_then(Peer::hold)
                .map(|d| Box::pin(tokio::time::sleep_until(now + d))),
            peer,
            cut: false,
            entry,
            _permit: permit,
        }
    }

    /// Checks every deadline; `Err` once one has passed.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(h) = &mut self.handshake
            && h.sleep.as_mut().poll(cx).is_ready()
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no HTTP/2 preface and SETTINGS within Transport.HandshakeTimeout ({:?})",
                    h.timeout
                ),
            ));
        }
        if let Some(d) = &mut self.hard_deadline
            && d.as_mut().poll(cx).is_ready()
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "Transport.MaxConnectionAge + MaxConnectionAgeGrace reached",
            ));
        }
        if let (Some(idle), Some(entry)) = (&mut self.idle, &self.entry) {
            while idle.sleep.as_mut().poll(cx).is_ready() {
                let now = Instant::now();
                match entry.idle_since() {
                    Some(since) if now.saturating_duration_since(since) >= idle.timeout => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no call for Transport.MaxConnectionIdle ({:?})",
                                idle.timeout
                            ),
                        ));
                    }
                    Some(since) => idle.sleep.as_mut().reset(since + idle.timeout),
                    None => idle.sleep.as_mut().reset(now + idle.timeout),
                }
            }
        }
        Ok(())
    }
}

use std::future::Future as _;

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            tracing::debug!(target: "zrpc::server", "closing connection: {e}");
            return Poll::Ready(Err(e));
        }
        if let Some(hold) = &mut this.hold {
            if hold.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.hold = None;
        }
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &res {
            let violated = this.frames.read(&buf.filled()[before..]);
            if this.handshake.is_some() && this.frames.handshaken() {
                this.handshake = None;
            }
            if let Some(violation) = violated {
                let err = cut(&mut this.inner, &this.frames, violation, cx);
                this.cut = true;
                if let Some(peer) = &this.peer {
                    peer.cut(violation.as_str(), violation.describe());
                }
                return Poll::Ready(Err(err));
            }
        }
        res
    }
}

/// Ends a connection that broke a frame policy: GOAWAY `ENHANCE_YOUR_CALM` naming it when it
/// can be written between two of h2's frames (one attempt, the connection is closing anyway),
/// and the error that makes hyper drop the connection.
fn cut<T: AsyncWrite + Unpin>(
    io: &mut T,
    frames: &FrameGuard,
    violation: Violation,
    cx: &mut Context<'_>,
) -> io::Error {
    let sent = frames.can_write_goaway() && {
        let frame = frames.goaway(violation);
        matches!(Pin::new(&mut *io).poll_write(cx, &frame), Poll::Ready(Ok(n)) if n == frame.len())
            && !matches!(Pin::new(&mut *io).poll_flush(cx), Poll::Ready(Err(_)))
    };
    tracing::debug!(target: "zrpc::server", goaway_sent = sent, "cut: {}", violation.as_str());
    io::Error::other(format!("HTTP/2 frame policy: {}", violation.as_str()))
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            this.frames.wrote(&buf[..*n]);
        }
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &res {
            let mut left = *n;
            for b in bufs {
                let take = left.min(b.len());
                this.frames.wrote(&b[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T> Drop for Guarded<T> {
    /// A connection h2 ended with an error GOAWAY (one of its limits) is counted and logged
    /// as it closes.
    fn drop(&mut self) {
        if let (Some((code, debug)), Some(peer)) = (self.frames.h2_goaway(), &self.peer)
            && !self.cut
        {
            let reason = super::cuts::h2_reason(code, debug);
            peer.cut(reason, super::cuts::h2_describe(reason));
        }
    }
}

impl<T: Connected<ConnectInfo = ConnInfo>> Connected for Guarded<T> {
    type ConnectInfo = ConnInfo;

    /// The inner connect info with this connection's state (`ConnInfo::conn`), which tonic
    /// then clones into every request.
    fn connect_info(&self) -> ConnInfo {
        let mut info = self.inner.connect_info();
        info.conn = self.entry.as_ref().map(ConnEntry::state);
        info
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_its_read_at_the_handshake_timeout() {
        use tokio::io::AsyncReadExt;
        let (client, server) = tokio::io::duplex(64);
        let limits = ConnLimits {
            handshake_timeout: Some(Duration::from_secs(10)),
            ..ConnLimits::default()
        };
        let mut g = Guarded::new(server, None, limits, None, None);
        let started = Instant::now();
        let mut buf = [0u8; 8];
        let err = g.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        drop(client);
    }
}
