//! The files `zrpcctl new` writes once (the generated glue is built in `scaffold.rs`).

/// The zrpc lines of a scaffold's `Cargo.toml`.
#[derive(Debug)]
pub(crate) struct Deps {
    /// `[dependencies]`: zrpc's default features but `client` (the service calls no other yet).
    pub(crate) zrpc: String,
    /// `[dev-dependencies]`: `client` on top, for the test that calls the service.
    pub(crate) zrpc_dev: String,
    /// `[build-dependencies]`.
    pub(crate) zrpc_build: String,
}

/// goctl's `rpc new` proto: one `Ping`.
pub(crate) fn default_proto(package: &str, service: &str) -> String {
    format!(
        "syntax = \"proto3\";\n\npackage {package};\n\n\
         message Request {{\n  string ping = 1;\n}}\n\n\
         message Response {{\n  string pong = 1;\n}}\n\n\
         service {service} {{\n  rpc Ping(Request) returns (Response);\n}}\n"
    )
}

pub(crate) fn cargo_toml(name: &str, deps: &Deps) -> String {
    let Deps {
        zrpc,
        zrpc_dev,
        zrpc_build,
    } = deps;
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
# The generated code needs only zrpc (it re-exports tonic and prost at the versions it uses).
# To call other services (`zrpc::client`), add "client" to its features.
{zrpc}
tokio = {{ version = "1", features = ["macros", "rt-multi-thread"] }}
# The service's own config keys (src/config.rs).
serde = {{ version = "1", features = ["derive"] }}
# Streams for streaming RPCs: `tokio_stream::wrappers::ReceiverStream`, `tokio_stream::iter`.
tokio-stream = "0.1"

[build-dependencies]
{zrpc_build}

[dev-dependencies]
# The test calls the service through zrpc's client (tests only: not in the release binary).
{zrpc_dev}
tokio = {{ version = "1", features = ["macros", "rt-multi-thread", "net", "sync", "time"] }}

# A crate of its own, not a member of an enclosing workspace.
[workspace]
"#
    )
}

pub(crate) fn build_rs(proto: &str) -> String {
    format!(
        "//! Compiles proto/{proto} (with protoc when installed, else protox: nothing to install).\n\
         //! zrpc-build makes the generated code depend on zrpc only, and tells the server which\n\
         //! methods stream.\n\n\
         fn main() -> Result<(), Box<dyn std::error::Error>> {{\n    \
         zrpc_build::compile_protos(&[\"proto/{proto}\"], &[\"proto\"])?;\n    \
         Ok(())\n}}\n"
    )
}

pub(crate) fn etc_yaml(name: &str) -> String {
    format!(
        "# zrpc's server keys (go-zero's RpcServerConf: every key and default is in zrpc's\n\
         # docs/configuration.md) and, next to them, the service's own: fields of Config in\n\
         # src/config.rs (DataSource, Cache, UserRpc, ...).\n\
         Name: {name}.rpc\nListenOn: 0.0.0.0:8080\n\
         Etcd:\n  Hosts:\n  - 127.0.0.1:2379\n  Key: {name}.rpc\n"
    )
}

pub(crate) fn dockerfile(name: &str, proto: &str) -> String {
    format!(
        "# Builds with zrpc from git or crates.io (a --zrpc-path checkout is outside the build\n\
         # context: point the zrpc dependencies in Cargo.toml at git before building this image).\n\
         FROM rust:1-bookworm AS build\n\
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

use {ident}::{{config::Config, server, svc::ServiceContext}};

#[tokio::main]
async fn main() -> Result<(), zrpc::Error> {{
    let mut args = std::env::args().skip(1);
    let mut file = String::from("etc/{name}.yaml");
    while let Some(arg) = args.next() {{
        if arg == "-f" || arg == "--f" {{
            file = args.next().unwrap_or(file);
        }}
    }}
    let config = Config::load(&file)?;
    let ctx = Arc::new(ServiceContext::new(config.clone()));
    server::add_services(zrpc::server(config.server)?, ctx)
        .serve()
        .await?;
    Ok(())
}}
"#
    )
}

/// `src/config.rs`: go-zero's `internal/config/config.go`, `type Config struct {
/// zrpc.RpcServerConf }`, read with `zrpc::conf::Embed` so that the service's own keys sit next to
/// zrpc's at the top level of the file and still get unknown-key errors.
pub(crate) fn config_rs(name: &str) -> String {
    format!(
        r#"//! The service's config (go-zero's `internal/config/config.go`): etc/{name}.yaml holds zrpc's
//! server keys and this service's own keys side by side at the top level, as go-zero's
//! `type Config struct {{ zrpc.RpcServerConf; DataSource string }}` reads them. Your code: zrpcctl
//! wrote this file once and never overwrites it.

use std::path::Path;

use serde::Deserialize;
use zrpc::conf::{{ConfError, Embed, Validate}};

/// Everything in etc/{name}.yaml. Add a field for each key of your own: PascalCase in the file
/// (`data_source` is `DataSource`), matched case-insensitively. A key that neither this struct
/// nor `RpcServerConf` knows is an error naming the closest key of either.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
pub struct Config {{
    /// zrpc's server keys (`Name`, `ListenOn`, `Etcd`, `Timeout`, ...), read from the top level
    /// of the same file by [`Config::load`]: go-zero's embedded `zrpc.RpcServerConf`.
    #[serde(skip)]
    pub server: zrpc::RpcServerConf,
    // A key of your own, `DataSource: root:secret@tcp(127.0.0.1:3306)/{ident}` in the file:
    // pub data_source: String,
    // A client of another service, `UserRpc: {{ Etcd: {{ Hosts: [127.0.0.1:2379], Key: user.rpc }} }}`
    // (zrpc's `client` feature: add it in Cargo.toml)
    // (check it in `validate` with `self.user_rpc.validate_at("UserRpc")?`, and give it the
    // file's name for the errors of its start: `fn loaded_from(&mut self, file: &str) {{
    // self.user_rpc.loaded_from(file) }}` in `impl Validate`):
    // pub user_rpc: zrpc::RpcClientConf,
}}

impl Config {{
    /// Loads `file` (YAML, JSON or TOML, by extension; `${{VAR}}` expanded): the server keys into
    /// `server`, the others into this struct's fields, and validates both.
    ///
    /// # Errors
    /// The file cannot be read, or a key is unknown or invalid; the error names the file and key.
    pub fn load(file: impl AsRef<Path>) -> Result<Self, ConfError> {{
        let Embed {{ base, mut extra }}: Embed<zrpc::RpcServerConf, Config> =
            zrpc::conf::load(file)?;
        extra.server = base;
        Ok(extra)
    }}
}}

impl Validate for Config {{
    /// Checks this service's own keys (`RpcServerConf` checks the server's); return
    /// `Err(ConfError::invalid("DataSource", "must not be empty"))` for a bad value, and check a
    /// nested block with `self.user_rpc.validate_at("UserRpc")?` (its errors then name
    /// `UserRpc.Etcd.Key`, not `Etcd.Key`).
    fn validate(&self) -> Result<(), ConfError> {{
        Ok(())
    }}

    /// Added to the error for a key neither this struct nor `RpcServerConf` knows.
    fn unknown_key_note() -> Option<&'static str> {{
        Some(
            "etc/{name}.yaml holds zrpc's server keys (RpcServerConf, docs/configuration.md) and \
             this service's own, each a field of `Config` in src/config.rs: add a field for a \
             key of your own",
        )
    }}
}}
"#,
        ident = name.replace('-', "_"),
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
//! - `svc`: the state every call shares (clients, stores, the config);
//! - `config`: etc/{name}.yaml, zrpc's server keys and the service's own.

pub mod config;
pub mod logic;
pub mod pb;
pub mod server;
pub mod svc;
"#
    )
}

pub(crate) fn svc_rs() -> String {
    r#"//! The state every call shares (go-zero's ServiceContext): the config, clients of other
//! services (`zrpc::client(...)`, with zrpc's `client` feature), stores. Built once in main.rs.
//! Your code: never overwritten.

use crate::config::Config;

/// Shared by every RPC handler.
#[derive(Debug)]
pub struct ServiceContext {
    /// The loaded config: `config.server` is the server's, the other fields the service's own.
    pub config: Config,
}

impl ServiceContext {
    /// Builds the context from the loaded config.
    pub fn new(config: Config) -> Self {
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

use {ident}::{{config::Config, pb, server, svc::ServiceContext}};

#[tokio::test]
async fn serves_and_answers_a_call() -> Result<(), Box<dyn std::error::Error>> {{
    // etc/{name}.yaml as the binary loads it (a key Config does not know fails here), served with
    // a test's server keys: nothing discovers a test server, so no etcd registration and no
    // go-zero pause for registries at shutdown (WrapUpTime, 1s by default).
    let mut config = Config::load(concat!(env!("CARGO_MANIFEST_DIR"), "/etc/{name}.yaml"))?;
    let shutdown = zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(2));
    config.server = zrpc::RpcServerConf::new("{name}.rpc", "127.0.0.1:0").with_shutdown(shutdown);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let ctx = Arc::new(ServiceContext::new(config.clone()));
    let server = server::add_services(zrpc::server(config.server)?, ctx);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_with_listener(listener, async {{
        let _ = stopped.await;
    }}));

    let client = zrpc::client(zrpc::RpcClientConf::direct([addr.to_string()])).await?;
    let mut rpc = {client}::new(client);
    // Any answer of the service passes: an empty request may be one your logic refuses
    // (InvalidArgument, NotFound, ...), and the scaffold's logic answers Unimplemented until you
    // write it. What fails is no answer: no connection, a timeout, a cancelled call.
    if let Err(status) = rpc.{method}({request}).await {{
        use zrpc::tonic::Code;
        let no_answer = matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
        );
        assert!(!no_answer, "the server did not answer: {{status}}");
    }}

    drop(rpc);
    let _ = stop.send(());
    serving.await??;
    Ok(())
}}
"#
    )
}
