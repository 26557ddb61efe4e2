//! The etcd client shared by registration (server) and discovery (client): feature `etcd`.
//!
//! [`connect`] turns an [`EtcdConf`] into a checked [`etcd_client::Client`], the way go-zero's
//! `core/discov/internal/registry.go` `DialClient` does, with these differences:
//!
//! - a connect timeout ([`DIAL_TIMEOUT`], go-zero's `DialTimeout`) **and** a per-request timeout
//!   ([`REQUEST_TIMEOUT`], go-zero's `RequestTimeout`) are always set, and the whole connect (including
//!   the first call) is bounded, so an unreachable etcd is an error, never a hang;
//! - HTTP/2 keepalive pings every [`KEEPALIVE_INTERVAL`] (>= 5 s: etcd's `--grpc-keepalive-min-time`
//!   answers faster pings with GOAWAY `too_many_pings`, go-zero #3212), and only while a stream is open
//!   (etcd does not permit pings without streams);
//! - the connection is verified with a `Status` call, so a wrong host fails here with the hosts named;
//! - with `User`/`Pass`, an expired or invalidated token (`etcdserver: invalid auth token`, e.g. after
//!   an etcd restart) is refreshed and the call retried (etcd-client's auto token refresh);
//! - TLS (`CertFile`, `CertKeyFile`, `CACertFile`) uses rustls; `InsecureSkipVerify` is refused with
//!   a clear error because tonic's TLS has no switch for it.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::conf::EtcdConf;

/// Timeout for establishing a connection to an etcd endpoint (go-zero `DialTimeout`).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of each unary etcd request (go-zero `RequestTimeout`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 keepalive ping interval (never below etcd's 5 s minimum).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a keepalive ping may stay unanswered before the connection is considered dead.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an etcd client could not be built or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// The config cannot be used (no hosts, unsupported option, ...).
    #[error("etcd config: {0}")]
    Config(String),
    /// A TLS file could not be read or the TLS setup was refused.
    #[error("etcd TLS: {0}")]
    Tls(String),
    /// etcd answered with an error, or the connection failed.
    #[error("cannot reach etcd at {hosts}: {source}")]
    Unreachable {
        /// The configured hosts, comma-separated.
        hosts: String,
        /// The etcd client error.
        #[source]
        source: etcd_client::Error,
    },
    /// No answer within the connect + request timeout.
    #[error("cannot reach etcd at {hosts}: no answer within {after:?}")]
    Timeout {
        /// The configured hosts, comma-separated.
        hosts: String,
        /// How long we waited.
        after: Duration,
    },
}

/// The client options [`connect`] uses for `conf` (timeouts, keepalive, account, TLS).
///
/// # Errors
/// [`EtcdError::Tls`] when a TLS file cannot be read or `InsecureSkipVerify` is set with TLS.
pub fn connect_options(conf: &EtcdConf) -> Result<ConnectOptions, EtcdError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(DIAL_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
        .with_keep_alive_while_idle(false);
    if conf.has_account() {
        options = options
            .with_user(conf.user.clone(), conf.pass.clone())
            .with_auto_token_refresh(true);
    }
    if conf.has_tls() {
        options = options.with_tls(tls_options(conf)?);
    }
    Ok(options)
}

fn tls_options(conf: &EtcdConf) -> Result<TlsOptions, EtcdError> {
    if conf.insecure_skip_verify {
        return Err(EtcdError::Tls(
            "InsecureSkipVerify is not supported (tonic's TLS always verifies the server): \
             set it to false and give a CACertFile that signed the etcd server certificates"
                .to_owned(),
        ));
    }
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| EtcdError::Tls(format!("read {what} {path:?}: {e}")))
    };
    let cert = read("Etcd.CertFile", &conf.cert_file)?;
    let key = read("Etcd.CertKeyFile", &conf.cert_key_file)?;
    let ca = read("Etcd.CACertFile", &conf.ca_cert_file)?;
    Ok(TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key)))
}

/// The hosts of `conf`, comma-separated, for messages.
pub fn hosts_label(conf: &EtcdConf) -> String {
    conf.hosts.join(",")
}

/// Connects to the etcd cluster of `conf` and checks it answers (a `Status` call).
///
/// The returned client reconnects by itself when etcd restarts; its unary calls time out after
/// [`REQUEST_TIMEOUT`]. Streams (watch, lease keepalive) are not bounded by it: their users detect a
/// dead stream themselves.
///
/// # Errors
/// [`EtcdError::Config`] without hosts, [`EtcdError::Tls`] for TLS problems, [`EtcdError::Unreachable`]
/// / [`EtcdError::Timeout`] naming the hosts when etcd does not answer (also: wrong account).
pub async fn connect(conf: &EtcdConf) -> Result<Client, EtcdError> {
    if conf.hosts.is_empty() {
        return Err(EtcdError::Config("empty etcd hosts".to_owned()));
    }
    let options = connect_options(conf)?;
    let hosts = hosts_label(conf);
    let attempt = async {
        let mut client = Client::connect(&conf.hosts, Some(options)).await?;
        client.status().await?;
        Ok::<_, etcd_client::Error>(client)
    };
    let bound = DIAL_TIMEOUT + REQUEST_TIMEOUT;
    match tokio::time::timeout(bound, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(EtcdError::Unreachable { hosts, source }),
        Err(_) => Err(EtcdError::Timeout {
            hosts,
            after: bound,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn insecure_skip_verify_is_a_clear_error() {
        let mut conf = EtcdConf::new(["127.0.0.1:2379"], "k");
        conf.cert_file = "c.pem".into();
        conf.cert_key_file = "k.pem".into();
        conf.ca_cert_file = "ca.pem".into();
        conf.insecure_skip_verify = true;
        let e = connect_options(&conf).unwrap_err().to_string();
        assert!(e.contains("InsecureSkipVerify"), "{e}");
    }

    #[test]
    fn missing_tls_file_is_named() {
        let mut conf = EtcdConf::new(["127.0.0.1:2379"], "k");
        conf.cert_file = "/nonexistent/zrpc-cert.pem".into();
        conf.cert_key_file = "k.pem".into();
        conf.ca_cert_file = "ca.pem".into();
        let e = connect_options(&conf).unwrap_err().to_string();
        assert!(
            e.contains("Etcd.CertFile") && e.contains("zrpc-cert.pem"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn unreachable_etcd_names_the_hosts() {
        // Port 1 on loopback: connection refused at once.
        let conf = EtcdConf::new(["127.0.0.1:1"], "k");
        let e = connect(&conf).await.err().unwrap().to_string();
        assert!(e.contains("127.0.0.1:1"), "{e}");
    }

    #[tokio::test]
    async fn no_hosts_is_a_config_error() {
        let conf = EtcdConf::default();
        assert!(matches!(connect(&conf).await, Err(EtcdError::Config(_))));
    }
}
