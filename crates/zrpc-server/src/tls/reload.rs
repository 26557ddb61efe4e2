//! The server certificate behind an `ArcSwap`, re-read when its files change.
//!
//! rustls asks [`ReloadingCert`] for the certificate at each handshake, so a swap reaches new
//! connections only; established ones keep the session they negotiated. The watcher
//! ([`super::watch`]) has both files read every `Tls.ReloadInterval` (and on SIGHUP) and reloads
//! when their bytes changed; a new
//! pair that fails (bad PEM, a key that does not match, a file half-written) is logged as an
//! error naming the file, and the old certificate stays until a good pair appears. Each try is
//! counted in `rpc_server_tls_reloads_total{file,result}` (`loaded` or `refused`).

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::TlsError;
use super::certs::load_certified_key;
use crate::conf::ServerTlsConf;

/// The current server certificate (rustls `ResolvesServerCert`).
#[derive(Debug)]
pub(crate) struct ReloadingCert {
    current: ArcSwap<CertifiedKey>,
    cert_file: String,
    key_file: String,
    provider: Arc<CryptoProvider>,
    /// The bytes of the files last tried (loaded or refused), to act on changes only.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl ReloadingCert {
    /// Loads the certificate and key of `conf`.
    pub(crate) fn load(
        conf: &ServerTlsConf,
        provider: &Arc<CryptoProvider>,
    ) -> Result<ReloadingCert, TlsError> {
        let seen = (
            std::fs::read(&conf.cert_file).unwrap_or_default(),
            std::fs::read(&conf.key_file).unwrap_or_default(),
        );
        let key = load_certified_key(&conf.cert_file, &conf.key_file, provider)?;
        Ok(ReloadingCert {
            current: ArcSwap::new(key),
            cert_file: conf.cert_file.clone(),
            key_file: conf.key_file.clone(),
            provider: provider.clone(),
            seen: Mutex::new(seen),
        })
    }

    /// Re-reads the files if they changed since the last try (or always, with `force`).
    /// Returns whether a new certificate is now in use.
    pub(crate) fn reload(&self, force: bool) -> bool {
        let now = (
            std::fs::read(&self.cert_file).unwrap_or_default(),
            std::fs::read(&self.key_file).unwrap_or_default(),
        );
        {
            let mut seen = self.seen.lock();
            if !force && *seen == now {
                return false;
            }
            *seen = now;
        }
        let loaded = load_certified_key(&self.cert_file, &self.key_file, &self.provider);
        if let Some(reloads) = reloads() {
            let result = if loaded.is_ok() { "loaded" } else { "refused" };
            reloads
                .with_label_values(&[self.cert_file.as_str(), result])
                .inc();
        }
        match loaded {
            Ok(key) => {
                self.current.store(key);
                tracing::info!(
                    target: "zrpc::server",
                    "TLS certificate reloaded from {:?} and {:?}; new connections use it",
                    self.cert_file,
                    self.key_file
                );
                true
            }
            Err(e) => {
                tracing::error!(
                    target: "zrpc::server",
                    "TLS certificate reload refused, keeping the current certificate: {e}"
                );
                false
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// `rpc_server_tls_reloads_total{file,result}` (zrpc addition): the certificate reloads tried
/// after a change of the files (or a SIGHUP), by certificate file and outcome, `loaded` or
/// `refused` (a `refused` means the files on disk are broken and the old certificate is still
/// served). `None` if it cannot be registered.
fn reloads() -> Option<&'static prometheus::IntCounterVec> {
    static RELOADS: OnceLock<Option<prometheus::IntCounterVec>> = OnceLock::new();
    RELOADS
        .get_or_init(|| {
            let opts = prometheus::Opts::new(
                "rpc_server_tls_reloads_total",
                "TLS certificate reloads tried, by certificate file and result (loaded, refused).",
            );
            let vec = prometheus::IntCounterVec::new(opts, &["file", "result"]).ok()?;
            match crate::metrics::registry().register(Box::new(vec.clone())) {
                Ok(()) => Some(vec),
                Err(e) => {
                    tracing::warn!(target: "zrpc::metrics", "cannot register TLS reload metrics: {e}");
                    None
                }
            }
        })
        .as_ref()
}
