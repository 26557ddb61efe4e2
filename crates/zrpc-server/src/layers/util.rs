//! Small helpers shared by the layers.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use http::uri::PathAndQuery;
use tonic::transport::server::TcpConnectInfo;

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
pub struct StreamingMethods(Arc<HashSet<String>>);

impl StreamingMethods {
    /// A set from full method names.
    pub fn new<I: IntoIterator<Item = String>>(methods: I) -> Self {
        Self(Arc::new(methods.into_iter().collect()))
    }

    /// Whether `full_method` is a known streaming method.
    pub fn contains(&self, full_method: &str) -> bool {
        !self.0.is_empty() && self.0.contains(full_method)
    }

    /// Number of known streaming methods.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no streaming method is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
