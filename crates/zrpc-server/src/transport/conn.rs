//! [`Guarded`]: an accepted connection as h2 reads and writes it: its deadlines, and the one
//! scan of the client's octets ([`FrameGuard`]) that serves the handshake deadline, the frame
//! policies and the `:authority` repair ([`Repair`]).
//!
//! h2 always has a read pending on a live connection, so the deadlines are checked in
//! `poll_read`: when one passes, the read fails and hyper drops the connection.
//!
//! - **Handshake**: until the client has sent the 24-octet preface and a whole first frame
//!   (its SETTINGS), the connection must make it by `HandshakeTimeout`. This closes idle
//!   TCP connections and slowloris preface senders, which h2 would otherwise hold forever.
//! - **Age**: each connection's `MaxConnectionAge`, drawn at accept within ±10% of the
//!   configured one as grpc-go does (connections made together, after a deploy or a client's
//!   restart, are not all sent their GOAWAY at once); the serve loop sends the GOAWAY at that
//!   age ([`ConnInfo::goaway_at`]) and the connection ends here `MaxConnectionAgeGrace` later,
//!   whatever is still open.
//! - **Frame policies** below h2 ([`frames`](super::frames)): ping floods
//!   (`KeepaliveMinTime`, grpc-go's enforcement policy, GOAWAY `too_many_pings`) and floods of
//!   resets and control frames; a cut is counted and logged by [`cuts`](super::cuts).
//! - **`:authority` repair** ([`authority`](crate::transport::authority)): octets are read into h2's own
//!   buffer and scanned there; only an incomplete header block that the repair holds is kept
//!   aside ([`Held`]) until the rest of it arrives.
//! - **Hold**: a new connection from an address cut again and again is not read for a while
//!   ([`Peer::hold`](super::cuts::Peer::hold)), so that reconnecting after every cut does not buy
//!   an attacker a fresh allowance at once.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use super::cuts::Peer;
use super::frames::{FrameGuard, Violation};
use super::streams::ConnEntry;
use crate::call::ConnInfo;
use crate::transport::authority::Repair;

/// Deadlines and limits applied to every accepted connection.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConnLimits {
    pub(crate) handshake_timeout: Option<Duration>,
    /// `MaxConnectionAge`.
    pub(crate) max_age: Option<Duration>,
    /// `MaxConnectionAgeGrace` (none: the calls open at the GOAWAY may finish at any time).
    pub(crate) age_grace: Option<Duration>,
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
    /// The GOAWAY's time (this connection's jittered `MaxConnectionAge`), for the serve loop.
    goaway_at: Option<Instant>,
    /// The GOAWAY's time and the grace: the connection ends here then.
    hard_deadline: Option<Pin<Box<Sleep>>>,
    /// The scan of both directions' frames and the policies on them.
    frames: FrameGuard,
    repair: Repair,
    held: Held,
    /// The client's address, for the log of a cut and the hold.
    peer: Option<Peer>,
    /// zrpc cut the connection itself (counted then).
    cut: bool,
    /// Until this passes, the connection is not read: its address was cut again and again
    /// ([`Peer::hold`]).
    hold: Option<Pin<Box<Sleep>>>,
    /// The connection's place in the server's `ConnTable` (the call count the serve loop's
    /// idle timeout reads, the per-connection budget).
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
    fn after(now: Instant, timeout: Duration) -> Option<Self> {
        Some(Deadline {
            timeout,
            sleep: Box::pin(tokio::time::sleep_until(now.checked_add(timeout)?)),
        })
    }
}

/// `age` within ±10%, uniformly (grpc-go's jitter of `MaxConnectionAge`).
fn jittered(age: Duration) -> Duration {
    use rand::{RngExt, SeedableRng};
    let tenth = age / 10;
    rand::rngs::SmallRng::seed_from_u64(zrpc_core::random_seed())
        .random_range(age - tenth..=age.saturating_add(tenth))
}

impl<T> Guarded<T> {
    /// Wraps `inner` (a connection from `peer`, its `:authority` under `repair`), its clocks
    /// started at `accepted`: with TLS, the HTTP/2 handshake has what the TLS handshake left of
    /// `HandshakeTimeout`.
    pub(crate) fn new(
        inner: T,
        peer: Option<Peer>,
        limits: ConnLimits,
        permit: Option<OwnedSemaphorePermit>,
        entry: Option<ConnEntry>,
        repair: Repair,
        accepted: Instant,
    ) -> Self {
        let now = accepted;
        // A limit past what an `Instant` holds (`Duration::MAX`, grpc-go's spelling of
        // infinity, set in code) is no limit, not a panic at accept.
        let goaway_at = limits
            .max_age
            .and_then(|age| now.checked_add(jittered(age)));
        Guarded {
            inner,
            handshake: limits
                .handshake_timeout
                .and_then(|t| Deadline::after(now, t)),
            goaway_at,
            hard_deadline: goaway_at
                .zip(limits.age_grace)
                .and_then(|(at, grace)| at.checked_add(grace))
                .map(|at| Box::pin(tokio::time::sleep_until(at))),
            frames: FrameGuard::new(limits.ping_min_time),
            repair,
            held: Held::default(),
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

    /// The connection's `:authority` repair (for tests).
    #[cfg(test)]
    pub(crate) fn repair(&self) -> &Repair {
        &self.repair
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
        Ok(())
    }

    /// A write the socket does not take (the client stopped reading): `Err` once the hard age
    /// has passed, its timer armed otherwise. h2 stops reading while it cannot write a pending
    /// GOAWAY or PING answer, so the read side's check alone would never see the deadline of
    /// a client that stopped reading: the connection, its permit and its calls would stay.
    fn write_stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if let Some(d) = &mut self.hard_deadline
            && d.as_mut().poll(cx).is_ready()
        {
            tracing::debug!(target: "zrpc::server", "closing connection: the client reads nothing past Transport.MaxConnectionAge + MaxConnectionAgeGrace");
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "Transport.MaxConnectionAge + MaxConnectionAgeGrace reached",
            )));
        }
        Poll::Pending
    }
}

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
        let Guarded {
            inner,
            frames,
            repair,
            held,
            ..
        } = this;
        let res = held.poll_read(inner, cx, buf, |data| repair.scan(frames, data));
        if this.handshake.is_some() && this.frames.handshaken() {
            this.handshake = None;
        }
        match res {
            Poll::Ready(Err(Failed::Cut(violation))) => {
                let err = cut(&mut this.inner, &this.frames, violation, cx);
                this.cut = true;
                if let Some(peer) = &this.peer {
                    peer.cut(violation.as_str(), violation.describe());
                }
                Poll::Ready(Err(err))
            }
            Poll::Ready(Err(Failed::Io(e))) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Why a read failed.
enum Failed {
    Io(io::Error),
    Cut(Violation),
}

/// Octets read from the client that h2 has not had yet: an incomplete header block that the
/// `:authority` repair holds (and whatever came after it), or octets already scanned that did
/// not fit h2's buffer. Empty, and without a buffer, on nearly every connection.
#[derive(Debug, Default)]
struct Held {
    /// Consumed from the front; dropped when empty.
    buf: BytesMut,
    /// The first `ready` octets of `buf` are scanned and wait for h2.
    ready: usize,
}

impl Held {
    /// Reads from `io` into `out` (h2's buffer), what is held first. `scan` gets the octets not
    /// scanned yet, from where it last stopped, and says how many of them may go to h2 now.
    fn poll_read<T: AsyncRead + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
        mut scan: impl FnMut(&mut [u8]) -> Result<usize, Violation>,
    ) -> Poll<Result<(), Failed>> {
        loop {
            if self.ready > 0 {
                let n = out.remaining().min(self.ready);
                out.put_slice(&self.buf[..n]);
                self.buf.advance(n);
                self.ready -= n;
                if self.buf.is_empty() {
                    self.buf = BytesMut::new();
                }
                return Poll::Ready(Ok(()));
            }
            // Read into h2's buffer.
            let before = out.filled().len();
            if out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            ready!(Pin::new(&mut *io).poll_read(cx, out)).map_err(Failed::Io)?;
            let read = out.filled().len() - before;
            if self.buf.is_empty() {
                // Nothing held: scan in place.
                let released = match read {
                    0 => return Poll::Ready(Ok(())),
                    _ => scan(&mut out.filled_mut()[before..]).map_err(Failed::Cut)?,
                };
                if released < read {
                    // An incomplete header block: kept here until the rest of it arrives.
                    self.buf
                        .extend_from_slice(&out.filled()[before + released..]);
                    out.set_filled(before + released);
                }
                if released > 0 {
                    return Poll::Ready(Ok(()));
                }
            } else {
                // Behind the held block: scan it again with what came.
                self.buf.extend_from_slice(&out.filled()[before..]);
                out.set_filled(before);
                self.ready = match read {
                    // EOF: hand on what is held; h2 sees the EOF on the next read.
                    0 => self.buf.len(),
                    _ => scan(&mut self.buf[..]).map_err(Failed::Cut)?,
                };
            }
        }
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
        match &res {
            Poll::Ready(Ok(n)) => this.frames.wrote(&buf[..*n]),
            Poll::Pending => return this.write_stalled(cx),
            Poll::Ready(Err(_)) => {}
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
        if res.is_pending() {
            return this.write_stalled(cx);
        }
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
        info.goaway_at = self.goaway_at;
        info.authority = Some(self.repair.original());
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `io` under `limits` from `at`, with the repair on and no peer, permit or table entry.
    fn guarded<T>(io: T, limits: ConnLimits, at: Instant) -> Guarded<T> {
        Guarded::new(io, None, limits, None, None, Repair::new(true, None), at)
    }

    /// A client that stops reading (its socket full) is still closed at the hard age: the
    /// write that waits for it fails then, where only a read checked the deadline and h2 stops
    /// reading while it cannot write.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_closed_at_the_hard_age() {
        use tokio::io::AsyncWriteExt;
        let (client, server) = tokio::io::duplex(64);
        let limits = ConnLimits {
            max_age: Some(Duration::from_secs(30)),
            age_grace: Some(Duration::from_secs(5)),
            ..ConnLimits::default()
        };
        let started = Instant::now();
        let mut g = guarded(server, limits, started);
        let goaway = g.goaway_at.unwrap() - started;
        let err = g.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // (tokio's timers round up to the millisecond)
        let hard = goaway + Duration::from_secs(5);
        let took = started.elapsed();
        assert!(
            took >= hard && took <= hard + Duration::from_millis(1),
            "{took:?}"
        );
        drop(client);
    }

    /// Each connection's age is drawn within ±10% of `MaxConnectionAge` (grpc-go's jitter), so
    /// that connections made together are not all sent their GOAWAY at once; the hard end is
    /// the grace after that connection's own GOAWAY.
    #[test]
    fn each_connection_gets_its_age_within_a_tenth_of_max_connection_age() {
        let age = Duration::from_secs(100);
        let ages: Vec<Duration> = (0..1000).map(|_| jittered(age)).collect();
        let (min, max) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*min >= Duration::from_secs(90) && *max <= Duration::from_secs(110));
        assert!(
            *min < Duration::from_secs(92) && *max > Duration::from_secs(108),
            "spread over the whole range: {min:?}..{max:?}"
        );
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_hard_age_follows_the_connections_own_goaway_and_needs_a_grace() {
        let limits = ConnLimits {
            max_age: Some(Duration::from_secs(60)),
            age_grace: None,
            ..ConnLimits::default()
        };
        let now = Instant::now();
        let g = guarded((), limits, now);
        let at = g.goaway_at.expect("a GOAWAY time");
        assert!(at >= now + Duration::from_secs(54) && at <= now + Duration::from_secs(66));
        assert!(g.hard_deadline.is_none(), "no grace: no hard end");
        let limits = ConnLimits {
            age_grace: Some(Duration::from_secs(7)),
            ..limits
        };
        let g = guarded((), limits, now);
        let hard = g.hard_deadline.as_ref().unwrap().deadline();
        assert_eq!(hard, g.goaway_at.unwrap() + Duration::from_secs(7));
        // Limits set in code past what an instant holds are none, not a panic at accept.
        let limits = ConnLimits {
            max_age: Some(Duration::MAX),
            age_grace: Some(Duration::MAX),
            handshake_timeout: Some(Duration::MAX),
            ..ConnLimits::default()
        };
        let g = guarded((), limits, now);
        assert!(g.goaway_at.is_none() && g.hard_deadline.is_none() && g.handshake.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_its_read_at_the_handshake_timeout() {
        use tokio::io::AsyncReadExt;
        let (client, server) = tokio::io::duplex(64);
        let limits = ConnLimits {
            handshake_timeout: Some(Duration::from_secs(10)),
            ..ConnLimits::default()
        };
        let started = Instant::now();
        let mut g = guarded(server, limits, started);
        let mut buf = [0u8; 8];
        let err = g.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        drop(client);
    }

    #[tokio::test]
    async fn an_incomplete_header_block_is_held_at_its_own_size_until_complete() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut g = guarded(server, ConnLimits::default(), Instant::now());
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
        let settled = wire.len();
        // HEADERS (END_STREAM | END_HEADERS, stream 1): GET, http, /, :authority a:1
        let block = [0x82, 0x86, 0x84, 0x41, 3, b'a', b':', b'1'];
        wire.extend_from_slice(&[0, 0, block.len() as u8, 1, 5, 0, 0, 0, 1]);
        wire.extend_from_slice(&block);
        wire.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]); // PING
        let cut = settled + 9 + 2;
        client.write_all(&wire[..cut]).await.unwrap();
        let mut buf = vec![0; 4096];
        let n = g.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &wire[..settled]);
        assert!(g.frames.handshaken());
        assert_eq!(g.held.buf.len(), cut - settled);
        assert!(g.held.buf.capacity() < 1024, "{}", g.held.buf.capacity());
        client.write_all(&wire[cut..]).await.unwrap();
        let n = g.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &wire[settled..]);
        assert_eq!(g.held.buf.capacity(), 0);
        assert!(
            !g.repair.is_inspecting(),
            "a valid authority ends the repair"
        );
    }
}
