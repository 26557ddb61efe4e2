//! zrpc: go-zero's zRPC in Rust, on tonic.
//!
//! Work in progress: the facade grows as the server, client and config crates land.

pub mod conf;

#[doc(no_inline)]
pub use conf::{
    BalancerName, ClientMiddlewaresConf, EtcdConf, RpcClientConf, RpcServerConf,
    ServerMiddlewaresConf, ShutdownConf,
};

/// The tonic version zrpc is built on, re-exported so an application uses exactly one.
pub use tonic;
