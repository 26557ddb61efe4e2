//! The crate's error type and its one mapping to `tonic::Status`.

use zrpc_core::conf::ConfError;

/// Errors of building or running a [`Server`](crate::Server).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid server config: {0}")]
    Conf(#[from] ConfError),
    /// `ListenOn` (or the DevServer address) could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that was tried.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The listener has no local address (should not happen for TCP).
    #[error("cannot read the local address of the listener: {0}")]
    LocalAddr(#[source] std::io::Error),
    /// A file descriptor set given for reflection could not be used.
    #[error("invalid reflection descriptor set: {0}")]
    Reflection(String),
    /// Telemetry (OTLP exporter) could not be set up.
    #[error("telemetry setup failed: {0}")]
    Telemetry(String),
    /// The gRPC transport failed while serving.
    #[error("grpc transport error: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The etcd settings cannot work and retrying will not help (a malformed host, an
    /// unreadable TLS file): the server refuses to start instead of retrying forever.
    #[error("etcd registration: {0}")]
    #[cfg(feature = "etcd")]
    Etcd(#[from] zrpc_core::etcd::EtcdError),
    /// A TLS file is missing, unreadable or does not fit (`Tls` block); the message names the
    /// key and the file.
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A token store could not answer (auth).
    #[error("token store: {0}")]
    TokenStore(String),
    /// Two services were added under one name ([`Server::add_service`](crate::Server::add_service);
    /// health and reflection are added by the config's `Health` and `Reflection`).
    #[error("service {0} was added twice: a server serves each service name once")]
    DuplicateService(&'static str),
    /// An error a start found in a key of the config file it was loaded from (a `Tls` file,
    /// the log directory, `Etcd`, `ListenOn`), naming that file as load errors do.
    #[error("config file {file}: {source}")]
    InConfigFile {
        /// The config file ([`RpcServerConf::file`](crate::conf::RpcServerConf::file)).
        file: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// `self` naming the config `file` it concerns: a config error takes it, an error of a
    /// start that comes from a key of the file is wrapped; any other (the network's, a
    /// handler's) and an error of a config built in code (no file) stay as they are.
    pub(crate) fn in_file(self, file: Option<&str>) -> Error {
        let Some(file) = file else {
            return self;
        };
        match self {
            Error::Conf(e) => Error::Conf(e.with_file(file)),
            Error::Tls(_) | Error::Telemetry(_) | Error::Bind { .. } => Error::InConfigFile {
                file: file.to_owned(),
                source: Box::new(self),
            },
            #[cfg(feature = "etcd")]
            Error::Etcd(_) => Error::InConfigFile {
                file: file.to_owned(),
                source: Box::new(self),
            },
            other => other,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        let cause = match &e {
            Error::InConfigFile { source, .. } => &**source,
            e => e,
        };
        match cause {
            Error::TokenStore(_) => tonic::Status::internal(message),
            Error::Conf(_) | Error::Reflection(_) | Error::Tls(_) => {
                tonic::Status::failed_precondition(message)
            }
            #[cfg(feature = "etcd")]
            Error::Etcd(_) => tonic::Status::failed_precondition(message),
            _ => tonic::Status::unavailable(message),
        }
    }
}

/// Debug prints the friendly message (as `anyhow` does), so `fn main() -> Result<(), Error>`
/// shows what went wrong and where rather than the variant's fields.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        zrpc_core::conf::debug_report(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_to_status() {
        let s: tonic::Status = Error::TokenStore("redis down".into()).into();
        assert_eq!(s.code(), tonic::Code::Internal);
        assert_eq!(s.message(), "token store: redis down");
    }

    #[test]
    fn errors_of_a_start_name_the_config_file() {
        let tls = || Error::Tls(crate::tls::TlsError::Rustls("no".into()));
        let e = tls().in_file(Some("etc/a.yaml"));
        assert_eq!(
            e.to_string(),
            "config file etc/a.yaml: TLS configuration: no"
        );
        let s: tonic::Status = e.into();
        assert_eq!(
            s.code(),
            tonic::Code::FailedPrecondition,
            "the cause's code"
        );
        let e = Error::Conf(ConfError::invalid("Redis.Type", "x")).in_file(Some("etc/a.yaml"));
        assert_eq!(
            e.to_string(),
            "invalid server config: config file etc/a.yaml: `Redis.Type`: x"
        );
        // no file (a config built in code), or not the config's error: as it was
        assert_eq!(tls().in_file(None).to_string(), "TLS configuration: no");
        let e = Error::TokenStore("down".into()).in_file(Some("etc/a.yaml"));
        assert_eq!(e.to_string(), "token store: down");
    }
}
