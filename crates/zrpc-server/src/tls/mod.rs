//! Server TLS and mutual TLS on rustls (ring provider only, the one etcd-client's TLS uses).
//!
//! - [`certs`]: PEM loading with errors that name the config key and the file;
//! - [`reload`]: the server certificate behind an `ArcSwap` (rustls `ResolvesServerCert`);
//! - [`config`]: the rustls config for new connections, rebuilt when `ClientCaFile` changes;
//! - [`allow`]: `AllowedClients` and `AllowedClientsFile`, behind an `ArcSwap`, and the
//!   decision whether a client is refused;
//! - [`watch`]: all of them re-read when their files change (polled every
//!   `Tls.ReloadInterval`) and on SIGHUP;
//! - [`identity`]: [`PeerIdentity`], the client certificate's subject CN and SANs;
//! - [`linger`]: closing a connection whose handshake failed without losing the alert.
//!
//! The transport uses these (the handshake runs in a task per connection under
//! `Transport.HandshakeTimeout`); nothing here depends on the transport.

pub(crate) mod allow;
pub(crate) mod certs;
pub(crate) mod config;
pub(crate) mod identity;
pub(crate) mod linger;
pub(crate) mod reload;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

pub use certs::TlsError;
pub use identity::PeerIdentity;

use crate::conf::ServerTlsConf;

/// The ring provider: the only crypto provider of the tree.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server's TLS set-up: the rustls config for new connections (with the reloading
/// certificate and client CA) and the allow-list.
#[derive(Debug)]
pub(crate) struct ServerTls {
    pub(crate) config: Arc<config::ReloadingConfig>,
    pub(crate) cert: Arc<reload::ReloadingCert>,
    /// `Tls.AllowedClients` and `Tls.AllowedClientsFile`; None = none.
    pub(crate) allowed: Option<Arc<allow::AllowList>>,
    interval: Duration,
}

impl ServerTls {
    /// Loads the files of `conf` (errors name the key and the file).
    pub(crate) fn load(conf: &ServerTlsConf) -> Result<ServerTls, TlsError> {
        let provider = provider();
        let cert = Arc::new(reload::ReloadingCert::load(conf, &provider)?);
        let config = config::ReloadingConfig::load(conf, cert.clone(), provider)?;
        Ok(ServerTls {
            config: Arc::new(config),
            cert,
            allowed: allow::AllowList::load(conf)?.map(Arc::new),
            interval: conf.reload_interval,
        })
    }

    /// Re-reads every file that changed (all of them, with `force`).
    pub(crate) fn reload(&self, force: bool) {
        self.cert.reload(force);
        self.config.reload(force);
        if let Some(allowed) = &self.allowed {
            allowed.reload(force);
        }
    }

    /// Watches the files while the returned guard lives.
    pub(crate) fn watch(self: &Arc<Self>) -> WatchGuard {
        WatchGuard(watch::watch(self.clone(), self.interval))
    }
}

/// Stops the file watcher when the server stops.
#[derive(Debug)]
pub(crate) struct WatchGuard(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
