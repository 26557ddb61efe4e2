//! The TCP connections of one endpoint, watched so that a request failed by a connection loss can
//! be proven never to have left the client.
//!
//! When a server dies, the client learns it only when its connection task reads the EOF (or reset).
//! A request sent in between is queued on the dead connection and h2 fails it with the same
//! `BrokenPipe`/`ConnectionReset` as the requests that were really in flight (which the server may
//! have processed, so they must not be retried). The evidence that tells them apart is the socket
//! itself: every successful write on any connection of the endpoint bumps a counter, and every
//! observed loss (read EOF, read or write error) records the counter. A request whose attempt
//! failed with a connection-loss error, when a loss was recorded after it was sent and nothing was
//! written between its sending and that loss, never had a byte on the wire: safe to send elsewhere.
//!
//! Two details make the window between the server's death and the client noticing it safe:
//! - h2's connection task reads before it writes, so a request queued on a connection whose EOF is
//!   already readable fails at the EOF without being written;
//! - tokio caches readiness, so that read may not see an EOF the I/O driver has not processed yet:
//!   before each write the socket is peeked (a non-blocking `recv(MSG_PEEK)` on a duplicate of its
//!   descriptor), and a write to a connection the peer has closed fails without writing.
//!
//! The peek costs a system call per write, and only a retry needs its evidence: a client with one
//! endpoint never retries (there is nowhere else to go), so the balancer arms it
//! ([`Wire::set_guarded`]) only while the endpoint set has more than one endpoint.
//!
//! Even armed, a write peeks only when a request was handed to a connection of the endpoint since
//! the last successful write (a [`Mark`] that saw the current write count). Otherwise every
//! request marked so far already has a write after its mark, so no later loss can prove it unsent
//! and the peek could not make any request retryable: h2's other writes (the end of a request
//! body, window updates, pings and the second write of each unary call) skip it. A mark taken
//! between the check and the write counts that write as possibly carrying its request (not
//! retryable): the safe side. A serial unary call on an armed connection thus peeks once.
//!
//! The same watch serves two more ends: the loss of the endpoint's last live connection is told
//! to the endpoint ([`Wire::on_connection_lost`]: it turns suspect and is probed), and the first
//! bytes a server sends on a plaintext connection tell a TLS, HTTP/1.1 or silent server from an
//! HTTP/2 one ([`Wire::first_answer`], for the error's hint).

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
    /// Successful writes, on every connection of the endpoint.
    writes: AtomicU64,
    /// Losses observed (incremented after `loss_writes` is updated).
    losses: AtomicU64,
    /// `writes` when the last loss was observed (only grows: `fetch_max`).
    loss_writes: AtomicU64,
    /// Peek before each write (only worth its system call when a retry can use the evidence).
    guarded: AtomicBool,
    /// The largest `writes` seen by a [`Wire::mark`]: equal to `writes` while a request handed to
    /// a connection may have had no write since (the writes that can carry its first byte).
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

/// The state of a [`Wire`] when a request was handed to the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    writes: u64,
    losses: u64,
    closings: u64,
}

impl Wire {
    /// Taken just before a request is handed to the channel (writes first: a loss counted after
    /// the mark saw at least `writes`).
    pub(crate) fn mark(&self) -> Mark {
        let writes = self.writes.load(Ordering::SeqCst);
        self.marked.fetch_max(writes, Ordering::SeqCst);
        Mark {
            writes,
            losses: self.losses.load(Ordering::SeqCst),
            closings: self.closings.load(Ordering::Relaxed),
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

    /// True when a write now must be preceded by a peek: armed, and a request was marked since
    /// the last successful write (see the module docs).
    fn must_peek(&self) -> bool {
        self.guarded.load(Ordering::Relaxed)
            && self.marked.load(Ordering::SeqCst) == self.writes.load(Ordering::SeqCst)
    }

    fn on_write(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    fn on_loss(&self) {
        self.loss_writes
            .fetch_max(self.writes.load(Ordering::SeqCst), Ordering::SeqCst);
        self.losses.fetch_add(1, Ordering::SeqCst);
    }

    /// True while a connection of the endpoint is established and no loss was seen on it: a
    /// request handed to the channel now is sent at once (the channel's worker dispatches it
    /// without waiting for a connection).
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

    /// Shuts every established connection down (both directions): their calls fail at once with
    /// a connection error, and the channel connects anew for the next one. For a connection the
    /// server stopped answering on (h2's keepalive would do the same after its PING timeout).
    pub(crate) fn close_all(&self) -> usize {
        let sockets = self.sockets.lock();
        if !sockets.is_empty() {
            self.closings.fetch_add(1, Ordering::Relaxed);
        }
        for s in sockets.iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        sockets.len()
    }

    /// True when [`Wire::close_all`] closed connections after `mark`.
    pub(crate) fn closed_since(&self, mark: Mark) -> bool {
        self.closings.load(Ordering::Relaxed) > mark.closings
    }

    /// True when a connection loss (a read EOF, an I/O error) was observed after `mark`.
    pub(crate) fn lost_since(&self, mark: Mark) -> bool {
        self.losses.load(Ordering::SeqCst) > mark.losses
    }

    /// True when a connection loss was observed after `mark` and nothing had been written on any
    /// connection of the endpoint between `mark` and that loss. Only meaningful for a request that
    /// failed with a connection-loss error (an I/O error of its connection, which [`Watched`]
    /// records before h2 sees it): its bytes could only have been written before that loss, and
    /// `loss_writes`, which only grows, equals `mark.writes` only if every loss since did.
    pub(crate) fn unsent_since(&self, mark: Mark) -> bool {
        self.losses.load(Ordering::SeqCst) > mark.losses
            && self.loss_writes.load(Ordering::SeqCst) == mark.writes
    }
}

/// Connects plain TCP (`TCP_NODELAY`) to `host:port` of the URI, within `connect_timeout`, and
/// watches the connection.
///
/// The connect timeout is applied here, around the connect alone, rather than with tonic's
/// `Endpoint::connect_timeout`: tonic implements that with `hyper_timeout::TimeoutConnector`,
/// whose stream (`TimeoutStream`, boxed) stays between h2 and the socket for the connection's
/// whole life, checking its (unset) read and write timeouts on every read and write. A timeout
/// fails with the error `TimeoutConnector` gives (`TimedOut`, "deadline has elapsed"), which
/// tonic then wraps in its `ConnectError` as every connect error of this connector.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pub(crate) wire: Arc<Wire>,
    pub(crate) connect_timeout: Option<Duration>,
    /// The connection carries HTTP/2 directly (no TLS over it): its first bytes from the
    /// server are looked at ([`Wire::first_answer`]).
    pub(crate) plaintext: bool,
}

/// `connect`, failed with `TimedOut` if it does not finish within `timeout`.
async fn within<T>(
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
            self.wire
                .first_answer
                .store(FirstAnswer::Nothing as u8, Ordering::Relaxed);
        }
        let was_live = self.live;
        self.not_live();
        self.wire.on_loss();
        if was_live
            && !self.wire.is_live()
            && let Some(hook) = self.wire.lost_hook.get()
        {
            (hook.0)();
        }
    }

    fn not_live(&mut self) {
        if std::mem::take(&mut self.live) {
            self.wire.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// `Err` when the peer has closed or reset the connection (nothing must be written then);
    /// always `Ok` while the wire is not guarded or no request awaits its first write.
    fn check_peer(&self) -> io::Result<()> {
        if !self.wire.must_peek() {
            return Ok(());
        }
        match self.peek.peek(&mut [0u8; 1]) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "connection closed by the peer before the write",
            )),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn written(&mut self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => self.wire.on_write(),
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
                this.wire.reads.fetch_add(1, Ordering::Relaxed);
                if this.sniff {
                    this.sniff = false;
                    let first = &buf.filled()[before..];
                    let answer = if is_tls_record(first) {
                        FirstAnswer::Tls
                    } else if first.starts_with(b"HTTP/1.") {
                        FirstAnswer::Http1
                    } else {
                        FirstAnswer::Http2
                    };
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
        if let Err(e) = this.check_peer() {
            this.lost();
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.written(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check_peer() {
            this.lost();
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.written(r)
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

    #[test]
    fn a_loss_proves_unsent_only_when_nothing_was_written_since_the_mark() {
        let w = Wire::default();
        w.on_write();
        let m = w.mark();
        assert!(!w.unsent_since(m), "no loss yet");
        w.on_loss();
        assert!(
            w.unsent_since(m),
            "lost with nothing written since the mark"
        );
        let m2 = w.mark();
        w.on_write();
        w.on_loss();
        assert!(!w.unsent_since(m2), "written before the loss");
        assert!(!w.unsent_since(m), "a later loss after a write");
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_fails_unwritten_and_a_read_eof_is_a_loss() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let wire = Arc::new(Wire::default());
        wire.set_guarded(true);
        let mut c = Connector {
            wire: wire.clone(),
            connect_timeout: None,
            plaintext: true,
        };
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

    #[tokio::test]
    async fn a_connection_is_live_until_its_first_loss_or_its_drop() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let wire = Arc::new(Wire::default());
        assert!(!wire.is_live(), "no connection yet");
        let mut c = Connector {
            wire: wire.clone(),
            connect_timeout: None,
            plaintext: true,
        };
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
        let wire = Wire::default();
        assert!(!wire.must_peek(), "unarmed: never");
        wire.set_guarded(true);
        // nothing written yet: the conservative side (a request may be waiting)
        assert!(wire.must_peek());
        wire.on_write();
        assert!(
            !wire.must_peek(),
            "every request so far has had a write after its mark"
        );
        let _ = wire.mark();
        assert!(
            wire.must_peek(),
            "a request handed over since the last write"
        );
        wire.on_write();
        wire.on_write();
        assert!(!wire.must_peek());
        let _ = wire.mark();
        wire.set_guarded(false);
        assert!(
            !wire.must_peek(),
            "disarmed: never, even with a request waiting"
        );
    }

    #[tokio::test]
    async fn an_unguarded_wire_does_not_peek_before_writes() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let wire = Arc::new(Wire::default());
        let mut c = Connector {
            wire: wire.clone(),
            connect_timeout: None,
            plaintext: true,
        };
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
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let wire = Arc::new(Wire::default());
        let connect = |plaintext| Connector {
            wire: wire.clone(),
            connect_timeout: None,
            plaintext,
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
        assert!(is_tls_record(&[0x15]));
        assert!(!is_tls_record(&[0x15, 0x00]));
        assert!(!is_tls_record(b"HTTP/1.1 400"));
    }
}
