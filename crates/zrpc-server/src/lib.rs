//! zrpc-server: see the crate README.
pub mod conf;
pub mod registry;
