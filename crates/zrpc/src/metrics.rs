//! Prometheus metrics of both sides, with go-zero's names and labels.
//!
//! `rpc_server_requests_duration_ms{method}`, `rpc_server_requests_code_total{method,code}`,
//! `rpc_client_requests_duration_ms{method}` and `rpc_client_requests_code_total{method,code}`
//! (buckets 1..5000 ms, numeric `code`), plus zrpc's additions (local rejections, shedder and
//! balancer gauges). Both sides register in one registry, `prometheus::default_registry()`,
//! where your own metrics go too; the DevServer's `/metrics` serves it, and [`server::render`]
//! renders it to serve it yourself. `docs/metrics.md` lists every family.

/// Server metrics (`zrpc_server::metrics`).
pub mod server {
    pub use zrpc_server::metrics::*;
}

/// Client metrics (`zrpc_client::metrics`).
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client {
    pub use zrpc_client::metrics::*;
}
