//! zrpc next to real go-zero v1.10.3 (`interop/gozero/`: `gz-server` and `gz-client`, built once
//! per run by `zrpc_tests::gozero::programs`), all with a real etcd: discovery both ways with
//! every client config shape, mixed fleets, wire parity (statuses, deadline, metadata, metrics),
//! deregistration and rolling restarts under load, and one YAML file served by both.
//!
//! Without Go these tests print `SKIPPED: go not found, go-zero interop tests not run` and pass;
//! with `CI=true` a missing Go fails them.
//!
//! `cargo test -p zrpc-tests --test interop -- --nocapture` shows the figures.
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod auth_redis;
mod compression;
mod consistent_hash;
mod edge_codes;
mod gozero_client;
mod lifecycle;
mod limit;
mod metrics;
mod mixed;
mod network_faults;
mod parity;
mod registration_pause;
mod same_yaml;
mod support;
mod tls;
mod trace;
mod zrpc_client;
