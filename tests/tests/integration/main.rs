//! zrpc integration tests: one module per behaviour, one test binary (one link).
mod client_balance;
mod client_breaker;
mod client_calls;
mod client_errors;
mod client_failover;
mod client_support;
mod config;
mod discovery;
mod registration;
mod server_auth;
mod server_breaker;
mod server_breaker_poisoning;
mod server_lifecycle;
mod server_metrics;
mod server_recover;
mod server_shedding;
mod server_timeout;
