//! Closing a connection whose TLS handshake failed.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
