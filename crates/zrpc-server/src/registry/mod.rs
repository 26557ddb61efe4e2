//! Registration in etcd, in go-zero's layout (`zrpc/internal/rpcpubserver.go`, `core/discov/publisher.go`).
//!
//! A server publishes exactly one key, `Key/<lease id in decimal>` (or `Key/<ID>` when `Etcd.ID` > 0),
//! whose value is the plain `host:port` clients dial; go-zero and zrpc clients discover it alike. The
//! key lives on a lease of 10 seconds (go-zero's `discov.TimeToLive`) that [`Publisher`] renews and
//! heals (see its docs).
//! [`advertise_addr`] decides the `host:port`; unlike go-zero it honours an explicit advertise address.
//!
//! The server calls these in its lifecycle: bind -> serve -> health SERVING -> [`Publisher::spawn`];
//! on shutdown [`Publisher::stop`] (the key is gone at once) before draining.
//!
//! Registration needs the `etcd` cargo feature; without it a config with `Etcd` is refused at
//! load and only [`advertise_addr`] is here (the links above then lead nowhere).
#![cfg_attr(
    not(feature = "etcd"),
    allow(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)
)]

mod advertise;
#[cfg(feature = "etcd")]
mod publisher;

pub use advertise::{POD_IP_ENV, advertise_addr};
#[cfg(feature = "etcd")]
pub use publisher::{Publisher, RegistrationState};

/// Without the `etcd` feature nothing registers, so no publisher ever exists.
#[cfg(not(feature = "etcd"))]
#[derive(Debug)]
pub(crate) enum Publisher {}

#[cfg(not(feature = "etcd"))]
impl Publisher {
    pub(crate) async fn stop(self) {
        match self {}
    }
}

/// Checks the etcd settings of `conf` for what retrying cannot heal (malformed hosts, unreadable
/// TLS files), so the server fails at start; reachability is retried by [`Publisher`].
///
/// # Errors
/// [`crate::Error::Etcd`] naming the host or file.
/// Without the `etcd` feature there is nothing to check: the config's validation refuses
/// `Etcd`, naming the feature.
pub fn check(conf: &crate::conf::RpcServerConf) -> Result<(), crate::Error> {
    #[cfg(feature = "etcd")]
    if conf.etcd.has_etcd() && zrpc_core::conf::feature_on("etcd", true) {
        zrpc_core::etcd::check(&conf.etcd)?;
    }
    #[cfg(not(feature = "etcd"))]
    let _ = conf;
    Ok(())
}

/// Starts the registration of a server bound to `bound` when its config has `Etcd.Hosts` and
/// `Etcd.Key` (the lifecycle calls this once health is SERVING). The published value is
/// [`advertise_addr`]`(ListenOn, bound, AdvertiseAddr)`.
#[cfg(feature = "etcd")]
pub fn register(
    conf: &crate::conf::RpcServerConf,
    bound: std::net::SocketAddr,
) -> Option<Publisher> {
    let (pause, _) = tokio::sync::watch::channel(false);
    let (state, _) = tokio::sync::watch::channel(RegistrationState::NotRegistered);
    register_with(conf, bound, &pause, &state, &std::sync::Arc::default())
}

/// [`register`] paused and resumed by `pause` (the server's handle holds it), its state
/// published on `state`, the time of the lease's last renewal on `renewed` (Unix ms).
#[cfg(feature = "etcd")]
pub(crate) fn register_with(
    conf: &crate::conf::RpcServerConf,
    bound: std::net::SocketAddr,
    pause: &tokio::sync::watch::Sender<bool>,
    state: &tokio::sync::watch::Sender<RegistrationState>,
    renewed: &std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Option<Publisher> {
    if !conf.etcd.has_etcd() {
        return None;
    }
    let value = advertise_addr(&conf.listen_on, bound, conf.advertise_addr.as_deref());
    tracing::info!(target: "zrpc::server", key = %conf.etcd.key, %value, "registering in etcd");
    Some(Publisher::spawn_with(
        conf.etcd.clone(),
        value,
        pause.clone(),
        pause.subscribe(),
        state.clone(),
        std::sync::Arc::clone(renewed),
    ))
}

/// Without the `etcd` feature: nothing to register.
#[cfg(not(feature = "etcd"))]
pub(crate) fn register_with(
    _conf: &crate::conf::RpcServerConf,
    _bound: std::net::SocketAddr,
    _pause: &tokio::sync::watch::Sender<bool>,
) -> Option<Publisher> {
    None
}

#[cfg(all(test, feature = "etcd"))]
mod tests {
    use zrpc_core::conf::EtcdConf;

    use crate::conf::RpcServerConf;

    fn conf(etcd: EtcdConf) -> RpcServerConf {
        let mut c = RpcServerConf::new("check.rpc", "127.0.0.1:0");
        c.etcd = etcd;
        c
    }

    #[test]
    fn config_errors_that_cannot_heal_fail_at_start() {
        let e = crate::Server::new(conf(EtcdConf::new(["etcd-1"], "k")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Etcd.Hosts") && e.contains("etcd-1"), "{e}");
        let mut etcd = EtcdConf::new(["127.0.0.1:2379"], "k");
        etcd.cert_file = "/nonexistent/zrpc-cert.pem".into();
        etcd.cert_key_file = "/nonexistent/zrpc-key.pem".into();
        etcd.ca_cert_file = "/nonexistent/zrpc-ca.pem".into();
        let e = crate::Server::new(conf(etcd)).unwrap_err().to_string();
        assert!(e.contains("zrpc-cert.pem"), "{e}");
        // Reachability is not checked here: it can heal, the publisher retries it.
        crate::Server::new(conf(EtcdConf::new(["127.0.0.1:1"], "k"))).unwrap();
    }
}
