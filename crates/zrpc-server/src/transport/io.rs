//! The connection under `Guarded`: plain TCP or TLS over TCP, and what it tells the serve
//! loop about its peer (through tonic's `Connected` trait), which the serve loop puts in
//! each request's extensions for handlers and layers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
#[cfg(feature = "tls")]
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::call::ConnInfo;
#[cfg(feature = "tls")]
use crate::tls::PeerIdentity;

/// An accepted connection, decrypted when TLS is on.
#[derive(Debug)]
pub(crate) enum ConnIo {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS, handshake done.
    #[cfg(feature = "tls")]
    Tls(Box<TlsStream<TcpStream>>),
}

/// `info` with IPv4 addresses as such: a dual-stack listener (`ListenOn: ":port"`) accepts an
/// IPv4 client as `::ffff:a.b.c.d`, which `Request::remote_addr`, the logs and the spans would
/// show where Go shows `a.b.c.d`.
fn canonical(info: TcpConnectInfo) -> TcpConnectInfo {
    let fix = |a: std::net::SocketAddr| std::net::SocketAddr::new(a.ip().to_canonical(), a.port());
    TcpConnectInfo {
        local_addr: info.local_addr.map(fix),
        remote_addr: info.remote_addr.map(fix),
    }
}

impl Connected for ConnIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            ConnIo::Plain(tcp) => ConnInfo {
                tcp: canonical(tcp.connect_info()),
                peer: None,
                conn: None,
                authority: None,
                goaway_at: None,
            },
            #[cfg(feature = "tls")]
            ConnIo::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                ConnInfo {
                    tcp: canonical(tcp.connect_info()),
                    peer: session
                        .peer_certificates()
                        .and_then(|certs| PeerIdentity::from_chain(certs.to_vec())),
                    conn: None,
                    authority: None,
                    goaway_at: None,
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
            #[cfg(feature = "tls")]
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
            #[cfg(feature = "tls")]
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
            #[cfg(feature = "tls")]
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ConnIo::Plain(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            ConnIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            ConnIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
