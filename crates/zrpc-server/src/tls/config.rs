//! The rustls config for new connections, rebuilt when `Tls.ClientCaFile` changes.
//!
//! The accept loop takes [`ReloadingConfig::current`] for each connection, so a new CA reaches
//! new connections only; established ones keep the client certificate they were verified with.
//! A rebuilt config also starts with an empty session cache, so no session resumed from before
//! the change skips verification against the new CA. A CA file that does not load (bad PEM,
//! half-written, not a CA rustls can use) is logged as an error naming it, and the old CA stays.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::TlsError;
use super::certs::roots_from_pem;
use super::reload::ReloadingCert;
use super::watch::WatchedFile;
use crate::conf::{ClientAuth, ServerTlsConf};

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct ReloadingConfig {
    current: ArcSwap<ServerConfig>,
    cert: Arc<ReloadingCert>,
    client_auth: ClientAuth,
    /// `Tls.ClientCaFile`, when clients are asked for a certificate.
    client_ca: Option<WatchedFile>,
    provider: Arc<CryptoProvider>,
}

impl ReloadingConfig {
    /// The config of `conf`, serving `cert`.
    pub(crate) fn load(
        conf: &ServerTlsConf,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
    ) -> Result<ReloadingConfig, TlsError> {
        let client_auth = conf.client_auth();
        let (client_ca, pem) = match client_auth {
            ClientAuth::None => (None, Vec::new()),
            _ => {
                let (file, pem) = WatchedFile::open("Tls.ClientCaFile", &conf.client_ca_file)?;
                (Some(file), pem)
            }
        };
        let ca = client_ca.as_ref().map(|f| (f.path(), pem.as_slice()));
        let config = build(client_auth, ca, &cert, &provider)?;
        Ok(ReloadingConfig {
            current: ArcSwap::from_pointee(config),
            cert,
            client_auth,
            client_ca,
            provider,
        })
    }

    /// The config for a new connection.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Re-reads `ClientCaFile` if it changed (always, with `force`); whether a new CA is in use.
    pub(crate) fn reload(&self, force: bool) -> bool {
        let Some(file) = &self.client_ca else {
            return false;
        };
        let Some(read) = file.changed(force) else {
            return false;
        };
        let rebuilt = read.and_then(|pem| {
            let ca = Some((file.path(), pem.as_slice()));
            build(self.client_auth, ca, &self.cert, &self.provider)
        });
        match rebuilt {
            Ok(config) => {
                self.current.store(Arc::new(config));
                tracing::info!(
                    target: "zrpc::server",
                    "Tls.ClientCaFile {:?} reloaded; new connections are verified with it",
                    file.path()
                );
                true
            }
            Err(e) => {
                tracing::error!(
                    target: "zrpc::server",
                    "TLS client CA reload refused, keeping the current CA: {e}"
                );
                false
            }
        }
    }
}

/// A config serving `cert` whose client verifier (for `auth` other than `none`) trusts the CA
/// certificates in `ca`: the file name and its bytes.
fn build(
    auth: ClientAuth,
    ca: Option<(&str, &[u8])>,
    cert: &Arc<ReloadingCert>,
    provider: &Arc<CryptoProvider>,
) -> Result<ServerConfig, TlsError> {
    let verifier: Arc<dyn ClientCertVerifier> = match ca {
        Some((file, pem)) if auth != ClientAuth::None => {
            let roots = roots_from_pem("Tls.ClientCaFile", file, pem)?;
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if auth == ClientAuth::Optional {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder.build().map_err(|e| TlsError::Verifier {
                file: file.to_owned(),
                reason: e.to_string(),
            })?
        }
        _ => WebPkiClientVerifier::no_client_auth(),
    };
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
