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
//! - TLS (`CertFile`, `CertKeyFile`, `CACertFile`) uses rustls (feature `tls`; without it a TLS
//!   config is an error naming the feature); `InsecureSkipVerify` is refused with a clear error
//!   because tonic's TLS has no switch for it.

use std::time::Duration;

#[cfg(feature = "tls")]
use etcd_client::{Certificate, Identity, TlsOptions};
use etcd_client::{Client, ConnectOptions};

use crate::conf::EtcdConf;

/// Timeout for establishing a connection to an etcd endpoint (go-zero `DialTimeout`).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of each unary etcd request (go-zero `RequestTimeout`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest etcd answer discovery reads (a prefix's keys, a watch's batch of events): the
/// default of etcd's Go client (`MaxCallRecvMsgSize`, 2 GiB), which go-zero uses, not tonic's
/// 4 MiB, which a prefix holding a few large values or some tens of thousands of keys passes.
pub const MAX_RESPONSE_SIZE: usize = i32::MAX as usize;
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
    /// etcd answered with an error, or the connection failed; `message` names the cause
    /// ([`describe`]).
    #[error("{message}")]
    Unreachable {
        /// The configured hosts, comma-separated.
        hosts: String,
        /// What failed, with the hosts ([`describe`]).
        message: String,
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
/// [`EtcdError::Tls`] when a TLS file cannot be read, `InsecureSkipVerify` is set with TLS, or
/// TLS is set in a build without the `tls` feature.
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
        options = with_tls(options, conf)?;
    }
    Ok(options)
}

/// `options` with the TLS files of `conf`.
#[cfg(feature = "tls")]
fn with_tls(options: ConnectOptions, conf: &EtcdConf) -> Result<ConnectOptions, EtcdError> {
    // off only when checked as a build without `tls` (`zrpcctl conf check`)
    if !crate::conf::feature_on("tls", true) {
        return Err(tls_off(conf));
    }
    Ok(options.with_tls(tls_options(conf)?))
}

/// Without the `tls` feature: the error `EtcdConf`'s validation gives at load (this is a
/// config built in code, or not validated).
#[cfg(not(feature = "tls"))]
fn with_tls(_: ConnectOptions, conf: &EtcdConf) -> Result<ConnectOptions, EtcdError> {
    Err(tls_off(conf))
}

/// The error for etcd TLS settings in a build without the `tls` feature.
fn tls_off(conf: &EtcdConf) -> EtcdError {
    EtcdError::Tls(
        crate::conf::ConfError::feature_off("Etcd.CertFile", &conf.cert_file, "TLS to etcd", "tls")
            .to_string(),
    )
}

#[cfg(feature = "tls")]
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

/// Checks what cannot heal by retrying: every host is `host:port` (an optional `http://` or
/// `https://` scheme allowed) and the TLS files can be read. Servers call it at start so a bad
/// config fails at once instead of being retried forever.
///
/// # Errors
/// [`EtcdError::Config`] naming the malformed host, [`EtcdError::Tls`] naming the unreadable file.
pub fn check(conf: &EtcdConf) -> Result<(), EtcdError> {
    if conf.hosts.is_empty() {
        return Err(EtcdError::Config("empty etcd hosts".to_owned()));
    }
    for host in &conf.hosts {
        check_host(host).map_err(|why| {
            EtcdError::Config(format!("Etcd.Hosts: {host:?} is not host:port ({why})"))
        })?;
    }
    connect_options(conf).map(|_| ())
}

fn check_host(host: &str) -> Result<(), &'static str> {
    let h = host.trim();
    let h = h
        .strip_prefix("http://")
        .or_else(|| h.strip_prefix("https://"))
        .unwrap_or(h);
    let (name, port) = h.rsplit_once(':').ok_or("no port")?;
    port.parse::<u16>()
        .map_err(|_| "the port is not a number in 1..65535")?;
    if port == "0" {
        return Err("the port is not a number in 1..65535");
    }
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    if name.is_empty() {
        return Err("no host name");
    }
    if name.contains(['/', ' ', '?', '#', '@']) {
        return Err("invalid character in the host name");
    }
    Ok(())
}

/// What kind of failure an etcd client error is (see [`describe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// etcd refused the account (wrong user or password), or requires one.
    Auth,
    /// The TLS handshake failed (e.g. TLS against a plain etcd, or an untrusted certificate).
    Tls,
    /// An etcd host name could not be resolved.
    Dns,
    /// No connection (refused, reset, timed out, no leader).
    Unreachable,
    /// etcd answered with another error.
    Other,
}

/// The messages of `err` and its sources, outermost first, without repeats.
fn causes(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        let msg = e.to_string();
        if !msg.is_empty() && !out.iter().any(|m| m.contains(&msg)) {
            out.push(msg);
        }
        cur = e.source();
    }
    out
}

/// Classifies an etcd client error.
///
/// etcd-client reports most failures as a gRPC status from its tonic channel; the kind is
/// read from the status code and from the chain of its source errors (an `io::Error` kind for
/// refused or reset connections; hyper's "dns error" and rustls' "tls"/"certificate" texts,
/// which have no public error type to match on).
pub fn classify(err: &etcd_client::Error) -> FailureKind {
    if let etcd_client::Error::GRpcStatus(status) = err {
        let msg = status.message();
        // `tonic::Code` (not re-exported by etcd-client) is a fieldless enum of the gRPC codes.
        if status.code() as i32 == crate::grpc::code::UNAUTHENTICATED
            || msg.contains("authentication failed")
            || msg.contains("user name is empty")
            || msg.contains("invalid auth token")
            || msg.contains("permission denied")
        {
            return FailureKind::Auth;
        }
    }
    let all = causes(err).join(": ").to_ascii_lowercase();
    if all.contains("dns error") || all.contains("failed to lookup address") {
        FailureKind::Dns
    } else if all.contains("tls") || all.contains("certificate") || all.contains("handshake") {
        FailureKind::Tls
    } else if matches!(
        err,
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_)
    ) || all.contains("connect error")
        || all.contains("unavailable")
        || all.contains("no leader")
        || has_io_error(err)
    {
        FailureKind::Unreachable
    } else {
        FailureKind::Other
    }
}

fn has_io_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if e.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether `err` says the request never reached etcd: the channel could not connect to the member
/// it picked (refused, unreachable). Such a request is safe to send again, whatever it does.
pub fn never_sent(err: &etcd_client::Error) -> bool {
    causes(err)
        .iter()
        .any(|c| c.to_ascii_lowercase().contains("connect error"))
}

/// Attempts [`retry_unsent`] makes at a request that keeps failing before it reaches etcd.
pub const UNSENT_ATTEMPTS: u32 = 8;

/// Runs `op` until it succeeds, fails in etcd, or has failed [`UNSENT_ATTEMPTS`] times before
/// reaching etcd ([`never_sent`]).
///
/// etcd-client spreads requests over every host with tonic's balanced channel, which keeps
/// picking a member that is down (its reconnecting endpoint reports ready, then fails the call):
/// with one member of three down, a third of all requests fail at once although two members
/// would answer. grpc-go, go-zero's etcd client, picks only among connected members. Sending
/// again picks again: 8 attempts leave a one-member-down cluster a (1/3)^8 chance of failing.
///
/// # Errors
/// The last attempt's error.
pub async fn retry_unsent<T, F, Fut>(mut op: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut left = UNSENT_ATTEMPTS;
    loop {
        match op().await {
            Err(e) if left > 1 && never_sent(&e) => left -= 1,
            r => return r,
        }
    }
}

/// A message for `err` that names its cause and the hosts of `conf`, e.g.
/// `etcd unreachable at 127.0.0.1:1: tcp connect error: Connection refused (os error 111)` or
/// `etcd authentication failed at h:2379 for user "u": etcdserver: authentication failed, ...`.
pub fn describe(conf: &EtcdConf, err: &etcd_client::Error) -> String {
    let hosts = hosts_label(conf);
    let cause = match err {
        etcd_client::Error::GRpcStatus(status) => {
            let first = status.message().to_owned();
            let mut c = vec![first.clone()];
            if let Some(src) = std::error::Error::source(status) {
                c.extend(
                    causes(src)
                        .into_iter()
                        .filter(|m| !first.contains(m.as_str())),
                );
            }
            c.join(": ")
        }
        other => causes(other).join(": "),
    };
    let mut kind = classify(err);
    if kind == FailureKind::Unreachable && conf.has_tls() && closed_by_peer(&cause) {
        // A plaintext server answers a TLS ClientHello by closing the connection (a reset or an
        // EOF, which one depends on timing): with TLS configured, that is a handshake failure.
        kind = FailureKind::Tls;
    }
    match kind {
        FailureKind::Auth if conf.user.is_empty() => format!(
            "etcd at {hosts} requires authentication (set Etcd.User and Etcd.Pass): {cause}"
        ),
        FailureKind::Auth => {
            format!(
                "etcd authentication failed at {hosts} for user {:?}: {cause}",
                conf.user
            )
        }
        FailureKind::Tls if conf.has_tls() => {
            format!(
                "etcd TLS handshake with {hosts} failed (does etcd serve TLS there, signed by Etcd.CACertFile?): {cause}"
            )
        }
        FailureKind::Tls => format!("etcd TLS failure at {hosts}: {cause}"),
        FailureKind::Dns => format!("cannot resolve etcd host(s) {hosts}: {cause}"),
        FailureKind::Unreachable => format!("etcd unreachable at {hosts}: {cause}"),
        FailureKind::Other => format!("etcd at {hosts}: {cause}"),
    }
}

/// Whether `cause` says the peer closed the connection (reset, EOF, broken pipe).
fn closed_by_peer(cause: &str) -> bool {
    let c = cause.to_ascii_lowercase();
    c.contains("connection reset") || c.contains("eof") || c.contains("broken pipe")
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
        let client = Client::connect(&conf.hosts, Some(options)).await?;
        retry_unsent(|| {
            let mut c = client.clone();
            async move { c.status().await }
        })
        .await?;
        Ok::<_, etcd_client::Error>(client)
    };
    let bound = DIAL_TIMEOUT + REQUEST_TIMEOUT;
    match tokio::time::timeout(bound, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(EtcdError::Unreachable {
            hosts,
            message: describe(conf, &source),
            source,
        }),
        Err(_) => Err(EtcdError::Timeout {
            hosts,
            after: bound,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_during_a_tls_connect_is_described_as_a_tls_failure() {
        let reset = || {
            etcd_client::Error::IoError(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "Connection reset by peer (os error 104)",
            ))
        };
        let mut conf = EtcdConf::new(["127.0.0.1:2379"], "k");
        // Without TLS a reset is just unreachable.
        let plain = describe(&conf, &reset());
        assert!(
            plain.starts_with("etcd unreachable at 127.0.0.1:2379"),
            "{plain}"
        );
        conf.cert_file = "c.pem".into();
        conf.cert_key_file = "k.pem".into();
        conf.ca_cert_file = "ca.pem".into();
        let tls = describe(&conf, &reset());
        assert!(
            tls.starts_with("etcd TLS handshake with 127.0.0.1:2379 failed"),
            "{tls}"
        );
        // A refused connection stays unreachable even with TLS configured.
        let refused = etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        ));
        assert!(describe(&conf, &refused).starts_with("etcd unreachable"));
    }

    #[test]
    #[cfg(feature = "tls")]
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

    #[test]
    #[cfg(not(feature = "tls"))]
    fn tls_without_the_feature_names_it() {
        let mut conf = EtcdConf::new(["127.0.0.1:2379"], "k");
        conf.cert_file = "c.pem".into();
        conf.cert_key_file = "k.pem".into();
        conf.ca_cert_file = "ca.pem".into();
        let e = connect_options(&conf).unwrap_err().to_string();
        assert!(
            e.contains("Etcd.CertFile") && e.contains("`tls` cargo feature"),
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

    #[test]
    fn malformed_hosts_and_missing_files_fail_the_check() {
        let ok = EtcdConf::new(
            ["127.0.0.1:2379", "etcd.local:2379", "http://[::1]:2379"],
            "k",
        );
        check(&ok).unwrap();
        for bad in ["127.0.0.1", "h:port", "h:0", ":2379", "h/x:1"] {
            let e = check(&EtcdConf::new([bad], "k")).unwrap_err().to_string();
            assert!(e.contains("Etcd.Hosts") && e.contains(bad), "{e}");
        }
        let mut conf = EtcdConf::new(["127.0.0.1:2379"], "k");
        conf.cert_file = "/nonexistent/zrpc-cert.pem".into();
        conf.cert_key_file = "k.pem".into();
        conf.ca_cert_file = "ca.pem".into();
        assert!(matches!(check(&conf), Err(EtcdError::Tls(_))));
    }

    #[tokio::test]
    async fn refused_connections_are_unreachable() {
        let conf = EtcdConf::new(["127.0.0.1:1"], "k");
        let e = connect(&conf).await.err().unwrap().to_string();
        assert!(e.starts_with("etcd unreachable at 127.0.0.1:1: "), "{e}");
        assert!(e.contains("refused"), "{e}");
    }

    #[tokio::test]
    async fn a_refused_request_is_sent_again_then_reported() {
        // Nothing listens on port 1: every attempt is refused before reaching etcd.
        let client = Client::connect(["127.0.0.1:1"], None).await.unwrap();
        let mut attempts = 0;
        let e = retry_unsent(|| {
            attempts += 1;
            let mut c = client.clone();
            async move { c.status().await }
        })
        .await
        .err()
        .unwrap();
        assert!(never_sent(&e), "{e}");
        assert_eq!(attempts, UNSENT_ATTEMPTS);
    }

    #[tokio::test]
    async fn no_hosts_is_a_config_error() {
        let conf = EtcdConf::default();
        assert!(matches!(connect(&conf).await, Err(EtcdError::Config(_))));
    }
}
