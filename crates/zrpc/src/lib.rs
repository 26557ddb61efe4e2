//! zrpc: see the crate README.
