//! The connection under `AuthorityFix`: plain TCP or TLS over TCP, and what it tells the serve
//! loop about its peer (through tonic's `Connected` trait).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::identity::PeerIdentity;

/// An accepted connection, decrypted when TLS is on.
#[derive(Debug)]
pub(crate) enum ConnIo {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

/// The connect info of a [`ConnIo`]; [`Front`](crate::transport::front::Front) turns it into
/// `TcpConnectInfo` (for `Request::remote_addr`) and [`PeerIdentity`] extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) tcp: TcpConnectInfo,
    pub(crate) peer: Option<PeerIdentity>,
    /// The connection's call count and byte-budget share, set by
    /// `Guarded` (`transport::conn`) when the server keeps them: each request
    /// carries its connection's state, so no per-request table lookup is needed.
    pub(crate) conn: Option<std::sync::Arc<crate::transport::ConnState>>,
}

impl Connected for ConnIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            ConnIo::Plain(tcp) => ConnInfo {
                tcp: tcp.connect_info(),
                peer: None,
                conn: None,
            },
            ConnIo::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                ConnInfo {
                    tcp: tcp.connect_info(),
                    peer: session
                        .peer_certificates()
                        .and_then(|certs| PeerIdentity::from_chain(certs.to_vec())),
                    conn: None,
                }
            }
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ConnIo::Plain(s) => s.is_write_vectored(),
            ConnIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_flush(cx),
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Closes a connection whose TLS handshake failed without losing the alert rustls wrote on it:
/// half-close (FIN after the alert), then read and drop what the client still sends (at most
/// 64 KiB, for at most 1 s) before closing. Closed at once with unread bytes in its buffer (a
/// TLS 1.3 client sends its first HTTP/2 bytes right after its Finished, before the server has
/// checked its certificate), the socket sends a RST, and the client may lose the alert: grpc-go
/// then reports `write: broken pipe` instead of `remote error: tls: unknown certificate
/// authority`.
pub(crate) async fn linger_close(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0;
        while total < 64 * 1024 {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}
