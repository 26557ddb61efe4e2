//! zrpc integration tests: one module per behaviour, one test binary (one link).
mod registration;
mod config;
mod discovery;
