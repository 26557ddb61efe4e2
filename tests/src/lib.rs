//! Shared harness of zrpc's integration tests: a real etcd, greeter servers on loopback, real
//! go-zero programs for the interop tests, gRPC's interop programs (grpc-go's and zrpc's), and
//! Toxiproxy for network faults.

pub mod bench;
pub mod certs;
pub mod etcd;
pub mod explained;
pub mod gobuild;
pub mod gozero;
pub mod greeter;
pub mod grpcgo;
pub mod grpcio;
pub mod h2raw;
pub mod k8s;
pub mod otlp;
pub mod ports;
pub mod redis;
pub mod toxiproxy;
pub mod wait;

/// Generated from `proto/greeter.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    tonic::include_proto!("greeter");
}
