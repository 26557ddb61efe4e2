//! `Tls`: the server's TLS and mutual TLS (a zrpc addition; go-zero sets TLS through options
//! in code). Documented in `docs/configuration.md` and `docs/security.md`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate, duration};

/// Whether the server asks connecting clients for a certificate (`Tls.ClientAuth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// A client certificate is verified against `ClientCaFile` when one is sent.
    Optional,
    /// Every client must present a certificate signed by `ClientCaFile`.
    Required,
}

/// The server's TLS settings (`Tls:` block, a zrpc addition). Absent = plaintext (default).
/// Needs the `tls` cargo feature: without it a config with this block is refused when
/// validated, naming it.
///
/// The certificate and key, `ClientCaFile` and `AllowedClientsFile` are re-read when they
/// change (checked every `ReloadInterval` and on SIGHUP): new connections get the new
/// certificate and CA, existing ones keep what they were verified with, the allow-list applies
/// from each client's next call, and a broken new file is logged as an error naming it while
/// the old one stays in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ServerTlsConf {
    /// PEM certificate chain of the server, leaf first (required).
    pub cert_file: String,
    /// PEM private key of the server certificate: PKCS#8, PKCS#1 or SEC1 (required).
    pub key_file: String,
    /// PEM CA certificates that sign client certificates; setting it turns on client
    /// verification (mTLS). Empty = clients are not asked for a certificate.
    pub client_ca_file: String,
    /// `none`, `optional` or `required` (default `required` when `ClientCaFile` is set,
    /// else `none`).
    pub client_auth: Option<ClientAuth>,
    /// Allow-list of client identities: a client whose certificate's subject CN, SAN DNS
    /// name or SAN URI is not listed gets `PermissionDenied` on every call. Empty = any client
    /// the CA signed. Needs `ClientCaFile`.
    pub allowed_clients: Vec<String>,
    /// A file of more allowed identities, one per line (blank lines and `#` comments
    /// skipped), added to `AllowedClients` and re-read like the certificate; a file without
    /// a name is refused (it would admit every client). Empty = none. Needs `ClientCaFile`.
    pub allowed_clients_file: String,
    /// How often the certificate, key, client CA and allow-list files are checked for
    /// changes (default 10s; 0 = only on SIGHUP).
    #[serde(with = "duration")]
    pub reload_interval: Duration,
}

impl Default for ServerTlsConf {
    fn default() -> Self {
        ServerTlsConf {
            cert_file: String::new(),
            key_file: String::new(),
            client_ca_file: String::new(),
            client_auth: None,
            allowed_clients: Vec::new(),
            allowed_clients_file: String::new(),
            reload_interval: Duration::from_secs(10),
        }
    }
}

impl ServerTlsConf {
    /// TLS with the server certificate `cert_file` and its key `key_file`.
    pub fn new(cert_file: impl Into<String>, key_file: impl Into<String>) -> Self {
        ServerTlsConf {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            ..ServerTlsConf::default()
        }
    }

    /// Sets `ClientCaFile` (default empty: no client verification).
    #[must_use]
    pub fn with_client_ca_file(mut self, file: impl Into<String>) -> Self {
        self.client_ca_file = file.into();
        self
    }

    /// Sets `ClientAuth` (default `required` with a `ClientCaFile`, else `none`).
    #[must_use]
    pub fn with_client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = Some(auth);
        self
    }

    /// Sets `AllowedClients` (default empty: any client the CA signed).
    #[must_use]
    pub fn with_allowed_clients<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_clients = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `AllowedClientsFile` (default empty: no file).
    #[must_use]
    pub fn with_allowed_clients_file(mut self, file: impl Into<String>) -> Self {
        self.allowed_clients_file = file.into();
        self
    }

    /// Sets `ReloadInterval` (default 10s; zero = only on SIGHUP).
    #[must_use]
    pub fn with_reload_interval(mut self, every: Duration) -> Self {
        self.reload_interval = every;
        self
    }

    /// The effective `ClientAuth`.
    pub fn client_auth(&self) -> ClientAuth {
        match self.client_auth {
            Some(a) => a,
            None if self.client_ca_file.is_empty() => ClientAuth::None,
            None => ClientAuth::Required,
        }
    }
}

impl Validate for ServerTlsConf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.cert_file.is_empty() {
            return Err(ConfError::missing("Tls.CertFile"));
        }
        if self.key_file.is_empty() {
            return Err(ConfError::missing("Tls.KeyFile"));
        }
        if self.client_ca_file.is_empty() && self.client_auth() != ClientAuth::None {
            return Err(ConfError::invalid(
                "Tls.ClientAuth",
                "optional/required client certificates need Tls.ClientCaFile",
            ));
        }
        for (key, set) in [
            ("Tls.AllowedClients", !self.allowed_clients.is_empty()),
            (
                "Tls.AllowedClientsFile",
                !self.allowed_clients_file.is_empty(),
            ),
        ] {
            if set && self.client_auth() == ClientAuth::None {
                return Err(ConfError::invalid(
                    key,
                    "needs client certificates: set Tls.ClientCaFile (and ClientAuth optional or required)",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcServerConf;

    fn yaml(text: &str) -> Result<RpcServerConf, ConfError> {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "t.yaml", |_| None)
    }

    /// The block alone: a whole config with a `Tls` block needs the `tls` feature.
    fn block(text: &str) -> ServerTlsConf {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "t.yaml", |_| None)
            .unwrap()
    }

    #[test]
    fn tls_block_loads_with_defaults() {
        let t = block("CertFile: s.pem\nKeyFile: s.key\n");
        assert_eq!(
            (t.cert_file.as_str(), t.key_file.as_str()),
            ("s.pem", "s.key")
        );
        assert_eq!(t.client_auth(), ClientAuth::None);
        assert_eq!(t.reload_interval, Duration::from_secs(10));
        assert!(yaml("Name: a\nListenOn: :1\n").unwrap().tls.is_none());
    }

    #[test]
    fn client_ca_makes_client_auth_required_by_default() {
        let t = block(
            "CertFile: s\nKeyFile: k\nClientCaFile: ca\nAllowedClients: [billing]\n\
             ReloadInterval: 500ms\n",
        );
        assert_eq!(t.client_auth(), ClientAuth::Required);
        assert_eq!(t.allowed_clients, ["billing"]);
        assert_eq!(t.reload_interval, Duration::from_millis(500));
        let t = t.with_client_auth(ClientAuth::Optional);
        assert_eq!(t.client_auth(), ClientAuth::Optional);
    }

    #[test]
    fn invalid_tls_blocks_name_the_key() {
        let err = |text: &str| yaml(text).unwrap_err().to_string();
        let e = err("Name: a\nListenOn: :1\nTls:\n  KeyFile: k\n");
        assert!(e.contains("Tls.CertFile"), "{e}");
        let e = err("Name: a\nListenOn: :1\nTls:\n  CertFile: c\n");
        assert!(e.contains("Tls.KeyFile"), "{e}");
        let e = err(
            "Name: a\nListenOn: :1\nTls:\n  CertFile: c\n  KeyFile: k\n  ClientAuth: required\n",
        );
        assert!(e.contains("Tls.ClientAuth"), "{e}");
        let e = err(
            "Name: a\nListenOn: :1\nTls:\n  CertFile: c\n  KeyFile: k\n  AllowedClients: [x]\n",
        );
        assert!(e.contains("Tls.AllowedClients"), "{e}");
        let e = err(
            "Name: a\nListenOn: :1\nTls:\n  CertFile: c\n  KeyFile: k\n  AllowedClientsFile: f\n",
        );
        assert!(e.contains("Tls.AllowedClientsFile"), "{e}");
        let e =
            err("Name: a\nListenOn: :1\nTls:\n  CertFile: c\n  KeyFile: k\n  ClientAuth: maybe\n");
        assert!(e.contains("ClientAuth"), "{e}");
        let e = err("Name: a\nListenOn: :1\nTls:\n  CertFile: c\n  KeyFile: k\n  CaFile: x\n");
        assert!(e.contains("CaFile"), "{e}");
    }
}
