//! zrpc integration tests: one module per behaviour, one test binary (one link).
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin_page;
mod client_balance;
mod client_breaker;
mod client_calls;
mod client_consistent_hash;
mod client_errors;
mod client_failover;
mod client_retry;
mod client_support;
mod compression;
mod config;
mod discovery;
mod etcd_cluster;
mod k8s;
mod network_faults;
mod registration;
mod registration_pause;
mod rejections_explained;
mod server_auth;
mod server_auth_redis;
mod server_breaker;
mod server_breaker_poisoning;
mod server_h2_attacks;
mod server_layers;
mod server_lifecycle;
mod server_limit;
mod server_metrics;
mod server_recover;
mod server_shedding;
mod server_timeout;
mod server_transport;
mod tls;
mod trace_propagation;
