//! The zrpc side: [`ZrpcInteropServer`] (zrpc's `TestService` in this process), a runner of
//! zrpc's client cases ([`zrpc_runner`]) and the certificates both sides use ([`InteropCerts`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use zrpc::conf::{ClientTlsConf, RpcClientConf, ServerTlsConf};
use zrpc_core::breaker::BreakerRegistry;

use crate::certs::{CertFiles, TestCa};

/// The name clients verify the server certificate against (grpc-go's interop scripts pass
/// `--server_host_override=foo.test.google.fr`; its test certificate is for `*.test.google.fr`).
pub const SERVER_NAME: &str = "foo.test.google.fr";

/// How long one zrpc client case may take before it fails as hung.
const CASE_TIMEOUT: Duration = Duration::from_secs(10);

/// A test CA and a server certificate it signed (for `*.test.google.fr`, `localhost` and
/// `127.0.0.1`), made with openssl for one test.
#[derive(Debug)]
pub struct InteropCerts {
    /// The CA certificate clients trust.
    pub ca: CertFiles,
    /// The server's certificate and key.
    pub server: CertFiles,
    _ca: TestCa,
}

impl InteropCerts {
    /// New certificates in a temporary directory (removed on drop).
    ///
    /// # Panics
    /// When openssl fails.
    pub fn new() -> InteropCerts {
        let ca = TestCa::new("zrpc interop test CA");
        let server = ca.issue(
            SERVER_NAME,
            &["DNS:*.test.google.fr", "DNS:localhost", "IP:127.0.0.1"],
        );
        InteropCerts {
            ca: ca.files.clone(),
            server,
            _ca: ca,
        }
    }
}

impl Default for InteropCerts {
    fn default() -> InteropCerts {
        InteropCerts::new()
    }
}

/// zrpc's interop `TestService` served by `zrpc::server` on `127.0.0.1:<free port>` with the
/// interop server's config (`zrpc_interop::server::conf`: the default chain, `Compression: gzip`
/// for the handlers to choose), its own breakers (several servers share this process),
/// `CpuThreshold: 0`, TLS with `certs` when given. Aborted on drop.
#[derive(Debug)]
pub struct ZrpcInteropServer {
    /// Its address.
    pub addr: SocketAddr,
    join: JoinHandle<Result<(), zrpc::Error>>,
}

impl ZrpcInteropServer {
    /// Starts it.
    ///
    /// # Panics
    /// When the address cannot be bound or the config is refused.
    pub async fn start(certs: Option<&InteropCerts>) -> ZrpcInteropServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let mut conf = zrpc_interop::server::conf(&addr.to_string()).with_cpu_threshold(0);
        if let Some(c) = certs {
            conf = conf.with_tls(ServerTlsConf::new(c.server.cert_str(), c.server.key_str()));
        }
        let server = zrpc::server(conf)
            .expect("valid interop server config")
            .add_service(zrpc_interop::server::service())
            .breaker_registry(Arc::new(BreakerRegistry::default()));
        let join = tokio::spawn(async move {
            server
                .serve_with_listener(listener, std::future::pending())
                .await
                .map_err(zrpc::Error::from)
        });
        ZrpcInteropServer { addr, join }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for ZrpcInteropServer {
    fn drop(&mut self) {
        self.join.abort();
    }
}

/// A runner of zrpc's client cases against `127.0.0.1:<port>`, over TLS trusting `certs`' CA and
/// verifying [`SERVER_NAME`] when given; each case bounded to 10 s.
///
/// # Panics
/// When the client cannot be built.
pub async fn zrpc_runner(port: u16, certs: Option<&InteropCerts>) -> zrpc_interop::Runner {
    let mut conf = RpcClientConf::direct([format!("127.0.0.1:{port}")]);
    if let Some(c) = certs {
        conf = conf.with_tls(ClientTlsConf::new(c.ca.cert_str()).with_server_name(SERVER_NAME));
    }
    zrpc_interop::Runner::new(conf)
        .await
        .expect("build the zrpc interop client")
        .with_case_timeout(CASE_TIMEOUT)
}
