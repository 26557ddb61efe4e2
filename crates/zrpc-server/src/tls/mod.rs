//! Server TLS and mutual TLS on rustls (ring provider only, the one etcd-client's TLS uses),
//! with the `tls` cargo feature.
//!
//! - [`certs`]: PEM loading with errors that name the config key and the file;
//! - [`reload`]: the server certificate behind an `ArcSwap` (rustls `ResolvesServerCert`);
//! - [`config`]: the rustls config for new connections, rebuilt when `ClientCaFile` changes;
//! - [`allow`]: `AllowedClients` and `AllowedClientsFile`, behind an `ArcSwap`, and the
//!   decision whether a client is refused;
//! - [`watch`]: all of them re-read when their files change (polled every
//!   `Tls.ReloadInterval`) and on SIGHUP;
//! - [`ServerTls`] (`setup.rs`): all of them, loaded from the `Tls` block;
//! - [`identity`]: [`PeerIdentity`], the client certificate's subject CN and SANs;
//! - [`linger`]: closing a connection whose handshake failed without losing the alert;
//! - [`plaintext`]: a client that speaks no TLS, named in the log once per address.
//!
//! The transport uses these (the handshake runs in a task per connection under
//! `Transport.HandshakeTimeout`); nothing here depends on the transport. Without the `tls`
//! feature, `off.rs` stands in for `ServerTls`, `config` and `allow` with types that have no
//! value (a `Tls` block is refused at load), and [`PeerIdentity`] and [`TlsError`] stay, as
//! public API.

#[cfg(feature = "tls")]
pub(crate) mod allow;
#[cfg(feature = "tls")]
pub(crate) mod certs;
#[cfg(feature = "tls")]
pub(crate) mod config;
mod error;
pub(crate) mod identity;
#[cfg(feature = "tls")]
pub(crate) mod linger;
#[cfg(not(feature = "tls"))]
mod off;
#[cfg(feature = "tls")]
pub(crate) mod plaintext;
#[cfg(feature = "tls")]
pub(crate) mod reload;
#[cfg(feature = "tls")]
mod setup;
#[cfg(feature = "tls")]
pub(crate) mod watch;

pub use error::TlsError;
pub use identity::PeerIdentity;
#[cfg(not(feature = "tls"))]
pub(crate) use off::{ServerTls, allow, config};
#[cfg(feature = "tls")]
pub(crate) use setup::ServerTls;

/// Stops the file watcher when the server stops.
#[derive(Debug)]
pub(crate) struct WatchGuard(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
