//! Shared code of the zrpc examples: the generated greeter API, the greeter service and call
//! statistics. The binaries are `greeter-server`, `greeter-client` and `demo`.

#![allow(clippy::unwrap_used)]

pub mod greeter;
pub mod stats;

/// Generated from `proto/greeter.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all, rustdoc::all)]
pub mod pb {
    tonic::include_proto!("greeter");

    /// Encoded file descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("greeter_descriptor");

    // What `zrpc-build` generates for every proto: the set linked into the binary, so that the
    // server and the facade's client know the streaming methods without being told.
    zrpc::codegen::inventory::submit! {
        zrpc::codegen::LinkedDescriptorSet::new(FILE_DESCRIPTOR_SET)
    }
}
