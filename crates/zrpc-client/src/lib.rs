//! zrpc-client: see the crate README.
