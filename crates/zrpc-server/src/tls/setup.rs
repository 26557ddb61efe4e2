//! [`ServerTls`]: a server's TLS set-up, loaded from its `Tls` block and watched while it serves.

use std::sync::Arc;
use std::time::Duration;

use super::{TlsError, WatchGuard, allow, config, reload, watch};
use crate::conf::ServerTlsConf;

/// The ring provider: the only crypto provider of the tree.
#[allow(
    deprecated,
    reason = "rustls 0.23.48 deprecates ring's provider for its lack of post-quantum key exchange; zrpc keeps ring, the provider etcd-client's TLS (tonic's `tls-ring`) uses: one provider in the tree (docs/security.md)"
)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
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
