//! zrpc-client: go-zero's zRPC client on tonic.
//!
//! A [`Client`] is a `tower::Service` over `http::Request<tonic::body::Body>`, so generated tonic
//! clients use it directly (`GreeterClient::new(client.clone())`). Behind it: a resolver (direct,
//! etcd, DNS) feeding a lock-free P2C+EWMA balancer ([`balancer`]), and go-zero's client chain
//! ([`layers`]: tracing, duration log, metrics, breaker, timeout).

pub mod balancer;
mod client;
pub mod conf;
mod error;
pub mod layers;
pub mod metrics;
pub mod resolver;
mod tls;

pub use client::{Client, ClientHandles, EndpointInfo, ResponseFuture};
pub use error::Error;
pub use layers::timeout::CallTimeout;
