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

/// Starts the registration of a server bound to `bound` when its config has `Etcd.Hosts` and
/// `Etcd.Key` (the lifecycle calls this once health is SERVING). The published value is
/// [`advertise_addr`]`(ListenOn, bound, AdvertiseAddr)`.
pub fn register(
    conf: &crate::conf::RpcServerConf,
    bound: std::net::SocketAddr,
) -> Option<Publisher> {
    if !conf.etcd.has_etcd() {
        return None;
    }
    let value = advertise_addr(&conf.listen_on, bound, conf.advertise_addr.as_deref());
    tracing::info!(target: "zrpc::server", key = %conf.etcd.key, %value, "registering in etcd");
    Some(Publisher::spawn(conf.etcd.clone(), value))
}
