//! Shutdown signals and the registration hooks of the lifecycle.

use std::net::SocketAddr;

use crate::conf::RpcServerConf;

/// Resolves on SIGTERM or SIGINT (Ctrl-C elsewhere).
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!(target: "zrpc::server", "got SIGTERM, shutting down..."),
                    _ = int.recv() => tracing::info!(target: "zrpc::server", "got SIGINT, shutting down..."),
                }
            }
            _ => {
                tracing::warn!(target: "zrpc::server", "cannot install signal handlers; using Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Starts the etcd registration (REG's [`Publisher`](crate::registry::Publisher)) once the
/// server serves; `None` without `Etcd.Hosts`/`Etcd.Key`.
pub(crate) fn start_registration(
    conf: &RpcServerConf,
    bound: SocketAddr,
    parts: &crate::handle::HandleParts,
) -> Option<crate::registry::Publisher> {
    #[cfg(feature = "etcd")]
    return crate::registry::register_with(
        conf,
        bound,
        &parts.pause,
        &parts.registration,
        &parts.renewed,
    );
    #[cfg(not(feature = "etcd"))]
    crate::registry::register_with(conf, bound, &parts.pause)
}

/// Deregisters (revokes the lease, bounded time) at the start of shutdown.
pub(crate) async fn stop_registration(publisher: Option<crate::registry::Publisher>) {
    if let Some(p) = publisher {
        // The publisher logs whether etcd confirmed the revoke.
        p.stop().await;
    }
}
