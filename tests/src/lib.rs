//! Shared harness of zrpc's integration tests: a real etcd, greeter servers on loopback.

pub mod etcd;
pub mod greeter;

/// Generated from `proto/greeter.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    tonic::include_proto!("greeter");
}
