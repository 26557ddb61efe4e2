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
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::TokenStore(_) => tonic::Status::internal(e.to_string()),
            Error::Conf(_) | Error::Reflection(_) | Error::Tls(_) => {
                tonic::Status::failed_precondition(e.to_string())
            }
            #[cfg(feature = "etcd")]
            Error::Etcd(_) => tonic::Status::failed_precondition(e.to_string()),
            _ => tonic::Status::unavailable(e.to_string()),
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
}
