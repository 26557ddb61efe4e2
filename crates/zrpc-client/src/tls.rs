//! Client TLS (`Tls:` block of `RpcClientConf`, a zrpc addition): tonic's rustls connector
//! (ring provider, the one etcd-client's TLS uses) over zrpc's watched TCP connection, with
//! the `tls` cargo feature. Without it the block still parses, and is refused when the config
//! is validated, naming the feature.

use std::time::Duration;

use serde::{Deserialize, Serialize};
#[cfg(feature = "tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use zrpc_core::conf::{ConfError, Validate};

use crate::error::Error;

/// The endpoints' TLS config: tonic's.
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = ClientTlsConfig;

/// The endpoints' TLS config: without the `tls` feature, none (the type has no value).
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum TlsConfig {}

/// `ep` over TLS with `tls`; the handshake gets `timeout` too.
#[cfg(feature = "tls")]
pub(crate) fn configure(
    ep: tonic::transport::Endpoint,
    tls: &TlsConfig,
    timeout: Option<Duration>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    let tls = match timeout {
        Some(t) => tls.clone().timeout(t),
        None => tls.clone(),
    };
    ep.tls_config(tls)
}

/// Never called: there is no `TlsConfig` without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(crate) fn configure(
    _: tonic::transport::Endpoint,
    tls: &TlsConfig,
    _: Option<Duration>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    match *tls {}
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

    /// Reads the files and builds tonic's TLS config; errors name the key and the file.
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
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if !self.cert_file.is_empty() {
            let cert = read("Tls.CertFile", &self.cert_file)?;
            certs("Tls.CertFile", &self.cert_file, &cert)?;
            let key = read("Tls.KeyFile", &self.key_file)?;
            PrivateKeyDer::from_pem_slice(&key).map_err(|e| Error::Tls {
                key: "Tls.KeyFile",
                file: self.key_file.clone(),
                reason: format!("no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
            })?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        if !self.server_name.is_empty() {
            tls = tls.domain_name(self.server_name.clone());
        }
        // tonic builds its connector here: a key that does not fit fails now, not per call
        tonic::transport::Endpoint::from_static("https://localhost")
            .tls_config(tls.clone())
            .map_err(|e| Error::Tls {
                key: "Tls",
                file: format!("{} / {}", self.cert_file, self.key_file),
                reason: format!("{e}: {}", source_chain(&e)),
            })?;
        Ok(tls)
    }
}

#[cfg(feature = "tls")]
fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
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
