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
    /// An error `Client::new` found in a key of the config file it was loaded from (a `Tls`
    /// file, the target, `Etcd`), naming that file as load errors do.
    #[error("config file {file}: {source}")]
    InConfigFile {
        /// The config file ([`RpcClientConf::file`](crate::conf::RpcClientConf::file)).
        file: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// `self` naming the config `file` it concerns: a config error takes it, an error that
    /// comes from a key of the file is wrapped; a dial error (the network's) and an error of
    /// a config built in code (no file) stay as they are.
    pub(crate) fn in_file(self, file: Option<&str>) -> Error {
        let Some(file) = file else {
            return self;
        };
        match self {
            Error::Config(e) => Error::Config(e.with_file(file)),
            Error::InvalidTarget { .. } | Error::Tls { .. } | Error::Resolve { .. } => {
                Error::InConfigFile {
                    file: file.to_owned(),
                    source: Box::new(self),
                }
            }
            other => other,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        let message = err.to_string();
        let cause = match &err {
            Error::InConfigFile { source, .. } => &**source,
            e => e,
        };
        match cause {
            Error::Dial { .. } | Error::Resolve { .. } => tonic::Status::unavailable(message),
            _ => tonic::Status::invalid_argument(message),
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
    fn errors_of_a_start_name_the_config_file() {
        let tls = || Error::Tls {
            key: "Tls.CaFile",
            file: "ca.pem".into(),
            reason: "cannot read".into(),
        };
        let e = tls().in_file(Some("etc/a.yaml"));
        assert_eq!(
            e.to_string(),
            "config file etc/a.yaml: Tls.CaFile \"ca.pem\": cannot read"
        );
        let s: tonic::Status = e.into();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "the cause's code");
        let e = Error::Config(zrpc_core::conf::ConfError::missing("Target"))
            .in_file(Some("etc/a.yaml"));
        assert_eq!(
            e.to_string(),
            "invalid client config: config file etc/a.yaml: field `Target` is not set"
        );
        // no file (a config built in code), or the network's error: as it was
        assert_eq!(tls().in_file(None).to_string(), tls().to_string());
        let dial = Error::Dial {
            target: "t".into(),
            waited: Duration::from_secs(3),
            state: "refused".into(),
        };
        let text = dial.to_string();
        assert_eq!(dial.in_file(Some("etc/a.yaml")).to_string(), text);
    }
}
