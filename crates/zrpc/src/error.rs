//! [`Error`]: the facade's one error type.

/// Everything that can go wrong in the facade: loading a config, building or running a server,
/// building a client, binding a socket.
///
/// Each variant wraps the error of the crate that failed, with its full message (file, key path,
/// address, target); `?` converts all of them.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A config file could not be read, parsed or validated (names the file and key path).
    #[error(transparent)]
    Conf(#[from] crate::conf::ConfError),
    /// The server could not be built or failed while serving.
    #[error(transparent)]
    Server(#[from] zrpc_server::Error),
    /// The client could not be built.
    #[cfg(feature = "client")]
    #[cfg_attr(docsrs, doc(cfg(feature = "client")))]
    #[error(transparent)]
    Client(#[from] zrpc_client::Error),
    /// An I/O error, e.g. binding a listener yourself for [`Server::serve_with_listener`](crate::Server::serve_with_listener).
    #[error(transparent)]
    Io(#[from] std::io::Error),
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
    use super::Error;
    use crate::conf::{self, Format};

    fn shareable<T: Send + Sync + 'static>() {}

    #[test]
    fn facade_types_are_shareable() {
        shareable::<Error>();
        #[cfg(feature = "client")]
        shareable::<crate::Client>();
        shareable::<crate::ServerHandle>();
    }

    #[test]
    fn conf_errors_keep_their_message() {
        let text = "Name: greeter.rpc\nListenOn: 127.0.0.1:8080\nTimout: 100\n";
        let conf_err =
            conf::from_str::<crate::RpcServerConf>(text, Format::Yaml, "etc/greeter.yaml")
                .unwrap_err();
        let message = conf_err.to_string();
        let err: Error = conf_err.into();
        assert!(matches!(err, Error::Conf(_)));
        assert_eq!(err.to_string(), message);
        assert!(message.contains("Timout"), "{message}");
    }

    #[test]
    fn debug_prints_the_friendly_message() {
        let text = "Name: greeter.rpc\nListenOn: 127.0.0.1:8080\nMiddlewares:\n  Breakr: false\n";
        let conf_err =
            conf::from_str::<crate::RpcServerConf>(text, Format::Yaml, "etc/greeter.yaml")
                .unwrap_err();
        let message = conf_err.to_string();
        assert_eq!(format!("{conf_err:?}"), message);
        let err: Error = conf_err.into();
        assert_eq!(format!("{err:?}"), message);
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert_eq!(format!("{boxed:?}"), message);
        assert!(message.contains("Middlewares.Breakr"), "{message}");
        assert!(!message.contains("UnknownKey"), "{message}");
    }

    #[test]
    fn debug_adds_causes_the_message_lacks() {
        let io = std::io::Error::other("disk on fire");
        let err = Error::Server(zrpc_server::Error::Bind {
            addr: "127.0.0.1:1".into(),
            source: io,
        });
        let debug = format!("{err:?}");
        assert!(debug.starts_with(&err.to_string()), "{debug}");
        assert!(debug.contains("disk on fire"), "{debug}");
    }

    #[cfg(feature = "client")]
    #[tokio::test]
    async fn client_errors_convert() {
        let err = crate::client(crate::RpcClientConf::target("nope:///x"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Client(_)), "{err:?}");
    }
}
