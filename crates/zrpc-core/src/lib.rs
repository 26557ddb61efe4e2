//! The governance math of zrpc, ported from go-zero's `core/` packages.
//!
//! The math is pure computation with time passed in as a parameter (`now: Instant`), so it is
//! deterministic under test and does no I/O:
//!
//! - [`ewma`]: the time-decayed EWMA weight behind the client's P2C balancer (go-zero `p2c.go`).
//! - [`window`]: the rolling window of time buckets (go-zero `collection/rollingwindow.go`).
//! - [`breaker`]: the Google SRE adaptive-throttling breaker (go-zero `breaker/googlebreaker.go`).
//! - [`shedder`]: the adaptive (BBR-like) load shedder (go-zero `load/adaptiveshedder.go`).
//! - [`limit`]: an adaptive concurrency limit from measured latency (Envoy's gradient controller)
//!   and priority tiers (zrpc additions; go-zero sheds on CPU only).
//! - [`cpu`]: the cgroup-aware CPU usage sampler that feeds the shedder (go-zero `stat/usage.go`).
//! - [`retry`]: the client's retry budget, back-off and pushback (gRFC A6, linkerd's budget;
//!   go-zero has no client retries).
//!
//! Shared by both sides of zrpc, also here:
//!
//! - [`conf`]: go-zero-compatible config loading (YAML/JSON/TOML, `${VAR}`, case-insensitive keys,
//!   unknown-key errors) and the shared `EtcdConf`.
//! - [`grpc`]: http-level gRPC helpers (final status from headers or trailers, `grpc-timeout`).
//! - `etcd` (feature `etcd`): the etcd client (connection options, TLS, endpoint checks) used by
//!   registration and discovery: the one part of this crate that touches the network.
//!
//! Higher layers (`zrpc-server`, `zrpc-client`) wrap these in tower middleware.

pub mod breaker;
pub mod conf;
pub mod cpu;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod ewma;
pub mod grpc;
pub mod limit;
pub mod retry;
pub mod shedder;
mod stamp;
pub mod window;

/// A random seed from the standard library's per-process hash keys (seeded from the OS once per
/// thread by std; each call gives another value): for the breakers' and the balancers'
/// non-cryptographic generators and for jitter, without a random-number crate's OS source.
#[must_use]
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}
