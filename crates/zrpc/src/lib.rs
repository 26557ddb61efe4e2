//! # zrpc
//!
//! go-zero's zRPC, rebuilt in Rust on [tonic]: a gRPC framework whose governance is on by
//! default. You write a tonic service and a YAML file; zrpc gives it etcd registration, a
//! P2C+EWMA load-balanced client, a Google-SRE adaptive breaker, CPU-adaptive load shedding,
//! timeouts, app/token auth, Prometheus metrics, tracing, health and graceful shutdown. A go-zero
//! YAML file loads unchanged, and Go and Rust services find each other through one etcd.
//!
//! This crate is the one to depend on: `use zrpc::...` is all an application needs, including
//! [`tonic`] itself (re-exported so that the generated code and zrpc agree on one version).
//!
//! # Quick start
//!
//! A config file in go-zero's format, as `goctl rpc new` writes it:
//!
//! ```yaml
//! Name: greeter.rpc
//! ListenOn: 0.0.0.0:8080
//! Etcd:
//!   Hosts:
//!   - 127.0.0.1:2379
//!   Key: greeter.rpc
//! ```
//!
//! A client: [`Client`] is a `tower::Service` that every tonic-generated client accepts, cheap to
//! clone and shared by all calls (go-zero's `zrpc.MustNewClient` + `pb.NewGreeterClient(cli.Conn())`).
//! The config names the servers with `Endpoints`, a `Target` or `Etcd`, and picks a balancer
//! (`p2c_ewma` by default):
//!
//! ```no_run
//! # use zrpc_examples::pb;
//! use pb::greeter_client::GreeterClient;
//! use pb::HelloRequest;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let conf: zrpc::RpcClientConf = zrpc::conf::load("etc/greeter-client.yaml")?;
//! let client = zrpc::client(conf).await?;
//!
//! let mut greeter = GreeterClient::new(client.clone());
//! let reply = greeter.say_hello(HelloRequest { name: "zrpc".into() }).await?;
//! println!("{}", reply.into_inner().message);
//! # Ok(()) }
//! ```
//!
//! Configs can also be built in code: `RpcServerConf::new("greeter.rpc", "127.0.0.1:8080")`,
//! `RpcClientConf::direct(["127.0.0.1:8080"])`, `RpcClientConf::etcd(["127.0.0.1:2379"], "greeter.rpc")`.
//!
//! # What is where
//!
//! - [`conf`]: every config type and the loader ([`conf::load`]: YAML, JSON or TOML by
//!   extension, `${VAR}` expansion, case-insensitive keys, unknown keys are errors).
//! - [`client()`] / [`Client`]: the balanced, governed channel.
//! - [`layers`]: the middleware of both chains, for users who assemble their own stacks.
//! - [`registry`] (server side, etcd registration) and [`resolver`] (client side, discovery).
//! - [`Error`]: one error type for everything the facade does; the crate errors
//!   ([`ClientError`], [`ConfError`](conf::ConfError)) convert into it.
//!
//! Longer guides live in the repository's `docs/`: `configuration.md` (every key and default),
//! `middleware.md` (both chains, their order, adding a layer) and `migrating-from-go-zero.md`.

pub mod conf;
mod error;
pub mod layers;

pub use error::Error;

#[doc(no_inline)]
pub use conf::{
    BalancerName, ClientMiddlewaresConf, EtcdConf, RpcClientConf, RpcServerConf,
    ServerMiddlewaresConf, ShutdownConf,
};

pub use zrpc_client::{CallTimeout, Client, EndpointInfo};

#[doc(no_inline)]
pub use zrpc_client::Error as ClientError;

/// The tonic version zrpc is built on, re-exported so an application uses exactly one.
pub use tonic;
/// Client-side load balancing: the lock-free P2C+EWMA and round-robin pickers.
pub use zrpc_client::balancer;
/// Client-side discovery: targets and resolvers (direct, etcd, DNS) and the stable subset.
pub use zrpc_client::resolver;
/// Server-side etcd registration: the self-healing [`Publisher`](registry::Publisher) and
/// [`advertise_addr`](registry::advertise_addr).
pub use zrpc_server::registry;

/// Builds a client from its config (go-zero `zrpc.NewClient`).
///
/// With `NonBlock: true` (the default) it returns at once and calls wait for the first endpoint
/// set until their deadline; with `NonBlock: false` it waits up to 3 s for a usable endpoint.
///
/// # Errors
///
/// [`Error::Client`]: an invalid config or target, a resolver that cannot start, or (blocking
/// mode) no usable endpoint within 3 s.
///
/// # Examples
///
/// ```no_run
/// # use zrpc_examples::pb::{HelloRequest, greeter_client::GreeterClient};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zrpc::client(zrpc::RpcClientConf::direct(["127.0.0.1:8080"])).await?;
/// let reply = GreeterClient::new(client.clone())
///     .say_hello(HelloRequest { name: "zrpc".into() })
///     .await?;
/// # Ok(()) }
/// ```
pub async fn client(conf: RpcClientConf) -> Result<Client, Error> {
    Ok(Client::new(conf).await?)
}
