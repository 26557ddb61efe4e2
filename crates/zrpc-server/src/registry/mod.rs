//! Registration in etcd, in go-zero's layout (`zrpc/internal/rpcpubserver.go`, `core/discov/publisher.go`).
//!
//! A server publishes exactly one key, `Key/<lease id in decimal>` (or `Key/<ID>` when `Etcd.ID` > 0),
//! whose value is the plain `host:port` clients dial; go-zero and zrpc clients discover it alike. The
//! key lives on a lease of [`TIME_TO_LIVE`] seconds that [`Publisher`] renews and heals (see its docs).
//! [`advertise_addr`] decides the `host:port`; unlike go-zero it honours an explicit advertise address.
//!
//! The server calls these in its lifecycle: bind -> serve -> health SERVING -> [`Publisher::spawn`];
//! on shutdown [`Publisher::stop`] (the key is gone at once) before draining.

mod advertise;
mod publisher;

pub use advertise::{POD_IP_ENV, advertise_addr};
pub use publisher::{Publisher, RETRY_INTERVAL, RegistrationState, STOP_TIMEOUT, TIME_TO_LIVE};
