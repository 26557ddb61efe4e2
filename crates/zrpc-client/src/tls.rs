//! Client TLS (`Tls:` block of `RpcClientConf`, a zrpc addition): rustls (ring provider, the
//! one etcd-client's TLS uses) over zrpc's watched TCP connection, ALPN `h2`, with the `tls`
//! cargo feature. Without it the block still parses, and is refused when the config is
//! validated, naming the feature.

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate};

use crate::error::Error;

/// The endpoints' TLS config, built once per client from the `Tls` block.
#[cfg(feature = "tls")]
#[derive(Clone)]
pub(crate) struct TlsConfig {
    config: std::sync::Arc<rustls::ClientConfig>,
    /// `ServerName`, or `None`: each endpoint's host.
    server_name: Option<rustls::pki_types::ServerName<'static>>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The endpoints' TLS config: without the `tls` feature, none (the type has no value).
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum TlsConfig {}

/// TLS to one endpoint: the client's config and the name its certificate must carry.
#[cfg(feature = "tls")]
pub(crate) struct TlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
}

/// TLS to one endpoint: without the `tls` feature, none.
#[cfg(not(feature = "tls"))]
pub(crate) enum TlsConnect {}

#[cfg(feature = "tls")]
impl TlsConfig {
    /// TLS to the endpoint at `host` (a DNS name or an IP address).
    pub(crate) fn for_host(&self, host: &str) -> Result<TlsConnect, String> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|e| format!("{host:?} is no TLS server name ({e}): set Tls.ServerName"))?,
        };
        Ok(TlsConnect {
            connector: tokio_rustls::TlsConnector::from(std::sync::Arc::clone(&self.config)),
            name,
        })
    }
}

#[cfg(not(feature = "tls"))]
impl TlsConfig {
    pub(crate) fn for_host(&self, _: &str) -> Result<TlsConnect, String> {
        match *self {}
    }
}

#[cfg(feature = "tls")]
impl TlsConnect {
    /// The TLS handshake over `io`; the server must choose HTTP/2 (ALPN `h2`), as tonic's
    /// connector required.
    pub(crate) async fn handshake<IO>(
        &self,
        io: IO,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<IO>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let tls = self.connector.connect(self.name.clone(), io).await?;
        match tls.get_ref().1.alpn_protocol() {
            Some(b"h2") => Ok(tls),
            other => Err(std::io::Error::other(format!(
                "the server did not choose HTTP/2 in the TLS handshake (ALPN: {:?})",
                other.map(String::from_utf8_lossy)
            ))),
        }
    }
}

#[cfg(not(feature = "tls"))]
impl TlsConnect {
    pub(crate) async fn handshake<IO>(&self, _: IO) -> std::io::Result<IO> {
        match *self {}
    }
}

/// A rustls client config that trusts `roots`, shows `identity` (certificate chain and key)
/// for mutual TLS, and offers `alpn`. One builder for every client TLS of the crate (the
/// servers' and the Kubernetes API server's), so that they share one crypto provider: ring, the
/// one etcd-client's TLS (tonic's `tls-ring`) uses too.
#[cfg(feature = "tls")]
pub(crate) fn client_config(
    roots: rustls::RootCertStore,
    identity: Option<(
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    )>,
    alpn: &[u8],
) -> Result<rustls::ClientConfig, rustls::Error> {
    #[allow(
        deprecated,
        reason = "rustls 0.23.48 deprecates ring's provider for its lack of post-quantum key exchange; zrpc keeps ring, the provider etcd-client's TLS (tonic's `tls-ring`) uses: one provider in the tree (docs/security.md)"
    )]
    let provider = rustls::crypto::ring::default_provider();
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// The error for a `Tls` block in a build without the `tls` feature.
pub(crate) fn tls_off(tls: &ClientTlsConf) -> ConfError {
    ConfError::feature_off("Tls.CaFile", &tls.ca_file, "TLS to the servers", "tls")
}

/// The client's TLS settings (`Tls:` block). Absent = plaintext (default). Needs the `tls`
/// cargo feature: without it a config with this block is refused when validated, naming it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ClientTlsConf {
    /// PEM CA certificates that sign the servers' certificates (required).
    pub ca_file: String,
    /// PEM client certificate chain, for servers that ask for one (mTLS; needs `KeyFile`).
    pub cert_file: String,
    /// PEM private key of `CertFile`.
    pub key_file: String,
    /// The name the server certificate must carry (and SNI). Empty = each endpoint's host
    /// (an IP address is checked against the certificate's IP SANs).
    pub server_name: String,
}

impl ClientTlsConf {
    /// TLS that trusts the CA certificates of `ca_file`.
    pub fn new(ca_file: impl Into<String>) -> Self {
        ClientTlsConf {
            ca_file: ca_file.into(),
            ..ClientTlsConf::default()
        }
    }

    /// Sets `CertFile` and `KeyFile`: the client certificate (default: none).
    #[must_use]
    pub fn with_identity(
        mut self,
        cert_file: impl Into<String>,
        key_file: impl Into<String>,
    ) -> Self {
        self.cert_file = cert_file.into();
        self.key_file = key_file.into();
        self
    }

    /// Sets `ServerName` (default: the endpoint's host).
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
        self
    }

    /// Without the `tls` feature: the error the config's validation gives.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn build(&self) -> Result<TlsConfig, Error> {
        Err(Error::Config(tls_off(self)))
    }

    /// Reads the files and builds the endpoints' TLS config; errors name the key and the file.
    #[cfg(feature = "tls")]
    pub(crate) fn build(&self) -> Result<TlsConfig, Error> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let read = |key: &'static str, file: &str| {
            std::fs::read(file).map_err(|e| Error::Tls {
                key,
                file: file.to_owned(),
                reason: format!("cannot read: {e}"),
            })
        };
        let certs = |key: &'static str, file: &str, pem: &[u8]| {
            let n = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::Tls {
                    key,
                    file: file.to_owned(),
                    reason: format!("bad PEM: {e}"),
                })?
                .len();
            if n == 0 {
                return Err(Error::Tls {
                    key,
                    file: file.to_owned(),
                    reason: "no PEM CERTIFICATE block".to_owned(),
                });
            }
            Ok(())
        };
        let ca = read("Tls.CaFile", &self.ca_file)?;
        certs("Tls.CaFile", &self.ca_file, &ca)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca).flatten() {
            roots.add(cert).map_err(|e| Error::Tls {
                key: "Tls.CaFile",
                file: self.ca_file.clone(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        let identity = if self.cert_file.is_empty() {
            None
        } else {
            let cert = read("Tls.CertFile", &self.cert_file)?;
            certs("Tls.CertFile", &self.cert_file, &cert)?;
            let key = read("Tls.KeyFile", &self.key_file)?;
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| Error::Tls {
                key: "Tls.KeyFile",
                file: self.key_file.clone(),
                reason: format!("no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
            })?;
            Some((
                CertificateDer::pem_slice_iter(&cert).flatten().collect(),
                key,
            ))
        };
        // a key that does not fit the certificate fails now, not per connection
        let file = match identity {
            Some(_) => format!("{} / {}", self.cert_file, self.key_file),
            None => self.ca_file.clone(),
        };
        let config = client_config(roots, identity, b"h2").map_err(|e| Error::Tls {
            key: "Tls",
            file,
            reason: e.to_string(),
        })?;
        let server_name = if self.server_name.is_empty() {
            None
        } else {
            Some(
                rustls::pki_types::ServerName::try_from(self.server_name.clone()).map_err(|e| {
                    Error::Tls {
                        key: "Tls.ServerName",
                        file: self.server_name.clone(),
                        reason: format!("not a DNS name or IP address: {e}"),
                    }
                })?,
            )
        };
        Ok(TlsConfig {
            config: std::sync::Arc::new(config),
            server_name,
        })
    }
}

impl Validate for ClientTlsConf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.ca_file.is_empty() {
            return Err(ConfError::missing("Tls.CaFile"));
        }
        if self.cert_file.is_empty() != self.key_file.is_empty() {
            return Err(ConfError::invalid(
                "Tls.KeyFile",
                "CertFile and KeyFile go together (both set for mTLS, or neither)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcClientConf;

    fn yaml(text: &str) -> Result<RpcClientConf, ConfError> {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "c.yaml", |_| None)
    }

    #[test]
    fn tls_block_loads_and_is_checked() {
        let c = yaml("Endpoints: [a:1]\nTls:\n  CaFile: ca.pem\n  ServerName: greet\n");
        if cfg!(feature = "tls") {
            let t = c.unwrap().tls.unwrap();
            assert_eq!(
                (t.ca_file.as_str(), t.server_name.as_str()),
                ("ca.pem", "greet")
            );
        } else {
            let e = c.unwrap_err().to_string();
            for part in [
                "Tls.CaFile",
                "\"ca.pem\"",
                "`tls` cargo feature",
                "features = [\"tls\"]",
            ] {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        }
        // a block that is wrong in itself is named as such in any build
        let e = yaml("Endpoints: [a:1]\nTls:\n  ServerName: x\n").unwrap_err();
        assert!(e.to_string().contains("Tls.CaFile"), "{e}");
        let e = yaml("Endpoints: [a:1]\nTls:\n  CaFile: c\n  CertFile: x\n").unwrap_err();
        assert!(e.to_string().contains("Tls.KeyFile"), "{e}");
    }

    #[test]
    #[cfg(feature = "tls")]
    fn build_names_the_missing_file() {
        let e = ClientTlsConf::new("/nonexistent/ca.pem")
            .build()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Tls.CaFile \"/nonexistent/ca.pem\": cannot read: No such file or directory (os error 2)"
        );
    }

    #[test]
    #[cfg(not(feature = "tls"))]
    fn build_without_the_feature_names_it() {
        let e = ClientTlsConf::new("ca.pem")
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Tls.CaFile") && e.contains("`tls` cargo feature"),
            "{e}"
        );
    }
}
