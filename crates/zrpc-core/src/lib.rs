//! zrpc-core: see the crate README.
