//! zrpc: go-zero's zRPC in Rust, on tonic.
//!
//! Work in progress: the facade grows as the server, client and config crates land.

/// The tonic version zrpc is built on, re-exported so an application uses exactly one.
pub use tonic;
