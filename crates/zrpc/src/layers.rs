//! The middleware of both chains, as tower layers, for users who assemble their own stacks.
//!
//! [`Server`](crate::Server) and [`Client`](crate::Client) already install these in go-zero's
//! order, switched by the config; see `docs/middleware.md` for the order and how to add your own
//! layer ([`Server::layer`](crate::Server::layer) on the server; wrap the `Client` on the client).

/// Server layers, outer to inner: tracing, recover, stat (slow log), metrics, breaker, shedding,
/// timeout, auth.
pub mod server {
    pub use zrpc_server::layers::*;
}

/// Client layers, outer to inner: tracing, duration log, metrics, breaker, timeout, credentials.
pub mod client {
    pub use zrpc_client::layers::*;
}
