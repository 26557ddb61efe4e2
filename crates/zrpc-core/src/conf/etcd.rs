//! `EtcdConf`: go-zero's `discov.EtcdConf` (`core/discov/config.go`), shared by the server
//! (registration) and the client (discovery).

use serde::{Deserialize, Serialize};

use super::{ConfError, Validate};

/// etcd connection and key settings (YAML key `Etcd`).
///
/// | Key | Type | Default | Notes |
/// |---|---|---|---|
/// | `Hosts` | list of `host:port` | `[]` | required when the block is used |
/// | `Key` | string | `""` | required when the block is used; the registration prefix |
/// | `ID` | int | `0` | if > 0 the server registers `Key/ID` instead of `Key/<lease id>` |
/// | `User`, `Pass` | string | `""` | used only when both are set |
/// | `CertFile`, `CertKeyFile`, `CACertFile` | string | `""` | TLS, used only when all three are set; needs the `tls` cargo feature |
/// | `InsecureSkipVerify` | bool | `false` | skip server certificate verification |
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct EtcdConf {
    /// etcd endpoints, `host:port` (scheme optional).
    pub hosts: Vec<String>,
    /// The service key; servers register under `Key/...`, clients watch the `Key/` prefix.
    pub key: String,
    /// If > 0, the registered key is `Key/ID` instead of `Key/<lease id>`.
    #[serde(rename = "ID")]
    pub id: i64,
    /// etcd user name (used only with `Pass`).
    pub user: String,
    /// etcd password (used only with `User`).
    pub pass: String,
    /// TLS client certificate (PEM).
    pub cert_file: String,
    /// TLS client key (PEM).
    pub cert_key_file: String,
    /// CA certificate (PEM) to verify the etcd servers.
    #[serde(rename = "CACertFile")]
    pub ca_cert_file: String,
    /// Skip verification of the etcd server certificate.
    pub insecure_skip_verify: bool,
}

/// `Pass` shows whether it is set, never its value.
impl std::fmt::Debug for EtcdConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConf")
            .field("hosts", &self.hosts)
            .field("key", &self.key)
            .field("id", &self.id)
            .field("user", &self.user)
            .field("pass", &super::redacted(&self.pass))
            .field("cert_file", &self.cert_file)
            .field("cert_key_file", &self.cert_key_file)
            .field("ca_cert_file", &self.ca_cert_file)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish()
    }
}

impl EtcdConf {
    /// An etcd config with hosts and key (everything else empty).
    pub fn new<I, S>(hosts: I, key: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConf {
            hosts: hosts.into_iter().map(Into::into).collect(),
            key: key.into(),
            ..EtcdConf::default()
        }
    }

    /// Hosts and key are both set (go-zero `HasEtcd`): the server registers, the client can discover.
    pub fn has_etcd(&self) -> bool {
        !self.hosts.is_empty() && !self.key.is_empty()
    }

    /// User and password are both set (go-zero `HasAccount`).
    pub fn has_account(&self) -> bool {
        !self.user.is_empty() && !self.pass.is_empty()
    }

    /// Certificate, key and CA are all set (go-zero `HasTLS`).
    pub fn has_tls(&self) -> bool {
        !self.cert_file.is_empty()
            && !self.cert_key_file.is_empty()
            && !self.ca_cert_file.is_empty()
    }

    /// Any field is set (the `Etcd` block is in use and must then be valid).
    pub fn is_configured(&self) -> bool {
        *self != EtcdConf::default()
    }
}

impl Validate for EtcdConf {
    /// go-zero's checks (`empty etcd hosts`, `empty etcd key`), plus: a partial account
    /// (`User` without `Pass` or the reverse) or a partial TLS set is an error naming what is missing,
    /// and a TLS set in a build without the `tls` cargo feature is refused naming it.
    fn validate(&self) -> Result<(), ConfError> {
        if self.hosts.is_empty() || self.hosts.iter().any(|h| h.trim().is_empty()) {
            return Err(ConfError::invalid("Etcd.Hosts", "empty etcd hosts"));
        }
        if self.key.is_empty() {
            return Err(ConfError::invalid("Etcd.Key", "empty etcd key"));
        }
        if self.id < 0 {
            return Err(ConfError::invalid(
                "Etcd.ID",
                format!("must be >= 0, got {}", self.id),
            ));
        }
        match (self.user.is_empty(), self.pass.is_empty()) {
            (false, true) => {
                return Err(ConfError::invalid(
                    "Etcd.Pass",
                    "Etcd.User is set but Etcd.Pass is missing (both are needed for an etcd account)",
                ));
            }
            (true, false) => {
                return Err(ConfError::invalid(
                    "Etcd.User",
                    "Etcd.Pass is set but Etcd.User is missing (both are needed for an etcd account)",
                ));
            }
            _ => {}
        }
        let tls = [
            ("CertFile", &self.cert_file),
            ("CertKeyFile", &self.cert_key_file),
            ("CACertFile", &self.ca_cert_file),
        ];
        let set: Vec<&str> = tls
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if !set.is_empty() && set.len() < tls.len() {
            let missing: Vec<String> = tls
                .iter()
                .filter(|(_, v)| v.is_empty())
                .map(|(k, _)| format!("Etcd.{k}"))
                .collect();
            let given: Vec<String> = set.iter().map(|k| format!("Etcd.{k}")).collect();
            return Err(ConfError::invalid(
                missing[0].clone(),
                format!(
                    "partial etcd TLS config: {} set but {} missing (TLS needs CertFile, CertKeyFile and CACertFile)",
                    given.join(", "),
                    missing.join(", ")
                ),
            ));
        }
        // etcd's client refuses TLS options with an http:// URL at every connect: said once,
        // here, rather than retried forever (go-zero's etcd client drops the TLS for it)
        if self.has_tls()
            && let Some(host) = self.hosts.iter().find(|h| h.trim().starts_with("http://"))
        {
            let rest = host.trim().trim_start_matches("http://");
            return Err(ConfError::invalid(
                "Etcd.Hosts",
                format!(
                    "{host:?} says http:// while CertFile, CertKeyFile and CACertFile ask for \
                     TLS: write it \"https://{rest}\" or \"{rest}\" (or leave the TLS files out)"
                ),
            ));
        }
        if self.has_tls() && !super::feature_on("tls", cfg!(feature = "tls")) {
            return Err(ConfError::feature_off(
                "Etcd.CertFile",
                &self.cert_file,
                "TLS to etcd",
                "tls",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_hosts_and_key_use_go_zero_errors() {
        let e = EtcdConf::default().validate().unwrap_err().to_string();
        assert!(e.contains("empty etcd hosts"), "{e}");
        let e = EtcdConf::new(["127.0.0.1:2379"], "")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty etcd key"), "{e}");
        EtcdConf::new(["127.0.0.1:2379"], "greet.rpc")
            .validate()
            .unwrap();
    }

    #[test]
    fn partial_tls_names_what_is_missing() {
        let mut c = EtcdConf::new(["h:2379"], "k");
        c.cert_file = "c.pem".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path(), Some("Etcd.CertKeyFile"));
        let msg = e.to_string();
        assert!(
            msg.contains("Etcd.CertKeyFile, Etcd.CACertFile missing"),
            "{msg}"
        );
        assert!(!c.has_tls());
        c.cert_key_file = "k.pem".into();
        c.ca_cert_file = "ca.pem".into();
        assert_eq!(c.validate().is_ok(), cfg!(feature = "tls"));
        assert!(c.has_tls());
    }

    /// An http:// host with the TLS files set is refused at load, naming the host and the fix.
    #[test]
    fn an_http_host_with_tls_files_is_refused() {
        let mut c = EtcdConf::new(["h1:2379", "http://h2:2379"], "k");
        c.cert_file = "c.pem".into();
        c.cert_key_file = "k.pem".into();
        c.ca_cert_file = "ca.pem".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path(), Some("Etcd.Hosts"));
        let msg = e.to_string();
        assert!(
            msg.contains("\"http://h2:2379\"") && msg.contains("\"https://h2:2379\""),
            "{msg}"
        );
        c.hosts = vec!["h1:2379".into(), "https://h2:2379".into()];
        assert_eq!(c.validate().is_ok(), cfg!(feature = "tls"));
        // without TLS files an http:// host is fine
        EtcdConf::new(["http://h2:2379"], "k").validate().unwrap();
    }

    #[test]
    fn tls_needs_the_tls_feature() {
        let mut c = EtcdConf::new(["h:2379"], "k");
        c.cert_file = "c.pem".into();
        c.cert_key_file = "k.pem".into();
        c.ca_cert_file = "ca.pem".into();
        if cfg!(feature = "tls") {
            c.validate().unwrap();
            return;
        }
        let e = c.validate().unwrap_err();
        assert_eq!(e.path(), Some("Etcd.CertFile"));
        let msg = e.to_string();
        for part in [
            "\"c.pem\"",
            "TLS to etcd",
            "`tls` cargo feature",
            "features = [\"tls\"]",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
    }

    #[test]
    fn partial_account_is_an_error() {
        let mut c = EtcdConf::new(["h:2379"], "k");
        c.user = "root".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("Etcd.Pass is missing")
        );
        assert!(!c.has_account());
        c.pass = "pw".into();
        c.validate().unwrap();
        assert!(c.has_account());
    }

    #[test]
    fn has_etcd_needs_hosts_and_key() {
        assert!(!EtcdConf::default().has_etcd());
        assert!(!EtcdConf::default().is_configured());
        assert!(EtcdConf::new(["h:2379"], "k").has_etcd());
        assert!(!EtcdConf::new(["h:2379"], "").has_etcd());
    }
}
