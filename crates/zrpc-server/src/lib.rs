//! zrpc-server: tonic services behind go-zero's zRPC server middleware chain.
//!
//! [`Server`] is go-zero's `zrpc.MustNewServer(c, register).Start()`: from a
//! [`RpcServerConf`] it serves your tonic services with tracing, panic recovery, slow-call
//! logs, Prometheus metrics, a per-method breaker, adaptive shedding, timeouts and auth (in
//! go-zero's order, see [`layers`]), the gRPC health service, optional reflection, the
//! DevServer (`/metrics`, `/healthz`), etcd registration and a graceful shutdown.

mod auth;
mod authority;
pub mod conf;
#[doc(hidden)]
pub mod descriptors;
mod devserver;
mod error;
mod gauges;
mod handle;
pub mod layers;
pub mod metrics;
pub mod registry;
mod server;
mod shedding_glue;
pub mod shutdown;
pub mod telemetry;
mod tls;
mod transport;

pub use auth::RedisTokens;
pub use authority::original_authority;
pub use conf::RpcServerConf;
pub use error::Error;
pub use handle::{Phase, ServerHandle};
pub use server::{Server, WrapUpHook};
pub use tls::{PeerIdentity, TlsError};
