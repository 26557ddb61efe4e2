//! Shared harness of zrpc's integration tests: a real etcd, greeter servers on loopback, real
//! go-zero programs for the interop tests, and Toxiproxy for network faults.

pub mod bench;
pub mod certs;
pub mod etcd;
pub mod gozero;
pub mod greeter;
pub mod h2raw;
pub mod k8s;
pub mod otlp;
pub mod redis;
pub mod toxiproxy;

/// Generated from `proto/greeter.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    tonic::include_proto!("greeter");
}
