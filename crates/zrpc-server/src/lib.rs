//! zrpc-server: tonic services behind go-zero's zRPC server middleware chain.
//!
//! [`Server`] is go-zero's `zrpc.MustNewServer(c, register).Start()`: from a
//! [`RpcServerConf`] it serves your tonic services over its own HTTP/2 serve loop (hyper,
//! HTTP/2 only, with connection limits, optional TLS and the `:authority` repair for go-zero
//! clients) and runs each call through tracing, panic recovery, slow-call logs, Prometheus
//! metrics, auth, a per-method breaker, the adaptive concurrency limit, adaptive shedding and
//! timeouts, in that order: a list of [stages](stage) built once from the config (a stage it
//! switches off is not in the list), to which [`Server::stage`] adds your own. That is
//! go-zero's order except for auth, which go-zero
//! runs last: zrpc checks credentials before the breaker and the shedder, so unauthenticated
//! callers cannot move them (the repository's `docs/middleware.md`). Auth checks go-zero's
//! `app`/`token` metadata against a [`TokenStore`]: [`StaticTokens`] from the config,
//! `RedisTokens` (feature `redis-auth`), or your own.
//! It also serves the gRPC health service, optional reflection and the DevServer
//! (`/metrics`, `/healthz`), registers in etcd and shuts down gracefully.

mod auth;
mod call;
mod compression;
pub mod conf;
#[doc(hidden)]
pub mod descriptors;
#[cfg(feature = "devserver")]
mod devserver;
mod error;
/// Entry points of zrpc's fuzz targets and of the replay of their corpora: not public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gauges;
mod handle;
mod layers;
pub mod metrics;
mod preflight;
pub mod registry;
mod routes;
mod server;
pub mod shutdown;
pub mod stage;
pub mod telemetry;
mod tls;
mod transport;

#[cfg(feature = "redis-auth")]
pub use auth::RedisTokens;
pub use auth::{Lookup, StaticTokens, TokenFuture, TokenStore};
pub use call::Trailers;
pub use conf::RpcServerConf;
pub use error::Error;
pub use handle::{Phase, ServerHandle};
pub use preflight::preflight;
pub use routes::Routes;
/// For the facade (`zrpc::client`): not public API.
#[doc(hidden)]
pub use server::linked_streaming_methods;
pub use server::{Server, ServerChain, WrapUpHook};
pub use tls::{PeerIdentity, TlsError};
pub use transport::authority::original_authority;
