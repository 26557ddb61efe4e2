//! Server TLS and mutual TLS on rustls (ring provider only, the one etcd-client's TLS uses).
//!
//! - [`certs`]: PEM loading with errors that name the config key and the file;
//! - [`reload`]: the server certificate behind an `ArcSwap` (rustls `ResolvesServerCert`),
//!   re-read when its files change (polled every `Tls.ReloadInterval`) and on SIGHUP;
//! - [`io`]: the connection as tonic sees it, plain TCP or TLS; the TLS handshake runs in a
//!   task per connection under `Transport.HandshakeTimeout` (`crate::transport::incoming`);
//! - [`identity`]: [`PeerIdentity`], the client certificate's subject CN and SANs;
//! - [`layer`]: puts `TcpConnectInfo` and [`PeerIdentity`] in each request's extensions and
//!   applies `Tls.AllowedClients`.

pub(crate) mod certs;
pub(crate) mod identity;
pub(crate) mod io;
pub(crate) mod layer;
pub(crate) mod reload;

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

pub use certs::TlsError;
pub use identity::PeerIdentity;

use crate::conf::{ClientAuth, ServerTlsConf};

/// The ring provider: the only crypto provider of the tree.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server's TLS set-up: the rustls config for new connections and the reloading certificate.
#[derive(Debug, Clone)]
pub(crate) struct ServerTls {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) cert: Arc<reload::ReloadingCert>,
}

impl ServerTls {
    /// Loads the files of `conf` (errors name the key and the file).
    pub(crate) fn load(conf: &ServerTlsConf) -> Result<ServerTls, TlsError> {
        let provider = provider();
        let cert = Arc::new(reload::ReloadingCert::load(conf, &provider)?);
        let verifier: Arc<dyn ClientCertVerifier> = match conf.client_auth() {
            ClientAuth::None => WebPkiClientVerifier::no_client_auth(),
            auth => {
                let roots = certs::load_roots("Tls.ClientCaFile", &conf.client_ca_file)?;
                let builder =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                let builder = if auth == ClientAuth::Optional {
                    builder.allow_unauthenticated()
                } else {
                    builder
                };
                builder.build().map_err(|e| TlsError::Verifier {
                    file: conf.client_ca_file.clone(),
                    reason: e.to_string(),
                })?
            }
        };
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(cert.clone());
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
            cert,
        })
    }
}

/// Stops the certificate watcher when the server stops.
#[derive(Debug)]
pub(crate) struct WatchGuard(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
