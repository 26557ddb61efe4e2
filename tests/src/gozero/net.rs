//! Loopback helpers: waiting for TCP and etcd, polling, HTTP/1.0 GETs.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Waits until `addr` accepts TCP connections, or `limit` passes.
pub async fn wait_tcp(addr: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `cond` every 20 ms until it holds (true) or `limit` passes (false).
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until some key under `key/` holds `value` (a registration of `value`), or `limit`.
pub async fn wait_registered(
    client: &etcd_client::Client,
    key: &str,
    value: &str,
    limit: Duration,
) -> bool {
    eventually(limit, || {
        let mut c = client.clone();
        async move {
            crate::etcd::keys_under(&mut c, key)
                .await
                .iter()
                .any(|(_, v)| v == value)
        }
    })
    .await
}

/// Waits until no key under `key/` holds `value`, or `limit`.
pub async fn wait_deregistered(
    client: &etcd_client::Client,
    key: &str,
    value: &str,
    limit: Duration,
) -> bool {
    eventually(limit, || {
        let mut c = client.clone();
        async move {
            !crate::etcd::keys_under(&mut c, key)
                .await
                .iter()
                .any(|(_, v)| v == value)
        }
    })
    .await
}

/// `GET path` over HTTP/1.0 (so the body is never chunked): the status code and the body.
pub async fn http10_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "GET timed out"))??;
    Ok(crate::greeter::parse_http_response(&raw))
}

/// `GET path` on a DevServer (HTTP/1.0); panics unless it answers 200.
///
/// # Panics
/// When the DevServer does not answer 200.
pub async fn scrape(addr: SocketAddr, path: &str) -> String {
    let (status, body) = http10_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"));
    assert_eq!(status, 200, "GET {path} on {addr}: {body}");
    body
}
