//! Small helpers shared by the stages.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
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

/// Methods of the infrastructure services (health, reflection): exempt from auth, breaker,
/// shedding and timeout, so probes and tools keep working on a busy or locked-down server.
pub(crate) fn is_infra(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

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

/// The set of streaming methods (`/pkg.Service/Method`) the server knows about: they are not
/// shed and not timed out. Filled from the reflection descriptor sets and from
/// [`Server::streaming_method`](crate::Server::streaming_method).
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamingMethods(Arc<Methods>);

/// Up to [`SCAN_MAX`] names are scanned (a length compare, then a short `memcmp`): four stages
/// ask per call, and hashing the path with SipHash costs several times a scan of a typical
/// service's few methods.
#[derive(Debug, Default)]
enum Methods {
    #[default]
    None,
    Few(Box<[String]>),
    Many(HashSet<String>),
}

const SCAN_MAX: usize = 16;

impl StreamingMethods {
    /// A set from full method names.
    pub(crate) fn new<I: IntoIterator<Item = String>>(methods: I) -> Self {
        let set: HashSet<String> = methods.into_iter().collect();
        Self(Arc::new(match set.len() {
            0 => Methods::None,
            n if n <= SCAN_MAX => Methods::Few(set.into_iter().collect()),
            _ => Methods::Many(set),
        }))
    }

    /// Whether `full_method` is a known streaming method.
    pub(crate) fn contains(&self, full_method: &str) -> bool {
        match &*self.0 {
            Methods::None => false,
            Methods::Few(names) => names.iter().any(|n| n == full_method),
            Methods::Many(set) => set.contains(full_method),
        }
    }

    /// Number of known streaming methods.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match &*self.0 {
            Methods::None => 0,
            Methods::Few(names) => names.len(),
            Methods::Many(set) => set.len(),
        }
    }

    /// Whether no streaming method is known.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_methods_answer_alike_for_no_few_and_many_names() {
        let none = StreamingMethods::new(Vec::new());
        assert!(none.is_empty() && !none.contains("/a.B/C") && !none.contains(""));
        for n in [1, SCAN_MAX, SCAN_MAX + 1, 100] {
            let names: Vec<String> = (0..n).map(|i| format!("/pkg.Svc/M{i}")).collect();
            let set = StreamingMethods::new(names.iter().cloned().chain(names.iter().cloned()));
            assert_eq!(set.len(), n, "duplicates are kept once");
            assert!(names.iter().all(|m| set.contains(m)));
            assert!(!set.contains("/pkg.Svc/M"));
            assert!(!set.contains(&format!("/pkg.Svc/M{n}")));
            assert!(!set.contains("/pkg.Svc/m0"));
        }
    }
}
