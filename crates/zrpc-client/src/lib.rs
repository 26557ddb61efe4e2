//! zrpc-client: go-zero's zRPC client on tonic.
//!
//! A [`Client`] is a `tower::Service` over `http::Request<tonic::body::Body>`, so generated tonic
//! clients use it directly (`GreeterClient::new(client.clone())`). Each call runs go-zero's client
//! chain, as one stage of [`Client`] switched by the config (tracing, duration log, metrics,
//! breaker, timeout, then `app`/`token` credentials and the call's priority tier;
//! [`CallTimeout`] sets one call's timeout, [`set_tier`] its tier), then the retry stage
//! (transparent re-sends, and the retry or hedging policy of the method), whose attempts the
//! lock-free P2C+EWMA balancer picks, and the chosen endpoint's connection. A [`resolver`]
//! (direct, etcd, DNS, Kubernetes) keeps the balancer's endpoint set current beside the calls.

mod balancer;
mod client;
mod compression;
pub mod conf;
mod error;
mod failure;
/// Entry points of zrpc's fuzz targets and of the replay of their corpora: not public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod inspect;
mod layers;
pub mod metrics;
pub mod resolver;
mod response;
mod retry;
mod tls;

pub use balancer::{HashKey, hash_key};
pub use client::{Client, ClientHandles, EndpointInfo, EndpointState, ResponseFuture};
pub use error::Error;
pub use layers::tier::set_tier;
pub use layers::timeout::CallTimeout;

/// The balancer's parts for zrpc's simulator (`zrpc-sim`) and benches: not part of the public
/// API, no semver promise.
#[doc(hidden)]
pub mod sim {
    pub use crate::balancer::consistent_hash::{HashRing, REPLICAS};
    pub use crate::balancer::p2c::{P2cPicker, P2cRules};
    pub use crate::balancer::rng::{RandomSource, ThreadRng};
    pub use crate::balancer::round_robin::RoundRobin;
    pub use crate::balancer::stats::{Clock, EndpointStats};
    pub use crate::resolver::subset::{DEFAULT_SUBSET_SIZE, select as subset_select};
    pub use crate::retry::MAX_ATTEMPTS;
}

/// `n` distinct loopback addresses nobody listens on, for tests: port 1 (tcpmux, never served)
/// of addresses in 127.0.0.0/8, all loopback on Linux, so every connection is refused. A port
/// bound and released instead could be taken meanwhile by a server of a test running beside.
#[cfg(test)]
pub(crate) fn refusing_endpoints(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("127.0.{}.{}:1", i / 250, i % 250 + 1))
        .collect()
}
