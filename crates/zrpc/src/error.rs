//! [`Error`]: the facade's one error type.

/// Everything that can go wrong in the facade: loading a config, building or running a server,
/// building a client, binding a socket.
///
/// Each variant wraps the error of the crate that failed, with its full message (file, key path,
/// address, target); `?` converts all of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A config file could not be read, parsed or validated (names the file and key path).
    #[error(transparent)]
    Conf(#[from] crate::conf::ConfError),
    /// The server could not be built or failed while serving.
    #[error(transparent)]
    Server(#[from] zrpc_server::Error),
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] zrpc_client::Error),
    /// An I/O error, e.g. binding a listener yourself for [`Server::serve_with_listener`](crate::Server::serve_with_listener).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
