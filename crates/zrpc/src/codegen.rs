//! What the code `zrpc-build` generates refers to, so that an application needs only `zrpc` in
//! its `[dependencies]` (and `zrpc-build` in `[build-dependencies]`): the generated messages
//! derive through [`prost`] (`#[prost(prost_path = "::zrpc::codegen::prost")]`), the services
//! use [`tonic`](crate::tonic) and [`tonic_prost`]'s codec, and each generated file submits its
//! descriptor set to the server's link-time registry through [`inventory`].
//!
//! Not public API: the paths may change with zrpc-build, which is always used at the same version.

pub use inventory;
pub use prost;
pub use prost_types;
pub use tonic_prost;
pub use zrpc_server::descriptors::LinkedDescriptorSet;

/// Includes the Rust code `zrpc-build` generated for a protobuf package (tonic's
/// `include_proto!`, for zrpc-build's output).
///
/// ```ignore
/// pub mod pb {
///     zrpc::include_proto!("calculator");
/// }
/// ```
#[macro_export]
macro_rules! include_proto {
    ($package:tt) => {
        include!(concat!(env!("OUT_DIR"), concat!("/", $package, ".rs")));
    };
}
