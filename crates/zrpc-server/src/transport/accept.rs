//! The accept loop: the stream of connections handed to zrpc's serve loop (`super::serve`), in
//! place of tonic's `TcpIncoming`.
//!
//! - accept errors (EMFILE, ENFILE, ENOBUFS, ...) back off 5 ms .. 1 s and are logged at most
//!   once per second, instead of being retried in a hot loop;
//! - errors of one aborted connection (ECONNABORTED, ECONNRESET) are skipped at once;
//! - over `MaxConnections` a connection is accepted and closed at once (logged once per second);
//! - TCP_NODELAY on, TCP keepalive probes (`Transport.TcpKeepalive`), then [`Guarded`] (with
//!   the connection's `:authority` repair) around the stream;
//! - with `Tls` (the `tls` feature), the TLS handshake runs in a task per connection (under
//!   `Transport.HandshakeTimeout`) so a slow handshake never holds up the accept loop; the
//!   order is `TcpStream -> TlsStream -> Guarded` (`Guarded` reads the decrypted HTTP/2
//!   octets); a failed handshake is logged at most once per second, one whose client sent no
//!   TLS at all as a likely plaintext client, once per client address per minute.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
#[cfg(feature = "tls")]
use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::backoff::{AcceptBackoff, LogGate};
use super::conn::{ConnLimits, Guarded};
use super::cuts::{CutLog, Peer};
use super::io::ConnIo;
use super::streams::ConnTable;
use crate::transport::authority::Repair;

/// What the accept loop needs to know.
#[derive(Debug, Clone)]
pub(crate) struct AcceptSettings {
    pub(crate) limits: ConnLimits,
    pub(crate) max_connections: Option<usize>,
    pub(crate) authority_repair: bool,
    /// Present when `MaxConnectionIdle` is set.
    pub(crate) table: Option<Arc<ConnTable>>,
    /// Present when `Tls` is set; its current config is taken for each connection. Always
    /// `None` without the `tls` feature (the type then has no value).
    pub(crate) tls: Option<Arc<crate::tls::config::ReloadingConfig>>,
    /// `Transport.TcpKeepalive`: idle time before the first probe and between probes.
    pub(crate) tcp_keepalive: Option<Duration>,
    /// The addresses this server cut lately (log gate, holds).
    pub(crate) cuts: Arc<CutLog>,
}

/// A connection as tonic receives it.
pub(crate) type Accepted = Guarded<ConnIo>;

struct Acceptor {
    listener: TcpListener,
    settings: AcceptSettings,
    cap: Option<Arc<Semaphore>>,
    backoff: AcceptBackoff,
    error_log: LogGate,
    cap_log: LogGate,
}

/// The connections a server accepts, boxed: the code serving them is then not generic over
/// how they were accepted (plaintext or TLS).
pub(crate) type Incoming =
    std::pin::Pin<Box<dyn Stream<Item = Result<Accepted, io::Error>> + Send>>;

/// The connections accepted on `listener`; the listener closes when the stream is dropped.
/// The stream never yields an error: accept errors are handled here.
pub(crate) fn incoming(listener: TcpListener, settings: AcceptSettings) -> Incoming {
    let acceptor = Acceptor {
        listener,
        cap: settings
            .max_connections
            .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
        settings,
        backoff: AcceptBackoff::default(),
        error_log: LogGate::new(Duration::from_secs(1)),
        cap_log: LogGate::new(Duration::from_secs(1)),
    };
    #[cfg(feature = "tls")]
    return match acceptor.settings.tls.clone() {
        None => Box::pin(plain_incoming(acceptor)),
        Some(tls) => Box::pin(tls_incoming(acceptor, tls)),
    };
    #[cfg(not(feature = "tls"))]
    {
        // Without the `tls` feature there is no TLS config (its type has no value).
        if let Some(tls) = &acceptor.settings.tls {
            match **tls {}
        }
        Box::pin(plain_incoming(acceptor))
    }
}

/// The accept loop of a plaintext server.
fn plain_incoming(acceptor: Acceptor) -> impl Stream<Item = Result<Accepted, io::Error>> + Send {
    futures_util::stream::unfold(acceptor, |mut a| async move {
        let (stream, peer, permit) = a.next().await;
        Some((
            Ok(wrap(
                &a.settings,
                ConnIo::Plain(stream),
                peer,
                permit,
                Instant::now(),
            )),
            a,
        ))
    })
}

/// The accept loop in its own task; each TLS handshake in a task of its own, its connection
/// handed over when done. The loop stops when the returned stream is dropped.
#[cfg(feature = "tls")]
fn tls_incoming(
    mut a: Acceptor,
    tls: Arc<crate::tls::config::ReloadingConfig>,
) -> impl Stream<Item = Result<Accepted, io::Error>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<Accepted>(64);
    let log = Arc::new(parking_lot::Mutex::new(LogGate::new(Duration::from_secs(
        1,
    ))));
    let plaintext = Arc::new(parking_lot::Mutex::new(
        crate::tls::plaintext::PlaintextLog::default(),
    ));
    let settings = Arc::new(a.settings.clone());
    tokio::spawn(async move {
        loop {
            let (stream, peer, permit) = tokio::select! {
                () = tx.closed() => return,
                next = a.next() => next,
            };
            let accepted = Instant::now();
            let (tls, tx, settings) = (tls.clone(), tx.clone(), settings.clone());
            let (log, plaintext) = (log.clone(), plaintext.clone());
            tokio::spawn(async move {
                let timeout = settings.limits.handshake_timeout;
                // A failed handshake gives the socket back, to close it without losing the alert.
                let handshake = async {
                    tokio_rustls::TlsAcceptor::from(tls.current())
                        .accept(stream)
                        .into_fallible()
                        .await
                        .map_err(|(e, tcp)| (e, Some(tcp)))
                };
                let result = match timeout {
                    Some(t) => tokio::time::timeout(t, handshake)
                        .await
                        .unwrap_or_else(|_| {
                            Err((
                                io::Error::new(
                                    io::ErrorKind::TimedOut,
                                    format!(
                                        "no TLS handshake within Transport.HandshakeTimeout ({t:?})"
                                    ),
                                ),
                                None,
                            ))
                        }),
                    None => handshake.await,
                };
                match result {
                    Ok(stream) => {
                        let io = ConnIo::Tls(Box::new(stream));
                        let conn = wrap(&settings, io, peer, permit, accepted);
                        let _ = tx.send(conn).await;
                    }
                    Err((e, tcp)) => {
                        let now = Instant::now();
                        if crate::tls::plaintext::is_not_tls(&e) {
                            let gate = plaintext.lock().allow(peer.ip(), now);
                            if let Some(held) = gate {
                                tracing::warn!(
                                    target: "zrpc::server",
                                    "TLS handshake with {peer} failed: {e}: the client sent \
                                     bytes that are not TLS, likely a plaintext client (a gRPC \
                                     client without TLS sends the HTTP/2 preface); it must \
                                     connect with TLS ({held} more from this address since \
                                     the last message)"
                                );
                            }
                        } else if let Some(held) = log.lock().allow(now) {
                            tracing::warn!(
                                target: "zrpc::server",
                                "TLS handshake with {peer} failed: {e} \
                                 ({held} more failed since the last message)"
                            );
                        }
                        if let Some(tcp) = tcp {
                            crate::tls::linger::linger_close(tcp).await;
                        }
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// Errors that concern one connection, not the listener: skip it and accept the next.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

impl Acceptor {
    /// The next connection, under the connection cap.
    async fn next(
        &mut self,
    ) -> (
        TcpStream,
        std::net::SocketAddr,
        Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                // IPv4 as such from a dual-stack listener (see `io::canonical`)
                Ok((stream, peer)) => (
                    stream,
                    std::net::SocketAddr::new(peer.ip().to_canonical(), peer.port()),
                ),
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    let delay = self.backoff.fail();
                    if let Some(held) = self.error_log.allow(Instant::now()) {
                        tracing::error!(
                            target: "zrpc::server",
                            "accepting a connection failed: {e}; retrying in {delay:?} \
                             ({held} more accept errors since the last message)"
                        );
                    }
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            self.backoff.succeed();
            let permit = match &self.cap {
                None => None,
                Some(cap) => match cap.clone().try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    Err(_) => {
                        if let Some(held) = self.cap_log.allow(Instant::now()) {
                            tracing::warn!(
                                target: "zrpc::server",
                                "closing connection from {peer}: Transport.MaxConnections ({}) \
                                 reached ({held} more closed since the last message)",
                                self.settings.max_connections.unwrap_or_default()
                            );
                        }
                        drop(stream);
                        continue;
                    }
                },
            };
            socket_options(&stream, self.settings.tcp_keepalive, peer);
            return (stream, peer, permit);
        }
    }
}

/// TCP_NODELAY, and keepalive probes after `keepalive` of quiet, every `keepalive` (Go's
/// `net.Listen` sets 15 s for both; the probe count stays the kernel's, 9 on Linux). A
/// failure is logged and the connection served anyway.
fn socket_options(stream: &TcpStream, keepalive: Option<Duration>, peer: std::net::SocketAddr) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(target: "zrpc::server", "TCP_NODELAY on {peer}: {e}");
    }
    if let Some(every) = keepalive {
        let params = socket2::TcpKeepalive::new()
            .with_time(every)
            .with_interval(every);
        if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&params) {
            tracing::debug!(target: "zrpc::server", "TCP keepalive on {peer}: {e}");
        }
    }
}

/// `io` under the `:authority` repair and the connection deadlines, counted from `accepted`
/// (one `HandshakeTimeout` for the TLS and the HTTP/2 handshakes together).
fn wrap(
    settings: &AcceptSettings,
    io: ConnIo,
    peer: std::net::SocketAddr,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    accepted: Instant,
) -> Accepted {
    let entry = settings.table.as_ref().map(|table| table.register());
    let repair = Repair::new(settings.authority_repair, Some(peer));
    let peer = Peer {
        ip: peer.ip(),
        cuts: Arc::clone(&settings.cuts),
    };
    Guarded::new(
        io,
        Some(peer),
        settings.limits,
        permit,
        entry,
        repair,
        accepted,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real accepted loopback connection, and the client end that keeps it open.
    async fn accepted() -> (TcpStream, TcpStream, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        (server, client, peer)
    }

    #[tokio::test]
    async fn accepted_connections_get_nodelay_and_the_configured_keepalive() {
        let (server, _client, peer) = accepted().await;
        let conf = crate::conf::TransportConf::default();
        let settings = super::super::accept_settings(&conf, false);
        assert_eq!(settings.tcp_keepalive, Some(Duration::from_secs(15)));
        socket_options(&server, settings.tcp_keepalive, peer);
        let sock = socket2::SockRef::from(&server);
        assert!(server.nodelay().unwrap());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(15));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(15)
        );

        let (server, _client, peer) = accepted().await;
        socket_options(&server, None, peer);
        assert!(server.nodelay().unwrap());
        assert!(!socket2::SockRef::from(&server).keepalive().unwrap());
    }
}
