//! The governance math of zrpc, ported from go-zero's `core/` packages, and the config types
//! both sides of zrpc share.
//!
//! The math is pure computation with time passed in as a parameter (`now: Instant`), so it is
//! deterministic under test:
//!
//! - [`breaker`]: the Google SRE adaptive-throttling breaker (go-zero `breaker/googlebreaker.go`).
//! - [`shedder`]: the adaptive (BBR-like) load shedder (go-zero `load/adaptiveshedder.go`).
//! - [`limit`]: an adaptive concurrency limit from measured latency (Envoy's gradient controller)
//!   and priority tiers (zrpc additions; go-zero sheds on CPU only).
//! - [`cpu`]: the cgroup-aware CPU usage sampler that feeds the shedder (go-zero `stat/usage.go`);
//!   it reads `/proc` and the cgroup files, the one part of the math that does I/O.
//! - [`conf`]: go-zero-compatible config loading (YAML/JSON/TOML/JSON5, `${VAR}`, case-insensitive keys,
//!   unknown-key errors) and the shared `EtcdConf`, `RedisConf` and `CacheConf`.
//!
//! Users reach all of it through the `zrpc` facade and never need to name this crate. The
//! plumbing `zrpc-server` and `zrpc-client` share (gRPC status and `grpc-timeout` helpers, the
//! codec of compressed messages, the trace context, the etcd client's set-up, the retry budget,
//! the EWMA, the rolling window and go-zero's duration buckets) is public only for them, hidden from the docs and outside
//! the API that semver covers: it may change in any release.

pub mod breaker;
pub mod conf;
pub mod cpu;
#[cfg(feature = "etcd")]
#[doc(hidden)]
pub mod etcd;
#[doc(hidden)]
pub mod ewma;
/// Entry points of zrpc's fuzz targets and of the replay of their corpora: not public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod grpc;
#[doc(hidden)]
pub mod inspect;
pub mod limit;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod retry;
pub mod shedder;
mod stamp;
#[doc(hidden)]
pub mod window;

/// A random seed from the standard library's per-process hash keys (seeded from the OS once per
/// thread by std; each call gives another value): for the breakers' and the balancers'
/// non-cryptographic generators and for jitter, without a random-number crate's OS source.
#[must_use]
#[doc(hidden)]
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}
