//! The middleware of both chains, as tower layers, for users who assemble their own stacks.
//!
//! The server and [`Client`](crate::Client) already install these in go-zero's
//! order, switched by the config; see `docs/middleware.md` for the order and how to add your own
//! layer (`Server::layer` on the server; wrap the `Client` on the client).

/// Client layers, outer to inner: tracing, duration log, metrics, breaker, timeout, credentials.
pub mod client {
    pub use zrpc_client::layers::*;
}
