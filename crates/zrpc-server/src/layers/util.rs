//! Small helpers shared by the layers.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use tonic::transport::server::TcpConnectInfo;

// Header names the layers look up on every call, prebuilt: a lookup by `&str` parses and
// validates the name each time (`http`'s `parse_hdr`, ~150 instructions, callgrind).
/// `grpc-status`.
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// W3C `traceparent`.
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C `baggage`.
pub(crate) const BAGGAGE: HeaderName = HeaderName::from_static("baggage");
/// `grpc-timeout`.
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// go-zero's auth metadata: `app`.
pub(crate) const APP: HeaderName = HeaderName::from_static("app");
/// go-zero's auth metadata: `token`.
pub(crate) const TOKEN: HeaderName = HeaderName::from_static("token");

/// Up to this many entries, [`find`] scans instead of hashing.
const SCAN_HEADERS: usize = 8;

/// `headers.get(name)`, by a scan of the entries when there are few: gRPC response headers,
/// trailers and most request headers hold a handful, and comparing names (an enum tag for a
/// standard name, a short `memcmp` for a custom one) costs less than hashing the name (~170
/// instructions per lookup, callgrind; the server looks up `grpc-status` up to twice per
/// observing layer and call). The first value of `name`, as `get` gives.
pub(crate) fn find<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if headers.keys_len() > SCAN_HEADERS {
        return headers.get(name);
    }
    headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// Methods of the infrastructure services (health, reflection): exempt from auth, breaker,
/// shedding and timeout, so probes and tools keep working on a busy or locked-down server.
pub(crate) fn is_infra(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// The peer address tonic put in the request extensions.
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
pub struct StreamingMethods(Arc<Methods>);

/// Up to [`SCAN_MAX`] names are scanned (a length compare, then a short `memcmp`): four layers
/// ask per call, and hashing the path with SipHash cost ~230 instructions each time
/// (callgrind, greeter server), several times a scan of a typical service's few methods.
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
    pub fn new<I: IntoIterator<Item = String>>(methods: I) -> Self {
        let set: HashSet<String> = methods.into_iter().collect();
        Self(Arc::new(match set.len() {
            0 => Methods::None,
            n if n <= SCAN_MAX => Methods::Few(set.into_iter().collect()),
            _ => Methods::Many(set),
        }))
    }

    /// Whether `full_method` is a known streaming method.
    pub fn contains(&self, full_method: &str) -> bool {
        match &*self.0 {
            Methods::None => false,
            Methods::Few(names) => names.iter().any(|n| n == full_method),
            Methods::Many(set) => set.contains(full_method),
        }
    }

    /// Number of known streaming methods.
    pub fn len(&self) -> usize {
        match &*self.0 {
            Methods::None => 0,
            Methods::Few(names) => names.len(),
            Methods::Many(set) => set.len(),
        }
    }

    /// Whether no streaming method is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn find_answers_as_get_for_small_and_large_maps() {
        for n in [0, 1, 3, SCAN_HEADERS, SCAN_HEADERS + 1, 20] {
            let mut h = HeaderMap::new();
            for i in 0..n {
                h.append(
                    HeaderName::try_from(format!("x-h{i}")).unwrap(),
                    HeaderValue::from(i),
                );
            }
            h.append(http::header::CONTENT_TYPE, HeaderValue::from_static("a"));
            h.append(GRPC_STATUS, HeaderValue::from_static("3"));
            h.append(GRPC_STATUS, HeaderValue::from_static("4"));
            for name in [
                GRPC_STATUS,
                http::header::CONTENT_TYPE,
                GRPC_TIMEOUT,
                HeaderName::from_static("x-h0"),
                HeaderName::from_static("grpc-statu"),
            ] {
                assert_eq!(find(&h, &name), h.get(&name), "{n} {name}");
            }
        }
    }

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
