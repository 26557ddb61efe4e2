//! The server's TLS in a build without the `tls` feature: a config with a `Tls` block is
//! refused when it is validated (`conf::features`), so nothing here runs. The stand-ins keep
//! the shape the server and the transport use, and the config and the allow-list have no
//! value: a [`ServerTls`] cannot be built, and every TLS path is dead code the compiler drops.

use std::sync::Arc;

use super::{TlsError, WatchGuard};
use crate::conf::ServerTlsConf;

/// The rustls config of new connections: none without the `tls` feature.
pub(crate) mod config {
    /// Has no value.
    #[derive(Debug)]
    pub(crate) enum ReloadingConfig {}
}

/// `Tls.AllowedClients`: none without the `tls` feature.
pub(crate) mod allow {
    use crate::tls::PeerIdentity;

    /// Has no value.
    #[derive(Debug)]
    pub(crate) enum AllowList {}

    /// Never refuses: there is no list.
    pub(crate) fn denied(
        allowed: Option<&AllowList>,
        _peer: Option<&PeerIdentity>,
    ) -> Option<String> {
        allowed.map(|list| match *list {})
    }
}

/// A server's TLS set-up, which cannot be built without the `tls` feature.
#[derive(Debug)]
pub(crate) struct ServerTls {
    pub(crate) config: Arc<config::ReloadingConfig>,
    pub(crate) allowed: Option<Arc<allow::AllowList>>,
}

impl ServerTls {
    /// The error the config's validation gives (`Server::new` validates, so this is not
    /// reached there).
    pub(crate) fn load(conf: &ServerTlsConf) -> Result<ServerTls, TlsError> {
        Err(TlsError::Rustls(
            crate::conf::features::tls_off(conf).to_string(),
        ))
    }

    /// Never called: there is no `ServerTls`.
    pub(crate) fn watch(self: &Arc<Self>) -> WatchGuard {
        match *self.config {}
    }
}
