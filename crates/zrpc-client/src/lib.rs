//! zrpc-client: see the crate README.
pub mod conf;
