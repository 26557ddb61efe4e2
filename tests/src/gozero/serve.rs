//! Serving an [`InteropGreeter`] behind a zrpc `Server`: [`start_zrpc`] and [`ZrpcServer`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::conf::EtcdConf;
use zrpc_server::conf::ShutdownConf;
use zrpc_server::{RpcServerConf, Server, ServerHandle};

use super::InteropGreeter;
use crate::greeter::GREETER_DESCRIPTOR;
use crate::pb::greeter_server::GreeterServer;

/// A zrpc server config for interop tests: `CpuThreshold: 0`, WrapUpTime 1 s (go-zero's
/// default, so that go-zero clients see a deregistration before the drain), WaitTime 10 s,
/// registered under `etcd` when given. `ListenOn` is filled in by [`start_zrpc`].
pub fn zrpc_conf(name: &str, etcd: Option<EtcdConf>) -> RpcServerConf {
    let conf = RpcServerConf::new(name, "127.0.0.1:0")
        .with_cpu_threshold(0)
        .with_shutdown(ShutdownConf::new(
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
    match etcd {
        Some(e) => conf.with_etcd(e),
        None => conf,
    }
}

/// A running zrpc server with an [`InteropGreeter`].
#[derive(Debug)]
pub struct ZrpcServer {
    /// Its gRPC address; `addr.to_string()` is its `ListenOn`, `x-server` and etcd value.
    pub addr: SocketAddr,
    /// Its handle.
    pub handle: ServerHandle,
    /// Its greeter (call counter).
    pub greeter: InteropGreeter,
    join: Option<JoinHandle<Result<(), zrpc_server::Error>>>,
}

impl ZrpcServer {
    /// `127.0.0.1:port`.
    pub fn listen_on(&self) -> String {
        self.addr.to_string()
    }

    /// Its DevServer address, if configured.
    pub fn dev_addr(&self) -> Option<SocketAddr> {
        self.handle.dev_server_addr()
    }

    /// Starts the graceful shutdown without waiting.
    pub fn begin_shutdown(&self) {
        self.handle.shutdown();
    }

    /// Shuts down gracefully and waits for `serve` to return.
    ///
    /// # Panics
    /// When the server task panicked.
    pub async fn shutdown(mut self) -> Result<(), zrpc_server::Error> {
        self.handle.shutdown();
        match self.join.take() {
            Some(j) => j.await.expect("server task panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for ZrpcServer {
    fn drop(&mut self) {
        if let Some(j) = self.join.take() {
            j.abort();
        }
    }
}

/// Serves an [`InteropGreeter`] behind a zrpc server built from `conf`. A `ListenOn` with port
/// 0 gets a free port on 127.0.0.1; otherwise `ListenOn` is bound as given.
///
/// # Panics
/// When the config is invalid or the address cannot be bound.
pub async fn start_zrpc(conf: RpcServerConf) -> ZrpcServer {
    start_zrpc_with(conf, |s| s).await
}

/// [`start_zrpc`] with a customization of the `Server` (CPU source, token store, ...).
///
/// # Panics
/// When the config is invalid or the address cannot be bound.
pub async fn start_zrpc_with(
    mut conf: RpcServerConf,
    customize: impl FnOnce(Server) -> Server,
) -> ZrpcServer {
    let bind = if conf.listen_on.ends_with(":0") || conf.listen_on.is_empty() {
        "127.0.0.1:0".to_owned()
    } else {
        conf.listen_on.clone()
    };
    let listener = TcpListener::bind(&bind)
        .await
        .unwrap_or_else(|e| panic!("bind {bind}: {e}"));
    let addr = listener.local_addr().expect("local address");
    if bind.ends_with(":0") {
        conf.listen_on = addr.to_string();
    }
    let greeter = InteropGreeter::new(conf.listen_on.clone());
    let server = Server::new(conf)
        .expect("valid zrpc server config")
        .add_service(GreeterServer::new(greeter.clone()))
        .reflection_descriptor(GREETER_DESCRIPTOR)
        // Each server has its own breakers: several servers run in this process.
        .breaker_registry(std::sync::Arc::new(BreakerRegistry::default()));
    let server = customize(server);
    let handle = server.handle();
    let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.expect("zrpc server serves");
    ZrpcServer {
        addr,
        handle,
        greeter,
        join: Some(join),
    }
}
