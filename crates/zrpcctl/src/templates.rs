//! The files `zrpcctl new` writes once (the generated glue is built in `scaffold.rs`).

/// goctl's `rpc new` proto: one `Ping`.
pub(crate) fn default_proto(package: &str, service: &str) -> String {
    format!(
        "syntax = \"proto3\";\n\npackage {package};\n\n\
         message Request {{\n  string ping = 1;\n}}\n\n\
         message Response {{\n  string pong = 1;\n}}\n\n\
         service {service} {{\n  rpc Ping(Request) returns (Response);\n}}\n"
    )
}

pub(crate) fn cargo_toml(name: &str, (zrpc, zrpc_build): &(String, String)) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
# The generated code needs only zrpc (it re-exports tonic and prost at the versions it uses).
{zrpc}
tokio = {{ version = "1", features = ["macros", "rt-multi-thread"] }}
# Streams for streaming RPCs: `tokio_stream::wrappers::ReceiverStream`, `tokio_stream::iter`.
tokio-stream = "0.1"

[build-dependencies]
{zrpc_build}

[dev-dependencies]
tokio = {{ version = "1", features = ["macros", "rt-multi-thread", "net", "sync", "time"] }}

# A crate of its own, not a member of an enclosing workspace.
[workspace]
"#
    )
}

pub(crate) fn build_rs(proto: &str) -> String {
    format!(
        "//! Compiles proto/{proto} (protoc must be installed, or PROTOC set). zrpc-build makes the\n\
         //! generated code depend on zrpc only, and tells the server which methods stream.\n\n\
         fn main() -> Result<(), Box<dyn std::error::Error>> {{\n    \
         zrpc_build::compile_protos(&[\"proto/{proto}\"], &[\"proto\"])?;\n    \
         Ok(())\n}}\n"
    )
}

pub(crate) fn etc_yaml(name: &str) -> String {
    format!(
        "# go-zero's RpcServerConf: every key and default is in zrpc's docs/configuration.md.\n\
         Name: {name}.rpc\nListenOn: 0.0.0.0:8080\n\
         Etcd:\n  Hosts:\n  - 127.0.0.1:2379\n  Key: {name}.rpc\n"
    )
}

pub(crate) fn dockerfile(name: &str, proto: &str) -> String {
    format!(
        "# Builds with the published zrpc crates (a --zrpc-path checkout is outside the build context).\n\
         FROM rust:1-bookworm AS build\n\
         RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler \\\n    \
         && rm -rf /var/lib/apt/lists/*\n\
         WORKDIR /src\nCOPY . .\n\
         RUN cargo build --release --locked || cargo build --release\n\n\
         FROM debian:bookworm-slim\n\
         COPY --from=build /src/target/release/{name} /app/{name}\n\
         COPY etc /app/etc\nCOPY proto/{proto} /app/proto/{proto}\n\
         WORKDIR /app\nEXPOSE 8080\n\
         CMD [\"./{name}\", \"-f\", \"etc/{name}.yaml\"]\n"
    )
}

pub(crate) fn main_rs(name: &str, ident: &str) -> String {
    format!(
        r#"//! {name}: loads etc/{name}.yaml (or the file after `-f`), serves until SIGTERM or Ctrl-C.

use std::sync::Arc;

use {ident}::{{server, svc::ServiceContext}};

#[tokio::main]
async fn main() -> Result<(), zrpc::Error> {{
    let mut args = std::env::args().skip(1);
    let mut file = String::from("etc/{name}.yaml");
    while let Some(arg) = args.next() {{
        if arg == "-f" || arg == "--f" {{
            file = args.next().unwrap_or(file);
        }}
    }}
    let conf: zrpc::RpcServerConf = zrpc::conf::load(&file)?;
    let ctx = Arc::new(ServiceContext::new(conf.clone()));
    server::add_services(zrpc::server(conf)?, ctx).serve().await?;
    Ok(())
}}
"#
    )
}

pub(crate) fn lib_rs(name: &str, proto: &str) -> String {
    format!(
        r#"//! {name}: a zrpc service scaffolded by zrpcctl.
//!
//! - `pb`: the code generated from proto/{proto} (by zrpc-build in build.rs);
//! - `server`: generated glue from the proto to `logic` (`zrpcctl proto proto/{proto}` rewrites
//!   it, and `pb`);
//! - `logic`: one module per RPC, your code;
//! - `svc`: the state every call shares (clients, stores, the config).

pub mod logic;
pub mod pb;
pub mod server;
pub mod svc;
"#
    )
}

pub(crate) fn svc_rs() -> String {
    r#"//! The state every call shares (go-zero's ServiceContext): the config, clients of other
//! services (`zrpc::client(...)`), stores. Built once in main.rs. Your code: never overwritten.

/// Shared by every RPC handler.
#[derive(Debug)]
pub struct ServiceContext {
    /// The server's config.
    pub config: zrpc::RpcServerConf,
}

impl ServiceContext {
    /// Builds the context from the loaded config.
    pub fn new(config: zrpc::RpcServerConf) -> Self {
        Self { config }
    }
}
"#
    .to_owned()
}

pub(crate) fn test_rs(
    name: &str,
    ident: &str,
    client: &str,
    method: &str,
    request: &str,
    full: &str,
) -> String {
    format!(
        r#"//! Starts {name} on a free loopback port and calls `{full}` through a zrpc client.

use std::sync::Arc;
use std::time::Duration;

use {ident}::{{pb, server, svc::ServiceContext}};

#[tokio::test]
async fn serves_and_answers_a_call() -> Result<(), Box<dyn std::error::Error>> {{
    // Shutdown without go-zero's pause for registries (WrapUpTime, 1s by default): nothing
    // discovers this test server.
    let shutdown = zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(2));
    let conf = zrpc::RpcServerConf::new("{name}.rpc", "127.0.0.1:0").with_shutdown(shutdown);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let ctx = Arc::new(ServiceContext::new(conf.clone()));
    let server = server::add_services(zrpc::server(conf)?, ctx);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_with_listener(listener, async {{
        let _ = stopped.await;
    }}));

    let client = zrpc::client(zrpc::RpcClientConf::direct([addr.to_string()])).await?;
    let mut rpc = {client}::new(client);
    match rpc.{method}({request}).await {{
        Ok(_) => {{}}
        // The scaffold's logic answers Unimplemented until you write it; any other error
        // (no connection, timeout, ...) fails the test.
        Err(status) => assert_eq!(status.code(), zrpc::tonic::Code::Unimplemented, "{{status}}"),
    }}

    drop(rpc);
    let _ = stop.send(());
    serving.await??;
    Ok(())
}}
"#
    )
}
