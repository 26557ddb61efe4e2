//! [`TlsError`]: what is wrong with a `Tls` block's files, naming the key and the file. In
//! every build (it is public API and a variant of the server's error); without the `tls`
//! feature a `Tls` block is refused when the config is validated, before any file is read.

/// A TLS set-up error (server start, or a certificate reload that was refused).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("{key} {file:?}: cannot read: {source}")]
    Read {
        /// The config key (`Tls.CertFile`, ...).
        key: &'static str,
        /// The file.
        file: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM block of the expected kind.
    #[error("{key} {file:?}: {reason}")]
    Pem {
        /// The config key.
        key: &'static str,
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The private key does not belong to the certificate.
    #[error(
        "Tls.KeyFile {key_file:?} does not match the certificate in Tls.CertFile {cert_file:?}"
    )]
    KeyMismatch {
        /// The certificate file.
        cert_file: String,
        /// The key file.
        key_file: String,
    },
    /// The client CA cannot verify clients.
    #[error("Tls.ClientCaFile {file:?}: {reason}")]
    Verifier {
        /// The CA file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// `Tls.AllowedClientsFile` cannot be used.
    #[error("Tls.AllowedClientsFile {file:?}: {reason}")]
    AllowList {
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}
