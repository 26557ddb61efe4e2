//! zrpc-client: go-zero's zRPC client on tonic.
//!
//! A [`Client`] is a `tower::Service` over `http::Request<tonic::body::Body>`, so generated tonic
//! clients use it directly (`GreeterClient::new(client.clone())`). Each call runs go-zero's client
//! chain, as one stage of [`Client`] switched by the config (tracing, duration log, metrics,
//! breaker, timeout, then `app`/`token` credentials and the call's priority tier; [`CallTimeout`]
//! sets one call's timeout, [`set_tier`] its tier),
//! then the lock-free P2C+EWMA balancer's pick ([`balancer`]) and the chosen endpoint's
//! connection. A [`resolver`] (direct, etcd, DNS, Kubernetes) keeps the balancer's
//! endpoint set current beside the calls.

pub mod balancer;
mod client;
pub mod conf;
mod error;
mod layers;
pub mod metrics;
pub mod resolver;
mod retry;
mod tls;

pub use client::{Client, ClientHandles, EndpointInfo, ResponseFuture};
pub use error::Error;
pub use layers::tier::set_tier;
pub use layers::timeout::CallTimeout;
