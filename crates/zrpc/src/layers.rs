//! The middleware of both chains, as tower layers, for users who assemble their own stacks.
//!
//! [`Server`](crate::Server) and [`Client`](crate::Client) already run these stages, switched by
//! the config, in go-zero's order except that the server checks auth before the breaker (go-zero
//! checks it last); see `docs/middleware.md` for the order and how to add your own layer
//! ([`Server::layer`](crate::Server::layer) on the server; wrap the `Client` on the client).

/// Server layers, outer to inner as the server runs them: tracing, recover, stat (slow log),
/// metrics, auth, breaker, shedding, timeout.
pub mod server {
    pub use zrpc_server::layers::*;
}

/// Client layers, outer to inner: tracing, duration log, metrics, breaker, timeout, credentials.
pub mod client {
    pub use zrpc_client::layers::*;
}
