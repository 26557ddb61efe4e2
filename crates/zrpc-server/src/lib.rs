//! zrpc-server: see the crate README.
