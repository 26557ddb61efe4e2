//! gRPC's interop test programs on zrpc.
//!
//! The official gRPC interop cases
//! (<https://github.com/grpc/grpc/blob/master/doc/interop-test-descriptions.md>) judge a gRPC
//! implementation against every other one: a `grpc.testing.TestService` server and a client that
//! runs named cases against any such server. This crate has zrpc's pair:
//!
//! - [`server`]: `TestService` served by zrpc's server with its default chain
//!   ([`zrpc::server`]), every server feature of the spec (echo metadata and status, payload
//!   sizes, `interval_us`, compressed requests and responses).
//! - [`cases`]: the client cases, run on [`zrpc::client`]; [`Case`] names them as grpc-go's
//!   `--test_case` does.
//! - [`flags`]: grpc-go's interop flags (`--server_host`, `--server_port`, `--test_case`,
//!   `--use_tls`, `--use_test_ca`, `--ca_file`, `--server_host_override`, `--port`, the soak
//!   flags), for the `zrpc-interop-server` and `zrpc-interop-client` programs.
//!
//! The protos are the repository's `proto/grpc/testing/*.proto`, compiled with zrpc-build; the
//! tests compare their descriptors with grpc-go's field by field. `docs/interop.md` has the
//! matrix of cases, directions and transports the tests run.

pub mod cases;
mod compressed;
pub mod flags;
mod payload;
pub mod server;

pub use cases::{Case, Runner, SoakConf};

/// Generated from `proto/grpc/testing/{empty,messages,test}.proto` (package `grpc.testing`).
#[allow(missing_docs, unreachable_pub, clippy::all, rustdoc::all)]
pub mod pb {
    zrpc::include_proto!("grpc.testing");

    /// The encoded descriptor set of the three files (with imports), as zrpc-build wrote it.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/test.zrpc-descriptor.bin"));
}
