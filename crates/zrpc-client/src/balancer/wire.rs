//! The TCP connections of one endpoint, watched so that a request failed by a connection loss can
//! be proven never to have left the client.
//!
//! When a server dies, the client learns it only when its connection task reads the EOF (or reset).
//! A request sent in between is queued on the dead connection and h2 fails it with the same
//! `BrokenPipe`/`ConnectionReset` as the requests that were really in flight (which the server may
//! have processed, so they must not be retried). The evidence that tells them apart is the socket
//! itself: every write on any connection of the endpoint takes the next index of a counter as it
//! starts, a successful one records how far the written indices reach, and every observed loss
//! (read EOF, read or write error) records that reach. A request is marked with the counter just
//! before it is handed over; a write that started before the mark carried bytes made ready
//! before the request existed for the connection. A request whose attempt failed with a
//! connection-loss error, when a loss was recorded after its mark and no write that started after
//! its mark had succeeded by then, never had a byte on the wire: safe to send elsewhere.
//!
//! Two details make the window between the server's death and the client noticing it safe:
//! - h2's connection task reads before it writes, so a request queued on a connection whose EOF is
//!   already readable fails at the EOF without being written;
//! - tokio caches readiness, so that read may not see an EOF the I/O driver has not processed yet:
//!   before each write the socket is peeked (a non-blocking `recv(MSG_PEEK)` on a duplicate of its
//!   descriptor), and a write to a connection the peer has closed fails without writing.
//!
//! The peek costs a system call per write, and its evidence pays only where another endpoint
//! can take the request: with one endpoint a request lost with its connection would go back to
//! the server that just dropped it, so the balancer arms the peek ([`Wire::set_guarded`]) only
//! while the endpoint set has more than one endpoint. (A request a graceful GOAWAY proves
//! unsent needs no peek: one endpoint re-sends it on its next connection.)
//!
//! Even armed, a write peeks only while some marked request has had no successful write start
//! after its mark. Otherwise no later loss can prove any marked request unsent and the peek could
//! not make one retryable: h2's other writes (the end of a request body, window updates, pings
//! and the second write of each unary call) skip it. The mark publishes its index before it
//! takes it for good (re-reading the counter until no write started in between), so every write
//! that starts after a mark sees it and peeks: a write racing the mark cannot slip a request's
//! bytes out unpeeked. A serial unary call on an armed connection thus peeks once.
//!
//! The same watch serves three more ends: the loss of the endpoint's last live connection is
//! told to the endpoint ([`Wire::on_connection_lost`]: it turns suspect and is probed), the first
//! bytes a server sends on a plaintext connection tell a TLS, HTTP/1.1 or silent server from an
//! HTTP/2 one ([`Wire::first_answer`], for the error's hint), and the bytes read (or waiting to
//! be read: [`Wire::has_unread`]) tell a server that stopped answering from a client that did
//! not get to read its answer.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The write and loss record of an endpoint's connections (lock-free: two loads per request).
#[derive(Debug, Default)]
pub(crate) struct Wire {
    /// Writes started (each takes the next index), on every connection of the endpoint.
    attempts: AtomicU64,
    /// One past the largest index of a successful write (only grows: `fetch_max`).
    sent_to: AtomicU64,
    /// Losses observed (incremented after `loss_sent_to` is updated).
    losses: AtomicU64,
    /// Losses of connections that never read a byte (incremented before `losses`): the server
    /// sent nothing on them, not even the SETTINGS frame an HTTP/2 server sends first.
    silent_losses: AtomicU64,
    /// `sent_to` when the last loss was observed (only grows: `fetch_max`).
    loss_sent_to: AtomicU64,
    /// Peek before each write (only worth its system call when a retry can use the evidence).
    guarded: AtomicBool,
    /// The largest `attempts` of a [`Wire::mark`]: at least `sent_to` while a request handed to a
    /// connection may have had no successful write start after its mark.
    marked: AtomicU64,
    /// Connections established and not yet lost (no read EOF, no I/O error, not dropped).
    live: AtomicUsize,
    /// What the server's first bytes on the latest plaintext connection were (a
    /// [`FirstAnswer`] as `u8`; see [`Wire::first_answer`]).
    first_answer: AtomicU8,
    /// Reads that returned bytes, on every connection: a probe that waited while this stood
    /// still saw a connection that carries nothing (see [`Wire::reads`]).
    reads: AtomicU64,
    /// The second descriptor of each established connection (the one [`Watched`] peeks with),
    /// to close it ([`Wire::close_all`]).
    sockets: parking_lot::Mutex<Vec<Arc<std::net::TcpStream>>>,
    /// Times [`Wire::close_all`] closed connections.
    closings: AtomicU64,
    /// Told when the last established connection is lost (see [`Wire::on_connection_lost`]).
    lost_hook: std::sync::OnceLock<LostHook>,
}

/// What the endpoint does when its last established connection is lost.
struct LostHook(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for LostHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LostHook")
    }
}

/// What a server's first bytes on a plaintext connection were ([`Wire::first_answer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstAnswer {
    /// Anything else, or not known yet: an HTTP/2 server's first byte is the top byte of its
    /// SETTINGS frame's length (0).
    Http2 = 0,
    /// A TLS record: a TLS server reading the client's HTTP/2 preface as a bad TLS record
    /// answers with a TLS alert (`0x15 0x03 ...`).
    Tls = 1,
    /// `HTTP/1.`: an HTTP/1.1 server answering the preface (`PRI * HTTP/2.0`) as a bad request.
    Http1 = 2,
    /// The connection was closed (or reset) before the server sent a byte: an HTTP/1.1 server
    /// that does not take the preface for a request, or a server refusing the client.
    Nothing = 3,
}

impl FirstAnswer {
    /// What the server's first bytes tell.
    fn of(first: &[u8]) -> FirstAnswer {
        if is_tls_record(first) {
            FirstAnswer::Tls
        } else if first.starts_with(b"HTTP/1.") {
            FirstAnswer::Http1
        } else {
            FirstAnswer::Http2
        }
    }
}

/// The state of a [`Wire`] when a request was handed to the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    /// Writes started before the mark.
    attempts: u64,
    losses: u64,
    silent_losses: u64,
    closings: u64,
    /// Reads that returned bytes before the mark.
    reads: u64,
}

impl Wire {
    /// Taken just before a request is handed to its connection (attempts first: a loss counted after
    /// the mark saw at least its `sent_to`).
    pub(crate) fn mark(&self) -> Mark {
        // Publish the index in `marked` before taking it: a write that starts later reads it and
        // peeks. One that started in between may not have: take the later index then (that write
        // counts as before the mark, as it is: this request is not handed over yet). Bounded:
        // should writes keep starting, a write that missed the mark may count as carrying the
        // request, which is then not re-sent (the safe side).
        let mut attempts = self.attempts.load(Ordering::SeqCst);
        for _ in 0..4 {
            self.marked.fetch_max(attempts, Ordering::SeqCst);
            let now = self.attempts.load(Ordering::SeqCst);
            if now == attempts {
                break;
            }
            attempts = now;
        }
        let losses = self.losses.load(Ordering::SeqCst);
        Mark {
            attempts,
            losses,
            silent_losses: self.silent_losses.load(Ordering::SeqCst),
            closings: self.closings.load(Ordering::SeqCst),
            reads: self.reads.load(Ordering::Relaxed),
        }
    }

    /// Calls `hook` (from the connection's task) each time the endpoint's last established
    /// connection is lost by a read EOF or an I/O error: the server died, restarted or closed
    /// it. Not when the client itself drops the connection. Set once; later calls are ignored.
    pub(crate) fn on_connection_lost(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.lost_hook.set(LostHook(Box::new(hook)));
    }

    /// Arms (or disarms) the peek before each write.
    pub(crate) fn set_guarded(&self, on: bool) {
        self.guarded.store(on, Ordering::Relaxed);
    }

    /// Starts a write: its index, and whether it must be preceded by a peek (armed, and a marked
    /// request has had no successful write start after its mark; see the module docs).
    fn start_write(&self) -> (u64, bool) {
        let index = self.attempts.fetch_add(1, Ordering::SeqCst);
        let peek = self.guarded.load(Ordering::Relaxed)
            && self.marked.load(Ordering::SeqCst) >= self.sent_to.load(Ordering::SeqCst);
        (index, peek)
    }

    /// The write of `index` succeeded.
    fn on_write(&self, index: u64) {
        self.sent_to.fetch_max(index + 1, Ordering::SeqCst);
    }

    fn on_loss(&self) {
        self.loss_sent_to
            .fetch_max(self.sent_to.load(Ordering::SeqCst), Ordering::SeqCst);
        self.losses.fetch_add(1, Ordering::SeqCst);
    }

    /// True while a connection of the endpoint is established and no loss was seen on it.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed) > 0
    }

    /// What the server answered on the latest plaintext connection that got an answer or was
    /// closed: the first bytes tell a server that is not HTTP/2 from one that is. Only a
    /// plaintext connection is watched: under TLS every server sends TLS records.
    pub(crate) fn first_answer(&self) -> FirstAnswer {
        match self.first_answer.load(Ordering::Relaxed) {
            1 => FirstAnswer::Tls,
            2 => FirstAnswer::Http1,
            3 => FirstAnswer::Nothing,
            _ => FirstAnswer::Http2,
        }
    }

    /// Reads that returned bytes so far, on every connection of the endpoint.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// True when bytes from the server wait unread on a connection of the endpoint: it has
    /// answered, though the client has not read the answer yet (its runtime was busy elsewhere,
    /// or the stall check ran before the connection's task in the same turn). "Nothing heard"
    /// must not be concluded from the read count alone then: a client starved of CPU would take
    /// every server for stalled. A pending EOF or reset is not counted: its loss is recorded
    /// when it is read, and a closed connection waiting to be dropped must not count forever.
    pub(crate) fn has_unread(&self) -> bool {
        self.sockets
            .lock()
            .iter()
            .any(|s| matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0))
    }

    /// Shuts every established connection down (both directions): their calls fail at once with
    /// a connection error, and the channel connects anew for the next one. For a connection the
    /// server stopped answering on (h2's keepalive would do the same after its PING timeout).
    pub(crate) fn close_all(&self) -> usize {
        let sockets = self.sockets.lock();
        if !sockets.is_empty() {
            self.closings.fetch_add(1, Ordering::SeqCst);
        }
        for s in sockets.iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        sockets.len()
    }

    /// True when no byte came from the server after `mark`, on any connection of the endpoint,
    /// read or waiting unread.
    pub(crate) fn silent_since(&self, mark: Mark) -> bool {
        self.reads.load(Ordering::Relaxed) == mark.reads && !self.has_unread()
    }

    /// True when [`Wire::close_all`] closed connections after `mark`.
    pub(crate) fn closed_since(&self, mark: Mark) -> bool {
        self.closings.load(Ordering::SeqCst) > mark.closings
    }

    /// True when a connection loss (a read EOF, an I/O error) was observed after `mark`.
    pub(crate) fn lost_since(&self, mark: Mark) -> bool {
        self.losses.load(Ordering::SeqCst) > mark.losses
    }

    /// True when a connection loss was observed after `mark` and no write that started after
    /// `mark`, on any connection of the endpoint, had succeeded by then. Only meaningful for a
    /// request that failed with a connection-loss error (an I/O error of its connection, which
    /// [`Watched`] records before h2 sees it): its bytes could only have been written before that
    /// loss, and `loss_sent_to`, which only grows, is within `mark.attempts` only if it was so at
    /// every loss since.
    pub(crate) fn unsent_since(&self, mark: Mark) -> bool {
        self.losses.load(Ordering::SeqCst) > mark.losses
            && self.loss_sent_to.load(Ordering::SeqCst) <= mark.attempts
    }

    /// True when connections were lost after `mark` and every one of them was lost before the
    /// server sent it a byte. A request that failed with a connection-loss error then was never
    /// processed, though it may have been written: an HTTP/2 server sends its SETTINGS before
    /// it reads a request (grpc-go's and hyper's do), and grpc-go sends no call on a connection
    /// before they arrive. A server that accepted and then reset it (one shutting down, whose
    /// kernel had queued the connection) is the usual case.
    ///
    /// Never after [`Wire::close_all`] closed connections since `mark`: a connection the client
    /// closed itself was not dropped by the server, which may be frozen with the request in its
    /// socket and run it once it wakes.
    pub(crate) fn only_silent_losses_since(&self, mark: Mark) -> bool {
        if self.closed_since(mark) {
            return false;
        }
        // silent losses are counted before losses, and read here before them (in `mark`
        // after them): a loss counted meanwhile can only make this answer false
        let silent = self.silent_losses.load(Ordering::SeqCst) - mark.silent_losses;
        let losses = self.losses.load(Ordering::SeqCst) - mark.losses;
        losses > 0 && silent >= losses
    }
}

/// TCP keepalive of the endpoints' connections: idle time before the first probe and between
/// probes (Go's `net.Dialer` default; the probe count stays the kernel's, 9 on Linux).
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// Connects plain TCP (`TCP_NODELAY`, keepalive probes) to `host:port` of the URI, within `connect_timeout`, and
/// watches the connection.
///
/// The connect timeout is applied around the connect alone, not as a wrapper that would stay
/// between h2 and the socket for the connection's whole life (as `hyper_timeout`'s stream does
/// in tonic's channel). A timeout fails with `TimedOut` ("deadline has elapsed"), which the
/// endpoint's connection wraps in `ConnectFailed` as every connect error.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pub(crate) wire: Arc<Wire>,
    pub(crate) connect_timeout: Option<Duration>,
    /// The connection carries HTTP/2 directly (no TLS over it): its first bytes from the
    /// server are looked at ([`Wire::first_answer`]).
    pub(crate) plaintext: bool,
}

/// `connect`, failed with `TimedOut` if it does not finish within `timeout` (the TCP connect
/// here, the TLS handshake in `conn`).
pub(super) async fn within<T>(
    timeout: Option<Duration>,
    connect: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, connect)
            .await
            .map_err(|elapsed| io::Error::new(io::ErrorKind::TimedOut, elapsed))?,
        None => connect.await,
    }
}

impl tower::Service<http::Uri> for Connector {
    type Response = TokioIo<Watched>;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<TokioIo<Watched>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let wire = Arc::clone(&self.wire);
        let timeout = self.connect_timeout;
        let sniff = self.plaintext;
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host in URI"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(80);
            let tcp = within(timeout, TcpStream::connect((host, port))).await?;
            tcp.set_nodelay(true)?;
            // keepalive probes after TCP_KEEPALIVE of quiet, every TCP_KEEPALIVE, as Go's dialer
            // (under every grpc-go client) sets them: a NAT or firewall on the path keeps the
            // flow of an idle connection, and a peer that vanished is found. Best effort.
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(TCP_KEEPALIVE)
                .with_interval(TCP_KEEPALIVE);
            let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
            // a second descriptor of the same socket (already non-blocking) to peek at it without
            // going through tokio's cached readiness
            let std = tcp.into_std()?;
            let peek = Arc::new(std.try_clone()?);
            let tcp = TcpStream::from_std(std)?;
            wire.live.fetch_add(1, Ordering::Relaxed);
            wire.sockets.lock().push(Arc::clone(&peek));
            Ok(TokioIo::new(Watched {
                tcp,
                peek,
                wire,
                live: true,
                sniff,
                heard: false,
            }))
        })
    }
}

/// A TCP connection whose writes and losses are recorded in its endpoint's [`Wire`].
#[derive(Debug)]
pub(crate) struct Watched {
    tcp: TcpStream,
    peek: Arc<std::net::TcpStream>,
    wire: Arc<Wire>,
    /// Counted in `wire.live` (until its first loss or its drop).
    live: bool,
    /// The first bytes read are still to be checked for a TLS record (plaintext only).
    sniff: bool,
    /// A byte was read from the server.
    heard: bool,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.not_live();
        let peek = &self.peek;
        self.wire.sockets.lock().retain(|s| !Arc::ptr_eq(s, peek));
    }
}

impl Watched {
    /// Records a loss of this connection (the first one of a live connection tells the hook
    /// when no other connection of the endpoint is live).
    fn lost(&mut self) {
        if std::mem::take(&mut self.sniff) {
            // A write can fail (the server answered and closed: a broken pipe) before the
            // server's first bytes were read; they may still wait in the socket, unread.
            let mut first = [0u8; 8];
            let answer = match self.peek.peek(&mut first) {
                Ok(n) if n > 0 => FirstAnswer::of(&first[..n]),
                _ => FirstAnswer::Nothing,
            };
            self.wire
                .first_answer
                .store(answer as u8, Ordering::Relaxed);
        }
        let was_live = self.live;
        self.not_live();
        if !self.heard {
            self.wire.silent_losses.fetch_add(1, Ordering::SeqCst);
        }
        self.wire.on_loss();
        if was_live
            && !self.wire.is_live()
            && let Some(hook) = self.wire.lost_hook.get()
        {
            (hook.0)();
        }
    }

    /// Waits until the socket has something to read (tests: bytes the server sent arrived).
    #[cfg(test)]
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.tcp.readable().await
    }

    fn not_live(&mut self) {
        if std::mem::take(&mut self.live) {
            self.wire.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Starts a write: its index, or `Err` when the peer has closed or reset the connection
    /// (nothing must be written then). Never `Err` while the wire is not guarded or no marked
    /// request awaits its first write.
    fn start_write(&self) -> io::Result<u64> {
        let (index, peek) = self.wire.start_write();
        if !peek {
            return Ok(index);
        }
        match self.peek.peek(&mut [0u8; 1]) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "connection closed by the peer before the write",
            )),
            Ok(_) => Ok(index),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(index),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(index),
            Err(e) => Err(e),
        }
    }

    fn written(&mut self, index: u64, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => self.wire.on_write(index),
            Poll::Ready(Err(_)) => self.lost(),
            _ => {}
        }
        r
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        match &r {
            Poll::Ready(Ok(())) if room && buf.filled().len() == before => this.lost(),
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.heard = true;
                this.wire.reads.fetch_add(1, Ordering::Relaxed);
                if this.sniff {
                    this.sniff = false;
                    let answer = FirstAnswer::of(&buf.filled()[before..]);
                    this.wire
                        .first_answer
                        .store(answer as u8, Ordering::Relaxed);
                }
            }
            Poll::Ready(Err(_)) => this.lost(),
            _ => {}
        }
        r
    }
}

/// The start of a TLS record: content type alert (0x15) or handshake (0x16), then the major
/// version 3 (every SSL 3 / TLS version). Judged on the first byte alone when only one came.
fn is_tls_record(first: &[u8]) -> bool {
    matches!(first, [0x15 | 0x16, 0x03, ..] | [0x15 | 0x16])
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let index = match this.start_write() {
            Ok(index) => index,
            Err(e) => {
                this.lost();
                return Poll::Ready(Err(e));
            }
        };
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.written(index, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let index = match this.start_write() {
            Ok(index) => index,
            Err(e) => {
                this.lost();
                return Poll::Ready(Err(e));
            }
        };
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.written(index, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A listener on 127.0.0.1:0, its URI, and a plaintext connector to it that records into
    /// a fresh wire.
    async fn plaintext_wire() -> (tokio::net::TcpListener, http::Uri, Arc<Wire>, Connector) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let wire = Arc::new(Wire::default());
        let c = Connector {
            wire: wire.clone(),
            connect_timeout: None,
            plaintext: true,
        };
        (l, uri, wire, c)
    }

    /// One successful write; whether it peeked first.
    fn write(w: &Wire) -> bool {
        let (index, peek) = w.start_write();
        w.on_write(index);
        peek
    }

    #[test]
    fn a_loss_proves_unsent_only_when_nothing_was_written_since_the_mark() {
        let w = Wire::default();
        write(&w);
        let m = w.mark();
        assert!(!w.unsent_since(m), "no loss yet");
        w.on_loss();
        assert!(
            w.unsent_since(m),
            "lost with nothing written since the mark"
        );
        let m2 = w.mark();
        write(&w);
        w.on_loss();
        assert!(!w.unsent_since(m2), "written before the loss");
        assert!(!w.unsent_since(m), "a later loss after a write");
    }

    /// A write under way as a request is marked (its bytes were ready before the request was
    /// handed over) neither counts as carrying the request nor stops the peek before the write
    /// that may carry it: a peer that closed meanwhile leaves the request provably unsent.
    #[test]
    fn a_write_started_before_the_mark_neither_carries_its_request_nor_stops_the_peek() {
        let w = Wire::default();
        w.set_guarded(true);
        write(&w);
        let (racing, peek) = w.start_write();
        assert!(!peek, "no marked request waits");
        let m = w.mark();
        w.on_write(racing);
        let (_, peek) = w.start_write();
        assert!(peek, "the marked request's write peeks");
        // the peek found the peer gone: a loss, nothing written
        w.on_loss();
        assert!(w.unsent_since(m));
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_fails_unwritten_and_a_read_eof_is_a_loss() {
        let (l, uri, wire, mut c) = plaintext_wire().await;
        wire.set_guarded(true);
        let io = tower::Service::call(&mut c, uri).await.unwrap();
        let mut io = io.into_inner();
        let (mut server, _) = l.accept().await.unwrap();
        io.write_all(b"a").await.unwrap();
        let mut b = [0u8; 1];
        server.read_exact(&mut b).await.unwrap();
        let m = wire.mark();
        drop(server);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // the peer has closed: the write fails and writes nothing
        let err = io.write(b"b").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert!(wire.unsent_since(m));
        let m = wire.mark();
        assert_eq!(io.read(&mut b).await.unwrap(), 0);
        assert!(wire.unsent_since(m), "EOF recorded");
    }

    /// A connection lost before the server sent it a byte is a silent loss, whatever was
    /// written on it; one that heard the server is not, and makes the losses since a mark
    /// no longer all silent.
    #[tokio::test]
    async fn a_connection_lost_before_the_server_sent_a_byte_is_a_silent_loss() {
        let (l, uri, wire, mut c) = plaintext_wire().await;
        let mut b = [0u8; 16];

        // written to, then closed by a server that sent nothing
        let m = wire.mark();
        let mut io = tower::Service::call(&mut c, uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (server, _) = l.accept().await.unwrap();
        io.write_all(b"a request").await.unwrap();
        drop(server);
        assert_eq!(io.read(&mut b).await.unwrap_or(0), 0);
        assert!(!wire.unsent_since(m), "the request was written");
        assert!(wire.only_silent_losses_since(m));

        // a server that answered, then closed: not silent
        let m = wire.mark();
        let mut io = tower::Service::call(&mut c, uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (mut server, _) = l.accept().await.unwrap();
        server
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        assert!(io.read(&mut b).await.unwrap() > 0);
        io.write_all(b"a request").await.unwrap();
        drop(server);
        assert_eq!(io.read(&mut b).await.unwrap_or(0), 0);
        assert!(wire.lost_since(m));
        assert!(!wire.only_silent_losses_since(m));

        // nothing lost since the mark: not a silent loss either
        assert!(!wire.only_silent_losses_since(wire.mark()));

        // written to a server that sent nothing, then closed by the client (a probe found
        // the server silent): the server may run the request when it wakes, not silent
        let m = wire.mark();
        let mut io = tower::Service::call(&mut c, uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (_frozen, _) = l.accept().await.unwrap();
        io.write_all(b"a request").await.unwrap();
        assert!(wire.close_all() > 0);
        assert_eq!(io.read(&mut b).await.unwrap_or(0), 0);
        assert!(wire.lost_since(m) && wire.closed_since(m));
        assert!(!wire.only_silent_losses_since(m));
    }

    /// Connections get TCP_NODELAY and Go's dialer's keepalive: probes after 15 s of quiet,
    /// every 15 s.
    #[tokio::test]
    async fn connections_get_nodelay_and_go_s_keepalive() {
        let (l, uri, _wire, mut c) = plaintext_wire().await;
        let io = tower::Service::call(&mut c, uri).await.unwrap();
        let (_server, _) = l.accept().await.unwrap();
        let sock = socket2::SockRef::from(&*io.inner().peek);
        assert!(sock.tcp_nodelay().unwrap());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), TCP_KEEPALIVE);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), TCP_KEEPALIVE);
    }

    #[tokio::test]
    async fn a_connection_is_live_until_its_first_loss_or_its_drop() {
        let (l, uri, wire, mut c) = plaintext_wire().await;
        assert!(!wire.is_live(), "no connection yet");
        let mut a = tower::Service::call(&mut c, uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (server_a, _) = l.accept().await.unwrap();
        let b = tower::Service::call(&mut c, uri).await.unwrap();
        assert!(wire.is_live());
        drop(b);
        assert!(wire.is_live(), "one connection left");
        drop(server_a);
        let mut buf = [0u8; 1];
        assert_eq!(a.read(&mut buf).await.unwrap(), 0);
        assert!(
            !wire.is_live(),
            "its read EOF: lost, although not dropped yet"
        );
        drop(a);
        assert!(!wire.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_past_its_timeout_fails_timed_out() {
        let t = std::time::Duration::from_secs(3);
        let err = within(Some(t), std::future::pending::<io::Result<()>>())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(err.to_string(), "deadline has elapsed");
        let ready = within(Some(t), async { Ok::<_, io::Error>(7) }).await;
        assert_eq!(ready.unwrap(), 7);
        let unbounded = within(None, async { Ok::<_, io::Error>(8) }).await;
        assert_eq!(unbounded.unwrap(), 8);
    }

    #[test]
    fn an_armed_wire_peeks_only_until_a_marked_request_has_had_a_write() {
        assert!(!write(&Wire::default()), "unarmed: never");
        let wire = Wire::default();
        wire.set_guarded(true);
        // nothing written yet: the conservative side (a request may be waiting)
        assert!(write(&wire));
        assert!(
            !write(&wire),
            "every request so far has had a write after its mark"
        );
        let _ = wire.mark();
        assert!(write(&wire), "a request handed over since the last write");
        assert!(!write(&wire));
        let _ = wire.mark();
        wire.set_guarded(false);
        assert!(
            !write(&wire),
            "disarmed: never, even with a request waiting"
        );
    }

    #[tokio::test]
    async fn an_unguarded_wire_does_not_peek_before_writes() {
        let (l, uri, wire, mut c) = plaintext_wire().await;
        let mut io = tower::Service::call(&mut c, uri)
            .await
            .unwrap()
            .into_inner();
        let (server, _) = l.accept().await.unwrap();
        drop(server);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // no peek: the kernel takes the bytes (the loss shows up later, as a read EOF or reset)
        assert_eq!(io.write(b"b").await.unwrap(), 1);
        wire.set_guarded(true);
        // a request handed to the connection: its first write peeks
        let _ = wire.mark();
        let err = io.write(b"c").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[tokio::test]
    async fn the_first_bytes_of_a_plaintext_connection_tell_a_tls_server() {
        let (l, uri, wire, c) = plaintext_wire().await;
        let connect = |plaintext| Connector {
            plaintext,
            ..c.clone()
        };
        // (server's first bytes, plaintext, what they tell)
        let cases: [(&[u8], bool, FirstAnswer); 5] = [
            // rustls' fatal decode_error alert, its answer to an HTTP/2 preface
            (
                &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32],
                true,
                FirstAnswer::Tls,
            ),
            // an HTTP/2 server's SETTINGS frame header clears it
            (
                &[0x00, 0x00, 0x12, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00],
                true,
                FirstAnswer::Http2,
            ),
            // a ServerHello on a TLS connection is not looked at
            (&[0x16, 0x03, 0x03, 0x00, 0x7a], false, FirstAnswer::Http2),
            (&[0x16, 0x03, 0x01], true, FirstAnswer::Tls),
            (b"HTTP/1.1 400 Bad Request\r\n", true, FirstAnswer::Http1),
        ];
        for (bytes, plaintext, told) in cases {
            let mut io = tower::Service::call(&mut connect(plaintext), uri.clone())
                .await
                .unwrap()
                .into_inner();
            let (mut server, _) = l.accept().await.unwrap();
            server.write_all(bytes).await.unwrap();
            let mut buf = [0u8; 16];
            assert!(io.read(&mut buf).await.unwrap() > 0);
            assert_eq!(wire.first_answer(), told, "{bytes:02x?}");
            // later bytes of the same connection are not looked at
            server.write_all(&[0x00, 0x00]).await.unwrap();
            assert!(io.read(&mut buf).await.unwrap() > 0);
            assert_eq!(wire.first_answer(), told, "{bytes:02x?}");
        }
        // closed before a byte
        let mut io = tower::Service::call(&mut connect(true), uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (server, _) = l.accept().await.unwrap();
        drop(server);
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(wire.first_answer(), FirstAnswer::Nothing);
        // an answer, then the close, before the client read a byte: the write that fails
        // still finds the answer in the socket
        let mut io = tower::Service::call(&mut connect(true), uri.clone())
            .await
            .unwrap()
            .into_inner();
        let (mut server, _) = l.accept().await.unwrap();
        server
            .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            .await
            .unwrap();
        drop(server);
        // the first write is taken by the kernel and answered by a reset; a later one fails
        let failed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while io.write(b"PRI * HTTP/2.0").await.is_ok() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(failed.is_ok(), "a write to a closed connection fails");
        assert_eq!(wire.first_answer(), FirstAnswer::Http1);
        assert!(is_tls_record(&[0x15]));
        assert!(!is_tls_record(&[0x15, 0x00]));
        assert!(!is_tls_record(b"HTTP/1.1 400"));
    }
}
