//! The crate's error type and its one mapping to [`tonic::Status`].

use std::time::Duration;

/// Errors of zrpc-client: bad configuration or target, a resolver that cannot start, no usable
/// endpoint in blocking mode.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The target string could not be parsed; `reason` names the part that is wrong.
    #[error("invalid target {target:?}: {reason}")]
    InvalidTarget {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The configuration is invalid (e.g. no endpoints, target or etcd given); the source is the
    /// config error, with its key path.
    #[error("invalid client config: {0}")]
    Config(#[source] zrpc_core::conf::ConfError),
    /// A TLS file is missing, unreadable or unusable (`Tls` block).
    #[error("{key} {file:?}: {reason}")]
    Tls {
        /// The config key (`Tls.CaFile`, ...).
        key: &'static str,
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The resolver of a target could not be started.
    #[error("resolver for {target}: {reason}")]
    Resolve {
        /// The target.
        target: String,
        /// Why it failed.
        reason: String,
    },
    /// Blocking mode (`NonBlock: false`): no endpoint became usable in time (go-zero's dial
    /// error); `state` says why (the resolver's problem, or the endpoints that refused).
    #[error("rpc dial: {target}, error: no usable endpoint within {waited:?}: {state}")]
    Dial {
        /// The target.
        target: String,
        /// How long the client waited.
        waited: Duration,
        /// The resolver's state: e.g. `etcd unreachable at h:2379: ...`, `no endpoints
        /// registered under key "k" ...`, or the resolved endpoints that refused connections.
        state: String,
    },
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        match err {
            Error::Dial { .. } | Error::Resolve { .. } => {
                tonic::Status::unavailable(err.to_string())
            }
            _ => tonic::Status::invalid_argument(err.to_string()),
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
