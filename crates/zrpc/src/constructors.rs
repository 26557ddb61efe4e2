//! [`server`] and `client`: go-zero's `zrpc.NewServer` and `zrpc.NewClient`.

#[cfg(feature = "client")]
use crate::{Client, RpcClientConf};
use crate::{Error, RpcServerConf, Server};

/// Builds a server from its config (go-zero `zrpc.NewServer`); add services with
/// [`Server::add_service`], then [`Server::serve`].
///
/// # Errors
///
/// [`Error::Server`] when the config does not validate.
///
/// # Examples
///
/// ```no_run
/// # use zrpc_examples::{greeter::Greeter, pb::greeter_server::GreeterServer};
/// # async fn run() -> Result<(), zrpc::Error> {
/// let conf = zrpc::RpcServerConf::new("greeter.rpc", "127.0.0.1:8080");
/// # let greeter = Greeter::new("doc", std::time::Duration::ZERO);
/// zrpc::server(conf)?.add_service(GreeterServer::new(greeter)).serve().await?;
/// # Ok(()) }
/// ```
pub fn server(conf: RpcServerConf) -> Result<Server, Error> {
    Ok(Server::new(conf)?)
}

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
#[cfg(feature = "client")]
pub async fn client(conf: RpcClientConf) -> Result<Client, Error> {
    // streaming methods of the linked protos: their calls go to the client's stream families
    static DECLARED: std::sync::Once = std::sync::Once::new();
    DECLARED.call_once(|| {
        zrpc_client::metrics::declare_streaming_methods(zrpc_server::linked_streaming_methods());
    });
    Ok(Client::new(conf).await?)
}
