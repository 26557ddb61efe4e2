//! Small helpers shared by the stages.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::uri::PathAndQuery;
use http::{HeaderName, Request};
use tonic::transport::server::TcpConnectInfo;

// Header names the stages look up on every call, prebuilt: a lookup by `&str` parses and
// validates the name each time (`http`'s `parse_hdr`).
/// W3C `traceparent`.
#[cfg(feature = "otel")]
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C `baggage`.
#[cfg(feature = "otel")]
pub(crate) const BAGGAGE: HeaderName = HeaderName::from_static("baggage");
/// `grpc-timeout`.
pub(crate) use zrpc_core::grpc::timeout::GRPC_TIMEOUT_HEADER as GRPC_TIMEOUT;
/// go-zero's auth metadata: `app`.
pub(crate) const APP: HeaderName = HeaderName::from_static("app");
/// go-zero's auth metadata: `token`.
pub(crate) const TOKEN: HeaderName = HeaderName::from_static("token");

/// `headers.get(name)`, scanning small maps (`zrpc_core::grpc::find_header`).
pub(crate) use zrpc_core::grpc::find_header as find;

/// The peer address in the request extensions (`TcpConnectInfo`, which the transport's
/// `Front` puts there from the connection's info).
pub(crate) fn peer_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    req.extensions()
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
}

/// The full method of a request as a cheaply clonable handle (a `Bytes` refcount bump).
pub(crate) fn method_of<B>(req: &Request<B>) -> PathAndQuery {
    req.uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

/// Counts a stage's drops (or auth's calls let through) and lets one log line through per
/// second (go-zero logs every drop, which under overload floods the log with the very lines
/// that were to explain it).
#[derive(Debug)]
pub(crate) struct DropLog {
    origin: Instant,
    last_log_ms: AtomicU64,
    dropped_since_log: AtomicU64,
}

impl DropLog {
    pub(crate) fn new() -> Self {
        DropLog {
            origin: Instant::now(),
            last_log_ms: AtomicU64::new(0),
            dropped_since_log: AtomicU64::new(0),
        }
    }

    /// Counts one drop; when a line is due, the drops it speaks for (this one included).
    pub(crate) fn due(&self) -> Option<u64> {
        let dropped = self.dropped_since_log.fetch_add(1, Ordering::Relaxed) + 1;
        let now_ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_log_ms.load(Ordering::Relaxed);
        if (now_ms.saturating_sub(last) >= 1000 || last == 0)
            && self
                .last_log_ms
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.dropped_since_log.store(0, Ordering::Relaxed);
            return Some(dropped);
        }
        None
    }
}
